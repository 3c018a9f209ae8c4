//! `fabrik bench`: fio/gdsio-like benchmarks over the userspace NVMe-oF host, addressed as
//! nvme-cli addresses subsystems. The engine is `fabrik_initiator::bench`.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use fabrik_initiator::bench::report::{PlacementReport, Reference};
use fabrik_initiator::bench::{
    self, io_threads::IoThreads, parse_size, reference, Drive, Memory, Progress, Report, Rw, Spec,
    VerifySpec, WorkerDrives,
};
use fabrik_initiator::host::session::{RecoveryPolicy, Session, SessionEvent};
use fabrik_initiator::placement::apply;
use fabrik_initiator::placement::GpuPlan;
use fabrik_initiator::proto::tcp::Digests;
use fabrik_initiator::{discover_all, ConnectOptions, Controller, HostIdentity};
use indicatif::{ProgressBar, ProgressStyle};

use super::args::{
    host_identity, parse_transport, resolve_host as resolve, DISCOVERY_PORT, IO_PORT,
};
use super::bench_place::{self, PlacedArgs};

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    workload: Option<Workload>,
    #[command(flatten)]
    job: JobArgs,
}

#[derive(Subcommand)]
enum Workload {
    /// LLM-checkpoint workload: N checkpoints written as shards across the drives in parallel.
    Checkpoint(super::bench_checkpoint::CheckpointArgs),
}

/// Where the drives are: nvme-cli's addressing options (`--gpu N` and the plan's inputs take
/// their place).
#[derive(Args, Clone)]
#[group(conflicts_with_all = ["gpu", "plan_inputs"])]
pub struct AddressArgs {
    /// Transport: tcp or rdma.
    #[arg(short = 't', long, default_value = "tcp")]
    pub transport: String,
    /// Target address (IP or host name).
    #[arg(short = 'a', long, required_unless_present = "gpu")]
    pub traddr: Option<String>,
    /// Port (default 4420; with --all, the discovery port 8009).
    #[arg(short = 's', long)]
    pub trsvcid: Option<u16>,
    /// Subsystem NQN (repeatable).
    #[arg(short = 'n', long = "nqn", required_unless_present_any = ["all", "gpu"])]
    pub nqns: Vec<String>,
    /// Every NVM subsystem the target's discovery log offers this host.
    #[arg(long, conflicts_with = "nqns")]
    pub all: bool,
    /// Local IP address to connect from.
    #[arg(short = 'w', long)]
    pub host_traddr: Option<IpAddr>,
    /// Local network interface to connect through (NVMe/TCP; kernels before 5.7 need CAP_NET_RAW).
    #[arg(short = 'f', long)]
    pub host_iface: Option<String>,
    /// Another path to the same subsystems, HOST:PORT (repeatable): one multipath session.
    #[arg(long = "path", value_name = "HOST:PORT")]
    pub paths: Vec<String>,
}

/// `--poll-us`'s default: see the README's section on the host's CPU.
pub const POLL_US_DEFAULT: u64 = 1000;

/// How the sessions are made, wherever the drives are (nvme-cli's names).
#[derive(Args, Clone)]
pub struct SessionArgs {
    /// Host NQN (default: a random UUID-based NQN).
    #[arg(short = 'q', long)]
    pub hostnqn: Option<String>,
    #[command(flatten)]
    pub auth: super::args::AuthArgs,
    /// Namespaces of each subsystem, comma-separated (default: every active one).
    #[arg(long, value_delimiter = ',')]
    pub nsid: Vec<u32>,
    /// Use only the first N namespaces found (striped in order).
    #[arg(long)]
    pub drives: Option<usize>,
    /// Header digest.
    #[arg(short = 'g', long)]
    pub hdr_digest: bool,
    /// Data digest.
    #[arg(short = 'G', long)]
    pub data_digest: bool,
    /// Host ID, a UUID [default: random].
    #[arg(short = 'I', long)]
    pub hostid: Option<String>,
    /// Entries per I/O queue [default: 128, or more for a deeper --iodepth].
    #[arg(short = 'Q', long)]
    pub queue_size: Option<u16>,
    /// Keep-alive timeout in seconds.
    #[arg(short = 'k', long, default_value_t = 5)]
    pub keep_alive_tmo: u32,
    /// NVMe/TCP: how long (µs) a queue with commands in flight polls for their answers before
    /// it sleeps until the socket wakes it (0: always sleep).
    #[arg(long, default_value_t = POLL_US_DEFAULT)]
    pub poll_us: u64,
    /// CPUs to pin the I/O threads to, comma-separated: worker N's thread (its queues and I/O
    /// loops) on the N-th, round the list [default: not pinned].
    #[arg(long, value_delimiter = ',')]
    pub cpus: Vec<usize>,
    /// Seconds between reconnect attempts of a lost path.
    #[arg(short = 'c', long, default_value_t = 2.0)]
    pub reconnect_delay: f64,
    /// Seconds a path may stay lost before its commands fail (-1: never).
    #[arg(
        short = 'l',
        long,
        default_value_t = 30.0,
        allow_negative_numbers = true
    )]
    pub ctrl_loss_tmo: f64,
}

