//! A session to one subsystem that outlives its connections: one or more paths (controllers of
//! the same subsystem, e.g. through two ports), I/O spread over the live ones, a lost path
//! re-established every reconnect delay, and commands retried on a surviving or re-established
//! path until the controller loss timeout, then failed: never silently dropped.
//!
//! As the Linux host: only failures of the path (connection lost, timeout, a path-related
//! status) are retried; an NVMe error status of the command itself is returned at once. With
//! ANA (asymmetric namespace access: two I/O modules of a box), a command goes through a path
//! where its namespace is optimized, else non-optimized, never inaccessible; an ANA status
//! sends it to another path (the path itself stays up) and the path's ANA log is read again. A
//! retried write sends the same data to the same blocks, which is harmless if the first try
//! had reached the media.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use fabrik_proto::nvme::status::sct;
use tokio::sync::{broadcast, Notify};

use crate::error::HostError;
use crate::host::ana::{self, PathAna, Preference};
use crate::host::controller::Controller;
use crate::host::events::{self, KnownNamespaces};
use crate::host::io::IoQueue;
use crate::host::ns_identity::{self, NamespaceIds};
use crate::host::options::ConnectOptions;
use crate::transport::peer::{PeerMemory, Registration};
use crate::transport::target::RecvTarget;
use crate::transport::AnswerTo;

/// Tries of one command on failing connections before it fails (an outage in between costs
/// none: commands wait for a live path without trying).
const MAX_PATH_FAILURES: u32 = 8;

/// `nvme connect`'s reconnect knobs (the Linux defaults: 10 s, 600 s).
#[derive(Debug, Clone, Copy)]
pub struct RecoveryPolicy {
    /// Wait between reconnect attempts of a lost path.
    pub reconnect_delay: Duration,
    /// How long a path may stay lost before it is given up (None: never). When every path is
    /// given up the session is lost and waiting commands fail.
    pub ctrl_loss_tmo: Option<Duration>,
}

impl Default for RecoveryPolicy {
    fn default() -> RecoveryPolicy {
        RecoveryPolicy {
            reconnect_delay: Duration::from_secs(10),
            ctrl_loss_tmo: Some(Duration::from_secs(600)),
        }
    }
}

/// What happened to a session, for whoever listens (`Session::events`).
#[derive(Debug, Clone)]
pub enum SessionEvent {
    /// Path `path` failed; its commands go to other paths or wait for it.
    PathDown { path: usize, error: HostError },
    /// Path `path` is connected again (a new controller).
    PathUp { path: usize, cntlid: u16 },
    /// Path `path` stayed lost past the controller loss timeout.
    PathGivenUp { path: usize },
    /// A namespace appeared (seen through an asynchronous event).
    NamespaceAdded { nsid: u32 },
    /// A namespace went away.
    NamespaceRemoved { nsid: u32 },
}

struct Path {
    opts: ConnectOptions,
    state: Mutex<PathState>,
    /// The live controller's generation + 1 (0: not live), read by every command without the
    /// lock; set with `state`.
    live: AtomicU64,
    /// The live controller as the commands of one I/O queue index see it, a copy per index:
    /// commands on every I/O thread took the state's lock and a reference on the one
    /// controller, cache lines passed between the cores per command.
    replicas: Box<[Replica]>,
    /// Namespace ANA states through this path.
    ana: Arc<PathAna>,
}

/// Copies of the live controller kept per I/O queue index (more indexes share one).
const REPLICAS: usize = 64;

/// One queue index's copy: the generation it was taken at, and its own counted reference.
#[repr(align(128))]
#[derive(Default)]
struct Replica(Mutex<Option<(u64, PathController)>>);

/// A path's controller, as a command holds it while it runs.
#[derive(Clone)]
// Two counts on purpose: a command takes a reference on its queue index's copy (the outer
// count, on a cache line of that thread's), not on the controller shared by every thread.
#[allow(clippy::redundant_allocation)]
pub struct PathController(Arc<Arc<Controller>>);

