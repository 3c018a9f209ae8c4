//! Volumes through the management API: made, listed, failed, deleted.
//!
//! Making one is three steps, each persisted: the drives are claimed (their subsystems taken
//! away and remembered, the volume recorded as not yet made), the members are initialized
//! (zeroed, superblocks, a clean bitmap), then the volume is recorded as made and served in a
//! subsystem of its own. A crash between the steps leaves a volume not yet made, which the next
//! start makes again (`Target::start`); a failure undoes the claim.

use std::collections::BTreeSet;
use std::sync::Arc;

use fabrik_api::models as api;
use fabrik_api::{MgmtError, MgmtResult};

use super::{conflict, invalid, not_found, Manager};
use crate::backend::Drive;
use crate::raid::{Layout, Level, MemberSpec, Volume};
use crate::state::{self, State, VolumeState};

/// Strip size when the request names none.
const DEFAULT_STRIP_KIB: u64 = 64;

/// Told when a member of a volume fails: the volume's name, the member's place, why.
pub type MemberFailures = tokio::sync::mpsc::UnboundedSender<(String, usize, String)>;

/// The volumes a manager starts with (assembled at start, by ID) and where their members'
/// failures go.
#[derive(Default)]
pub struct VolumeSet {
    pub live: std::collections::BTreeMap<String, Arc<Volume>>,
    pub failures: Option<MemberFailures>,
}

impl Manager {
    /// The subsystem NQN of volume `name`.
    pub fn volume_nqn(&self, name: &str) -> String {
        state::volume_nqn(&self.target.box_name, name)
    }

    /// The live volume by ID (`vol-<name>`).
    pub(super) fn live_volume(&self, id: &str) -> Option<Arc<Volume>> {
        self.volumes.lock().unwrap().get(id).cloned()
    }

    /// What tells this manager of a member failing in volume `name`.
    pub(crate) fn on_member_failed(&self, name: &str) -> crate::raid::volume::OnMemberFailed {
        let (tx, name) = (self.member_failures.clone(), name.to_string());
        Box::new(move |i, why| {
            if let Some(tx) = &tx {
                let _ = tx.send((name.clone(), i, why.to_string()));
            }
        })
    }

    /// Records that member `i` of volume `name` failed (the volume knows already).
    pub fn record_member_failure(&self, name: &str, i: usize) {
        let done = self.mutate(|st| {
            let v = find_volume(st, name)?;
            let Some(drive) = v.drives.get(i).cloned() else {
                return Ok(());
            };
            if !v.failed.contains(&drive) {
                v.failed.push(drive);
            }
            Ok(())
        });
        if let Err(e) = done {
            tracing::error!(
                volume = name,
                "the failed member is not in the state file: {e}"
            );
        }
    }

    pub(super) fn volume_view(&self, v: &VolumeState) -> api::Volume {
        let live = self.live_volume(&v.id());
        let members = v
            .drives
            .iter()
            .enumerate()
            .map(|(i, d)| api::VolumeMember {
                drive: d.clone(),
                state: match live.as_ref().map(|l| l.members()[i].is_failed()) {
                    Some(true) => "failed",
                    Some(false) => "active",
                    None if v.failed.contains(d) => "failed",
                    None => "active",
                }
                .into(),
            })
            .collect();
        let load = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        api::Volume {
            name: v.name.clone(),
            id: v.id(),
            nqn: self.volume_nqn(&v.name),
            level: v.level.name().into(),
            strip_kib: v.strip_kib,
            capacity_bytes: live.as_ref().map_or(0, |l| l.info().capacity),
            block_size: live.as_ref().map_or(0, |l| l.info().block_size),
            state: match &live {
                Some(l) if l.is_failed() => "failed",
                Some(l) if l.is_degraded() => "degraded",
                Some(_) => "optimal",
                None => "failed",
            }
            .into(),
            members,
            spares: v.spares.clone(),
            dirty_regions: live.as_ref().map_or(0, |l| l.dirty_regions() as u64),
            unsynced_regions: live.as_ref().map_or(0, |l| load(&l.unsynced_regions)),
            reconstructed_reads: live
                .as_ref()
                .map_or(0, |l| load(&l.stats.reconstructed_reads)),
        }
    }

    pub(super) fn list_volumes(&self) -> Vec<api::Volume> {
        let st = self.state();
        st.volumes.iter().map(|v| self.volume_view(v)).collect()
    }

    pub(super) fn volume_by_name(&self, name: &str) -> MgmtResult<api::Volume> {
        let st = self.state();
        let v = st
            .volumes
            .iter()
            .find(|v| v.name == name)
            .ok_or_else(|| not_found(format!("no volume {name:?}")))?;
        Ok(self.volume_view(v))
    }

