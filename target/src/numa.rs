//! Where things sit on a machine of several NUMA nodes: the node of a core, and of the NIC
//! that holds a local IP address, read from sysfs. Reactors serve a connection on a core of the
//! node its NIC is attached to (`Reactors::place_near_nic`), so that its packets, its buffers
//! and its thread share one memory controller. What cannot be known (loopback, a virtual NIC
//! such as Soft-RoCE's, a single-node machine, no sysfs) is None, and placement goes by load
//! alone.

use std::net::IpAddr;
use std::path::Path;

/// Where the kernel's sysfs is mounted.
pub const SYSFS: &str = "/sys";

/// The NUMA node of CPU `cpu`: the `nodeN` entry of its sysfs directory.
pub fn node_of_cpu(sys: &Path, cpu: usize) -> Option<u32> {
    let dir = sys.join(format!("devices/system/cpu/cpu{cpu}"));
    std::fs::read_dir(dir).ok()?.flatten().find_map(|entry| {
        entry
            .file_name()
            .to_str()?
            .strip_prefix("node")?
            .parse()
            .ok()
    })
}

/// The NUMA node of network interface `name`'s device. None for an interface without a
/// device (loopback, bridges, Soft-RoCE's) or whose device reports none (-1).
pub fn node_of_interface(sys: &Path, name: &str) -> Option<u32> {
    let node = std::fs::read_to_string(sys.join(format!("class/net/{name}/device/numa_node")));
    let node: i64 = node.ok()?.trim().parse().ok()?;
    u32::try_from(node).ok()
}

/// The interface that holds local address `ip` (where a connection arrived).
pub fn interface_of(ip: IpAddr) -> Option<String> {
    let ip = ip.to_canonical();
    if_addrs::get_if_addrs()
        .ok()?
        .into_iter()
        .find(|interface| interface.ip() == ip)
        .map(|interface| interface.name)
}

/// The NUMA node of the NIC through which connections to local address `ip` arrive.
pub fn node_of_local_address(sys: &Path, ip: IpAddr) -> Option<u32> {
    node_of_interface(sys, &interface_of(ip)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_are_read_from_sysfs_and_unknown_is_none() {
        let sys = tempfile::tempdir().unwrap();
        let cpu3 = sys.path().join("devices/system/cpu/cpu3");
        std::fs::create_dir_all(cpu3.join("node1")).unwrap();
        std::fs::create_dir_all(cpu3.join("cache")).unwrap();
        assert_eq!(node_of_cpu(sys.path(), 3), Some(1));
        assert_eq!(node_of_cpu(sys.path(), 4), None, "no such CPU");

        for (name, content, node) in [("eth0", "1\n", Some(1)), ("eth1", "-1\n", None)] {
            let device = sys.path().join(format!("class/net/{name}/device"));
            std::fs::create_dir_all(&device).unwrap();
            std::fs::write(device.join("numa_node"), content).unwrap();
            assert_eq!(node_of_interface(sys.path(), name), node, "{name}");
        }
        assert_eq!(node_of_interface(sys.path(), "lo"), None, "no device");
    }

    #[test]
    fn a_local_address_leads_to_its_interface() {
        let lo = interface_of("127.0.0.1".parse().unwrap());
        assert_eq!(lo.as_deref(), Some("lo"));
        // An IPv4 address as a dual-stack socket reports it.
        let mapped = interface_of("::ffff:127.0.0.1".parse().unwrap());
        assert_eq!(mapped.as_deref(), Some("lo"));
        assert_eq!(interface_of("192.0.2.77".parse().unwrap()), None);

        let sys = tempfile::tempdir().unwrap();
        let device = sys.path().join("class/net/lo/device");
        std::fs::create_dir_all(&device).unwrap();
        std::fs::write(device.join("numa_node"), "0\n").unwrap();
        let ip = "127.0.0.1".parse().unwrap();
        assert_eq!(node_of_local_address(sys.path(), ip), Some(0));
    }
}