impl std::ops::Deref for PathController {
    type Target = Controller;

    fn deref(&self) -> &Controller {
        &self.0
    }
}

impl PathController {
    /// The controller itself, shared.
    pub fn controller(&self) -> &Arc<Controller> {
        &self.0
    }
}

impl Path {
    fn new(opts: ConnectOptions, state: PathState) -> Path {
        let path = Path {
            opts,
            state: Mutex::new(PathState::GivenUp {
                last_error: HostError::Invalid("not set up".into()),
            }),
            live: AtomicU64::new(0),
            replicas: (0..REPLICAS).map(|_| Replica::default()).collect(),
            ana: Arc::default(),
        };
        path.set(&mut path.state.lock().unwrap(), state);
        path
    }

    /// Replaces the state (its lock held) and what commands see of it.
    fn set(&self, current: &mut PathState, state: PathState) -> PathState {
        let live = match &state {
            PathState::Live { generation, .. } => generation + 1,
            _ => 0,
        };
        let old = std::mem::replace(current, state);
        self.live.store(live, Ordering::Release);
        for replica in self.replicas.iter() {
            *replica.0.lock().unwrap() = None;
        }
        old
    }
}

enum PathState {
    Live {
        ctrl: Arc<Controller>,
        generation: u64,
    },
    Reconnecting {
        since: Instant,
        last_error: HostError,
    },
    GivenUp {
        last_error: HostError,
    },
}

/// A multipath, self-healing session. Share it with `Arc`.
pub struct Session {
    paths: Vec<Path>,
    policy: RecoveryPolicy,
    next: AtomicUsize,
    /// Woken whenever a path comes back, is given up, or its ANA states change.
    changed: Arc<Notify>,
    events: broadcast::Sender<SessionEvent>,
    namespaces: KnownNamespaces,
    /// The namespaces' identifiers as the paths first showed them (None until a path was
    /// live): a path that shows others for the same NSID is another subsystem, not joined.
    ns_ids: Arc<Mutex<Option<NamespaceIds>>>,
}

impl Session {
    /// Connects every path (all must be the same subsystem, with the same namespaces); fails if
    /// none connects.
    pub async fn connect(
        paths: Vec<ConnectOptions>,
        policy: RecoveryPolicy,
    ) -> Result<Arc<Session>, HostError> {
        let mut ctrls = Vec::new();
        let mut first_error = None;
        for opts in &paths {
            match Controller::connect(opts.clone()).await {
                Ok(c) => ctrls.push(Some(c)),
                Err(e) => {
                    first_error.get_or_insert(e);
                    ctrls.push(None);
                }
            }
        }
        if ctrls.iter().all(Option::is_none) {
            return Err(first_error.unwrap_or_else(|| {
                HostError::Invalid("a session needs at least one path".into())
            }));
        }
        Session::from_controllers(paths.into_iter().zip(ctrls).collect(), policy).await
    }

