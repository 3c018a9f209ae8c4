//! How CSI's names map onto fabrik's: volume names and IDs, node IDs and host NQNs, topology.

use sha2::{Digest, Sha256};

/// The driver's name: what StorageClasses name as their provisioner.
pub const DRIVER_NAME: &str = "csi.fabrik.io";
/// The topology key: volumes on a box with a rack are reachable from that rack's nodes.
pub const RACK_KEY: &str = "topology.fabrik.io/rack";
/// Where a node's host NQN comes from when its ID is a node name, not an NQN.
pub const NODE_NQN_PREFIX: &str = "nqn.2024-01.io.fabrik:node:";
/// What every fabrik volume the driver makes is named with (and no other is).
const VOLUME_PREFIX: &str = "csi-";

/// The fabrik volume for the CSI volume `name`. CSI names run to 128 characters and more, a
/// volume name to 32, so it is a digest: the same name always gives the same volume, which is
/// what makes CreateVolume idempotent without a database (96 bits: no collision to fear).
pub fn volume_name(csi_name: &str) -> String {
    let digest = Sha256::digest(csi_name.as_bytes());
    let hex: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
    format!("{VOLUME_PREFIX}{hex}")
}

/// Whether a fabrik volume is one of the driver's.
pub fn is_driver_volume(name: &str) -> bool {
    name.strip_prefix(VOLUME_PREFIX)
        .is_some_and(|h| h.len() == 24 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The fabrik volume name inside a CSI volume ID (the volume's subsystem NQN,
/// `nqn.2024-01.io.fabrik:<box>:vol-<name>`), if it is one of the driver's.
pub fn volume_of_id(volume_id: &str) -> Option<&str> {
    let (_, name) = volume_id.rsplit_once(":vol-")?;
    (volume_id.starts_with("nqn.") && is_driver_volume(name)).then_some(name)
}

/// The node ID a node plugin reports: the host NQN its kernel connects as. A Kubernetes node
/// name becomes `nqn.2024-01.io.fabrik:node:<name>`; an NQN is taken as it is.
pub fn node_id(node: &str) -> Result<String, String> {
    let nqn = if node.starts_with("nqn.") {
        node.to_string()
    } else {
        format!("{NODE_NQN_PREFIX}{node}")
    };
    check_node_id(&nqn)?;
    Ok(nqn)
}

/// A node ID names a node only if it is a host NQN (what `node_id` makes): the box composes
/// volumes to it. The NVMe naming rules (as the box checks them), and no space: nvme-cli takes
/// it as one argument.
pub fn check_node_id(id: &str) -> Result<(), String> {
    fabrik_proto::fabrics::nqn::Nqn::new(id).map_err(|e| {
        format!("node ID {id:?} is not a host NQN (what this driver's node plugin reports): {e}")
    })?;
    if let Some(c) = id.chars().find(|c| !c.is_ascii_graphic()) {
        return Err(format!("node ID {id:?} holds {c:?}"));
    }
    Ok(())
}

/// The host ID (a UUID) the node connects with for host NQN `nqn`: derived from it, so it is the
/// same at every connect and differs between NQNs (Linux refuses one host ID under two NQNs).
pub fn host_id(nqn: &str) -> String {
    let d = Sha256::digest(nqn.as_bytes());
    let mut b = [0u8; 16];
    b.copy_from_slice(&d[..16]);
    b[6] = (b[6] & 0x0f) | 0x80; // version 8: custom
    b[8] = (b[8] & 0x3f) | 0x80; // RFC 4122 variant
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volume_names_are_stable_short_and_recognized() {
        let a = volume_name("pvc-0b3f");
        assert_eq!(a, volume_name("pvc-0b3f"));
        assert_ne!(a, volume_name("pvc-0b3e"));
        assert_eq!(a.len(), 28);
        assert!(is_driver_volume(&a));
        assert!(!is_driver_volume("csi-nothex"));
        assert!(!is_driver_volume("r5"));
        let id = format!("nqn.2024-01.io.fabrik:box-a:vol-{a}");
        assert_eq!(volume_of_id(&id), Some(a.as_str()));
        assert_eq!(volume_of_id("nqn.2024-01.io.fabrik:box-a:vol-r5"), None);
        assert_eq!(volume_of_id("some-id"), None);
    }

    #[test]
    fn node_ids_are_host_nqns() {
        assert_eq!(
            node_id("gpu-3").unwrap(),
            "nqn.2024-01.io.fabrik:node:gpu-3"
        );
        let nqn = "nqn.2014-08.org.nvmexpress:uuid:1b4e28ba-2fa1-11d2-883f-0016d3cca427";
        assert_eq!(node_id(nqn).unwrap(), nqn);
        assert!(node_id("a b").is_err());
        assert!(check_node_id("some-fake-node-id").is_err());
        assert!(check_node_id("nqn.x").is_err(), "the NVMe naming rules");
        let id = host_id(nqn);
        assert_eq!(id.len(), 36);
        assert_eq!(id, host_id(nqn));
        assert_ne!(id, host_id("nqn.2024-01.io.fabrik:node:gpu-3"));
    }
}