impl SessionArgs {
    /// The host NQN and ID the sessions connect as.
    fn host(&self) -> Result<HostIdentity> {
        let mut host = host_identity(self.hostnqn.clone());
        if let Some(id) = &self.hostid {
            host.id = parse_uuid(id).with_context(|| format!("--hostid {id:?} is not a UUID"))?;
        }
        Ok(host)
    }
}

/// Which drives a job runs on.
#[derive(Clone)]
pub enum DriveSource {
    /// Addressed as nvme-cli addresses subsystems (-a with -n or --all).
    Addressed(AddressArgs),
    /// Placed for one GPU by `fabrik place` (--gpu N).
    Placed(GpuPlan),
}

impl DriveSource {
    /// The drives the job's options name: the plan's for --gpu N, else -a/-n/--all's.
    pub async fn from_args(
        address: Option<AddressArgs>,
        placed: &PlacedArgs,
        session: &SessionArgs,
    ) -> Result<DriveSource> {
        if let Some(plan) = placed.gpu_plan(session.hostnqn.as_deref()).await? {
            return Ok(DriveSource::Placed(plan));
        }
        address
            .map(DriveSource::Addressed)
            .context("-a/--traddr and -n/--nqn (or --all), or --gpu N, say which drives to use")
    }

    pub fn placed(&self) -> Option<&GpuPlan> {
        match self {
            DriveSource::Addressed(_) => None,
            DriveSource::Placed(plan) => Some(plan),
        }
    }

    /// Where the drives are, in a few words ("10.0.0.1", "GPU0's placed drives").
    pub fn describe(&self) -> String {
        match self {
            DriveSource::Addressed(a) => a.traddr.clone().unwrap_or_default(),
            DriveSource::Placed(plan) => format!("GPU{}'s placed drives", plan.gpu),
        }
    }
}

