//! Subsystems (NQN, identity, allowed hosts, namespaces) and the target state that holds them,
//! with the controllers registered in them so I/O queues can find them.
//!
//! They live here, with the controllers, rather than in `model`: a subsystem tears down,
//! notifies and fences its controllers, and a controller serves its subsystem, so each uses
//! the other. A trait object in the registry would not cut that: the queues, the management
//! API and the metrics take `Controller`s out of it. Namespaces and ports know no controller
//! and stay in `model`, a layer below.

use std::collections::{BTreeMap, HashMap};
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Instant;

use fabrik_proto::fabrics::nqn::Nqn;

use super::Controller;
use crate::model::{Namespace, Port};
use crate::module::{self, ModuleId};
use crate::reactor::{Polling, Reactors};
use crate::stats::TargetMetrics;

/// An NVM subsystem: what a host connects to by NQN.
pub struct Subsystem {
    pub nqn: Nqn,
    pub serial: String,
    pub model: String,
    /// None: any host may connect. Some(list): only these host NQNs. Changed live by the
    /// management API.
    allowed_hosts: RwLock<Option<Vec<String>>>,
    namespaces: RwLock<BTreeMap<u32, Arc<Namespace>>>,
    /// Whether any namespace's drive caches writes, kept as namespaces come and go: every
    /// write asks it.
    volatile_cache: AtomicBool,
    controllers: Mutex<HashMap<u16, Weak<Controller>>>,
    /// Controllers torn down whose queues may still have commands at the backend: a host
    /// connects again only once its old controllers' commands are done (see `fence`).
    retiring: Mutex<Vec<Weak<Controller>>>,
    next_cntlid: AtomicU16,
    /// Only hosts with DH-HMAC-CHAP keys may connect (set by the management layer).
    pub require_auth: AtomicBool,
}

impl Subsystem {
    pub fn new(
        nqn: Nqn,
        serial: String,
        model: String,
        allowed_hosts: Option<Vec<String>>,
    ) -> Subsystem {
        Subsystem {
            nqn,
            serial,
            model,
            allowed_hosts: RwLock::new(allowed_hosts),
            namespaces: RwLock::new(BTreeMap::new()),
            volatile_cache: AtomicBool::new(false),
            controllers: Mutex::new(HashMap::new()),
            retiring: Mutex::new(Vec::new()),
            next_cntlid: AtomicU16::new(0),
            require_auth: AtomicBool::new(false),
        }
    }

    /// Whether `hostnqn` may connect. A host without a host NQN (None) may only where any host
    /// may, as Linux nvmet compares the (empty) string with its allow list.
    pub fn host_allowed(&self, hostnqn: Option<&str>) -> bool {
        match &*self.allowed_hosts.read().unwrap() {
            None => true,
            Some(list) => hostnqn.is_some_and(|nqn| list.iter().any(|h| h == nqn)),
        }
    }

    pub fn allowed_hosts(&self) -> Option<Vec<String>> {
        self.allowed_hosts.read().unwrap().clone()
    }

    /// Changes who may connect. Controllers of hosts no longer allowed are torn down; the caller
    /// tells discovery controllers (`TargetState::discovery_changed`).
    pub fn set_allowed_hosts(&self, hosts: Option<Vec<String>>) {
        *self.allowed_hosts.write().unwrap() = hosts;
        for ctrl in self.controllers() {
            if !self.host_allowed(ctrl.hostnqn.as_deref()) {
                ctrl.shut_down("the host's access to the subsystem was removed");
            }
        }
    }

    /// Adds (or replaces) a namespace; connected controllers get a Namespace Attribute Changed
    /// event and find the NSID in their Changed Namespace List.
    pub fn add_namespace(&self, ns: Arc<Namespace>) {
        let nsid = ns.nsid;
        let replaced = {
            let mut namespaces = self.namespaces.write().unwrap();
            let replaced = namespaces.insert(nsid, ns);
            self.note_volatile_cache(&namespaces);
            replaced
        };
        if let Some(old) = replaced {
            old.mark_removed();
        }
        self.namespace_changed(nsid);
    }

    /// Removes a namespace, telling connected controllers as `add_namespace` does.
    pub fn remove_namespace(&self, nsid: u32) -> Option<Arc<Namespace>> {
        let removed = {
            let mut namespaces = self.namespaces.write().unwrap();
            let removed = namespaces.remove(&nsid);
            self.note_volatile_cache(&namespaces);
            removed
        };
        if let Some(ns) = &removed {
            ns.mark_removed();
            self.namespace_changed(nsid);
        }
        removed
    }

    fn note_volatile_cache(&self, namespaces: &BTreeMap<u32, Arc<Namespace>>) {
        let volatile = namespaces
            .values()
            .any(|ns| ns.drive.info().volatile_write_cache);
        self.volatile_cache.store(volatile, Ordering::Release);
    }

