//! The `fabrik` subcommands: this file names them and dispatches; each lives in its own file.

/// `println!`/`print!` for every subcommand, ending the process quietly when stdout is a closed
/// pipe (`fabrik drives | head -1`, `... | grep -q`), as Unix tools do, where std's would panic.
/// Defined before the `mod` lines so that they see it.
macro_rules! println {
    () => { $crate::cli::write_stdout(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::cli::write_stdout(format_args!("{}\n", format_args!($($arg)*))) };
}
macro_rules! print {
    ($($arg:tt)*) => { $crate::cli::write_stdout(format_args!($($arg)*)) };
}

mod admin;
mod args;
mod bench;
mod bench_checkpoint;
mod bench_place;
mod bench_sweep;
mod connect;
mod connect_all;
mod disconnect;
mod discover;
mod gpu;
mod hosts;
mod id_ctrl;
mod id_ns;
mod io_check;
mod list;
mod mdns;
mod place;
mod rdma_probe;
mod rw;
mod smart_log;
mod tls_identity;
mod topo;
mod volumes;

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
    /// Benchmark drives (fio-like): throughput, IOPS, latency percentiles, verify mode.
    Bench(Box<bench::BenchArgs>),
    /// Connect a kernel NVMe-oF session (as `nvme connect`): /dev/nvmeXnY appear.
    Connect(connect::ConnectArgs),
    /// Kernel sessions to every subsystem of a discovery log (as `nvme connect-all`).
    ConnectAll(connect_all::ConnectAllArgs),
    /// Disconnect kernel sessions (as `nvme disconnect`).
    Disconnect(disconnect::DisconnectArgs),
    /// List the kernel's NVMe namespaces and controllers (as `nvme list`).
    List(list::ListArgs),
    /// List the kernel's NVMe subsystems with their paths and ANA states (as `nvme list-subsys`).
    ListSubsys(list::ListSubsysArgs),
    /// Identify Namespace over a userspace session.
    IdNs(id_ns::IdNsArgs),
    /// SMART / Health log over a userspace session.
    SmartLog(smart_log::SmartLogArgs),
    /// Read blocks into a file (dd-like) over a userspace session.
    Read(rw::RwArgs),
    /// Write a file to blocks (dd-like) over a userspace session.
    Write(rw::RwArgs),
    /// Print the discovery log of a target.
    Discover(discover::DiscoverArgs),
    /// Connect to a subsystem and print its Identify Controller data.
    IdCtrl(id_ctrl::IdCtrlArgs),
    /// Write random data to blocks, read it back and compare.
    IoCheck(io_check::IoCheckArgs),
    /// Show GPUs, RDMA NICs, NVMe controllers and the PCIe/NUMA distance between them.
    Topo(topo::TopoArgs),
    /// Show the GPUs as the NVIDIA driver sees them and which data path each can use.
    Gpu(gpu::GpuArgs),
    /// Plan which NIC ports, target ports and drives each GPU uses (and connect them).
    Place(place::PlaceArgs),
    /// List fabrikd's drives with health and who may reach them (management API).
    Drives(admin::ListArgs),
    /// The PSK identity and TLS PSK a kernel host's keyring needs for TLS to a subsystem.
    TlsIdentity(tls_identity::TlsIdentityArgs),
    /// List hosts, or register one and set its DH-HMAC-CHAP keys (management API).
    Hosts(hosts::HostsArgs),
    /// Make drives reachable by a host; prints the connect commands (management API).
    Compose(admin::ComposeArgs),
    /// Take composed drives away from a host again (management API).
    Decompose(admin::DecomposeArgs),
    /// List compositions (management API).
    Compositions(admin::ListArgs),
    /// List protected volumes (RAID), or make, fail a member of, delete one (management API).
    Volumes(volumes::VolumesArgs),
    /// List subsystems, their namespaces and allowed hosts (management API).
    Subsystems(admin::ListArgs),
    /// List live controllers, or disconnect one (management API).
    Controllers(admin::ControllersArgs),
    /// Let a drive that lost a write (HEALTH read_only) take writes again (management API).
    ClearFault(admin::ClearFaultArgs),
    /// List ANA groups and their states, or set one (management API).
    AnaGroups(admin::AnaGroupsArgs),
    /// Show this I/O module, or put it into maintenance and back (management API).
    Module(admin::ModuleArgs),
    /// List the boxes and hosts registered with a central discovery controller (its
    /// management API).
    Cdc(admin::ListArgs),
    /// List the discovery controllers (boxes, central discovery controllers) announced over
    /// mDNS (`_nvme-disc._tcp`).
    Mdns(mdns::MdnsArgs),
    /// Bad input over NVMe/RDMA against a target (for its tests).
    #[command(hide = true)]
    RdmaProbe(rdma_probe::RdmaProbeArgs),
}

pub async fn run() -> Result<()> {
    match Cli::parse().command {
        Command::Bench(args) => bench::run(*args).await,
        Command::Connect(args) => connect::run(args).await,
        Command::ConnectAll(args) => connect_all::run(args).await,
        Command::Disconnect(args) => disconnect::run(args).await,
        Command::List(args) => list::run(args).await,
        Command::ListSubsys(args) => list::list_subsys(args).await,
        Command::IdNs(args) => id_ns::run(args).await,
        Command::SmartLog(args) => smart_log::run(args).await,
        Command::Read(args) => rw::read(args).await,
        Command::Write(args) => rw::write(args).await,
        Command::Discover(args) => discover::run(args).await,
        Command::IdCtrl(args) => id_ctrl::run(args).await,
        Command::IoCheck(args) => io_check::run(args).await,
        Command::Topo(args) => topo::run(args).await,
        Command::Gpu(args) => gpu::run(args).await,
        Command::Place(args) => place::run(args).await,
        Command::Drives(args) => admin::drives(args).await,
        Command::Hosts(args) => hosts::run(args).await,
        Command::Volumes(args) => volumes::run(args).await,
        Command::Cdc(args) => admin::cdc(args).await,
        Command::Mdns(args) => mdns::run(args).await,
        Command::TlsIdentity(args) => tls_identity::run(args).await,
        Command::Compose(args) => admin::compose(args).await,
        Command::Decompose(args) => admin::decompose(args).await,
        Command::Compositions(args) => admin::compositions(args).await,
        Command::Subsystems(args) => admin::subsystems(args).await,
        Command::Controllers(args) => admin::controllers(args).await,
        Command::ClearFault(args) => admin::clear_fault(args).await,
        Command::AnaGroups(args) => admin::ana_groups(args).await,
        Command::Module(args) => admin::module(args).await,
        Command::RdmaProbe(args) => rdma_probe::run(args).await,
    }
}

/// Writes to stdout; a reader that went away ends the process with status 0, any other write
/// error with status 1 and a message.
pub fn write_stdout(args: std::fmt::Arguments) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}
