//! The management API over the live target: `fabrik_api::Management` for `TargetState`.
//!
//! Every mutation works on a copy of the persisted `State`: it validates, changes the copy,
//! writes it (atomically) and only then applies the difference to the live target (`apply`), so
//! a refused or failed call leaves no trace, and an acknowledged one survives a crash.
//!
//! Compositions: a drive keeps its subsystem (one per drive by default, so its NQN never
//! changes); composing drives to a host makes their subsystems admit that host only (every
//! composed host, for shared drives) until decomposed, when the subsystem's configured access
//! (any host by default) returns. Hosts losing access are disconnected on the spot, and so are
//! the composed host's controllers when its composition is removed.

mod hosts;
mod module;
mod ports;
pub mod sync;
mod views;
mod volumes;

pub use volumes::{on_member_failed, VolumeEvent, VolumeEvents, VolumeSet};

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use fabrik_api::models as api;
use fabrik_api::{Management, MgmtError, MgmtResult};
use fabrik_proto::fabrics::nqn::Nqn;
use tokio_util::sync::CancellationToken;

use crate::backend::guard::{Fault, Guarded};
use crate::backend::{BackendKind, Drive};
use crate::config::NQN_PREFIX;
use crate::controller::limits::MAX_NAMESPACES;
use crate::controller::reservation::{ReservationChange, ReservationStore};
use crate::controller::{Subsystem, TargetState};
use crate::model::reservation::{Notice, Reservations};
use crate::model::Namespace;
use crate::state::{self, CompositionState, HostState, NamespaceState, State, SubsystemState};
use fabrik_proto::Status;

pub struct Manager {
    target: Arc<TargetState>,
    /// Opened at start; the drive set is fixed while fabrikd runs.
    drives: BTreeMap<String, Arc<Guarded>>,
    /// Random per start: the identity of RAM and null namespaces, which keep no data across a
    /// restart, changes with it, so no host takes the new one for the one it wrote to.
    boot_id: String,
    /// The configuration; readers take a snapshot (an Arc) and let go of the lock at once.
    state: Mutex<Arc<State>>,
    /// Where the state is persisted (None: not persisted).
    path: Option<PathBuf>,
    /// Cancelled at shutdown: every listener stops.
    stop: CancellationToken,
    listeners: Mutex<Vec<ports::Listening>>,
    /// Serializes port changes (they bind sockets before the state changes).
    port_change: Mutex<()>,
    /// Serializes changes of the state (held while the other I/O module takes a change).
    changing: Mutex<()>,
    /// The box's other I/O module, which gets every change of the shared configuration.
    peer: Option<sync::Peer>,
    /// The TLS PSKs NVMe/TCP ports with TLS are served with (fabrikd's `--tls-psk`).
    tls: Option<Arc<crate::transport::tcp::tls::TlsServer>>,
    /// Volumes served, by ID (`vol-<name>`).
    volumes: Mutex<BTreeMap<String, Arc<crate::raid::Volume>>>,
    /// Serializes making and deleting volumes.
    volume_change: Mutex<()>,
    /// Rebuilds and scrubs under way.
    volume_work: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Where volumes tell of members failing and rebuilds ending (`volume_event`).
    volume_events: Option<VolumeEvents>,
}

fn not_found(what: impl Into<String>) -> MgmtError {
    MgmtError::NotFound(what.into())
}

fn conflict(what: impl Into<String>) -> MgmtError {
    MgmtError::Conflict(what.into())
}

fn invalid(what: impl Into<String>) -> MgmtError {
    MgmtError::Invalid(what.into())
}

fn check_nqn(what: &str, nqn: &str) -> MgmtResult<()> {
    Nqn::new(nqn)
        .map(|_| ())
        .map_err(|e| invalid(format!("{what} {nqn:?} is not a valid NQN: {e}")))
}

