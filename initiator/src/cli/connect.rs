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
    /// Host NQN [default: /etc/nvme/hostnqn, else the kernel's].
    #[arg(short = 'q', long)]
    hostnqn: Option<String>,
    /// Host ID (a UUID) [default: /etc/nvme/hostid, else the kernel's].
    #[arg(short = 'I', long)]
    hostid: Option<String>,
    /// Local address to connect from.
    #[arg(short = 'w', long)]
    host_traddr: Option<String>,
    /// Local interface to connect through.
    #[arg(short = 'f', long)]
    host_iface: Option<String>,
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
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
    /// The fabrics control device.
    #[arg(long, default_value = FABRICS_DEVICE, hide = true)]
    device: PathBuf,
}

pub fn request(args: &ConnectArgs) -> KernelConnect {
    let (file_nqn, file_id) = kernel::default_host();
    KernelConnect {
        transport: args.transport.clone(),
        traddr: args.traddr.clone(),
        trsvcid: args.trsvcid.clone(),
        nqn: args.nqn.clone(),
        hostnqn: args.hostnqn.clone().or(file_nqn),
        hostid: args.hostid.clone().or(file_id),
        nr_io_queues: args.nr_io_queues,
        queue_size: args.queue_size,
        keep_alive_tmo: args.keep_alive_tmo,
        reconnect_delay: args.reconnect_delay,
        ctrl_loss_tmo: args.ctrl_loss_tmo,
        hdr_digest: args.hdr_digest,
        data_digest: args.data_digest,
        host_traddr: args.host_traddr.clone(),
        host_iface: args.host_iface.clone(),
        duplicate_connect: args.duplicate_connect,
        disable_sqflow: args.disable_sqflow,
    }
}

pub async fn run(args: ConnectArgs) -> Result<()> {
    let request = request(&args);
    let device = args.device.clone();
    let connected = tokio::task::spawn_blocking(move || kernel::connect(&device, &request))
        .await?
        .map_err(|e| anyhow!("connect to {} at {}: {e}", args.nqn, args.traddr))?;
    if args.json {
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
