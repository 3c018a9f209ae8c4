//! RDMA devices from `class/infiniband`: their PCI function, ports, port rate, net devices and
//! the IP addresses in their GID tables (RoCE).

use std::net::{IpAddr, Ipv6Addr};
use std::path::Path;

use serde::Serialize;

use super::{read_attr, PciAddr, PciDevice};

#[derive(Debug, Clone, Serialize)]
pub struct RdmaDevice {
    /// `mlx5_0`.
    pub name: String,
    pub pci: Option<PciAddr>,
    pub ports: Vec<RdmaPort>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RdmaPort {
    pub num: u32,
    /// `ACTIVE`, `DOWN`, ... (the text after `N: `).
    pub state: Option<String>,
    /// `Ethernet` (RoCE) or `InfiniBand`.
    pub link_layer: Option<String>,
    /// Signalling rate in Gb/s (`ports/N/rate`).
    pub rate_gbps: Option<f64>,
    /// The net device of the port (from the GID table, else the PCI function's `net/`).
    pub netdev: Option<String>,
    /// IP addresses found in the GID table, in GID order, without repeats.
    pub addrs: Vec<IpAddr>,
}

impl RdmaPort {
    pub fn active(&self) -> bool {
        self.state.as_deref() == Some("ACTIVE")
    }

    /// The port's rate in GB/s.
    pub fn gbytes_per_sec(&self) -> Option<f64> {
        self.rate_gbps.map(|g| g / 8.0)
    }
}

pub(super) fn read_all(root: &Path, pci: &[PciDevice], notes: &mut Vec<String>) -> Vec<RdmaDevice> {
    let dir = root.join("class/infiniband");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let base = dir.join(&name);
        let pci_addr = std::fs::read_link(base.join("device"))
            .ok()
            .and_then(|p| p.file_name()?.to_str()?.parse::<PciAddr>().ok());
        match pci_addr {
            None => notes.push(format!(
                "RDMA device {name} has no PCI function (software RDMA?)"
            )),
            Some(a) if pci.binary_search_by(|d| d.addr.cmp(&a)).is_err() => notes.push(format!(
                "RDMA device {name} points at {a}, which is not in bus/pci/devices"
            )),
            Some(_) => {}
        }
        let pci_netdevs = list_dir(&base.join("device/net"));
        let mut ports = Vec::new();
        for port in list_dir(&base.join("ports")) {
            let Ok(num) = port.parse::<u32>() else {
                continue;
            };
            ports.push(read_port(
                &base.join("ports").join(&port),
                num,
                &pci_netdevs,
            ));
        }
        ports.sort_by_key(|p| p.num);
        out.push(RdmaDevice {
            name,
            pci: pci_addr,
            ports,
        });
    }
    out.sort_by_key(|a| natural_key(&a.name));
    out
}

fn read_port(dir: &Path, num: u32, pci_netdevs: &[String]) -> RdmaPort {
    let state = read_attr(&dir.join("state")).map(|s| {
        s.split_once(':')
            .map_or(s.clone(), |(_, t)| t.trim().to_string())
    });
    let rate_gbps = read_attr(&dir.join("rate"))
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .filter(|r| r.is_finite() && *r > 0.0);
    let mut addrs = Vec::new();
    let mut gid_netdev = None;
    let mut gids: Vec<(u32, String)> = list_dir(&dir.join("gids"))
        .into_iter()
        .filter_map(|i| Some((i.parse().ok()?, i)))
        .collect();
    gids.sort();
    for (_, idx) in gids {
        let Some(ip) = read_attr(&dir.join("gids").join(&idx)).and_then(|g| gid_ip(&g)) else {
            continue;
        };
        if gid_netdev.is_none() {
            gid_netdev = read_attr(&dir.join("gid_attrs/ndevs").join(&idx));
        }
        if !addrs.contains(&ip) {
            addrs.push(ip);
        }
    }
    // One net device per PCI function (mlx5): the port's, when the GID table does not say.
    let netdev = gid_netdev.or_else(|| (pci_netdevs.len() == 1).then(|| pci_netdevs[0].clone()));
    RdmaPort {
        num,
        state,
        link_layer: read_attr(&dir.join("link_layer")),
        rate_gbps,
        netdev,
        addrs,
    }
}

/// A RoCE GID holds an IP address: IPv4-mapped for IPv4, the address itself for IPv6 (but not
/// the link-local GID made from the MAC, and not the empty entries).
fn gid_ip(gid: &str) -> Option<IpAddr> {
    let v6: Ipv6Addr = gid.parse().ok()?;
    if v6.is_unspecified() || v6.segments()[0] == 0xfe80 {
        return None;
    }
    Some(match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    })
}

pub(super) fn list_dir(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|e| {
            e.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// `mlx5_2` before `mlx5_10`.
pub(super) fn natural_key(name: &str) -> (String, u64) {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (stem, num) = name.split_at(name.len() - digits);
    (stem.to_string(), num.parse().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gid_addresses() {
        assert_eq!(
            gid_ip("0000:0000:0000:0000:0000:ffff:0a00:0001"),
            Some("10.0.0.1".parse().unwrap())
        );
        assert_eq!(gid_ip("fe80:0000:0000:0000:a288:c2ff:fe01:0203"), None);
        assert_eq!(gid_ip("0000:0000:0000:0000:0000:0000:0000:0000"), None);
        assert_eq!(
            gid_ip("fd00:0000:0000:0000:0000:0000:0000:0005"),
            Some("fd00::5".parse().unwrap())
        );
    }

    #[test]
    fn natural_order() {
        let mut names = vec!["mlx5_10", "mlx5_2", "mlx5_0"];
        names.sort_by_key(|n| natural_key(n));
        assert_eq!(names, ["mlx5_0", "mlx5_2", "mlx5_10"]);
    }
}