impl Manager {
    /// Takes over `target` (empty of subsystems) and brings it to `state`.
    pub fn new(
        target: Arc<TargetState>,
        drives: BTreeMap<String, Arc<Guarded>>,
        state: State,
        path: Option<PathBuf>,
        stop: CancellationToken,
        peer: Option<sync::Peer>,
        volumes: VolumeSet,
    ) -> Manager {
        let m = Manager {
            target,
            drives,
            boot_id: crate::state::random_hex(8)
                .unwrap_or_else(|_| format!("{:?}", std::time::SystemTime::now())),
            state: Mutex::new(Arc::new(state.clone())),
            path,
            stop,
            listeners: Mutex::new(Vec::new()),
            port_change: Mutex::new(()),
            changing: Mutex::new(()),
            peer,
            tls: None,
            volumes: Mutex::new(volumes.live),
            volume_change: Mutex::new(()),
            volume_work: Mutex::new(Vec::new()),
            volume_events: volumes.events,
        };
        let empty = State {
            subsystems: Vec::new(),
            compositions: Vec::new(),
            ana_groups: BTreeMap::new(),
            maintenance: false,
            ..state.clone()
        };
        m.apply(&empty, &state);
        m
    }

    /// Serves NVMe/TCP ports with TLS with these keys (before any port listens).
    pub fn with_tls(mut self, tls: Option<Arc<crate::transport::tcp::tls::TlsServer>>) -> Self {
        self.tls = tls;
        self
    }

    /// Bytes of an opened drive.
    pub fn drive_capacity(&self, id: &str) -> Option<u64> {
        self.drives.get(id).map(|d| d.info().capacity)
    }

    /// A snapshot of the configuration (taking it holds the lock only for an Arc clone).
    pub fn state(&self) -> Arc<State> {
        self.state.lock().unwrap().clone()
    }

    /// Validates and applies a change: `change` edits a copy; the copy is checked, made on the
    /// other I/O module where it changes what the two share (`sync`), persisted, then made
    /// live. Any error leaves everything as it was.
    fn mutate<T>(&self, change: impl FnOnce(&mut State) -> MgmtResult<T>) -> MgmtResult<T> {
        self.mutate_telling(change, |_| Vec::new())
    }

    /// `mutate`, where the change's result names hosts to tell of a reservation change: the
    /// other module tells its controllers of them when it takes the change.
    fn mutate_telling<T>(
        &self,
        change: impl FnOnce(&mut State) -> MgmtResult<T>,
        tell: impl FnOnce(&T) -> Vec<api::ReservationNotice>,
    ) -> MgmtResult<T> {
        let _changing = self.changing.lock().unwrap();
        let cur = self.state();
        let mut next = State::clone(&cur);
        let out = change(&mut next)?;
        next.check_limits(&cur).map_err(MgmtError::Invalid)?;
        next.validate().map_err(|e| {
            MgmtError::Internal(format!("refused: the result would be invalid: {e:#}"))
        })?;
        if let Some(peer) = &self.peer {
            if next.shared() != cur.shared() {
                self.sync_change(peer, &cur, &mut next, tell(&out))?;
            }
        }
        self.commit(&cur, next)?;
        Ok(out)
    }

    /// Persists `next` and makes it live (the caller holds `changing`; `cur` is the state).
    fn commit(&self, cur: &State, next: State) -> MgmtResult<()> {
        if let Some(path) = &self.path {
            state::save(path, &next).map_err(|e| {
                MgmtError::Internal(format!(
                    "cannot write the state file {}: {e}; nothing was changed",
                    path.display()
                ))
            })?;
        }
        let mut live = self.state.lock().unwrap();
        self.apply(cur, &next);
        *live = Arc::new(next);
        Ok(())
    }

