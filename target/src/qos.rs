//! QoS: I/O limits of a host (kept by each of its controllers on this box) or of a drive (kept
//! by its namespace).
//!
//! Each limit is a generic cell rate algorithm (GCRA) bucket: one atomic "theoretical arrival
//! time" per limit, moved forward by each command's cost (1 for IOPS, its bytes for
//! bandwidth) with a compare-and-swap; no lock, and nothing at all for hosts without limits
//! (one relaxed load). A command past a limit is not failed: it waits, on its reactor's timer,
//! until its turn, so the host sees its rate, and other hosts see nothing. A burst (`burst_ms`
//! of each rate) lets a host that was idle run ahead briefly.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fabrik_api::models::QosLimits;

/// Default burst: this much of each rate may pass at once after idling.
pub const DEFAULT_BURST_MS: u32 = 50;
/// Largest limit the API accepts, per second (far past any box: 1 PiB/s).
pub const MAX_LIMIT: u64 = 1 << 50;
/// Longest burst the API accepts.
pub const MAX_BURST_MS: u32 = 10_000;

const NS_PER_SEC: u128 = 1_000_000_000;

/// Limits that can hold: no limit of 0 (null lifts one), a burst of at most `MAX_BURST_MS`.
pub fn check(q: &QosLimits) -> Result<(), String> {
    let values = [
        q.iops,
        q.bytes_per_sec,
        q.read_iops,
        q.read_bytes_per_sec,
        q.write_iops,
        q.write_bytes_per_sec,
    ];
    if values.contains(&Some(0)) {
        return Err("a limit of 0 would stop the host: lift it with null instead".into());
    }
    if values.iter().flatten().any(|&v| v > MAX_LIMIT) {
        return Err(format!("a limit is at most {MAX_LIMIT} (2^50) per second"));
    }
    if q.burst_ms.is_some_and(|b| b > MAX_BURST_MS) {
        return Err(format!("burst_ms is at most {MAX_BURST_MS}"));
    }
    Ok(())
}

/// One limit: `rate` units per second; 0: none.
#[derive(Default)]
struct Bucket {
    /// Picoseconds per unit (IOPS limits of up to 10^12 units per second stay exact enough).
    ps_per_unit: AtomicU64,
    /// Tolerance: how far the arrival time may run ahead of now, in ns.
    burst_ns: AtomicU64,
    /// Theoretical arrival time of the next unit, ns since the limiter's epoch.
    tat: AtomicU64,
}

impl Bucket {
    fn set(&self, rate: Option<u64>, burst: Duration) {
        let ps = rate.map_or(0, |r| (NS_PER_SEC * 1000 / r.max(1) as u128).max(1) as u64);
        self.ps_per_unit.store(ps, Ordering::Relaxed);
        self.burst_ns
            .store(burst.as_nanos() as u64, Ordering::Relaxed);
    }

    /// Reserves `units` at `now` (ns); how long the caller waits before its turn.
    fn reserve(&self, now: u64, units: u64) -> u64 {
        let ps = self.ps_per_unit.load(Ordering::Relaxed);
        if ps == 0 {
            return 0;
        }
        let cost = (units as u128 * ps as u128 / 1000).min(u64::MAX as u128) as u64;
        let burst = self.burst_ns.load(Ordering::Relaxed);
        let mut wait = 0;
        let _ = self
            .tat
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |tat| {
                // An idle bucket starts from now less the burst: that much may pass at once.
                let start = tat.max(now.saturating_sub(burst));
                wait = start.saturating_sub(now);
                Some(start.saturating_add(cost))
            });
        wait
    }
}

/// A host's limits and what they held back.
pub struct Limiter {
    epoch: Instant,
    enabled: AtomicBool,
    iops: Bucket,
    bytes: Bucket,
    read_iops: Bucket,
    read_bytes: Bucket,
    write_iops: Bucket,
    write_bytes: Bucket,
}

impl Default for Limiter {
    fn default() -> Limiter {
        Limiter {
            epoch: Instant::now(),
            enabled: AtomicBool::new(false),
            iops: Bucket::default(),
            bytes: Bucket::default(),
            read_iops: Bucket::default(),
            read_bytes: Bucket::default(),
            write_iops: Bucket::default(),
            write_bytes: Bucket::default(),
        }
    }
}

