//! `fabrik place`: which NIC ports, target ports and drives each GPU should use, the ceiling it
//! can expect and what limits it; `--apply` composes the drives to this host through the box's
//! REST API and connects them with the kernel's `nvme connect` (or fabrik's userspace host).

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;

use fabrik_initiator::placement::apply::{self as apply_plan, connections};
use fabrik_initiator::placement::{
    nvme_connect_args, plan, BoxInventory, PlaceOptions, Plan, Warning,
};
use fabrik_initiator::topology::{PciAddr, Topology};
use fabrik_initiator::{discover, HostIdentity};

use super::args::{host_identity, resolve_host, DISCOVERY_PORT};

/// What a placement plan is made from: this machine's PCI topology, the box's ports and drives,
/// and how the drives are dealt out. `fabrik place` and `fabrik bench --gpu` share them, so
/// both make the same plan from the same options.
#[derive(Args, Clone)]
pub struct PlanArgs {
    /// Read this sysfs tree instead of /sys.
    #[arg(long, default_value = "/sys")]
    pub sysfs_root: PathBuf,
    /// The box's ports and drives as JSON:
    /// {"ports":[{"trtype":"rdma","traddr":"10.0.0.1","trsvcid":4420}],"drives":[{"nqn":"...","gbytes_per_sec":6.8}]}.
    #[arg(long = "box", value_name = "FILE", conflicts_with = "discover")]
    pub box_file: Option<PathBuf>,
    /// The box's management API (fabrikd's REST API, e.g. http://box:8080): the box's ports and
    /// drives when neither --box nor --discover is given, and where `place --apply` composes
    /// the drives.
    #[arg(long, env = "FABRIK_API", value_name = "URL")]
    pub api: Option<String>,
    /// API token for --api over HTTP [default: the api-token file in $FABRIK_DATA_DIR,
    /// /var/lib/fabrik or ~/.local/share/fabrik].
    #[arg(long, env = "FABRIK_API_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Or: ask the discovery controller at this address for the ports and drives: a box's, or a
    /// central discovery controller's (`fabrikd --role cdc`), which lists every box it knows,
    /// each drive reached through its own box's ports.
    #[arg(long, value_name = "ADDR")]
    pub discover: Option<String>,
    /// Port of the discovery controller.
    #[arg(long, default_value_t = DISCOVERY_PORT)]
    pub discover_port: u16,
    /// Drives per GPU (default: all drives, dealt out in turn).
    #[arg(long)]
    pub drives_per_gpu: Option<usize>,
    /// GB/s wanted per GPU: a GPU below it may borrow further ports, with a warning.
    #[arg(long, value_name = "GB/s")]
    pub goal: Option<f64>,
    /// Prefix length that makes a NIC port and a box port one network (default 24 for IPv4,
    /// 64 for IPv6): NIC ports with no box port on their network are not used.
    #[arg(long, value_name = "BITS", value_parser = clap::value_parser!(u32).range(0..=128))]
    pub subnet_bits: Option<u32>,
    /// Read rate of each drive in GB/s, for drives the box does not give one.
    #[arg(long, value_name = "GB/s")]
    pub drive_gbps: Option<f64>,
}

impl PlanArgs {
    /// The plan for `gpus` (None: every GPU of `topo`) over the box's inventory; `hostnqn` is
    /// the host NQN discovery asks as (None: a random one).
    pub async fn plan(
        &self,
        topo: &Topology,
        gpus: Option<Vec<PciAddr>>,
        hostnqn: Option<&str>,
    ) -> Result<Plan> {
        let mut inventory = self.inventory(hostnqn).await?;
        if let Some(rate) = self.drive_gbps {
            for d in inventory
                .drives
                .iter_mut()
                .filter(|d| d.gbytes_per_sec.is_none())
            {
                d.gbytes_per_sec = Some(rate);
            }
        }
        let opts = PlaceOptions {
            gpus,
            drives_per_gpu: self.drives_per_gpu,
            bandwidth_goal: self.goal,
            subnet_bits: self.subnet_bits,
        };
        Ok(plan(topo, &inventory, &opts)?)
    }

