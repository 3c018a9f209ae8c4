//! The local machine's PCIe/NUMA topology as sysfs shows it: GPUs, RDMA NICs, NVMe controllers,
//! the PCIe switches between them and the distance classes of `nvidia-smi topo -m`.
//!
//! Everything is read under a configurable root (`/sys` on a real machine, a fixture tree in
//! tests). What is missing is not an error: a machine without GPUs or RDMA NICs yields an empty
//! list and a line in [`Topology::notes`] saying so.

pub(crate) mod distance;
mod nvme;
mod pci;
mod rdma;
mod render;

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;

pub use distance::Distance;
pub use nvme::NvmeController;
pub use pci::{BridgeRole, DeviceKind, Link, PciAddr, PciDevice};
pub use rdma::{RdmaDevice, RdmaPort};
pub use render::{render_matrix, render_tree, to_json};

/// Optional GPU details from a richer source than sysfs (NVML, when it is present).
#[derive(Debug, Clone, Default, Serialize)]
pub struct GpuInfo {
    pub name: Option<String>,
    pub memory_bytes: Option<u64>,
}

/// Everything read from one sysfs root.
#[derive(Debug, Clone, Serialize)]
pub struct Topology {
    /// The sysfs root it was read from.
    pub root: PathBuf,
    /// All PCI functions, sorted by address.
    pub pci: Vec<PciDevice>,
    /// RDMA devices (`class/infiniband`), sorted by name.
    pub rdma: Vec<RdmaDevice>,
    /// NVMe controllers (`class/nvme`), sorted by name.
    pub nvme: Vec<NvmeController>,
    /// Plain statements about what was not found or could not be read.
    pub notes: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error("{0} is not a sysfs tree: {1} does not exist")]
    NotSysfs(PathBuf, PathBuf),
}

impl Topology {
    /// Reads the topology under `root` (normally `/sys`).
    pub fn read(root: &Path) -> Result<Topology, TopologyError> {
        if !root.join("devices").is_dir() {
            return Err(TopologyError::NotSysfs(
                root.to_path_buf(),
                root.join("devices"),
            ));
        }
        let mut notes = Vec::new();
        let pci = pci::read_all(root, &mut notes);
        let rdma = rdma::read_all(root, &pci, &mut notes);
        let nvme = nvme::read_all(root, &mut notes);
        let mut topo = Topology {
            root: root.to_path_buf(),
            pci,
            rdma,
            nvme,
            notes,
        };
        if topo.gpus().next().is_none() {
            topo.notes.push(format!(
                "no GPU or accelerator found under {} (PCI class 0x0300/0x0302 of a GPU vendor, 0x0b40, 0x1200)",
                root.join("bus/pci/devices").display()
            ));
        }
        if let Some(why) = virtual_machine(root, &topo.pci) {
            topo.notes.push(format!(
                "this looks like a virtual machine ({why}): its PCI tree may hide the host's PCIe \
                 switches and NUMA nodes, so distances can read worse than they are on the host"
            ));
        }
        if topo.rdma.is_empty() {
            topo.notes.push(format!(
                "no RDMA NIC found ({} is empty or missing)",
                root.join("class/infiniband").display()
            ));
        }
        Ok(topo)
    }

    pub fn device(&self, addr: PciAddr) -> Option<&PciDevice> {
        self.pci
            .binary_search_by(|d| d.addr.cmp(&addr))
            .ok()
            .map(|i| &self.pci[i])
    }

    /// GPUs and other accelerators, in PCI address order (the order `nvidia-smi` numbers them).
    pub fn gpus(&self) -> impl Iterator<Item = &PciDevice> {
        self.pci
            .iter()
            .filter(|d| matches!(d.kind, DeviceKind::Gpu | DeviceKind::Accelerator))
    }

    /// Adds details from another source (NVML) to each GPU; `lookup` returns None for GPUs it
    /// does not know. This is the hook for `nvml-wrapper`, which this crate does not depend on yet.
    pub fn enrich_gpus(&mut self, lookup: impl Fn(PciAddr) -> Option<GpuInfo>) {
        for dev in &mut self.pci {
            if matches!(dev.kind, DeviceKind::Gpu | DeviceKind::Accelerator) {
                if let Some(info) = lookup(dev.addr) {
                    if info.name.is_some() {
                        dev.name = info.name;
                    }
                    dev.memory_bytes = info.memory_bytes;
                }
            }
        }
    }

    /// The distance class between two PCI functions.
    pub fn distance(&self, a: PciAddr, b: PciAddr) -> Option<Distance> {
        Some(distance::between(self, self.device(a)?, self.device(b)?))
    }

    /// The PCI function an NVMe controller's data flows through: the drive itself for PCIe, the
    /// NIC of its host interface or host address for fabrics.
    pub fn nvme_path_device(&self, ctrl: &NvmeController) -> Option<PciAddr> {
        if let Some(pci) = ctrl.pci {
            return Some(pci);
        }
        let by_iface = ctrl.host_iface.as_deref().and_then(|iface| {
            self.rdma
                .iter()
                .find(|r| r.ports.iter().any(|p| p.netdev.as_deref() == Some(iface)))
        });
        let by_addr = || {
            let ip = ctrl.host_traddr.as_deref()?.parse().ok()?;
            self.rdma
                .iter()
                .find(|r| r.ports.iter().any(|p| p.addrs.contains(&ip)))
        };
        by_iface.or_else(by_addr).and_then(|r| r.pci)
    }

    /// The PCIe switch (its upstream port) a device sits under, nearest first.
    pub fn switch_of(&self, dev: &PciDevice) -> Option<PciAddr> {
        dev.path.iter().rev().find_map(|a| self.switch_of_port(*a))
    }

    /// The switch a bridge belongs to (the upstream port's address), None for root ports.
    pub(crate) fn switch_of_port(&self, addr: PciAddr) -> Option<PciAddr> {
        let port = self.device(addr)?;
        match port.kind {
            DeviceKind::Bridge(BridgeRole::SwitchUpstream) => Some(addr),
            DeviceKind::Bridge(BridgeRole::SwitchDownstream) => port.path.last().copied(),
            _ => None,
        }
    }
}

impl fmt::Display for Distance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why the machine looks virtual: its DMI vendor or product, or a hypervisor's PCI devices.
fn virtual_machine(root: &Path, pci: &[PciDevice]) -> Option<String> {
    const DMI: [&str; 6] = [
        "QEMU",
        "KVM",
        "VMware",
        "VirtualBox",
        "Xen",
        "Virtual Machine",
    ];
    for attr in ["sys_vendor", "product_name"] {
        if let Some(v) = read_attr(&root.join("class/dmi/id").join(attr)) {
            if DMI.iter().any(|d| v.contains(d)) {
                return Some(format!("DMI {attr} {v:?}"));
            }
        }
    }
    // virtio, QEMU/Red Hat bridges, VMware, Hyper-V, Xen.
    const VENDORS: [u16; 5] = [0x1af4, 0x1b36, 0x15ad, 0x1414, 0x5853];
    pci.iter()
        .find(|d| VENDORS.contains(&d.vendor))
        .map(|d| format!("PCI device {} [{:04x}:{:04x}]", d.addr, d.vendor, d.device))
}

/// Reads a small sysfs attribute, trimmed; None when absent or unreadable.
pub(crate) fn read_attr(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}
