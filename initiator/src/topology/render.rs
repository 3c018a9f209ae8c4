//! `fabrik topo` output: the `nvidia-smi topo -m` style matrix, the PCI tree, and JSON.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde_json::{json, Value};

use super::{BridgeRole, DeviceKind, Distance, PciAddr, PciDevice, Topology};

/// One row/column of the matrix: a label, what it is, and the PCI function its data uses.
struct Entry {
    label: String,
    legend: Option<String>,
    pci: Option<PciAddr>,
}

fn entries(topo: &Topology) -> Vec<Entry> {
    let mut out: Vec<Entry> = topo
        .gpus()
        .enumerate()
        .map(|(i, g)| Entry {
            label: format!("GPU{i}"),
            legend: None,
            pci: Some(g.addr),
        })
        .collect();
    out.extend(topo.rdma.iter().enumerate().map(|(i, r)| Entry {
        label: format!("NIC{i}"),
        legend: Some(r.name.clone()),
        pci: r.pci,
    }));
    out.extend(topo.nvme.iter().enumerate().map(|(i, n)| Entry {
        label: format!("NVME{i}"),
        legend: Some(format!(
            "{} ({})",
            n.name,
            n.transport.as_deref().unwrap_or("?")
        )),
        pci: topo.nvme_path_device(n),
    }));
    out
}

fn distance(topo: &Topology, a: Option<PciAddr>, b: Option<PciAddr>) -> Option<Distance> {
    topo.distance(a?, b?)
}

/// The matrix of distance classes between GPUs, RDMA NICs and NVMe controllers.
pub fn render_matrix(topo: &Topology) -> String {
    let entries = entries(topo);
    let mut s = String::new();
    if entries.is_empty() {
        s.push_str("no GPU, RDMA NIC or NVMe controller found: nothing to show\n");
        return s;
    }
    let w = entries
        .iter()
        .map(|e| e.label.len())
        .max()
        .unwrap_or(4)
        .max(4)
        + 2;
    let _ = write!(s, "{:w$}", "");
    for e in &entries {
        let _ = write!(s, "{:<w$}", e.label);
    }
    let _ = writeln!(s, "{:<14}NUMA", "CPU Affinity");
    for a in &entries {
        let _ = write!(s, "{:<w$}", a.label);
        for b in &entries {
            let cell = distance(topo, a.pci, b.pci).map_or("?", |d| d.as_str());
            let cell = if cell == "X" { " X" } else { cell };
            let _ = write!(s, "{cell:<w$}");
        }
        let dev = a.pci.and_then(|p| topo.device(p));
        let cpus = dev.and_then(|d| d.local_cpulist.clone());
        let numa = dev.and_then(|d| d.numa_node).map(|n| n.to_string());
        let _ = writeln!(
            s,
            "{:<14}{}",
            cpus.as_deref().unwrap_or("N/A"),
            numa.as_deref().unwrap_or("N/A")
        );
    }
    s.push_str(
        "\nLegend:\n  X    = Self\n  SYS  = across the interconnect between NUMA nodes (sockets)\n  \
         NODE = between PCIe host bridges within a NUMA node\n  PHB  = through a PCIe host bridge (the CPU)\n  \
         PXB  = through several PCIe switches, not the host bridge\n  PIX  = through at most one PCIe switch\n",
    );
    let legends: Vec<&Entry> = entries.iter().filter(|e| e.legend.is_some()).collect();
    if !legends.is_empty() {
        s.push('\n');
        for e in legends {
            let _ = writeln!(s, "  {}: {}", e.label, e.legend.as_deref().unwrap_or(""));
        }
    }
    s
}