    /// Makes the live target follow `new` (coming from `old`): subsystems, namespaces and access,
    /// the ANA group's state.
    fn apply(&self, old: &State, new: &State) {
        self.apply_ana(new);
        // Every time (it is cheap): the first apply starts from a state with the same hosts.
        self.apply_host_auth(new);
        self.apply_host_qos(new);
        self.target
            .set_drive_qos(new.drive_qos.iter().map(|(d, q)| (d.as_str(), q)));
        let old_subs: BTreeMap<&str, &SubsystemState> =
            old.subsystems.iter().map(|s| (s.nqn.as_str(), s)).collect();
        let new_subs: BTreeMap<&str, &SubsystemState> =
            new.subsystems.iter().map(|s| (s.nqn.as_str(), s)).collect();
        for nqn in old_subs.keys().filter(|n| !new_subs.contains_key(*n)) {
            self.target.remove_subsystem(nqn);
        }
        let mut access_changed = false;
        let access = new.access();
        for (nqn, s) in &new_subs {
            let hosts = access.hosts(s);
            let live = match self.target.subsystem(nqn) {
                Some(live) => live,
                None => {
                    let Ok(parsed) = Nqn::new(nqn) else { continue };
                    let live = Arc::new(Subsystem::new(
                        parsed,
                        s.serial.clone(),
                        s.model.clone(),
                        hosts.clone(),
                    ));
                    self.target.add_subsystem(live.clone());
                    live
                }
            };
            // Namespaces: removed first (a drive may move between NSIDs), then added.
            let want: BTreeMap<u32, &str> = s
                .namespaces
                .iter()
                .map(|n| (n.nsid, n.drive.as_str()))
                .collect();
            for ns in live.namespaces() {
                if want.get(&ns.nsid) != Some(&ns.drive_id.as_str()) {
                    live.remove_namespace(ns.nsid);
                }
            }
            for (nsid, drive) in want {
                if live.namespace(nsid).is_none() {
                    let found: Option<(Arc<dyn Drive>, String)> = match self.drives.get(drive) {
                        Some(d) => Some((d.clone(), drive.to_string())),
                        // A volume is another volume when made again under its name.
                        None => new.volumes.iter().find(|v| v.id() == drive).and_then(|v| {
                            let live = self.live_volume(drive)?;
                            Some((live as Arc<dyn Drive>, format!("{drive}:{}", v.uuid)))
                        }),
                    };
                    if let Some((d, seed)) = found {
                        let identity = match d.info().kind {
                            BackendKind::Ram | BackendKind::Null => {
                                format!("{}:{seed}:boot-{}", new.box_name, self.boot_id)
                            }
                            _ => format!("{}:{seed}", new.box_name),
                        };
                        let group = crate::module::ana_group_of(self.target.module, drive);
                        let ns = Namespace::new(nsid, drive, d, &identity).in_ana_group(group);
                        if let Some(l) = self.target.drive_limiter(drive) {
                            let _ = ns.qos.set(l);
                        }
                        live.add_namespace(Arc::new(ns));
                    }
                }
            }
            if live.allowed_hosts() != hosts {
                live.set_allowed_hosts(hosts);
                access_changed = true;
            }
            live.require_auth
                .store(s.require_auth, std::sync::atomic::Ordering::Relaxed);
        }
        if access_changed {
            self.target.discovery_changed();
        }
        let none = Reservations::default();
        for sub in self.target.subsystems() {
            for ns in sub.namespaces() {
                ns.set_reservations(new.reservations.get(&ns.drive_id).unwrap_or(&none));
            }
        }
    }

    fn live_subsystem(&self, nqn: &str) -> MgmtResult<Arc<Subsystem>> {
        self.target
            .subsystem(nqn)
            .ok_or_else(|| not_found(format!("no subsystem {nqn:?}")))
    }
}

/// Reservation commands change the state like every other change: persisted, on the other
/// module, then live.
impl ReservationStore for Manager {
    fn change_reservations(
        &self,
        drive: &str,
        change: ReservationChange,
        abort: bool,
    ) -> Result<Vec<Notice>, Status> {
        let mut refused = None;
        let tell = |notices: &Vec<Notice>| sync::notice_views(drive, notices, abort);
        let done = self.mutate_telling(
            |st| {
                let mut r = st.reservations.get(drive).cloned().unwrap_or_default();
                match change(&mut r) {
                    Ok(notices) => {
                        if r == Reservations::default() {
                            st.reservations.remove(drive);
                        } else {
                            st.reservations.insert(drive.to_string(), r);
                        }
                        Ok(notices)
                    }
                    Err(status) => {
                        refused = Some(status);
                        Err(conflict("refused"))
                    }
                }
            },
            tell,
        );
        match (done, refused) {
            (Ok(notices), _) => Ok(notices),
            (Err(_), Some(status)) => Err(status),
            (Err(e), None) => {
                tracing::error!(drive, "a reservation change could not be made: {e}");
                Err(Status::INTERNAL_ERROR)
            }
        }
    }
}

impl Manager {
    /// The guard in front of drive `id` (tests inject failures through it).
    pub fn drive_guard(&self, id: &str) -> Option<Arc<Guarded>> {
        self.drives.get(id).cloned()
    }

    /// Keeps a drive's new fault in the state file (the guard already refuses writes).
    pub fn record_fault(&self, drive: &str, fault: Fault) {
        let recorded = self.mutate(|st| {
            st.drive_faults.insert(
                drive.to_string(),
                state::DriveFault {
                    since: fault.since,
                    cause: fault.cause.clone(),
                },
            );
            Ok(())
        });
        if let Err(e) = recorded {
            tracing::error!(drive, "the drive's fault is not in the state file: {e}");
        }
    }
}

