//! NVMe controllers from `class/nvme`: local PCIe drives and NVMe-oF controllers with the
//! address and host interface they use.

use std::path::Path;

use serde::Serialize;

use super::rdma::{list_dir, natural_key};
use super::{read_attr, PciAddr};

#[derive(Debug, Clone, Serialize)]
pub struct NvmeController {
    /// `nvme0`.
    pub name: String,
    /// `pcie`, `tcp`, `rdma`, `fc`, `loop`.
    pub transport: Option<String>,
    /// The raw `address` attribute.
    pub address: Option<String>,
    pub subsysnqn: Option<String>,
    pub model: Option<String>,
    pub state: Option<String>,
    /// The PCI function of a local (PCIe) controller.
    pub pci: Option<PciAddr>,
    /// Fabrics: `traddr=`, `trsvcid=`, `host_traddr=` (or TCP's `src_addr=`), `host_iface=`.
    pub traddr: Option<String>,
    pub trsvcid: Option<String>,
    pub host_traddr: Option<String>,
    pub host_iface: Option<String>,
}

pub(super) fn read_all(root: &Path, _notes: &mut [String]) -> Vec<NvmeController> {
    let dir = root.join("class/nvme");
    let mut out: Vec<NvmeController> = list_dir(&dir)
        .into_iter()
        .map(|name| read_one(&dir.join(&name), name))
        .collect();
    out.sort_by_key(|a| natural_key(&a.name));
    out
}

fn read_one(base: &Path, name: String) -> NvmeController {
    let transport = read_attr(&base.join("transport"));
    let address = read_attr(&base.join("address"));
    let pci = if transport.as_deref() == Some("pcie") {
        std::fs::read_link(base.join("device"))
            .ok()
            .and_then(|p| p.file_name()?.to_str()?.parse().ok())
            .or_else(|| address.as_deref()?.parse().ok())
    } else {
        None
    };
    let field = |key: &str| -> Option<String> {
        address.as_deref()?.split(',').find_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            (k.trim() == key).then(|| v.trim().to_string())
        })
    };
    NvmeController {
        pci,
        traddr: field("traddr"),
        trsvcid: field("trsvcid"),
        host_traddr: field("host_traddr").or_else(|| field("src_addr")),
        host_iface: field("host_iface"),
        transport,
        subsysnqn: read_attr(&base.join("subsysnqn")),
        model: read_attr(&base.join("model")),
        state: read_attr(&base.join("state")),
        address,
        name,
    }
}
