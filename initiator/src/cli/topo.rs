//! `fabrik topo`: GPUs, RDMA NICs and NVMe controllers of this machine, the distance class of
//! every pair (as `nvidia-smi topo -m`) and the PCI tree between them.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use fabrik_initiator::topology::{render_matrix, render_tree, to_json, Topology};

#[derive(Args)]
pub struct TopoArgs {
    /// Read this sysfs tree instead of /sys (a fixture, or a copy from another machine).
    #[arg(long, default_value = "/sys")]
    pub sysfs_root: PathBuf,
    /// Print JSON: devices with kind, PCI address, NUMA node, switch; every GPU-NIC and
    /// GPU-NVMe pair with its distance class.
    #[arg(long)]
    pub json: bool,
}

pub fn read(root: &std::path::Path) -> Result<Topology> {
    Topology::read(root).with_context(|| format!("reading the topology under {}", root.display()))
}

pub async fn run(args: TopoArgs) -> Result<()> {
    let topo = read(&args.sysfs_root)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&to_json(&topo))?);
        return Ok(());
    }
    for note in &topo.notes {
        println!("note: {note}");
    }
    if !topo.notes.is_empty() {
        println!();
    }
    print!("{}", render_matrix(&topo));
    println!();
    print!("{}", render_tree(&topo));
    Ok(())
}
