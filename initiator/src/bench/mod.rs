//! `fabrik bench`'s engine: fio/gdsio-like workloads over one or many namespaces (striped),
//! `threads` workers each on its own I/O queue of every controller, `iodepth` commands in flight
//! per worker; latency in an HDR histogram; a verify mode in which every block carries its
//! address and a seed.
//!
//! The engine is async and runs on the caller's runtime; the CLI gives it a runtime with one
//! worker thread per bench thread.

pub mod checkpoint;
pub mod engine;
pub mod io_threads;
pub mod layout;
pub mod pattern;
pub mod reference;
pub mod report;
pub mod sweep;

use std::str::FromStr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::HostError;
use crate::gpu::Gpu;
use crate::host::session::Session;

pub use engine::run;
pub use layout::{workers_of, Layout, WorkerDrives};
pub use report::{Latency, Report};

/// The access pattern, named as fio names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rw {
    Read,
    Write,
    RandRead,
    RandWrite,
    RandRw,
}

impl Rw {
    pub fn name(self) -> &'static str {
        match self {
            Rw::Read => "read",
            Rw::Write => "write",
            Rw::RandRead => "randread",
            Rw::RandWrite => "randwrite",
            Rw::RandRw => "randrw",
        }
    }
    pub fn is_random(self) -> bool {
        matches!(self, Rw::RandRead | Rw::RandWrite | Rw::RandRw)
    }
    pub fn writes(self) -> bool {
        matches!(self, Rw::Write | Rw::RandWrite | Rw::RandRw)
    }
    pub fn reads(self) -> bool {
        matches!(self, Rw::Read | Rw::RandRead | Rw::RandRw)
    }
}

impl FromStr for Rw {
    type Err = String;
    fn from_str(s: &str) -> Result<Rw, String> {
        Ok(match s {
            "read" => Rw::Read,
            "write" => Rw::Write,
            "randread" => Rw::RandRead,
            "randwrite" => Rw::RandWrite,
            "randrw" => Rw::RandRw,
            other => {
                return Err(format!(
                    "unknown --rw {other:?}: read, write, randread, randwrite or randrw"
                ))
            }
        })
    }
}

/// Verify mode: what the blocks carry and whether to write them first.
#[derive(Debug, Clone, Copy)]
pub struct VerifySpec {
    /// Seed stored in (and deriving) every block; a later run with the same seed and
    /// `prefill: false` checks what an earlier one wrote.
    pub seed: u64,
    /// Write the whole region before a read workload (otherwise reads trust it was written
    /// with `seed`).
    pub prefill: bool,
}

/// Where reads land and writes take their data from.
#[derive(Clone, Default)]
pub enum Memory {
    #[default]
    Host,
    /// Device memory of this GPU: each I/O loop has its own `bs` bytes of one allocation.
    Gpu(Gpu),
}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Memory::Host => write!(f, "host"),
            Memory::Gpu(gpu) => write!(f, "{gpu:?}"),
        }
    }
}

impl Memory {
    /// `host`, `gpu` (GPU 0), `gpu:N`, or `emulated-gpu` (host memory through the GPU data
    /// paths, for machines without a GPU). Opens the GPU.
    pub fn parse(text: &str) -> Result<Memory, String> {
        let open = |index: usize| {
            Gpu::open(index)
                .map(Memory::Gpu)
                .map_err(|e| format!("--mem {text}: {e}"))
        };
        match text {
            "host" => Ok(Memory::Host),
            "gpu" => open(0),
            "emulated-gpu" => Ok(Memory::Gpu(Gpu::emulated())),
            _ => match text.strip_prefix("gpu:").map(str::parse::<usize>) {
                Some(Ok(index)) => open(index),
                _ => Err(format!(
                    "--mem {text:?}: host, gpu, gpu:N (CUDA device N) or emulated-gpu"
                )),
            },
        }
    }
}

/// Staged copies between host and GPU: large enough that the copy engine's cost per copy
/// hides, small enough that the staging memory stays in the CPU's caches (measured on an H200:
/// see the README's GPU figures).
pub const DEFAULT_GPU_COPY_BYTES: usize = 2 << 20;

/// What to run.
#[derive(Debug, Clone)]
pub struct Spec {
    pub rw: Rw,
    /// Share of reads in `randrw`, in percent.
    pub read_percent: u8,
    /// Bytes per I/O, a multiple of every drive's LBA size.
    pub bs: u32,
    /// Commands in flight per worker.
    pub iodepth: u32,
    /// Workers; each uses its own I/O queue of every controller it sends to.
    pub threads: usize,
    /// Which drives each worker sends to.
    pub worker_drives: WorkerDrives,
    /// Bytes of the striped region, from LBA 0 (default: every drive whole). Without `time`,
    /// the run moves this much and stops.
    pub size: Option<u64>,
    /// Run for this long, going round the region.
    pub time: Option<Duration>,
    /// Where the region starts on each drive, in bytes (a multiple of `bs`).
    pub offset: u64,
    pub verify: Option<VerifySpec>,
    pub memory: Memory,
    /// GPU memory, staged path: data crosses between host and GPU in copies of about this
    /// many bytes (see `gpu::pipeline`).
    pub gpu_copy_bytes: usize,
}

