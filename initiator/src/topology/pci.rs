//! PCI functions from `bus/pci/devices`: identity, kind, place in the tree, NUMA node, link.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::str::FromStr;

use serde::{Serialize, Serializer};

use super::read_attr;

/// A PCI function address, `DDDD:BB:DD.F` (VMD domains can be wider than 4 digits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PciAddr {
    pub domain: u32,
    pub bus: u8,
    pub dev: u8,
    pub func: u8,
}

impl PciAddr {
    /// The same physical device (all its functions share one link).
    pub fn slot(&self) -> (u32, u8, u8) {
        (self.domain, self.bus, self.dev)
    }
}

impl fmt::Display for PciAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.dev, self.func
        )
    }
}

impl FromStr for PciAddr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?} is not a PCI address (DDDD:BB:DD.F)");
        let (domain, rest) = s.split_once(':').ok_or_else(bad)?;
        let (bus, rest) = rest.split_once(':').ok_or_else(bad)?;
        let (dev, func) = rest.split_once('.').ok_or_else(bad)?;
        if bus.len() != 2 || dev.len() != 2 || func.len() != 1 {
            return Err(bad());
        }
        let addr = PciAddr {
            domain: u32::from_str_radix(domain, 16).map_err(|_| bad())?,
            bus: u8::from_str_radix(bus, 16).map_err(|_| bad())?,
            dev: u8::from_str_radix(dev, 16).map_err(|_| bad())?,
            func: u8::from_str_radix(func, 16).map_err(|_| bad())?,
        };
        if addr.dev > 0x1f || addr.func > 7 {
            return Err(bad());
        }
        Ok(addr)
    }
}

impl Serialize for PciAddr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BridgeRole {
    /// A port of the CPU's root complex.
    RootPort,
    /// The upstream port of a PCIe switch: it names the switch.
    SwitchUpstream,
    /// A downstream port of a PCIe switch.
    SwitchDownstream,
    /// A bridge that is not part of a switch (e.g. PCIe-to-PCI for a BMC's VGA).
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceKind {
    Gpu,
    /// A compute accelerator that is not a display-class GPU (class 0x0b40 or 0x1200).
    Accelerator,
    Nic,
    Nvme,
    Bridge(BridgeRole),
    Other,
}

impl DeviceKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            DeviceKind::Gpu => "gpu",
            DeviceKind::Accelerator => "accelerator",
            DeviceKind::Nic => "nic",
            DeviceKind::Nvme => "nvme",
            DeviceKind::Bridge(BridgeRole::RootPort) => "root_port",
            DeviceKind::Bridge(BridgeRole::SwitchUpstream) => "switch_upstream",
            DeviceKind::Bridge(BridgeRole::SwitchDownstream) => "switch_downstream",
            DeviceKind::Bridge(BridgeRole::Other) => "bridge",
            DeviceKind::Other => "other",
        }
    }
}

/// A PCIe link as the device's end reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Link {
    pub cur_speed_gts: Option<f64>,
    pub max_speed_gts: Option<f64>,
    pub cur_width: Option<u32>,
    pub max_width: Option<u32>,
}

impl Link {
    /// Usable bandwidth in GB/s: the maximum speed (GPUs lower the current one when idle) at the
    /// current width (a narrower width than the maximum is a fault: bad riser, bad slot). The
    /// line encoding is taken off, protocol overhead is not.
    pub fn gbytes_per_sec(&self) -> Option<f64> {
        let speed = self.max_speed_gts.or(self.cur_speed_gts)?;
        let width = self.cur_width.or(self.max_width)?;
        Some(lane_gbytes_per_sec(speed) * f64::from(width))
    }

    /// Trained narrower than it can be.
    pub fn degraded_width(&self) -> bool {
        matches!((self.cur_width, self.max_width), (Some(c), Some(m)) if c < m)
    }
}

