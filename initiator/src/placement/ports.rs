//! Which NIC ports each GPU uses.

use std::net::IpAddr;

use crate::topology::{Distance, PciAddr, PciDevice, Topology};

use super::{Ceiling, PortUse, Warning, WarningKind};

/// An active RDMA port with its PCI function and the rate it can deliver.
#[derive(Debug, Clone)]
pub(super) struct NicPort {
    pub rdma: String,
    pub num: u32,
    pub pci: PciAddr,
    pub netdev: Option<String>,
    pub addrs: Vec<IpAddr>,
    /// The port rate, cut to its share of the NIC's PCIe link when the ports of one card
    /// together are faster than the card's link.
    pub gbytes_per_sec: f64,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Use {
    pub port: usize,
    pub distance: Distance,
    pub borrowed: bool,
}

#[derive(Debug, Clone)]
pub(super) struct Assignment {
    /// Per wanted GPU, the ports it uses, in the order they were given.
    pub per_gpu: Vec<Vec<Use>>,
    /// Per port, the GPUs using it.
    pub users: Vec<Vec<usize>>,
}

impl Assignment {
    fn add(&mut self, gpu: usize, port: usize, distance: Distance, borrowed: bool) {
        self.per_gpu[gpu].push(Use {
            port,
            distance,
            borrowed,
        });
        self.users[port].push(gpu);
        self.users[port].sort();
    }
}

pub(super) fn collect(topo: &Topology, warnings: &mut Vec<Warning>) -> Vec<NicPort> {
    let mut out = Vec::new();
    for r in &topo.rdma {
        let Some(dev) = r.pci.and_then(|a| topo.device(a)) else {
            continue;
        };
        for p in &r.ports {
            if p.state.is_some() && !p.active() {
                warnings.push(Warning {
                    kind: WarningKind::PortNotActive,
                    message: format!(
                        "{} port {} is {}: not used",
                        r.name,
                        p.num,
                        p.state.as_deref().unwrap_or("?")
                    ),
                });
                continue;
            }
            let rate = p
                .gbytes_per_sec()
                .or(dev.link.gbytes_per_sec())
                .unwrap_or(0.0);
            out.push(NicPort {
                rdma: r.name.clone(),
                num: p.num,
                pci: dev.addr,
                netdev: p.netdev.clone(),
                addrs: p.addrs.clone(),
                gbytes_per_sec: rate,
            });
        }
    }
    // The functions of one card share its PCIe link.
    let slots: Vec<(u32, u8, u8)> = out.iter().map(|p| p.pci.slot()).collect();
    for slot in &slots {
        let total: f64 = out
            .iter()
            .filter(|p| p.pci.slot() == *slot)
            .map(|p| p.gbytes_per_sec)
            .sum();
        let link = out
            .iter()
            .find(|p| p.pci.slot() == *slot)
            .and_then(|p| topo.device(p.pci))
            .and_then(|d| d.link.gbytes_per_sec());
        if let Some(link) = link {
            if total > link {
                for p in out.iter_mut().filter(|p| p.pci.slot() == *slot) {
                    p.gbytes_per_sec *= link / total;
                }
            }
        }
    }
    out
}

fn dist(topo: &Topology, gpu: PciAddr, port: &NicPort) -> Distance {
    topo.distance(gpu, port.pci).unwrap_or(Distance::SYS)
}

/// Each GPU gets the ports it is closest to among those no other wanted GPU is closer to; ports
/// several GPUs are equally close to are dealt out in turn, least used first. A GPU that no
/// port is closest to shares the ports nearest to it.
pub(super) fn assign(topo: &Topology, gpus: &[PciAddr], ports: &[NicPort]) -> Assignment {
    let d: Vec<Vec<Distance>> = gpus
        .iter()
        .map(|g| ports.iter().map(|p| dist(topo, *g, p)).collect())
        .collect();
    let closest: Vec<Option<Distance>> = (0..ports.len())
        .map(|p| d.iter().map(|row| row[p]).min())
        .collect();
    let candidates: Vec<Vec<usize>> = d
        .iter()
        .map(|row| {
            let owned: Vec<usize> = (0..ports.len())
                .filter(|&p| Some(row[p]) == closest[p])
                .collect();
            let pool = if owned.is_empty() {
                (0..ports.len()).collect()
            } else {
                owned
            };
            let best = pool.iter().map(|&p| row[p]).min();
            pool.into_iter().filter(|&p| Some(row[p]) == best).collect()
        })
        .collect();
    let mut a = Assignment {
        per_gpu: vec![Vec::new(); gpus.len()],
        users: vec![Vec::new(); ports.len()],
    };
    // Rounds: every GPU in turn takes its least used candidate; after its first port a GPU only
    // takes ports nobody uses yet, so a port is shared only when there are not enough.
    loop {
        let mut took = false;
        for g in 0..gpus.len() {
            let pick = candidates[g]
                .iter()
                .copied()
                .filter(|p| !a.per_gpu[g].iter().any(|u| u.port == *p))
                .filter(|p| a.per_gpu[g].is_empty() || a.users[*p].is_empty())
                .min_by_key(|p| (a.users[*p].len(), *p));
            if let Some(p) = pick {
                a.add(g, p, d[g][p], false);
                took = true;
            }
        }
        if !took {
            return a;
        }
    }
}

/// While a GPU is below the goal, it may take one more port (nearest first) if that raises its
/// ceiling and leaves every other GPU at or above the goal (or where it was, if it was below).
pub(super) fn borrow_for_goal(
    topo: &Topology,
    gpus: &[PciAddr],
    ports: &[NicPort],
    a: &mut Assignment,
    goal: f64,
    ceilings: &dyn Fn(&Assignment) -> Vec<Ceiling>,
) {
    loop {
        let before = ceilings(a);
        let mut changed = false;
        for g in 0..gpus.len() {
            if before[g].gbytes_per_sec >= goal {
                continue;
            }
            let mut options: Vec<usize> = (0..ports.len())
                .filter(|p| !a.per_gpu[g].iter().any(|u| u.port == *p))
                .collect();
            options.sort_by_key(|&p| (dist(topo, gpus[g], &ports[p]), a.users[p].len(), p));
            for p in options {
                let mut trial = a.clone();
                trial.add(g, p, dist(topo, gpus[g], &ports[p]), true);
                let after = ceilings(&trial);
                let better = after[g].gbytes_per_sec > before[g].gbytes_per_sec + 1e-6;
                let harmless = (0..gpus.len())
                    .filter(|o| *o != g)
                    .all(|o| after[o].gbytes_per_sec + 1e-6 >= goal.min(before[o].gbytes_per_sec));
                if better && harmless {
                    *a = trial;
                    changed = true;
                    break;
                }
            }
            if changed {
                break;
            }
        }
        if !changed {
            return;
        }
    }
}

/// A warning for every port whose path leaves the PCIe switches, saying why it was chosen.
pub(super) fn path_warnings(
    topo: &Topology,
    index: usize,
    gpu: &PciDevice,
    ports: &[PortUse],
) -> Vec<Warning> {
    let mut out = Vec::new();
    if ports.is_empty() {
        out.push(Warning {
            kind: WarningKind::NoNicPort,
            message: format!(
                "GPU{index} {} has no RDMA NIC port to read through (none found, or none active)",
                gpu.addr
            ),
        });
    }
    let best = ports.iter().map(|p| p.distance).min();
    for p in ports {
        let nic = topo.device(p.pci);
        let (kind, route) = match p.distance {
            Distance::PHB => (
                WarningKind::CrossHostBridge,
                format!(
                    "through the host bridge {} (the CPU's root complex), not a PCIe switch: \
                     peer-to-peer DMA through the root complex is slower and often blocked by ACS/IOMMU",
                    gpu.host_bridge
                ),
            ),
            Distance::NODE => (
                WarningKind::CrossNode,
                format!(
                    "between host bridges {} and {} inside NUMA node {}: every byte goes through the CPU's \
                     internal fabric instead of a PCIe switch",
                    gpu.host_bridge,
                    nic.map_or("?", |n| n.host_bridge.as_str()),
                    numa(gpu.numa_node)
                ),
            ),
            Distance::SYS => (
                WarningKind::CrossSocket,
                format!(
                    "across the socket interconnect (GPU on NUMA node {}, NIC on NUMA node {}): \
                     the data crosses both CPUs and the inter-socket link",
                    numa(gpu.numa_node),
                    numa(nic.and_then(|n| n.numa_node))
                ),
            ),
            _ => continue,
        };
        let why = if p.borrowed {
            "borrowed beyond the closest ports to get nearer the bandwidth goal".to_string()
        } else if Some(p.distance) == best {
            format!("no NIC port is closer to this GPU than {}", p.distance)
        } else {
            "taken to balance ports between GPUs".to_string()
        };
        out.push(Warning {
            kind,
            message: format!(
                "GPU{index} {} -> {} port {} ({}) is {}: {route}; chosen because {why}",
                gpu.addr, p.rdma, p.port, p.pci, p.distance
            ),
        });
    }
    out
}

fn numa(n: Option<u32>) -> String {
    n.map_or("?".to_string(), |n| n.to_string())
}
