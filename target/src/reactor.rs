//! Reactors: the I/O threads. One per core of `--cores`, pinned to it (without `--cores`: one
//! per core fabrikd may run on, unpinned; see `Reactors::new`), each running its own
//! single-threaded event loop. A queue's connection is placed on a reactor when it is accepted
//! and never migrates: its commands are decoded, executed (RAM and null drives complete inline)
//! and answered on that one thread, with no hand-off between threads and no lock shared with
//! other queues on the way.
//!
//! The event loop is a tokio current-thread runtime per reactor. Measured against the
//! work-stealing runtime that served every connection before (H200 machine, spdk_nvme_perf as
//! the common initiator; `tests/benches/spdk-ab.sh`), it removes the cross-thread wake-ups and
//! task migrations that small commands paid for, and it keeps all of the transport and
//! controller code as it is: on 4 cores 4K random reads went from 1.47M to 1.65M IOPS, QD1
//! latency from 35.8 to 22.7 µs, and 1 to 4 cores now scale 3.97x (3.72x before).
//!
//! Sockets stay on tokio's epoll loop, against raw io_uring by measurement
//! (`target/examples/socket_loops.rs`, `tests/benches/socket-loops.sh`: NVMe/TCP-shaped 4K read
//! traffic on loopback, the server's CPU per request, medians of alternated rounds). io_uring with
//! every connection's recv and sendmsg in one submission per turn, tuned (DEFER_TASKRUN, one
//! issuer, registered sockets), saved 1-4 % of the server's CPU per request at queue depth 32, 3-9
//! % with 8 connections at depth 1 and 6-12 % with 32 at depth 4 (the development VM and the H200
//! machine); untuned, it cost 8-80 % more on the VM and was within 6 % of epoll on the H200
//! machine. The kernel's TCP work is over nine tenths of that server's CPU in either loop, and
//! SPDK's default socket layer makes the same calls per read as this loop (an epoll_wait, a read, a
//! vectored send: readv and sendmsg there, recv and writev here). So the gain is a few percent of
//! the kernel's share, against moving the transport onto buffers owned by the ring: not taken yet.
//! Zero-copy sends of 128 KiB reads cost 1.44x the CPU there (loopback copies on delivery anyway):
//! not used; no machine here has a NIC path to measure where it pays.
//!
//! Placement balances connections, among the reactors on the NUMA node of the NIC a
//! connection came through where the machine has several nodes (`numa`).
//!
//! File and block drives started on a reactor do their I/O through the reactor's own io_uring
//! (`backend::reactor_ring`). NVMe/RDMA queues run on the reactors too, the queue pairs of one
//! device on one reactor sharing a completion queue, which a task of that reactor polls and
//! routes (`transport::rdma::completions`). A queue takes at most a few batches of completions
//! per turn and then lets the reactor's other tasks run (the poller as well): draining until
//! the completion queue ran dry kept one task on its thread for seconds under fio in the
//! Soft-RoCE guest, and the admin queues beside it answered Keep Alive 2.5-5 s late until their
//! keep-alive timers expired (3 controllers torn down in a run with a bounded drain that armed
//! the completion channel between turns; none, and no late Keep Alive, once a busy queue yields
//! without arming).
//!
//! Adaptive polling (`--poll-idle-us`, default 20): a busy reactor keeps looking for events instead
//! of sleeping between them (a spinner task yields, which makes the runtime poll epoll with a zero
//! timeout), and it goes back to sleeping once nothing happened for `Polling::idle_after`; the
//! first event wakes it. Each look is an epoll_wait system call, so the window is short: it bridges
//! the gaps between a host's commands, and a reactor does not spin through the host's think time.
//! What it saves is the wake-up: a sleeping reactor is woken by the host's own CPU as its command
//! arrives (on loopback the host pays for that wake-up in its send), and a wake-up is slow where
//! cores sleep deeply or the machine is virtual. On the development VM (one target core,
//! spdk_nvme_perf, null drives, 4 rounds alternated figure by figure) 20 µs took QD1 latency from
//! 33.4 to 11.6 µs (SPDK 10.4) and was ahead on 4K reads and writes in 3 of 4 rounds. On the H200
//! machine, where QD1 latency without polling was already near SPDK's, it was not shown beyond the
//! noise: 4 cores, 4K randread 2.58M against 2.29M IOPS and QD1 16.4 against 21.4 µs in every round
//! of one run, 2.63M against 3.09M and 18.4 against 17.0 µs in a repeat. 200 µs lost there in an
//! earlier run (1.52M against 1.65M), and 50 µs did no better than 20 in the same runs on another
//! day (QD1 1.08x against 1.03x SPDK's on 4 cores, 1.11x both on one). The poller of a shared
//! NVMe/RDMA completion queue polls it for the same window after its last completion before it arms
//! its completion channel and sleeps (`poll_window`). Idle, a reactor sleeps in epoll either way:
//! 24 idle hosts cost under 0.5 % of a core.
//!
//! A reactor's runtime has no time driver (it looked at its timer wheel and the clock on every
//! park); the few timers the queues set live on one thread of their own (`crate::timer`).
//!
//! Control (accepting connections, REST, keep-alive timers, management) stays on the control
//! runtime: see `TargetState::spawn_control`.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tokio::task::{AbortHandle, JoinSet};
use tokio_util::sync::CancellationToken;

