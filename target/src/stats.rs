//! The counters the I/O path increments. Nothing here uses another module of the crate, so
//! every layer may count; the scrape that sums them is `metrics`, at the top.
//!
//! Counting must not slow I/O down: every counter is a relaxed atomic in an object the I/O path
//! already holds (the namespace for per-drive figures, the controller for per-host figures, the
//! connection for bytes on the wire). Counters that queues on several cores share are striped:
//! each thread adds to its own cache line, so queues never contend for one, and a reactor's
//! stripe is its own alone, so it adds with a plain load and store, not a locked instruction.
//! Nothing is looked up or locked per command; the sums over stripes, connections, controllers
//! and namespaces are made when Prometheus scrapes.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};

use fabrik_api::metrics::{Histogram, LATENCY_BUCKETS};

/// Bucket bounds of [`LATENCY_BUCKETS`] in nanoseconds, so an observation is integer compares.
const BOUNDS_NS: [u64; LATENCY_BUCKETS.len()] = {
    let mut ns = [0u64; LATENCY_BUCKETS.len()];
    let mut i = 0;
    while i < ns.len() {
        ns[i] = (LATENCY_BUCKETS[i] * 1e9 + 0.5) as u64;
        i += 1;
    }
    ns
};

/// Stripes per striped counter set. Stripe 0 is shared by every thread without one of its own
/// (the control runtime and blocking threads: they count rarely); each reactor claims one of the
/// others at start (`claim_stripe`), while any is left.
const STRIPES: usize = 32;

/// A set of counters in [`STRIPES`] copies, one cache line (or more) each: a thread updates
/// its own copy (`local`), a scrape sums them all.
pub struct Striped<T> {
    stripes: Box<[CacheAligned<T>]>,
}

/// 128 bytes: two cache lines, as adjacent-line prefetch pairs them on x86.
#[repr(align(128))]
#[derive(Default)]
struct CacheAligned<T>(T);

impl<T: Default> Default for Striped<T> {
    fn default() -> Self {
        Striped {
            stripes: (0..STRIPES).map(|_| CacheAligned::default()).collect(),
        }
    }
}

impl<T> Striped<T> {
    /// This thread's copy.
    pub fn local(&self) -> Local<'_, T> {
        let (stripe, alone) = STRIPE.with(Cell::get);
        Local {
            counters: &self.stripes[stripe].0,
            alone,
        }
    }

    pub fn all(&self) -> impl Iterator<Item = &T> {
        self.stripes.iter().map(|s| &s.0)
    }
}

thread_local! {
    /// The calling thread's stripe, and whether no other thread writes to it.
    static STRIPE: Cell<(usize, bool)> = const { Cell::new((0, false)) };
    /// The stripe this thread claimed, given back when the thread ends.
    static CLAIM: RefCell<Option<Claim>> = const { RefCell::new(None) };
}

/// Stripes given back by threads that ended, for the next thread that claims one.
static FREED: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// Gives the calling thread a stripe of its own, if one is left: its counting is then plain
/// loads and stores, where a shared stripe takes an atomic read-modify-write (a locked
/// instruction on x86, some 20 cycles) per count, and a command counts six times. The stripe
/// goes back when the thread ends: every target a process starts (tests start many) has
/// reactors of its own.
pub fn claim_stripe() {
    static NEXT: AtomicUsize = AtomicUsize::new(1);
    let freed = FREED.lock().unwrap().pop();
    let stripe = freed.or_else(|| Some(NEXT.fetch_add(1, Relaxed)).filter(|&s| s < STRIPES));
    if let Some(stripe) = stripe {
        STRIPE.with(|s| s.set((stripe, true)));
        CLAIM.with(|c| *c.borrow_mut() = Some(Claim(stripe)));
    }
}

struct Claim(usize);

impl Drop for Claim {
    fn drop(&mut self) {
        // Anything this thread still counts goes to the shared stripe from here on.
        STRIPE.with(|s| s.set((0, false)));
        FREED.lock().unwrap().push(self.0);
    }
}