/// The PCI tree below each host bridge, with only the branches that lead to GPUs,
/// accelerators, NICs or NVMe drives.
pub fn render_tree(topo: &Topology) -> String {
    let interesting = |d: &PciDevice| {
        matches!(
            d.kind,
            DeviceKind::Gpu | DeviceKind::Accelerator | DeviceKind::Nic | DeviceKind::Nvme
        )
    };
    // Every bridge on the path to an interesting device is shown.
    let mut shown: BTreeMap<PciAddr, &PciDevice> = BTreeMap::new();
    for d in topo.pci.iter().filter(|d| interesting(d)) {
        shown.insert(d.addr, d);
        for p in &d.path {
            if let Some(b) = topo.device(*p) {
                shown.insert(b.addr, b);
            }
        }
    }
    let mut by_bridge: BTreeMap<(Option<u32>, &str), Vec<&PciDevice>> = BTreeMap::new();
    for d in shown.values() {
        by_bridge
            .entry((d.numa_node, d.host_bridge.as_str()))
            .or_default()
            .push(d);
    }
    let mut s = String::new();
    if by_bridge.is_empty() {
        s.push_str("no GPU, NIC or NVMe PCI function found\n");
    }
    for ((numa, hb), devs) in by_bridge {
        let numa = numa.map_or("?".to_string(), |n| n.to_string());
        let _ = writeln!(s, "NUMA {numa} {hb}");
        // Sorting by path order prints parents before children.
        let mut devs = devs;
        devs.sort_by(|a, b| {
            let ka: Vec<PciAddr> = a.path.iter().copied().chain([a.addr]).collect();
            let kb: Vec<PciAddr> = b.path.iter().copied().chain([b.addr]).collect();
            ka.cmp(&kb)
        });
        for d in devs {
            let depth = d.path.iter().filter(|p| shown.contains_key(p)).count();
            let _ = writeln!(s, "{}{}", "  ".repeat(depth + 1), describe(topo, d));
        }
    }
    s
}

fn describe(topo: &Topology, d: &PciDevice) -> String {
    let what = match d.kind {
        DeviceKind::Bridge(BridgeRole::SwitchUpstream) => "PCIe switch".to_string(),
        DeviceKind::Bridge(BridgeRole::SwitchDownstream) => "downstream port".to_string(),
        DeviceKind::Bridge(BridgeRole::RootPort) => "root port".to_string(),
        k => k.as_str().to_uppercase(),
    };
    let mut s = format!("{} {what} [{:04x}:{:04x}]", d.addr, d.vendor, d.device);
    if let Some(n) = &d.name {
        let _ = write!(s, " {n}");
    }
    let rdma: Vec<&str> = topo
        .rdma
        .iter()
        .filter(|r| r.pci == Some(d.addr))
        .map(|r| r.name.as_str())
        .collect();
    if !rdma.is_empty() {
        let _ = write!(s, " {}", rdma.join(","));
    }
    if let (Some(speed), Some(width)) =
        (d.link.max_speed_gts, d.link.cur_width.or(d.link.max_width))
    {
        let _ = write!(s, " ({speed} GT/s x{width}");
        if d.link.degraded_width() {
            let _ = write!(s, ", of x{}", d.link.max_width.unwrap_or(0));
        }
        s.push(')');
    }
    s
}

/// Devices with kind, PCI address, NUMA node and switch, and the distance class of every
/// GPU-NIC and GPU-NVMe pair.
pub fn to_json(topo: &Topology) -> Value {
    let devices: Vec<Value> = topo
        .pci
        .iter()
        .filter(|d| !matches!(d.kind, DeviceKind::Other))
        .map(|d| {
            json!({
                "kind": d.kind.as_str(),
                "pci": d.addr,
                "vendor": format!("0x{:04x}", d.vendor),
                "device": format!("0x{:04x}", d.device),
                "name": d.name,
                "memory_bytes": d.memory_bytes,
                "numa_node": d.numa_node,
                "local_cpulist": d.local_cpulist,
                "host_bridge": d.host_bridge,
                "switch": topo.switch_of(d),
                "link": d.link,
                "link_gbytes_per_sec": d.link.gbytes_per_sec(),
                "rdma": topo.rdma.iter().filter(|r| r.pci == Some(d.addr)).map(|r| &r.name).collect::<Vec<_>>(),
            })
        })
        .collect();
    let mut pairs = Vec::new();
    for (gi, g) in topo.gpus().enumerate() {
        for r in &topo.rdma {
            pairs.push(json!({
                "gpu": gi, "gpu_pci": g.addr, "kind": "nic", "name": r.name, "pci": r.pci,
                "distance": distance(topo, Some(g.addr), r.pci),
            }));
        }
        for n in &topo.nvme {
            let via = topo.nvme_path_device(n);
            pairs.push(json!({
                "gpu": gi, "gpu_pci": g.addr, "kind": "nvme", "name": n.name, "pci": via,
                "transport": n.transport,
                "distance": distance(topo, Some(g.addr), via),
            }));
        }
    }
    json!({
        "sysfs_root": topo.root,
        "notes": topo.notes,
        "devices": devices,
        "rdma": topo.rdma,
        "nvme": topo.nvme,
        "pairs": pairs,
    })
}
