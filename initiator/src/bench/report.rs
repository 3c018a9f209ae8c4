//! What a benchmark run measured: throughput, IOPS, latency percentiles from an HDR histogram,
//! CPU use, verify results. Serializable as the `--json` output.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::placement::{Connection, GpuPlan};
use crate::topology::PciAddr;

/// Latencies are recorded in nanoseconds, up to an hour, to 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}

/// Latency summary in microseconds.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Latency {
    pub min: f64,
    pub avg: f64,
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl Latency {
    pub fn from_histogram(h: &Histogram<u64>) -> Latency {
        if h.is_empty() {
            return Latency::default();
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        Latency {
            min: us(h.min()),
            avg: h.mean() / 1000.0,
            p50: us(h.value_at_quantile(0.50)),
            p99: us(h.value_at_quantile(0.99)),
            p999: us(h.value_at_quantile(0.999)),
            max: us(h.max()),
        }
    }
}

/// One direction (reads or writes) of a run.
#[derive(Debug, Clone, Serialize)]
pub struct Direction {
    pub ios: u64,
    pub bytes: u64,
    pub iops: f64,
    pub bytes_per_sec: f64,
    pub lat_us: Latency,
}

/// CPU time of this process over the measured phase.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct CpuUse {
    pub user_s: f64,
    pub sys_s: f64,
    /// (user + sys) / wall time, in percent of one core.
    pub percent: f64,
    /// CPU time per completed command, in µs (user + sys, then each): what a host core pays
    /// per I/O, comparable across runs of any depth or thread count.
    pub us_per_io: f64,
    pub user_us_per_io: f64,
    pub sys_us_per_io: f64,
}

impl CpuUse {
    /// The same figures, with the per-command ones for `ios` commands (none: zero).
    pub fn per_io(self, ios: u64) -> CpuUse {
        let per = |s: f64| if ios == 0 { 0.0 } else { s * 1e6 / ios as f64 };
        CpuUse {
            us_per_io: per(self.user_s + self.sys_s),
            user_us_per_io: per(self.user_s),
            sys_us_per_io: per(self.sys_s),
            ..self
        }
    }
}

/// Verify-mode results: blocks checked and the ones that were wrong.
#[derive(Debug, Clone, Default, Serialize)]
pub struct VerifyReport {
    pub seed: u64,
    pub blocks_checked: u64,
    pub errors: u64,
    /// The first few bad blocks, each as "drive D (NQN nsid N) LBA L: what".
    pub first_errors: Vec<String>,
}

/// Raw TCP over loopback, measured in the same run (`--reference`): the physical limit.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Reference {
    pub tcp_bytes_per_sec: f64,
    /// Round trip of a 72-byte request answered by 4 KiB + 48 bytes (the shape of a 4 KiB read).
    pub tcp_rtt_us: f64,
    pub tcp_rtt_p50_us: f64,
}

/// Where a run's data went when it was GPU memory.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryReport {
    pub gpu: crate::gpu::GpuIdentity,
    /// "p2p", "staged", or "mixed" (queues took different paths).
    pub path: String,
    /// Each distinct path taken, with why ("staged: NIC rxe0 cannot register GPU memory: ...").
    pub paths: Vec<String>,
    /// The measured phase's staged copies and the I/Os that waited for them (staged path only).
    pub staging: Option<crate::gpu::pipeline::StagingStats>,
}

/// The drives and NIC ports a run used as `fabrik place` planned them for one GPU
/// (`fabrik bench --gpu N`).
#[derive(Debug, Clone, Serialize)]
pub struct PlacementReport {
    /// The GPU's index in PCI order, as `fabrik place` numbers them.
    pub gpu: usize,
    pub pci: PciAddr,
    /// The NIC ports the connections leave through ("mlx5_0/1"), in plan order.
    pub nic_ports: Vec<String>,
    /// One connection per drive, as `fabrik place --json` lists them.
    pub connections: Vec<Connection>,
}

