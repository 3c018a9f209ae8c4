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
use crate::raid::volume::MemberState;
use crate::raid::{Level, Volume};
use crate::state::{self, State, SubsystemState, VolumeState};

/// Strip size when the request names none.
const DEFAULT_STRIP_KIB: u64 = 64;

/// What volumes tell the manager, in the background (`Manager::volume_event` takes it).
#[derive(Debug)]
pub enum VolumeEvent {
    /// Member `member` of `volume` failed: its failure number `failure`.
    MemberFailed {
        volume: String,
        member: usize,
        failure: u64,
    },
    /// The rebuild of member `member` ended.
    RebuildEnded {
        volume: String,
        member: usize,
        /// The generation the rebuilt member's return made.
        result: Result<u64, String>,
    },
}

/// Where volume events go.
pub type VolumeEvents = tokio::sync::mpsc::UnboundedSender<VolumeEvent>;

/// The volumes a manager starts with (assembled at start, by ID) and where their members'
/// failures go.
#[derive(Default)]
pub struct VolumeSet {
    pub live: std::collections::BTreeMap<String, Arc<Volume>>,
    pub events: Option<VolumeEvents>,
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
        on_member_failed(self.volume_events.clone(), name)
    }

    /// Records that member `i` of volume `name` failed, making its generation `generation`
    /// (the volume knows already).
    pub fn record_member_failure(&self, name: &str, i: usize, generation: u64) {
        let done = self.mutate(|st| {
            let v = find_volume(st, name)?;
            v.generation = v.generation.max(generation);
            let Some(drive) = v.drives.get(i).cloned() else {
                return Ok(());
            };
            if v.rebuilding.as_ref() == Some(&drive) {
                v.rebuilding = None;
            }
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
        // The live volume knows best (a spare may have just taken a place).
        let members: Vec<api::VolumeMember> = match &live {
            Some(l) => l
                .members()
                .iter()
                .map(|m| api::VolumeMember {
                    drive: m.id(),
                    state: match m.state() {
                        MemberState::Failed => "failed",
                        MemberState::Rebuilding => "rebuilding",
                        MemberState::Active => "active",
                    }
                    .into(),
                })
                .collect(),
            None => v
                .drives
                .iter()
                .map(|d| api::VolumeMember {
                    drive: d.clone(),
                    state: if v.failed.contains(d) {
                        "failed"
                    } else {
                        "active"
                    }
                    .into(),
                })
                .collect(),
        };
        let spares = v
            .spares
            .iter()
            .filter(|s| !members.iter().any(|m| &m.drive == *s))
            .cloned()
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
                Some(l) if l.rebuild_progress().is_some() => "rebuilding",
                Some(l) if l.is_degraded() => "degraded",
                Some(_) => "optimal",
                // Claimed, its drives being erased: served once made.
                None if !v.created => "making",
                None => "failed",
            }
            .into(),
            members,
            spares,
            dirty_regions: live.as_ref().map_or(0, |l| l.dirty_regions() as u64),
            unsynced_regions: live.as_ref().map_or(0, |l| load(&l.unsynced_regions)),
            reconstructed_reads: live
                .as_ref()
                .map_or(0, |l| load(&l.stats.reconstructed_reads)),
            rebuild: live.as_ref().and_then(|l| rebuild_view(l)),
            rebuild_limit_mib_per_sec: v.rebuild_mib_per_sec,
            scrub: live
                .as_ref()
                .and_then(|l| l.scrub_report())
                .map(|r| api::VolumeScrub {
                    state: match (&r.error, r.running, r.mismatches) {
                        (_, true, _) => "running",
                        (Some(_), _, _) => "stopped",
                        (None, _, 0) => "clean",
                        (None, _, _) => "repaired",
                    }
                    .into(),
                    checked_stripes: r.checked_stripes,
                    total_stripes: r.total_stripes,
                    mismatches: r.mismatches,
                    repaired: r.repaired,
                    started: r.started,
                    finished: r.finished,
                    error: r.error,
                }),
        }
    }

    /// Every volume's figures for a scrape.
    pub fn volume_metrics(&self) -> Vec<fabrik_api::metrics::VolumeMetrics> {
        let st = self.state();
        let load = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        st.volumes
            .iter()
            .map(|v| {
                let view = self.volume_view(v);
                let mut m = fabrik_api::metrics::VolumeMetrics {
                    volume: v.name.clone(),
                    level: view.level.clone(),
                    state: view.state.clone(),
                    capacity_bytes: view.capacity_bytes,
                    members: view
                        .members
                        .iter()
                        .map(|m| (m.drive.clone(), m.state.clone()))
                        .collect(),
                    reconstructed_reads: view.reconstructed_reads,
                    dirty_regions: view.dirty_regions,
                    unsynced_regions: view.unsynced_regions,
                    rebuild_progress: view.rebuild.as_ref().map(|r| r.progress),
                    rebuild_eta_seconds: view.rebuild.as_ref().and_then(|r| r.eta_seconds),
                    scrub_mismatches: view.scrub.as_ref().map(|s| s.mismatches),
                    ..Default::default()
                };
                if let Some(live) = self.live_volume(&v.id()) {
                    m.rmw_stripes = load(&live.stats.rmw_stripes);
                    m.full_stripes = load(&live.stats.full_stripes);
                }
                for (_, ns) in self.namespaces_of(&v.id()) {
                    m.read_ops += ns.stats.read_commands();
                    m.write_ops += ns.stats.write_commands();
                    m.read_bytes += ns.stats.bytes_read();
                    m.write_bytes += ns.stats.bytes_written();
                }
                m
            })
            .collect()
    }

    /// What volumes tell in the background.
    pub fn volume_event(&self, event: VolumeEvent) {
        match event {
            VolumeEvent::MemberFailed {
                volume,
                member,
                failure,
            } => {
                self.record_member_failure(&volume, member, failure);
                if let Some(live) = self.live_volume(&state::volume_id(&volume)) {
                    live.change_recorded(failure);
                }
                self.start_rebuild(&volume);
            }
            VolumeEvent::RebuildEnded {
                volume,
                member,
                result,
            } => {
                let generation = match result {
                    Ok(g) => g,
                    Err(e) => {
                        tracing::error!(volume, member, "rebuild stopped: {e}");
                        return;
                    }
                };
                let done = self.mutate(|st| {
                    let v = find_volume(st, &volume)?;
                    v.generation = v.generation.max(generation);
                    if v.rebuilding.as_ref() == v.drives.get(member) {
                        v.rebuilding = None;
                    }
                    Ok(())
                });
                if let Err(e) = done {
                    tracing::error!(volume, "the rebuilt member is not in the state file: {e}");
                }
                if let Some(live) = self.live_volume(&state::volume_id(&volume)) {
                    live.change_recorded(generation);
                }
                // RAID 6 may have lost another member meanwhile.
                self.start_rebuild(&volume);
            }
        }
    }

    /// Starts every rebuild there is to do (at start: members recorded as rebuilding, and
    /// failed members with a spare to take their place).
    pub fn start_rebuilds(&self) {
        let st = self.state();
        for v in &st.volumes {
            let Some(live) = self.live_volume(&v.id()) else {
                continue;
            };
            let rebuilding = live
                .members()
                .iter()
                .position(|m| m.state() == MemberState::Rebuilding);
            match rebuilding {
                Some(i) => self.spawn_rebuild(&v.name, i, live),
                None => self.start_rebuild(&v.name),
            }
        }
    }

    /// Puts the first spare in a failed member's place and rebuilds it, if the volume has both
    /// and no rebuild runs.
    fn start_rebuild(&self, name: &str) {
        let _change = self.volume_change.lock().unwrap();
        let st = self.state();
        let Some(v) = st.volumes.iter().find(|v| v.name == name) else {
            return;
        };
        let Some(live) = self.live_volume(&v.id()) else {
            return;
        };
        if v.rebuilding.is_some() || live.rebuild_progress().is_some() || live.is_failed() {
            return;
        }
        let Some(i) = live.members().iter().position(|m| m.is_failed()) else {
            return;
        };
        let Some(spare) = v.spares.first().cloned() else {
            tracing::warn!(
                volume = name,
                "a member failed and there is no spare: the volume stays degraded"
            );
            return;
        };
        let Some(drive) = self.drive_guard(&spare) else {
            return;
        };
        let old = live.members()[i].id();
        let begun = tokio::runtime::Handle::current().block_on(live.begin_rebuild(
            i,
            &spare,
            drive as Arc<dyn crate::backend::Drive>,
        ));
        if let Err(e) = begun {
            tracing::error!(volume = name, drive = %spare, "the spare cannot be rebuilt onto: {e}");
            return;
        }
        tracing::warn!(volume = name, drive = %spare, "rebuilding onto the spare in the place of {old}");
        let recorded = self.mutate(|st| {
            let v = find_volume(st, name)?;
            v.drives[i] = spare.clone();
            v.spares.retain(|d| *d != spare);
            v.failed.retain(|d| *d != old);
            v.rebuilding = Some(spare.clone());
            Ok(())
        });
        if let Err(e) = recorded {
            // The rebuild runs; after a restart the spare is a spare again and it starts over.
            tracing::error!(volume = name, "the rebuild is not in the state file: {e}");
        }
        self.spawn_rebuild(name, i, live);
    }

    fn spawn_rebuild(&self, name: &str, member: usize, live: Arc<Volume>) {
        let (events, volume) = (self.volume_events.clone(), name.to_string());
        self.spawn_volume_work(async move {
            let result = live.rebuild(member).await;
            if let Some(tx) = events {
                let _ = tx.send(VolumeEvent::RebuildEnded {
                    volume,
                    member,
                    result,
                });
            }
        });
    }

    /// Runs a volume's background work (rebuild, scrub) on the runtime; `close_volumes` waits
    /// for it.
    fn spawn_volume_work(&self, work: impl std::future::Future<Output = ()> + Send + 'static) {
        let task = tokio::runtime::Handle::current().spawn(work);
        let mut all = self.volume_work.lock().unwrap();
        all.retain(|t| !t.is_finished());
        all.push(task);
    }

    pub(super) fn add_spare(&self, name: &str, req: api::SpareRequest) -> MgmtResult<api::Volume> {
        let block = self
            .drive_guard(&req.drive)
            .map(|d| (d.info().block_size, d.info().capacity))
            .ok_or_else(|| not_found(format!("no drive {:?}", req.drive)))?;
        {
            let _change = self.volume_change.lock().unwrap();
            let live = self
                .live_volume(&state::volume_id(name))
                .ok_or_else(|| not_found(format!("no volume {name:?}")))?;
            let need = live.layout.member_offset(live.layout.stripes, 0);
            if block.0 != live.info().block_size || block.1 < need {
                return Err(invalid(format!(
                    "drive {} has {} bytes of {}-byte blocks; a spare of volume {name} needs {need} of {}",
                    req.drive,
                    block.1,
                    block.0,
                    live.info().block_size
                )));
            }
            self.mutate(|st| {
                find_volume(st, name)?;
                let took = claim_drive_for(st, &req.drive)?;
                let v = find_volume(st, name)?;
                v.spares.push(req.drive.clone());
                v.took.extend(took);
                Ok(())
            })?;
        }
        self.start_rebuild(name);
        self.volume_by_name(name)
    }

    pub(super) fn set_rebuild_limit(
        &self,
        name: &str,
        req: api::RebuildLimit,
    ) -> MgmtResult<api::Volume> {
        if req.mib_per_sec.is_some_and(|m| m == 0 || m > 1 << 20) {
            return Err(invalid(
                "a rebuild limit is 1 to 1048576 MiB/s (null: none)",
            ));
        }
        self.mutate(|st| {
            find_volume(st, name)?.rebuild_mib_per_sec = req.mib_per_sec;
            Ok(())
        })?;
        if let Some(live) = self.live_volume(&state::volume_id(name)) {
            let bytes = req.mib_per_sec.map_or(0, |m| m << 20);
            live.rebuild_limit
                .store(bytes, std::sync::atomic::Ordering::Relaxed);
        }
        self.volume_by_name(name)
    }

    pub(super) fn start_scrub(&self, name: &str) -> MgmtResult<api::Volume> {
        let live = self
            .live_volume(&state::volume_id(name))
            .ok_or_else(|| not_found(format!("no volume {name:?}")))?;
        if live.is_degraded() {
            return Err(conflict(format!(
                "volume {name} has a member lost or rebuilding: there is nothing to check parity against"
            )));
        }
        if !live.layout.level.redundant() {
            return Err(conflict(format!(
                "volume {name} is raid0: it has no parity to check"
            )));
        }
        if !live.begin_scrub() {
            return Err(conflict(format!("a scrub of volume {name} runs")));
        }
        self.spawn_volume_work(async move { live.scrub().await });
        self.volume_by_name(name)
    }

    pub(super) fn list_volumes(&self) -> Vec<api::Volume> {
        let st = self.state();
        st.volumes.iter().map(|v| self.volume_view(v)).collect()
    }

    pub(super) fn volume_by_name(&self, name: &str) -> MgmtResult<api::Volume> {
        let st = self.state();
        Ok(self.volume_view(volume_in(&st, name)?))
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
        let uuid = state::random_hex(16).map_err(|e| MgmtError::Internal(e.to_string()))?;
        let vs = VolumeState {
            name: req.name.clone(),
            uuid,
            level,
            strip_kib,
            drives: req.drives.clone(),
            spares: req.spares.clone(),
            failed: Vec::new(),
            rebuilding: None,
            rebuild_mib_per_sec: None,
            capacity_bytes: req.capacity_bytes,
            closed: req.allow_any_host == Some(false),
            generation: 0,
            created: false,
            took: Vec::new(),
        };
        let specs = vs.member_specs(&self.drives).map_err(not_found)?;
        let layout = vs.layout(&specs).map_err(invalid)?;
        // One volume change at a time: the drives' data is erased between the steps.
        let _making = self.volume_change.lock().unwrap();
        self.mutate(|st| claim(st, vs.clone()))?;
        let volume = tokio::runtime::Handle::current().block_on(Volume::create(
            &vs.name,
            &vs.uuid,
            layout,
            specs,
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

    /// At a clean stop, after the last I/O: every volume's members flushed and its bitmap
    /// cleaned, so the next start has nothing to resync (and a volume that is degraded then
    /// has no region it cannot vouch for).
    pub async fn close_volumes(&self) {
        let volumes: Vec<Arc<Volume>> = self.volumes.lock().unwrap().values().cloned().collect();
        for v in &volumes {
            v.stop();
        }
        // Rebuilds and scrubs end at their next batch; they hold the volumes (and the drives'
        // files) till then.
        let work = std::mem::take(&mut *self.volume_work.lock().unwrap());
        for w in work {
            let _ = w.await;
        }
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
        let gone = self.volumes.lock().unwrap().remove(&id);
        if let Some(v) = gone {
            v.stop();
            // The members are plain drives again: no superblock to take them for members.
            tokio::runtime::Handle::current().block_on(v.wipe_superblocks());
        }
        Ok(())
    }

    pub(super) fn fail_member(&self, name: &str, drive: &str) -> MgmtResult<api::Volume> {
        let st = self.state();
        let v = volume_in(&st, name)?;
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
        // Recorded first: a crash in between leaves it failed, never read again (the event
        // of `fail` records it again with the generation it makes).
        self.record_member_failure(name, i, 0);
        live.fail(i, "failed through the management API");
        self.volume_by_name(name)
    }
}

/// Sends volume `name`'s member failures to `events`.
pub fn on_member_failed(
    events: Option<VolumeEvents>,
    name: &str,
) -> crate::raid::volume::OnMemberFailed {
    let name = name.to_string();
    Box::new(move |member, _why, failure| match &events {
        Some(tx) => tx
            .send(VolumeEvent::MemberFailed {
                volume: name.clone(),
                member,
                failure,
            })
            .is_ok(),
        None => false,
    })
}

fn volume_in<'a>(st: &'a State, name: &str) -> MgmtResult<&'a VolumeState> {
    st.volumes
        .iter()
        .find(|v| v.name == name)
        .ok_or_else(|| not_found(format!("no volume {name:?}")))
}

