//! Asymmetric namespace access as one path of a session sees it: each namespace's ANA state
//! through that path's controller, from its ANA log (read when the path comes up, on an ANA
//! change notice, and after an I/O got an ANA status). The session sends a command through an
//! optimized path, else a non-optimized one, never through an inaccessible one, as the Linux
//! host does (`nvme_find_path`).

use std::sync::atomic::{AtomicU8, Ordering};

use fabrik_proto::nvme::identify::cmic;
use fabrik_proto::nvme::log::{ana_state, lid, AnaLog};
use fabrik_proto::Status;

use crate::error::HostError;
use crate::host::controller::Controller;

/// NSIDs whose state a path keeps (MNAN as fabrikd and Linux nvmet report it); a namespace
/// past it counts as optimized.
const MAX_NSID: usize = 1024;

/// How much a command wants a path whose namespace is in a state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Preference {
    Optimized,
    NonOptimized,
    /// Inaccessible, persistent loss, in transition: not for I/O.
    Unusable,
}

/// One path's namespace states, read by every command (a relaxed load).
pub struct PathAna {
    /// State of NSID `i + 1`; 0: not reported (a controller without ANA: optimized).
    states: Box<[AtomicU8]>,
}

impl Default for PathAna {
    fn default() -> PathAna {
        PathAna {
            states: (0..MAX_NSID).map(|_| AtomicU8::new(0)).collect(),
        }
    }
}

impl PathAna {
    pub fn state(&self, nsid: u32) -> u8 {
        (nsid as usize)
            .checked_sub(1)
            .and_then(|i| self.states.get(i))
            .map_or(0, |s| s.load(Ordering::Relaxed))
    }

    pub fn preference(&self, nsid: u32) -> Preference {
        match self.state(nsid) {
            0 | ana_state::OPTIMIZED => Preference::Optimized,
            ana_state::NON_OPTIMIZED => Preference::NonOptimized,
            _ => Preference::Unusable,
        }
    }

    /// Takes every namespace's state from `log`; namespaces it does not name keep theirs.
    pub fn update(&self, log: &AnaLog) {
        for g in &log.groups {
            for &nsid in &g.nsids {
                self.set(nsid, g.state);
            }
        }
    }

    /// Namespace `nsid` is in `state` through this path.
    pub fn set(&self, nsid: u32, state: u8) {
        if let Some(slot) = (nsid as usize)
            .checked_sub(1)
            .and_then(|i| self.states.get(i))
        {
            slot.store(state, Ordering::Relaxed);
        }
    }

    /// Forgets every state (a path reconnected: its log is read anew).
    pub fn clear(&self) {
        for s in self.states.iter() {
            s.store(0, Ordering::Relaxed);
        }
    }
}

/// The ANA state an I/O status reports for its path (Asymmetric Access Inaccessible,
/// Persistent Loss, Transition), if it is one.
pub fn state_of_status(status: Status) -> Option<u8> {
    [
        (Status::ANA_INACCESSIBLE, ana_state::INACCESSIBLE),
        (Status::ANA_PERSISTENT_LOSS, ana_state::PERSISTENT_LOSS),
        (Status::ANA_TRANSITION, ana_state::CHANGE),
    ]
    .into_iter()
    .find(|(s, _)| status.same_code(*s))
    .map(|(_, state)| state)
}

/// Whether `ctrl` reports ANA (Identify CMIC bit 3).
pub fn reports_ana(ctrl: &Controller) -> bool {
    ctrl.identity().cmic & cmic::ANA_REPORTING != 0
}

/// Reads `ctrl`'s ANA log (without RAE: an ANA change notice is re-armed by it); None for a
/// controller without ANA reporting.
pub async fn read_log(ctrl: &Controller) -> Result<Option<AnaLog>, HostError> {
    if !reports_ana(ctrl) {
        return Ok(None);
    }
    let id = ctrl.identity();
    let len = 16 + 32 * id.nanagrpid as usize + 4 * id.mnan.max(id.nn) as usize;
    let page = ctrl.get_log_page(lid::ANA, 0xffff_ffff, len, 0).await?;
    AnaLog::decode(&page)
        .map(Some)
        .map_err(|e| HostError::Invalid(format!("the ANA log does not parse: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabrik_proto::nvme::log::AnaGroup;

    #[test]
    fn states_come_from_the_log_and_rank_the_paths() {
        let ana = PathAna::default();
        assert_eq!(
            ana.preference(1),
            Preference::Optimized,
            "not reported: usable"
        );
        ana.update(&AnaLog {
            chgcnt: 1,
            groups: vec![
                AnaGroup {
                    grpid: 1,
                    chgcnt: 1,
                    state: ana_state::NON_OPTIMIZED,
                    nsids: vec![1],
                },
                AnaGroup {
                    grpid: 2,
                    chgcnt: 1,
                    state: ana_state::INACCESSIBLE,
                    nsids: vec![2, 3],
                },
            ],
        });
        assert_eq!(ana.preference(1), Preference::NonOptimized);
        assert_eq!(ana.preference(3), Preference::Unusable);
        assert_eq!(ana.preference(4), Preference::Optimized);
        assert_eq!(ana.preference(5000), Preference::Optimized, "past MNAN");
        ana.clear();
        assert_eq!(ana.preference(3), Preference::Optimized);
        assert_eq!(
            state_of_status(Status::ANA_TRANSITION),
            Some(ana_state::CHANGE)
        );
        assert_eq!(state_of_status(Status::INVALID_FIELD), None);
    }
}