impl PlacementReport {
    pub fn of(plan: &GpuPlan) -> PlacementReport {
        let mut nic_ports: Vec<String> = Vec::new();
        for c in &plan.connections {
            let port = format!("{}/{}", c.rdma, c.port);
            if !nic_ports.contains(&port) {
                nic_ports.push(port);
            }
        }
        PlacementReport {
            gpu: plan.gpu,
            pci: plan.pci,
            nic_ports,
            connections: plan.connections.clone(),
        }
    }

    /// "placement: GPU0 0000:18:00.0, NIC ports mlx5_0/1, 2 drives" and a line per drive.
    pub fn to_text(&self) -> String {
        let mut out = format!(
            "placement: GPU{} {}, NIC ports {}, {} drive(s)\n",
            self.gpu,
            self.pci,
            self.nic_ports.join(" "),
            self.connections.len()
        );
        for c in &self.connections {
            out.push_str(&format!("  drive {c}\n"));
        }
        out
    }
}

/// The result of one benchmark run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub rw: String,
    pub bs: u32,
    pub iodepth: u32,
    pub threads: usize,
    pub drives: usize,
    pub runtime_s: f64,
    pub ios: u64,
    pub bytes: u64,
    pub iops: f64,
    pub bytes_per_sec: f64,
    pub gib_per_sec: f64,
    pub lat_us: Latency,
    pub read: Option<Direction>,
    pub write: Option<Direction>,
    pub cpu: CpuUse,
    pub verify: Option<VerifyReport>,
    pub reference: Option<Reference>,
    /// GPU memory: which GPU, and how data moved to and from it.
    pub memory: Option<MemoryReport>,
    /// The drives placed for a GPU, when the run used a placement plan.
    pub placement: Option<PlacementReport>,
    /// What happened to the sessions meanwhile (paths lost and back, namespaces changed).
    pub events: Vec<String>,
}

/// Process CPU time so far (user, system).
pub fn cpu_times() -> (Duration, Duration) {
    // SAFETY: getrusage writes into the struct we pass; zeroed is a valid rusage.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return (Duration::ZERO, Duration::ZERO);
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    (tv(usage.ru_utime), tv(usage.ru_stime))
}

pub fn cpu_use(start: (Duration, Duration), end: (Duration, Duration), wall: Duration) -> CpuUse {
    let user = end.0.saturating_sub(start.0).as_secs_f64();
    let sys = end.1.saturating_sub(start.1).as_secs_f64();
    CpuUse {
        user_s: user,
        sys_s: sys,
        percent: if wall.is_zero() {
            0.0
        } else {
            (user + sys) / wall.as_secs_f64() * 100.0
        },
        ..CpuUse::default()
    }
}

pub fn direction(h: &Histogram<u64>, bytes: u64, wall: Duration) -> Direction {
    let secs = wall.as_secs_f64().max(1e-9);
    Direction {
        ios: h.len(),
        bytes,
        iops: h.len() as f64 / secs,
        bytes_per_sec: bytes as f64 / secs,
        lat_us: Latency::from_histogram(h),
    }
}

/// Human units: 1.23 GiB/s, 4 KiB.
pub fn human_bytes(bytes: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{value:.0} B")
    } else {
        format!("{value:.2} {}", UNITS[unit])
    }
}

