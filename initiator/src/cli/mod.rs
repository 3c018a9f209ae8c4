//! The `fabrik` subcommands: this file names them and dispatches; each lives in its own file.

mod admin;
mod args;
mod discover;
mod id_ctrl;
mod io_check;

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
    /// List fabrikd's drives with health and who may reach them (management API).
    Drives(admin::ListArgs),
    /// Make drives reachable by a host; prints the connect commands (management API).
    Compose(admin::ComposeArgs),
    /// Take composed drives away from a host again (management API).
    Decompose(admin::DecomposeArgs),
    /// List compositions (management API).
    Compositions(admin::ListArgs),
    /// List subsystems, their namespaces and allowed hosts (management API).
    Subsystems(admin::ListArgs),
    /// List live controllers, or disconnect one (management API).
    Controllers(admin::ControllersArgs),
}

pub async fn run() -> Result<()> {
    match Cli::parse().command {
        Command::Discover(args) => discover::run(args).await,
        Command::IdCtrl(args) => id_ctrl::run(args).await,
        Command::IoCheck(args) => io_check::run(args).await,
        Command::Drives(args) => admin::drives(args).await,
        Command::Compose(args) => admin::compose(args).await,
        Command::Decompose(args) => admin::decompose(args).await,
        Command::Compositions(args) => admin::compositions(args).await,
        Command::Subsystems(args) => admin::subsystems(args).await,
        Command::Controllers(args) => admin::controllers(args).await,
    }
}
