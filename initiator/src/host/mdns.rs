//! Finding NVMe-oF discovery controllers announced over mDNS (`_nvme-disc._tcp`, TP8009), as
//! nvme-stas does: a box's or a central discovery controller's address and port, without being
//! told either.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use fabrik_proto::fabrics::nqn::DISCOVERY_NQN;
use fabrik_proto::fabrics::Transport;
use mdns_sd::{IfKind, ServiceDaemon, ServiceEvent};
use serde::Serialize;

use crate::error::HostError;

/// The DNS-SD service type of NVMe-oF discovery controllers.
pub const SERVICE_TYPE: &str = "_nvme-disc._tcp.local.";

/// A discovery controller found over mDNS.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Announced {
    /// The instance name (`<box>` or `<box>-cdc` for fabrikd).
    pub instance: String,
    /// Where it answers: each address of the announcement, at its port.
    pub addrs: Vec<SocketAddr>,
    /// TXT `p`: tcp, or rdma for roce/iwarp/rdma (None: a value nvme-stas would ignore too).
    pub transport: Option<Transport>,
    /// TXT `nqn` (or `NQN`): the discovery NQN when absent.
    pub nqn: String,
    /// TXT `role` (fabrikd's): "box" or "cdc".
    pub role: Option<String>,
}

/// Browses for `wait`, on loopback only with `loopback_only` (else on every interface), and
/// returns what was found, sorted by instance name.
pub fn browse(wait: Duration, loopback_only: bool) -> Result<Vec<Announced>, HostError> {
    let mdns = |e: mdns_sd::Error| HostError::Invalid(format!("mDNS: {e}"));
    let daemon = ServiceDaemon::new().map_err(mdns)?;
    if loopback_only {
        daemon.disable_interface(IfKind::All).map_err(mdns)?;
        daemon
            .enable_interface(vec![IfKind::LoopbackV4, IfKind::LoopbackV6])
            .map_err(mdns)?;
    }
    let events = daemon.browse(SERVICE_TYPE).map_err(mdns)?;
    // By instance: a service resolved again replaces what it said before.
    let mut found = std::collections::BTreeMap::new();
    let end = Instant::now() + wait;
    while let Some(left) = end.checked_duration_since(Instant::now()) {
        let Ok(event) = events.recv_timeout(left) else {
            break;
        };
        if let ServiceEvent::ServiceResolved(r) = event {
            // mdns-sd looks TXT keys up regardless of case (`nqn` finds older nvme-stas's `NQN`).
            let txt = |k: &str| r.get_property_val_str(k).map(str::to_string);
            let mut addrs: Vec<SocketAddr> = r
                .addresses
                .iter()
                .map(|a| SocketAddr::new(a.to_ip_addr(), r.port))
                .collect();
            addrs.sort();
            let instance = r
                .fullname
                .strip_suffix(&format!(".{SERVICE_TYPE}"))
                .unwrap_or(&r.fullname)
                .to_string();
            found.insert(
                instance.clone(),
                Announced {
                    instance,
                    addrs,
                    transport: match txt("p").as_deref() {
                        Some("tcp") => Some(Transport::Tcp),
                        Some("roce" | "iwarp" | "rdma") => Some(Transport::Rdma),
                        _ => None,
                    },
                    nqn: txt("nqn").unwrap_or_else(|| DISCOVERY_NQN.to_string()),
                    role: txt("role"),
                },
            );
        }
    }
    let _ = daemon.shutdown();
    Ok(found.into_values().collect())
}