    async fn inventory(&self, hostnqn: Option<&str>) -> Result<BoxInventory> {
        if let Some(path) = &self.box_file {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            return serde_json::from_str(&text)
                .with_context(|| format!("{} is not a box description", path.display()));
        }
        if let Some(traddr) = &self.discover {
            let addr = resolve_host(traddr, self.discover_port).await?;
            let host = host_identity(hostnqn.map(str::to_string));
            let log = discover(addr, &host.nqn)
                .await
                .with_context(|| format!("discovery at {addr}"))?;
            return Ok(BoxInventory::from_discovery(&log.entries));
        }
        if let Some(url) = &self.api {
            let client = super::admin::api_client(Some(url), self.token.clone())?;
            let ports = client
                .ports()
                .await
                .context("the box's ports from its API")?;
            let drives = client
                .drives()
                .await
                .context("the box's drives from its API")?;
            return Ok(BoxInventory::from_api(&ports, &drives, api_host(url)));
        }
        Ok(BoxInventory::default())
    }
}

#[derive(Args)]
pub struct PlaceArgs {
    #[command(flatten)]
    plan: PlanArgs,
    /// GPUs to place for: indices (nvidia-smi order) or PCI addresses, comma separated.
    #[arg(long, value_delimiter = ',')]
    gpus: Vec<String>,
    /// Print the plan as JSON.
    #[arg(long)]
    json: bool,
    /// Compose the plan's drives to this host at the box's API (--api), then connect every
    /// drive with `nvme connect --host-traddr/--host-iface`.
    #[arg(long)]
    apply: bool,
    /// With --apply: print the composition request and the commands instead of running them.
    #[arg(long, requires = "apply")]
    dry_run: bool,
    /// With --apply: connect with fabrik's own userspace host instead of the kernel's, reading
    /// one block of each drive to prove the connection (the source address is not bound).
    #[arg(long, requires = "apply")]
    userspace: bool,
    /// With --apply: do not compose; the drives are already exported to this host (a box
    /// without the REST API, e.g. a Linux nvmet target).
    #[arg(long, requires = "apply")]
    no_compose: bool,
    /// Host NQN for discovery, the composition and the connections (default: nvme-cli's
    /// /etc/nvme/hostnqn).
    #[arg(short = 'q', long)]
    hostnqn: Option<String>,
}

pub async fn run(args: PlaceArgs) -> Result<()> {
    let topo = super::topo::read(&args.plan.sysfs_root)?;
    let gpus = select_gpus(&topo, &args.gpus)?;
    let plan = args.plan.plan(&topo, gpus, args.hostnqn.as_deref()).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&plan)?);
    } else {
        for note in &topo.notes {
            println!("note: {note}");
        }
        print!("{}", render(&plan));
    }
    if args.apply {
        apply(&args, &plan).await?;
    }
    Ok(())
}

/// The host part of an API URL (`http://[fd00::1]:8080/x` -> `fd00::1`): the box's address for
/// the ports it lists with a wildcard address.
fn api_host(url: &str) -> Option<&str> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next()?;
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next()?,
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    (!host.is_empty()).then_some(host)
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
            let _ = writeln!(s, "  drive {c}");
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

/// The host NQN for the composition and the connections: `-q`, or nvme-cli's.
fn host_nqn(given: Option<&str>) -> Result<String> {
    if let Some(n) = given {
        return Ok(n.to_string());
    }
    let path = "/etc/nvme/hostnqn";
    let nqn = std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    if nqn.is_empty() {
        bail!("--apply needs this host's NQN to compose the drives to: give -q NQN (no {path})");
    }
    Ok(nqn)
}

