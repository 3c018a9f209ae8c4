//! Placement of a box's drives onto this machine's GPUs: which RDMA NIC ports each GPU reads
//! through, which drives and target ports it gets, the ceiling it can expect and what limits it.
//!
//! The rule is the one the reference test showed (101 GB/s with GPU and NIC under one PCIe
//! switch, about 15 GB/s through the CPU): a GPU uses the NIC ports closest to it; ports closest
//! to several GPUs are dealt out in turn, least used first, so GPUs and NICs stay balanced.
//! Every path that leaves the PCIe switches (PHB, NODE, SYS) gets a warning saying why it was
//! still chosen. The plan is a pure function of its inputs: same inputs, same plan.

pub mod apply;
mod ceiling;
mod connect;
mod inventory;
mod ports;

use std::net::IpAddr;

use serde::Serialize;

use crate::topology::{Distance, PciAddr, Topology};

pub use ceiling::{Bottleneck, Ceiling, Term};
pub use connect::{nvme_connect_args, Connection};
pub use fabrik_proto::fabrics::Transport;
pub use inventory::{BoxInventory, Drive, TargetPort};

#[derive(Debug, Clone, Default)]
pub struct PlaceOptions {
    /// GPUs to place for (PCI addresses); None: all of them.
    pub gpus: Option<Vec<PciAddr>>,
    /// Drives per GPU; None: all drives, dealt out in turn.
    pub drives_per_gpu: Option<usize>,
    /// GB/s wanted per GPU. A GPU below it may borrow ports that are further away (with a
    /// warning) where that does not push another GPU below the goal.
    pub bandwidth_goal: Option<f64>,
    /// Prefix length within which a NIC port's address and a box port's address count as one
    /// network (sysfs does not say the host's netmask); None: /24 for IPv4, /64 for IPv6.
    pub subnet_bits: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WarningKind {
    /// The path goes through the CPU's root complex (PHB).
    CrossHostBridge,
    /// The path goes between host bridges of one NUMA node (NODE).
    CrossNode,
    /// The path crosses the interconnect between sockets (SYS).
    CrossSocket,
    NoNicPort,
    PortNotActive,
    /// A NIC port with no box port on its network.
    NoBoxPortOnNetwork,
    LinkDegraded,
    BelowGoal,
    DrivesLeftOver,
    NoGpu,
}

#[derive(Debug, Clone, Serialize)]
pub struct Warning {
    pub kind: WarningKind,
    pub message: String,
}

/// A NIC port as one GPU uses it.
#[derive(Debug, Clone, Serialize)]
pub struct PortUse {
    pub rdma: String,
    pub port: u32,
    pub pci: PciAddr,
    pub netdev: Option<String>,
    pub source_addrs: Vec<IpAddr>,
    pub distance: Distance,
    /// Other GPUs (machine indices, as `gpu`) using the same port; its rate is split evenly.
    pub shared_with: Vec<usize>,
    /// This GPU's share of the port, GB/s, before switch uplinks.
    pub gbytes_per_sec: f64,
    /// Taken beyond the closest ports to get nearer the bandwidth goal.
    pub borrowed: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct GpuPlan {
    /// The GPU's index among all GPUs of the machine (PCI order, as nvidia-smi numbers them).
    pub gpu: usize,
    pub pci: PciAddr,
    pub name: Option<String>,
    pub numa_node: Option<u32>,
    pub switch: Option<PciAddr>,
    pub ports: Vec<PortUse>,
    pub connections: Vec<Connection>,
    pub ceiling: Ceiling,
    pub warnings: Vec<Warning>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub gpus: Vec<GpuPlan>,
    /// Sum of the GPUs' ceilings, GB/s.
    pub total_gbytes_per_sec: f64,
    /// NIC ports no GPU uses (`mlx5_1/1`).
    pub unused_ports: Vec<String>,
    /// Drives not given to any GPU.
    pub unassigned_drives: Vec<String>,
    /// Warnings that concern no single GPU.
    pub warnings: Vec<Warning>,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PlaceError {
    #[error("{0} is not a GPU of this machine")]
    NotAGpu(PciAddr),
    #[error("{per_gpu} drives per GPU for {gpus} GPUs needs {} drives; the box has {have}", per_gpu * gpus)]
    NotEnoughDrives {
        per_gpu: usize,
        gpus: usize,
        have: usize,
    },
    #[error("the box lists drives but no ports to reach them")]
    NoTargetPorts,
    #[error("drive {0} names target ports of its own, none of them among the box's ports")]
    DriveUnreachable(String),
    #[error("bandwidth goal {0} GB/s is not a positive number")]
    BadGoal(f64),
}

/// Computes the plan. Deterministic: GPUs, ports and drives are taken in a fixed order.
pub fn plan(
    topo: &Topology,
    inventory: &BoxInventory,
    opts: &PlaceOptions,
) -> Result<Plan, PlaceError> {
    if let Some(goal) = opts.bandwidth_goal {
        if !(goal.is_finite() && goal > 0.0) {
            return Err(PlaceError::BadGoal(goal));
        }
    }
    if !inventory.drives.is_empty() && inventory.ports.is_empty() {
        return Err(PlaceError::NoTargetPorts);
    }
    // A drive limited to ports the inventory lacks would be left out of the plan unsaid.
    let unreachable =
        |d: &&Drive| !d.ports.is_empty() && !d.ports.iter().any(|p| inventory.ports.contains(p));
    if let Some(d) = inventory.drives.iter().find(unreachable) {
        return Err(PlaceError::DriveUnreachable(d.nqn.clone()));
    }
    let all_gpus: Vec<PciAddr> = topo.gpus().map(|g| g.addr).collect();
    let wanted = match &opts.gpus {
        None => all_gpus.clone(),
        Some(list) => {
            let mut list = list.clone();
            list.sort();
            list.dedup();
            if let Some(bad) = list.iter().find(|a| !all_gpus.contains(a)) {
                return Err(PlaceError::NotAGpu(*bad));
            }
            list
        }
    };
    let mut warnings = Vec::new();
    if wanted.is_empty() {
        warnings.push(Warning {
            kind: WarningKind::NoGpu,
            message: format!(
                "no GPU found under {}: nothing to place",
                topo.root.display()
            ),
        });
    }
    let drives = deal_drives(&inventory.drives, wanted.len(), opts.drives_per_gpu)?;
    let mut nic_ports = ports::collect(topo, &mut warnings);
    let all_port_names: Vec<String> = nic_ports
        .iter()
        .map(|p| format!("{}/{}", p.rdma, p.num))
        .collect();
    if !inventory.ports.is_empty() {
        nic_ports
            .retain(|p| connect::reaches_box(p, &inventory.ports, opts.subnet_bits, &mut warnings));
    }
    let mut assignment = ports::assign(topo, &wanted, &nic_ports);
    let ceilings = |a: &ports::Assignment| ceiling::compute(topo, &wanted, &nic_ports, a, &drives);
    if let Some(goal) = opts.bandwidth_goal {
        ports::borrow_for_goal(topo, &wanted, &nic_ports, &mut assignment, goal, &ceilings);
    }
    let ceilings = ceilings(&assignment);
    let connections = connect::connections(&wanted, &nic_ports, &assignment, &drives, inventory);

    let mut gpus = Vec::new();
    for (gi, addr) in wanted.iter().enumerate() {
        let dev = topo
            .device(*addr)
            .expect("wanted GPUs come from the topology");
        let index = gpu_index(topo, *addr);
        let ports: Vec<PortUse> = assignment.per_gpu[gi]
            .iter()
            .map(|u| {
                let p = &nic_ports[u.port];
                let users = &assignment.users[u.port];
                PortUse {
                    rdma: p.rdma.clone(),
                    port: p.num,
                    pci: p.pci,
                    netdev: p.netdev.clone(),
                    source_addrs: p.addrs.clone(),
                    distance: u.distance,
                    shared_with: users
                        .iter()
                        .filter(|o| **o != gi)
                        .map(|o| gpu_index(topo, wanted[*o]))
                        .collect(),
                    gbytes_per_sec: p.gbytes_per_sec / users.len() as f64,
                    borrowed: u.borrowed,
                }
            })
            .collect();
        let mut gw = ports::path_warnings(topo, index, dev, &ports);
        if dev.link.degraded_width() {
            gw.push(Warning {
                kind: WarningKind::LinkDegraded,
                message: format!(
                    "GPU{index} {} link runs at x{} of x{}: check the slot or riser",
                    addr,
                    dev.link.cur_width.unwrap_or(0),
                    dev.link.max_width.unwrap_or(0)
                ),
            });
        }
        if let Some(goal) = opts.bandwidth_goal {
            if ceilings[gi].gbytes_per_sec + 1e-9 < goal {
                gw.push(Warning {
                    kind: WarningKind::BelowGoal,
                    message: format!(
                        "GPU{index} ceiling {:.1} GB/s is below the goal of {goal:.1} GB/s (limited by {})",
                        ceilings[gi].gbytes_per_sec,
                        ceilings[gi].bottleneck
                    ),
                });
            }
        }
        gpus.push(GpuPlan {
            gpu: index,
            pci: *addr,
            name: dev.name.clone(),
            numa_node: dev.numa_node,
            switch: topo.switch_of(dev),
            ports,
            connections: connections[gi].clone(),
            ceiling: ceilings[gi].clone(),
            warnings: gw,
        });
    }
    let used: Vec<String> = nic_ports
        .iter()
        .zip(&assignment.users)
        .filter(|(_, u)| !u.is_empty())
        .map(|(p, _)| format!("{}/{}", p.rdma, p.num))
        .collect();
    let unused_ports = all_port_names
        .into_iter()
        .filter(|n| !used.contains(n))
        .collect();
    let assigned: usize = drives.iter().map(Vec::len).sum();
    let unassigned_drives: Vec<String> = inventory.drives[assigned.min(inventory.drives.len())..]
        .iter()
        .map(|d| d.nqn.clone())
        .collect();
    if !unassigned_drives.is_empty() && !wanted.is_empty() {
        warnings.push(Warning {
            kind: WarningKind::DrivesLeftOver,
            message: format!(
                "{} drive(s) of the box are not placed ({} per GPU asked)",
                unassigned_drives.len(),
                opts.drives_per_gpu.unwrap_or(0)
            ),
        });
    }
    Ok(Plan {
        total_gbytes_per_sec: gpus
            .iter()
            .fold(0.0, |sum, g| sum + g.ceiling.gbytes_per_sec),
        gpus,
        unused_ports,
        unassigned_drives,
        warnings,
    })
}

/// The GPU's index among all GPUs of the machine.
fn gpu_index(topo: &Topology, addr: PciAddr) -> usize {
    topo.gpus()
        .position(|g| g.addr == addr)
        .unwrap_or(usize::MAX)
}

/// Drives dealt out in turn (drive i to GPU i mod n), so neighbouring drives of the box land on
/// different GPUs. Only the first `per_gpu * n` drives when a count per GPU is given.
fn deal_drives(
    drives: &[Drive],
    gpus: usize,
    per_gpu: Option<usize>,
) -> Result<Vec<Vec<Drive>>, PlaceError> {
    let mut out = vec![Vec::new(); gpus];
    if gpus == 0 {
        return Ok(out);
    }
    let take = match per_gpu {
        Some(k) if k * gpus > drives.len() => {
            return Err(PlaceError::NotEnoughDrives {
                per_gpu: k,
                gpus,
                have: drives.len(),
            })
        }
        Some(k) => k * gpus,
        None => drives.len(),
    };
    for (i, d) in drives[..take].iter().enumerate() {
        out[i % gpus].push(d.clone());
    }
    Ok(out)
}