    /// A session over controllers already connected (`None`: a path to re-establish). The live
    /// ones must show the same identifiers for the namespaces they share.
    pub async fn from_controllers(
        paths: Vec<(ConnectOptions, Option<Controller>)>,
        policy: RecoveryPolicy,
    ) -> Result<Arc<Session>, HostError> {
        let subnqn = paths
            .first()
            .map(|(o, _)| o.subnqn.clone())
            .unwrap_or_default();
        if let Some((o, _)) = paths.iter().find(|(o, _)| o.subnqn != subnqn) {
            return Err(HostError::Invalid(format!(
                "the paths of a session lead to one subsystem, not {subnqn} and {}",
                o.subnqn
            )));
        }
        let mut reference: Option<NamespaceIds> = None;
        for (index, (opts, ctrl)) in paths.iter().enumerate() {
            let Some(ctrl) = ctrl else { continue };
            let ids = ns_identity::namespace_ids(ctrl).await?;
            match &reference {
                Some(r) => ns_identity::check_same(&subnqn, r, index, opts.addr, &ids)?,
                None => reference = Some(ids),
            }
        }
        let mut logs = Vec::new();
        for (_, ctrl) in &paths {
            logs.push(match ctrl {
                Some(ctrl) => ana::read_log(ctrl).await?,
                None => None,
            });
        }
        let (events, _) = broadcast::channel(64);
        let mut missing = Vec::new();
        let paths = paths
            .into_iter()
            .enumerate()
            .map(|(index, (opts, ctrl))| {
                let state = match ctrl {
                    Some(ctrl) => PathState::Live {
                        ctrl: Arc::new(ctrl),
                        generation: 0,
                    },
                    None => {
                        missing.push(index);
                        PathState::Reconnecting {
                            since: Instant::now(),
                            last_error: HostError::Invalid("not connected at start".into()),
                        }
                    }
                };
                Path::new(opts, state)
            })
            .collect::<Vec<Path>>();
        for (path, log) in paths.iter().zip(&logs) {
            if let Some(log) = log {
                path.ana.update(log);
            }
        }
        let session = Arc::new(Session {
            paths,
            policy,
            next: AtomicUsize::new(0),
            changed: Arc::new(Notify::new()),
            events,
            namespaces: KnownNamespaces::default(),
            ns_ids: Arc::new(Mutex::new(reference)),
        });
        for index in 0..session.paths.len() {
            if let Some((ctrl, _)) = session.live(index) {
                session.watch_events(index, &ctrl);
            }
        }
        for index in missing {
            session.clone().spawn_reconnect(index, 0);
        }
        Ok(session)
    }

    pub fn subnqn(&self) -> &str {
        &self.paths[0].opts.subnqn
    }

    pub fn path_count(&self) -> usize {
        self.paths.len()
    }

    /// Options of path `path`.
    pub fn path_options(&self, path: usize) -> Option<&ConnectOptions> {
        self.paths.get(path).map(|p| &p.opts)
    }

    /// How many paths are live now.
    pub fn live_paths(&self) -> usize {
        (0..self.paths.len())
            .filter(|&i| self.live(i).is_some())
            .count()
    }

    /// A live controller, if any (for admin commands; I/O should use the methods below).
    pub fn controller(&self) -> Option<Arc<Controller>> {
        (0..self.paths.len()).find_map(|i| self.live(i).map(|(c, _)| c))
    }

    /// The active namespaces as last listed (None before the first listing).
    pub fn namespaces(&self) -> Option<Vec<u32>> {
        let known = self.namespaces.lock().unwrap();
        known.as_ref().map(|set| set.iter().copied().collect())
    }

    /// Subscribes to path and namespace events.
    pub fn events(&self) -> broadcast::Receiver<SessionEvent> {
        self.events.subscribe()
    }

    /// "NQN via ADDR[, ADDR...]", for messages.
    pub fn describe(&self) -> String {
        let addrs: Vec<String> = self.paths.iter().map(|p| p.opts.addr.to_string()).collect();
        format!("{} via {}", self.subnqn(), addrs.join(", "))
    }

    fn live(&self, path: usize) -> Option<(Arc<Controller>, u64)> {
        match &*self.paths[path].state.lock().unwrap() {
            PathState::Live { ctrl, generation } => Some((ctrl.clone(), *generation)),
            _ => None,
        }
    }

    /// `live`, for a command on I/O queue index `queue` (None: not an I/O command): from that
    /// index's copy while the path's generation is the copy's.
    fn live_on(&self, path: usize, queue: Option<usize>) -> Option<(PathController, u64)> {
        let Some(queue) = queue else {
            return self
                .live(path)
                .map(|(ctrl, g)| (PathController(Arc::new(ctrl)), g));
        };
        let p = &self.paths[path];
        let live = p.live.load(Ordering::Acquire);
        let generation = live.checked_sub(1)?;
        let replica = &p.replicas[queue % REPLICAS].0;
        if let Some((g, ctrl)) = &*replica.lock().unwrap() {
            if *g == generation {
                return Some((ctrl.clone(), generation));
            }
        }
        // The state's lock is not taken under a replica's (`Path::set` takes them the other
        // way round).
        let (ctrl, generation) = self.live(path)?;
        let ctrl = PathController(Arc::new(ctrl));
        let mut copy = replica.lock().unwrap();
        // Not a copy of a controller already replaced: it would stay referenced here.
        if p.live.load(Ordering::Acquire) == generation + 1 {
            *copy = Some((generation, ctrl.clone()));
        }
        Some((ctrl, generation))
    }