fn lane_gbytes_per_sec(gts: f64) -> f64 {
    if gts < 8.0 {
        gts * 8.0 / 10.0 / 8.0 // 8b/10b
    } else if gts < 64.0 {
        gts * 128.0 / 130.0 / 8.0 // 128b/130b
    } else {
        gts * 242.0 / 256.0 / 8.0 // PCIe 6 FLIT mode
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct PciDevice {
    pub addr: PciAddr,
    #[serde(serialize_with = "hex24")]
    pub class: u32,
    #[serde(serialize_with = "hex16")]
    pub vendor: u16,
    #[serde(serialize_with = "hex16")]
    pub device: u16,
    pub kind: DeviceKind,
    /// The host bridge (root complex) it hangs off, e.g. `pci0000:17`.
    pub host_bridge: String,
    /// Bridges from the root port down to this device's parent.
    pub path: Vec<PciAddr>,
    pub numa_node: Option<u32>,
    pub local_cpulist: Option<String>,
    pub link: Link,
    pub driver: Option<String>,
    /// Marketing name where known (a small table of PCI ids, or NVML through `enrich_gpus`).
    pub name: Option<String>,
    pub memory_bytes: Option<u64>,
}

fn hex24<S: Serializer>(v: &u32, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&format_args!("0x{v:06x}"))
}

fn hex16<S: Serializer>(v: &u16, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&format_args!("0x{v:04x}"))
}

/// Reads every function under `bus/pci/devices`; unreadable entries are skipped with a note.
pub(super) fn read_all(root: &Path, notes: &mut Vec<String>) -> Vec<PciDevice> {
    let dir = root.join("bus/pci/devices");
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) => {
            notes.push(format!("no PCI devices: {}: {e}", dir.display()));
            return Vec::new();
        }
    };
    let mut devices = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        match read_one(&dir.join(&name), &name) {
            Ok(d) => devices.push(d),
            Err(why) => notes.push(format!("skipped PCI device {name}: {why}")),
        }
    }
    devices.sort_by_key(|d| d.addr);
    assign_bridge_roles(&mut devices);
    devices
}

fn read_one(link: &Path, name: &str) -> Result<PciDevice, String> {
    let addr: PciAddr = name.parse()?;
    let target = std::fs::read_link(link).map_err(|e| format!("not a symlink: {e}"))?;
    let (host_bridge, mut path) = parse_device_path(&target.to_string_lossy())
        .ok_or_else(|| format!("cannot parse its sysfs path {}", target.display()))?;
    if path.pop() != Some(addr) {
        return Err(format!(
            "sysfs path {} does not end in it",
            target.display()
        ));
    }
    let hex = |attr: &str| {
        read_attr(&link.join(attr))
            .and_then(|s| u32::from_str_radix(s.trim_start_matches("0x"), 16).ok())
    };
    let class = hex("class").ok_or("no class attribute")?;
    let vendor = hex("vendor").ok_or("no vendor attribute")? as u16;
    let device = hex("device").ok_or("no device attribute")? as u16;
    let numa_node = read_attr(&link.join("numa_node"))
        .and_then(|s| s.parse::<i64>().ok())
        .and_then(|n| u32::try_from(n).ok());
    let link_info = Link {
        cur_speed_gts: read_attr(&link.join("current_link_speed")).and_then(|s| parse_speed(&s)),
        max_speed_gts: read_attr(&link.join("max_link_speed")).and_then(|s| parse_speed(&s)),
        cur_width: read_attr(&link.join("current_link_width")).and_then(|s| parse_width(&s)),
        max_width: read_attr(&link.join("max_link_width")).and_then(|s| parse_width(&s)),
    };
    let driver = std::fs::read_link(link.join("driver"))
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
    let kind = kind_of(class, vendor);
    Ok(PciDevice {
        addr,
        class,
        vendor,
        device,
        kind,
        host_bridge,
        path,
        numa_node,
        local_cpulist: read_attr(&link.join("local_cpulist")).filter(|s| !s.is_empty()),
        link: link_info,
        driver,
        name: known_name(vendor, device).map(str::to_string),
        memory_bytes: None,
    })
}