    fn namespace_changed(&self, nsid: u32) {
        for ctrl in self.controllers() {
            ctrl.namespace_changed(nsid);
        }
    }

    pub fn namespace(&self, nsid: u32) -> Option<Arc<Namespace>> {
        self.namespaces.read().unwrap().get(&nsid).cloned()
    }

    pub fn namespaces(&self) -> Vec<Arc<Namespace>> {
        self.namespaces.read().unwrap().values().cloned().collect()
    }

    /// Whether any namespace's drive acknowledges writes before they are durable.
    pub fn has_volatile_cache(&self) -> bool {
        self.volatile_cache.load(Ordering::Acquire)
    }

    /// Registers a controller under a fresh CNTLID from `ids`, unique among this subsystem's
    /// live controllers.
    pub fn register_controller(
        &self,
        ids: &RangeInclusive<u16>,
        make: impl FnOnce(u16) -> Arc<Controller>,
    ) -> Option<Arc<Controller>> {
        register(
            &mut self.controllers.lock().unwrap(),
            &self.next_cntlid,
            ids,
            make,
        )
    }

    pub fn controller(&self, cntlid: u16) -> Option<Arc<Controller>> {
        self.controllers
            .lock()
            .unwrap()
            .get(&cntlid)
            .and_then(Weak::upgrade)
    }

    pub fn unregister_controller(&self, cntlid: u16) {
        let gone = self.controllers.lock().unwrap().remove(&cntlid);
        if let Some(ctrl) = gone {
            let mut retiring = self.retiring.lock().unwrap();
            retiring.retain(|c| c.upgrade().is_some_and(|c| !c.drained()));
            retiring.push(ctrl);
        }
    }

    /// Waits until every torn-down controller of `hostnqn` has finished the commands its
    /// queues had passed to the backend, so that a write of the old association cannot land
    /// after the host, reconnected, wrote the same blocks anew (Linux nvmet likewise frees a
    /// controller only once its queues' requests are done). False if that takes longer than
    /// `limit` (a hung drive): the caller refuses the Connect, and the host retries.
    pub async fn fence(&self, hostnqn: Option<&str>, limit: std::time::Duration) -> bool {
        let old: Vec<Arc<Controller>> = self
            .retiring
            .lock()
            .unwrap()
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|c| c.hostnqn.as_deref() == hostnqn && !c.drained())
            .collect();
        let all = futures_util::future::join_all(old.iter().map(|c| c.wait_drained()));
        crate::timer::timeout(limit, all).await.is_ok()
    }

    pub fn controllers(&self) -> Vec<Arc<Controller>> {
        self.controllers
            .lock()
            .unwrap()
            .values()
            .filter_map(Weak::upgrade)
            .collect()
    }
}

/// Everything a queue needs to find: subsystems by NQN, the discovery generation counter.
pub struct TargetState {
    pub box_name: String,
    subsystems: RwLock<BTreeMap<String, Arc<Subsystem>>>,
    ports: RwLock<Vec<Port>>,
    discovery_genctr: AtomicU64,
    /// Woken at every change of the discovery log (a box's registration with a CDC waits on it).
    pub discovery_notify: tokio::sync::Notify,
    discovery_controllers: Mutex<HashMap<u16, Weak<Controller>>>,
    next_discovery_cntlid: AtomicU16,
    pub started: Instant,
    /// Source of `Controller::id`: unique over fabrikd's lifetime.
    next_controller_id: AtomicU64,
    /// Set when fabrikd is shutting down: queues stop taking new commands.
    pub shutting_down: AtomicBool,
    pub metrics: TargetMetrics,
    /// The I/O threads queues are placed on.
    pub reactors: Reactors,
    /// NVMe/TCP ends a successful read with a SUCCESS-flagged C2HData and no response capsule
    /// for every host, not only for those that disabled SQ flow control (the one case the
    /// specification allows). The Linux and SPDK hosts complete the command from that PDU
    /// either way and do not use the SQ head the capsule would carry; SPDK's target does this by
    /// default. Saves the host parsing a second PDU per read.
    pub c2h_success: bool,
    /// The control runtime (the one the target was made on): keep-alive timers and other
    /// background work of a controller go there, not onto a reactor.
    control: Option<tokio::runtime::Handle>,
    /// The ANA groups' states as this process's ports report them.
    pub ana: super::ana::Ana,
    /// Which of the box's I/O modules this process is (None: the box has one).
    pub module: Option<ModuleId>,
    /// Controller IDs this process hands out (see `module::cntlids`).
    pub cntlids: RangeInclusive<u16>,
    /// Where reservation changes are made durable (see `reservation::ReservationStore`).
    pub(super) reservation_store:
        std::sync::OnceLock<Weak<dyn super::reservation::ReservationStore>>,
    /// Hosts that must authenticate, and their keys (see `auth`).
    pub(super) host_auth: RwLock<Arc<super::auth::HostAuthTable>>,
    /// Hosts' I/O limits, by NQN: one limiter per host that ever had limits (its
    /// controllers keep it), disabled when the limits are lifted.
    host_qos: Mutex<HashMap<String, Arc<crate::qos::Limiter>>>,
    /// Drives' I/O limits, by drive ID, kept as the hosts' are.
    drive_qos: Mutex<HashMap<String, Arc<crate::qos::Limiter>>>,
    /// Set when this fabrikd is a central discovery controller (`--role cdc`): its discovery
    /// log is made from the boxes registered here.
    pub cdc: Option<Arc<crate::cdc::Directory>>,
}

