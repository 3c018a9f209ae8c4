//! The Linux kernel's NVMe-oF host, driven as nvme-cli drives it: `connect` writes an option
//! string to /dev/nvme-fabrics and reads back `instance=N,cntlid=M`; controllers and namespaces
//! are listed from sysfs; `delete_controller` disconnects. Sessions made here are the kernel's
//! (block devices /dev/nvmeXnY), unlike `Controller`'s userspace ones.

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

/// The fabrics control device.
pub const FABRICS_DEVICE: &str = "/dev/nvme-fabrics";
/// Where sysfs is mounted (tests point the functions below at a fake tree instead).
pub const SYSFS: &str = "/sys";
/// nvme-cli's host NQN and ID files.
pub const HOSTNQN_FILE: &str = "/etc/nvme/hostnqn";
pub const HOSTID_FILE: &str = "/etc/nvme/hostid";

/// `nvme connect`'s options, as the kernel names them (drivers/nvme/host/fabrics.c).
#[derive(Debug, Clone, Default)]
pub struct KernelConnect {
    pub transport: String,
    pub traddr: String,
    pub trsvcid: Option<String>,
    pub nqn: String,
    pub hostnqn: Option<String>,
    pub hostid: Option<String>,
    pub nr_io_queues: Option<u32>,
    pub queue_size: Option<u32>,
    pub keep_alive_tmo: Option<u32>,
    pub reconnect_delay: Option<u32>,
    pub ctrl_loss_tmo: Option<i32>,
    pub hdr_digest: bool,
    pub data_digest: bool,
    pub host_traddr: Option<String>,
    pub host_iface: Option<String>,
    pub duplicate_connect: bool,
    pub disable_sqflow: bool,
    /// TLS 1.3 (`tls`): the kernel (6.7 on) finds the PSK in its `.nvme` keyring by identity.
    pub tls: bool,
    /// DH-HMAC-CHAP secrets (`dhchap_secret=`, `dhchap_ctrl_secret=`; Debug never shows them).
    pub dhchap_secret: Option<fabrik_proto::auth::Secret>,
    pub dhchap_ctrl_secret: Option<fabrik_proto::auth::Secret>,
}

impl KernelConnect {
    /// The string written to /dev/nvme-fabrics. Values may not contain ',' or '=' (the kernel
    /// splits on them): refused here rather than misparsed there.
    pub fn option_string(&self) -> Result<String, String> {
        let mut parts = Vec::new();
        let mut text = |key: &str, value: &str| -> Result<(), String> {
            if value.is_empty() || value.contains([',', '=', '\n']) {
                return Err(format!(
                    "{key} {value:?}: empty, or contains ',', '=' or a newline"
                ));
            }
            parts.push(format!("{key}={value}"));
            Ok(())
        };
        text("nqn", &self.nqn)?;
        text("transport", &self.transport)?;
        text("traddr", &self.traddr)?;
        if let Some(v) = &self.trsvcid {
            text("trsvcid", v)?;
        }
        if let Some(v) = &self.host_traddr {
            text("host_traddr", v)?;
        }
        if let Some(v) = &self.host_iface {
            text("host_iface", v)?;
        }
        if let Some(v) = &self.hostnqn {
            text("hostnqn", v)?;
        }
        if let Some(v) = &self.hostid {
            text("hostid", v)?;
        }
        // A secret's base64 may end in '=': the kernel takes everything after the key's '='.
        for (key, secret) in [
            ("dhchap_secret", &self.dhchap_secret),
            ("dhchap_ctrl_secret", &self.dhchap_ctrl_secret),
        ] {
            if let Some(s) = secret {
                parts.push(format!("{key}={}", &*s.to_text()));
            }
        }
        for (key, value) in [
            ("nr_io_queues", self.nr_io_queues.map(|v| v as i64)),
            ("queue_size", self.queue_size.map(|v| v as i64)),
            ("keep_alive_tmo", self.keep_alive_tmo.map(|v| v as i64)),
            ("reconnect_delay", self.reconnect_delay.map(|v| v as i64)),
            ("ctrl_loss_tmo", self.ctrl_loss_tmo.map(|v| v as i64)),
        ] {
            if let Some(v) = value {
                parts.push(format!("{key}={v}"));
            }
        }
        for (flag, on) in [
            ("duplicate_connect", self.duplicate_connect),
            ("disable_sqflow", self.disable_sqflow),
            ("hdr_digest", self.hdr_digest),
            ("data_digest", self.data_digest),
            ("tls", self.tls),
        ] {
            if on {
                parts.push(flag.to_string());
            }
        }
        Ok(parts.join(","))
    }
}