/// Splits a canonical sysfs device path (`../../../devices/pci0000:17/0000:17:00.0/0000:18:00.0`)
/// into its host bridge and the PCI functions from the root port down to the device. The first
/// `pciDDDD:BB` segment names the root complex; later ones (VMD domains) are part of the chain.
pub fn parse_device_path(target: &str) -> Option<(String, Vec<PciAddr>)> {
    let mut host_bridge = None;
    let mut path = Vec::new();
    for seg in target.split('/') {
        if let Some(rest) = seg.strip_prefix("pci") {
            if host_bridge.is_none() && rest.contains(':') {
                host_bridge = Some(seg.to_string());
            }
        } else if let Ok(addr) = seg.parse::<PciAddr>() {
            path.push(addr);
        }
    }
    Some((host_bridge?, path)).filter(|(_, p)| !p.is_empty())
}

/// `"16.0 GT/s PCIe"`, `"8 GT/s"`, `"2.5 GT/s"`; `"Unknown"` is None.
fn parse_speed(s: &str) -> Option<f64> {
    s.split_whitespace()
        .next()?
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && *v > 0.0)
}

fn parse_width(s: &str) -> Option<u32> {
    s.trim_start_matches('x').parse().ok().filter(|w| *w > 0)
}

const VENDOR_NVIDIA: u16 = 0x10de;
const VENDOR_AMD: u16 = 0x1002;
const VENDOR_INTEL: u16 = 0x8086;

fn kind_of(class: u32, vendor: u16) -> DeviceKind {
    let base_sub = class >> 8;
    match base_sub {
        0x0302 => DeviceKind::Gpu,
        // VGA/other display controllers only count for GPU vendors (a BMC's VGA is not a GPU).
        0x0300 | 0x0380 if [VENDOR_NVIDIA, VENDOR_AMD, VENDOR_INTEL].contains(&vendor) => {
            DeviceKind::Gpu
        }
        0x0b40 | 0x1200 => DeviceKind::Accelerator,
        0x0200 | 0x0207 => DeviceKind::Nic,
        0x0108 => DeviceKind::Nvme,
        0x0604 => DeviceKind::Bridge(BridgeRole::Other),
        _ => DeviceKind::Other,
    }
}

/// Root ports hang off the host bridge; a bridge below a root port or downstream port is a
/// switch's upstream port when it has bridges below it; those are its downstream ports.
fn assign_bridge_roles(devices: &mut [PciDevice]) {
    let has_child_bridge: std::collections::HashSet<PciAddr> = devices
        .iter()
        .filter(|d| matches!(d.kind, DeviceKind::Bridge(_)))
        .filter_map(|d| d.path.last().copied())
        .collect();
    let mut order: Vec<usize> = (0..devices.len()).collect();
    order.sort_by_key(|&i| devices[i].path.len());
    let mut roles: HashMap<PciAddr, BridgeRole> = HashMap::new();
    for i in order {
        let d = &devices[i];
        if !matches!(d.kind, DeviceKind::Bridge(_)) {
            continue;
        }
        let role = match d.path.last() {
            None => BridgeRole::RootPort,
            Some(parent) => match roles.get(parent) {
                Some(BridgeRole::SwitchUpstream) => BridgeRole::SwitchDownstream,
                Some(BridgeRole::RootPort | BridgeRole::SwitchDownstream) | None
                    if has_child_bridge.contains(&d.addr) =>
                {
                    BridgeRole::SwitchUpstream
                }
                _ => BridgeRole::Other,
            },
        };
        roles.insert(d.addr, role);
        devices[i].kind = DeviceKind::Bridge(role);
    }
}

