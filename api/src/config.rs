//! The `fabrikd` configuration file (TOML). Every field is optional: what is absent takes the
//! embedded default (a 24-drive JBOF of sparse files, NVMe/TCP on 127.0.0.1:4420, any host).
//!
//! ```toml
//! box_name = "jbof-a"                 # names the NQNs: nqn.2024-01.io.fabrik:<box_name>:drive-07
//! data_dir = "/var/lib/fabrik"        # state and drive files
//! listen = ["127.0.0.1:4420"]         # listeners: ADDR:PORT or tcp:ADDR:PORT (NVMe/TCP), rdma:ADDR:PORT
//! hosts = ["nqn.2014-08.org.nvmexpress:uuid:..."]   # absent or empty: any host
//! api = "127.0.0.1:8080"              # management REST API; "off" disables it
//! api_token = "..."                   # default: generated into <data_dir>/api-token (0600)
//!
//! [drives]                            # the generated drives 00..count-1
//! count = 24
//! size = "64G"
//! backend = "file"                    # file | block | ram | null
//! block_size = 4096
//!
//! [[drive]]                           # explicit drives replace the generated ones
//! id = "nvme0"
//! backend = "block"
//! path = "/dev/nvme0n1"
//!
//! [[subsystem]]                       # explicit subsystems replace one-per-drive
//! name = "scratch"                    # NQN nqn.2024-01.io.fabrik:<box_name>:scratch
//! drives = ["nvme0", "nvme1"]         # namespaces 1, 2, ... in this order
//! hosts = ["nqn.2014-08.org.nvmexpress:uuid:..."]   # absent: the top-level list; []: any
//! ```

use std::path::{Path, PathBuf};

use serde::Deserialize;

#[derive(Debug, Default, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    pub box_name: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub listen: Option<Vec<String>>,
    pub hosts: Option<Vec<String>>,
    pub api: Option<String>,
    pub api_token: Option<String>,
    /// HTTPS for the management API's TCP address: its certificate chain and key (PEM).
    pub api_tls_cert: Option<PathBuf>,
    pub api_tls_key: Option<PathBuf>,
    /// The CA (PEM) that signed the other I/O module's API certificate (`peer = "https://..."`).
    pub peer_ca: Option<PathBuf>,
    /// TLS 1.3 for NVMe/TCP: the configured PSKs (`NVMeTLSkey-1:` lines, each optionally after
    /// a host NQN; mode 0600).
    pub tls_psk: Option<PathBuf>,
    /// TLS on the `listen` NVMe/TCP ports: "required" (the default with `tls_psk`), "allowed"
    /// or "none".
    pub tls: Option<String>,
    /// How the PSKs' HKDF labels are laid out, as the hosts' libnvme does: "rfc8446" (1.16 on,
    /// the default), "compat" (1.7 to 1.15), "nolength" (1.4 to 1.6).
    pub tls_psk_label: Option<String>,
    /// Cores for the I/O reactors, as `taskset -c` writes them: "0-3,8".
    pub cores: Option<String>,
    /// Microseconds a busy reactor keeps polling after its last event before it sleeps (default
    /// 20; 0: it sleeps between events).
    pub poll_idle_us: Option<u64>,
    /// NVMe/TCP: end a successful read with its last C2HData PDU (SUCCESS flag) instead of a
    /// response capsule, for every host (default false: only for hosts that disabled SQ flow
    /// control, as the NVMe/TCP specification allows).
    pub c2h_success: Option<bool>,
    /// Which of the box's two I/O modules this is: "a" or "b" (absent: the box has one).
    pub module: Option<String>,
    /// Where generated file drives live (default: `<data_dir>/drives`); the two modules of a
    /// box give the same one.
    pub drive_dir: Option<PathBuf>,
    /// The other I/O module's management API, `http://ADDR:PORT`: every change of the
    /// configuration the two share is made on both.
    pub peer: Option<String>,
    /// Its token (default: this module's own `api_token`).
    pub peer_token: Option<String>,
    /// "box" (the default) or "cdc": a central discovery controller, which serves no drives.
    pub role: Option<String>,
    /// The central discovery controller to register this box with, `ADDR:PORT`.
    pub cdc: Option<String>,
    /// Announce the discovery controller over mDNS (`_nvme-disc._tcp`).
    pub mdns: Option<bool>,
    pub drives: Option<GeneratedDrives>,
    #[serde(default, rename = "drive")]
    pub drive: Vec<DriveEntry>,
    #[serde(default, rename = "subsystem")]
    pub subsystem: Vec<SubsystemEntry>,
    /// Hosts with their DH-HMAC-CHAP keys (`[[host]]`): registered at every start, their keys
    /// replacing those the state holds. Keep such a file private (0600).
    #[serde(default, rename = "host")]
    pub host: Vec<HostEntry>,
    /// Clients of the management API with tokens of their own (`[[api_client]]`).
    #[serde(default, rename = "api_client")]
    pub api_client: Vec<ApiClientEntry>,
}