impl Default for Spec {
    fn default() -> Spec {
        Spec {
            rw: Rw::RandRead,
            read_percent: 50,
            bs: 4096,
            iodepth: 1,
            threads: 1,
            worker_drives: WorkerDrives::All,
            size: None,
            time: None,
            offset: 0,
            verify: None,
            memory: Memory::Host,
            gpu_copy_bytes: DEFAULT_GPU_COPY_BYTES,
        }
    }
}

/// One namespace of a subsystem, reached through a (multipath, self-healing) session.
#[derive(Clone)]
pub struct Drive {
    pub session: Arc<Session>,
    pub nsid: u32,
    pub lba_size: u32,
    /// Namespace size in blocks (NSZE).
    pub blocks: u64,
    /// The I/O queue (index) of the session each worker sends on, by worker, when the session
    /// was opened with queues for some workers only (`bench::layout::workers_of`); empty:
    /// worker w on queue w.
    pub queues: Arc<[u16]>,
}

impl Drive {
    /// Looks the namespace up (Identify Namespace).
    pub async fn open(session: Arc<Session>, nsid: u32) -> Result<Drive, HostError> {
        let (lba_size, blocks) = session
            .with_path(|ctrl| async move {
                Ok((
                    ctrl.lba_size(nsid).await?,
                    ctrl.identify_namespace(nsid).await?.nsze,
                ))
            })
            .await?;
        Ok(Drive {
            session,
            nsid,
            lba_size,
            blocks,
            queues: Arc::new([]),
        })
    }

    /// The I/O queue (index) worker `worker` sends on.
    pub fn queue(&self, worker: usize) -> usize {
        self.queues.get(worker).map_or(worker, |&q| q as usize)
    }

    /// "NQN nsid N via ADDR", for messages.
    pub fn describe(&self) -> String {
        let s = &self.session;
        let addrs: Vec<String> = (0..s.path_count())
            .filter_map(|i| s.path_options(i).map(|o| o.addr.to_string()))
            .collect();
        format!("{} nsid {} via {}", s.subnqn(), self.nsid, addrs.join(", "))
    }
}

/// Live counters of a run, for a progress bar.
pub struct Progress {
    state: Mutex<PhaseState>,
    /// Bytes moved in the current phase.
    pub bytes: AtomicU64,
}

#[derive(Clone)]
pub struct PhaseState {
    /// "prefill", "run" or "verify".
    pub name: &'static str,
    pub started: Instant,
    /// Bytes the phase will move, when it is size-bound.
    pub total_bytes: Option<u64>,
    /// How long the phase runs, when it is time-bound.
    pub duration: Option<Duration>,
}

impl Default for Progress {
    fn default() -> Progress {
        Progress {
            state: Mutex::new(PhaseState {
                name: "connect",
                started: Instant::now(),
                total_bytes: None,
                duration: None,
            }),
            bytes: AtomicU64::new(0),
        }
    }
}

impl Progress {
    pub fn phase(&self) -> PhaseState {
        self.state.lock().unwrap().clone()
    }
    pub(crate) fn start_phase(&self, phase: PhaseState) {
        *self.state.lock().unwrap() = phase;
        self.bytes.store(0, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Why a run failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum BenchError {
    #[error("invalid benchmark: {0}")]
    Invalid(String),
    /// A command failed; `path` names the drive and where it is reached.
    #[error("{path}: {error}")]
    Io { path: String, error: HostError },
}

/// Parses sizes like `4k`, `128K`, `1M`, `1g`, `512` (binary units).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a size (e.g. 4k, 128K, 1G)"))?;
    let shift = match unit
        .to_ascii_lowercase()
        .trim_end_matches("ib")
        .trim_end_matches('b')
    {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        _ => return Err(format!("{text:?}: unknown unit {unit:?} (k, m, g, t)")),
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("{text:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_binary_units() {
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("128K"), Ok(128 << 10));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        assert_eq!(parse_size("512"), Ok(512));
        assert!(parse_size("4x").is_err());
        assert!(parse_size("k").is_err());
    }

    #[test]
    fn rw_names_round_trip() {
        for rw in [Rw::Read, Rw::Write, Rw::RandRead, Rw::RandWrite, Rw::RandRw] {
            assert_eq!(rw.name().parse::<Rw>(), Ok(rw));
        }
        assert!("rand".parse::<Rw>().is_err());
    }
}