/// Names of devices a GPU server is likely to hold, so the tables say more than ids.
fn known_name(vendor: u16, device: u16) -> Option<&'static str> {
    Some(match (vendor, device) {
        (0x10de, 0x2330) => "NVIDIA H100 SXM5",
        (0x10de, 0x2331) => "NVIDIA H100 PCIe",
        (0x10de, 0x2335) => "NVIDIA H200",
        (0x10de, 0x2339) => "NVIDIA H100 NVL",
        (0x10de, 0x20b0) => "NVIDIA A100 SXM4 40GB",
        (0x10de, 0x20b2) => "NVIDIA A100 SXM4 80GB",
        (0x10de, 0x20b5) => "NVIDIA A100 PCIe 80GB",
        (0x10de, 0x26b1) => "NVIDIA RTX 6000 Ada",
        (0x10de, 0x2901) => "NVIDIA B200",
        (0x15b3, 0x1013) => "Mellanox ConnectX-4",
        (0x15b3, 0x101b) => "Mellanox ConnectX-6",
        (0x15b3, 0x101d) => "Mellanox ConnectX-6 Dx",
        (0x15b3, 0x1021) => "NVIDIA ConnectX-7",
        (0x15b3, 0x1023) => "NVIDIA ConnectX-8",
        (0x10b5, _) => "Broadcom/PLX PCIe switch",
        (0x1000, 0xc010 | 0xc030 | 0xc040) => "Broadcom PEX88xxx/89xxx PCIe switch",
        (0x11f8, _) => "Microchip Switchtec PCIe switch",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_canonical_paths() {
        let (hb, path) = parse_device_path(
            "../../../devices/pci0000:17/0000:17:00.0/0000:18:00.0/0000:19:04.0/0000:1a:00.0",
        )
        .unwrap();
        assert_eq!(hb, "pci0000:17");
        let names: Vec<String> = path.iter().map(|a| a.to_string()).collect();
        assert_eq!(
            names,
            [
                "0000:17:00.0",
                "0000:18:00.0",
                "0000:19:04.0",
                "0000:1a:00.0"
            ]
        );
        // A VMD domain behind a root-complex device keeps the first host bridge.
        let (hb, path) = parse_device_path(
            "/sys/devices/pci0000:00/0000:00:0e.0/pci10000:e0/10000:e0:06.0/10000:e1:00.0",
        )
        .unwrap();
        assert_eq!(hb, "pci0000:00");
        assert_eq!(path.len(), 3);
        assert_eq!(path[2].to_string(), "10000:e1:00.0");
        assert!(parse_device_path("../../../devices/platform/serial8250").is_none());
    }

    #[test]
    fn rejects_bad_addresses() {
        for bad in [
            "",
            "0000:17:00",
            "0000:17:20.0",
            "0000:17:00.8",
            "zz:17:00.0",
            "0000:170:00.0",
        ] {
            assert!(bad.parse::<PciAddr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn link_bandwidth() {
        let gen5x16 = Link {
            cur_speed_gts: Some(2.5), // an idle GPU
            max_speed_gts: Some(32.0),
            cur_width: Some(16),
            max_width: Some(16),
        };
        let bw = gen5x16.gbytes_per_sec().unwrap();
        assert!((bw - 63.015).abs() < 0.01, "{bw}");
        let x8 = Link {
            cur_width: Some(8),
            ..gen5x16
        };
        assert!(x8.degraded_width());
        assert!((x8.gbytes_per_sec().unwrap() - 31.5).abs() < 0.01);
        assert_eq!(parse_speed("Unknown"), None);
        assert_eq!(parse_speed("inf GT/s"), None);
        assert_eq!(parse_speed("16.0 GT/s PCIe"), Some(16.0));
    }

    #[test]
    fn display_controllers_of_bmcs_are_not_gpus() {
        assert_eq!(kind_of(0x030000, 0x1a03), DeviceKind::Other);
        assert_eq!(kind_of(0x030000, 0x10de), DeviceKind::Gpu);
        assert_eq!(kind_of(0x030200, 0x1234), DeviceKind::Gpu);
        assert_eq!(kind_of(0x0b4000, 0x1bcf), DeviceKind::Accelerator);
        assert_eq!(kind_of(0x010802, 0x144d), DeviceKind::Nvme);
    }
}