impl Management for Manager {
    fn box_name(&self) -> String {
        self.target.box_name.clone()
    }

    fn drives(&self) -> Vec<api::Drive> {
        // A copy, not the lock: each view reads the drive's SMART log (an ioctl), and a slow
        // drive must not stall every other management call.
        let st = self.state();
        (0..st.drives.len())
            .map(|i| self.drive_view(&st, i))
            .collect()
    }

    fn set_drive_qos(&self, id: &str, req: api::QosLimits) -> MgmtResult<api::Drive> {
        crate::qos::check(&req).map_err(invalid)?;
        self.mutate(|st| {
            if !st.drives.iter().any(|d| d.id == id) {
                return Err(not_found(format!("no drive {id:?}")));
            }
            if req.is_empty() {
                st.drive_qos.remove(id);
            } else {
                st.drive_qos.insert(id.to_string(), req);
            }
            Ok(())
        })?;
        self.drive(id)
    }

    fn clear_drive_fault(&self, id: &str) -> MgmtResult<api::Drive> {
        let drive = self
            .drives
            .get(id)
            .ok_or_else(|| not_found(format!("no drive {id:?}")))?;
        if drive.fault().is_none() {
            return Err(conflict(format!("drive {id} has no fault")));
        }
        // Recorded as cleared first: a crash in between leaves it failed, not silently writable.
        self.mutate(|st| {
            st.drive_faults.remove(id);
            Ok(())
        })?;
        drive.clear_fault();
        self.drive(id)
    }

    fn ana_groups(&self) -> Vec<api::AnaGroup> {
        self.ana_groups_view()
    }

    fn cdc_registrations(&self) -> MgmtResult<Vec<api::CdcRegistration>> {
        let Some(dir) = &self.target.cdc else {
            return Err(MgmtError::NotFound(
                "this fabrikd is a box, not a central discovery controller (--role cdc)".into(),
            ));
        };
        Ok(dir.registrations().iter().map(crate::cdc::view).collect())
    }

    fn ana_group(&self, id: u32) -> MgmtResult<api::AnaGroup> {
        self.ana_group_by_id(id)
    }

    fn set_ana_group(&self, id: u32, req: api::AnaGroupRequest) -> MgmtResult<api::AnaGroup> {
        self.put_ana_group(id, req)
    }

    fn module(&self) -> api::Module {
        self.module_view()
    }

    fn set_module(&self, req: api::ModuleRequest) -> MgmtResult<api::Module> {
        self.put_module(req)
    }

    fn module_config(&self) -> api::ModuleConfig {
        self.module_config_view()
    }

    fn apply_module_config(&self, push: api::ModuleConfigPush) -> MgmtResult<api::ModuleConfig> {
        self.take_module_config(push)
    }

    fn push_module_config(&self) -> MgmtResult<api::Module> {
        self.give_module_config()
    }

    fn drive(&self, id: &str) -> MgmtResult<api::Drive> {
        let st = self.state();
        let slot = st
            .drives
            .iter()
            .position(|d| d.id == id)
            .ok_or_else(|| not_found(format!("no drive {id:?}")))?;
        Ok(self.drive_view(&st, slot))
    }

    fn subsystems(&self) -> Vec<api::Subsystem> {
        let st = self.state();
        let access = st.access();
        st.subsystems
            .iter()
            .map(|s| self.subsystem_view(&access, s))
            .collect()
    }

    fn subsystem(&self, nqn: &str) -> MgmtResult<api::Subsystem> {
        let st = self.state();
        let s = st
            .subsystems
            .iter()
            .find(|s| s.nqn == nqn)
            .ok_or_else(|| not_found(format!("no subsystem {nqn:?}")))?;
        Ok(self.subsystem_view(&st.access(), s))
    }

