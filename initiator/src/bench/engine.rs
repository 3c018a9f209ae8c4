//! Running a benchmark: phases (prefill, the measured run, read-back verify), each with
//! `threads` x `iodepth` I/O loops; worker `w` sends on I/O queue `w` of the controllers of
//! its drives (`Spec::worker_drives`). Over NVMe/TCP a worker's loops are lanes of one task that
//! takes their answers from a completion queue (`batched`); otherwise (NVMe/RDMA, GPU memory
//! checked or both ways at once) each loop is a task awaiting its commands.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use hdrhistogram::Histogram;

use super::io_threads;
use super::layout::{workers_of, Layout, View};
use super::pattern::{self, drive_tag};
use super::report::{self, new_histogram, MemoryReport, Report, VerifyReport};
use super::{BenchError, Drive, Memory, PhaseState, Progress, Rw, Spec};
use crate::gpu::mover::{GpuMover, Staging};
use crate::gpu::pipeline::{self, ReadPipeline, WritePipeline};
use crate::gpu::{DevicePtr, GpuBuffer, GpuDriver, GpuError};
use gpu_loop::LoopGpu;

mod batched;
mod gpu_loop;

/// Bad blocks listed by name in the report; the rest are counted.
const LISTED_ERRORS: usize = 10;

/// Runs `spec` over `drives` (striped in the order given) and reports the measured phase.
pub async fn run(
    drives: Vec<Drive>,
    spec: Spec,
    progress: Arc<Progress>,
) -> Result<Report, BenchError> {
    let layout = check(&drives, &spec)?;
    let verify = spec.verify.map(|v| VerifyState {
        seed: v.seed,
        tags: drives
            .iter()
            .map(|d| drive_tag(d.session.subnqn(), d.nsid))
            .collect(),
        written: (0..drives.len())
            .map(|_| Bitmap::new(layout.units_per_drive))
            .collect(),
        // Reads without a prefill trust that an earlier run wrote the region with this seed.
        trust_all: !v.prefill && !spec.rw.writes(),
        checked: AtomicU64::new(0),
        report: Mutex::new(VerifyReport {
            seed: v.seed,
            ..VerifyReport::default()
        }),
    });
    let gpu = match &spec.memory {
        Memory::Host => None,
        Memory::Gpu(gpu) => {
            // One allocation (one registration per queue on the peer-to-peer path): first each
            // worker's region for staged reads (see `gpu::pipeline`), then each I/O loop's own
            // `bs` bytes for its writes and peer-to-peer reads.
            let bs = spec.bs as usize;
            let shape = pipeline::Shape::new(bs, spec.iodepth as usize, spec.gpu_copy_bytes);
            let worker_region = shape.region_len();
            let write_base = spec.threads * worker_region;
            let loops_base = 2 * spec.threads * worker_region;
            let len = loops_base + spec.threads * spec.iodepth as usize * bs;
            let buffer = gpu.alloc(len).map_err(|e| {
                BenchError::Invalid(format!(
                    "allocating {} of memory on {}: {e}",
                    report::human_bytes(len as f64),
                    gpu.identity()
                ))
            })?;
            Some(GpuState {
                buffer,
                shape,
                worker_region,
                write_base,
                loops_base,
                paths: Mutex::default(),
                staging: Mutex::default(),
            })
        }
    };
    let ctx = Arc::new(Context {
        gpu,
        drives,
        layout,
        spec,
        verify,
        progress,
    });

    if let Some(v) = ctx.spec.verify {
        if v.prefill && !ctx.spec.rw.writes() {
            phase(&ctx, Phase::Prefill).await?;
        }
    }
    let measured = phase(&ctx, Phase::Measured).await?;
    if ctx.verify.is_some() && ctx.spec.rw.writes() {
        phase(&ctx, Phase::ReadBack).await?;
    }

    let spec = &ctx.spec;
    let wall = measured.wall;
    let mut all = measured.reads.clone();
    all.add(&measured.writes).expect("same histogram bounds");
    let bytes = measured.read_bytes + measured.write_bytes;
    let secs = wall.as_secs_f64().max(1e-9);
    Ok(Report {
        rw: spec.rw.name().into(),
        bs: spec.bs,
        iodepth: spec.iodepth,
        threads: spec.threads,
        drives: ctx.drives.len(),
        runtime_s: wall.as_secs_f64(),
        ios: all.len(),
        bytes,
        iops: all.len() as f64 / secs,
        bytes_per_sec: bytes as f64 / secs,
        gib_per_sec: bytes as f64 / secs / (1u64 << 30) as f64,
        lat_us: report::Latency::from_histogram(&all),
        read: spec
            .rw
            .reads()
            .then(|| report::direction(&measured.reads, measured.read_bytes, wall)),
        write: spec
            .rw
            .writes()
            .then(|| report::direction(&measured.writes, measured.write_bytes, wall)),
        cpu: measured.cpu.per_io(all.len()),
        verify: ctx.verify.as_ref().map(|v| {
            let mut r = v.report.lock().unwrap().clone();
            r.blocks_checked = v.checked.load(Ordering::Relaxed);
            r
        }),
        reference: None,
        memory: ctx.gpu.as_ref().map(GpuState::report),
        placement: None,
        events: Vec::new(),
    })
}