    /// Reads `nlb` blocks on I/O queue `queue` (modulo the controller's count) of a live path.
    pub async fn read(
        self: &Arc<Self>,
        queue: usize,
        nsid: u32,
        slba: u64,
        nlb: u32,
    ) -> Result<Bytes, HostError> {
        self.with_path_on(Some(queue), Some(nsid), |ctrl| async move {
            ctrl.io_queue(queue % ctrl.io_queue_count().max(1))?
                .read(nsid, slba, nlb)
                .await
        })
        .await
    }

    /// As `read`, into `buf` (see `IoQueue::read_into`). A retry on another path or after a
    /// reconnect reads into a fresh buffer.
    pub async fn read_into(
        self: &Arc<Self>,
        queue: usize,
        nsid: u32,
        slba: u64,
        nlb: u32,
        buf: BytesMut,
    ) -> Result<BytesMut, HostError> {
        let mut buf = Some(buf);
        self.with_path_on(Some(queue), Some(nsid), |ctrl| {
            let buf = buf.take().unwrap_or_default();
            async move {
                ctrl.io_queue(queue % ctrl.io_queue_count().max(1))?
                    .read_into(nsid, slba, nlb, buf)
                    .await
            }
        })
        .await
    }

    /// As `read`, into `target` (see `IoQueue::read_to`). A retry receives into the same
    /// target again.
    pub async fn read_to(
        self: &Arc<Self>,
        queue: usize,
        nsid: u32,
        slba: u64,
        nlb: u32,
        target: &RecvTarget,
    ) -> Result<(), HostError> {
        self.with_path_on(Some(queue), Some(nsid), |ctrl| async move {
            ctrl.io_queue(queue % ctrl.io_queue_count().max(1))?
                .read_to(nsid, slba, nlb, target)
                .await
        })
        .await
    }

    pub async fn write(
        self: &Arc<Self>,
        queue: usize,
        nsid: u32,
        slba: u64,
        data: Bytes,
        fua: bool,
    ) -> Result<(), HostError> {
        self.with_path_on(Some(queue), Some(nsid), |ctrl| {
            let data = data.clone();
            async move {
                ctrl.io_queue(queue % ctrl.io_queue_count().max(1))?
                    .write(nsid, slba, data, fua)
                    .await
            }
        })
        .await
    }

    /// Starts a read on I/O queue `queue` of a live path, its answer to go where `answer` says
    /// (see `IoQueue::start_read_into`). Gives `buf` back when the read cannot start so
    /// now (no path is live, or its queue cannot): `read_into` then does it, waiting for a
    /// path. An error in the answer is the command's on that path only: `read_into` retries it
    /// as it does any command (on another path, or once one is back).
    pub fn start_read_into(
        &self,
        queue: usize,
        nsid: u32,
        slba: u64,
        nlb: u32,
        buf: BytesMut,
        answer: AnswerTo<'_>,
    ) -> Result<(), BytesMut> {
        self.with_live_queue(queue, nsid, |io| match io {
            Some(io) => io.start_read_into(nsid, slba, nlb, buf, answer),
            None => Err(buf),
        })
    }

    /// Starts a read into `target` as `start_read_into` starts one into a buffer (see
    /// `IoQueue::start_read_to`). False when it cannot start so now: `read_to` does it.
    pub fn start_read_to(
        &self,
        queue: usize,
        nsid: u32,
        slba: u64,
        nlb: u32,
        target: &RecvTarget,
        answer: AnswerTo<'_>,
    ) -> bool {
        self.with_live_queue(queue, nsid, |io| {
            io.is_some_and(|io| io.start_read_to(nsid, slba, nlb, target, answer))
        })
    }