    fn create_subsystem(&self, req: api::SubsystemRequest) -> MgmtResult<api::Subsystem> {
        let nqn = match (&req.nqn, &req.name) {
            (Some(n), None) => n.clone(),
            (None, Some(name)) => format!("{NQN_PREFIX}:{}:{name}", self.target.box_name),
            _ => return Err(invalid("give exactly one of `nqn` or `name`")),
        };
        check_nqn("subsystem NQN", &nqn)?;
        if Nqn::new(&nqn).is_ok_and(|n| n.is_discovery()) {
            return Err(invalid("the discovery NQN cannot name a subsystem"));
        }
        for h in &req.hosts {
            check_nqn("host NQN", h)?;
        }
        if req.allow_any_host && !req.hosts.is_empty() {
            return Err(invalid("`hosts` must be empty with `allow_any_host`"));
        }
        if req.drives.len() as u32 > MAX_NAMESPACES {
            return Err(invalid(format!("at most {MAX_NAMESPACES} drives")));
        }
        self.mutate(|st| {
            if st.subsystems.iter().any(|s| s.nqn == nqn) {
                return Err(conflict(format!("subsystem {nqn} exists")));
            }
            let mut seen = BTreeSet::new();
            for d in &req.drives {
                claim_drive(st, d)?;
                if !seen.insert(d) {
                    return Err(invalid(format!("drive {d:?} is listed twice")));
                }
            }
            let h = crate::model::stable_id(&nqn, b"serial");
            st.subsystems.push(SubsystemState {
                nqn: nqn.clone(),
                serial: state::serial_number(
                    &st.box_name,
                    &format!("S{:02X}{:02X}{:02X}", h[0], h[1], h[2]),
                ),
                model: req
                    .model
                    .clone()
                    .unwrap_or_else(|| "fabrik subsystem".into()),
                allow_any_host: req.allow_any_host,
                hosts: req.hosts.clone(),
                namespaces: NamespaceState::numbered(&req.drives),
                require_auth: false,
            });
            Ok(())
        })?;
        self.subsystem(&nqn)
    }

    fn delete_subsystem(&self, nqn: &str) -> MgmtResult<()> {
        self.mutate(|st| {
            let i = st
                .subsystems
                .iter()
                .position(|s| s.nqn == nqn)
                .ok_or_else(|| not_found(format!("no subsystem {nqn:?}")))?;
            let s = &st.subsystems[i];
            if let Some(c) = st
                .compositions
                .iter()
                .find(|c| c.drives.iter().any(|d| s.drives().any(|x| x == d)))
            {
                return Err(conflict(format!(
                    "composition {} (host {}) uses subsystem {nqn}: decompose it first",
                    c.id, c.host_nqn
                )));
            }
            st.subsystems.remove(i);
            Ok(())
        })
    }

    fn set_subsystem_access(
        &self,
        nqn: &str,
        req: api::AccessRequest,
    ) -> MgmtResult<api::Subsystem> {
        self.mutate(|st| {
            let drives: Vec<String> = find_sub(st, nqn)?.drives().map(str::to_string).collect();
            if let Some(c) = st
                .compositions
                .iter()
                .find(|c| c.drives.iter().any(|d| drives.contains(d)))
            {
                return Err(conflict(format!(
                    "{nqn} is composed (composition {}): its access follows the composition; \
                     decompose it first",
                    c.id
                )));
            }
            let s = find_sub(st, nqn)?;
            s.allow_any_host = req.allow_any_host;
            if req.allow_any_host {
                s.hosts.clear();
            }
            Ok(())
        })?;
        self.subsystem(nqn)
    }

    fn allow_host(&self, nqn: &str, host_nqn: &str) -> MgmtResult<api::Subsystem> {
        check_nqn("host NQN", host_nqn)?;
        self.mutate(|st| {
            let s = find_sub(st, nqn)?;
            if s.hosts.iter().any(|h| h == host_nqn) {
                return Err(conflict(format!(
                    "host {host_nqn} is already allowed on {nqn}"
                )));
            }
            s.allow_any_host = false;
            s.hosts.push(host_nqn.to_string());
            Ok(())
        })?;
        self.subsystem(nqn)
    }

    fn disallow_host(&self, nqn: &str, host_nqn: &str) -> MgmtResult<api::Subsystem> {
        self.mutate(|st| {
            let s = find_sub(st, nqn)?.clone();
            if let Some(c) = st.compositions.iter().find(|c| {
                c.host_nqn == host_nqn && c.drives.iter().any(|d| s.drives().any(|x| x == d))
            }) {
                return Err(conflict(format!(
                    "host {host_nqn} reaches {nqn} through composition {}: decompose it instead",
                    c.id
                )));
            }
            let s = find_sub(st, nqn)?;
            let before = s.hosts.len();
            s.hosts.retain(|h| h != host_nqn);
            if s.hosts.len() == before {
                return Err(not_found(format!(
                    "host {host_nqn} is not on the allow list of {nqn}"
                )));
            }
            Ok(())
        })?;
        self.subsystem(nqn)
    }