/// Checks the spec against the drives; returns the layout of the striped region.
fn check(drives: &[Drive], spec: &Spec) -> Result<Layout, BenchError> {
    let invalid = |m: String| Err(BenchError::Invalid(m));
    if drives.is_empty() {
        return invalid("no drives to run on".into());
    }
    if spec.bs == 0 || spec.iodepth == 0 || spec.threads == 0 {
        return invalid("--bs, --iodepth and --threads must be positive".into());
    }
    if spec.read_percent > 100 {
        return invalid("--rwmixread is a percentage (0 to 100)".into());
    }
    for (i, d) in drives.iter().enumerate() {
        if !spec.bs.is_multiple_of(d.lba_size) {
            return invalid(format!(
                "--bs {} is not a multiple of the {}-byte blocks of {}",
                spec.bs,
                d.lba_size,
                d.describe()
            ));
        }
        let queues = d.session.controller().map_or(0, |c| c.io_queue_count());
        let workers = workers_of(i, drives.len(), spec.threads, spec.worker_drives);
        if let Some(w) = workers.iter().find(|&&w| d.queue(w) >= queues) {
            return invalid(format!(
                "{} has {queues} I/O queues, none for worker {w} of the {} threads",
                d.describe(),
                spec.threads
            ));
        }
    }
    let bs = spec.bs as u64;
    let smallest = drives
        .iter()
        .map(|d| d.blocks * d.lba_size as u64)
        .min()
        .unwrap_or(0);
    if !spec.offset.is_multiple_of(bs) {
        return invalid(format!(
            "the region offset {} is not a multiple of --bs",
            spec.offset
        ));
    }
    let smallest = smallest.saturating_sub(spec.offset);
    let per_drive = match spec.size {
        Some(size) => {
            let per_drive = size / drives.len() as u64;
            if per_drive > smallest {
                return invalid(format!(
                    "--size {size} over {} drives needs {per_drive} bytes of each; the smallest has {smallest}",
                    drives.len()
                ));
            }
            per_drive
        }
        None => smallest,
    };
    let units_per_drive = per_drive / bs;
    if units_per_drive == 0 {
        return invalid(format!(
            "the region ({per_drive} bytes per drive) is smaller than one {bs}-byte I/O"
        ));
    }
    Ok(Layout {
        drives: drives.len(),
        units_per_drive,
        bs,
    })
}

struct Context {
    drives: Vec<Drive>,
    gpu: Option<GpuState>,
    layout: Layout,
    spec: Spec,
    verify: Option<VerifyState>,
    progress: Arc<Progress>,
}