/// One thread's copy of a striped set of counters.
pub struct Local<'a, T> {
    counters: &'a T,
    /// Only this thread writes to these counters.
    alone: bool,
}

impl<T> Local<'_, T> {
    fn add(&self, counter: &AtomicU64, n: u64) {
        if self.alone {
            // Readers (scrapes) see the old or the new value; no other writer can interleave.
            counter.store(counter.load(Relaxed).wrapping_add(n), Relaxed);
        } else {
            counter.fetch_add(n, Relaxed);
        }
    }
}

/// Drive latency is timed with the TSC where it is invariant (quanta falls back to the system
/// clock elsewhere), read raw and scaled only for the difference: `std::time::Instant` is a vDSO
/// call costing about 40 ns on the H200 machine.
pub struct Stopwatch(u64);

impl Stopwatch {
    pub fn start() -> Stopwatch {
        Stopwatch(clock().raw())
    }

    pub fn nanos(&self) -> u64 {
        let clock = clock();
        clock.delta_as_nanos(self.0, clock.raw())
    }
}

fn clock() -> &'static quanta::Clock {
    static CLOCK: OnceLock<quanta::Clock> = OnceLock::new();
    CLOCK.get_or_init(quanta::Clock::new)
}

/// The clock calibrates itself against the system clock on first use (milliseconds, up to 200):
/// at start, not in a host's first command.
pub fn calibrate_clock() {
    clock();
}

/// A namespace's counters, for its SMART log and the metrics.
#[derive(Default)]
pub struct NamespaceStats {
    pub media_errors: AtomicU64,
    /// Commands, bytes, latencies, errors, per thread: a namespace's queues run on several
    /// reactors (a host's queues spread over the box's cores), and counters they all added to
    /// moved one cache line between those cores on every command.
    pub io: Striped<DriveCounters>,
}

impl NamespaceStats {
    /// A Read of `bytes` completed in `nanos`.
    pub fn read(&self, bytes: u64, nanos: u64) {
        let local = self.io.local();
        local.add(&local.counters.read_commands, 1);
        local.add(&local.counters.bytes_read, bytes);
        local.counters.read_latency.observe(&local, nanos);
    }
    pub fn write(&self, bytes: u64, nanos: u64) {
        let local = self.io.local();
        local.add(&local.counters.write_commands, 1);
        local.add(&local.counters.bytes_written, bytes);
        local.counters.write_latency.observe(&local, nanos);
    }
    pub fn read_commands(&self) -> u64 {
        self.io.all().map(|c| c.read_commands.load(Relaxed)).sum()
    }
    pub fn write_commands(&self) -> u64 {
        self.io.all().map(|c| c.write_commands.load(Relaxed)).sum()
    }
    pub fn bytes_read(&self) -> u64 {
        self.io.all().map(|c| c.bytes_read.load(Relaxed)).sum()
    }
    pub fn bytes_written(&self) -> u64 {
        self.io.all().map(|c| c.bytes_written.load(Relaxed)).sum()
    }
    pub fn add_other(&self) {
        let local = self.io.local();
        local.add(&local.counters.other_commands, 1);
    }
    pub fn add_error(&self) {
        let local = self.io.local();
        local.add(&local.counters.errors, 1);
    }
}

/// Per-drive figures the I/O path adds to (striped in [`NamespaceStats`]).
#[derive(Default)]
pub struct DriveCounters {
    pub read_commands: AtomicU64,
    pub write_commands: AtomicU64,
    pub bytes_read: AtomicU64,
    pub bytes_written: AtomicU64,
    pub read_latency: LatencyHistogram,
    pub write_latency: LatencyHistogram,
    /// Flush, Write Zeroes and Dataset Management commands completed.
    pub other_commands: AtomicU64,
    /// I/O commands that failed once admitted (drive errors, ranges found invalid with the data).
    pub errors: AtomicU64,
}

/// A latency histogram with the buckets of [`LATENCY_BUCKETS`] (+Inf last).
#[derive(Default)]
pub struct LatencyHistogram {
    buckets: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    sum_ns: AtomicU64,
}