/// What the kernel answers a connect with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Connected {
    pub instance: u32,
    pub cntlid: u16,
}

impl Connected {
    /// The controller's name, `nvme<instance>`.
    pub fn device(&self) -> String {
        format!("nvme{}", self.instance)
    }
}

/// Parses `instance=N,cntlid=M` (the order and extra keys do not matter).
pub fn parse_reply(reply: &str) -> Result<Connected, String> {
    let (mut instance, mut cntlid) = (None, None);
    for part in reply.trim().split(',') {
        match part.split_once('=') {
            Some(("instance", v)) => instance = v.trim().parse().ok(),
            Some(("cntlid", v)) => cntlid = v.trim().parse().ok(),
            _ => {}
        }
    }
    match (instance, cntlid) {
        (Some(instance), Some(cntlid)) => Ok(Connected { instance, cntlid }),
        _ => Err(format!("unexpected reply from {FABRICS_DEVICE}: {reply:?}")),
    }
}

/// Asks the kernel to connect (`device`: normally [`FABRICS_DEVICE`]).
pub fn connect(device: &Path, request: &KernelConnect) -> Result<Connected, String> {
    let options = request.option_string()?;
    let mut dev = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(device)
        .map_err(|e| {
            format!(
                "open {}: {e} (is the nvme-fabrics module loaded, and nvme-{} for this transport?)",
                device.display(),
                request.transport
            )
        })?;
    dev.write_all(options.as_bytes()).map_err(|e| {
        format!(
            "the kernel refused the connect ({options}): {} (dmesg says why)",
            errno_text(&e)
        )
    })?;
    let mut reply = String::new();
    dev.read_to_string(&mut reply)
        .map_err(|e| format!("reading the reply of {}: {e}", device.display()))?;
    parse_reply(&reply)
}

fn errno_text(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EINVAL) => {
            format!("{e}: an option is invalid or the subsystem refused the host")
        }
        Some(libc::EALREADY) => format!("{e}: already connected (use duplicate_connect)"),
        Some(libc::ECONNREFUSED) => format!("{e}: nothing listens at that address"),
        Some(libc::EIO) => format!("{e}: the target refused the connection"),
        _ => e.to_string(),
    }
}

/// One kernel NVMe controller, from /sys/class/nvme/nvmeN.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KernelController {
    pub name: String,
    pub transport: String,
    pub address: String,
    pub subsysnqn: String,
    pub cntlid: String,
    pub state: String,
    pub model: String,
    pub serial: String,
    pub firmware_rev: String,
}

/// One kernel NVMe namespace block device (/sys/block/nvmeXnY).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KernelNamespace {
    pub device: String,
    pub nsid: Option<u32>,
    pub subsysnqn: String,
    pub size_bytes: u64,
    pub lba_size: u32,
}

fn attr(dir: &Path, name: &str) -> String {
    fs::read_to_string(dir.join(name))
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn sorted_entries(dir: &Path, keep: impl Fn(&str) -> bool) -> Vec<(String, PathBuf)> {
    let mut out: Vec<(String, PathBuf)> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            keep(&name).then(|| (name, e.path()))
        })
        .collect();
    out.sort_by_key(|(name, _)| natural_key(name));
    out
}

