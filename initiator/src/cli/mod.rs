//! The `fabrik` subcommands: this file names them and dispatches; each lives in its own file.

mod args;
mod discover;
mod id_ctrl;
mod io_check;
mod place;
mod topo;

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
    /// Show GPUs, RDMA NICs, NVMe controllers and the PCIe/NUMA distance between them.
    Topo(topo::TopoArgs),
    /// Plan which NIC ports, target ports and drives each GPU uses (and connect them).
    Place(place::PlaceArgs),
}

pub async fn run() -> Result<()> {
    match Cli::parse().command {
        Command::Discover(args) => discover::run(args).await,
        Command::IdCtrl(args) => id_ctrl::run(args).await,
        Command::IoCheck(args) => io_check::run(args).await,
        Command::Topo(args) => topo::run(args).await,
        Command::Place(args) => place::run(args).await,
    }
}
