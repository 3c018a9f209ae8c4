//! Announcing this fabrikd's discovery controller over mDNS (`fabrikd --mdns`), as NVMe-oF's
//! TP8009 has it: service `_nvme-disc._tcp`, the NVMe/TCP port as the service's port, TXT
//! `p=tcp` and `nqn=` the discovery NQN (not `NQN=` as well: TXT keys are case-insensitive, RFC
//! 6763, and the responder drops the second; older nvme-stas then falls back to the same NQN).
//! Hosts
//! running nvme-stas (or `fabrik`) find boxes and central discovery controllers without being
//! told their addresses. A listener on a loopback address is announced on loopback only; one on
//! a wildcard address on every interface, with each interface's addresses.

use std::net::SocketAddr;

use anyhow::Context;
use fabrik_proto::fabrics::nqn::DISCOVERY_NQN;
use mdns_sd::{IfKind, ServiceDaemon, ServiceInfo};

pub use fabrik_initiator::host::mdns::SERVICE_TYPE;

/// The announcements of one fabrikd; withdrawn (mDNS goodbye) by `stop`.
pub struct Announcer {
    daemon: ServiceDaemon,
    names: Vec<String>,
}

impl Announcer {
    /// Announces the discovery controller on each NVMe/TCP address of `listen`, as instance
    /// `<name>` (`<name>-<port>` past the first); `role` ("box" or "cdc") goes in the TXT too.
    pub fn start(name: &str, role: &str, listen: &[SocketAddr]) -> anyhow::Result<Announcer> {
        let daemon = ServiceDaemon::new().context("mDNS: cannot start the responder")?;
        if !listen.is_empty() && listen.iter().all(|a| a.ip().is_loopback()) {
            daemon.disable_interface(IfKind::All)?;
            daemon.enable_interface(vec![IfKind::LoopbackV4, IfKind::LoopbackV6])?;
        }
        let host = format!("{}.local.", dns_label(name));
        let txt = [("p", "tcp"), ("nqn", DISCOVERY_NQN), ("role", role)];
        let mut names = Vec::new();
        for (i, addr) in listen.iter().enumerate() {
            let instance = match i {
                0 => dns_label(name),
                _ => format!("{}-{}", dns_label(name), addr.port()),
            };
            let info = match addr.ip().is_unspecified() {
                true => ServiceInfo::new(SERVICE_TYPE, &instance, &host, "", addr.port(), &txt[..])
                    .map(ServiceInfo::enable_addr_auto),
                false => ServiceInfo::new(
                    SERVICE_TYPE,
                    &instance,
                    &host,
                    addr.ip(),
                    addr.port(),
                    &txt[..],
                ),
            }
            .with_context(|| format!("mDNS: announcing {addr}"))?;
            names.push(info.get_fullname().to_string());
            daemon
                .register(info)
                .with_context(|| format!("mDNS: announcing {addr}"))?;
            tracing::info!(%addr, instance, "discovery controller announced over mDNS ({SERVICE_TYPE})");
        }
        Ok(Announcer { daemon, names })
    }

    /// Withdraws the announcements and stops the responder.
    pub fn stop(self) {
        for name in &self.names {
            if let Ok(done) = self.daemon.unregister(name) {
                // The goodbye is sent before the answer comes: wait for it, briefly.
                let _ = done.recv_timeout(std::time::Duration::from_secs(1));
            }
        }
        let _ = self.daemon.shutdown();
    }
}

/// `name` as a DNS label: letters, digits and '-', at most 63 bytes.
fn dns_label(name: &str) -> String {
    let label: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(63)
        .collect();
    match label.trim_matches('-') {
        "" => "fabrik".into(),
        l => l.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_dns_labels() {
        assert_eq!(dns_label("box1"), "box1");
        assert_eq!(dns_label("rack 3/box_7"), "rack-3-box-7");
        assert_eq!(dns_label("--"), "fabrik");
        assert_eq!(dns_label(&"x".repeat(80)).len(), 63);
    }
}