/// The GPU memory of a run and the paths its queues took.
struct GpuState {
    buffer: Arc<GpuBuffer>,
    /// Staged transfers: the pipelines' shape, and each worker's region.
    shape: pipeline::Shape,
    worker_region: usize,
    /// Where the workers' regions for staged writes start (each `worker_region` bytes), and the
    /// I/O loops' own regions.
    write_base: usize,
    loops_base: usize,
    /// (path name, description) of every queue.
    paths: Mutex<std::collections::BTreeSet<(String, String)>>,
    /// The staging of the measured phase, when it took the staged path.
    staging: Mutex<Option<pipeline::StagingStats>>,
}

impl GpuState {
    /// Where `worker`'s pipeline region starts among those from `base`.
    fn region(&self, base: usize, worker: usize) -> usize {
        base + worker * self.worker_region
    }

    /// A staged pipeline per worker, each over its own region of the allocation from `base`.
    fn pipelines<P>(
        &self,
        workers: usize,
        base: usize,
        new: impl Fn(Arc<dyn GpuDriver>, DevicePtr, pipeline::Shape) -> Result<Arc<P>, GpuError>,
    ) -> Result<Vec<Arc<P>>, BenchError> {
        (0..workers)
            .map(|worker| {
                let device = self.buffer.ptr() + self.region(base, worker) as u64;
                new(self.buffer.driver().clone(), device, self.shape).map_err(|e| BenchError::Io {
                    path: self.buffer.identity().to_string(),
                    error: e.into(),
                })
            })
            .collect()
    }

    fn report(&self) -> MemoryReport {
        let paths = self.paths.lock().unwrap();
        let names: std::collections::BTreeSet<&str> =
            paths.iter().map(|(n, _)| n.as_str()).collect();
        MemoryReport {
            gpu: self.buffer.identity().clone(),
            path: match names.len() {
                1 => names.first().expect("one").to_string(),
                _ => "mixed".into(),
            },
            paths: paths.iter().map(|(_, d)| d.clone()).collect(),
            staging: *self.staging.lock().unwrap(),
        }
    }
}

struct VerifyState {
    seed: u64,
    tags: Vec<u32>,
    /// Units written with the pattern, per drive: reads check those.
    written: Vec<Bitmap>,
    trust_all: bool,
    checked: AtomicU64,
    report: Mutex<VerifyReport>,
}

struct Bitmap(Vec<AtomicU64>);