/// nvme2 before nvme10.
fn natural_key(name: &str) -> Vec<(String, u64)> {
    let mut key = Vec::new();
    let mut text = String::new();
    let mut digits = String::new();
    for c in name.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
        } else {
            if !digits.is_empty() {
                key.push((std::mem::take(&mut text), digits.parse().unwrap_or(0)));
                digits.clear();
            }
            text.push(c);
        }
    }
    key.push((text, digits.parse().unwrap_or(0)));
    key
}

/// The controllers under `sysfs`/class/nvme.
pub fn controllers(sysfs: &Path) -> Vec<KernelController> {
    let is_ctrl = |n: &str| {
        n.strip_prefix("nvme")
            .is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit()))
    };
    sorted_entries(&sysfs.join("class/nvme"), is_ctrl)
        .into_iter()
        .map(|(name, dir)| KernelController {
            transport: attr(&dir, "transport"),
            address: attr(&dir, "address"),
            subsysnqn: attr(&dir, "subsysnqn"),
            cntlid: attr(&dir, "cntlid"),
            state: attr(&dir, "state"),
            model: attr(&dir, "model"),
            serial: attr(&dir, "serial"),
            firmware_rev: attr(&dir, "firmware_rev"),
            name,
        })
        .collect()
}

/// One kernel NVMe subsystem (/sys/class/nvme-subsystem/nvme-subsysN) and its paths.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KernelSubsystem {
    pub name: String,
    pub nqn: String,
    /// How the multipath head spreads I/O over the paths (numa, round-robin, queue-depth).
    pub iopolicy: String,
    pub paths: Vec<KernelPath>,
}

/// One controller of a subsystem: a path to its namespaces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KernelPath {
    pub controller: String,
    pub transport: String,
    pub address: String,
    pub state: String,
    /// ANA state of each namespace through this path (NSID, state), as the kernel read it
    /// from the controller's ANA log; empty where the controller reports no ANA.
    pub ana_states: Vec<(u32, String)>,
}

impl KernelPath {
    /// The ANA state of the path's first namespace (as `nvme list-subsys DEVICE` shows one).
    pub fn ana_state(&self) -> Option<&str> {
        self.ana_states.first().map(|(_, s)| s.as_str())
    }
}

fn is_ctrl_name(n: &str) -> bool {
    n.strip_prefix("nvme")
        .is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit()))
}

/// The subsystems under `sysfs`/class/nvme-subsystem, each with its controllers.
pub fn subsystems(sysfs: &Path) -> Vec<KernelSubsystem> {
    let is_subsys = |n: &str| n.starts_with("nvme-subsys");
    sorted_entries(&sysfs.join("class/nvme-subsystem"), is_subsys)
        .into_iter()
        .map(|(name, dir)| KernelSubsystem {
            nqn: attr(&dir, "subsysnqn"),
            iopolicy: attr(&dir, "iopolicy"),
            paths: sorted_entries(&dir, is_ctrl_name)
                .into_iter()
                .map(|(controller, ctrl)| {
                    // The hidden per-path namespace devices (nvmeXcYnZ) carry ana_state.
                    let is_path_ns = |n: &str| n.starts_with("nvme") && n[4..].contains('c');
                    let mut ana_states: Vec<(u32, String)> = sorted_entries(&ctrl, is_path_ns)
                        .into_iter()
                        .filter_map(|(_, ns)| {
                            let state = attr(&ns, "ana_state");
                            let nsid = attr(&ns, "nsid").parse().ok()?;
                            (!state.is_empty()).then_some((nsid, state))
                        })
                        .collect();
                    ana_states.sort();
                    KernelPath {
                        transport: attr(&ctrl, "transport"),
                        address: attr(&ctrl, "address"),
                        state: attr(&ctrl, "state"),
                        ana_states,
                        controller,
                    }
                })
                .collect(),
            name,
        })
        .collect()
}

