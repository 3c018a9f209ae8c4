//! `fabrik list`: the kernel's NVMe namespaces and controllers, from sysfs, as `nvme list` shows
//! them (with the fabrics address of each controller).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use fabrik_initiator::bench::report::human_bytes;
use fabrik_initiator::host::kernel::{self, SYSFS};

#[derive(Args)]
pub struct ListArgs {
    /// Print as JSON.
    #[arg(long)]
    json: bool,
    /// Where sysfs is.
    #[arg(long, default_value = SYSFS, hide = true)]
    sysfs: PathBuf,
}

pub async fn run(args: ListArgs) -> Result<()> {
    let namespaces = kernel::namespaces(&args.sysfs);
    let controllers = kernel::controllers(&args.sysfs);
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "namespaces": namespaces,
                "controllers": controllers,
            }))?
        );
        return Ok(());
    }
    println!(
        "{:<16} {:<6} {:<12} {:<8} SUBNQN",
        "Node", "NSID", "Size", "Format"
    );
    for ns in &namespaces {
        println!(
            "{:<16} {:<6} {:<12} {:<8} {}",
            format!("/dev/{}", ns.device),
            ns.nsid.map_or("-".into(), |n| n.to_string()),
            human_bytes(ns.size_bytes as f64),
            format!("{} B", ns.lba_size),
            ns.subsysnqn
        );
    }
    println!();
    println!(
        "{:<10} {:<6} {:<8} {:<8} {:<36} SUBNQN",
        "Ctrl", "Trans", "CNTLID", "State", "Address"
    );
    for c in &controllers {
        println!(
            "{:<10} {:<6} {:<8} {:<8} {:<36} {}",
            c.name, c.transport, c.cntlid, c.state, c.address, c.subsysnqn
        );
    }
    Ok(())
}

#[derive(Args)]
pub struct ListSubsysArgs {
    /// Print as JSON.
    #[arg(long)]
    json: bool,
    /// Where sysfs is.
    #[arg(long, default_value = SYSFS, hide = true)]
    sysfs: PathBuf,
}

/// `fabrik list-subsys`: each kernel NVMe subsystem with its paths (controllers), their state
/// and the ANA state of the first namespace through each, as `nvme list-subsys DEVICE` shows.
pub async fn list_subsys(args: ListSubsysArgs) -> Result<()> {
    let subsystems = kernel::subsystems(&args.sysfs);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&subsystems)?);
        return Ok(());
    }
    for s in &subsystems {
        println!("{} - NQN={} (iopolicy {})", s.name, s.nqn, s.iopolicy);
        println!("\\");
        for p in &s.paths {
            let ana = p.ana_state().unwrap_or("");
            println!(
                " +- {} {} {} {} {ana}",
                p.controller, p.transport, p.address, p.state
            );
        }
    }
    Ok(())
}
