//! `fabrik place`: which NIC ports, target ports and drives each GPU should use, the ceiling it
//! can expect and what limits it; `--apply` connects the drives with the kernel's `nvme connect`.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use fabrik_initiator::placement::{
    nvme_connect_args, plan, BoxInventory, PlaceOptions, Plan, Warning,
};
use fabrik_initiator::topology::{PciAddr, Topology};
use fabrik_initiator::{discover, HostIdentity};

use super::args::{resolve, TargetArgs, DISCOVERY_PORT};

#[derive(Args)]
pub struct PlaceArgs {
    /// Read this sysfs tree instead of /sys.
    #[arg(long, default_value = "/sys")]
    sysfs_root: PathBuf,
    /// The box's ports and drives as JSON:
    /// {"ports":[{"trtype":"rdma","traddr":"10.0.0.1","trsvcid":4420}],"drives":[{"nqn":"...","gbytes_per_sec":6.8}]}.
    #[arg(long = "box", value_name = "FILE", conflicts_with = "discover")]
    box_file: Option<PathBuf>,
    /// Or: ask the box's discovery controller at this address for its ports and drives.
    #[arg(long, value_name = "ADDR")]
    discover: Option<String>,
    /// Port of the discovery controller.
    #[arg(long, default_value_t = DISCOVERY_PORT)]
    discover_port: u16,
    /// GPUs to place for: indices (nvidia-smi order) or PCI addresses, comma separated.
    #[arg(long, value_delimiter = ',')]
    gpus: Vec<String>,
    /// Drives per GPU (default: all drives, dealt out in turn).
    #[arg(long)]
    drives_per_gpu: Option<usize>,
    /// GB/s wanted per GPU: a GPU below it may borrow further ports, with a warning.
    #[arg(long, value_name = "GB/s")]
    goal: Option<f64>,
    /// Prefix length that makes a NIC port and a box port one network (default 24 for IPv4,
    /// 64 for IPv6): NIC ports with no box port on their network are not used.
    #[arg(long, value_name = "BITS", value_parser = clap::value_parser!(u32).range(0..=128))]
    subnet_bits: Option<u32>,
    /// Read rate of each drive in GB/s, for drives the box does not give one.
    #[arg(long, value_name = "GB/s")]
    drive_gbps: Option<f64>,
    /// Print the plan as JSON.
    #[arg(long)]
    json: bool,
    /// Connect every drive of the plan with `nvme connect --host-traddr/--host-iface`.
    #[arg(long)]
    apply: bool,
    /// With --apply: print the `nvme connect` commands instead of running them.
    #[arg(long, requires = "apply")]
    dry_run: bool,
    /// Host NQN for discovery and `nvme connect` (default: nvme-cli's /etc/nvme/hostnqn).
    #[arg(short = 'q', long)]
    hostnqn: Option<String>,
}

pub async fn run(args: PlaceArgs) -> Result<()> {
    let topo = super::topo::read(&args.sysfs_root)?;
    let mut inventory = load_inventory(&args).await?;
    if let Some(rate) = args.drive_gbps {
        for d in inventory
            .drives
            .iter_mut()
            .filter(|d| d.gbytes_per_sec.is_none())
        {
            d.gbytes_per_sec = Some(rate);
        }
    }
    let opts = PlaceOptions {
        gpus: select_gpus(&topo, &args.gpus)?,
        drives_per_gpu: args.drives_per_gpu,
        bandwidth_goal: args.goal,
        subnet_bits: args.subnet_bits,
    };
    let plan = plan(&topo, &inventory, &opts)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&plan)?);
    } else {
        for note in &topo.notes {
            println!("note: {note}");
        }
        print!("{}", render(&plan));
    }
    if args.apply {
        apply(&plan, args.hostnqn.as_deref(), args.dry_run)?;
    }
    Ok(())
}

async fn load_inventory(args: &PlaceArgs) -> Result<BoxInventory> {
    if let Some(path) = &args.box_file {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        return serde_json::from_str(&text)
            .with_context(|| format!("{} is not a box description", path.display()));
    }
    if let Some(traddr) = &args.discover {
        let target = TargetArgs {
            transport: "tcp".into(),
            traddr: traddr.clone(),
            trsvcid: Some(args.discover_port),
        };
        let addr = resolve(&target, DISCOVERY_PORT).await?;
        let host = args
            .hostnqn
            .clone()
            .map(HostIdentity::with_nqn)
            .unwrap_or_else(HostIdentity::random);
        let log = discover(addr, &host.nqn)
            .await
            .with_context(|| format!("discovery at {addr}"))?;
        return Ok(BoxInventory::from_discovery(&log.entries));
    }
    Ok(BoxInventory::default())
}