    fn namespaces(&self, nqn: &str) -> MgmtResult<Vec<api::Namespace>> {
        let live = self.live_subsystem(nqn)?;
        Ok(live
            .namespaces()
            .iter()
            .map(|n| self.namespace_view(n))
            .collect())
    }

    fn add_namespace(&self, nqn: &str, req: api::NamespaceRequest) -> MgmtResult<api::Namespace> {
        if let Some(nsid) = req.nsid {
            if nsid == 0 || nsid > MAX_NAMESPACES {
                return Err(invalid(format!(
                    "NSID {nsid} is out of range (1..={MAX_NAMESPACES})"
                )));
            }
        }
        let nsid = self.mutate(|st| {
            find_sub(st, nqn)?;
            claim_drive(st, &req.drive)?;
            let s = find_sub(st, nqn)?;
            let nsid = match req.nsid {
                Some(n) if s.namespaces.iter().any(|x| x.nsid == n) => {
                    return Err(conflict(format!("NSID {n} is taken in {nqn}")))
                }
                Some(n) => n,
                None => (1..=MAX_NAMESPACES)
                    .find(|n| !s.namespaces.iter().any(|x| x.nsid == *n))
                    .ok_or_else(|| conflict(format!("{nqn} has no free NSID")))?,
            };
            s.namespaces.push(NamespaceState {
                nsid,
                drive: req.drive.clone(),
            });
            s.namespaces.sort_by_key(|n| n.nsid);
            Ok(nsid)
        })?;
        let ns = self
            .live_subsystem(nqn)?
            .namespace(nsid)
            .ok_or_else(|| MgmtError::Internal("namespace vanished".into()))?;
        Ok(self.namespace_view(&ns))
    }

    fn remove_namespace(&self, nqn: &str, nsid: u32) -> MgmtResult<()> {
        self.mutate(|st| {
            let s = find_sub(st, nqn)?;
            let i = s
                .namespaces
                .iter()
                .position(|n| n.nsid == nsid)
                .ok_or_else(|| not_found(format!("{nqn} has no namespace {nsid}")))?;
            let drive = s.namespaces[i].drive.clone();
            if let Some(c) = st.compositions.iter().find(|c| c.drives.contains(&drive)) {
                return Err(conflict(format!(
                    "drive {drive:?} is composed to {} (composition {}): decompose it first",
                    c.host_nqn, c.id
                )));
            }
            find_sub(st, nqn)?.namespaces.remove(i);
            Ok(())
        })
    }

    fn hosts(&self) -> Vec<api::Host> {
        let st = self.state();
        let index = self.host_index(&st);
        Self::known_hosts(&st)
            .iter()
            .map(|h| index.view(h))
            .collect()
    }

    fn host(&self, nqn: &str) -> MgmtResult<api::Host> {
        let st = self.state();
        if !Self::known_hosts(&st).contains(nqn) {
            return Err(not_found(format!("unknown host {nqn:?}")));
        }
        Ok(self.host_index(&st).view(nqn))
    }

    fn add_host(&self, req: api::HostRequest) -> MgmtResult<api::Host> {
        check_nqn("host NQN", &req.nqn)?;
        self.mutate(|st| {
            if st.hosts.iter().any(|h| h.nqn == req.nqn) {
                return Err(conflict(format!("host {} is registered", req.nqn)));
            }
            st.hosts.push(HostState {
                nqn: req.nqn.clone(),
                name: req.name.clone(),
                dhchap: hosts::keys(
                    &req.dhchap_secret,
                    &req.dhchap_ctrl_secret,
                    &req.dhchap_hash,
                    &req.dhchap_dhgroup,
                )?,
                qos: None,
            });
            Ok(())
        })?;
        self.host(&req.nqn)
    }

    fn set_host_keys(&self, nqn: &str, req: api::HostKeysRequest) -> MgmtResult<api::Host> {
        self.replace_host_keys(nqn, req)
    }

    fn set_subsystem_authentication(
        &self,
        nqn: &str,
        req: api::AuthenticationRequest,
    ) -> MgmtResult<api::Subsystem> {
        self.mutate(|st| {
            find_sub(st, nqn)?.require_auth = req.required;
            Ok(())
        })?;
        self.subsystem(nqn)
    }