    /// Starts a write as `start_read_into` starts a read (see `IoQueue::start_write`); `write`
    /// does what it gives back, and retries an error answer.
    pub fn start_write(
        &self,
        queue: usize,
        nsid: u32,
        slba: u64,
        data: Bytes,
        fua: bool,
        answer: AnswerTo<'_>,
    ) -> Result<(), Bytes> {
        self.with_live_queue(queue, nsid, |io| match io {
            Some(io) => io.start_write(nsid, slba, data, fua, answer),
            None => Err(data),
        })
    }

    /// Reads `nlb` blocks straight into `mem` at `offset` (see `IoQueue::read_peer`) on I/O
    /// queue `queue` of a live path. A retry on another path registers the memory with that
    /// path's NIC.
    pub async fn read_peer(
        self: &Arc<Self>,
        queue: usize,
        nsid: u32,
        slba: u64,
        nlb: u32,
        mem: &Arc<dyn PeerMemory>,
        offset: usize,
    ) -> Result<(), HostError> {
        self.with_path_on(Some(queue), Some(nsid), |ctrl| async move {
            ctrl.io_queue(queue % ctrl.io_queue_count().max(1))?
                .read_peer(nsid, slba, nlb, mem, offset)
                .await
        })
        .await
    }

    /// Writes `nlb` blocks straight from `mem` at `offset` (see `IoQueue::write_peer`).
    #[allow(clippy::too_many_arguments)]
    pub async fn write_peer(
        self: &Arc<Self>,
        queue: usize,
        nsid: u32,
        slba: u64,
        nlb: u32,
        mem: &Arc<dyn PeerMemory>,
        offset: usize,
        fua: bool,
    ) -> Result<(), HostError> {
        self.with_path_on(Some(queue), Some(nsid), |ctrl| async move {
            ctrl.io_queue(queue % ctrl.io_queue_count().max(1))?
                .write_peer(nsid, slba, nlb, mem, offset, fua)
                .await
        })
        .await
    }

    /// Registers `mem` with the NIC of I/O queue `queue` on a live path, giving how and the
    /// NIC's name: a caller can try the memory before I/O and say which path runs. Other
    /// paths (other NICs, maybe) register it on their first peer transfer.
    pub async fn register_peer(
        self: &Arc<Self>,
        queue: usize,
        mem: &Arc<dyn PeerMemory>,
    ) -> Result<(Registration, String), HostError> {
        self.with_path_on(Some(queue), None, |ctrl| async move {
            let io = ctrl.io_queue(queue % ctrl.io_queue_count().max(1))?;
            let how = io.register_peer(mem).await?;
            Ok((how, io.nic().unwrap_or_default().to_string()))
        })
        .await
    }

    pub async fn flush(self: &Arc<Self>, queue: usize, nsid: u32) -> Result<(), HostError> {
        self.with_path_on(Some(queue), Some(nsid), |ctrl| async move {
            ctrl.io_queue(queue % ctrl.io_queue_count().max(1))?
                .flush(nsid)
                .await
        })
        .await
    }

    /// Runs `op` on a live path (round-robin); on a path failure, marks the path down and runs
    /// it again on another live path, or waits for one to come back; fails when every path is
    /// given up.
    pub async fn with_path<T, F, Fut>(self: &Arc<Self>, op: F) -> Result<T, HostError>
    where
        F: Fn(PathController) -> Fut,
        Fut: std::future::Future<Output = Result<T, HostError>>,
    {
        self.with_path_on(None, None, op).await
    }