impl Bitmap {
    fn new(bits: u64) -> Bitmap {
        Bitmap((0..bits.div_ceil(64)).map(|_| AtomicU64::new(0)).collect())
    }
    fn set(&self, bit: u64) {
        self.0[(bit / 64) as usize].fetch_or(1 << (bit % 64), Ordering::Relaxed);
    }
    fn get(&self, bit: u64) -> bool {
        self.0[(bit / 64) as usize].load(Ordering::Relaxed) & (1 << (bit % 64)) != 0
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Sequential writes of the whole region with the verify pattern (not measured).
    Prefill,
    /// The workload asked for.
    Measured,
    /// Sequential reads of the whole region, checking every unit written (not measured).
    ReadBack,
}

/// What one phase measured.
struct Measured {
    reads: Histogram<u64>,
    writes: Histogram<u64>,
    read_bytes: u64,
    write_bytes: u64,
    wall: Duration,
    cpu: report::CpuUse,
}

/// What one I/O loop moved (its latencies go to its worker's `Latencies`).
#[derive(Default)]
struct LoopResult {
    read_bytes: u64,
    write_bytes: u64,
}

/// What a worker's I/O loops share, written by each command: on cache lines of its own
/// (aligned as `Session`'s replicas are), because separate small allocations made one after
/// another sat on shared lines, and each worker's commands took lines from the others'
/// cores.
#[repr(align(128))]
struct WorkerShared {
    /// Commands left to issue (size-bound runs).
    remaining: AtomicI64,
    /// Next unit of a sequential pass.
    cursor: AtomicU64,
    latencies: Mutex<Latencies>,
}

/// The latencies of one worker's I/O loops, recorded in one pair of histograms: a pair per
/// loop (256 KiB each at this precision) spread every command's record over cold memory at a
/// deep queue, 7 % of a core in `fabrik bench` at QD128 against 4 drives (perf record), where
/// the loops of one worker share a thread (the lock is never contended).
struct Latencies {
    reads: Histogram<u64>,
    writes: Histogram<u64>,
}

/// Bytes an I/O loop moves before it adds them to the shared progress counter: one counter
/// written by every core per command was a cache line passed between them.
const PROGRESS_STEP: u64 = 256 * 1024;

async fn phase(ctx: &Arc<Context>, phase: Phase) -> Result<Measured, BenchError> {
    let spec = &ctx.spec;
    let (rw, time) = match phase {
        Phase::Prefill => (Rw::Write, None),
        Phase::Measured => (spec.rw, spec.time),
        Phase::ReadBack => (Rw::Read, None),
    };
    let units = ctx.layout.units();
    ctx.progress.start_phase(PhaseState {
        name: match phase {
            Phase::Prefill => "prefill",
            Phase::Measured => "run",
            Phase::ReadBack => "verify",
        },
        started: Instant::now(),
        total_bytes: time.is_none().then_some(units * ctx.layout.bs),
        duration: time,
    });
    // GPU memory, staged: one pipeline per worker and direction. Set up (staging memory
    // allocated and pinned) before the clock starts, as host buffers are allocated before.
    let (mut read_pipelines, mut write_pipelines) = (Vec::new(), Vec::new());
    if let Some(g) = &ctx.gpu {
        if rw.reads() {
            read_pipelines = g.pipelines(spec.threads, 0, ReadPipeline::new)?;
        }
        if rw.writes() {
            write_pipelines = g.pipelines(spec.threads, g.write_base, WritePipeline::new)?;
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let first_error: Arc<Mutex<Option<BenchError>>> = Arc::new(Mutex::new(None));
    let cpu_start = report::cpu_times();
    let started = Instant::now();
    let deadline = time.map(|t| command_clock().now() + t);
    let batched = batched::applies(ctx, rw);
    let mut loops = Vec::new();
    let mut workers = Vec::new();
    for worker in 0..spec.threads {
        // Sequential: each worker walks its own slice of its drives. Random: anywhere on its
        // drives, its share of one region's worth of I/Os.
        let view = ctx.layout.view(worker, spec.threads, spec.worker_drives);
        // The worker's I/O loops go where its queue to its first drive runs
        // (`ConnectOptions::io_runtimes`; a run puts all of a worker's queues on one runtime),
        // so a command never changes threads.
        let runtime = worker_runtime(&ctx.drives[view.locate(0).0], worker);
        let slice = if rw.is_random() {
            0..view.units()
        } else {
            view.slice()
        };
        let share = match time {
            Some(_) => i64::MAX,
            None => view.slice().count() as i64,
        };
        let shared = Arc::new(WorkerShared {
            remaining: AtomicI64::new(share),
            cursor: AtomicU64::new(0),
            latencies: Mutex::new(Latencies {
                reads: new_histogram(),
                writes: new_histogram(),
            }),
        });
        workers.push(shared.clone());
        let loops_of_worker = (0..spec.iodepth).map(|slot| IoLoop {
            ctx: ctx.clone(),
            rw,
            phase,
            worker,
            view,
            slot,
            reads: read_pipelines.get(worker).cloned(),
            writes: write_pipelines.get(worker).cloned(),
            slice: slice.clone(),
            shared: shared.clone(),
            deadline,
            stop: stop.clone(),
            rng: seed_rng(worker, slot),
        });
        let (stop, first_error) = (stop.clone(), first_error.clone());
        // The first error stops every loop, and is the one reported.
        let supervised = move |result: Result<LoopResult, BenchError>| {
            if let Err(e) = &result {
                stop.store(true, Ordering::Relaxed);
                first_error.lock().unwrap().get_or_insert_with(|| e.clone());
            }
            result
        };
        if batched {
            let io = batched::run(loops_of_worker.collect());
            let supervised = supervised.clone();
            loops.push(io_threads::spawn_on(&runtime, 0, async move {
                supervised(io.await)
            }));
            continue;
        }
        for io in loops_of_worker {
            let supervised = supervised.clone();
            loops.push(io_threads::spawn_on(&runtime, 0, async move {
                supervised(io.run().await)
            }));
        }
    }
    let mut measured = Measured {
        reads: new_histogram(),
        writes: new_histogram(),
        read_bytes: 0,
        write_bytes: 0,
        wall: Duration::ZERO,
        cpu: report::CpuUse::default(),
    };
    for handle in loops {
        match handle.await {
            Ok(Ok(r)) => {
                measured.read_bytes += r.read_bytes;
                measured.write_bytes += r.write_bytes;
            }
            Ok(Err(_)) => {}
            Err(join) => {
                return Err(BenchError::Invalid(format!(
                    "an I/O loop failed (a bug): {join}"
                )))
            }
        }
    }
    for worker in workers {
        let worker = worker.latencies.lock().unwrap();
        measured.reads.add(&worker.reads).expect("same bounds");
        measured.writes.add(&worker.writes).expect("same bounds");
    }
    for p in &read_pipelines {
        // The phase ends when its data is in the GPU.
        if let Err(e) = p.finish().await {
            let mut first = first_error.lock().unwrap();
            first.get_or_insert(BenchError::Io {
                path: "GPU".into(),
                error: e.into(),
            });
        }
    }
    measured.wall = started.elapsed();
    measured.cpu = report::cpu_use(cpu_start, report::cpu_times(), measured.wall);
    if let (Some(g), Phase::Measured) = (&ctx.gpu, phase) {
        let mut staging = pipeline::StagingStats::default();
        read_pipelines.iter().for_each(|p| staging += p.stats());
        write_pipelines.iter().for_each(|p| staging += p.stats());
        if staging.copies > 0 || staging.waits > 0 {
            *g.staging.lock().unwrap() = Some(staging);
        }
    }
    if let Some(err) = first_error.lock().unwrap().take() {
        return Err(err);
    }
    Ok(measured)
}

/// Where worker `worker`'s queue to `drive` runs, as its controller placed it (none: the
/// caller's runtime).
fn worker_runtime(drive: &Drive, worker: usize) -> Vec<tokio::runtime::Handle> {
    let queue = drive.queue(worker);
    drive
        .session
        .controller()
        .and_then(|c| {
            let runtimes = &c.options().io_runtimes;
            runtimes.get(queue % runtimes.len().max(1)).cloned()
        })
        .into_iter()
        .collect()
}

/// A loop's next command: drive `d`'s unit `drive_unit`, blocks `slba`.., read or written;
/// `t0` when it starts.
#[derive(Clone, Copy)]
struct Next {
    t0: quanta::Instant,
    d: usize,
    drive_unit: u64,
    slba: u64,
    nlb: u32,
    is_read: bool,
}

/// One of a worker's `iodepth` loops: one command in flight at a time.
struct IoLoop {
    ctx: Arc<Context>,
    rw: Rw,
    phase: Phase,
    worker: usize,
    /// The part of the striped space on the worker's drives.
    view: View,
    slot: u32,
    /// The worker's staged-read and staged-write pipelines (GPU memory).
    reads: Option<Arc<ReadPipeline>>,
    writes: Option<Arc<WritePipeline>>,
    slice: std::ops::Range<u64>,
    /// What the worker's loops share.
    shared: Arc<WorkerShared>,
    deadline: Option<quanta::Instant>,
    stop: Arc<AtomicBool>,
    rng: u64,
}

/// The clock that times each command: the TSC where it is invariant (quanta checks; it falls
/// back to the system clock). Two reads per command: `clock_gettime` took 3.4 % of a host core
/// at QD128 on the H200 machine, quanta's 2.2 % (perf record).
fn command_clock() -> &'static quanta::Clock {
    static CLOCK: std::sync::OnceLock<quanta::Clock> = std::sync::OnceLock::new();
    CLOCK.get_or_init(quanta::Clock::new)
}

impl IoLoop {
    async fn run(mut self) -> Result<LoopResult, BenchError> {
        let ctx = self.ctx.clone();
        let spec = &ctx.spec;
        let bs = spec.bs as u64;
        let mut result = LoopResult {
            read_bytes: 0,
            write_bytes: 0,
        };
        let mut progress = 0;
        // One buffer per loop, reused by every read: data lands in memory already mapped.
        let mut read_buf = BytesMut::with_capacity(spec.bs as usize);
        // And one that every write of host memory sends (without --verify its content does not
        // matter). Per loop, as fio has one per iodepth: a single buffer shared by all loops
        // stays in the CPU's cache however deep the queue, which flatters host memory.
        let write_buf = match ctx.gpu.is_none() && self.rw.writes() {
            true => Bytes::from(vec![0xa5u8; spec.bs as usize]),
            false => Bytes::new(),
        };
        let mut gpu = ctx.gpu.as_ref().map(|g| LoopGpu {
            mover: GpuMover::new(
                g.buffer.clone(),
                Staging {
                    buffers: 2,
                    chunk: (bs as usize).min(4 << 20),
                },
            ),
            peer: vec![None; ctx.drives.len()],
            own: g.loops_base
                + (self.worker * spec.iodepth as usize + self.slot as usize) * bs as usize,
            reads_at: g.region(0, self.worker),
            writes_at: g.region(g.write_base, self.worker),
        });
        while let Some(next) = self.next() {
            let Next {
                t0,
                d,
                drive_unit,
                slba,
                nlb,
                is_read,
            } = next;
            let clock = command_clock();
            let drive = &ctx.drives[d];
            if is_read {
                let check = self.read_check(d, drive_unit);
                let took = match gpu.as_mut() {
                    Some(g) => self.read_gpu(g, d, slba, nlb, check).await?,
                    None => {
                        let data = drive
                            .session
                            .read_into(drive.queue(self.worker), drive.nsid, slba, nlb, read_buf)
                            .await
                            .map_err(|e| io_error(drive, e))?;
                        let took = clock.now() - t0;
                        if let Some(v) = check {
                            v.check(drive, d, slba, &data);
                        }
                        read_buf = data;
                        took
                    }
                };
                record(&mut self.shared.latencies.lock().unwrap().reads, took);
                result.read_bytes += bs;
            } else {
                let pattern = self.write_pattern(d, slba);
                let took = match gpu.as_mut() {
                    Some(g) => self.write_gpu(g, d, slba, nlb, pattern).await?,
                    None => {
                        // Filling a --verify pattern is not the command's time.
                        let t0 = if pattern.is_some() { clock.now() } else { t0 };
                        let data = pattern.unwrap_or_else(|| write_buf.clone());
                        drive
                            .session
                            .write(drive.queue(self.worker), drive.nsid, slba, data, false)
                            .await
                            .map_err(|e| io_error(drive, e))?;
                        clock.now() - t0
                    }
                };
                record(&mut self.shared.latencies.lock().unwrap().writes, took);
                result.write_bytes += bs;
                if let Some(v) = &ctx.verify {
                    v.written[d].set(drive_unit);
                }
            }
            progress += bs;
            if progress >= PROGRESS_STEP {
                ctx.progress.bytes.fetch_add(progress, Ordering::Relaxed);
                progress = 0;
            }
        }
        ctx.progress.bytes.fetch_add(progress, Ordering::Relaxed);
        if let (Some(lg), Some(g)) = (gpu.as_mut(), &ctx.gpu) {
            // The phase ends when the data is in the GPU, not when it reached the host.
            lg.mover.finish().await.map_err(|error| BenchError::Io {
                path: g.buffer.identity().to_string(),
                error,
            })?;
            let mut paths = g.paths.lock().unwrap();
            for (_, path) in lg.mover.paths() {
                paths.insert((path.name().to_string(), path.to_string()));
            }
        }
        Ok(result)
    }

    /// The loop's next command, or None when it is done (stopped, past the deadline, its
    /// share of the I/O done).
    fn next(&mut self) -> Option<Next> {
        if self.stop.load(Ordering::Relaxed) {
            return None;
        }
        // Also when a host-memory command starts: one clock read fewer per command.
        let t0 = command_clock().now();
        if self.deadline.is_some_and(|d| t0 >= d) {
            return None;
        }
        // A time-bound run has no count to keep (one atomic operation fewer per command).
        if self.deadline.is_none() && self.shared.remaining.fetch_sub(1, Ordering::Relaxed) <= 0 {
            return None;
        }
        let span = self.slice.end - self.slice.start;
        let unit = if self.rw.is_random() {
            self.slice.start + self.next_random() % span
        } else {
            self.slice.start + self.shared.cursor.fetch_add(1, Ordering::Relaxed) % span
        };
        let is_read = match self.rw {
            Rw::Read | Rw::RandRead => true,
            Rw::Write | Rw::RandWrite => false,
            Rw::RandRw => {
                let percent = self.ctx.spec.read_percent as u64;
                self.next_random() % 100 < percent
            }
        };
        let (d, drive_unit) = self.view.locate(unit);
        let spec = &self.ctx.spec;
        let lba_size = self.ctx.drives[d].lba_size;
        Some(Next {
            t0,
            d,
            drive_unit,
            slba: (spec.offset + drive_unit * spec.bs as u64) / lba_size as u64,
            nlb: spec.bs / lba_size,
            is_read,
        })
    }

    /// What checks a read of unit `drive_unit` of drive `d` (--verify, once written).
    fn read_check(&self, d: usize, drive_unit: u64) -> Option<&VerifyState> {
        self.ctx.verify.as_ref().filter(|v| {
            self.phase != Phase::Prefill && (v.trust_all || v.written[d].get(drive_unit))
        })
    }

    /// The --verify pattern a write at `slba` of drive `d` sends (None: no --verify).
    fn write_pattern(&self, d: usize, slba: u64) -> Option<Bytes> {
        let v = self.ctx.verify.as_ref()?;
        let drive = &self.ctx.drives[d];
        let mut buf = BytesMut::zeroed(self.ctx.spec.bs as usize);
        pattern::fill(&mut buf, drive.lba_size as usize, slba, v.tags[d], v.seed);
        Some(buf.freeze())
    }

    /// xorshift64*.
    fn next_random(&mut self) -> u64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

impl VerifyState {
    fn check(&self, drive: &Drive, index: usize, slba: u64, data: &[u8]) {
        let lba_size = drive.lba_size as usize;
        let blocks = (data.len() / lba_size) as u64;
        self.checked.fetch_add(blocks, Ordering::Relaxed);
        let bad = pattern::check(data, lba_size, slba, self.tags[index], self.seed);
        if bad.is_empty() {
            return;
        }
        let mut report = self.report.lock().unwrap();
        report.errors += bad.len() as u64;
        for (lba, mismatch) in bad {
            if report.first_errors.len() < LISTED_ERRORS {
                report.first_errors.push(format!(
                    "drive {index} ({}) LBA {lba}: {mismatch}",
                    drive.describe()
                ));
            }
        }
    }
}

fn record(histogram: &mut Histogram<u64>, took: Duration) {
    let ns = took.as_nanos().max(1) as u64;
    histogram.saturating_record(ns);
}

fn io_error(drive: &Drive, error: crate::HostError) -> BenchError {
    BenchError::Io {
        path: drive.describe(),
        error,
    }
}

/// A different random stream per loop and per run.
fn seed_rng(worker: usize, slot: u32) -> u64 {
    let clock = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64;
    (clock ^ ((worker as u64) << 32 | slot as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1
}