impl TargetState {
    /// Takes the hosts' limits (hosts not listed have none) and hands each limited host's
    /// limiter to its live controllers.
    pub fn set_host_qos<'a>(
        &self,
        limits: impl IntoIterator<Item = (&'a str, &'a fabrik_api::models::QosLimits)>,
    ) {
        let mut table = self.host_qos.lock().unwrap();
        let mut limited = std::collections::HashSet::new();
        for (nqn, l) in limits {
            table.entry(nqn.to_string()).or_default().set(Some(l));
            limited.insert(nqn.to_string());
        }
        for (nqn, limiter) in table.iter() {
            if !limited.contains(nqn) {
                limiter.set(None);
            }
        }
        for c in self.controllers() {
            if let Some(l) = c.hostnqn.as_ref().and_then(|n| table.get(n)) {
                let _ = c.qos.set(l.clone());
            }
        }
    }

    /// Takes the drives' limits (drives not listed have none) and hands each limited drive's
    /// limiter to the namespaces exporting it.
    pub fn set_drive_qos<'a>(
        &self,
        limits: impl IntoIterator<Item = (&'a str, &'a fabrik_api::models::QosLimits)>,
    ) {
        let mut table = self.drive_qos.lock().unwrap();
        let mut limited = std::collections::HashSet::new();
        for (drive, l) in limits {
            table.entry(drive.to_string()).or_default().set(Some(l));
            limited.insert(drive.to_string());
        }
        for (drive, limiter) in table.iter() {
            if !limited.contains(drive) {
                limiter.set(None);
            }
        }
        for sub in self.subsystems() {
            for ns in sub.namespaces() {
                if let Some(l) = table.get(&ns.drive_id) {
                    let _ = ns.qos.set(l.clone());
                }
            }
        }
    }

    /// The drive's limiter, if it ever had limits.
    pub fn drive_limiter(&self, drive: &str) -> Option<Arc<crate::qos::Limiter>> {
        self.drive_qos.lock().unwrap().get(drive).cloned()
    }

    /// The host's limiter, if it ever had limits.
    pub(super) fn host_limiter(&self, hostnqn: Option<&str>) -> Option<Arc<crate::qos::Limiter>> {
        self.host_qos.lock().unwrap().get(hostnqn?).cloned()
    }

    pub fn new(box_name: String) -> TargetState {
        TargetState {
            box_name,
            subsystems: RwLock::new(BTreeMap::new()),
            ports: RwLock::new(Vec::new()),
            discovery_genctr: AtomicU64::new(1),
            discovery_notify: tokio::sync::Notify::new(),
            discovery_controllers: Mutex::new(HashMap::new()),
            next_discovery_cntlid: AtomicU16::new(0),
            started: Instant::now(),
            next_controller_id: AtomicU64::new(1),
            shutting_down: AtomicBool::new(false),
            metrics: TargetMetrics::default(),
            reactors: Reactors::new(Vec::new(), Polling::default()),
            c2h_success: false,
            control: tokio::runtime::Handle::try_current().ok(),
            ana: super::ana::Ana::new(module::ana_groups(None)),
            module: None,
            cntlids: module::cntlids(None),
            reservation_store: std::sync::OnceLock::new(),
            host_auth: RwLock::default(),
            host_qos: Mutex::default(),
            drive_qos: Mutex::default(),
            cdc: None,
        }
    }

    /// This process is a central discovery controller with `directory`.
    pub fn with_cdc(mut self, directory: Option<Arc<crate::cdc::Directory>>) -> TargetState {
        self.cdc = directory;
        self
    }

    /// This process is I/O module `module` of a pair: its half of the controller IDs, an ANA
    /// group per module.
    pub fn with_module(mut self, module: Option<ModuleId>) -> TargetState {
        self.ana = super::ana::Ana::new(crate::module::ana_groups(module));
        self.cntlids = crate::module::cntlids(module);
        self.module = module;
        self
    }

    /// Queues run on reactors on these cores (empty: every core this process may use), with
    /// this polling policy.
    pub fn with_reactors(mut self, cores: Vec<usize>, polling: Polling) -> TargetState {
        self.reactors = Reactors::new(cores, polling);
        self
    }

    /// NVMe/TCP reads end with a SUCCESS-flagged C2HData for every host (see `c2h_success`).
    pub fn with_c2h_success(mut self, on: bool) -> TargetState {
        self.c2h_success = on;
        self
    }

    /// Runs background work of the control plane (timers, a shutdown's flush) on the control
    /// runtime, wherever it is started from.
    pub fn spawn_control<F>(&self, work: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match &self.control {
            Some(handle) => handle.spawn(work),
            None => tokio::spawn(work),
        }
    }

    pub fn add_subsystem(&self, s: Arc<Subsystem>) {
        self.subsystems
            .write()
            .unwrap()
            .insert(s.nqn.as_str().to_string(), s);
        self.discovery_changed();
    }

    /// Removes a subsystem, tearing its controllers down.
    pub fn remove_subsystem(&self, nqn: &str) -> Option<Arc<Subsystem>> {
        let removed = self.subsystems.write().unwrap().remove(nqn);
        if let Some(sub) = &removed {
            for ctrl in sub.controllers() {
                ctrl.shut_down("the subsystem was removed");
            }
            self.discovery_changed();
        }
        removed
    }

    pub fn subsystem(&self, nqn: &str) -> Option<Arc<Subsystem>> {
        self.subsystems.read().unwrap().get(nqn).cloned()
    }

    pub fn subsystems(&self) -> Vec<Arc<Subsystem>> {
        self.subsystems.read().unwrap().values().cloned().collect()
    }

    pub fn add_port(&self, p: Port) {
        self.ports.write().unwrap().push(p);
        self.discovery_changed();
    }

    pub fn remove_port(&self, id: u16) {
        self.ports.write().unwrap().retain(|p| p.id != id);
        self.discovery_changed();
    }

    pub fn ports(&self) -> Vec<Port> {
        self.ports.read().unwrap().clone()
    }

    pub fn next_port_id(&self) -> u16 {
        self.ports.read().unwrap().len() as u16 + 1
    }

    pub fn next_controller_id(&self) -> u64 {
        self.next_controller_id.fetch_add(1, Ordering::Relaxed)
    }

    pub fn discovery_genctr(&self) -> u64 {
        self.discovery_genctr.load(Ordering::Acquire)
    }

    /// Bumps the discovery log generation and tells connected discovery controllers.
    pub fn discovery_changed(&self) {
        self.discovery_genctr.fetch_add(1, Ordering::AcqRel);
        self.discovery_notify.notify_waiters();
        let ctrls: Vec<_> = self
            .discovery_controllers
            .lock()
            .unwrap()
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        for c in ctrls {
            c.discovery_log_changed();
        }
    }

    pub fn register_discovery_controller(
        &self,
        make: impl FnOnce(u16) -> Arc<Controller>,
    ) -> Option<Arc<Controller>> {
        register(
            &mut self.discovery_controllers.lock().unwrap(),
            &self.next_discovery_cntlid,
            &self.cntlids,
            make,
        )
    }

    pub fn unregister_discovery_controller(&self, cntlid: u16) {
        self.discovery_controllers.lock().unwrap().remove(&cntlid);
        if self.cdc.as_ref().is_some_and(|d| d.controller_gone(cntlid)) {
            self.discovery_changed();
        }
    }

    /// Every live controller, I/O and discovery.
    pub fn controllers(&self) -> Vec<Arc<Controller>> {
        let mut all: Vec<_> = self
            .subsystems()
            .iter()
            .flat_map(|s| s.controllers())
            .collect();
        all.extend(
            self.discovery_controllers
                .lock()
                .unwrap()
                .values()
                .filter_map(Weak::upgrade),
        );
        all
    }
}

/// Registers a controller under the next free CNTLID (1..=0xFFEF, unique among live controllers
/// of `ctrls`); None when every ID is taken.
fn register(
    ctrls: &mut HashMap<u16, Weak<Controller>>,
    next: &AtomicU16,
    ids: &RangeInclusive<u16>,
    make: impl FnOnce(u16) -> Arc<Controller>,
) -> Option<Arc<Controller>> {
    ctrls.retain(|_, c| c.strong_count() > 0);
    let count = ids.end() - ids.start() + 1;
    for _ in 0..count {
        let id = ids.start() + next.fetch_add(1, Ordering::Relaxed) % count;
        if let std::collections::hash_map::Entry::Vacant(slot) = ctrls.entry(id) {
            let ctrl = make(id);
            slot.insert(Arc::downgrade(&ctrl));
            return Some(ctrl);
        }
    }
    None
}
