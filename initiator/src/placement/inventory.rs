//! What the box offers: its ports and drives, from a file, its REST API or discovery.

use fabrik_proto::fabrics::discovery::{subtype, DiscoveryLogEntry};
use fabrik_proto::fabrics::Transport;
use serde::{Deserialize, Serialize};

/// A port of the box (fabrikd listener).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TargetPort {
    /// By its lowercase name ("tcp", "rdma").
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
    /// The target ports that reach this drive; empty: every port of the inventory (one box).
    /// Discovery through a central discovery controller lists many boxes, each drive behind
    /// its own box's ports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<TargetPort>,
}

/// What the box offers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BoxInventory {
    pub ports: Vec<TargetPort>,
    pub drives: Vec<Drive>,
}

impl BoxInventory {
    /// Ports and drives from the box's REST API: every listening TCP or RDMA port (a wildcard
    /// address stands for `api_host`, the address the API was reached at) and every subsystem
    /// holding a drive, once, in the order of the box's drives.
    pub fn from_api(
        ports: &[fabrik_api::models::Port],
        drives: &[fabrik_api::models::Drive],
        api_host: Option<&str>,
    ) -> BoxInventory {
        let mut inv = BoxInventory::default();
        for p in ports.iter().filter(|p| p.state == "listening") {
            let Ok(trtype) = p.transport.parse::<Transport>() else {
                continue;
            };
            let wildcard = p
                .address
                .parse::<std::net::IpAddr>()
                .is_ok_and(|a| a.is_unspecified());
            let traddr = match (wildcard, api_host) {
                (true, Some(h)) => h.to_string(),
                (true, None) => continue,
                (false, _) => p.address.clone(),
            };
            let port = TargetPort {
                trtype,
                traddr,
                trsvcid: p.service_id,
            };
            if !inv.ports.contains(&port) {
                inv.ports.push(port);
            }
        }
        for nqn in drives.iter().flat_map(|d| &d.subsystems) {
            if !inv.drives.iter().any(|d| &d.nqn == nqn) {
                inv.drives.push(Drive {
                    ports: Vec::new(),
                    nqn: nqn.clone(),
                    gbytes_per_sec: None,
                });
            }
        }
        inv
    }

