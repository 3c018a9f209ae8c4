//! The `fabrik` subcommands: this file names them and dispatches; each lives in its own file.

mod args;
mod discover;
mod id_ctrl;
mod io_check;
mod rdma_probe;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "fabrik", version, about = "NVMe over Fabrics host tools")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the discovery log of a target.
    Discover(discover::DiscoverArgs),
    /// Connect to a subsystem and print its Identify Controller data.
    IdCtrl(id_ctrl::IdCtrlArgs),
    /// Write random data to blocks, read it back and compare.
    IoCheck(io_check::IoCheckArgs),
    /// Bad input over NVMe/RDMA against a target (for its tests).
    #[command(hide = true)]
    RdmaProbe(rdma_probe::RdmaProbeArgs),
}

pub async fn run() -> Result<()> {
    match Cli::parse().command {
        Command::Discover(args) => discover::run(args).await,
        Command::IdCtrl(args) => id_ctrl::run(args).await,
        Command::IoCheck(args) => io_check::run(args).await,
        Command::RdmaProbe(args) => rdma_probe::run(args).await,
    }
}