#[derive(Args, Clone)]
pub struct JobArgs {
    #[command(flatten)]
    pub address: Option<AddressArgs>,
    #[command(flatten)]
    pub session: SessionArgs,
    #[command(flatten)]
    pub placed: PlacedArgs,
    /// Access pattern: read, write, randread, randwrite, randrw.
    #[arg(long, default_value = "randread")]
    pub rw: Rw,
    /// Percentage of reads in randrw.
    #[arg(long, default_value_t = 50)]
    pub rwmixread: u8,
    /// Bytes per I/O (e.g. 4k, 128k, 1m).
    #[arg(long, default_value = "4k", value_parser = parse_size)]
    pub bs: u64,
    /// Commands in flight per thread.
    #[arg(long, default_value_t = 1)]
    pub iodepth: u32,
    /// Worker threads, each with its own I/O queue on every controller it sends to.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Which drives each worker sends to.
    #[arg(long, value_enum, default_value_t = WorkerDrives::All)]
    pub worker_drives: WorkerDrives,
    /// Region to use across the drives, from LBA 0 (e.g. 1g); without --time the run moves this
    /// much [default: the drives whole].
    #[arg(long, value_parser = parse_size)]
    pub size: Option<u64>,
    /// Run for this many seconds, round the region [default: 10 unless --size is given].
    #[arg(long)]
    pub time: Option<f64>,
    /// Where reads land and writes come from: host, gpu (GPU 0), gpu:N, or emulated-gpu (host
    /// memory through the GPU data paths). The report says which path the data took to the
    /// GPU (p2p or staged) and why. [default: host; with --gpu N, that GPU]
    #[arg(long)]
    pub mem: Option<String>,
    /// With GPU memory on the staged path: move data between host and GPU in copies of about
    /// this size (bigger hides the copy engine's cost per copy; smaller keeps the staging
    /// memory in the CPU caches).
    #[arg(long, value_parser = parse_size, default_value = "2m")]
    pub gpu_copy: u64,
    /// Every block carries its address and a seed; reads check them. Read workloads write the
    /// region first (see --no-prefill).
    #[arg(long)]
    pub verify: bool,
    /// Seed of the verify pattern [default: random].
    #[arg(long, requires = "verify")]
    pub verify_seed: Option<u64>,
    /// With --verify on a read workload: do not write first, check blocks an earlier run wrote
    /// with --verify-seed.
    #[arg(long, requires = "verify_seed")]
    pub no_prefill: bool,
    /// Also measure raw loopback TCP throughput and round trip in this run, for SECS seconds
    /// each, half before and half after the workload.
    #[arg(long, num_args = 0..=1, default_missing_value = "2")]
    pub reference: Option<f64>,
    /// Pin the serving end of the raw TCP reference to this CPU: the target's, when target and
    /// host are pinned to one core each, so the reference crosses cores as NVMe/TCP does.
    #[arg(long, requires = "reference")]
    pub reference_cpu: Option<usize>,
    /// Run the job once per block size x threads x iodepth of the --sweep-* lists (--time
    /// each, default 2 s); print a table and write heatmaps to --svg.
    #[arg(long)]
    pub sweep: bool,
    /// Block sizes of a sweep.
    #[arg(long, default_value = "4k,16k,64k,128k,1m")]
    pub sweep_bs: String,
    /// Thread counts of a sweep.
    #[arg(long, default_value = "1,2")]
    pub sweep_threads: String,
    /// Queue depths of a sweep.
    #[arg(long, default_value = "1,8,32")]
    pub sweep_iodepth: String,
    /// Where a sweep's heatmaps (SVG) go.
    #[arg(long, default_value = "fabrik-sweep.svg")]
    pub svg: std::path::PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

pub async fn run(args: BenchArgs) -> Result<()> {
    match args.workload {
        Some(Workload::Checkpoint(c)) => super::bench_checkpoint::run(c).await,
        None => run_job(args.job).await,
    }
}

async fn run_job(job: JobArgs) -> Result<()> {
    let source = DriveSource::from_args(job.address.clone(), &job.placed, &job.session).await?;
    let memory = bench_place::memory(job.mem.as_deref(), source.placed())?;
    if job.sweep {
        return super::bench_sweep::run(job, source, memory);
    }
    let threads = job.threads;
    let cpus = job.session.cpus.clone();
    let io_cpus = io_threads_for(&memory, &cpus);
    let spec = spec_from(&job, memory)?;
    let (report, verify_errors) = on_bench_runtime(threads, io_cpus, |io| async move {
        let drives = open_drives(
            &source,
            &job.session,
            threads,
            job.worker_drives,
            job.iodepth,
            io,
        )
        .await?;
        let events = report_session_events(&drives);
        // The reference is measured half before and half after the run, so that a machine
        // whose load changes meanwhile skews both sides alike.
        let before = measure_reference(job.reference.map(|s| s / 2.0), job.reference_cpu).await?;
        let mut report = run_spec(&drives, spec, job.quiet || job.json).await;
        close_drives(drives).await;
        let after = measure_reference(job.reference.map(|s| s / 2.0), job.reference_cpu).await?;
        if let (Ok(r), Some(before), Some(after)) = (&mut report, before, after) {
            r.reference = Some(Reference {
                tcp_bytes_per_sec: (before.tcp_bytes_per_sec + after.tcp_bytes_per_sec) / 2.0,
                tcp_rtt_us: (before.tcp_rtt_us + after.tcp_rtt_us) / 2.0,
                tcp_rtt_p50_us: (before.tcp_rtt_p50_us + after.tcp_rtt_p50_us) / 2.0,
            });
        }
        let mut report = report?;
        report.events = events.lock().unwrap().clone();
        report.placement = source.placed().map(PlacementReport::of);
        let errors = report.verify.as_ref().map_or(0, |v| v.errors);
        if job.json {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            print!("{}", report.to_text());
        }
        Ok((report, errors))
    })?;
    if verify_errors > 0 {
        bail!(
            "verify: {verify_errors} bad blocks (seed {:#x})",
            report.verify.map_or(0, |v| v.seed)
        );
    }
    Ok(())
}

async fn measure_reference(secs: Option<f64>, cpu: Option<usize>) -> Result<Option<Reference>> {
    let Some(secs) = secs else { return Ok(None) };
    let reference = tokio::task::spawn_blocking(move || reference::measure(secs, cpu))
        .await?
        .context("measuring raw loopback TCP")?;
    Ok(Some(reference))
}

/// Whether a run's I/O goes on I/O threads (pinned to `cpus` if any): with any memory (GPU
/// runs too: a worker's staged pipeline is driven from its I/O loops; its copies run on CUDA
/// streams, not on the runtime's threads).
pub fn io_threads_for<'a>(memory: &Memory, cpus: &'a [usize]) -> Option<&'a [usize]> {
    let _ = memory;
    Some(cpus)
}