impl Report {
    /// The human summary, fio-like.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let line = |out: &mut String, s: String| {
            out.push_str(&s);
            out.push('\n');
        };
        line(
            &mut out,
            format!(
                "{}: bs={} iodepth={} threads={} drives={} runtime={:.2}s",
                self.rw,
                human_bytes(self.bs as f64),
                self.iodepth,
                self.threads,
                self.drives,
                self.runtime_s
            ),
        );
        line(
            &mut out,
            format!(
                "  total: {} ios, {} moved, {:.0} IOPS, {}/s ({:.3} GB/s)",
                self.ios,
                human_bytes(self.bytes as f64),
                self.iops,
                human_bytes(self.bytes_per_sec),
                self.bytes_per_sec / 1e9
            ),
        );
        for (name, dir) in [("read", &self.read), ("write", &self.write)] {
            if let Some(d) = dir {
                line(
                    &mut out,
                    format!(
                        "  {name:<5}: {:.0} IOPS, {}/s, lat (us) avg {:.1} p50 {:.1} p99 {:.1} p99.9 {:.1} max {:.1}",
                        d.iops,
                        human_bytes(d.bytes_per_sec),
                        d.lat_us.avg,
                        d.lat_us.p50,
                        d.lat_us.p99,
                        d.lat_us.p999,
                        d.lat_us.max
                    ),
                );
            }
        }
        line(
            &mut out,
            format!(
                "  cpu  : {:.2} us per I/O (user {:.2}, sys {:.2}); {:.1}% of a core (user {:.2}s, sys {:.2}s)",
                self.cpu.us_per_io,
                self.cpu.user_us_per_io,
                self.cpu.sys_us_per_io,
                self.cpu.percent,
                self.cpu.user_s,
                self.cpu.sys_s
            ),
        );
        if let Some(p) = &self.placement {
            for l in p.to_text().lines() {
                line(&mut out, format!("  {l}"));
            }
        }
        if let Some(m) = &self.memory {
            line(&mut out, format!("  memory: {}, path {}", m.gpu, m.path));
            for p in &m.paths {
                line(&mut out, format!("    {p}"));
            }
            if let Some(s) = &m.staging {
                line(
                    &mut out,
                    format!(
                        "    staging: {} copies; {} I/Os waited for a slot, {} waits took a blocking thread",
                        s.copies, s.waits, s.blocked
                    ),
                );
            }
        }
        if let Some(v) = &self.verify {
            line(
                &mut out,
                format!(
                    "  verify: seed {:#x}, {} blocks checked, {} errors",
                    v.seed, v.blocks_checked, v.errors
                ),
            );
            for e in &v.first_errors {
                line(&mut out, format!("    {e}"));
            }
        }
        for e in &self.events {
            line(&mut out, format!("  event: {e}"));
        }
        if let Some(r) = &self.reference {
            line(
                &mut out,
                format!(
                    "  reference: raw loopback TCP {:.2} GB/s, round trip avg {:.1} us p50 {:.1} us; this run {:.0}% of raw throughput, latency avg {:+.1} us p50 {:+.1} us over the round trip",
                    r.tcp_bytes_per_sec / 1e9,
                    r.tcp_rtt_us,
                    r.tcp_rtt_p50_us,
                    self.bytes_per_sec / r.tcp_bytes_per_sec * 100.0,
                    self.lat_us.avg - r.tcp_rtt_us,
                    self.lat_us.p50 - r.tcp_rtt_p50_us
                ),
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_summary_is_in_microseconds() {
        let mut h = new_histogram();
        for us in 1..=1000u64 {
            h.record(us * 1000).unwrap();
        }
        let lat = Latency::from_histogram(&h);
        assert!((lat.avg - 500.5).abs() < 1.0, "{lat:?}");
        assert!((lat.p50 - 500.0).abs() < 1.0, "{lat:?}");
        assert!((lat.p99 - 990.0).abs() < 1.0, "{lat:?}");
        assert!((lat.max - 1000.0).abs() < 1.0, "{lat:?}");
        assert_eq!(
            Latency::from_histogram(&new_histogram()),
            Latency::default()
        );
    }

    #[test]
    fn human_units() {
        assert_eq!(human_bytes(4096.0), "4.00 KiB");
        assert_eq!(human_bytes(512.0), "512 B");
        assert_eq!(human_bytes(3.0 * 1024.0 * 1024.0 * 1024.0), "3.00 GiB");
    }
}