/// Composes the plan's drives to this host (unless --no-compose), then makes one connection
/// per planned drive: the kernel's `nvme connect`, or a userspace session that reads a block.
async fn apply(args: &PlaceArgs, plan: &Plan) -> Result<()> {
    if connections(plan).next().is_none() {
        bail!("the plan connects no drive: nothing to apply");
    }
    let hostnqn = match (args.no_compose, args.userspace) {
        (true, false) => args.hostnqn.clone(),
        _ => Some(host_nqn(args.hostnqn.as_deref())?),
    };
    let mut composition = None;
    if !args.no_compose {
        let Some(url) = &args.plan.api else {
            bail!(
                "--apply composes the drives at the box's REST API: give --api URL (or FABRIK_API), \
                 or --no-compose when they are already exported to this host"
            );
        };
        let nqn = hostnqn.as_deref().expect("composing needs the host NQN");
        if args.dry_run {
            let client = super::admin::api_client(Some(url), args.plan.token.clone())?;
            let cp = apply_plan::composition_plan(&client, plan, nqn).await?;
            for c in &cp.existing {
                println!("already composed to {nqn}: composition {}", c.id);
            }
            if let Some(req) = &cp.request {
                println!(
                    "would compose: POST {}/api/v1/compositions {}",
                    url.trim_end_matches('/'),
                    serde_json::to_string(req)?
                );
            }
        } else {
            let client = super::admin::api_client(Some(url), args.plan.token.clone())?;
            let (new, cp) = apply_plan::compose(&client, plan, nqn).await?;
            for c in &cp.existing {
                println!(
                    "already composed to {nqn}: composition {} ({} drive(s))",
                    c.id,
                    c.drives.len()
                );
            }
            let mut all: Vec<&_> = cp.existing.iter().collect();
            if let Some(comp) = &new {
                println!(
                    "composed {} drive(s) to {nqn}: composition {}",
                    comp.drives.len(),
                    comp.id
                );
                all.push(comp);
            }
            for c in apply_plan::unconfirmed(plan, &all) {
                println!(
                    "note: the box's answer lists no port {} {}:{} for {}: connecting anyway",
                    c.target.trtype.as_str(),
                    c.target.traddr,
                    c.target.trsvcid,
                    c.nqn
                );
            }
            composition = new.map(|c| c.id);
        }
    }
    let result = if args.userspace {
        connect_userspace(plan, hostnqn.as_deref().expect("set above"), args.dry_run).await
    } else {
        connect_kernel(plan, hostnqn.as_deref(), args.dry_run)
    };
    match (result, composition) {
        (Err(e), Some(id)) => Err(e.context(format!(
            "composition {id} stays in place (`fabrik decompose {id}` takes it back)"
        ))),
        (r, _) => r,
    }
}

/// Runs (or prints) one userspace session per connection of the plan, each proven by a read.
async fn connect_userspace(plan: &Plan, hostnqn: &str, dry_run: bool) -> Result<()> {
    let host = HostIdentity::with_nqn(hostnqn);
    let mut failed = Vec::new();
    for c in connections(plan) {
        let what = format!(
            "{} {}:{} {} as {hostnqn}",
            c.target.trtype.as_str(),
            c.target.traddr,
            c.target.trsvcid,
            c.nqn
        );
        if dry_run {
            println!("would connect (userspace) {what} and read one block");
            continue;
        }
        match apply_plan::check_session(c, &host).await {
            Ok(s) => println!(
                "connected (userspace) {what}: read {} bytes of namespace {}",
                s.bytes_read, s.nsid
            ),
            Err(e) => {
                println!("failed (userspace) {what}: {e}");
                failed.push(format!("{} ({e})", c.nqn));
            }
        }
    }
    if !failed.is_empty() {
        bail!("userspace connect failed for {}", failed.join(", "));
    }
    Ok(())
}

/// Runs (or prints) one kernel `nvme connect` per connection of the plan.
fn connect_kernel(plan: &Plan, hostnqn: Option<&str>, dry_run: bool) -> Result<()> {
    let mut failed = Vec::new();
    for c in connections(plan) {
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

#[cfg(test)]
mod tests {
    use super::api_host;

    #[test]
    fn host_of_api_url() {
        assert_eq!(api_host("http://10.0.0.1:8080"), Some("10.0.0.1"));
        assert_eq!(api_host("http://box.example/"), Some("box.example"));
        assert_eq!(api_host("http://[fd00::1]:8080/api"), Some("fd00::1"));
        assert_eq!(api_host("box:8080"), Some("box"));
        assert_eq!(api_host("http://"), None);
    }
}
