//! Volumes as the state keeps them: the layout (level, strip, members in order), which members
//! failed, and the subsystems their drives were served by before, given back on delete.

use serde::{Deserialize, Serialize};

use super::SubsystemState;
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::backend::guard::Guarded;
use crate::backend::Drive;
use crate::raid::volume::MemberState;
use crate::raid::{Layout, Level, MemberSpec};

/// Longest volume name.
pub const NAME_LEN: usize = 32;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct VolumeState {
    pub name: String,
    /// Random per volume, on each member's superblock.
    pub uuid: String,
    pub level: Level,
    pub strip_kib: u64,
    /// Member drives, in layout order.
    pub drives: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spares: Vec<String>,
    /// Members failed (by drive ID): never read again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<String>,
    /// The spare now in a failed member's place, being rebuilt (from the start again after a
    /// restart).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebuilding: Option<String>,
    /// How fast a rebuild may write, in MiB/s (None: as fast as it can).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebuild_mib_per_sec: Option<u64>,
    /// What it serves, when less than its drives hold (whole stripes: rounded up to one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<u64>,
    /// Served to no host till one is allowed or composed (else to any host, as drives are).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub closed: bool,
    /// Changes of its members so far (see `raid::Volume::generation`).
    #[serde(default, skip_serializing_if = "super::is_zero")]
    pub generation: u64,
    /// False until its members were initialized: a volume whose making a crash cut short is
    /// made again at the next start.
    pub created: bool,
    /// The subsystems that served its drives alone before, restored when it is deleted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub took: Vec<SubsystemState>,
}

impl VolumeState {
    /// What compositions, namespaces and metrics name it by.
    pub fn id(&self) -> String {
        volume_id(&self.name)
    }

    /// The state member drive `d` starts in.
    pub fn member_state(&self, d: &str) -> MemberState {
        if self.failed.iter().any(|f| f == d) {
            MemberState::Failed
        } else if self.rebuilding.as_deref() == Some(d) {
            MemberState::Rebuilding
        } else {
            MemberState::Active
        }
    }

    /// Its members as the volume takes them, from the opened drives.
    pub fn member_specs(
        &self,
        drives: &BTreeMap<String, Arc<Guarded>>,
    ) -> Result<Vec<MemberSpec>, String> {
        self.drives
            .iter()
            .map(|d| {
                let drive = drives.get(d).ok_or_else(|| format!("no drive {d:?}"))?;
                Ok(MemberSpec {
                    id: d.clone(),
                    drive: drive.clone() as Arc<dyn Drive>,
                    state: self.member_state(d),
                })
            })
            .collect()
    }

    /// Its layout over `members` (the smallest decides how many stripes there are).
    pub fn layout(&self, members: &[MemberSpec]) -> Result<Layout, String> {
        let bytes = members.iter().map(|m| m.drive.info().capacity).min();
        let mut layout = Layout::new(
            self.level,
            self.drives.len(),
            self.strip_kib.saturating_mul(1024),
            bytes.unwrap_or(0),
            crate::raid::meta::DATA_OFFSET,
        )?;
        if let Some(cap) = self.capacity_bytes {
            let stripes = cap.div_ceil(layout.stripe_bytes());
            if cap == 0 || stripes > layout.stripes {
                return Err(format!(
                    "a capacity of {cap} bytes is not one these drives hold (1 to {})",
                    layout.capacity()
                ));
            }
            layout.stripes = stripes;
        }
        Ok(layout)
    }

    /// Every drive it holds, spares too.
    pub fn all_drives(&self) -> impl Iterator<Item = &str> {
        self.drives.iter().chain(&self.spares).map(String::as_str)
    }
}

pub fn volume_id(name: &str) -> String {
    format!("vol-{name}")
}

/// Checks a volume name: letters, digits, '-' and '_', at most `NAME_LEN`.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > NAME_LEN {
        return Err(format!("a volume name has 1 to {NAME_LEN} characters"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
    {
        return Err(format!(
            "a volume name has letters, digits, '-' and '_' only, not {c:?}"
        ));
    }
    Ok(())
}

/// The subsystem that serves volume `v` of box `box_name`: any host may connect (until
/// composed) unless the volume was made closed; the volume is namespace 1.
pub fn volume_subsystem(box_name: &str, v: &VolumeState) -> SubsystemState {
    let nqn = volume_nqn(box_name, &v.name);
    let h = crate::model::stable_id(&nqn, b"serial");
    SubsystemState {
        serial: super::serial_number(box_name, &format!("V{:02X}{:02X}{:02X}", h[0], h[1], h[2])),
        model: format!("fabrik {} volume", v.level.name()),
        nqn,
        allow_any_host: !v.closed,
        hosts: Vec::new(),
        namespaces: vec![super::NamespaceState {
            nsid: 1,
            drive: v.id(),
        }],
        require_auth: false,
    }
}

/// The subsystem NQN of volume `name`.
pub fn volume_nqn(box_name: &str, name: &str) -> String {
    format!(
        "{}:{box_name}:{}",
        crate::config::NQN_PREFIX,
        volume_id(name)
    )
}