/// Runs `work` on a control runtime of its own (one worker thread per bench thread) and, with
/// `io_cpus`, an I/O thread per bench thread for the queues and I/O loops, pinned to those
/// CPUs if any (`bench::io_threads`); `work` gets their runtimes (none without `io_cpus`).
pub fn on_bench_runtime<T: Send + 'static, F, W>(
    threads: usize,
    io_cpus: Option<&[usize]>,
    work: W,
) -> Result<T>
where
    W: FnOnce(Vec<tokio::runtime::Handle>) -> F,
    F: std::future::Future<Output = Result<T>> + Send + 'static,
{
    let io = match io_cpus {
        Some(cpus) => IoThreads::start(threads.max(1), cpus).context("starting the I/O threads")?,
        None => IoThreads::default(),
    };
    let work = work(io.handles());
    let result = std::thread::scope(|scope| {
        scope
            .spawn(move || {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(threads.max(1))
                    .enable_all()
                    .build()?
                    .block_on(work)
            })
            .join()
            .unwrap_or_else(|_| bail!("the benchmark thread panicked"))
    });
    drop(io);
    result
}

pub fn spec_from(job: &JobArgs, memory: Memory) -> Result<Spec> {
    let bs = u32::try_from(job.bs).context("--bs is over 4 GiB")?;
    if job.verify && !job.no_prefill && !job.rw.writes() && job.size.is_none() {
        bail!("--verify on a read workload writes its region first: say how much with --size");
    }
    let time = match (job.time, job.size) {
        (Some(t), _) if !(t > 0.0 && t.is_finite()) => bail!("--time must be positive seconds"),
        (Some(t), _) => Some(Duration::from_secs_f64(t)),
        (None, Some(_)) => None,
        (None, None) => Some(Duration::from_secs(10)),
    };
    Ok(Spec {
        rw: job.rw,
        read_percent: job.rwmixread,
        bs,
        iodepth: job.iodepth,
        threads: job.threads,
        worker_drives: job.worker_drives,
        size: job.size,
        time,
        offset: 0,
        verify: job.verify.then(|| VerifySpec {
            seed: job.verify_seed.unwrap_or_else(random_seed),
            prefill: !job.no_prefill,
        }),
        memory,
        gpu_copy_bytes: usize::try_from(job.gpu_copy)
            .ok()
            .filter(|&n| n > 0)
            .context("--gpu-copy must be a positive size")?,
    })
}

/// Runs one spec with a progress bar on stderr (unless `quiet`).
pub async fn run_spec(drives: &[Drive], spec: Spec, quiet: bool) -> Result<Report> {
    let progress = Arc::new(Progress::default());
    let done = Arc::new(AtomicBool::new(false));
    let bar = (!quiet).then(|| spawn_progress_bar(progress.clone(), done.clone()));
    let result = bench::run(drives.to_vec(), spec, progress).await;
    done.store(true, Ordering::Relaxed);
    if let Some(bar) = bar {
        let _ = bar.join();
    }
    Ok(result?)
}

