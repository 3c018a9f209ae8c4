//! The counters the I/O path increments. Nothing here uses another module of the crate, so
//! every layer may count; the scrape that sums them is `metrics`, at the top.
//!
//! Counting must not slow I/O down: every counter is a relaxed atomic in an object the I/O path
//! already holds (the namespace for per-drive figures, the controller for per-host figures, the
//! connection for bytes on the wire). Counters that queues on several cores share are striped:
//! each thread adds to its own cache line, so queues never contend for one. Nothing is looked up
//! or locked per command; the sums over stripes, connections, controllers and namespaces are
//! made when Prometheus scrapes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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

/// Stripes per striped counter set: one per thread up to this many threads, shared beyond.
const STRIPES: usize = 16;

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
    pub fn local(&self) -> &T {
        &self.stripes[stripe()].0
    }

    pub fn all(&self) -> impl Iterator<Item = &T> {
        self.stripes.iter().map(|s| &s.0)
    }
}

/// The stripe of the calling thread, handed out round-robin on first use.
fn stripe() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static STRIPE: usize = NEXT.fetch_add(1, Relaxed) % STRIPES;
    }
    STRIPE.with(|s| *s)
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
    pub fn add_read(&self, bytes: u64) {
        let local = self.io.local();
        local.read_commands.fetch_add(1, Relaxed);
        local.bytes_read.fetch_add(bytes, Relaxed);
    }
    pub fn add_write(&self, bytes: u64) {
        let local = self.io.local();
        local.write_commands.fetch_add(1, Relaxed);
        local.bytes_written.fetch_add(bytes, Relaxed);
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
    pub fn read_latency(&self, elapsed: Duration) {
        self.io.local().read_latency.observe(elapsed);
    }
    pub fn write_latency(&self, elapsed: Duration) {
        self.io.local().write_latency.observe(elapsed);
    }
    pub fn add_other(&self) {
        self.io.local().other_commands.fetch_add(1, Relaxed);
    }
    pub fn add_error(&self) {
        self.io.local().errors.fetch_add(1, Relaxed);
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
    pub fn observe(&self, elapsed: Duration) {
        let ns = elapsed.as_nanos().min(u64::MAX as u128) as u64;
        let i = BOUNDS_NS.partition_point(|&bound| bound < ns);
        self.buckets[i].fetch_add(1, Relaxed);
        self.sum_ns.fetch_add(ns, Relaxed);
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
}

impl ControllerCounters {
    pub fn add_read(&self, bytes: u64) {
        self.read_ops.fetch_add(1, Relaxed);
        self.read_bytes.fetch_add(bytes, Relaxed);
    }
    pub fn add_write(&self, bytes: u64) {
        self.write_ops.fetch_add(1, Relaxed);
        self.write_bytes.fetch_add(bytes, Relaxed);
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
        h.observe(Duration::from_nanos(5_000)); // on the 5 µs bound: in its bucket
        h.observe(Duration::from_nanos(5_001)); // just above: next bucket
        h.observe(Duration::from_millis(3)); // 5 ms bucket
        h.observe(Duration::from_secs(2)); // +Inf
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
        let threads: Vec<_> = (0..20)
            .map(|_| {
                let counters = counters.clone();
                std::thread::spawn(move || {
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
        // 20 threads over 16 stripes: more than one stripe was used.
        assert!(
            counters
                .all()
                .filter(|c| c.write_ops.load(Relaxed) > 0)
                .count()
                > 1
        );
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