fn select_gpus(topo: &Topology, wanted: &[String]) -> Result<Option<Vec<PciAddr>>> {
    if wanted.is_empty() {
        return Ok(None);
    }
    let all: Vec<PciAddr> = topo.gpus().map(|g| g.addr).collect();
    let mut out = Vec::new();
    for w in wanted {
        let addr = match w.parse::<usize>() {
            Ok(i) => *all
                .get(i)
                .with_context(|| format!("GPU{i}: this machine has {} GPUs", all.len()))?,
            Err(_) => w.parse::<PciAddr>().map_err(anyhow::Error::msg)?,
        };
        out.push(addr);
    }
    Ok(Some(out))
}

fn render(plan: &Plan) -> String {
    let mut s = String::new();
    let warn = |s: &mut String, w: &Warning| {
        let _ = writeln!(s, "  warning: {}", w.message);
    };
    if !plan.gpus.is_empty() {
        let _ = writeln!(
            s,
            "{:<5} {:<13} {:<4} {:<6} {:<6} {:>9}  BOTTLENECK",
            "GPU", "PCI", "NUMA", "PORTS", "DRIVES", "GB/s"
        );
        for g in &plan.gpus {
            let _ = writeln!(
                s,
                "{:<5} {:<13} {:<4} {:<6} {:<6} {:>9.1}  {}",
                format!("GPU{}", g.gpu),
                g.pci.to_string(),
                g.numa_node.map_or("?".into(), |n| n.to_string()),
                g.ports.len(),
                g.connections.len(),
                g.ceiling.gbytes_per_sec,
                g.ceiling.bottleneck
            );
        }
        let _ = writeln!(s, "total ceiling {:.1} GB/s\n", plan.total_gbytes_per_sec);
    }
    for g in &plan.gpus {
        let _ = writeln!(
            s,
            "GPU{} {} {} (NUMA {}, switch {})",
            g.gpu,
            g.pci,
            g.name.as_deref().unwrap_or(""),
            g.numa_node.map_or("?".into(), |n| n.to_string()),
            g.switch.map_or("none".into(), |a| a.to_string())
        );
        let terms: Vec<String> = g
            .ceiling
            .terms
            .iter()
            .map(|t| format!("{} {:.1}", t.bottleneck, t.gbytes_per_sec))
            .collect();
        let _ = writeln!(
            s,
            "  ceiling {:.1} GB/s, limited by {} ({})",
            g.ceiling.gbytes_per_sec,
            g.ceiling.bottleneck,
            terms.join(", ")
        );
        for p in &g.ports {
            let addrs: Vec<String> = p.source_addrs.iter().map(|a| a.to_string()).collect();
            let _ = writeln!(
                s,
                "  port {}/{} {} {} {:.1} GB/s{}{} src {}",
                p.rdma,
                p.port,
                p.netdev.as_deref().unwrap_or("-"),
                p.distance,
                p.gbytes_per_sec,
                if p.shared_with.is_empty() {
                    ""
                } else {
                    " shared"
                },
                if p.borrowed { " borrowed" } else { "" },
                if addrs.is_empty() {
                    "-".into()
                } else {
                    addrs.join(",")
                }
            );
        }
        for c in &g.connections {
            let _ = writeln!(
                s,
                "  drive {} via {}/{} {} -> {} {}:{}",
                c.nqn,
                c.rdma,
                c.port,
                c.host_traddr.map_or("-".into(), |a| a.to_string()),
                c.target.trtype.as_str(),
                c.target.traddr,
                c.target.trsvcid
            );
        }
        for w in &g.warnings {
            warn(&mut s, w);
        }
    }
    for w in &plan.warnings {
        let _ = writeln!(s, "warning: {}", w.message);
    }
    if !plan.unused_ports.is_empty() {
        let _ = writeln!(s, "unused NIC ports: {}", plan.unused_ports.join(" "));
    }
    if !plan.unassigned_drives.is_empty() {
        let _ = writeln!(s, "drives not placed: {}", plan.unassigned_drives.len());
    }
    s
}

/// Runs (or prints) one kernel `nvme connect` per connection of the plan. Composing the drives
/// to this host through the box's REST API is not done here yet: they must already be exported
/// to this host's NQN.
fn apply(plan: &Plan, hostnqn: Option<&str>, dry_run: bool) -> Result<()> {
    println!(
        "note: --apply does not compose drives through the box's REST API yet; \
         they must already be exported to this host"
    );
    let mut failed = Vec::new();
    for c in plan.gpus.iter().flat_map(|g| &g.connections) {
        let args = nvme_connect_args(c, hostnqn);
        if dry_run {
            println!("nvme {}", args.join(" "));
            continue;
        }
        let status = std::process::Command::new("nvme")
            .args(&args)
            .status()
            .context("running nvme (nvme-cli)")?;
        if !status.success() {
            failed.push(format!("{} ({status})", c.nqn));
        }
    }
    if !failed.is_empty() {
        bail!("nvme connect failed for {}", failed.join(", "));
    }
    Ok(())
}
