//! Which volume capabilities the driver serves: a volume is one node's (it is composed to one
//! host), as a raw block device or an ext4 or XFS filesystem.

use crate::pb::volume_capability::{access_mode::Mode, AccessType};
use crate::pb::VolumeCapability;

/// Filesystems the node plugin makes and mounts ("" means ext4).
pub const FILESYSTEMS: [&str; 2] = ["ext4", "xfs"];

/// Why `cap` is not served, if it is not.
pub fn check(cap: &VolumeCapability) -> Result<(), String> {
    let mode = cap
        .access_mode
        .map(|m| Mode::try_from(m.mode).unwrap_or(Mode::Unknown))
        .unwrap_or(Mode::Unknown);
    match mode {
        Mode::SingleNodeWriter
        | Mode::SingleNodeReaderOnly
        | Mode::SingleNodeSingleWriter
        | Mode::SingleNodeMultiWriter => {}
        Mode::Unknown => return Err("a volume capability has no access mode".into()),
        other => {
            return Err(format!(
                "access mode {} is not served: a volume is one node's",
                other.as_str_name()
            ))
        }
    }
    match &cap.access_type {
        None => Err("a volume capability has no access type (block or mount)".into()),
        Some(AccessType::Block(_)) => Ok(()),
        Some(AccessType::Mount(m)) => {
            if m.fs_type.is_empty() || FILESYSTEMS.contains(&m.fs_type.as_str()) {
                Ok(())
            } else {
                Err(format!(
                    "filesystem {:?} is not served: ext4 or xfs",
                    m.fs_type
                ))
            }
        }
    }
}

/// Whether the capability is read-only by its access mode.
pub fn read_only(cap: &VolumeCapability) -> bool {
    cap.access_mode
        .is_some_and(|m| m.mode == Mode::SingleNodeReaderOnly as i32)
}

/// Checks every capability of a request; none is an error too.
pub fn check_all(caps: &[VolumeCapability]) -> Result<(), String> {
    if caps.is_empty() {
        return Err("no volume capabilities given".into());
    }
    caps.iter().try_for_each(check)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::volume_capability::{AccessMode, BlockVolume, MountVolume};

    fn cap(mode: Mode, access: Option<AccessType>) -> VolumeCapability {
        VolumeCapability {
            access_mode: Some(AccessMode { mode: mode as i32 }),
            access_type: access,
        }
    }

    fn mount(fs: &str) -> Option<AccessType> {
        Some(AccessType::Mount(MountVolume {
            fs_type: fs.into(),
            ..Default::default()
        }))
    }

    #[test]
    fn one_node_block_or_ext4_or_xfs() {
        let block = Some(AccessType::Block(BlockVolume {}));
        assert!(check(&cap(Mode::SingleNodeWriter, block.clone())).is_ok());
        assert!(check(&cap(Mode::SingleNodeMultiWriter, mount(""))).is_ok());
        assert!(check(&cap(Mode::SingleNodeReaderOnly, mount("xfs"))).is_ok());
        assert!(read_only(&cap(Mode::SingleNodeReaderOnly, mount("xfs"))));
        let e = check(&cap(Mode::MultiNodeMultiWriter, block)).unwrap_err();
        assert!(e.contains("one node's"), "{e}");
        assert!(check(&cap(Mode::SingleNodeWriter, mount("btrfs")))
            .unwrap_err()
            .contains("btrfs"));
        assert!(check(&cap(Mode::SingleNodeWriter, None)).is_err());
        assert!(check(&cap(Mode::Unknown, mount(""))).is_err());
        assert!(check_all(&[]).is_err());
    }
}