/// A client of the management API: its name (in the audit log), its token (16 characters or
/// more) and what it may do ("admin", or "read": GET only).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ApiClientEntry {
    pub name: String,
    pub token: String,
    pub scope: crate::access::Scope,
}

/// A host of the config file.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HostEntry {
    pub nqn: String,
    pub name: Option<String>,
    /// `DHHC-1:..`: the host must authenticate with it.
    pub dhchap_secret: Option<String>,
    /// The controller's secret (bidirectional authentication).
    pub dhchap_ctrl_secret: Option<String>,
    /// "sha256", "sha384" or "sha512": the one hash function it must use.
    pub dhchap_hash: Option<String>,
    /// "null", "ffdhe2048" .. "ffdhe8192": the one DH group it must use.
    pub dhchap_dhgroup: Option<String>,
    /// Its I/O limits (`[host.qos]`, as `PUT /hosts/{nqn}/qos` takes them).
    pub qos: Option<crate::models::QosLimits>,
}

#[derive(Debug, Default, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GeneratedDrives {
    pub count: Option<u32>,
    pub size: Option<String>,
    pub backend: Option<String>,
    pub block_size: Option<u32>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DriveEntry {
    pub id: String,
    pub backend: Option<String>,
    pub path: Option<PathBuf>,
    pub size: Option<String>,
    pub block_size: Option<u32>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SubsystemEntry {
    /// Last part of the NQN; or give the whole `nqn`.
    pub name: Option<String>,
    pub nqn: Option<String>,
    pub drives: Vec<String>,
    pub hosts: Option<Vec<String>>,
    pub model: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
}

impl ConfigFile {
    pub fn load(path: &Path) -> Result<ConfigFile, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        ConfigFile::parse(&text).map_err(|message| ConfigError::Parse {
            path: path.to_path_buf(),
            message,
        })
    }

    pub fn parse(text: &str) -> Result<ConfigFile, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }
}

/// Parses a size such as `4096`, `512K`, `64G`, `1.5T` or `64GiB` (binary units).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("invalid size {s:?}: expected a number with an optional unit"))?;
    let shift = match unit
        .trim()
        .to_ascii_uppercase()
        .trim_end_matches("IB")
        .trim_end_matches('B')
    {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        "P" => 50,
        other => {
            return Err(format!(
                "invalid size {s:?}: unknown unit {other:?} (use K, M, G, T)"
            ))
        }
    };
    let bytes = value * (1u64 << shift) as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(format!("invalid size {s:?}: out of range"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("64G").unwrap(), 64 << 30);
        assert_eq!(parse_size("64GiB").unwrap(), 64 << 30);
        assert_eq!(parse_size("1.5k").unwrap(), 1536);
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("").is_err());
    }

    #[test]
    fn full_file_parses_and_unknown_keys_are_refused() {
        let c = ConfigFile::parse(
            r#"
            box_name = "jbof-a"
            listen = ["127.0.0.1:4420"]
            hosts = ["nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001"]
            [drives]
            count = 4
            size = "1G"
            backend = "ram"
            [[drive]]
            id = "nvme0"
            backend = "block"
            path = "/dev/nvme0n1"
            [[subsystem]]
            name = "scratch"
            drives = ["nvme0"]
            "#,
        )
        .unwrap();
        assert_eq!(c.box_name.as_deref(), Some("jbof-a"));
        assert_eq!(c.drives.unwrap().count, Some(4));
        assert_eq!(c.drive[0].path.as_deref(), Some(Path::new("/dev/nvme0n1")));
        assert_eq!(c.subsystem[0].drives, vec!["nvme0".to_string()]);
        let err = ConfigFile::parse("bogus = 1").unwrap_err();
        assert!(err.contains("bogus"), "{err}");
    }
}
