//! fabrikd: the fabrik NVMe-oF target. With no arguments it serves a 24-drive JBOF of sparse
//! files over NVMe/TCP on 127.0.0.1:4420.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use fabrik_api::config::{parse_size, ConfigFile};
use fabrik_target::config::{default_data_dir, parse_backend, Config};
use fabrik_target::endpoints::ApiListeners;
use fabrik_target::metrics::MetricsEndpoint;
use fabrik_target::model::Transport;
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
    /// Management REST API address, or "off" [default: 127.0.0.1:8080; when that default is
    /// taken fabrikd runs without the API and says so].
    #[arg(long, value_name = "ADDR:PORT")]
    api: Option<String>,
    /// Serve the management API's TCP address over HTTPS with this certificate (chain, PEM);
    /// needed for an address beyond loopback. With --api-tls-key.
    #[arg(long, value_name = "FILE", requires = "api_tls_key")]
    api_tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --api-tls-cert.
    #[arg(long, value_name = "FILE", requires = "api_tls_cert")]
    api_tls_key: Option<PathBuf>,
    /// TLS 1.3 for NVMe/TCP with the configured PSKs in FILE (mode 0600): one
    /// `NVMeTLSkey-1:..:` key a line (`nvme gen-tls-key`), for any host, or after a host NQN
    /// for that host. The --listen NVMe/TCP ports then require TLS (see --tls).
    #[arg(long, value_name = "FILE")]
    tls_psk: Option<PathBuf>,
    /// TLS on the --listen NVMe/TCP ports: required (the default with --tls-psk), allowed (TLS
    /// or clear text, as the host begins) or none.
    #[arg(long, value_name = "MODE")]
    tls: Option<String>,
    /// The PSKs' HKDF label layout, as the hosts' libnvme derives them: rfc8446 (libnvme 1.16
    /// on) [default], compat (1.7 to 1.15, nvme-cli --compat) or nolength (1.4 to 1.6).
    #[arg(long, value_name = "LAYOUT")]
    tls_psk_label: Option<String>,
    /// The management API's local socket (no token: its file mode 0600 decides; `fabrik`'s
    /// default), or "off" [default: <data-dir>/api.sock].
    #[arg(long, value_name = "PATH|off")]
    api_socket: Option<String>,
    /// Prometheus metrics at http://ADDR:PORT/metrics, or "off" [default: 127.0.0.1:9420].
    /// Metrics name hosts by alias, never by NQN.
    #[arg(long, value_name = "ADDR:PORT|off")]
    metrics: Option<String>,
    /// Scrapes of the metrics port need `Authorization: Bearer <the token in FILE>` (Prometheus:
    /// `authorization: credentials_file`).
    #[arg(long, value_name = "FILE")]
    metrics_token_file: Option<PathBuf>,
    /// Number of drives to create, exported as one subsystem each [default: 24].
    #[arg(long, value_name = "N")]
    drives: Option<u32>,
    /// Size of each drive, e.g. 64G; file drives are sparse and take disk only as written [default: 64G].
    #[arg(long, value_name = "SIZE")]
    drive_size: Option<String>,
    /// Drive backend: file (sparse files under the data dir), block (needs drives in the config
    /// file), ram or null [default: file]. ram and null are for benchmarks: they keep no data
    /// across a restart (their namespaces get a new identity at every start).
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
    /// Cores for the I/O reactors, one thread pinned to each, as `taskset -c` writes them
    /// ("0-3,8") [default: one unpinned reactor per core fabrikd may run on].
    #[arg(long, value_name = "LIST")]
    cores: Option<String>,
    /// Microseconds a busy reactor keeps polling for events after its last one before it sleeps
    /// in epoll; 0: it sleeps between events [default: 20].
    #[arg(long, value_name = "US")]
    poll_idle_us: Option<u64>,
    /// This fabrikd is I/O module a or b of a box: the two serve the same subsystems from the
    /// same drives through their own ports, with disjoint controller IDs and an ANA group each
    /// (see the README's "Two I/O modules"). Both need the same --box-name.
    #[arg(long, value_name = "a|b")]
    module: Option<String>,
    /// Where generated file drives live [default: <data-dir>/drives]; the two modules of a box
    /// give the same directory.
    #[arg(long, value_name = "DIR")]
    drive_dir: Option<PathBuf>,
    /// The other I/O module's management API (http://ADDR:PORT, with this module's token unless
    /// `peer_token` is in the config file): every change of the configuration the two share
    /// (subsystems, hosts, compositions) is made on both.
    #[arg(long, value_name = "URL")]
    peer: Option<String>,
    /// NVMe/TCP: end every successful read with its last C2HData PDU (SUCCESS flag), without a
    /// response capsule, as SPDK's target does by default. The specification allows it only
    /// for hosts that disable SQ flow control (without this flag, only for those).
    #[arg(long)]
    c2h_success: bool,
    /// What this fabrikd is: a box (serving drives) or a central discovery controller ("cdc"):
    /// boxes register with it (--cdc) and hosts discover every box's subsystems from it, each
    /// host those it may use. A CDC serves no drives [default: box].
    #[arg(long, value_name = "box|cdc")]
    role: Option<String>,
    /// Register this box with the central discovery controller at ADDR:PORT (its --listen
    /// address); deregistered at a clean stop.
    #[arg(long, value_name = "ADDR:PORT")]
    cdc: Option<String>,
    /// Announce this fabrikd's discovery controller over mDNS (`_nvme-disc._tcp`, NVMe-oF
    /// TP8009) on its NVMe/TCP listeners, for hosts that find discovery controllers that way
    /// (nvme-stas).
    #[arg(long)]
    mdns: bool,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match start(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => report(&e),
    }
}