/// The namespace block devices under `sysfs`/block (the multipath heads, not the hidden
/// per-path nvmeXcYnZ devices).
pub fn namespaces(sysfs: &Path) -> Vec<KernelNamespace> {
    let is_ns = |n: &str| {
        n.starts_with("nvme") && n.contains('n') && !n[4..].contains('c') && n[4..].contains('n')
    };
    sorted_entries(&sysfs.join("block"), is_ns)
        .into_iter()
        .map(|(device, dir)| {
            let sectors: u64 = attr(&dir, "size").parse().unwrap_or(0);
            KernelNamespace {
                nsid: attr(&dir, "nsid").parse().ok(),
                // The head's device is the nvme-subsystem, a path's its controller: both have it.
                subsysnqn: attr(&dir.join("device"), "subsysnqn"),
                size_bytes: sectors * 512,
                lba_size: attr(&dir, "queue/logical_block_size").parse().unwrap_or(0),
                device,
            }
        })
        .collect()
}

/// Disconnects controller `name` (nvmeN) by writing its delete_controller attribute.
pub fn delete_controller(sysfs: &Path, name: &str) -> Result<(), String> {
    if !name
        .strip_prefix("nvme")
        .is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(format!("{name:?} is not a controller name (nvmeN)"));
    }
    let path = sysfs
        .join("class/nvme")
        .join(name)
        .join("delete_controller");
    fs::write(&path, "1").map_err(|e| format!("{}: {e}", path.display()))
}