fn spawn_progress_bar(
    progress: Arc<Progress>,
    done: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let bar = ProgressBar::new(1000);
        bar.set_style(
            ProgressStyle::with_template("{prefix:>8} [{bar:40}] {percent:>3}% {msg}")
                .expect("valid template")
                .progress_chars("=> "),
        );
        while !done.load(Ordering::Relaxed) {
            let phase = progress.phase();
            let bytes = progress.bytes.load(Ordering::Relaxed);
            let elapsed = phase.started.elapsed();
            let fraction = match (phase.total_bytes, phase.duration) {
                (Some(total), _) if total > 0 => bytes as f64 / total as f64,
                (_, Some(d)) => elapsed.as_secs_f64() / d.as_secs_f64(),
                _ => 0.0,
            };
            bar.set_prefix(phase.name);
            bar.set_position((fraction.clamp(0.0, 1.0) * 1000.0) as u64);
            bar.set_message(format!(
                "{}/s",
                bench::report::human_bytes(bytes as f64 / elapsed.as_secs_f64().max(1e-3))
            ));
            std::thread::sleep(Duration::from_millis(100));
        }
        bar.finish_and_clear();
    })
}

/// One subsystem to open as a session: one path per `ConnectOptions` (address, subsystem,
/// host, transport, source address and interface).
struct Subsystem {
    nqn: String,
    paths: Vec<ConnectOptions>,
    /// Where the connections leave from, for messages ("" or " from GPU0's NIC port ...").
    from: String,
}

/// Connects to every subsystem of `source` and lists their namespaces. Each controller gets an
/// I/O queue for each worker that sends to its drives (`sharing`; on that worker's runtime of
/// `io_runtimes`, if any), and no more: a target that spreads queues over its cores in turn
/// spreads the busy ones. Every admin queue is connected before the first I/O queue, for the
/// same reason (`Controller::connect_admin`).
pub async fn open_drives(
    source: &DriveSource,
    session_args: &SessionArgs,
    threads: usize,
    sharing: WorkerDrives,
    iodepth: u32,
    io_runtimes: Vec<tokio::runtime::Handle>,
) -> Result<Vec<Drive>> {
    let host = session_args.host()?;
    let subsystems = match source {
        DriveSource::Addressed(address) => addressed_subsystems(address, &host).await?,
        DriveSource::Placed(plan) => placed_subsystems(plan, &host).await?,
    };
    // Which workers send to a drive depends on how many drives there are: the namespaces first
    // (over an admin queue alone, unless --nsid names them).
    let mut listed = Vec::new();
    let mut count = 0;
    for subsystem in subsystems {
        let room = session_args.drives.map_or(usize::MAX, |n| n - count);
        if room == 0 {
            break;
        }
        let mut nsids = if session_args.nsid.is_empty() {
            let mut opts = subsystem.paths[0].clone();
            opts.io_queues = 0;
            session_args.auth.apply(&mut opts);
            let (nqn, path, from) = (&subsystem.nqn, opts.addr, &subsystem.from);
            let ctrl = Controller::connect(opts)
                .await
                .with_context(|| format!("connecting to {nqn} at {path}{from}"))?;
            let nsids = ctrl.active_namespaces().await;
            let _ = ctrl.shutdown().await;
            nsids.with_context(|| format!("listing the namespaces of {nqn} at {path}"))?
        } else {
            session_args.nsid.clone()
        };
        nsids.truncate(room);
        count += nsids.len();
        listed.push((subsystem, nsids));
    }
    if count == 0 {
        bail!("no namespaces to run on");
    }
    let mut drives = Vec::new();
    let mut opened = Vec::new();
    let mut first = 0;
    for (Subsystem { nqn, paths, from }, nsids) in listed {
        if nsids.is_empty() {
            continue;
        }
        let mut workers: Vec<usize> = (first..first + nsids.len())
            .flat_map(|d| bench::workers_of(d, count, threads, sharing))
            .collect();
        workers.sort_unstable();
        workers.dedup();
        let mut queues = vec![u16::MAX; threads];
        for (queue, &worker) in workers.iter().enumerate() {
            queues[worker] = queue as u16;
        }
        let queues: Arc<[u16]> = queues.into();
        let addr = paths[0].addr;
        let mut connected = Vec::new();
        for mut opts in paths {
            let path = opts.addr;
            opts.io_queues = workers.len() as u16;
            opts.queue_size = session_args.queue_size.unwrap_or(
                opts.queue_size
                    .max(iodepth.saturating_add(1).min(u16::MAX as u32) as u16),
            );
            opts.kato_ms = session_args.keep_alive_tmo.saturating_mul(1000);
            opts.poll_window = std::time::Duration::from_micros(session_args.poll_us);
            opts.io_runtimes = match io_runtimes.len() {
                0 => Vec::new(),
                n => workers
                    .iter()
                    .map(|&w| io_runtimes[w % n].clone())
                    .collect(),
            };
            opts.digests = Digests {
                header: session_args.hdr_digest,
                data: session_args.data_digest,
            };
            session_args.auth.apply(&mut opts);
            let ctrl = Controller::connect_admin(opts.clone())
                .await
                .with_context(|| format!("connecting to {nqn} at {path}{from}"))?;
            connected.push((opts, Some(ctrl)));
        }
        first += nsids.len();
        opened.push(AdminsUp {
            nqn,
            from,
            addr,
            workers: workers.len(),
            queues,
            connected,
            nsids,
        });
    }
    for AdminsUp {
        nqn,
        from,
        addr,
        workers,
        queues,
        mut connected,
        nsids,
    } in opened
    {
        for (opts, ctrl) in &mut connected {
            let (path, ctrl) = (opts.addr, ctrl.as_mut().expect("connected above"));
            ctrl.connect_io()
                .await
                .with_context(|| format!("connecting to {nqn} at {path}{from}"))?;
            if ctrl.io_queue_count() < workers {
                bail!(
                    "{nqn} at {path} granted {} I/O queues; {workers} workers (--threads {threads}) \
                     send to it, one queue each",
                    ctrl.io_queue_count(),
                );
            }
        }
        let policy = RecoveryPolicy {
            reconnect_delay: Duration::from_secs_f64(session_args.reconnect_delay.max(0.0)),
            ctrl_loss_tmo: (session_args.ctrl_loss_tmo >= 0.0)
                .then(|| Duration::from_secs_f64(session_args.ctrl_loss_tmo)),
        };
        let session = Session::from_controllers(connected, policy).await?;
        for nsid in nsids {
            let drive = Drive::open(session.clone(), nsid)
                .await
                .with_context(|| format!("namespace {nsid} of {nqn} at {addr}"))?;
            drives.push(Drive {
                queues: queues.clone(),
                ..drive
            });
        }
    }
    Ok(drives)
}