    fn set_host_qos(&self, nqn: &str, req: api::QosLimits) -> MgmtResult<api::Host> {
        self.replace_host_qos(nqn, req)
    }

    fn delete_host(&self, nqn: &str) -> MgmtResult<()> {
        self.mutate(|st| {
            if !Self::known_hosts(st).contains(nqn) {
                return Err(not_found(format!("unknown host {nqn:?}")));
            }
            if let Some(c) = st.compositions.iter().find(|c| c.host_nqn == nqn) {
                return Err(conflict(format!(
                    "composition {} names host {nqn}: decompose it first",
                    c.id
                )));
            }
            st.hosts.retain(|h| h.nqn != nqn);
            for s in &mut st.subsystems {
                s.hosts.retain(|h| h != nqn);
            }
            Ok(())
        })
    }

    fn ports(&self) -> Vec<api::Port> {
        self.target
            .ports()
            .iter()
            .map(|p| self.port_view(p))
            .collect()
    }

    fn port(&self, id: u16) -> MgmtResult<api::Port> {
        self.find_port(id)
            .ok_or_else(|| not_found(format!("no port {id}")))
    }

    fn add_port(&self, req: api::PortRequest) -> MgmtResult<api::Port> {
        self.add_listener(req)
    }

    fn delete_port(&self, id: u16) -> MgmtResult<()> {
        self.remove_listener(id)
    }

    fn controllers(&self) -> Vec<api::Controller> {
        let mut all: Vec<_> = self
            .target
            .controllers()
            .iter()
            .map(|c| self.controller_view(c))
            .collect();
        all.sort_by_key(|c| c.id);
        all
    }

    fn controller(&self, id: u64) -> MgmtResult<api::Controller> {
        self.target
            .controllers()
            .iter()
            .find(|c| c.id == id)
            .map(|c| self.controller_view(c))
            .ok_or_else(|| not_found(format!("no live controller {id}")))
    }

    fn disconnect_controller(&self, id: u64) -> MgmtResult<()> {
        let ctrl = self
            .target
            .controllers()
            .into_iter()
            .find(|c| c.id == id)
            .ok_or_else(|| not_found(format!("no live controller {id}")))?;
        ctrl.shut_down("disconnected through the management API");
        Ok(())
    }

    fn volumes(&self) -> Vec<api::Volume> {
        self.list_volumes()
    }

    fn volume(&self, name: &str) -> MgmtResult<api::Volume> {
        self.volume_by_name(name)
    }

    fn create_volume(&self, req: api::VolumeRequest) -> MgmtResult<api::Volume> {
        self.make_volume(req)
    }

    fn delete_volume(&self, name: &str) -> MgmtResult<()> {
        self.remove_volume(name)
    }

    fn fail_volume_member(&self, name: &str, drive: &str) -> MgmtResult<api::Volume> {
        self.fail_member(name, drive)
    }

    fn add_volume_spare(&self, name: &str, req: api::SpareRequest) -> MgmtResult<api::Volume> {
        self.add_spare(name, req)
    }

    fn set_volume_rebuild_limit(
        &self,
        name: &str,
        req: api::RebuildLimit,
    ) -> MgmtResult<api::Volume> {
        self.set_rebuild_limit(name, req)
    }

    fn scrub_volume(&self, name: &str) -> MgmtResult<api::Volume> {
        self.start_scrub(name)
    }

    fn compositions(&self) -> Vec<api::Composition> {
        let st = self.state();
        let access = st.access();
        st.compositions
            .iter()
            .map(|c| self.composition_view(&access, c))
            .collect()
    }

    fn composition(&self, id: &str) -> MgmtResult<api::Composition> {
        let st = self.state();
        st.compositions
            .iter()
            .find(|c| c.id == id)
            .map(|c| self.composition_view(&st.access(), c))
            .ok_or_else(|| not_found(format!("no composition {id:?}")))
    }

