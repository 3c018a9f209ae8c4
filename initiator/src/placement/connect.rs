//! One connection per drive: through which NIC port and source address, to which target port;
//! and the kernel `nvme connect` command that makes it.

use std::net::IpAddr;

use serde::Serialize;

use crate::topology::PciAddr;

use super::ports::{Assignment, NicPort};
use super::{BoxInventory, Drive, TargetPort, Transport, Warning, WarningKind};

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Connection {
    pub nqn: String,
    pub target: TargetPort,
    pub rdma: String,
    pub port: u32,
    pub host_iface: Option<String>,
    pub host_traddr: Option<IpAddr>,
}

/// "NQN via mlx5_0/1 10.0.0.1 -> rdma 10.0.0.100:4420" ("-" for no source address).
impl std::fmt::Display for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} via {}/{} ", self.nqn, self.rdma, self.port)?;
        match self.host_traddr {
            Some(a) => write!(f, "{a}")?,
            None => write!(f, "-")?,
        }
        write!(
            f,
            " -> {} {}:{}",
            self.target.trtype.as_str(),
            self.target.traddr,
            self.target.trsvcid
        )
    }
}

/// Per GPU, its drives in turn over its ports (closest first); on each port the source
/// addresses in turn; to the target port whose address shares the longest prefix with the
/// source address (the same subnet, on a network with one subnet per rail), least used first,
/// among the ports that reach the drive (its own box's, when it names any).
pub(super) fn connections(
    gpus: &[PciAddr],
    ports: &[NicPort],
    a: &Assignment,
    drives: &[Vec<Drive>],
    inventory: &BoxInventory,
) -> Vec<Vec<Connection>> {
    let mut per_port = vec![0usize; ports.len()];
    let mut per_target = vec![0usize; inventory.ports.len()];
    let mut out = vec![Vec::new(); gpus.len()];
    for g in 0..gpus.len() {
        let mut mine: Vec<(usize, bool)> =
            a.per_gpu[g].iter().map(|u| (u.port, u.borrowed)).collect();
        // Closest ports first; borrowed ones last.
        mine.sort_by_key(|&(p, borrowed)| {
            let d = a.per_gpu[g]
                .iter()
                .find(|u| u.port == p)
                .map(|u| u.distance);
            (borrowed, d, p)
        });
        if mine.is_empty() {
            continue;
        }
        for (j, drive) in drives[g].iter().enumerate() {
            let p = mine[j % mine.len()].0;
            let port = &ports[p];
            let source =
                (!port.addrs.is_empty()).then(|| port.addrs[per_port[p] % port.addrs.len()]);
            per_port[p] += 1;
            let Some(t) = pick_target(&inventory.ports, &per_target, source, &drive.ports) else {
                continue;
            };
            per_target[t] += 1;
            out[g].push(Connection {
                nqn: drive.nqn.clone(),
                target: inventory.ports[t].clone(),
                rdma: port.rdma.clone(),
                port: port.num,
                host_iface: port.netdev.clone(),
                host_traddr: source,
            });
        }
    }
    out
}

/// The target port for a drive reachable through `reach` (empty: any of `targets`).
fn pick_target(
    targets: &[TargetPort],
    load: &[usize],
    source: Option<IpAddr>,
    reach: &[TargetPort],
) -> Option<usize> {
    let reaches = |t: &usize| reach.is_empty() || reach.contains(&targets[*t]);
    (0..targets.len()).filter(reaches).min_by_key(|&t| {
        let prefix = match (source, targets[t].traddr.parse::<IpAddr>()) {
            (Some(s), Ok(d)) => common_prefix(s, d),
            _ => 0,
        };
        (std::cmp::Reverse(prefix), load[t], t)
    })
}

/// Whether a NIC port shares a network with some box port: it has no IP address we know of (an
/// InfiniBand port: not checked), or one of its addresses lies within `bits` of a box port's.
pub(super) fn reaches_box(
    port: &NicPort,
    targets: &[TargetPort],
    bits: Option<u32>,
    warnings: &mut Vec<Warning>,
) -> bool {
    let target_ips: Vec<IpAddr> = targets
        .iter()
        .filter_map(|t| t.traddr.parse().ok())
        .collect();
    // Nothing to compare (no address on the port, or box ports named by host name): keep it.
    let comparable = |a: &IpAddr| target_ips.iter().any(|b| a.is_ipv4() == b.is_ipv4());
    if !port.addrs.iter().any(comparable) {
        return true;
    }
    let reach = port.addrs.iter().any(|a| {
        let need = bits.unwrap_or(if a.is_ipv4() { 24 } else { 64 });
        target_ips
            .iter()
            .any(|b| a.is_ipv4() == b.is_ipv4() && common_prefix(*a, *b) >= need)
    });
    if !reach {
        let addrs: Vec<String> = port.addrs.iter().map(|a| a.to_string()).collect();
        warnings.push(Warning {
            kind: WarningKind::NoBoxPortOnNetwork,
            message: format!(
                "{} port {} ({}) has no box port on its network: not used",
                port.rdma,
                port.num,
                addrs.join(",")
            ),
        });
    }
    reach
}

