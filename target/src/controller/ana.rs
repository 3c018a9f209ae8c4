//! Asymmetric namespace access: the state of the ANA group as this process's ports report it,
//! the ANA log page, the status an I/O gets on a path that may not be used, and the ANA change
//! notice. One group for now, holding every namespace (the two I/O modules of a box will give
//! each its own).

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use fabrik_proto::nvme::features::aec;
use fabrik_proto::nvme::log::{aen, ana_state, lid, AnaGroup, AnaLog};
use fabrik_proto::Status;

use super::{Controller, TargetState, ANA_GROUP};

/// The ANA group's state and change count: read by every I/O command (one relaxed load),
/// written only when an operator changes it.
pub struct Ana {
    state: AtomicU8,
    chgcnt: AtomicU64,
}

impl Default for Ana {
    fn default() -> Ana {
        Ana {
            state: AtomicU8::new(ana_state::OPTIMIZED),
            chgcnt: AtomicU64::new(0),
        }
    }
}

impl Ana {
    /// The group's state (`ana_state`).
    pub fn state(&self) -> u8 {
        self.state.load(Ordering::Relaxed)
    }

    /// Bumped by every change of state.
    pub fn change_count(&self) -> u64 {
        self.chgcnt.load(Ordering::Relaxed)
    }

    /// Whether an I/O command may run on this path: the path-related status (without DNR, so
    /// the host retries it on another path) of a group that is not accessible.
    pub fn io_allowed(&self) -> Result<(), Status> {
        match self.state() {
            ana_state::OPTIMIZED | ana_state::NON_OPTIMIZED => Ok(()),
            ana_state::INACCESSIBLE => Err(Status::ANA_INACCESSIBLE),
            ana_state::PERSISTENT_LOSS => Err(Status::ANA_PERSISTENT_LOSS),
            _ => Err(Status::ANA_TRANSITION),
        }
    }
}

impl TargetState {
    /// Puts ANA group `ANA_GROUP` in `state` (one of `ana_state`): commands admitted from now
    /// on see it, and every I/O controller whose host asked for ANA change notices gets one.
    /// Returns whether it changed.
    pub fn set_ana_state(&self, state: u8) -> bool {
        if self.ana.state.swap(state, Ordering::Relaxed) == state {
            return false;
        }
        self.ana.chgcnt.fetch_add(1, Ordering::Relaxed);
        for ctrl in self.controllers() {
            if !ctrl.is_discovery() {
                ctrl.ana_changed();
            }
        }
        true
    }
}

impl Controller {
    /// The ANA log as this controller's path sees it: the group, every namespace in it
    /// (ascending: the Linux host walks them in step with its own list).
    pub(super) fn ana_log(&self) -> Option<AnaLog> {
        let mut nsids: Vec<u32> = (self.subsystem()?.namespaces().iter())
            .map(|ns| ns.nsid)
            .collect();
        nsids.sort_unstable();
        let ana = &self.target.ana;
        let chgcnt = ana.change_count();
        Some(AnaLog {
            chgcnt,
            groups: vec![AnaGroup {
                grpid: ANA_GROUP,
                chgcnt,
                state: ana.state(),
                nsids,
            }],
        })
    }

    /// An ANA group's state changed: the notice, if the host enabled it (masked, as every
    /// notice, until the host reads the log without RAE).
    pub(super) fn ana_changed(&self) {
        self.queue_notice(aec::ANA_CHANGE_NOTICES, aen::NOTICE_ANA_CHANGE, lid::ANA);
    }
}
