//! What the box offers: its ports and drives, from a file, its REST API (later) or discovery.

use fabrik_proto::fabrics::discovery::{subtype, trtype, DiscoveryLogEntry};
use serde::{Deserialize, Serialize};

/// NVMe-oF transport of a target port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    Tcp,
    Rdma,
}

impl Transport {
    pub fn as_str(&self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Rdma => "rdma",
        }
    }
}

/// A port of the box (fabrikd listener).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TargetPort {
    pub trtype: Transport,
    pub traddr: String,
    #[serde(default = "default_trsvcid")]
    pub trsvcid: u16,
}

fn default_trsvcid() -> u16 {
    4420
}

/// A drive of the box, exported as one subsystem.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Drive {
    pub nqn: String,
    /// Sequential read throughput in GB/s, when known.
    #[serde(default)]
    pub gbytes_per_sec: Option<f64>,
}

/// What the box offers (later from its REST API or discovery).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BoxInventory {
    pub ports: Vec<TargetPort>,
    pub drives: Vec<Drive>,
}

impl BoxInventory {
    /// Ports and drives from a discovery log: every NVM subsystem entry of a transport the
    /// host can use; each subsystem is one drive, each distinct address one port.
    pub fn from_discovery(entries: &[DiscoveryLogEntry]) -> BoxInventory {
        let mut inv = BoxInventory::default();
        for e in entries.iter().filter(|e| e.subtype == subtype::NVM) {
            let trtype = match e.trtype {
                trtype::TCP => Transport::Tcp,
                trtype::RDMA => Transport::Rdma,
                _ => continue,
            };
            let Ok(trsvcid) = e.trsvcid.trim().parse::<u16>() else {
                continue;
            };
            let port = TargetPort {
                trtype,
                traddr: e.traddr.trim().to_string(),
                trsvcid,
            };
            if !inv.ports.contains(&port) {
                inv.ports.push(port);
            }
            if !inv.drives.iter().any(|d| d.nqn == e.subnqn) {
                inv.drives.push(Drive {
                    nqn: e.subnqn.clone(),
                    gbytes_per_sec: None,
                });
            }
        }
        inv
    }
}
