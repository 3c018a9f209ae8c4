//! What the node plugin reads and does on its host: the kernel's NVMe subsystems and block
//! devices in sysfs, the mount table, what a device holds, and the commands it runs (nvme-cli,
//! mkfs, blockdev). Mounts are made with the mount syscalls directly: no mount(8) whose flavour
//! (util-linux, busybox) changes what a flag means. Functions taking a sysfs root are tested
//! over a tree made in a temporary directory.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// A namespace block device of subsystem `nqn` (its NVMe volume): `/dev/nvmeXnY`, with the
/// NGUID or UUID given, found in `sys/block`. The subsystem is checked too, so a stale or wrong
/// publish context never hands over another volume's device. Multipath path devices
/// (`nvmeXcYnZ`) are passed over: the head is the one to use.
pub fn find_device(sys: &Path, nqn: &str, nguid: &str, uuid: &str) -> Option<PathBuf> {
    let wanted: Vec<String> = [nguid, uuid]
        .iter()
        .map(|s| norm_id(s))
        .filter(|s| !s.is_empty() && s.chars().any(|c| c != '0'))
        .collect();
    if wanted.is_empty() {
        return None;
    }
    namespace_heads(sys).into_iter().find_map(|name| {
        let dir = sys.join("block").join(&name);
        let ids = ["nguid", "uuid", "wwid"]
            .iter()
            .filter_map(|f| std::fs::read_to_string(dir.join(f)).ok())
            .map(|s| {
                norm_id(
                    s.trim()
                        .trim_start_matches("eui.")
                        .trim_start_matches("uuid."),
                )
            })
            .collect::<Vec<_>>();
        let ours = read_trimmed(&dir.join("device/subsysnqn")).is_some_and(|s| s == nqn);
        (ours && ids.iter().any(|id| wanted.contains(id)))
            .then(|| PathBuf::from("/dev").join(&name))
    })
}

/// Block devices of subsystem `nqn`: (name, "major:minor").
pub fn devices_of(sys: &Path, nqn: &str) -> Vec<(String, String)> {
    namespace_heads(sys)
        .into_iter()
        .filter(|n| {
            read_trimmed(&sys.join("block").join(n).join("device/subsysnqn"))
                .is_some_and(|s| s == nqn)
        })
        .filter_map(|n| {
            let dev = read_trimmed(&sys.join("block").join(&n).join("dev"))?;
            Some((n, dev))
        })
        .collect()
}

/// The subsystem NQN of block device `major:minor`, if it is an NVMe namespace.
pub fn subsystem_of_dev(sys: &Path, major: u32, minor: u32) -> Option<String> {
    read_trimmed(&sys.join(format!("dev/block/{major}:{minor}/device/subsysnqn")))
}

fn read_trimmed(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

fn norm_id(s: &str) -> String {
    s.trim()
        .chars()
        .filter(|c| *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

fn namespace_heads(sys: &Path) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(sys.join("block")) else {
        return Vec::new();
    };
    let mut names: Vec<String> = dir
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| is_namespace_head(n))
        .collect();
    names.sort();
    names
}

/// `nvme<N>n<M>`, not `nvme<N>c<C>n<M>` (a path under a multipath head) nor a partition.
fn is_namespace_head(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("nvme") else {
        return false;
    };
    let Some((ctrl, ns)) = rest.split_once('n') else {
        return false;
    };
    !ctrl.is_empty()
        && ctrl.bytes().all(|b| b.is_ascii_digit())
        && !ns.is_empty()
        && ns.bytes().all(|b| b.is_ascii_digit())
}

/// Whether the host has a live (or reconnecting) controller of subsystem `nqn`: a subsystem
/// whose controllers are all gone needs a connect again.
pub fn subsystem_live(sys: &Path, nqn: &str) -> bool {
    let Ok(dir) = std::fs::read_dir(sys.join("class/nvme-subsystem")) else {
        return false;
    };
    dir.filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| read_trimmed(&p.join("subsysnqn")).is_some_and(|s| s == nqn))
        .any(|p| {
            let Ok(ctrls) = std::fs::read_dir(&p) else {
                return false;
            };
            ctrls.filter_map(|e| e.ok()).any(|c| {
                let name = c.file_name().to_string_lossy().into_owned();
                is_controller(&name)
                    && read_trimmed(&c.path().join("state")).is_some_and(|s| {
                        matches!(s.as_str(), "live" | "connecting" | "resetting" | "new")
                    })
            })
        })
}

