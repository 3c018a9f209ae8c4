//! Distance classes between two PCI functions, as `nvidia-smi topo -m` names them.

use std::collections::BTreeSet;

use serde::Serialize;

use super::{BridgeRole, DeviceKind, PciAddr, PciDevice, Topology};

/// Closest first, so `min()` picks the best path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Distance {
    /// The same function.
    X,
    /// Through at most one PCIe bridge: the same switch, or functions of one device.
    PIX,
    /// Through several PCIe switches, without the host bridge.
    PXB,
    /// Through a PCIe host bridge (the CPU's root complex).
    PHB,
    /// Between host bridges of one NUMA node.
    NODE,
    /// Across the interconnect between NUMA nodes (sockets).
    SYS,
}

impl Distance {
    pub fn as_str(&self) -> &'static str {
        match self {
            Distance::X => "X",
            Distance::PIX => "PIX",
            Distance::PXB => "PXB",
            Distance::PHB => "PHB",
            Distance::NODE => "NODE",
            Distance::SYS => "SYS",
        }
    }

    /// The data leaves the PCIe switches and goes through a CPU.
    pub fn through_cpu(&self) -> bool {
        *self >= Distance::PHB
    }
}

pub(super) fn between(topo: &Topology, a: &PciDevice, b: &PciDevice) -> Distance {
    if a.addr == b.addr {
        return Distance::X;
    }
    if a.host_bridge != b.host_bridge {
        // Unknown NUMA nodes (-1: a single-node machine or a VM) compare equal.
        return if a.numa_node == b.numa_node {
            Distance::NODE
        } else {
            Distance::SYS
        };
    }
    let common = a
        .path
        .iter()
        .zip(&b.path)
        .take_while(|(x, y)| x == y)
        .count();
    if common == 0 {
        return Distance::PHB;
    }
    // Count bridges the way nvidia-smi does: a switch is one bridge however many of its ports
    // the path uses; the root port counts when the two meet there.
    let meet = a.path[common - 1];
    let mut bridges: BTreeSet<PciAddr> = BTreeSet::new();
    for port in a.path[common - 1..].iter().chain(&b.path[common - 1..]) {
        match topo.switch_of_port(*port) {
            Some(switch) => {
                bridges.insert(switch);
            }
            None if *port == meet => {
                bridges.insert(meet);
            }
            None => {
                if let Some(DeviceKind::Bridge(BridgeRole::Other)) =
                    topo.device(*port).map(|d| d.kind)
                {
                    bridges.insert(*port);
                }
            }
        }
    }
    if bridges.len() <= 1 {
        Distance::PIX
    } else {
        Distance::PXB
    }
}

/// The links a transfer between `a` and `b` crosses above the switches they sit under: the
/// upstream links of every switch below the point where their paths meet. Each is named by the
/// switch's upstream port.
pub fn switch_uplinks_between(topo: &Topology, a: &PciDevice, b: &PciDevice) -> Vec<PciAddr> {
    let common = if a.host_bridge == b.host_bridge {
        a.path
            .iter()
            .zip(&b.path)
            .take_while(|(x, y)| x == y)
            .count()
    } else {
        0
    };
    let mut out: Vec<PciAddr> = a.path[common..]
        .iter()
        .chain(&b.path[common..])
        .copied()
        .filter(|p| {
            topo.device(*p).map(|d| d.kind) == Some(DeviceKind::Bridge(BridgeRole::SwitchUpstream))
        })
        .collect();
    out.sort();
    out.dedup();
    out
}