    pub(super) fn make_volume(&self, req: api::VolumeRequest) -> MgmtResult<api::Volume> {
        if self.target.module.is_some() {
            return Err(conflict(
                "volumes are served by a box of one I/O module for now: both modules of a pair \
                 would write the same parity",
            ));
        }
        state::check_volume_name(&req.name).map_err(invalid)?;
        let level: Level = req.level.parse().map_err(invalid)?;
        level.check_members(req.drives.len()).map_err(invalid)?;
        let strip_kib = req.strip_kib.unwrap_or(DEFAULT_STRIP_KIB);
        let mut seen = BTreeSet::new();
        for d in req.drives.iter().chain(&req.spares) {
            if !seen.insert(d) {
                return Err(invalid(format!("drive {d:?} is listed twice")));
            }
        }
        let member_bytes = req
            .drives
            .iter()
            .map(|d| {
                self.drive_capacity(d)
                    .ok_or_else(|| not_found(format!("no drive {d:?}")))
            })
            .collect::<MgmtResult<Vec<u64>>>()?
            .into_iter()
            .min()
            .unwrap_or(0);
        let layout = Layout::new(
            level,
            req.drives.len(),
            strip_kib.saturating_mul(1024),
            member_bytes,
            crate::raid::meta::DATA_OFFSET,
        )
        .map_err(invalid)?;
        let uuid = state::random_hex(16).map_err(|e| MgmtError::Internal(e.to_string()))?;
        let vs = VolumeState {
            name: req.name.clone(),
            uuid,
            level,
            strip_kib,
            drives: req.drives.clone(),
            spares: req.spares.clone(),
            failed: Vec::new(),
            created: false,
            took: Vec::new(),
        };
        // One volume change at a time: the drives' data is erased between the steps.
        let _making = self.volume_change.lock().unwrap();
        self.mutate(|st| claim(st, vs.clone()))?;
        let volume = tokio::runtime::Handle::current().block_on(Volume::create(
            &vs.name,
            &vs.uuid,
            layout,
            self.member_specs(&vs),
            self.on_member_failed(&vs.name),
        ));
        let volume = match volume {
            Ok(v) => Arc::new(v),
            Err(e) => {
                let undone = self.mutate(|st| release(st, &vs.name));
                if let Err(u) = undone {
                    tracing::error!(volume = %vs.name, "undoing a volume that could not be made: {u}");
                }
                return Err(MgmtError::Internal(format!(
                    "the volume could not be made: {e}; its drives are as they were"
                )));
            }
        };
        crate::raid::volume::spawn_cleaner(&volume, crate::raid::volume::CLEAN_EVERY);
        self.volumes.lock().unwrap().insert(vs.id(), volume);
        let served = self.mutate(|st| {
            let v = find_volume(st, &vs.name)?;
            v.created = true;
            let v = v.clone();
            st.subsystems
                .push(state::volume_subsystem(&st.box_name, &v));
            Ok(())
        });
        if let Err(e) = served {
            // Made, not served: the next start serves it (it is in the state, not yet made, and
            // is made again there).
            self.volumes.lock().unwrap().remove(&vs.id());
            return Err(e);
        }
        self.volume_by_name(&vs.name)
    }

    /// The members of `v` as the volume takes them.
    pub(crate) fn member_specs(&self, v: &VolumeState) -> Vec<MemberSpec> {
        v.drives
            .iter()
            .map(|d| MemberSpec {
                id: d.clone(),
                drive: self
                    .drive_guard(d)
                    .map(|g| g as Arc<dyn crate::backend::Drive>)
                    .expect("validated: members are drives"),
                failed: v.failed.contains(d),
            })
            .collect()
    }

    /// At a clean stop, after the last I/O: every volume's members flushed and its bitmap
    /// cleaned, so the next start has nothing to resync (and a volume that is degraded then
    /// has no region it cannot vouch for).
    pub async fn close_volumes(&self) {
        let volumes: Vec<Arc<Volume>> = self.volumes.lock().unwrap().values().cloned().collect();
        for v in volumes {
            if let Err(e) = v.clean_intent().await {
                tracing::error!(volume = %v.name, "the write-intent bitmap stays dirty: {e}");
            }
        }
    }