    /// `with_path` for a command on I/O queue index `queue` (see `live_on`) and namespace
    /// `nsid` (its ANA state through each path chooses the path).
    async fn with_path_on<T, F, Fut>(
        self: &Arc<Self>,
        queue: Option<usize>,
        nsid: Option<u32>,
        mut op: F,
    ) -> Result<T, HostError>
    where
        F: FnMut(PathController) -> Fut,
        Fut: std::future::Future<Output = Result<T, HostError>>,
    {
        let mut failures = 0;
        loop {
            let picked = self.pick(self.round_start(), queue, nsid);
            let Some((path, ctrl, generation)) = picked else {
                if let Some(err) = self.all_given_up() {
                    return Err(err);
                }
                // Wait for a path to come back (or be given up); poll as a backstop.
                // Boxed: this rare wait's state stays out of every command's future.
                let wait =
                    tokio::time::timeout(Duration::from_millis(200), self.changed.notified());
                let _ = Box::pin(wait).await;
                continue;
            };
            match op(ctrl).await {
                // The namespace is not accessible through this path now: another path, or a
                // wait for one (the path is fine; its ANA log says when that changes).
                Err(HostError::Status { status, .. })
                    if !status.is_dnr() && ana::state_of_status(status).is_some() =>
                {
                    if let (Some(nsid), Some(state)) = (nsid, ana::state_of_status(status)) {
                        self.paths[path].ana.set(nsid, state);
                    }
                    self.reread_ana(path);
                }
                Err(e) if is_path_error(&e) => {
                    failures += 1;
                    if failures == MAX_PATH_FAILURES {
                        // A failure that follows the command to every new connection is the
                        // command's (a target that always breaks on it), not the path's.
                        return Err(HostError::QueueClosed {
                            qid: 0,
                            reason: format!(
                                "{}: the command failed on {failures} connections in turn; last on path {path}: {e}",
                                self.subnqn()
                            ),
                        });
                    }
                    self.path_failed(path, generation, e)
                }
                result => return result,
            }
        }
    }

