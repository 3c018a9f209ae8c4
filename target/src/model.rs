//! The target's configuration model at run time: Subsystems (NQN, identity, allowed hosts) holding
//! Namespaces backed by Drives, exposed on Ports. Controllers are created per host association
//! and registered with their subsystem so I/O queues can find them.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Instant;

use fabrik_proto::fabrics::discovery::Tsas;
use fabrik_proto::fabrics::nqn::Nqn;
pub use fabrik_proto::fabrics::Transport;

use crate::backend::Drive;
use crate::controller::Controller;

/// A drive exported as a namespace, with the counters SMART and metrics report.
pub struct Namespace {
    pub nsid: u32,
    /// Name of the drive (e.g. "07"), for logs.
    pub drive_id: String,
    pub drive: Arc<dyn Drive>,
    pub nguid: [u8; 16],
    pub uuid: [u8; 16],
    /// False while the drive cannot serve I/O (commands get Namespace Not Ready).
    pub ready: AtomicBool,
    pub stats: NamespaceStats,
}

#[derive(Default)]
pub struct NamespaceStats {
    pub read_commands: AtomicU64,
    pub write_commands: AtomicU64,
    pub bytes_read: AtomicU64,
    pub bytes_written: AtomicU64,
    pub media_errors: AtomicU64,
    /// Latencies, other commands, errors (metrics), per thread.
    pub io: crate::metrics::Striped<crate::metrics::DriveCounters>,
}

impl NamespaceStats {
    pub fn add_read(&self, bytes: u64) {
        self.read_commands.fetch_add(1, Ordering::Relaxed);
        self.bytes_read.fetch_add(bytes, Ordering::Relaxed);
    }
    pub fn add_write(&self, bytes: u64) {
        self.write_commands.fetch_add(1, Ordering::Relaxed);
        self.bytes_written.fetch_add(bytes, Ordering::Relaxed);
    }
    pub fn read_latency(&self, elapsed: std::time::Duration) {
        self.io.local().read_latency.observe(elapsed);
    }
    pub fn write_latency(&self, elapsed: std::time::Duration) {
        self.io.local().write_latency.observe(elapsed);
    }
    pub fn add_other(&self) {
        self.io
            .local()
            .other_commands
            .fetch_add(1, Ordering::Relaxed);
    }
    pub fn add_error(&self) {
        self.io.local().errors.fetch_add(1, Ordering::Relaxed);
    }
}

impl Namespace {
    pub fn new(nsid: u32, drive_id: &str, drive: Arc<dyn Drive>, identity_seed: &str) -> Namespace {
        let nguid = stable_id(identity_seed, b"nguid");
        let mut uuid = stable_id(identity_seed, b"uuid");
        // RFC 4122 version 4 / variant 1 bits, so tools display a well-formed UUID.
        uuid[6] = (uuid[6] & 0x0f) | 0x40;
        uuid[8] = (uuid[8] & 0x3f) | 0x80;
        Namespace {
            nsid,
            drive_id: drive_id.to_string(),
            drive,
            nguid,
            uuid,
            ready: AtomicBool::new(true),
            stats: NamespaceStats::default(),
        }
    }

    pub fn block_size(&self) -> u32 {
        self.drive.info().block_size
    }

    /// Namespace size in logical blocks.
    pub fn blocks(&self) -> u64 {
        self.drive.info().capacity / self.block_size() as u64
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }
}

/// An NVM subsystem: what a host connects to by NQN.
pub struct Subsystem {
    pub nqn: Nqn,
    pub serial: String,
    pub model: String,
    /// None: any host may connect. Some(list): only these host NQNs. Changed live by the
    /// management API.
    allowed_hosts: RwLock<Option<Vec<String>>>,
    namespaces: RwLock<BTreeMap<u32, Arc<Namespace>>>,
    controllers: Mutex<HashMap<u16, Weak<Controller>>>,
    /// Controllers torn down whose queues may still have commands at the backend: a host
    /// connects again only once its old controllers' commands are done (see `fence`).
    retiring: Mutex<Vec<Weak<Controller>>>,
    next_cntlid: AtomicU16,
}

