//! `fabrik connect-all`: kernel sessions to every subsystem a discovery controller offers this
//! host, as `nvme connect-all` (the discovery log is read by fabrik's own host, the sessions are
//! the kernel's).

use anyhow::{bail, Context, Result};
use clap::Args;
use fabrik_initiator::host::kernel;
use fabrik_initiator::{discover_all, ConnectOptions, HostIdentity, OfferedSubsystem};

use super::args::{host_identity, parse_transport, resolve_host, DISCOVERY_PORT};
use super::connect::KernelKnobs;

#[derive(Args)]
pub struct ConnectAllArgs {
    /// Transport: tcp, or rdma (discovery by fabrik's userspace host, with the `rdma` build feature).
    #[arg(short = 't', long, default_value = "tcp")]
    transport: String,
    /// Discovery controller address.
    #[arg(short = 'a', long)]
    traddr: String,
    /// Discovery port [default: 8009].
    #[arg(short = 's', long)]
    trsvcid: Option<u16>,
    #[command(flatten)]
    knobs: KernelKnobs,
}

pub async fn run(args: ConnectAllArgs) -> Result<()> {
    let transport = parse_transport(&args.transport)?;
    let addr = resolve_host(&args.traddr, args.trsvcid.unwrap_or(DISCOVERY_PORT)).await?;
    // The discovery log offers what the kernel's host NQN may use: ask as that host.
    let hostnqn = args.knobs.hostnqn.clone().or(kernel::default_host().0);
    let hostnqn = host_identity(hostnqn);
    // Referrals are followed; a subsystem offered on several ports gets a controller on each
    // (the kernel's native multipath makes them one namespace device).
    // The discovery connections leave as the kernel's will (-w/-f).
    let mut opts = ConnectOptions::discovery(addr).with_host(&HostIdentity::with_nqn(&hostnqn.nqn));
    opts.host_traddr = match &args.knobs.host_traddr {
        Some(a) => Some(a.parse().with_context(|| format!("--host-traddr {a:?}"))?),
        None => None,
    };
    opts.host_iface = args.knobs.host_iface.clone();
    opts.transport = transport;
    let targets = discover_all(opts)
        .await
        .with_context(|| format!("discovery at {addr}"))?;
    let mut connected = Vec::new();
    let mut failed = 0;
    for OfferedSubsystem { subnqn, paths } in targets {
        for path in paths {
            let request = args.knobs.request(
                &args.transport,
                &path.ip().to_string(),
                Some(path.port().to_string()),
                &subnqn,
            );
            let device = args.knobs.device.clone();
            let result =
                tokio::task::spawn_blocking(move || kernel::connect(&device, &request)).await?;
            match result {
                Ok(c) => {
                    if !args.knobs.json {
                        println!(
                            "connected: {} (cntlid {}) to {subnqn} at {path}",
                            c.device(),
                            c.cntlid
                        );
                    }
                    connected.push(serde_json::json!({
                        "device": c.device(), "cntlid": c.cntlid, "subnqn": subnqn,
                        "traddr": path.ip().to_string(), "trsvcid": path.port().to_string(),
                    }));
                }
                Err(err) if err.contains("already connected") => {
                    if !args.knobs.json {
                        println!("already connected: {subnqn} at {path}");
                    }
                }
                Err(err) => {
                    eprintln!("{subnqn} at {path}: {err}");
                    failed += 1;
                }
            }
        }
    }
    if args.knobs.json {
        println!("{}", serde_json::to_string_pretty(&connected)?);
    }
    if failed > 0 {
        bail!("{failed} subsystem(s) could not be connected");
    }
    Ok(())
}
