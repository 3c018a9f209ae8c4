//! NVMe controllers, one per host association (dynamic controller model), and the queues that
//! feed them. One file per concern, like Linux `drivers/nvme/target`:
//! `queue` (binding a transport queue to a controller, dispatch), `books` (what every transport
//! keeps the same per queue: SQ head, CIDs in flight, parked AERs, each completion entry),
//! `fabrics` (Connect, Property Get/Set, Disconnect), `admin` (Identify, Get Log Page, Features,
//! Abort), `io` (NVM commands), `discovery` (the discovery log), `events` (asynchronous events),
//! `keepalive`, and `registry` (the subsystems and the target state, where controllers are
//! registered).
//! No code here knows which transport it runs on.

mod admin;
pub mod ana;
pub mod auth;
pub mod books;
mod dim;
mod discovery;
mod events;
mod fabrics;
mod io;
mod keepalive;
pub mod ns_cache;
mod parked;
pub mod queue;
mod registry;
pub mod reservation;
#[cfg(test)]
mod tests;

use std::collections::{HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use fabrik_proto::fabrics::property::{Cap, Cc, Csts};
use fabrik_proto::nvme::log::ErrorLogEntry;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::model::{Transport, TransportCaps};

pub use queue::{Admitted, Queue, Response, Route};
pub use registry::{Subsystem, TargetState};

/// Limits this target advertises.
pub mod limits {
    /// Maximum queue entries (CAP.MQES is this minus one).
    pub const MAX_QUEUE_ENTRIES: u32 = 1024;
    /// Admin queue entries the host may ask for (NVME_AQ_DEPTH in Linux is 32).
    pub const MAX_ADMIN_QUEUE_ENTRIES: u32 = 32;

    /// Entries queue `qid` may have (Connect SQSIZE + 1, NVMe/RDMA HSQSIZE + 1).
    pub const fn max_queue_entries(qid: u16) -> u32 {
        if qid == 0 {
            MAX_ADMIN_QUEUE_ENTRIES
        } else {
            MAX_QUEUE_ENTRIES
        }
    }
    /// I/O queues per controller.
    pub const MAX_IO_QUEUES: u32 = 128;
    /// Maximum data transfer size: 2^MDTS minimum pages (4 KiB) = 1 MiB.
    pub const MDTS: u8 = 8;
    pub const MAX_TRANSFER: u32 = 4096 << MDTS;
    /// In-capsule data on I/O queues, as the Linux target's default (both listeners offer it).
    pub const IO_INLINE_DATA: u32 = 16384;
    /// Fabrics commands and admin commands may carry this much in-capsule (Linux host's admin limit).
    pub const ADMIN_INLINE_DATA: u32 = 8192;
    /// Asynchronous Event Request Limit (0's based in Identify).
    pub const AER_LIMIT: usize = 4;
    /// Keep Alive Support granularity, in 100 ms units.
    pub const KAS: u16 = 10;
    /// Error log entries kept per controller.
    pub const ERROR_LOG_ENTRIES: usize = 64;
    /// Namespaces a subsystem may hold (Identify NN, and MNAN: the Linux host sizes its ANA
    /// log buffer by MNAN).
    pub const MAX_NAMESPACES: u32 = 1024;
    /// ANA transition time, seconds (Linux nvmet's).
    pub const ANATT: u8 = 10;
}

/// What kind of controller a host associated with.
pub enum ControllerKind {
    Io(Arc<Subsystem>),
    Discovery,
}

/// Where the association came in.
#[derive(Clone, Debug)]
pub struct PortInfo {
    pub port_id: u16,
    /// For the error log's TRTYPE only: what the port offers is `caps`.
    pub transport: Transport,
    pub caps: TransportCaps,
    /// The local address the host connected to (a concrete address even for wildcard listeners).
    pub local_addr: SocketAddr,
    pub peer_addr: SocketAddr,
}

/// How a host that sent no host NQN is shown in logs and metrics.
pub const ANONYMOUS_HOST: &str = "(anonymous)";

pub struct Controller {
    /// Unique among every controller of this fabrikd run (the management API's handle).
    pub id: u64,
    pub cntlid: u16,
    pub kind: ControllerKind,
    /// None for a host that sent no host NQN (SPDK's default): let in only where any host may
    /// connect.
    pub hostnqn: Option<String>,
    pub host_id: [u8; 16],
    pub port: PortInfo,
    pub target: Arc<TargetState>,
    pub connected_at: Instant,
    state: Mutex<ControllerState>,
    /// Woken when an asynchronous event is queued.
    events: Notify,
    /// Cancelled when the controller is torn down (admin queue closed, keep-alive expired,
    /// shutdown): every queue bound to it closes.
    pub teardown: CancellationToken,
    /// What this host read and wrote through this controller (metrics).
    pub io_counters: crate::stats::Striped<crate::stats::ControllerCounters>,
    /// The host's I/O limits on this box (see `qos`), once it has had any.
    pub(crate) qos: std::sync::OnceLock<Arc<crate::qos::Limiter>>,
    /// Queue connections bound to this controller that have not yet finished their commands.
    live_queues: std::sync::atomic::AtomicUsize,
    /// Woken when the last of them has.
    drained: Notify,
    /// What every I/O command asks, kept outside `state` so that queues on several cores
    /// read them without taking its lock (see `LiveFlags`).
    live: LiveFlags,
    /// The namespace caches of the queues bound to this controller, told when a namespace
    /// changes.
    namespace_caches: Mutex<Vec<Arc<ns_cache::NamespaceCache>>>,
    /// Its I/O queues' in-flight counts (see `Queue::in_flight`); a queue gone leaves a dead one.
    io_queues_in_flight: Mutex<Vec<std::sync::Weak<std::sync::atomic::AtomicU32>>>,
}

/// Controller state every I/O command reads: atomics, written rarely.
#[derive(Default)]
struct LiveFlags {
    /// CSTS.RDY (also in `ControllerState::csts`, set together under its lock).
    ready: std::sync::atomic::AtomicBool,
    /// Set Features Volatile Write Cache: 0 not set, 1 off, 2 on.
    write_cache_choice: std::sync::atomic::AtomicU8,
    /// A command came since the keep-alive timer last looked (it clears the flag). A flag,
    /// not a time, as Linux nvmet's traffic-based keep-alive: reading a clock for every
    /// command cost 5 % of a reactor's time on the H200 machine. Written only when clear, so
    /// busy queues on several cores do not all write one cache line per command.
    heard: std::sync::atomic::AtomicBool,
}

struct ControllerState {
    cc: Cc,
    csts: Csts,
    kato_ms: u32,
    async_event_config: u32,
    /// I/O queues granted by Set Features Number of Queues (None until negotiated).
    io_queues_granted: Option<u32>,
    io_queues: HashSet<u16>,
    error_count: u64,
    error_log: VecDeque<ErrorLogEntry>,
    changed_namespaces: Vec<u32>,
    pending_events: VecDeque<u32>,
    /// Events whose log page has not been read yet: masked until it is (spec's AEN retention).
    masked_event_types: u8,
    outstanding_aers: usize,
    /// Reservation notices: pages not read yet, the last page's count, the masks.
    reservation_log: reservation::NoticeLog,
}

impl Controller {
    /// The host as people read it: its NQN, or ANONYMOUS_HOST.
    pub fn host_label(&self) -> &str {
        self.hostnqn.as_deref().unwrap_or(ANONYMOUS_HOST)
    }

    pub fn new(
        cntlid: u16,
        kind: ControllerKind,
        hostnqn: Option<String>,
        host_id: [u8; 16],
        port: PortInfo,
        target: Arc<TargetState>,
        kato_ms: u32,
    ) -> Controller {
        Controller {
            id: target.next_controller_id(),
            cntlid,
            kind,
            hostnqn,
            host_id,
            port,
            target,
            connected_at: Instant::now(),
            state: Mutex::new(ControllerState {
                cc: Cc::default(),
                csts: Csts::default(),
                kato_ms,
                async_event_config: 0,
                io_queues_granted: None,
                io_queues: HashSet::new(),
                error_count: 0,
                error_log: VecDeque::new(),
                changed_namespaces: Vec::new(),
                pending_events: VecDeque::new(),
                masked_event_types: 0,
                outstanding_aers: 0,
                reservation_log: Default::default(),
            }),
            events: Notify::new(),
            teardown: CancellationToken::new(),
            io_counters: Default::default(),
            qos: std::sync::OnceLock::new(),
            live_queues: std::sync::atomic::AtomicUsize::new(0),
            drained: Notify::new(),
            live: LiveFlags::default(),
            namespace_caches: Mutex::new(Vec::new()),
            io_queues_in_flight: Mutex::new(Vec::new()),
        }
    }

    pub fn subsystem(&self) -> Option<&Arc<Subsystem>> {
        match &self.kind {
            ControllerKind::Io(s) => Some(s),
            ControllerKind::Discovery => None,
        }
    }

    /// Whether a drive behind this controller caches writes (Identify VWC).
    pub fn has_volatile_cache(&self) -> bool {
        self.subsystem().is_some_and(|s| s.has_volatile_cache())
    }

    pub fn is_discovery(&self) -> bool {
        matches!(self.kind, ControllerKind::Discovery)
    }

    pub fn subnqn(&self) -> String {
        match &self.kind {
            ControllerKind::Io(s) => s.nqn.to_string(),
            ControllerKind::Discovery => fabrik_proto::fabrics::nqn::DISCOVERY_NQN.to_string(),
        }
    }

    /// Controller Capabilities.
    pub fn cap(&self) -> Cap {
        Cap {
            mqes: (limits::MAX_QUEUE_ENTRIES - 1) as u16,
            cqr: true,
            to: 15, // 7.5 s: generous for a slow host, RDY is immediate anyway
            css_nvm: true,
            mpsmin: 0,
            mpsmax: 0,
        }
    }

    /// CC.EN = 1 and CSTS.RDY = 1: the controller takes admin and I/O commands.
    pub fn is_ready(&self) -> bool {
        self.live.ready.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Whether writes may complete before they are durable: the subsystem has a volatile cache
    /// (Identify's VWC) and the host has not turned it off. Identify and Get Features agree.
    pub fn volatile_write_cache(&self) -> bool {
        self.has_volatile_cache() && self.write_cache_choice().unwrap_or(true)
    }

    pub fn kato_ms(&self) -> u32 {
        self.state.lock().unwrap().kato_ms
    }

    /// What the host set with Set Features Volatile Write Cache (None: not set; the cache is
    /// on wherever a namespace has one, also one added after the host connected).
    fn write_cache_choice(&self) -> Option<bool> {
        match self
            .live
            .write_cache_choice
            .load(std::sync::atomic::Ordering::Acquire)
        {
            0 => None,
            choice => Some(choice == 2),
        }
    }

    fn set_write_cache_choice(&self, on: bool) {
        self.live
            .write_cache_choice
            .store(if on { 2 } else { 1 }, std::sync::atomic::Ordering::Release);
    }

    fn set_ready(&self, st: &mut ControllerState, ready: bool) {
        st.csts.rdy = ready;
        self.live
            .ready
            .store(ready, std::sync::atomic::Ordering::Release);
    }

    /// Restarts the keep-alive timer: the host was heard from (a command, or Keep Alive).
    pub fn keep_alive(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        if !self.live.heard.load(Relaxed) {
            self.live.heard.store(true, Relaxed);
        }
    }

    /// Whether the host was heard from since the last call (see `keepalive`).
    fn heard_since_last_look(&self) -> bool {
        self.live
            .heard
            .swap(false, std::sync::atomic::Ordering::Relaxed)
    }

    /// A queue bound to this controller: its namespace cache is told of namespace changes
    /// from now on (see `ns_cache`).
    fn watch_namespace_cache(&self, cache: &Arc<ns_cache::NamespaceCache>) {
        self.namespace_caches.lock().unwrap().push(cache.clone());
    }

    fn watch_io_queue(&self, in_flight: &Arc<std::sync::atomic::AtomicU32>) {
        let mut queues = self.io_queues_in_flight.lock().unwrap();
        queues.retain(|q| q.strong_count() > 0);
        queues.push(Arc::downgrade(in_flight));
    }

    /// I/O commands its queues have in flight (at the backend or waiting for data).
    pub fn io_in_flight(&self) -> u64 {
        (self.io_queues_in_flight.lock().unwrap().iter())
            .filter_map(std::sync::Weak::upgrade)
            .map(|q| u64::from(q.load(std::sync::atomic::Ordering::Relaxed)))
            .sum()
    }

    /// Its queue is gone: it holds no namespace any more.
    fn drop_namespace_cache(&self, cache: &Arc<ns_cache::NamespaceCache>) {
        cache.clear();
        self.namespace_caches
            .lock()
            .unwrap()
            .retain(|c| !Arc::ptr_eq(c, cache));
    }

    /// Binds I/O queue `qid`; false if it is already bound.
    pub fn attach_io_queue(&self, qid: u16) -> bool {
        self.state.lock().unwrap().io_queues.insert(qid)
    }

    pub fn detach_io_queue(&self, qid: u16) {
        self.state.lock().unwrap().io_queues.remove(&qid);
    }

    pub fn io_queue_count(&self) -> usize {
        self.state.lock().unwrap().io_queues.len()
    }

    /// The highest I/O queue ID a host may connect.
    pub fn max_io_qid(&self) -> u32 {
        self.state
            .lock()
            .unwrap()
            .io_queues_granted
            .unwrap_or(limits::MAX_IO_QUEUES)
    }

    /// Records a failed command in the error information log.
    pub fn record_error(&self, sqid: u16, cid: u16, status: fabrik_proto::Status, nsid: u32) {
        let mut st = self.state.lock().unwrap();
        st.error_count += 1;
        let entry = ErrorLogEntry {
            error_count: st.error_count,
            sqid,
            cid,
            status_field: status.to_wire(false),
            // Which parameter and LBA are not tracked: 0xFFFF / 0 say "not applicable".
            param_error_location: 0xffff,
            nsid,
            trtype: self.port.transport.trtype(),
            ..ErrorLogEntry::default()
        };
        st.error_log.push_front(entry);
        st.error_log.truncate(limits::ERROR_LOG_ENTRIES);
    }

    /// Tears the controller down: every queue bound to it closes, it leaves its subsystem.
    /// A queue connection bound to this controller.
    pub(super) fn queue_bound(&self) {
        self.live_queues
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    /// A queue connection ended and every command it had passed on is done.
    pub(super) fn queue_finished(&self) {
        if self
            .live_queues
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel)
            == 1
        {
            self.drained.notify_waiters();
        }
    }

    /// No queue of this controller has a command left at the backend.
    pub fn drained(&self) -> bool {
        self.live_queues.load(std::sync::atomic::Ordering::Acquire) == 0
    }

    pub async fn wait_drained(&self) {
        loop {
            let notified = self.drained.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.drained() {
                return;
            }
            notified.await;
        }
    }

    pub fn shut_down(&self, why: &str) {
        if self.teardown.is_cancelled() {
            return;
        }
        tracing::info!(cntlid = self.cntlid, subnqn = %self.subnqn(), hostnqn = %self.host_label(), "controller torn down: {why}");
        self.teardown.cancel();
        match &self.kind {
            ControllerKind::Io(s) => s.unregister_controller(self.cntlid),
            ControllerKind::Discovery => self.target.unregister_discovery_controller(self.cntlid),
        }
    }
}
