//! Metrics: the counters the I/O path increments, and the snapshot a scrape takes of them.
//!
//! Counting must not slow I/O down: every counter is a relaxed atomic in an object the I/O path
//! already holds (the namespace for per-drive figures, the controller for per-host figures, the
//! connection for bytes on the wire). Counters that queues on several cores share are striped:
//! each thread adds to its own cache line, so queues never contend for one. Nothing is looked up
//! or locked per command; the sums over stripes, connections, controllers and namespaces are
//! made when Prometheus scrapes.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fabrik_api::metrics::{
    ControllerMetrics, DriveMetrics, Histogram, PortMetrics, Snapshot, LATENCY_BUCKETS,
};
use tokio_util::sync::CancellationToken;

use crate::backend::Drive;
use crate::controller::ANONYMOUS_HOST;
use crate::management::Manager;
use crate::model::{Port, TargetState};

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

/// Per-drive figures the I/O path adds to (striped in [`NamespaceStats`](crate::model::NamespaceStats)).
#[derive(Default)]
pub struct DriveCounters {
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

/// What one controller (a host's association with a subsystem) moved (striped in
/// [`Controller`](crate::controller::Controller): its queues may run on several cores).
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
    fn totals(&self) -> (u64, u64, u64, u64) {
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

/// Takes the figures a scrape reports. Drives come from the drive registry (every drive of the
/// box once, exported or not); their health from [`Manager::drive_health`], as the REST API's.
/// Blocking (SMART logs are read by ioctl).
pub fn snapshot(manager: &Manager) -> Snapshot {
    let target = manager.target_state();
    let state = manager.state();
    // Hosts by alias, never by NQN: whoever reads the metrics could connect as a host whose
    // NQN they learnt.
    let alias = |nqn: &str| crate::state::host_alias(&state.alias_key, nqn);
    let mut composed: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for c in &state.compositions {
        for d in &c.drives {
            composed
                .entry(d.clone())
                .or_default()
                .push(alias(&c.host_nqn));
        }
    }
    let mut drives = Vec::new();
    for (id, drive) in manager.drive_registry() {
        let exported = manager.namespaces_of(id);
        let namespaces: Vec<_> = exported.iter().map(|(_, ns)| ns.clone()).collect();
        let info = drive.info();
        let mut d = DriveMetrics {
            drive: id.clone(),
            backend: info.kind.name().to_string(),
            subsystem: exported
                .first()
                .map(|(nqn, _)| nqn.clone())
                .unwrap_or_default(),
            capacity_bytes: info.capacity,
            composed_to: composed.remove(id).unwrap_or_default(),
            health: manager.drive_health(id, &namespaces),
            ..DriveMetrics::default()
        };
        // A drive exported in several namespaces: the sum over them.
        for ns in &namespaces {
            let s = &ns.stats;
            d.read_ops += s.read_commands.load(Relaxed);
            d.write_ops += s.write_commands.load(Relaxed);
            d.read_bytes += s.bytes_read.load(Relaxed);
            d.write_bytes += s.bytes_written.load(Relaxed);
            for c in s.io.all() {
                d.other_ops += c.other_commands.load(Relaxed);
                d.errors += c.errors.load(Relaxed);
                add_histogram(&mut d.read_latency, c.read_latency.snapshot());
                add_histogram(&mut d.write_latency, c.write_latency.snapshot());
            }
        }
        drives.push(d);
    }
    let ports = target
        .ports()
        .iter()
        .map(|p| port_metrics(target, p))
        .collect();
    let controllers = target
        .subsystems()
        .iter()
        .flat_map(|sub| sub.controllers())
        .map(|c| {
            let mut m = ControllerMetrics {
                subsystem: c.subnqn(),
                host: c.hostnqn.as_deref().map_or(ANONYMOUS_HOST.into(), alias),
                controller: c.cntlid,
                port: c.port.port_id,
                io_queues: c.io_queue_count() as u64,
                ..ControllerMetrics::default()
            };
            for io in c.io_counters.all() {
                m.read_ops += io.read_ops.load(Relaxed);
                m.write_ops += io.write_ops.load(Relaxed);
                m.read_bytes += io.read_bytes.load(Relaxed);
                m.write_bytes += io.write_bytes.load(Relaxed);
            }
            m
        })
        .collect();
    Snapshot {
        version: env!("CARGO_PKG_VERSION").to_string(),
        box_name: target.box_name.clone(),
        uptime_seconds: target.started.elapsed().as_secs_f64(),
        drives,
        ports,
        controllers,
    }
}

fn add_histogram(total: &mut Histogram, h: Histogram) {
    if total.buckets.is_empty() {
        *total = h;
        return;
    }
    for (t, b) in total.buckets.iter_mut().zip(h.buckets) {
        *t += b;
    }
    total.sum_seconds += h.sum_seconds;
}

fn port_metrics(target: &TargetState, port: &Port) -> PortMetrics {
    let (accepted, open, rx, tx) = target.metrics.port(port.id).totals();
    PortMetrics {
        port: port.id,
        transport: port.transport.to_string(),
        address: port.addr.to_string(),
        connections_accepted: accepted,
        connections_open: open,
        received_bytes: rx,
        sent_bytes: tx,
    }
}

/// The `GET /metrics` endpoint on its own address (the REST API's address serves it too).
pub struct MetricsEndpoint {
    addr: SocketAddr,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl MetricsEndpoint {
    /// Serves `/metrics` on `addr`; with a `token`, scrapes need `Authorization: Bearer`.
    pub async fn start(
        manager: Arc<Manager>,
        addr: SocketAddr,
        token: Option<String>,
    ) -> std::io::Result<MetricsEndpoint> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let router = fabrik_api::metrics::router(move || snapshot(&manager), token);
        let stop = CancellationToken::new();
        let task = tokio::spawn({
            let stop = stop.clone();
            async move {
                let stopped = async move { stop.cancelled().await };
                if let Err(e) = fabrik_api::metrics::serve(listener, router, stopped).await {
                    tracing::error!("metrics endpoint failed: {e}");
                }
            }
        });
        Ok(MetricsEndpoint { addr, stop, task })
    }

    /// The address actually bound.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub async fn shutdown(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::guard::Guarded;
    use crate::backend::{ram::RamDrive, BoxFuture, DriveError, DriveInfo};
    use bytes::Bytes;
    use fabrik_api::Management;
    use fabrik_proto::nvme::log::SmartLog;

    /// A RAM drive that has a SMART log, as an NVMe block drive does.
    struct SmartRam(RamDrive);

    impl Drive for SmartRam {
        fn info(&self) -> &DriveInfo {
            self.0.info()
        }
        fn smart_log(&self) -> Option<std::io::Result<SmartLog>> {
            Some(Ok(SmartLog {
                critical_warning: 0x02,
                temperature_k: 310,
                percentage_used: 7,
                power_on_hours: 1234,
                media_errors: 3,
                ..SmartLog::default()
            }))
        }
        fn read(&self, offset: u64, len: usize) -> BoxFuture<'_, Result<Bytes, DriveError>> {
            self.0.read(offset, len)
        }
        fn write(
            &self,
            offset: u64,
            data: Bytes,
            fua: bool,
        ) -> BoxFuture<'_, Result<(), DriveError>> {
            self.0.write(offset, data, fua)
        }
        fn flush(&self) -> BoxFuture<'_, Result<(), DriveError>> {
            self.0.flush()
        }
        fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, Result<(), DriveError>> {
            self.0.write_zeroes(offset, len)
        }
        fn deallocate(&self, offset: u64, len: u64) -> BoxFuture<'_, Result<(), DriveError>> {
            self.0.deallocate(offset, len)
        }
    }

    /// The metrics' health gauges and the REST drive view come from one place: with a SMART
    /// log, both show its figures; without, both show fabrikd's.
    #[test]
    fn drive_health_is_the_drive_views() {
        let mut config = crate::config::Config::default_jbof("/nonexistent".into());
        config.drives = 2;
        config.backend = crate::backend::BackendKind::Ram;
        config.drive_size = 1 << 20;
        let state = crate::state::State::seed(&config);
        let ids: Vec<String> = state.drives.iter().map(|d| d.id.clone()).collect();
        let mut drives: BTreeMap<String, Arc<dyn Drive>> = BTreeMap::new();
        drives.insert(
            ids[0].clone(),
            Arc::new(SmartRam(RamDrive::new(1 << 20, 4096).unwrap())),
        );
        drives.insert(
            ids[1].clone(),
            Arc::new(RamDrive::new(1 << 20, 4096).unwrap()),
        );
        let guarded = |d: Arc<dyn Drive>| Arc::new(Guarded::new(d, None, Box::new(|_| {})));
        let manager = Manager::new(
            Arc::new(TargetState::new("box".into())),
            drives.into_iter().map(|(id, d)| (id, guarded(d))).collect(),
            state,
            None,
            CancellationToken::new(),
        );
        let snap = snapshot(&manager);
        assert_eq!(snap.drives.len(), 2);
        for (d, id) in snap.drives.iter().zip(&ids) {
            assert_eq!(&d.drive, id);
            assert_eq!(d.health, manager.drive(id).unwrap().health, "drive {id}");
        }
        let smart = &snap.drives[0].health;
        assert_eq!(
            (smart.source.as_str(), smart.state.as_str()),
            ("smart", "warning")
        );
        assert_eq!(
            (smart.temperature_celsius, smart.percentage_used),
            (Some(37), Some(7))
        );
        assert_eq!((smart.media_errors, smart.power_on_hours), (3, 1234));
        assert_eq!(snap.drives[1].health.source, "fabrikd");
        let text = fabrik_api::metrics::encode(&snap, fabrik_api::metrics::Format::PrometheusText);
        let d0 = &ids[0];
        for line in [
            format!("fabrik_drive_temperature_celsius{{drive=\"{d0}\"}} 37.0"),
            format!("fabrik_drive_endurance_used_ratio{{drive=\"{d0}\"}} 0.07"),
            format!("fabrik_drive_critical_warning{{drive=\"{d0}\"}} 2"),
            format!("fabrik_drive_media_errors_total{{drive=\"{d0}\"}} 3"),
            format!(
                "fabrik_drive_power_on_seconds{{drive=\"{d0}\"}} {}",
                1234 * 3600
            ),
            format!("fabrik_drive_ready{{drive=\"{d0}\"}} 1"),
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        }
        assert!(text.contains("health_source=\"smart\""));
        assert!(text.contains("health_source=\"fabrikd\""));
    }

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