/// nvme-cli's host NQN and ID (/etc/nvme/hostnqn, /etc/nvme/hostid), when the files exist.
pub fn default_host() -> (Option<String>, Option<String>) {
    let read = |p: &str| {
        fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    };
    (read(HOSTNQN_FILE), read(HOSTID_FILE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn option_string_is_what_nvme_cli_writes() {
        let request = KernelConnect {
            transport: "tcp".into(),
            traddr: "10.0.0.2".into(),
            trsvcid: Some("4420".into()),
            nqn: "nqn.2024-01.io.fabrik:box:drive-00".into(),
            hostnqn: Some("nqn.2014-08.org.nvmexpress:uuid:1".into()),
            nr_io_queues: Some(4),
            keep_alive_tmo: Some(5),
            ctrl_loss_tmo: Some(-1),
            hdr_digest: true,
            host_iface: Some("eth0".into()),
            ..KernelConnect::default()
        };
        assert_eq!(
            request.option_string().unwrap(),
            "nqn=nqn.2024-01.io.fabrik:box:drive-00,transport=tcp,traddr=10.0.0.2,trsvcid=4420,\
             host_iface=eth0,hostnqn=nqn.2014-08.org.nvmexpress:uuid:1,nr_io_queues=4,\
             keep_alive_tmo=5,ctrl_loss_tmo=-1,hdr_digest"
        );
        // A SHA-384-sized key's text ends its base64 with '=': passed as it is.
        let secret = fabrik_proto::auth::Secret::new(2, &[7; 48]).unwrap();
        let text = secret.to_text().to_string();
        assert!(text.ends_with("=:"), "{text}");
        let with_key = KernelConnect {
            dhchap_secret: Some(secret),
            ..request.clone()
        };
        let opts = with_key.option_string().unwrap();
        assert!(opts.contains(&format!(",dhchap_secret={text},")), "{opts}");
        assert!(!format!("{with_key:?}").contains(&text[10..30]));
        let bad = KernelConnect {
            traddr: "1.2.3.4,nr_io_queues=99".into(),
            ..request
        };
        assert!(bad.option_string().unwrap_err().contains("traddr"));
    }

    #[test]
    fn replies_parse() {
        assert_eq!(
            parse_reply("instance=3,cntlid=17\n"),
            Ok(Connected {
                instance: 3,
                cntlid: 17
            })
        );
        assert_eq!(
            parse_reply("cntlid=1,instance=0").unwrap().device(),
            "nvme0"
        );
        assert!(parse_reply("instance=x").is_err());
    }

    #[test]
    fn sysfs_is_read_as_the_kernel_lays_it_out() {
        let root = std::env::temp_dir().join(format!("fabrik-sysfs-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let put = |path: &str, value: &str| {
            let p = root.join(path);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, format!("{value}\n")).unwrap();
        };
        for (n, nqn) in [(10, "nqn.b"), (2, "nqn.a")] {
            let c = format!("class/nvme/nvme{n}");
            put(&format!("{c}/transport"), "tcp");
            put(&format!("{c}/address"), "traddr=127.0.0.1,trsvcid=4420");
            put(&format!("{c}/subsysnqn"), nqn);
            put(&format!("{c}/cntlid"), "1");
            put(&format!("{c}/state"), "live");
            put(&format!("{c}/delete_controller"), "");
        }
        put("class/nvme/nvme-fabrics/dev", "10:123");
        put("block/nvme2n1/size", "2048");
        put("block/nvme2n1/nsid", "1");
        put("block/nvme2n1/queue/logical_block_size", "4096");
        put("block/nvme2n1/device/subsysnqn", "nqn.a");
        put("block/nvme2c2n1/size", "2048");
        put("block/sda/size", "1");

        let ctrls = controllers(&root);
        let names: Vec<_> = ctrls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["nvme2", "nvme10"]);
        assert_eq!(ctrls[0].subsysnqn, "nqn.a");
        assert_eq!(ctrls[1].address, "traddr=127.0.0.1,trsvcid=4420");
        let ns = namespaces(&root);
        assert_eq!(
            ns,
            [KernelNamespace {
                device: "nvme2n1".into(),
                nsid: Some(1),
                subsysnqn: "nqn.a".into(),
                size_bytes: 1 << 20,
                lba_size: 4096,
            }]
        );
        delete_controller(&root, "nvme10").unwrap();
        assert_eq!(
            attr(&root.join("class/nvme/nvme10"), "delete_controller"),
            "1"
        );
        assert!(delete_controller(&root, "../x").is_err());
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn subsystems_list_their_paths_with_ana_states() {
        let root = std::env::temp_dir().join(format!("fabrik-subsys-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let put = |path: &str, value: &str| {
            let p = root.join(path);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, format!("{value}\n")).unwrap();
        };
        let s = "class/nvme-subsystem/nvme-subsys0";
        put(&format!("{s}/subsysnqn"), "nqn.a");
        put(&format!("{s}/iopolicy"), "numa");
        for (n, port, state, ana) in [
            (1, 4421, "live", "non-optimized"),
            (0, 4420, "connecting", "optimized"),
        ] {
            let c = format!("class/nvme/nvme{n}");
            put(&format!("{c}/transport"), "tcp");
            put(
                &format!("{c}/address"),
                &format!("traddr=127.0.0.1,trsvcid={port}"),
            );
            put(&format!("{c}/state"), state);
            put(&format!("{c}/nvme0c{n}n1/ana_state"), ana);
            put(&format!("{c}/nvme0c{n}n1/nsid"), "1");
            // The subsystem links to its controllers, as sysfs does.
            std::os::unix::fs::symlink(root.join(&c), root.join(format!("{s}/nvme{n}"))).unwrap();
        }
        put(&format!("{s}/nvme0n1/nsid"), "1"); // the head: not a path
        let subs = subsystems(&root);
        assert_eq!(subs.len(), 1);
        assert_eq!(
            (subs[0].nqn.as_str(), subs[0].iopolicy.as_str()),
            ("nqn.a", "numa")
        );
        let paths: Vec<(&str, &str, Option<&str>)> = (subs[0].paths.iter())
            .map(|p| (p.controller.as_str(), p.state.as_str(), p.ana_state()))
            .collect();
        assert_eq!(
            paths,
            [
                ("nvme0", "connecting", Some("optimized")),
                ("nvme1", "live", Some("non-optimized"))
            ]
        );
        assert_eq!(subs[0].paths[1].address, "traddr=127.0.0.1,trsvcid=4421");
        fs::remove_dir_all(&root).unwrap();
    }
}