use crate::numa;

/// The reactors of one target, started on first use.
pub struct Reactors {
    cores: Vec<usize>,
    /// Pinned to their cores: only when the cores were chosen (see `new`).
    pinned: bool,
    polling: Polling,
    started: OnceLock<Vec<Reactor>>,
    stop: CancellationToken,
}

/// The adaptive polling policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Polling {
    /// How long a reactor keeps polling after its last event before it sleeps; zero: it
    /// always sleeps between events (interrupt mode only).
    pub idle_after: Duration,
}

impl Default for Polling {
    /// 20 µs: it bridges the gaps between a host's commands under load and at queue depth 1,
    /// and costs a keep-alive every few seconds well under 0.1% of a core. Chosen by
    /// measurement against sleeping, 50 and 200 µs: see the module documentation.
    fn default() -> Polling {
        Polling {
            idle_after: Duration::from_micros(20),
        }
    }
}

struct Reactor {
    core: usize,
    /// The NUMA node of its core; None when it is not pinned (it may run anywhere) or the
    /// node is not known.
    node: Option<u32>,
    handle: Handle,
    /// Connections placed here and not yet ended.
    load: Arc<AtomicUsize>,
}

impl Reactors {
    /// Reactors on `cores` (CPU numbers), each pinned to its core, as SPDK's core mask does.
    /// Empty: one reactor per core this process may run on, not pinned: cores nobody set aside
    /// for fabrikd are shared with the kernel's own work and other processes, and a thread pinned
    /// there cannot move away from them.
    pub fn new(cores: Vec<usize>, polling: Polling) -> Reactors {
        let pinned = !cores.is_empty();
        let cores = if pinned { cores } else { allowed_cores() };
        crate::stats::calibrate_clock();
        Reactors {
            cores,
            pinned,
            polling,
            started: OnceLock::new(),
            stop: CancellationToken::new(),
        }
    }

    fn reactors(&self) -> &[Reactor] {
        self.started.get_or_init(|| {
            self.cores
                .iter()
                .map(|&core| start(core, self.pinned, self.polling, self.stop.clone()))
                .collect()
        })
    }

    /// Whether the reactors sit on more than one NUMA node, so that placement near a NIC
    /// matters.
    fn span_nodes(&self) -> bool {
        let mut nodes = self.reactors().iter().filter_map(|r| r.node);
        nodes.next().is_some_and(|first| nodes.any(|n| n != first))
    }