/// An expected error (a refused flag, a port in use, a corrupt state file) reads as
/// `error: ...` and its causes, a line each: never a backtrace, which is for panics, bugs.
fn report(err: &anyhow::Error) -> ExitCode {
    eprintln!("error: {err}");
    err.chain()
        .skip(1)
        .for_each(|c| eprintln!("  caused by: {c}"));
    ExitCode::FAILURE
}

/// What fabrikd serves besides its NVMe ports.
struct Endpoints {
    /// Metrics address, and whether it was asked for (then failing to bind it is fatal).
    metrics: Option<(SocketAddr, bool)>,
    metrics_token: Option<String>,
    api_socket: Option<PathBuf>,
}

fn start(args: Args) -> anyhow::Result<()> {
    raise_descriptor_limit();
    let config = build_config(&args)?;
    let metrics_token = match &args.metrics_token_file {
        None => None,
        Some(f) => {
            let t = std::fs::read_to_string(f)
                .with_context(|| format!("--metrics-token-file {}", f.display()))?;
            let t = t.trim().to_string();
            if t.len() < 16 {
                anyhow::bail!(
                    "the metrics token in {} is shorter than 16 characters",
                    f.display()
                );
            }
            Some(t)
        }
    };
    let endpoints = Endpoints {
        metrics: metrics_addr(args.metrics.as_deref())?,
        metrics_token,
        api_socket: match args.api_socket.as_deref() {
            Some("off") => None,
            Some(p) => Some(PathBuf::from(p)),
            None => Some(config.data_dir.join(fabrik_target::endpoints::API_SOCKET)),
        },
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run(config, endpoints))
}

/// Every NVMe/TCP queue is a descriptor: take all the system lets this process have (the soft
/// limit is often 1024 while the hard one is far higher).
fn raise_descriptor_limit() {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(n) if n < 4096 => tracing::warn!(
            limit = n,
            "open files are limited to {n}: few hosts and queues will fit (raise LimitNOFILE / ulimit -n)"
        ),
        Ok(n) => tracing::debug!(limit = n, "open file limit"),
        Err(e) => tracing::warn!("cannot raise the open file limit: {e}"),
    }
}

/// Where metrics are served when --metrics is not given.
const DEFAULT_METRICS_ADDR: &str = "127.0.0.1:9420";

