//! `fabrik disconnect`: ends kernel sessions, as `nvme disconnect` does (delete_controller).

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use fabrik_initiator::host::kernel::{self, SYSFS};

#[derive(Args)]
#[command(group = clap::ArgGroup::new("which").required(true).args(["nqn", "device", "all"]))]
pub struct DisconnectArgs {
    /// Every controller of this subsystem.
    #[arg(short = 'n', long)]
    nqn: Option<String>,
    /// These controllers (nvmeN or /dev/nvmeN; comma-separated).
    #[arg(short = 'd', long, value_delimiter = ',')]
    device: Vec<String>,
    /// Every NVMe-oF controller (as `nvme disconnect-all`; PCIe controllers are left alone).
    #[arg(short = 'A', long)]
    all: bool,
    /// Where sysfs is.
    #[arg(long, default_value = SYSFS, hide = true)]
    sysfs: PathBuf,
}

pub async fn run(args: DisconnectArgs) -> Result<()> {
    let names: Vec<String> = match &args.nqn {
        None if args.all => kernel::controllers(&args.sysfs)
            .into_iter()
            .filter(|c| c.transport != "pcie")
            .map(|c| c.name)
            .collect(),
        Some(nqn) => {
            let names: Vec<String> = kernel::controllers(&args.sysfs)
                .into_iter()
                .filter(|c| &c.subsysnqn == nqn)
                .map(|c| c.name)
                .collect();
            if names.is_empty() {
                bail!("no controller of {nqn} is connected");
            }
            names
        }
        None => args
            .device
            .iter()
            .map(|d| d.trim_start_matches("/dev/").to_string())
            .collect(),
    };
    for name in &names {
        kernel::delete_controller(&args.sysfs, name)
            .map_err(|e| anyhow::anyhow!("disconnect {name}: {e}"))?;
    }
    match &args.nqn {
        Some(nqn) => println!("NQN:{nqn} disconnected {} controller(s)", names.len()),
        None if args.all => println!("disconnected {} controller(s)", names.len()),
        None => println!("disconnected {}", names.join(", ")),
    }
    Ok(())
}