fn find_volume<'a>(st: &'a mut State, name: &str) -> MgmtResult<&'a mut VolumeState> {
    st.volumes
        .iter_mut()
        .find(|v| v.name == name)
        .ok_or_else(|| not_found(format!("no volume {name:?}")))
}

/// Records `vs` as claiming its drives (see `claim_drive_for`).
fn claim(st: &mut State, mut vs: VolumeState) -> MgmtResult<()> {
    if st.volumes.iter().any(|v| v.name == vs.name) {
        return Err(conflict(format!("volume {} exists", vs.name)));
    }
    if st.drives.iter().any(|d| d.id == vs.id()) {
        return Err(conflict(format!("a drive is named {}", vs.id())));
    }
    for d in vs.drives.clone().iter().chain(&vs.spares.clone()) {
        let took = claim_drive_for(st, d)?;
        vs.took.extend(took);
    }
    st.volumes.push(vs);
    Ok(())
}

/// Takes drive `d` for a volume: a drive in no volume and no composition, exported by no
/// subsystem or alone by one, which is taken away and returned (to be given back).
fn claim_drive_for(st: &mut State, d: &str) -> MgmtResult<Option<SubsystemState>> {
    if !st.drives.iter().any(|x| x.id == d) {
        return Err(not_found(format!("no drive {d:?}")));
    }
    if let Some(v) = st.volumes.iter().find(|v| v.all_drives().any(|x| x == d)) {
        return Err(conflict(format!("drive {d:?} is in volume {}", v.name)));
    }
    if let Some(c) = st
        .compositions
        .iter()
        .find(|c| c.drives.iter().any(|x| x == d))
    {
        return Err(conflict(format!(
            "drive {d:?} is composed to {} (composition {}): decompose it first",
            c.host_nqn, c.id
        )));
    }
    let Some(s) = st.subsystem_of_drive(d) else {
        return Ok(None);
    };
    if s.namespaces.len() > 1 {
        return Err(conflict(format!(
            "drive {d:?} shares subsystem {} with other drives: remove its namespace first",
            s.nqn
        )));
    }
    let nqn = s.nqn.clone();
    let i = st.subsystems.iter().position(|s| s.nqn == nqn).unwrap();
    Ok(Some(st.subsystems.remove(i)))
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

fn rebuild_view(v: &Volume) -> Option<api::VolumeRebuild> {
    let p = v.rebuild_progress()?;
    let m = &v.members()[p.member];
    let strip = v.layout.strip;
    let done = m.rebuilt_stripes();
    let secs = p.started.elapsed().as_secs_f64().max(1e-3);
    let bytes_per_sec = (done * strip) as f64 / secs;
    let left = (p.total_stripes - done.min(p.total_stripes)) * strip;
    Some(api::VolumeRebuild {
        drive: p.drive,
        progress: done as f64 / p.total_stripes.max(1) as f64,
        rebuilt_bytes: done * strip,
        total_bytes: p.total_stripes * strip,
        mib_per_sec: bytes_per_sec / (1 << 20) as f64,
        eta_seconds: (bytes_per_sec > 0.0).then(|| (left as f64 / bytes_per_sec).ceil() as u64),
    })
}