/// Highest dynamic controller ID (0xFFF0..0xFFFF are reserved).
const MAX_CNTLID: u16 = 0xFFEF;

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
            controllers: Mutex::new(HashMap::new()),
            retiring: Mutex::new(Vec::new()),
            next_cntlid: AtomicU16::new(1),
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
        self.namespaces.write().unwrap().insert(nsid, ns);
        self.namespace_changed(nsid);
    }

    /// Removes a namespace, telling connected controllers as `add_namespace` does.
    pub fn remove_namespace(&self, nsid: u32) -> Option<Arc<Namespace>> {
        let removed = self.namespaces.write().unwrap().remove(&nsid);
        if removed.is_some() {
            self.namespace_changed(nsid);
        }
        removed
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
        self.namespaces()
            .iter()
            .any(|ns| ns.drive.info().volatile_write_cache)
    }

    /// Registers a controller under a fresh CNTLID, unique among this subsystem's live controllers.
    pub fn register_controller(
        &self,
        make: impl FnOnce(u16) -> Arc<Controller>,
    ) -> Option<Arc<Controller>> {
        register(
            &mut self.controllers.lock().unwrap(),
            &self.next_cntlid,
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
        tokio::time::timeout(limit, all).await.is_ok()
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

/// A listener: transport, address, and the port ID the discovery log reports.
#[derive(Clone, Debug)]
pub struct Port {
    pub id: u16,
    pub transport: Transport,
    pub addr: SocketAddr,
    pub caps: TransportCaps,
}

/// What a port's transport offers hosts, as Identify and the discovery log report it. The
/// transport's listener fills it in when it binds, so controllers read it and never ask which
/// transport they run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransportCaps {
    /// Data may be described by keyed SGLs: host memory the controller reads and writes
    /// remotely (Identify SGLS bit 2).
    pub keyed_sgls: bool,
    /// Bytes of data an I/O command capsule may carry after its SQE (Identify IOCCSZ; 0: none,
    /// and no SGL offsets either).
    pub in_capsule_data: u32,
    /// The transport specific address subtype of the port's discovery log entries.
    pub tsas: Tsas,
}

/// Everything a queue needs to find: subsystems by NQN, the discovery generation counter.
pub struct TargetState {
    pub box_name: String,
    subsystems: RwLock<BTreeMap<String, Arc<Subsystem>>>,
    ports: RwLock<Vec<Port>>,
    discovery_genctr: AtomicU64,
    discovery_controllers: Mutex<HashMap<u16, Weak<Controller>>>,
    next_discovery_cntlid: AtomicU16,
    pub started: Instant,
    /// Source of `Controller::id`: unique over fabrikd's lifetime.
    next_controller_id: AtomicU64,
    /// Set when fabrikd is shutting down: queues stop taking new commands.
    pub shutting_down: AtomicBool,
    pub metrics: crate::metrics::TargetMetrics,
}

impl TargetState {
    pub fn new(box_name: String) -> TargetState {
        TargetState {
            box_name,
            subsystems: RwLock::new(BTreeMap::new()),
            ports: RwLock::new(Vec::new()),
            discovery_genctr: AtomicU64::new(1),
            discovery_controllers: Mutex::new(HashMap::new()),
            next_discovery_cntlid: AtomicU16::new(1),
            started: Instant::now(),
            next_controller_id: AtomicU64::new(1),
            shutting_down: AtomicBool::new(false),
            metrics: crate::metrics::TargetMetrics::default(),
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
            make,
        )
    }

    pub fn unregister_discovery_controller(&self, cntlid: u16) {
        self.discovery_controllers.lock().unwrap().remove(&cntlid);
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
    make: impl FnOnce(u16) -> Arc<Controller>,
) -> Option<Arc<Controller>> {
    ctrls.retain(|_, c| c.strong_count() > 0);
    for _ in 0..MAX_CNTLID {
        let id = (next.fetch_add(1, Ordering::Relaxed) % MAX_CNTLID).max(1);
        if let std::collections::hash_map::Entry::Vacant(slot) = ctrls.entry(id) {
            let ctrl = make(id);
            slot.insert(Arc::downgrade(&ctrl));
            return Some(ctrl);
        }
    }
    None
}

/// A stable 16-byte identifier derived from a name (FNV-1a, 128-bit): NGUIDs and UUIDs stay the
/// same across restarts and differ between drives and boxes, as the Linux host requires.
pub fn stable_id(seed: &str, salt: &[u8]) -> [u8; 16] {
    const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
    const PRIME: u128 = 0x0000000001000000000000000000013B;
    let mut h = OFFSET;
    for &b in seed.as_bytes().iter().chain(b"/").chain(salt) {
        h ^= b as u128;
        h = h.wrapping_mul(PRIME);
    }
    h.to_be_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_ids_differ_and_repeat() {
        assert_eq!(stable_id("box:00", b"nguid"), stable_id("box:00", b"nguid"));
        assert_ne!(stable_id("box:00", b"nguid"), stable_id("box:01", b"nguid"));
        assert_ne!(stable_id("box:00", b"nguid"), stable_id("box:00", b"uuid"));
    }
}