    /// Ports and drives from a discovery log: every NVM subsystem entry of a transport the
    /// host can use; each subsystem is one drive, each distinct address one port.
    pub fn from_discovery(entries: &[DiscoveryLogEntry]) -> BoxInventory {
        let mut inv = BoxInventory::default();
        for e in entries.iter().filter(|e| e.subtype == subtype::NVM) {
            let Some(trtype) = Transport::from_trtype(e.trtype) else {
                continue;
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
                inv.ports.push(port.clone());
            }
            match inv.drives.iter_mut().find(|d| d.nqn == e.subnqn) {
                Some(d) if !d.ports.contains(&port) => d.ports.push(port),
                Some(_) => {}
                None => inv.drives.push(Drive {
                    nqn: e.subnqn.clone(),
                    gbytes_per_sec: None,
                    ports: vec![port],
                }),
            }
        }
        inv
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabrik_proto::fabrics::discovery::Tsas;

    fn entry(trtype: u8, subtype: u8, traddr: &str, trsvcid: &str, nqn: &str) -> DiscoveryLogEntry {
        DiscoveryLogEntry {
            trtype,
            adrfam: 1,
            subtype,
            treq: 0,
            portid: 1,
            cntlid: 0xffff,
            asqsz: 32,
            eflags: 0,
            trsvcid: trsvcid.into(),
            subnqn: nqn.into(),
            traddr: traddr.into(),
            tsas: Tsas::Tcp { sectype: 0 },
        }
    }

    #[test]
    fn discovery_log_gives_ports_and_drives() {
        let log = [
            entry(
                Transport::Tcp.trtype(),
                subtype::CURRENT_DISCOVERY,
                "10.0.0.1",
                "8009",
                "nqn.2014-08.org.nvmexpress.discovery",
            ),
            entry(
                Transport::Tcp.trtype(),
                subtype::NVM,
                "10.0.0.1",
                "4420",
                "nqn.box:drive-00",
            ),
            entry(
                Transport::Rdma.trtype(),
                subtype::NVM,
                "10.0.1.1",
                "4420",
                "nqn.box:drive-00",
            ),
            entry(
                Transport::Tcp.trtype(),
                subtype::NVM,
                "10.0.0.1",
                "4420",
                "nqn.box:drive-01",
            ),
            entry(
                Transport::Tcp.trtype(),
                subtype::NVM,
                "10.0.0.1",
                "not-a-port",
                "nqn.box:drive-02",
            ),
            entry(0xfe, subtype::NVM, "x", "1", "nqn.box:drive-03"),
        ];
        let inv = BoxInventory::from_discovery(&log);
        assert_eq!(
            inv.ports,
            [
                TargetPort {
                    trtype: Transport::Tcp,
                    traddr: "10.0.0.1".into(),
                    trsvcid: 4420
                },
                TargetPort {
                    trtype: Transport::Rdma,
                    traddr: "10.0.1.1".into(),
                    trsvcid: 4420
                },
            ]
        );
        let nqns: Vec<&str> = inv.drives.iter().map(|d| d.nqn.as_str()).collect();
        assert_eq!(nqns, ["nqn.box:drive-00", "nqn.box:drive-01"]);
    }

    #[test]
    fn api_gives_listening_ports_and_subsystems_with_drives() {
        let port = |id: u16, t: &str, a: &str, state: &str| fabrik_api::models::Port {
            id,
            transport: t.into(),
            address: a.into(),
            service_id: 4420,
            state: state.into(),
            tls: "none".into(),
            controllers: 0,
        };
        let ports = [
            port(1, "tcp", "10.0.0.1", "listening"),
            port(2, "rdma", "0.0.0.0", "listening"),
            port(3, "tcp", "10.0.0.2", "stopped"),
            port(4, "fc", "x", "listening"),
        ];
        let drive = |id: &str, subs: &[&str]| -> fabrik_api::models::Drive {
            serde_json::from_value(serde_json::json!({
                "id": id, "slot": 0, "serial": "", "model": "", "backend": "ram", "path": null,
                "capacity_bytes": 0, "block_size": 4096,
                "health": {"state": "ok", "source": "fabrikd", "source_error": null,
                    "temperature_celsius": null, "percentage_used": null, "media_errors": 0,
                    "critical_warnings": 0, "power_on_hours": 0, "read_commands": 0,
                    "write_commands": 0, "bytes_read": 0, "bytes_written": 0},
                "subsystems": subs, "hosts": null, "composed_to": []
            }))
            .unwrap()
        };
        let drives = [
            drive("00", &["nqn.box:drive-00"]),
            drive("01", &[]),
            drive("02", &["nqn.box:pair"]),
            drive("03", &["nqn.box:pair"]),
        ];
        let inv = BoxInventory::from_api(&ports, &drives, Some("box.example"));
        let addrs: Vec<(Transport, &str)> = inv
            .ports
            .iter()
            .map(|p| (p.trtype, p.traddr.as_str()))
            .collect();
        assert_eq!(
            addrs,
            [
                (Transport::Tcp, "10.0.0.1"),
                (Transport::Rdma, "box.example")
            ]
        );
        let nqns: Vec<&str> = inv.drives.iter().map(|d| d.nqn.as_str()).collect();
        assert_eq!(nqns, ["nqn.box:drive-00", "nqn.box:pair"]);
        // A wildcard listener with no API host to stand for it is left out.
        assert_eq!(BoxInventory::from_api(&ports, &drives, None).ports.len(), 1);
    }

    #[test]
    fn box_file_format() {
        let inv: BoxInventory = serde_json::from_str(
            r#"{"ports":[{"trtype":"rdma","traddr":"10.0.0.1"}],"drives":[{"nqn":"a","gbytes_per_sec":6.8},{"nqn":"b"}]}"#,
        )
        .unwrap();
        assert_eq!(inv.ports[0].trsvcid, 4420);
        assert_eq!(inv.drives[0].gbytes_per_sec, Some(6.8));
        assert_eq!(inv.drives[1].gbytes_per_sec, None);
        assert!(serde_json::from_str::<BoxInventory>(
            r#"{"ports":[{"trtype":"fc","traddr":"x"}],"drives":[]}"#
        )
        .is_err());
    }
}
