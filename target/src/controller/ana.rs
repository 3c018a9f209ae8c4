//! Asymmetric namespace access: the state of each ANA group as this process's ports report it,
//! the ANA log page, the status an I/O gets on a path that may not be used, and the ANA change
//! notice. A box of one module has one group holding every namespace; each module of a pair
//! has one group per module (`crate::module`).

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use fabrik_proto::nvme::features::aec;
use fabrik_proto::nvme::log::{aen, ana_state, lid, AnaGroup, AnaLog};
use fabrik_proto::Status;

use super::{Controller, TargetState};

/// The groups' states and the change count: read by every I/O command (one relaxed load),
/// written only when an operator (or a module's maintenance) changes them.
pub struct Ana {
    /// State of group `i + 1` (ANAGRPIDs start at 1).
    states: Box<[AtomicU8]>,
    chgcnt: AtomicU64,
}

impl Ana {
    /// `groups` groups, all optimized.
    pub fn new(groups: u32) -> Ana {
        Ana {
            states: (0..groups)
                .map(|_| AtomicU8::new(ana_state::OPTIMIZED))
                .collect(),
            chgcnt: AtomicU64::new(0),
        }
    }

    /// Number of groups; their IDs are 1 to this.
    pub fn groups(&self) -> u32 {
        self.states.len() as u32
    }

    /// Group `grpid`'s state (`ana_state`); None for a group that does not exist.
    pub fn state(&self, grpid: u32) -> Option<u8> {
        let i = usize::try_from(grpid).ok()?.checked_sub(1)?;
        Some(self.states.get(i)?.load(Ordering::Relaxed))
    }

    /// Bumped by every change of state.
    pub fn change_count(&self) -> u64 {
        self.chgcnt.load(Ordering::Relaxed)
    }

    /// Whether an I/O command on a namespace of group `grpid` may run on this path: the
    /// path-related status (without DNR, so the host retries it on another path) of a group
    /// that is not accessible.
    pub fn io_allowed(&self, grpid: u32) -> Result<(), Status> {
        match self.state(grpid) {
            Some(ana_state::OPTIMIZED | ana_state::NON_OPTIMIZED) => Ok(()),
            Some(ana_state::INACCESSIBLE) => Err(Status::ANA_INACCESSIBLE),
            Some(ana_state::PERSISTENT_LOSS) => Err(Status::ANA_PERSISTENT_LOSS),
            _ => Err(Status::ANA_TRANSITION),
        }
    }
}

impl TargetState {
    /// Puts ANA group `grpid` in `state` (one of `ana_state`): commands admitted from now on
    /// see it, and every I/O controller whose host asked for ANA change notices gets one.
    /// Returns whether it changed (false too for a group that does not exist).
    pub fn set_ana_state(&self, grpid: u32, state: u8) -> bool {
        let Some(slot) = (grpid as usize)
            .checked_sub(1)
            .and_then(|i| self.ana.states.get(i))
        else {
            return false;
        };
        if slot.swap(state, Ordering::Relaxed) == state {
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
    /// The ANA log as this controller's path sees it: every group, with the namespaces in it
    /// (ascending: the Linux host walks them in step with its own list).
    pub(super) fn ana_log(&self) -> Option<AnaLog> {
        let namespaces = self.subsystem()?.namespaces();
        let ana = &self.target.ana;
        let chgcnt = ana.change_count();
        let groups = (1..=ana.groups())
            .map(|grpid| {
                // `namespaces` is in NSID order.
                let nsids = (namespaces.iter())
                    .filter(|ns| ns.ana_group == grpid)
                    .map(|ns| ns.nsid)
                    .collect();
                AnaGroup {
                    grpid,
                    chgcnt,
                    state: ana.state(grpid).unwrap_or(ana_state::INACCESSIBLE),
                    nsids,
                }
            })
            .collect();
        Some(AnaLog { chgcnt, groups })
    }

    /// An ANA group's state changed: the notice, if the host enabled it (masked, as every
    /// notice, until the host reads the log without RAE).
    pub(super) fn ana_changed(&self) {
        self.queue_notice(aec::ANA_CHANGE_NOTICES, aen::NOTICE_ANA_CHANGE, lid::ANA);
    }
}
