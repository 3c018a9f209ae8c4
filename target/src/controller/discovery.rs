//! The discovery controller's log page: for the connecting host, every subsystem it may
//! access on every port, with concrete addresses; on a central discovery controller, what every
//! registered box offers the host (`crate::cdc`).

use std::net::SocketAddr;

use fabrik_proto::fabrics::discovery::{encode_discovery_log, subtype};

use super::Controller;

impl Controller {
    pub(super) async fn discovery_log_page(&self) -> Vec<u8> {
        let genctr = self.target.discovery_genctr();
        if let Some(dir) = &self.target.cdc {
            // Boxes are read over NVMe/TCP, on the control runtime (not this queue's reactor).
            let (dir, host) = (dir.clone(), self.hostnqn.clone().unwrap_or_default());
            let read = self
                .target
                .spawn_control(async move { dir.log_for(&host, genctr).await });
            let entries = read.await.unwrap_or_else(|e| {
                tracing::error!("the CDC's discovery log for {}: {e}", self.host_label());
                Default::default()
            });
            return encode_discovery_log(genctr, &entries);
        }
        let mut entries = Vec::new();
        for port in self.target.ports() {
            // A wildcard listener is reported with the address this host reached us on.
            let addr = if port.addr.ip().is_unspecified() {
                SocketAddr::new(self.port.local_addr.ip(), port.addr.port())
            } else {
                port.addr
            };
            for sub in self.target.subsystems() {
                if !sub.host_allowed(self.hostnqn.as_deref()) {
                    continue;
                }
                entries.push(port.log_entry(addr, subtype::NVM, sub.nqn.as_str()));
            }
        }
        encode_discovery_log(genctr, &entries)
    }
}