/// A subsystem whose paths' admin queues are up, its I/O queues still to connect
/// (`open_drives`).
struct AdminsUp {
    nqn: String,
    /// Where the connections leave from, for messages (`Subsystem::from`).
    from: String,
    addr: SocketAddr,
    /// Workers sending to it: I/O queues each path needs.
    workers: usize,
    /// The I/O queue of each worker (`Drive::queues`).
    queues: Arc<[u16]>,
    connected: Vec<(ConnectOptions, Option<Controller>)>,
    nsids: Vec<u32>,
}

/// The subsystems named with -n (or offered, with --all), each with the --path extras.
async fn addressed_subsystems(
    address: &AddressArgs,
    host: &HostIdentity,
) -> Result<Vec<Subsystem>> {
    let transport = parse_transport(&address.transport)?;
    // clap requires -a unless --gpu, and --gpu excludes every addressing option.
    let host_name = address
        .traddr
        .as_deref()
        .context("-a/--traddr says where the drives are")?;
    let targets: Vec<(Vec<SocketAddr>, String)> = if address.all {
        let port = address.trsvcid.unwrap_or(DISCOVERY_PORT);
        let addr = resolve(host_name, port).await?;
        let mut opts =
            ConnectOptions::discovery(addr).with_host(&HostIdentity::with_nqn(&host.nqn));
        opts.transport = transport;
        opts.host_traddr = address.host_traddr;
        opts.host_iface = address.host_iface.clone();
        discover_all(opts)
            .await
            .with_context(|| format!("discovery at {addr}"))?
            .into_iter()
            .map(|o| (o.paths, o.subnqn))
            .collect()
    } else {
        let addr = resolve(host_name, address.trsvcid.unwrap_or(IO_PORT)).await?;
        address
            .nqns
            .iter()
            .map(|n| (vec![addr], n.clone()))
            .collect()
    };
    if targets.is_empty() {
        bail!("no subsystems to run on over -t {}", address.transport);
    }
    let mut subsystems = Vec::new();
    for (mut paths, nqn) in targets {
        // --path adds paths to every subsystem: one multipath session each.
        for extra in &address.paths {
            let (h, p) = extra
                .rsplit_once(':')
                .with_context(|| format!("--path {extra}: HOST:PORT"))?;
            let port: u16 = p.parse().with_context(|| format!("--path {extra}: port"))?;
            let path = resolve(h, port).await?;
            if !paths.contains(&path) {
                paths.push(path);
            }
        }
        let paths = paths
            .into_iter()
            .map(|path| {
                let mut opts = ConnectOptions::new(path, &nqn).with_host(host);
                opts.transport = transport;
                opts.host_traddr = address.host_traddr;
                opts.host_iface = address.host_iface.clone();
                opts
            })
            .collect();
        subsystems.push(Subsystem {
            nqn,
            paths,
            from: String::new(),
        });
    }
    Ok(subsystems)
}