/// `nvme<N>`: a controller.
fn is_controller(name: &str) -> bool {
    name.strip_prefix("nvme")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Whether a subsystem with this NQN is there at all (connected, or its controllers going).
pub fn subsystem_present(sys: &Path, nqn: &str) -> bool {
    let Ok(dir) = std::fs::read_dir(sys.join("class/nvme-subsystem")) else {
        return false;
    };
    dir.filter_map(|e| e.ok())
        .any(|e| read_trimmed(&e.path().join("subsysnqn")).is_some_and(|s| s == nqn))
}

/// One line of mountinfo: the device ("major:minor"), the root within it, the mount point.
pub struct Mount {
    pub dev: String,
    pub root: String,
    pub point: PathBuf,
    pub fs: String,
}

/// The mounts of a mountinfo text (`/proc/self/mountinfo`), paths unescaped.
pub fn mounts(mountinfo: &str) -> Vec<Mount> {
    mountinfo
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let sep = f.iter().position(|x| *x == "-")?;
            Some(Mount {
                dev: f.get(2)?.to_string(),
                root: unescape(f.get(3)?),
                point: PathBuf::from(unescape(f.get(4)?)),
                fs: f.get(sep + 1)?.to_string(),
            })
        })
        .collect()
}

/// mountinfo writes space, tab, newline and backslash as `\ooo`.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let code = (b[i] == b'\\' && i + 3 < b.len())
            .then(|| std::str::from_utf8(&b[i + 1..i + 4]).ok())
            .flatten()
            .and_then(|o| u8::from_str_radix(o, 8).ok());
        match code {
            Some(c) => {
                out.push(c);
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The mount table now; unreadable is an error (never taken for "nothing mounted").
pub fn mount_table() -> std::io::Result<Vec<Mount>> {
    Ok(mounts(&std::fs::read_to_string("/proc/self/mountinfo")?))
}

/// Whether `path` is a mount point now.
pub fn is_mount_point(path: &Path) -> std::io::Result<bool> {
    let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    Ok(mount_table()?
        .iter()
        .any(|m| m.point == path || m.point == canonical))
}

/// Where block device `name` ("major:minor" `dev`) is in use: mounted (a filesystem on it, or
/// its device node bind-mounted from devtmpfs), or held by another block device (dm, md).
pub fn uses_of(sys: &Path, table: &[Mount], name: &str, dev: &str) -> Vec<String> {
    let mut uses: Vec<String> = table
        .iter()
        .filter(|m| m.dev == dev || (m.fs == "devtmpfs" && m.root == format!("/{name}")))
        .map(|m| format!("mounted at {}", m.point.display()))
        .collect();
    if let Ok(holders) = std::fs::read_dir(sys.join("block").join(name).join("holders")) {
        uses.extend(
            holders
                .filter_map(|h| h.ok())
                .map(|h| format!("held by {}", h.file_name().to_string_lossy())),
        );
    }
    uses
}

/// What a device holds at its start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Holds {
    /// Zeros: a new volume, to be formatted.
    Nothing,
    Filesystem(&'static str),
    /// Something else (a partition table, another filesystem): never formatted over.
    Unknown,
}

/// Reads the head of a device: ext2/3/4 (magic 0xEF53 at 1080) or XFS ("XFSB" at 0), all
/// zeros, or something else.
pub fn probe(head: &[u8]) -> Holds {
    if head.len() >= 4 && &head[..4] == b"XFSB" {
        return Holds::Filesystem("xfs");
    }
    if head.len() >= 1082 && head[1080..1082] == [0x53, 0xEF] {
        return Holds::Filesystem("ext4");
    }
    if head.iter().all(|b| *b == 0) {
        Holds::Nothing
    } else {
        Holds::Unknown
    }
}

/// The first MiB of `dev` (less if it is smaller): where filesystems and partition tables keep
/// their marks (btrfs at 64 KiB among them).
pub fn read_head(dev: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut head = Vec::new();
    std::fs::File::open(dev)?
        .take(1 << 20)
        .read_to_end(&mut head)?;
    Ok(head)
}

/// Runs `cmd args` within `limit` (killed past it), or one line saying what failed.
pub async fn run(cmd: &str, args: &[&str], limit: Duration) -> Result<(), String> {
    let what = format!("{cmd} {}", args.join(" "));
    tracing::info!(command = %what, "running");
    let child = tokio::process::Command::new(cmd)
        .args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(limit, child)
        .await
        .map_err(|_| format!("{what}: no answer within {} s", limit.as_secs()))?
        .map_err(|e| format!("{what}: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    Err(format!("{what}: {} {}", out.status, line.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(root: &Path, rel: &str, text: &str) {
        let f = root.join(rel);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, text).unwrap();
    }

    #[test]
    fn namespaces_are_found_by_id_within_their_subsystem() {
        let dir = tempfile::tempdir().unwrap();
        let sys = dir.path();
        let ours = "nqn.2024-01.io.fabrik:a:vol-csi-1";
        put(
            sys,
            "block/nvme0n1/nguid",
            "11111111-2222-3333-4444-555555555555\n",
        );
        put(
            sys,
            "block/nvme0n1/device/subsysnqn",
            "nqn.2024-01.io.fabrik:a:vol-csi-0\n",
        );
        put(
            sys,
            "block/nvme1c1n1/nguid",
            "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee\n",
        );
        put(sys, "block/nvme1c1n1/device/subsysnqn", ours);
        put(
            sys,
            "block/nvme1n1/nguid",
            "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee\n",
        );
        put(sys, "block/nvme1n1/device/subsysnqn", ours);
        put(sys, "block/nvme1n1/dev", "259:3\n");
        put(
            sys,
            "block/nvme2n1/uuid",
            "0b1c2d3e-0000-4000-8000-000000000001\n",
        );
        put(sys, "block/nvme2n1/device/subsysnqn", ours);
        put(
            sys,
            "block/nvme2n1p1/uuid",
            "0b1c2d3e-0000-4000-8000-000000000001\n",
        );
        let find = |nguid: &str, uuid: &str| find_device(sys, ours, nguid, uuid);
        assert_eq!(
            find("AAAAAAAABBBBCCCCDDDDEEEEEEEEEEEE", ""),
            Some(PathBuf::from("/dev/nvme1n1"))
        );
        assert_eq!(
            find("", "0b1c2d3e-0000-4000-8000-000000000001"),
            Some(PathBuf::from("/dev/nvme2n1"))
        );
        // Another volume's namespace, though its NGUID is asked for.
        assert_eq!(find("11111111222233334444555555555555", ""), None);
        assert_eq!(find("00000000000000000000000000000000", ""), None);
        assert_eq!(
            devices_of(sys, ours),
            [("nvme1n1".to_string(), "259:3".to_string())]
        );
    }

    #[test]
    fn subsystems_are_live_only_with_a_live_controller() {
        let dir = tempfile::tempdir().unwrap();
        let sys = dir.path();
        let nqn = "nqn.2024-01.io.fabrik:a:vol-x";
        put(
            sys,
            "class/nvme-subsystem/nvme-subsys3/subsysnqn",
            &format!("{nqn}\n"),
        );
        assert!(subsystem_present(sys, nqn));
        assert!(!subsystem_live(sys, nqn), "no controller");
        put(
            sys,
            "class/nvme-subsystem/nvme-subsys3/nvme4/state",
            "deleting\n",
        );
        assert!(!subsystem_live(sys, nqn));
        put(
            sys,
            "class/nvme-subsystem/nvme-subsys3/nvme5/state",
            "live\n",
        );
        assert!(subsystem_live(sys, nqn));
        assert!(!subsystem_present(sys, "nqn.2024-01.io.fabrik:a:vol-y"));
        assert!(!subsystem_live(&sys.join("none"), nqn));
    }

    #[test]
    fn mountinfo_is_parsed_and_uses_are_found() {
        let info = "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n\
                    35 22 259:3 / /var/lib/kubelet/pods/a\\040b/mount rw - ext4 /dev/nvme1n1 rw\n\
                    36 22 0:5 /nvme1n1 /var/lib/kubelet/pods/c/dev rw - devtmpfs udev rw\n";
        let points: Vec<PathBuf> = mounts(info).into_iter().map(|m| m.point).collect();
        assert_eq!(
            points,
            [
                PathBuf::from("/"),
                PathBuf::from("/var/lib/kubelet/pods/a b/mount"),
                PathBuf::from("/var/lib/kubelet/pods/c/dev"),
            ]
        );
        let dir = tempfile::tempdir().unwrap();
        put(dir.path(), "block/nvme1n1/holders/dm-0", "");
        let uses = uses_of(dir.path(), &mounts(info), "nvme1n1", "259:3");
        assert_eq!(uses.len(), 3, "{uses:?}");
        assert!(
            uses[1].contains("pods/c/dev") && uses[2].contains("dm-0"),
            "{uses:?}"
        );
        assert!(uses_of(dir.path(), &mounts(info), "nvme2n1", "259:9").is_empty());
    }

    #[test]
    fn heads_are_told_apart() {
        let mut head = vec![0u8; 4096];
        assert_eq!(probe(&head), Holds::Nothing);
        head[1080] = 0x53;
        head[1081] = 0xEF;
        assert_eq!(probe(&head), Holds::Filesystem("ext4"));
        let mut xfs = vec![0u8; 4096];
        xfs[..4].copy_from_slice(b"XFSB");
        assert_eq!(probe(&xfs), Holds::Filesystem("xfs"));
        let mut gpt = vec![0u8; 4096];
        gpt[512..520].copy_from_slice(b"EFI PART");
        assert_eq!(probe(&gpt), Holds::Unknown);
    }
}