    /// Places a connection that arrived on local address `ip` (see `place`) on a reactor of
    /// the NUMA node of the NIC holding that address, where the machine has several nodes and
    /// reactors on that node; elsewhere by load alone.
    pub fn place_near_nic<F>(
        &self,
        set: &mut JoinSet<F::Output>,
        ip: std::net::IpAddr,
        connection: F,
    ) -> AbortHandle
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.seat_near_nic(ip).spawn(set, connection)
    }

    /// Runs a connection's future on the least loaded reactor, for its whole life, as a task
    /// of `set` (its owner waits for it there, and sees it panic).
    pub fn place<F>(&self, set: &mut JoinSet<F::Output>, connection: F) -> AbortHandle
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.seat_on_node(None).spawn(set, connection)
    }

    /// The reactor `place_near_nic` would choose, taken now for a connection to be spawned
    /// there later (an NVMe/RDMA queue pair is made with its reactor's receive queue first).
    pub fn seat_near_nic(&self, ip: std::net::IpAddr) -> Seat {
        let node = if self.span_nodes() {
            numa::node_of_local_address(std::path::Path::new(numa::SYSFS), ip)
        } else {
            None
        };
        self.seat_on_node(node)
    }

    /// The least loaded reactor of NUMA node `node` where there is one, else of all.
    fn seat_on_node(&self, node: Option<u32>) -> Seat {
        let reactors = self.reactors();
        let seats: Vec<_> = reactors
            .iter()
            .map(|r| (r.node, r.load.load(Ordering::Relaxed)))
            .collect();
        let index = choose(&seats, node);
        let reactor = &reactors[index];
        tracing::trace!(core = reactor.core, ?node, "connection placed");
        Seat {
            index,
            handle: reactor.handle.clone(),
            load: Placed::new(reactor.load.clone()),
        }
    }

    /// Connections on each reactor's core.
    #[cfg(test)]
    fn loads(&self) -> Vec<(usize, usize)> {
        self.started.get().map_or_else(Vec::new, |rs| {
            rs.iter()
                .map(|r| (r.core, r.load.load(Ordering::Relaxed)))
                .collect()
        })
    }
}

impl Drop for Reactors {
    /// The threads end once their connections have (the listeners wait for those at stop);
    /// whatever is left is dropped with the runtime.
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The reactor for a new connection, given each reactor's NUMA node and load: the least
/// loaded of those on `near` if any is, else the least loaded of all.
fn choose(seats: &[(Option<u32>, usize)], near: Option<u32>) -> usize {
    let least_loaded = |on_node: bool| {
        seats
            .iter()
            .enumerate()
            .filter(|(_, (node, _))| !on_node || (near.is_some() && *node == near))
            .min_by_key(|(_, (_, load))| *load)
            .map(|(i, _)| i)
    };
    least_loaded(true)
        .or_else(|| least_loaded(false))
        .expect("at least one reactor")
}

/// Counts a placed connection until it ends (also when its task is dropped).
/// A reactor chosen for one connection, counted in its load from the choice until the
/// connection ends (or, never spawned, until the seat drops).
pub struct Seat {
    index: usize,
    handle: Handle,
    load: Placed,
}

impl Seat {
    /// Which reactor: 0 up to the number of reactors.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Runs the connection's future on the seat's reactor, for its whole life, as a task of
    /// `set` (its owner waits for it there, and sees it panic).
    pub fn spawn<F>(self, set: &mut JoinSet<F::Output>, connection: F) -> AbortHandle
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let load = self.load;
        set.spawn_on(
            async move {
                let _placed = load;
                connection.await
            },
            &self.handle,
        )
    }

    /// Runs a service of the seat's reactor beside its connections (not counted as one): a
    /// task that polls a completion queue the reactor's NVMe/RDMA queues share.
    pub fn spawn_beside<F>(&self, service: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn(service)
    }
}

struct Placed(Arc<AtomicUsize>);

impl Placed {
    fn new(load: Arc<AtomicUsize>) -> Placed {
        load.fetch_add(1, Ordering::Relaxed);
        Placed(load)
    }
}

