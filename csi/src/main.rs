//! fabrik-csi: the Kubernetes CSI driver for fabrik boxes (controller plugin with `--box`,
//! node plugin with `--node-id`, or both).

#![forbid(unsafe_code)]

use clap::Parser;
use fabrik_csi::boxes::StorageBox;
use fabrik_csi::controller::ControllerService;
use fabrik_csi::node::NodeService;
use std::path::PathBuf;

#[derive(Parser)]
#[command(version, about = "Kubernetes CSI driver for fabrik NVMe-oF boxes")]
struct Args {
    /// The CSI socket: unix:///PATH.
    #[arg(long, env = "CSI_ENDPOINT")]
    endpoint: String,
    /// A box's management API, `URL[,rack=NAME][,drives=FIRST-LAST]` (repeat for each box):
    /// runs the controller. Without drives=, it makes volumes of the box's drives no host may
    /// reach (closed to all) only.
    #[arg(long = "box", value_name = "URL")]
    boxes: Vec<String>,
    /// The boxes' API token.
    #[arg(long, env = "FABRIK_API_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// CA certificates (PEM) to trust for https:// boxes, instead of the system's.
    #[arg(long, env = "FABRIK_API_CA")]
    ca: Option<PathBuf>,
    /// This node's name (or host NQN): runs the node plugin.
    #[arg(long)]
    node_id: Option<String>,
    /// The node's rack (its topology segment `topology.fabrik.io/rack`).
    #[arg(long, requires = "node_id")]
    rack: Option<String>,
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    if let Err(e) = run(Args::parse()).await {
        eprintln!("fabrik-csi: {e:#}");
        std::process::exit(1);
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    let path = fabrik_csi::endpoint_path(&args.endpoint).map_err(anyhow::Error::msg)?;
    if args.boxes.is_empty() && args.node_id.is_none() {
        anyhow::bail!("give --box URL (the controller), --node-id NAME (the node plugin), or both");
    }
    let controller = if args.boxes.is_empty() {
        None
    } else {
        let boxes = args
            .boxes
            .iter()
            .map(|b| StorageBox::parse(b, args.token.clone(), args.ca.as_deref()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(anyhow::Error::msg)?;
        Some(ControllerService::new(boxes))
    };
    let node = match &args.node_id {
        None => None,
        Some(n) => Some(NodeService::new(n, args.rack.clone()).map_err(anyhow::Error::msg)?),
    };
    fabrik_csi::serve(&path, controller, node, stop()).await
}

/// SIGTERM (Kubernetes stopping the pod) or Ctrl-C.
async fn stop() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!("stopping");
}