impl LatencyHistogram {
    /// Counts one observation, through `local`: the stripe this histogram is in.
    fn observe<T>(&self, local: &Local<'_, T>, ns: u64) {
        let i = BOUNDS_NS.partition_point(|&bound| bound < ns);
        local.add(&self.buckets[i], 1);
        local.add(&self.sum_ns, ns);
    }

    pub fn snapshot(&self) -> Histogram {
        Histogram {
            buckets: self.buckets.iter().map(|b| b.load(Relaxed)).collect(),
            sum_seconds: self.sum_ns.load(Relaxed) as f64 / 1e9,
        }
    }
}

/// What one controller (a host's association with a subsystem) moved (striped in the
/// controller: its queues may run on several cores).
#[derive(Default)]
pub struct ControllerCounters {
    pub read_ops: AtomicU64,
    pub write_ops: AtomicU64,
    pub read_bytes: AtomicU64,
    pub write_bytes: AtomicU64,
    /// Commands that waited for the host's QoS limits, and how long in all (ns).
    pub throttled_ops: AtomicU64,
    pub throttled_ns: AtomicU64,
}

impl Local<'_, ControllerCounters> {
    pub fn add_read(&self, bytes: u64) {
        self.add(&self.counters.read_ops, 1);
        self.add(&self.counters.read_bytes, bytes);
    }
    pub fn add_write(&self, bytes: u64) {
        self.add(&self.counters.write_ops, 1);
        self.add(&self.counters.write_bytes, bytes);
    }
    pub fn add_throttled(&self, wait: std::time::Duration) {
        self.add(&self.counters.throttled_ops, 1);
        self.add(&self.counters.throttled_ns, wait.as_nanos() as u64);
    }
}

/// Bytes on one transport connection (any transport: a TCP connection, an RDMA queue pair).
/// A transport takes one per connection with `target.metrics.port(port.id).connection()` and
/// counts what it receives and sends; scrapes read it.
#[derive(Default)]
pub struct ConnectionCounters {
    received: AtomicU64,
    sent: AtomicU64,
}

impl ConnectionCounters {
    pub fn add_received(&self, bytes: usize) {
        self.received.fetch_add(bytes as u64, Relaxed);
    }
    pub fn add_sent(&self, bytes: usize) {
        self.sent.fetch_add(bytes as u64, Relaxed);
    }
}

/// One port's connections: the live ones' counters, and the totals of those that closed.
#[derive(Default)]
pub struct PortCounters {
    inner: Mutex<PortTotals>,
    /// Connections whose TLS handshake failed (no key for the identity, another key, clear
    /// text on a port that requires TLS, a timeout): they never became queues.
    tls_failures: AtomicU64,
}

#[derive(Default)]
struct PortTotals {
    accepted: u64,
    live: Vec<Arc<ConnectionCounters>>,
    closed_received: u64,
    closed_sent: u64,
}

impl PortCounters {
    /// Counts a new connection; its counters stay on the port's books after the returned guard
    /// is dropped (when the connection closes).
    pub fn connection(self: &Arc<Self>) -> ConnectionGuard {
        let counters = Arc::new(ConnectionCounters::default());
        let mut t = self.inner.lock().unwrap();
        t.accepted += 1;
        t.live.push(counters.clone());
        ConnectionGuard {
            port: self.clone(),
            counters,
        }
    }

    pub fn tls_failed(&self) {
        self.tls_failures.fetch_add(1, Relaxed);
    }

    pub fn tls_failures(&self) -> u64 {
        self.tls_failures.load(Relaxed)
    }

    /// (accepted, open, received bytes, sent bytes).
    pub fn totals(&self) -> (u64, u64, u64, u64) {
        let t = self.inner.lock().unwrap();
        let (mut rx, mut tx) = (t.closed_received, t.closed_sent);
        for c in &t.live {
            rx += c.received.load(Relaxed);
            tx += c.sent.load(Relaxed);
        }
        (t.accepted, t.live.len() as u64, rx, tx)
    }
}

