//! `fabrik connect`: a kernel NVMe-oF session, as `nvme connect` makes it (the option string
//! written to /dev/nvme-fabrics); the namespaces then appear as /dev/nvmeXnY.

use std::path::PathBuf;

use anyhow::{anyhow, Result};
use clap::Args;
use fabrik_initiator::host::kernel::{self, KernelConnect, FABRICS_DEVICE};

#[derive(Args)]
pub struct ConnectArgs {
    /// Transport: tcp or rdma.
    #[arg(short = 't', long, default_value = "tcp")]
    transport: String,
    /// Target address.
    #[arg(short = 'a', long)]
    traddr: String,
    /// Target port [default: the kernel's, 4420].
    #[arg(short = 's', long)]
    trsvcid: Option<String>,
    /// Subsystem NQN.
    #[arg(short = 'n', long)]
    nqn: String,
    #[command(flatten)]
    pub knobs: KernelKnobs,
}

/// The options of a kernel connection besides where it goes (shared with connect-all).
#[derive(Args, Clone)]
pub struct KernelKnobs {
    /// Host NQN [default: /etc/nvme/hostnqn, else the kernel's].
    #[arg(short = 'q', long)]
    pub hostnqn: Option<String>,
    /// Host ID (a UUID) [default: /etc/nvme/hostid, else the kernel's].
    #[arg(short = 'I', long)]
    hostid: Option<String>,
    /// Local address to connect from.
    #[arg(short = 'w', long)]
    pub host_traddr: Option<String>,
    /// Local interface to connect through.
    #[arg(short = 'f', long)]
    pub host_iface: Option<String>,
    /// I/O queues [default: one per CPU].
    #[arg(short = 'i', long)]
    nr_io_queues: Option<u32>,
    /// Entries per I/O queue.
    #[arg(short = 'Q', long)]
    queue_size: Option<u32>,
    /// Keep-alive timeout, seconds.
    #[arg(short = 'k', long)]
    keep_alive_tmo: Option<u32>,
    /// Seconds between reconnect attempts.
    #[arg(short = 'c', long)]
    reconnect_delay: Option<u32>,
    /// Seconds before a lost controller is given up (-1: never).
    #[arg(short = 'l', long, allow_negative_numbers = true)]
    ctrl_loss_tmo: Option<i32>,
    /// Header digest.
    #[arg(short = 'g', long)]
    hdr_digest: bool,
    /// Data digest.
    #[arg(short = 'G', long)]
    data_digest: bool,
    /// Connect even if a controller to the same subsystem and host exists.
    #[arg(short = 'D', long)]
    duplicate_connect: bool,
    /// Disable SQ flow control.
    #[arg(short = 'd', long)]
    disable_sqflow: bool,
    /// TLS 1.3 (NVMe/TCP, kernel 6.7 on, tlshd running): the kernel looks the PSK up in its
    /// `.nvme` keyring by identity (`fabrik tls-identity` derives what to insert).
    #[arg(long)]
    tls: bool,
    #[command(flatten)]
    pub auth: super::args::AuthArgs,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// The fabrics control device.
    #[arg(long, default_value = FABRICS_DEVICE, hide = true)]
    pub device: PathBuf,
}

impl KernelKnobs {
    /// The connect request for `nqn` at `traddr`/`trsvcid` over `transport`.
    pub fn request(
        &self,
        transport: &str,
        traddr: &str,
        trsvcid: Option<String>,
        nqn: &str,
    ) -> KernelConnect {
        let (file_nqn, file_id) = kernel::default_host();
        KernelConnect {
            transport: transport.into(),
            traddr: traddr.into(),
            trsvcid,
            nqn: nqn.into(),
            hostnqn: self.hostnqn.clone().or(file_nqn),
            hostid: self.hostid.clone().or(file_id),
            nr_io_queues: self.nr_io_queues,
            queue_size: self.queue_size,
            keep_alive_tmo: self.keep_alive_tmo,
            reconnect_delay: self.reconnect_delay,
            ctrl_loss_tmo: self.ctrl_loss_tmo,
            hdr_digest: self.hdr_digest,
            data_digest: self.data_digest,
            host_traddr: self.host_traddr.clone(),
            host_iface: self.host_iface.clone(),
            duplicate_connect: self.duplicate_connect,
            disable_sqflow: self.disable_sqflow,
            tls: self.tls,
            dhchap_secret: self.auth.dhchap_secret.clone(),
            dhchap_ctrl_secret: self.auth.dhchap_ctrl_secret.clone(),
        }
    }
}

pub async fn run(args: ConnectArgs) -> Result<()> {
    if args.knobs.auth.tls_key.is_some() {
        anyhow::bail!(
            "the kernel takes its TLS PSK from its keyring, not from --tls-key: insert it \
             (fabrik tls-identity, keyctl padd psk) and give --tls"
        );
    }
    let request = args.knobs.request(
        &args.transport,
        &args.traddr,
        args.trsvcid.clone(),
        &args.nqn,
    );
    let device = args.knobs.device.clone();
    let connected = tokio::task::spawn_blocking(move || kernel::connect(&device, &request))
        .await?
        .map_err(|e| anyhow!("connect to {} at {}: {e}", args.nqn, args.traddr))?;
    if args.knobs.json {
        println!(
            "{}",
            serde_json::json!({
                "device": connected.device(),
                "instance": connected.instance,
                "cntlid": connected.cntlid,
            })
        );
    } else {
        println!(
            "connected: {} (cntlid {}) to {}",
            connected.device(),
            connected.cntlid,
            args.nqn
        );
    }
    Ok(())
}
