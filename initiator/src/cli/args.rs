//! Arguments shared by subcommands, named as nvme-cli names them.

use std::net::{IpAddr, SocketAddr};

use anyhow::{Context, Result};
use clap::Args;
use fabrik_initiator::proto::tcp::Digests;
use fabrik_initiator::proto::tls::{ConfiguredPsk, LabelEncoding};
use fabrik_initiator::transport::tcp::tls::TlsKey;
use fabrik_initiator::{ConnectOptions, Controller, HostIdentity, Transport};

/// Default ports of `nvme discover` and `nvme connect` (NVMEOF-FACTS 1.11).
pub const DISCOVERY_PORT: u16 = 8009;
pub const IO_PORT: u16 = 4420;

#[derive(Args)]
pub struct TargetArgs {
    /// Transport: tcp, or rdma (with the `rdma` build feature).
    #[arg(short = 't', long, default_value = "tcp")]
    pub transport: String,
    /// Target address (IP or host name).
    #[arg(short = 'a', long)]
    pub traddr: String,
    /// Port (default 8009 for discovery, 4420 otherwise).
    #[arg(short = 's', long)]
    pub trsvcid: Option<u16>,
}

#[derive(Args)]
pub struct ConnectArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Subsystem NQN.
    #[arg(short = 'n', long)]
    pub nqn: String,
    /// Host NQN (default: a random UUID-based NQN).
    #[arg(short = 'q', long)]
    pub hostnqn: Option<String>,
    /// I/O queues to ask for.
    #[arg(short = 'i', long, default_value_t = 1)]
    pub nr_io_queues: u16,
    /// Header digest.
    #[arg(short = 'g', long)]
    pub hdr_digest: bool,
    /// Data digest.
    #[arg(short = 'G', long)]
    pub data_digest: bool,
    #[command(flatten)]
    pub bind: HostBindArgs,
    #[command(flatten)]
    pub auth: AuthArgs,
}

/// DH-HMAC-CHAP secrets (nvme-cli's names), used when a controller asks the host to
/// authenticate. From the environment too, so they need not show in the process list.
#[derive(Args, Clone, Default)]
pub struct AuthArgs {
    /// This host's DH-HMAC-CHAP secret (`DHHC-1:..`, as `nvme gen-dhchap-key` makes it).
    #[arg(short = 'S', long, env = "FABRIK_DHCHAP_SECRET", value_parser = parse_secret, hide_env_values = true)]
    pub dhchap_secret: Option<fabrik_initiator::proto::auth::Secret>,
    /// The controller's secret: the host authenticates the controller too.
    #[arg(short = 'C', long, env = "FABRIK_DHCHAP_CTRL_SECRET", value_parser = parse_secret, hide_env_values = true)]
    pub dhchap_ctrl_secret: Option<fabrik_initiator::proto::auth::Secret>,
    /// TLS 1.3 on every NVMe/TCP queue with this configured PSK (`NVMeTLSkey-1:..`, as `nvme
    /// gen-tls-key` makes it).
    #[arg(long, env = "FABRIK_TLS_KEY", value_parser = parse_tls_key, hide_env_values = true)]
    pub tls_key: Option<ConfiguredPsk>,
    /// The PSK identity version offered: 1 (with the PSK digest) or 0.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub tls_identity: u8,
    /// How the target derives TLS PSKs (its hosts' libnvme): rfc8446, compat or nolength.
    #[arg(long, default_value = "rfc8446", value_parser = parse_label)]
    pub tls_psk_label: LabelEncoding,
}

fn parse_secret(text: &str) -> Result<fabrik_initiator::proto::auth::Secret, String> {
    fabrik_initiator::proto::auth::Secret::parse(text).map_err(|e| e.to_string())
}

pub fn parse_tls_key(text: &str) -> Result<ConfiguredPsk, String> {
    ConfiguredPsk::parse(text).map_err(|e| e.to_string())
}

pub fn parse_label(name: &str) -> Result<LabelEncoding, String> {
    LabelEncoding::from_name(name).ok_or_else(|| "expected rfc8446, compat or nolength".into())
}

impl AuthArgs {
    pub fn apply(&self, opts: &mut ConnectOptions) {
        opts.dhchap_secret = self.dhchap_secret.clone();
        opts.dhchap_ctrl_secret = self.dhchap_ctrl_secret.clone();
        opts.tls = self.tls_key.clone().map(|psk| TlsKey {
            psk,
            identity_version: self.tls_identity,
            label: self.tls_psk_label,
        });
    }
}

/// Where the host's connections leave from (nvme-cli's names).
#[derive(Args, Clone)]
pub struct HostBindArgs {
    /// Local IP address to connect from.
    #[arg(short = 'w', long)]
    pub host_traddr: Option<IpAddr>,
    /// Local network interface to connect through (NVMe/TCP; kernels before 5.7 need CAP_NET_RAW).
    #[arg(short = 'f', long)]
    pub host_iface: Option<String>,
}

impl HostBindArgs {
    pub fn apply(&self, opts: &mut ConnectOptions) {
        opts.host_traddr = self.host_traddr;
        opts.host_iface = self.host_iface.clone();
    }
}

pub async fn resolve(target: &TargetArgs, default_port: u16) -> Result<SocketAddr> {
    resolve_host(&target.traddr, target.trsvcid.unwrap_or(default_port)).await
}

/// The first address of a host name or IP literal (an IPv6 literal may come in brackets).
pub async fn resolve_host(host: &str, port: u16) -> Result<SocketAddr> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    tokio::net::lookup_host((host, port))
        .await
        .with_context(|| format!("resolving {host}"))?
        .next()
        .with_context(|| format!("{host} has no address"))
}

/// The host NQN given with -q, or a random UUID-based one (nvme-cli without /etc/nvme/hostnqn).
pub fn host_identity(hostnqn: Option<String>) -> HostIdentity {
    hostnqn
        .map(HostIdentity::with_nqn)
        .unwrap_or_else(HostIdentity::random)
}

pub fn transport(target: &TargetArgs) -> Result<Transport> {
    parse_transport(&target.transport)
}

/// `-t tcp|rdma`.
pub fn parse_transport(name: &str) -> Result<Transport> {
    name.parse()
        .map_err(|_| anyhow::anyhow!("-t {name}: unknown transport (tcp or rdma)"))
}

pub async fn connect_controller(args: &ConnectArgs) -> Result<Controller> {
    let addr = resolve(&args.target, IO_PORT).await?;
    let mut opts = ConnectOptions::new(addr, &args.nqn);
    if let Some(nqn) = &args.hostnqn {
        opts = opts.with_host(&HostIdentity::with_nqn(nqn));
    }
    opts.transport = transport(&args.target)?;
    opts.io_queues = args.nr_io_queues;
    opts.digests = Digests {
        header: args.hdr_digest,
        data: args.data_digest,
    };
    args.bind.apply(&mut opts);
    args.auth.apply(&mut opts);
    Controller::connect(opts)
        .await
        .with_context(|| format!("connecting to {} at {addr}", args.nqn))
}