/// Where to serve metrics: None for "off"; the flag says whether the address was asked for
/// (then failing to bind it is fatal) or is the default (then a warning).
fn metrics_addr(arg: Option<&str>) -> anyhow::Result<Option<(SocketAddr, bool)>> {
    match arg {
        Some("off") => Ok(None),
        Some(a) => {
            let addr = a
                .parse()
                .with_context(|| format!("--metrics {a:?}: expected ADDR:PORT or off"))?;
            Ok(Some((addr, true)))
        }
        None => Ok(Some((
            DEFAULT_METRICS_ADDR.parse().expect("valid default"),
            false,
        ))),
    }
}

fn build_config(args: &Args) -> anyhow::Result<Config> {
    let mut config = Config::default_jbof(default_data_dir());
    config.persist_state = true;
    let mut box_named_in_file = false;
    let mut data_dir_given = args.data_dir.is_some();
    if let Some(path) = &args.config {
        let file = ConfigFile::load(path)?;
        box_named_in_file = file.box_name.is_some();
        data_dir_given |= file.data_dir.is_some();
        config.apply_file(&file)?;
    }
    if let Some(d) = &args.data_dir {
        config.data_dir = d.clone();
    }
    if !args.listen.is_empty() {
        config.set_listeners(&args.listen)?;
        config.explicit.listen = true;
    }
    config.explicit.drives |= args.drives.is_some()
        || args.drive_size.is_some()
        || args.backend.is_some()
        || args.block_size.is_some()
        || args.box_name.is_some();
    config.explicit.hosts |= args.allow_any_host || !args.host.is_empty();
    if let Some(role) = &args.role {
        // Before --drives: a CDC given drives is refused (Config::validate), not silently emptied.
        config
            .set_role(role)
            .map_err(|e| anyhow::anyhow!("--role {role:?}: {e}"))?;
    }
    if config.cdc_role && !data_dir_given {
        // A CDC (by the flag or the file) keeps its state apart from a box's, should one run on
        // the same machine.
        config.data_dir = config.data_dir.join("cdc");
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
    if let Some(api) = &args.api {
        config.api = Some(api.clone());
    }
    if let (Some(c), Some(k)) = (&args.api_tls_cert, &args.api_tls_key) {
        config.api_tls = Some((c.clone(), k.clone()));
    }
    if let Some(psk) = &args.tls_psk {
        config.tls_psk = Some(psk.clone());
    }
    if let Some(mode) = &args.tls {
        config.set_tls(mode).context("--tls")?;
    }
    if let Some(label) = &args.tls_psk_label {
        config.set_tls_label(label).context("--tls-psk-label")?;
    }
    if let Some(us) = args.poll_idle_us {
        config.polling.idle_after = std::time::Duration::from_micros(us);
    }
    if args.c2h_success {
        config.c2h_success = true;
    }
    if let Some(m) = &args.module {
        config.module = Some(
            m.parse()
                .map_err(|e: String| anyhow::anyhow!("--module: {e}"))?,
        );
    }
    if let Some(dir) = &args.drive_dir {
        config.drive_dir = Some(dir.clone());
    }
    if let Some(url) = &args.peer {
        config.peer = Some(url.clone());
    }
    if config.module.is_some() && args.box_name.is_none() && !box_named_in_file {
        // The host name differs between the modules' machines: their NQNs would too, and hosts
        // would see two boxes instead of two paths to one.
        anyhow::bail!(
            "an I/O module needs the box's name (--box-name or box_name), the same on both modules"
        );
    }
    if let Some(cdc) = &args.cdc {
        config.cdc = Some(
            cdc.parse()
                .with_context(|| format!("--cdc {cdc:?}: expected ADDR:PORT"))?,
        );
    }
    config.mdns |= args.mdns;
    if let Some(cores) = &args.cores {
        config.cores = fabrik_target::reactor::parse_cores(cores)
            .map_err(|e| anyhow::anyhow!("--cores {cores:?}: {e}"))?;
    }
    Ok(config)
}

/// Where the API listens: None when off. `explicit` says whether the address was asked for (a
/// taken default is not an error).
fn api_addr(config: &Config) -> anyhow::Result<Option<(SocketAddr, bool)>> {
    let (addr, explicit): (SocketAddr, bool) = match config.api.as_deref() {
        None => (DEFAULT_API.parse().unwrap(), false),
        Some("off") => return Ok(None),
        Some(a) => (
            a.parse()
                .with_context(|| format!("--api {a:?}: expected ADDR:PORT or off"))?,
            true,
        ),
    };
    // Plain HTTP carries the token in clear: only on loopback.
    if !addr.ip().is_loopback() && config.api_tls.is_none() {
        anyhow::bail!(
            "--api {addr} is beyond loopback: serve it over HTTPS (--api-tls-cert and \
             --api-tls-key, or api_tls_cert/api_tls_key in the config file), or keep it on \
             127.0.0.1 and use the local socket"
        );
    }
    Ok(Some((addr, explicit)))
}

const DEFAULT_API: &str = "127.0.0.1:8080";

async fn run(config: Config, endpoints: Endpoints) -> anyhow::Result<()> {
    // The API's socket first: an address asked for and taken stops fabrikd before it starts;
    // so does a certificate that cannot be used.
    let api_tls = match &config.api_tls {
        Some((cert, key)) => Some(
            fabrik_api::tls::server_config(cert, key)
                .map_err(|e| anyhow::anyhow!("the management API's certificate: {e}"))?,
        ),
        None => None,
    };
    let api_listener = match api_addr(&config)? {
        None => None,
        Some((addr, explicit)) => match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => Some(listener),
            Err(e) if !explicit => {
                tracing::warn!("management API not served on TCP: cannot listen on the default {addr}: {e} (give --api ADDR:PORT; `fabrik` uses the local socket)");
                None
            }
            Err(e) => return Err(e).with_context(|| format!("cannot listen on {addr} (--api)")),
        },
    };
    let listeners = ApiListeners::bind(api_listener, endpoints.api_socket.as_deref())
        .await?
        .with_tls(api_tls);
    let target = match Target::start(config.clone()).await {
        Ok(t) => t,
        Err(e) => {
            listeners.discard();
            return Err(e);
        }
    };
    let drives = target.manager().state().drives.len();
    let metrics = match endpoints.metrics {
        None => None,
        Some((addr, asked)) => {
            match MetricsEndpoint::start(target.manager(), addr, endpoints.metrics_token.clone())
                .await
            {
                Ok(m) => Some(m),
                Err(e) if asked => {
                    return Err(e).with_context(|| format!("cannot serve metrics on {addr}"))
                }
                Err(e) => {
                    tracing::warn!("metrics not served: cannot listen on {addr}: {e}");
                    None
                }
            }
        }
    };
    print_banner(&config, &target, drives);
    if let Some(m) = &metrics {
        eprintln!("  Prometheus metrics: http://{}/metrics", m.addr());
    }
    let token = fabrik_target::state::api_token(&config.data_dir, config.api_token.as_deref())?;
    let api = listeners.serve(&target, token)?;
    if let Some(path) = api.socket_path() {
        eprintln!(
            "  management API on the local socket {} (fabrik's default; no token)",
            path.display()
        );
    }
    if let Some(bound) = api.tcp_addr() {
        let scheme = if api.https() { "https" } else { "http" };
        let token_from = match config.api_token {
            Some(_) => "the config file".to_string(),
            None => config
                .data_dir
                .join(fabrik_target::state::TOKEN_FILE)
                .display()
                .to_string(),
        };
        eprintln!(
            "  management API {scheme}://{bound}/api/v1 (docs /api/v1/docs; every call needs the token in {token_from})"
        );
    }
    wait_for_signal().await?;
    tracing::info!("shutting down: finishing in-flight I/O");
    if let Some(m) = metrics {
        m.shutdown().await;
    }
    api.shutdown().await;
    target.shutdown().await;
    tracing::info!("stopped");
    Ok(())
}