    pub(super) fn remove_volume(&self, name: &str) -> MgmtResult<()> {
        let _making = self.volume_change.lock().unwrap();
        let id = state::volume_id(name);
        let nqn = self.volume_nqn(name);
        self.mutate(|st| {
            find_volume(st, name)?;
            if let Some(c) = st.compositions.iter().find(|c| c.drives.contains(&id)) {
                return Err(conflict(format!(
                    "volume {name} is composed to {} (composition {}): decompose it first",
                    c.host_nqn, c.id
                )));
            }
            st.subsystems.retain(|s| s.nqn != nqn);
            release(st, name)
        })?;
        if let Some(v) = self.volumes.lock().unwrap().remove(&id) {
            // The members are plain drives again: no superblock to take them for members.
            let wipe = v.members().iter().map(|m| {
                m.drive.write(
                    crate::raid::meta::SUPER_OFFSET,
                    crate::backend::zeroed_bytes(crate::raid::meta::META_BLOCK),
                    true,
                )
            });
            let wiped =
                tokio::runtime::Handle::current().block_on(futures_util::future::join_all(wipe));
            if let Some(e) = wiped.into_iter().find_map(Result::err) {
                tracing::warn!(volume = name, "wiping a member's superblock: {e}");
            }
        }
        Ok(())
    }

    pub(super) fn fail_member(&self, name: &str, drive: &str) -> MgmtResult<api::Volume> {
        let st = self.state();
        let v = st
            .volumes
            .iter()
            .find(|v| v.name == name)
            .ok_or_else(|| not_found(format!("no volume {name:?}")))?;
        let i =
            v.drives.iter().position(|d| d == drive).ok_or_else(|| {
                not_found(format!("drive {drive:?} is no member of volume {name}"))
            })?;
        let live = self
            .live_volume(&v.id())
            .ok_or_else(|| conflict(format!("volume {name} is not served")))?;
        if live.members()[i].is_failed() {
            return Err(conflict(format!("drive {drive} is failed already")));
        }
        // Recorded first: a crash in between leaves it failed, never read again.
        self.record_member_failure(name, i);
        live.fail(i, "failed through the management API");
        self.volume_by_name(name)
    }
}

fn find_volume<'a>(st: &'a mut State, name: &str) -> MgmtResult<&'a mut VolumeState> {
    st.volumes
        .iter_mut()
        .find(|v| v.name == name)
        .ok_or_else(|| not_found(format!("no volume {name:?}")))
}

/// Records `vs` as claiming its drives: each must be a drive in no volume and no composition,
/// exported by no subsystem or alone by one (that subsystem is taken away and kept in `took`).
fn claim(st: &mut State, mut vs: VolumeState) -> MgmtResult<()> {
    if st.volumes.iter().any(|v| v.name == vs.name) {
        return Err(conflict(format!("volume {} exists", vs.name)));
    }
    if st.drives.iter().any(|d| d.id == vs.id()) {
        return Err(conflict(format!("a drive is named {}", vs.id())));
    }
    for d in vs.drives.iter().chain(&vs.spares) {
        if !st.drives.iter().any(|x| &x.id == d) {
            return Err(not_found(format!("no drive {d:?}")));
        }
        if let Some(v) = st.volumes.iter().find(|v| v.all_drives().any(|x| x == d)) {
            return Err(conflict(format!("drive {d:?} is in volume {}", v.name)));
        }
        if let Some(c) = st.compositions.iter().find(|c| c.drives.contains(d)) {
            return Err(conflict(format!(
                "drive {d:?} is composed to {} (composition {}): decompose it first",
                c.host_nqn, c.id
            )));
        }
        if let Some(s) = st.subsystem_of_drive(d) {
            if s.namespaces.len() > 1 {
                return Err(conflict(format!(
                    "drive {d:?} shares subsystem {} with other drives: remove its namespace first",
                    s.nqn
                )));
            }
            let nqn = s.nqn.clone();
            let i = st.subsystems.iter().position(|s| s.nqn == nqn).unwrap();
            vs.took.push(st.subsystems.remove(i));
        }
    }
    st.volumes.push(vs);
    Ok(())
}

/// Forgets volume `name` and gives its drives their subsystems back (where the NQN is free).
fn release(st: &mut State, name: &str) -> MgmtResult<()> {
    let i = st
        .volumes
        .iter()
        .position(|v| v.name == name)
        .ok_or_else(|| not_found(format!("no volume {name:?}")))?;
    let v = st.volumes.remove(i);
    for s in v.took {
        if st.subsystems.iter().any(|x| x.nqn == s.nqn) {
            tracing::warn!(nqn = %s.nqn, "a drive of volume {name} stays unexported: its subsystem's NQN is taken");
            continue;
        }
        st.subsystems.push(s);
    }
    Ok(())
}
