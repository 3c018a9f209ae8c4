//! fabrikd: the fabrik NVMe-oF target. With no arguments it serves a 24-drive JBOF of sparse
//! files over NVMe/TCP on 127.0.0.1:4420.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use fabrik_api::config::{parse_size, ConfigFile};
use fabrik_target::config::{default_data_dir, parse_backend, Config};
use fabrik_target::Target;

#[derive(Parser, Debug)]
#[command(name = "fabrikd", version, about = "fabrik NVMe-over-Fabrics target", long_about = None)]
struct Args {
    /// Configuration file (TOML); flags given here override it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Directory for state and drive files [default: $FABRIK_DATA_DIR, /var/lib/fabrik as root, else ~/.local/share/fabrik].
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Listener: ADDR:PORT or tcp:ADDR:PORT for NVMe/TCP, rdma:ADDR:PORT for NVMe/RDMA
    /// (repeatable; both transports at once are fine) [default: 127.0.0.1:4420].
    #[arg(long, value_name = "[tcp:|rdma:]ADDR:PORT")]
    listen: Vec<String>,
    /// REST API address (the management API is not part of this build yet).
    #[arg(long, value_name = "ADDR:PORT")]
    api: Option<SocketAddr>,
    /// Number of drives to create, exported as one subsystem each [default: 24].
    #[arg(long, value_name = "N")]
    drives: Option<u32>,
    /// Size of each drive, e.g. 64G; file drives are sparse and take disk only as written [default: 64G].
    #[arg(long, value_name = "SIZE")]
    drive_size: Option<String>,
    /// Drive backend: file (sparse files under the data dir), block (needs drives in the config file), ram, null [default: file].
    #[arg(long, value_name = "KIND")]
    backend: Option<String>,
    /// Logical block size of generated drives, 512 or 4096 [default: 4096].
    #[arg(long, value_name = "BYTES")]
    block_size: Option<u32>,
    /// Name of this box in NQNs [default: the host name].
    #[arg(long, value_name = "NAME")]
    box_name: Option<String>,
    /// Allow any host to connect (the default unless --host is given).
    #[arg(long, conflicts_with = "host")]
    allow_any_host: bool,
    /// Allow only this host NQN (repeatable); other hosts are refused and see no subsystems.
    #[arg(long = "host", value_name = "NQN")]
    host: Vec<String>,
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let config = build_config(&args)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run(config))
}

fn build_config(args: &Args) -> anyhow::Result<Config> {
    let mut config = Config::default_jbof(default_data_dir());
    if let Some(path) = &args.config {
        config.apply_file(&ConfigFile::load(path)?)?;
    }
    if let Some(d) = &args.data_dir {
        config.data_dir = d.clone();
    }
    if !args.listen.is_empty() {
        config.set_listeners(&args.listen)?;
    }
    if let Some(n) = args.drives {
        config.drives = n;
    }
    if let Some(s) = &args.drive_size {
        config.drive_size = parse_size(s)
            .map_err(anyhow::Error::msg)
            .context("--drive-size")?;
    }
    if let Some(b) = &args.backend {
        config.backend = parse_backend(b)?;
    }
    if let Some(bs) = args.block_size {
        config.block_size = bs;
    }
    if let Some(name) = &args.box_name {
        config.box_name = fabrik_target::config::sanitize_box_name(name)?;
    }
    if args.allow_any_host {
        config.allowed_hosts = None;
    } else if !args.host.is_empty() {
        config.allowed_hosts = Some(args.host.clone());
    }
    if args.api.is_some() {
        tracing::warn!("--api: the REST API is not available in this build yet; ignoring");
    }
    Ok(config)
}

async fn run(config: Config) -> anyhow::Result<()> {
    let drives = config.drive_list();
    let target = Target::start(config.clone()).await?;
    print_banner(&config, &target, drives.len());
    wait_for_signal().await?;
    tracing::info!("shutting down: finishing in-flight I/O");
    target.shutdown().await;
    tracing::info!("stopped");
    Ok(())
}

fn print_banner(config: &Config, target: &Target, drives: usize) {
    let tcp = target.listen_addrs();
    let rdma = target.rdma_listen_addrs();
    let nqns = target.subsystem_nqns();
    eprintln!(
        "fabrikd {} serving {drives} drive(s) ({} backend, {} each) from {}",
        env!("CARGO_PKG_VERSION"),
        config.backend.name(),
        human_size(config.drive_size),
        config.data_dir.display()
    );
    for a in &tcp {
        eprintln!("  NVMe/TCP listener {a} (discovery: nqn.2014-08.org.nvmexpress.discovery)");
    }
    for a in &rdma {
        eprintln!("  NVMe/RDMA listener {a} (discovery: nqn.2014-08.org.nvmexpress.discovery)");
    }
    match &config.allowed_hosts {
        None => eprintln!("  hosts: any host may connect"),
        Some(h) => eprintln!("  hosts: only {}", h.join(", ")),
    }
    let (kind, first) = match (tcp.first(), rdma.first()) {
        (Some(a), _) => ("tcp", *a),
        (None, Some(a)) => ("rdma", *a),
        (None, None) => return,
    };
    eprintln!("Connect from a Linux host (nvme-cli):");
    eprintln!(
        "  nvme discover -t {kind} -a {} -s {}",
        first.ip(),
        first.port()
    );
    eprintln!(
        "  nvme connect-all -t {kind} -a {} -s {}",
        first.ip(),
        first.port()
    );
    if let Some(nqn) = nqns.first() {
        eprintln!(
            "  nvme connect -t {kind} -a {} -s {} -n {nqn}",
            first.ip(),
            first.port()
        );
    }
}

fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.0} {}", UNITS[u])
}

async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}