fn common_prefix(a: IpAddr, b: IpAddr) -> u32 {
    match (a, b) {
        (IpAddr::V4(a), IpAddr::V4(b)) => (u32::from(a) ^ u32::from(b)).leading_zeros(),
        (IpAddr::V6(a), IpAddr::V6(b)) => (u128::from(a) ^ u128::from(b)).leading_zeros(),
        _ => 0,
    }
}

/// The arguments of `nvme connect` (nvme-cli) for one connection. `--host-iface` binds the TCP
/// socket to the interface; RDMA has no such option and picks its path by `--host-traddr`.
pub fn nvme_connect_args(c: &Connection, hostnqn: Option<&str>) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "connect".into(),
        "--transport".into(),
        c.target.trtype.as_str().into(),
        "--traddr".into(),
        c.target.traddr.clone(),
        "--trsvcid".into(),
        c.target.trsvcid.to_string(),
        "--nqn".into(),
        c.nqn.clone(),
    ];
    if let Some(src) = c.host_traddr {
        args.push("--host-traddr".into());
        args.push(src.to_string());
    }
    if c.target.trtype == Transport::Tcp {
        if let Some(iface) = &c.host_iface {
            args.push("--host-iface".into());
            args.push(iface.clone());
        }
    }
    if let Some(nqn) = hostnqn {
        args.push("--hostnqn".into());
        args.push(nqn.into());
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_on_the_same_subnet_wins_then_least_used() {
        let t = |a: &str| TargetPort {
            trtype: Transport::Rdma,
            traddr: a.into(),
            trsvcid: 4420,
        };
        let targets = [t("10.0.1.10"), t("10.0.2.10"), t("10.0.2.11")];
        let src = Some("10.0.2.1".parse().unwrap());
        assert_eq!(pick_target(&targets, &[0, 0, 0], src, &[]), Some(1));
        assert_eq!(pick_target(&targets, &[0, 1, 0], src, &[]), Some(2));
        assert_eq!(pick_target(&targets, &[0, 1, 1], src, &[]), Some(1));
        assert_eq!(pick_target(&targets, &[3, 1, 1], None, &[]), Some(1));
        assert_eq!(pick_target(&[], &[], src, &[]), None);
        // A drive that only some ports reach: the best of those.
        let reach = [targets[0].clone()];
        assert_eq!(pick_target(&targets, &[0, 0, 0], src, &reach), Some(0));
    }

    #[test]
    fn box_ports_by_host_name_or_other_family_filter_nothing() {
        let port = NicPort {
            rdma: "mlx5_0".into(),
            num: 1,
            pci: "0000:19:00.0".parse().unwrap(),
            netdev: None,
            addrs: vec!["10.0.1.1".parse().unwrap()],
            gbytes_per_sec: 25.0,
        };
        let t = |a: &str| TargetPort {
            trtype: Transport::Tcp,
            traddr: a.into(),
            trsvcid: 4420,
        };
        let mut w = Vec::new();
        assert!(reaches_box(&port, &[t("box.example")], None, &mut w));
        assert!(reaches_box(&port, &[t("fd00::1")], None, &mut w));
        assert!(reaches_box(&port, &[t("10.0.1.200")], None, &mut w));
        assert!(w.is_empty());
        assert!(!reaches_box(&port, &[t("10.0.2.200")], None, &mut w));
        assert!(reaches_box(&port, &[t("10.0.2.200")], Some(16), &mut w));
        assert_eq!(w.len(), 1);
    }

    #[test]
    fn connect_arguments() {
        let c = Connection {
            nqn: "nqn.2024-01.io.fabrik:box:drive-00".into(),
            target: TargetPort {
                trtype: Transport::Tcp,
                traddr: "10.0.1.10".into(),
                trsvcid: 4420,
            },
            rdma: "mlx5_0".into(),
            port: 1,
            host_iface: Some("ens1f0np0".into()),
            host_traddr: Some("10.0.1.1".parse().unwrap()),
        };
        assert_eq!(
            nvme_connect_args(&c, None).join(" "),
            "connect --transport tcp --traddr 10.0.1.10 --trsvcid 4420 --nqn nqn.2024-01.io.fabrik:box:drive-00 \
             --host-traddr 10.0.1.1 --host-iface ens1f0np0"
        );
        let rdma = Connection {
            target: TargetPort {
                trtype: Transport::Rdma,
                ..c.target.clone()
            },
            ..c
        };
        let line = nvme_connect_args(&rdma, Some("nqn.h")).join(" ");
        assert!(
            line.contains("--transport rdma") && !line.contains("--host-iface"),
            "{line}"
        );
        assert!(line.ends_with("--hostnqn nqn.h"));
    }
}