/// A connection's counters, registered with its port while the guard lives.
pub struct ConnectionGuard {
    port: Arc<PortCounters>,
    counters: Arc<ConnectionCounters>,
}

impl std::ops::Deref for ConnectionGuard {
    type Target = ConnectionCounters;
    fn deref(&self) -> &ConnectionCounters {
        &self.counters
    }
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        let mut t = self.port.inner.lock().unwrap();
        t.live.retain(|c| !Arc::ptr_eq(c, &self.counters));
        t.closed_received += self.counters.received.load(Relaxed);
        t.closed_sent += self.counters.sent.load(Relaxed);
    }
}

/// Target-wide metric state: the ports' counters (looked up once per connection).
#[derive(Default)]
pub struct TargetMetrics {
    ports: Mutex<BTreeMap<u16, Arc<PortCounters>>>,
}

impl TargetMetrics {
    pub fn port(&self, port_id: u16) -> Arc<PortCounters> {
        self.ports
            .lock()
            .unwrap()
            .entry(port_id)
            .or_default()
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_by_upper_bound() {
        let h = LatencyHistogram::default();
        let shared = Local {
            counters: &(),
            alone: false,
        };
        h.observe(&shared, 5_000); // on the 5 µs bound: in its bucket
        h.observe(&shared, 5_001); // just above: next bucket
        h.observe(&shared, 3_000_000); // 5 ms bucket
        h.observe(&shared, 2_000_000_000); // +Inf
        let s = h.snapshot();
        assert_eq!(s.buckets.len(), LATENCY_BUCKETS.len() + 1);
        assert_eq!(s.buckets[0], 1);
        assert_eq!(s.buckets[1], 1);
        let ms5 = LATENCY_BUCKETS.iter().position(|&b| b == 5e-3).unwrap();
        assert_eq!(s.buckets[ms5], 1);
        assert_eq!(s.buckets[LATENCY_BUCKETS.len()], 1);
        assert_eq!(s.count(), 4);
        assert!((s.sum_seconds - 2.003010001).abs() < 1e-9);
    }

    #[test]
    fn stripes_sum_over_threads() {
        let counters = Arc::new(Striped::<ControllerCounters>::default());
        // Half the threads have a stripe of their own (as reactors do), the others share one.
        let threads: Vec<_> = (0..20)
            .map(|i| {
                let counters = counters.clone();
                std::thread::spawn(move || {
                    if i % 2 == 0 {
                        claim_stripe();
                        assert!(counters.local().alone, "a stripe of its own");
                    }
                    for _ in 0..1000 {
                        counters.local().add_write(4096);
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        let ops: u64 = counters.all().map(|c| c.write_ops.load(Relaxed)).sum();
        let bytes: u64 = counters.all().map(|c| c.write_bytes.load(Relaxed)).sum();
        assert_eq!((ops, bytes), (20_000, 20_000 * 4096));
        // More than one stripe was used.
        assert!(
            counters
                .all()
                .filter(|c| c.write_ops.load(Relaxed) > 0)
                .count()
                > 1
        );
    }

    #[test]
    fn stripes_of_ended_threads_are_claimed_again() {
        // More threads than stripes, one after another: each gets a stripe of its own.
        for _ in 0..2 * STRIPES {
            std::thread::spawn(|| {
                claim_stripe();
                assert!(STRIPE.with(Cell::get).1);
            })
            .join()
            .unwrap();
        }
    }

    #[test]
    fn port_keeps_closed_connections_bytes() {
        let port = Arc::new(PortCounters::default());
        let a = port.connection();
        let b = port.connection();
        a.add_received(100);
        a.add_sent(10);
        b.add_received(1);
        assert_eq!(port.totals(), (2, 2, 101, 10));
        drop(a);
        assert_eq!(port.totals(), (2, 1, 101, 10));
        b.add_sent(5);
        drop(b);
        assert_eq!(port.totals(), (2, 0, 101, 15));
    }
}