impl Limiter {
    /// Takes new limits (None or empty: none). Commands already waiting keep their turn.
    pub fn set(&self, limits: Option<&QosLimits>) {
        let none = QosLimits::default();
        let l = limits.unwrap_or(&none);
        let burst = Duration::from_millis(l.burst_ms.unwrap_or(DEFAULT_BURST_MS) as u64);
        self.iops.set(l.iops, burst);
        self.bytes.set(l.bytes_per_sec, burst);
        self.read_iops.set(l.read_iops, burst);
        self.read_bytes.set(l.read_bytes_per_sec, burst);
        self.write_iops.set(l.write_iops, burst);
        self.write_bytes.set(l.write_bytes_per_sec, burst);
        self.enabled.store(!l.is_empty(), Ordering::Release);
    }

    /// Whether any limit is set (one relaxed load: the per-command cost for other hosts).
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Reserves a command's turn: how long it waits (zero: it may run now). `write`: a write
    /// (or any command that changes data), else a read or another command.
    pub fn reserve(&self, write: bool, bytes: u64) -> Duration {
        self.reserve_at(self.epoch.elapsed().as_nanos() as u64, write, bytes)
    }

    fn reserve_at(&self, now: u64, write: bool, bytes: u64) -> Duration {
        let (kind_iops, kind_bytes) = if write {
            (&self.write_iops, &self.write_bytes)
        } else {
            (&self.read_iops, &self.read_bytes)
        };
        let wait = [
            self.iops.reserve(now, 1),
            kind_iops.reserve(now, 1),
            self.bytes.reserve(now, bytes),
            kind_bytes.reserve(now, bytes),
        ]
        .into_iter()
        .max()
        .unwrap_or(0);
        Duration::from_nanos(wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(l: QosLimits) -> Limiter {
        let q = Limiter::default();
        q.set(Some(&l));
        q
    }

    /// Commands arriving as fast as they can, each waiting its turn: the rate is the limit's
    /// after the burst.
    fn rate(q: &Limiter, write: bool, bytes: u64, seconds: u64) -> f64 {
        let mut now = 0u64;
        let mut n = 0u64;
        let end = seconds * 1_000_000_000;
        while now < end {
            now += q.reserve_at(now, write, bytes).as_nanos() as u64;
            n += 1;
        }
        n as f64 / seconds as f64
    }

    #[test]
    fn limits_hold_by_kind_and_together() {
        let q = limiter(QosLimits {
            iops: Some(1000),
            burst_ms: Some(0),
            ..Default::default()
        });
        assert!((rate(&q, false, 4096, 10) - 1000.0).abs() < 2.0);
        let q = limiter(QosLimits {
            read_bytes_per_sec: Some(8 << 20),
            write_iops: Some(10),
            burst_ms: Some(0),
            ..Default::default()
        });
        // 128 KiB reads at 8 MiB/s: 64 per second; writes are held by their own limit.
        assert!((rate(&q, false, 128 << 10, 10) - 64.0).abs() < 1.0);
        assert!((rate(&q, true, 128 << 10, 10) - 10.0).abs() < 1.0);
        // Without limits nothing waits.
        let free = Limiter::default();
        assert!(!free.enabled());
        assert_eq!(free.reserve(true, 1 << 20), Duration::ZERO);
        q.set(None);
        assert!(!q.enabled());
    }

    #[test]
    fn an_idle_host_may_burst_then_keeps_its_rate() {
        let q = limiter(QosLimits {
            iops: Some(1000),
            burst_ms: Some(100),
            ..Default::default()
        });
        let t = 5_000_000_000; // long idle
        let at_once = (0..200)
            .take_while(|_| q.reserve_at(t, false, 0) == Duration::ZERO)
            .count();
        // 100 ms of 1000 IOPS, and the one due now; the first that waits took the slot 1 ms
        // ahead, so the next is 2 ms ahead: one per millisecond from then on.
        assert_eq!(at_once, 101);
        assert_eq!(q.reserve_at(t, false, 0), Duration::from_millis(2));
    }
}