    fn compose(&self, req: api::CompositionRequest) -> MgmtResult<api::Composition> {
        check_nqn("host NQN", &req.host_nqn)?;
        if Nqn::new(&req.host_nqn).is_ok_and(|n| n.is_discovery()) {
            return Err(invalid("the discovery NQN cannot name a host"));
        }
        if req.drives.is_empty() {
            return Err(invalid("`drives` is empty: name at least one drive"));
        }
        let live_ports: Vec<u16> = self.target.ports().iter().map(|p| p.id).collect();
        if let Some(ports) = &req.ports {
            if ports.is_empty() {
                return Err(invalid("`ports` is empty: omit it for every port"));
            }
            if let Some(p) = ports.iter().find(|p| !live_ports.contains(p)) {
                return Err(not_found(format!("no port {p}")));
            }
        }
        let id = self.mutate(|st| {
            let mut seen = BTreeSet::new();
            for d in &req.drives {
                if !seen.insert(d) {
                    return Err(invalid(format!("drive {d:?} is listed twice")));
                }
                let volume = st.volumes.iter().any(|v| v.created && &v.id() == d);
                if !volume && !st.drives.iter().any(|x| &x.id == d) {
                    return Err(not_found(format!("no drive {d:?}")));
                }
                let Some(sub) = st.subsystem_of_drive(d) else {
                    return Err(conflict(format!(
                        "drive {d:?} is in no subsystem: add it to one first"
                    )));
                };
                if let Some(other) = sub.drives().find(|x| !req.drives.iter().any(|r| r == x)) {
                    return Err(conflict(format!(
                        "drive {d:?} shares subsystem {} with drive {other:?}: compose them together",
                        sub.nqn
                    )));
                }
                for c in st.compositions.iter().filter(|c| c.drives.contains(d)) {
                    if c.host_nqn == req.host_nqn {
                        return Err(conflict(format!(
                            "drive {d:?} is already composed to {} (composition {})",
                            c.host_nqn, c.id
                        )));
                    }
                    if !(c.shared && req.shared) {
                        return Err(conflict(format!(
                            "drive {d:?} is composed to {} (composition {}); both compositions must be shared to share it",
                            c.host_nqn, c.id
                        )));
                    }
                }
            }
            let id = format!("c{}", st.next_composition);
            st.next_composition += 1;
            st.compositions.push(CompositionState {
                id: id.clone(),
                host_nqn: req.host_nqn.clone(),
                drives: req.drives.clone(),
                shared: req.shared,
                ports: req.ports.clone(),
            });
            Ok(id)
        })?;
        self.composition(&id)
    }

    /// Also ends the host's controllers of these drives when their subsystem stays open to it
    /// (configured to admit any host): what the composition gave is taken back either way.
    fn decompose(&self, id: &str) -> MgmtResult<()> {
        let (gone, subsystems) = self.mutate(|st| {
            let i = st
                .compositions
                .iter()
                .position(|c| c.id == id)
                .ok_or_else(|| not_found(format!("no composition {id:?}")))?;
            let gone = st.compositions.remove(i);
            let subsystems: BTreeSet<String> = gone
                .drives
                .iter()
                .filter_map(|d| st.subsystem_of_drive(d).map(|s| s.nqn.clone()))
                .collect();
            Ok((gone, subsystems))
        })?;
        for nqn in subsystems {
            for ctrl in self
                .target
                .subsystem(&nqn)
                .iter()
                .flat_map(|s| s.controllers())
            {
                if ctrl.hostnqn.as_deref() == Some(gone.host_nqn.as_str()) {
                    ctrl.shut_down("its composition was removed");
                }
            }
        }
        Ok(())
    }
}

fn find_sub<'a>(st: &'a mut State, nqn: &str) -> MgmtResult<&'a mut SubsystemState> {
    st.subsystems
        .iter_mut()
        .find(|s| s.nqn == nqn)
        .ok_or_else(|| not_found(format!("no subsystem {nqn:?}")))
}

/// Checks that `drive` exists and is in no subsystem (a drive is one namespace of one subsystem).
fn claim_drive(st: &State, drive: &str) -> MgmtResult<()> {
    if !st.drives.iter().any(|d| d.id == drive) {
        return Err(not_found(format!("no drive {drive:?}")));
    }
    if let Some(v) = st
        .volumes
        .iter()
        .find(|v| v.all_drives().any(|d| d == drive))
    {
        return Err(conflict(format!(
            "drive {drive:?} is in volume {}: delete the volume first",
            v.name
        )));
    }
    if let Some(s) = st.subsystem_of_drive(drive) {
        return Err(conflict(format!(
            "drive {drive:?} is exported by {}: remove that namespace first",
            s.nqn
        )));
    }
    Ok(())
}