fn print_banner(config: &Config, target: &Target, drives: usize) {
    let tcp = target.listen_addrs();
    let rdma = target.rdma_listen_addrs();
    let listeners: Vec<(Transport, SocketAddr)> = (tcp.into_iter().map(|a| (Transport::Tcp, a)))
        .chain(rdma.into_iter().map(|a| (Transport::Rdma, a)))
        .collect();
    let nqns = target.subsystem_nqns();
    let state = target.manager().state();
    // The opened drive's capacity: a block device has its own size, not the configured one.
    let (backend, size) = state.drives.first().map_or(("none".to_string(), 0), |d| {
        let capacity = target.manager().drive_capacity(&d.id).unwrap_or(d.size);
        (d.backend.clone(), capacity)
    });
    eprintln!(
        "fabrikd {} serving {drives} drive(s) ({backend} backend, {} each) from {}",
        env!("CARGO_PKG_VERSION"),
        human_size(size),
        config.data_dir.display()
    );
    if let Some(m) = config.module {
        let ids = fabrik_target::module::cntlids(Some(m));
        eprintln!(
            "  I/O module {m} of box {}: controller IDs {}-{}, ANA group {} optimized here",
            state.box_name,
            ids.start(),
            ids.end(),
            m.own_group()
        );
    }
    if state
        .drives
        .iter()
        .any(|d| d.backend == "ram" || d.backend == "null")
    {
        eprintln!(
            "  note: ram and null drives keep no data across a restart (benchmarks only); their namespaces get a new NGUID/UUID at every start"
        );
    }
    for (t, a) in &listeners {
        eprintln!(
            "  {} listener {a} (discovery: nqn.2014-08.org.nvmexpress.discovery)",
            t.human_name()
        );
    }
    let open = state
        .subsystems
        .iter()
        .filter(|s| state.effective_hosts(s).is_none())
        .count();
    if open == state.subsystems.len() {
        eprintln!("  hosts: any host may connect");
    } else {
        eprintln!(
            "  hosts: {open} of {} subsystem(s) admit any host; the others only listed or composed hosts",
            state.subsystems.len()
        );
    }
    // The first listener, NVMe/TCP ones first.
    let Some(&(kind, first)) = listeners.first() else {
        return;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A CDC keeps its state in `<data-dir>/cdc` whether the flag or the file makes it one,
    /// unless a data directory is given.
    #[test]
    fn a_cdc_keeps_its_state_apart() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("cdc.toml");
        let config_of = |text: &str, extra: &[&str]| {
            std::fs::write(&file, text).unwrap();
            let mut argv = vec!["fabrikd", "--config", file.to_str().unwrap()];
            argv.extend(extra);
            build_config(&Args::try_parse_from(argv).unwrap()).unwrap()
        };
        let cdc = config_of("role = \"cdc\"\n", &[]);
        assert_eq!(cdc.data_dir, default_data_dir().join("cdc"));
        let flag = config_of("", &["--role", "cdc"]);
        assert_eq!(flag.data_dir, default_data_dir().join("cdc"));
        let given = config_of("role = \"cdc\"\ndata_dir = \"/srv/cdc\"\n", &[]);
        assert_eq!(given.data_dir, PathBuf::from("/srv/cdc"));
        assert_eq!(config_of("", &[]).data_dir, default_data_dir());
    }

    #[test]
    fn metrics_flag() {
        assert_eq!(
            metrics_addr(None).unwrap(),
            Some(("127.0.0.1:9420".parse().unwrap(), false))
        );
        assert_eq!(metrics_addr(Some("off")).unwrap(), None);
        assert_eq!(
            metrics_addr(Some("0.0.0.0:9100")).unwrap(),
            Some(("0.0.0.0:9100".parse().unwrap(), true))
        );
        let err = metrics_addr(Some("9420")).unwrap_err();
        assert!(
            format!("{err:#}").contains("expected ADDR:PORT or off"),
            "{err:#}"
        );
    }
}