/// One subsystem per connection of the GPU's plan, reached as `place --apply --userspace`
/// reaches it, from the source address (and NVMe/TCP interface) the plan gives.
async fn placed_subsystems(plan: &GpuPlan, host: &HostIdentity) -> Result<Vec<Subsystem>> {
    let mut subsystems = Vec::new();
    for c in &plan.connections {
        let from = format!(
            " from GPU{}'s NIC port {}/{} ({})",
            plan.gpu,
            c.rdma,
            c.port,
            c.host_traddr.map_or("no address".into(), |a| a.to_string())
        );
        let opts = apply::connect_options(c, host)
            .await
            .with_context(|| format!("connecting to {}{from}", c.nqn))?;
        subsystems.push(Subsystem {
            nqn: c.nqn.clone(),
            paths: vec![opts],
            from,
        });
    }
    Ok(subsystems)
}

/// Prints what happens to the sessions (paths lost and back, namespaces added or removed) on
/// stderr while the benchmark runs, and keeps it for the report.
pub fn report_session_events(drives: &[Drive]) -> Arc<std::sync::Mutex<Vec<String>>> {
    let log: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let mut seen: Vec<Arc<Session>> = Vec::new();
    for d in drives {
        if seen.iter().any(|s| Arc::ptr_eq(s, &d.session)) {
            continue;
        }
        seen.push(d.session.clone());
        let mut events = d.session.events();
        let session = d.session.clone();
        let log = log.clone();
        tokio::spawn(async move {
            while let Ok(event) = events.recv().await {
                let path = |p: usize| {
                    session
                        .path_options(p)
                        .map_or(String::new(), |o| o.addr.to_string())
                };
                let text = match event {
                    SessionEvent::PathDown { path: p, error } => {
                        format!("path {p} ({}) down: {error}; reconnecting", path(p))
                    }
                    SessionEvent::PathUp { path: p, cntlid } => {
                        format!("path {p} ({}) back (cntlid {cntlid})", path(p))
                    }
                    SessionEvent::PathGivenUp { path: p } => {
                        format!("path {p} ({}) given up (controller loss timeout)", path(p))
                    }
                    SessionEvent::NamespaceAdded { nsid } => format!("namespace {nsid} added"),
                    SessionEvent::NamespaceRemoved { nsid } => {
                        format!("namespace {nsid} removed")
                    }
                };
                let text = format!("{}: {text}", session.subnqn());
                eprintln!("{text}");
                log.lock().unwrap().push(text);
            }
        });
    }
    log
}

/// Shuts every session down (errors are only logged: the results are in).
pub async fn close_drives(drives: Vec<Drive>) {
    let mut sessions: Vec<Arc<Session>> = Vec::new();
    for d in drives {
        if !sessions.iter().any(|s| Arc::ptr_eq(s, &d.session)) {
            sessions.push(d.session.clone());
        }
    }
    for session in sessions {
        session.shutdown().await;
    }
}

/// A UUID as 16 bytes (hyphens optional).
fn parse_uuid(text: &str) -> Option<[u8; 16]> {
    let hex: String = text.chars().filter(|&c| c != '-').collect();
    if hex.len() != 32 {
        return None;
    }
    let mut id = [0u8; 16];
    for (i, byte) in id.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(id)
}

fn random_seed() -> u64 {
    let id = fabrik_initiator::host::options::random_uuid();
    u64::from_le_bytes(id[..8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_ids_parse_as_uuids() {
        let id = parse_uuid("123e4567-e89b-42d3-a456-426614174000").unwrap();
        assert_eq!(
            fabrik_initiator::host::options::format_uuid(&id),
            "123e4567-e89b-42d3-a456-426614174000"
        );
        assert!(parse_uuid("123e4567").is_none());
        assert!(parse_uuid("zz3e4567-e89b-42d3-a456-426614174000").is_none());
    }
}