impl Drop for Placed {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

fn start(core: usize, pinned: bool, polling: Polling, stop: CancellationToken) -> Reactor {
    // No time driver: timers come from `timer`, whose thread holds them all.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .expect("a reactor's runtime (epoll) builds");
    let handle = runtime.handle().clone();
    std::thread::Builder::new()
        .name(format!("reactor-{core}"))
        .spawn(move || {
            if pinned {
                if let Err(e) = pin_to(core) {
                    tracing::warn!(core, "reactor runs unpinned: {e}");
                }
            }
            ON_REACTOR.with(|r| r.set(true));
            crate::stats::claim_stripe();
            POLL_WINDOW.with(|w| w.set(polling.idle_after));
            runtime.block_on(async {
                tokio::select! {
                    _ = stop.cancelled() => {}
                    _ = poll_while_busy(polling) => {}
                }
            });
        })
        .expect("spawn a reactor thread");
    Reactor {
        core,
        node: if pinned {
            numa::node_of_cpu(std::path::Path::new(numa::SYSFS), core)
        } else {
            None
        },
        handle,
        load: Arc::new(AtomicUsize::new(0)),
    }
}

/// What the connections of this thread's reactor did since the spinner last looked.
#[derive(Default)]
struct Activity {
    events: Cell<u64>,
    /// The spinner sleeps; the next event wakes it.
    asleep: Cell<bool>,
    wake: tokio::sync::Notify,
}

thread_local! {
    static ACTIVITY: RefCell<Option<Rc<Activity>>> = const { RefCell::new(None) };
    static ON_REACTOR: Cell<bool> = const { Cell::new(false) };
    static POLL_WINDOW: Cell<Duration> = const { Cell::new(Duration::ZERO) };
}

/// Whether this thread is a reactor: resources kept per reactor (a drive I/O ring) are made on
/// it, and used only by the connections placed there.
pub fn on_reactor() -> bool {
    ON_REACTOR.with(Cell::get)
}

/// How long a poller on this thread's reactor keeps polling completions (a shared RDMA
/// completion queue: a look costs no system call) after the last one, before it sleeps on its
/// completion channel: `Polling::idle_after`. Zero off the reactors.
pub fn poll_window() -> Duration {
    POLL_WINDOW.with(Cell::get)
}

/// A connection on a reactor had something to do (a PDU arrived, a command completed): the
/// reactor keeps polling for a while. Off a reactor (tests, the control runtime) a no-op.
pub fn active() {
    ACTIVITY.with(|a| {
        if let Some(a) = &*a.borrow() {
            a.events.set(a.events.get().wrapping_add(1));
            if a.asleep.replace(false) {
                a.wake.notify_one();
            }
        }
    });
}

/// Runs beside a reactor's connections: yields (the runtime then polls epoll without waiting
/// and runs whatever became ready) for as long as events keep coming, sleeps once none came
/// for `idle_after`.
async fn poll_while_busy(polling: Polling) {
    if polling.idle_after.is_zero() {
        // Nothing to wake: `active` stays a no-op on this thread.
        return std::future::pending().await;
    }
    let activity = Rc::new(Activity::default());
    ACTIVITY.with(|a| *a.borrow_mut() = Some(activity.clone()));
    loop {
        // Asleep until an event: epoll waits, the thread uses no CPU.
        let woken = activity.wake.notified();
        activity.asleep.set(true);
        woken.await;
        let mut seen = activity.events.get();
        let mut last = Instant::now();
        loop {
            tokio::task::yield_now().await;
            let now = Instant::now();
            let events = activity.events.get();
            if events != seen {
                (seen, last) = (events, now);
            } else if now - last >= polling.idle_after {
                break;
            }
        }
    }
}

/// The CPUs this process may run on (its affinity mask: taskset, cgroups' cpusets).
pub fn allowed_cores() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity writes at most its size into it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) } == 0;
    let cores: Vec<usize> = if ok {
        // SAFETY: CPU_ISSET reads the set within its fixed size.
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
            .collect()
    } else {
        Vec::new()
    };
    if cores.is_empty() {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        (0..n).collect()
    } else {
        cores
    }
}