    /// Where a command's round over the paths starts: round-robin (one counter for all
    /// threads: not with one path).
    fn round_start(&self) -> usize {
        match self.paths.len() {
            1 => 0,
            _ => self.next.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Calls `f` with I/O queue `queue` of a live path for a command on `nsid` now (None if no
    /// path is live, or it has no such queue).
    fn with_live_queue<T>(
        &self,
        queue: usize,
        nsid: u32,
        f: impl FnOnce(Option<IoQueue<'_>>) -> T,
    ) -> T {
        let picked = self.pick(self.round_start(), Some(queue), Some(nsid));
        let ctrl = picked.map(|(_, ctrl, _)| ctrl);
        f(ctrl
            .as_ref()
            .and_then(|c| c.io_queue(queue % c.io_queue_count().max(1)).ok()))
    }

    /// A live path for a command on `nsid`, starting the round at `start`: one where the
    /// namespace is optimized, else non-optimized; None if none is live and usable.
    fn pick(
        &self,
        start: usize,
        queue: Option<usize>,
        nsid: Option<u32>,
    ) -> Option<(usize, PathController, u64)> {
        let n = self.paths.len();
        let preference = |i: usize| match nsid {
            Some(nsid) => self.paths[i].ana.preference(nsid),
            None => Preference::Optimized,
        };
        for want in [Preference::Optimized, Preference::NonOptimized] {
            let found = (0..n).find_map(|k| {
                let i = (start + k) % n;
                if preference(i) != want {
                    return None;
                }
                self.live_on(i, queue).map(|(c, g)| (i, c, g))
            });
            if found.is_some() {
                return found;
            }
        }
        None
    }

    /// Reads path `path`'s ANA log again, in the background (after an ANA status).
    fn reread_ana(&self, path: usize) {
        let Some((ctrl, _)) = self.live(path) else {
            return;
        };
        let (ana, changed) = (self.paths[path].ana.clone(), self.changed.clone());
        tokio::spawn(async move {
            if let Ok(Some(log)) = ana::read_log(&ctrl).await {
                ana.update(&log);
                changed.notify_waiters();
            }
        });
    }

    /// The error to fail commands with once every path is given up.
    fn all_given_up(&self) -> Option<HostError> {
        let mut last = None;
        for (i, p) in self.paths.iter().enumerate() {
            match &*p.state.lock().unwrap() {
                PathState::GivenUp { last_error } => {
                    last = Some((i, last_error.clone()));
                }
                _ => return None,
            }
        }
        last.map(|(i, e)| HostError::QueueClosed {
            qid: 0,
            reason: format!(
                "{}: every path lost for longer than the controller loss timeout ({:?}); last error on path {i}: {e}",
                self.subnqn(),
                self.policy.ctrl_loss_tmo.unwrap_or_default()
            ),
        })
    }

    fn path_failed(self: &Arc<Self>, path: usize, generation: u64, error: HostError) {
        {
            let mut state = self.paths[path].state.lock().unwrap();
            match &*state {
                PathState::Live { generation: g, .. } if *g == generation => {}
                _ => return, // already handled
            }
            tracing::warn!(
                "{} path {path} ({}) failed: {error}; reconnecting every {:?}",
                self.subnqn(),
                self.paths[path].opts.addr,
                self.policy.reconnect_delay
            );
            self.paths[path].set(
                &mut state,
                PathState::Reconnecting {
                    since: Instant::now(),
                    last_error: error.clone(),
                },
            );
        }
        let _ = self.events.send(SessionEvent::PathDown { path, error });
        self.clone().spawn_reconnect(path, generation);
    }

    /// Asynchronous events of path `path`'s live controller become session events (and ANA
    /// states of the path).
    fn watch_events(&self, path: usize, ctrl: &Arc<Controller>) {
        let events = self.events.clone();
        let ns_ids = self.ns_ids.clone();
        let changed = self.changed.clone();
        let ana_changed = move || changed.notify_waiters();
        let ana = self.paths[path].ana.clone();
        events::spawn_watcher(
            ctrl,
            self.namespaces.clone(),
            ana,
            ana_changed,
            move |event| {
                tracing::info!("{event:?}");
                if let SessionEvent::NamespaceRemoved { nsid } = event {
                    // The NSID may come back as another namespace.
                    if let Some(ids) = ns_ids.lock().unwrap().as_mut() {
                        ids.remove(&nsid);
                    }
                }
                let _ = events.send(event);
            },
        );
    }

    /// Re-establishes path `path` in the background. The task holds the session weakly: a
    /// session dropped by its users stops reconnecting.
    fn spawn_reconnect(self: Arc<Self>, path: usize, generation: u64) {
        let weak = Arc::downgrade(&self);
        let (delay, opts) = (self.policy.reconnect_delay, self.paths[path].opts.clone());
        drop(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(delay).await;
                let Some(session) = weak.upgrade() else {
                    return;
                };
                let Some(since) = session.reconnecting_since(path) else {
                    return;
                };
                drop(session);
                let attempt = Controller::connect(opts.clone()).await;
                let Some(session) = weak.upgrade() else {
                    return;
                };
                let attempt = match attempt {
                    Ok(ctrl) => session.check_rejoin(path, ctrl).await,
                    Err(e) => Err(e),
                };
                if session.reconnected(path, generation, since, attempt) {
                    return;
                }
            }
        });
    }

    /// A re-established path must still lead to the session's namespaces (the target may have
    /// been replaced by another box exporting the same NQN).
    async fn check_rejoin(&self, path: usize, ctrl: Controller) -> Result<Controller, HostError> {
        let ids = ns_identity::namespace_ids(&ctrl).await?;
        // The path's states as its new controller reports them.
        let log = ana::read_log(&ctrl).await?;
        let addr = self.paths[path].opts.addr;
        let mut reference = self.ns_ids.lock().unwrap();
        match reference.as_mut() {
            Some(r) => {
                ns_identity::check_same(self.subnqn(), r, path, addr, &ids)?;
                // Namespaces added meanwhile are checked from now on.
                for (nsid, d) in ids {
                    r.entry(nsid).or_insert(d);
                }
            }
            None => *reference = Some(ids),
        }
        drop(reference);
        let path_ana = &self.paths[path].ana;
        path_ana.clear();
        if let Some(log) = log {
            path_ana.update(&log);
        }
        Ok(ctrl)
    }

    fn reconnecting_since(&self, path: usize) -> Option<Instant> {
        match &*self.paths[path].state.lock().unwrap() {
            PathState::Reconnecting { since, .. } => Some(*since),
            _ => None,
        }
    }

    /// Takes the result of a reconnect attempt; true when the path is settled (back, given up,
    /// or no longer waiting because the session was shut down).
    fn reconnected(
        &self,
        path: usize,
        generation: u64,
        since: Instant,
        attempt: Result<Controller, HostError>,
    ) -> bool {
        let mut state = self.paths[path].state.lock().unwrap();
        if !matches!(&*state, PathState::Reconnecting { .. }) {
            return true; // shut down meanwhile: the new controller, if any, is dropped
        }
        match attempt {
            Ok(ctrl) => {
                let cntlid = ctrl.cntlid();
                let ctrl = Arc::new(ctrl);
                self.watch_events(path, &ctrl);
                let live = PathState::Live {
                    ctrl,
                    generation: generation + 1,
                };
                self.paths[path].set(&mut state, live);
                drop(state);
                tracing::info!("{} path {path} is back (cntlid {cntlid})", self.subnqn());
                let _ = self.events.send(SessionEvent::PathUp { path, cntlid });
                self.changed.notify_waiters();
                true
            }
            Err(e) => {
                let expired = self
                    .policy
                    .ctrl_loss_tmo
                    .is_some_and(|tmo| since.elapsed() >= tmo);
                if expired {
                    tracing::warn!("{} path {path} given up: {e}", self.subnqn());
                    let given_up = PathState::GivenUp { last_error: e };
                    self.paths[path].set(&mut state, given_up);
                    drop(state);
                    let _ = self.events.send(SessionEvent::PathGivenUp { path });
                    self.changed.notify_waiters();
                    return true;
                }
                if let PathState::Reconnecting { last_error, .. } = &mut *state {
                    *last_error = e;
                }
                false
            }
        }
    }

    /// Shuts every live controller down (in-flight commands on them fail).
    pub async fn shutdown(&self) {
        for p in &self.paths {
            let state = p.set(
                &mut p.state.lock().unwrap(),
                PathState::GivenUp {
                    last_error: HostError::QueueClosed {
                        qid: 0,
                        reason: "session shut down".into(),
                    },
                },
            );
            if let PathState::Live { ctrl, .. } = state {
                if let Ok(ctrl) = Arc::try_unwrap(ctrl) {
                    if let Err(e) = ctrl.shutdown().await {
                        tracing::warn!("shutdown of {}: {e}", p.opts.addr);
                    }
                }
            }
        }
        self.changed.notify_waiters();
    }
}

/// Whether a failure is the path's (worth retrying elsewhere or later) rather than the
/// command's.
pub fn is_path_error(err: &HostError) -> bool {
    match err {
        HostError::Status { status, .. } => status.sct() == sct::PATH && !status.is_dnr(),
        // The memory's, the GPU's or the NIC's limits, not the connection's.
        HostError::Invalid(_) | HostError::PeerMemory { .. } | HostError::Gpu(_) => false,
        // The secrets', not the path's: another path or a retry meets the same.
        HostError::Authentication { .. } => false,
        HostError::Io { .. }
        | HostError::ConnectionClosed { .. }
        | HostError::Protocol { .. }
        | HostError::Terminated { .. }
        | HostError::DataDigest { .. }
        | HostError::Timeout { .. }
        | HostError::QueueClosed { .. } => true,
        // A handshake cut short by a module going away is the path's; a refused key is
        // refused again on the next try, which costs only time.
        HostError::Tls { .. } => true,
    }
}