fn pin_to(core: usize) -> std::io::Result<()> {
    if core >= libc::CPU_SETSIZE as usize {
        return Err(std::io::Error::other(format!(
            "CPU {core} is beyond CPU_SETSIZE"
        )));
    }
    // SAFETY: as in `allowed_cores`; CPU_SET stays within the set (core checked above), and
    // sched_setaffinity only reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Parses a core list as `taskset -c` and SPDK's `--cpumask [..]` write it: "0-3,8,10-11".
pub fn parse_cores(list: &str) -> Result<Vec<usize>, String> {
    let mut cores = Vec::new();
    for part in list.split(',').map(str::trim) {
        let (lo, hi) = match part.split_once('-') {
            Some((lo, hi)) => (lo.trim(), hi.trim()),
            None => (part, part),
        };
        let num = |s: &str| {
            s.parse::<usize>()
                .map_err(|_| format!("{part:?} is not a core number or range (e.g. 0-3,8)"))
        };
        let (lo, hi) = (num(lo)?, num(hi)?);
        if lo > hi {
            return Err(format!("core range {part:?} runs backwards"));
        }
        if hi >= libc::CPU_SETSIZE as usize {
            return Err(format!(
                "core {hi} is beyond the {} CPUs Linux can name",
                libc::CPU_SETSIZE
            ));
        }
        cores.extend(lo..=hi);
    }
    cores.sort_unstable();
    cores.dedup();
    Ok(cores)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_goes_to_the_least_loaded_reactor_near_its_nic() {
        let seats = [(Some(0), 1), (Some(0), 0), (Some(1), 3), (Some(1), 2)];
        assert_eq!(choose(&seats, Some(1)), 3, "least loaded on node 1");
        assert_eq!(choose(&seats, Some(0)), 1);
        assert_eq!(choose(&seats, None), 1, "NIC's node unknown: least loaded");
        assert_eq!(choose(&seats, Some(2)), 1, "no reactor on the NIC's node");
        let unpinned = [(None, 2), (None, 1)];
        assert_eq!(
            choose(&unpinned, Some(0)),
            1,
            "unpinned reactors have no node"
        );
    }

    #[test]
    fn core_lists_parse_as_taskset_writes_them() {
        assert_eq!(parse_cores("0-3,8").unwrap(), vec![0, 1, 2, 3, 8]);
        assert_eq!(parse_cores("5").unwrap(), vec![5]);
        assert_eq!(parse_cores("2,1,2").unwrap(), vec![1, 2]);
        assert!(parse_cores("3-1").unwrap_err().contains("backwards"));
        assert!(parse_cores("a").unwrap_err().contains("not a core"));
        assert!(parse_cores("").is_err());
        assert!(parse_cores("0-99999").unwrap_err().contains("beyond"));
    }

    #[test]
    fn connections_spread_over_reactors_and_run_on_their_core() {
        let cores = allowed_cores();
        let reactors = Reactors::new(vec![cores[0]], Polling::default());
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut set = JoinSet::new();
        reactors.place(&mut set, async {
            let name = std::thread::current().name().map(str::to_string);
            // SAFETY: sched_getcpu has no preconditions.
            (name, unsafe { libc::sched_getcpu() })
        });
        let (name, cpu) = rt.block_on(set.join_next()).unwrap().unwrap();
        assert_eq!(
            name.as_deref(),
            Some(format!("reactor-{}", cores[0]).as_str())
        );
        assert_eq!(cpu as usize, cores[0], "pinned to its core");
        assert_eq!(
            reactors.loads(),
            vec![(cores[0], 0)],
            "the ended connection left"
        );
    }

    #[test]
    fn reactors_are_pinned_only_to_cores_chosen_for_them() {
        let allowed = allowed_cores();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        for (cores, pinned) in [(vec![allowed[0]], true), (Vec::new(), false)] {
            let reactors = Reactors::new(cores, Polling::default());
            let mut set = JoinSet::new();
            reactors.place(&mut set, async { allowed_cores() });
            let runs_on = rt.block_on(set.join_next()).unwrap().unwrap();
            let expected = if pinned {
                vec![allowed[0]]
            } else {
                allowed.clone()
            };
            assert_eq!(runs_on, expected, "pinned: {pinned}");
        }
    }

    #[test]
    fn placement_goes_to_the_least_loaded_reactor() {
        let reactors = Reactors::new(vec![0, 0], Polling::default());
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let rx = Arc::new(std::sync::Mutex::new(rx));
        let mut held = JoinSet::new();
        for _ in 0..4 {
            let rx = rx.clone();
            // Each holds its reactor's place until told to end (blocking its thread is fine
            // here: nothing else runs on these reactors).
            reactors.place(&mut held, async move {
                let _ = rx.lock().unwrap().recv();
            });
        }
        let loads: Vec<usize> = reactors.loads().into_iter().map(|(_, n)| n).collect();
        assert_eq!(loads, vec![2, 2]);
        for _ in 0..4 {
            tx.send(()).unwrap();
        }
        while let Some(done) = rt.block_on(held.join_next()) {
            done.unwrap();
        }
        assert_eq!(reactors.loads(), vec![(0, 0), (0, 0)]);
    }

    #[test]
    fn a_seat_counts_from_its_choice_and_spawns_on_its_reactor() {
        let reactors = Reactors::new(vec![0, 0], Polling::default());
        let ip = std::net::IpAddr::from([127, 0, 0, 1]);
        let first = reactors.seat_near_nic(ip);
        let second = reactors.seat_near_nic(ip);
        assert_ne!(
            first.index(),
            second.index(),
            "the first seat already counted"
        );
        assert_eq!(reactors.loads(), vec![(0, 1), (0, 1)]);
        drop(first);
        assert_eq!(
            reactors.loads()[second.index()],
            (0, 1),
            "an unused seat goes"
        );
        assert_eq!(reactors.loads().iter().map(|l| l.1).sum::<usize>(), 1);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut set = JoinSet::new();
        let at = second.index();
        second.spawn(&mut set, async {
            std::thread::current().name().map(str::to_string)
        });
        let name = rt.block_on(set.join_next()).unwrap().unwrap();
        assert_eq!(name.as_deref(), Some("reactor-0"));
        assert_eq!(reactors.loads()[at], (0, 0), "the ended connection left");
    }

    /// CPU time of the calling thread.
    fn thread_cpu() -> Duration {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes one timespec.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
    }

    /// The reactor's CPU time over 200 ms after one event, with this polling policy.
    fn cpu_after_an_event(idle_after: Duration) -> Duration {
        let reactors = Reactors::new(vec![allowed_cores()[0]], Polling { idle_after });
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut set = JoinSet::new();
        reactors.place(&mut set, async {
            let start = thread_cpu();
            active();
            crate::timer::sleep(Duration::from_millis(200)).await;
            thread_cpu() - start
        });
        rt.block_on(set.join_next()).unwrap().unwrap()
    }

    #[test]
    fn a_reactor_polls_after_an_event_and_sleeps_once_idle() {
        // Polling for longer than the pause: the reactor keeps running meanwhile (how much of
        // its core it gets depends on what else runs there: under a loaded CI machine as
        // little as a tenth).
        let polled = cpu_after_an_event(Duration::from_secs(5));
        assert!(polled > Duration::from_millis(4), "{polled:?}");
        // Polling for the default window, or not at all: it sleeps through the pause.
        for idle_after in [Polling::default().idle_after, Duration::ZERO] {
            let slept = cpu_after_an_event(idle_after);
            assert!(
                slept < Duration::from_millis(2) && slept * 2 < polled,
                "{idle_after:?}: {slept:?} (polling: {polled:?})"
            );
        }
    }

    #[test]
    fn queues_on_a_reactor_learn_its_polling_window() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let idle_after = Duration::from_micros(150);
        let reactors = Reactors::new(Vec::new(), Polling { idle_after });
        let mut set = JoinSet::new();
        reactors.place(&mut set, async { poll_window() });
        assert_eq!(rt.block_on(set.join_next()).unwrap().unwrap(), idle_after);
        assert_eq!(
            poll_window(),
            Duration::ZERO,
            "off the reactors: no polling"
        );
    }
}
