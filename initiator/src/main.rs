//! `fabrik`: the NVMe-oF host command line. For now: discover, id-ctrl and io-check.

use std::net::SocketAddr;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use clap::{Args, Parser, Subcommand};
use fabrik_initiator::proto::fabrics::discovery::{adrfam, subtype, trtype, DiscoveryLogEntry};
use fabrik_initiator::proto::tcp::Digests;
use fabrik_initiator::{discover, ConnectOptions, Controller, HostIdentity};

#[derive(Parser)]
#[command(name = "fabrik", version, about = "NVMe over Fabrics host tools")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the discovery log of a target.
    Discover {
        #[command(flatten)]
        target: TargetArgs,
        /// Host NQN (default: a random UUID-based NQN).
        #[arg(short = 'q', long)]
        hostnqn: Option<String>,
    },
    /// Connect to a subsystem and print its Identify Controller data.
    IdCtrl {
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// Write random data to blocks, read it back and compare.
    IoCheck {
        #[command(flatten)]
        connect: ConnectArgs,
        /// Namespace.
        #[arg(long, default_value_t = 1)]
        nsid: u32,
        /// First block.
        #[arg(long, default_value_t = 0)]
        slba: u64,
        /// Blocks to write and verify.
        #[arg(short = 'c', long, default_value_t = 256)]
        blocks: u32,
    },
}

#[derive(Args)]
struct TargetArgs {
    /// Target address (IP or host name).
    #[arg(short = 'a', long)]
    traddr: String,
    /// Port (default 8009 for discovery, 4420 otherwise).
    #[arg(short = 's', long)]
    trsvcid: Option<u16>,
}

#[derive(Args)]
struct ConnectArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// Subsystem NQN.
    #[arg(short = 'n', long)]
    nqn: String,
    /// Host NQN (default: a random UUID-based NQN).
    #[arg(short = 'q', long)]
    hostnqn: Option<String>,
    /// I/O queues to ask for.
    #[arg(short = 'i', long, default_value_t = 1)]
    nr_io_queues: u16,
    /// Header digest.
    #[arg(short = 'g', long)]
    hdr_digest: bool,
    /// Data digest.
    #[arg(short = 'G', long)]
    data_digest: bool,
}

/// Default ports of `nvme discover` and `nvme connect` (NVMEOF-FACTS 1.11).
const DISCOVERY_PORT: u16 = 8009;
const IO_PORT: u16 = 4420;

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Discover { target, hostnqn } => {
            let addr = resolve(&target, DISCOVERY_PORT).await?;
            let host = hostnqn
                .map(HostIdentity::with_nqn)
                .unwrap_or_else(HostIdentity::random);
            let log = discover(addr, &host.nqn)
                .await
                .with_context(|| format!("discovery at {addr}"))?;
            println!(
                "Discovery log, generation {}, {} records",
                log.genctr,
                log.entries.len()
            );
            print_discovery_table(&log.entries);
        }
        Command::IdCtrl { connect } => {
            let ctrl = connect_controller(&connect).await?;
            let id = ctrl.identity();
            println!("cntlid    : {}", id.cntlid);
            println!("sn        : {}", id.serial);
            println!("mn        : {}", id.model);
            println!("fr        : {}", id.firmware);
            println!("subnqn    : {}", id.subnqn);
            let vs = ctrl.version();
            println!(
                "ver       : {}.{}.{}",
                vs >> 16,
                (vs >> 8) & 0xff,
                vs & 0xff
            );
            println!("cntrltype : {}", id.cntrltype);
            println!("mdts      : {}", id.mdts);
            println!("kas       : {}", id.kas);
            println!("maxcmd    : {}", id.maxcmd);
            println!("nn        : {}", id.nn);
            println!("oncs      : {:#06x}", id.oncs);
            println!("vwc       : {:#04x}", id.vwc);
            println!("sgls      : {:#010x}", id.sgls);
            println!("ioccsz    : {}", id.ioccsz);
            println!("iorcsz    : {}", id.iorcsz);
            println!("namespaces: {:?}", ctrl.active_namespaces().await?);
            ctrl.shutdown().await?;
        }
        Command::IoCheck {
            connect,
            nsid,
            slba,
            blocks,
        } => {
            let ctrl = connect_controller(&connect).await?;
            io_check(&ctrl, nsid, slba, blocks).await?;
            ctrl.shutdown().await?;
        }
    }
    Ok(())
}

async fn resolve(target: &TargetArgs, default_port: u16) -> Result<SocketAddr> {
    let port = target.trsvcid.unwrap_or(default_port);
    let host = target.traddr.trim_start_matches('[').trim_end_matches(']');
    tokio::net::lookup_host((host, port))
        .await
        .with_context(|| format!("resolving {host}"))?
        .next()
        .with_context(|| format!("{host} has no address"))
}

async fn connect_controller(args: &ConnectArgs) -> Result<Controller> {
    let addr = resolve(&args.target, IO_PORT).await?;
    let mut opts = ConnectOptions::new(addr, &args.nqn);
    if let Some(nqn) = &args.hostnqn {
        opts = opts.with_host(&HostIdentity::with_nqn(nqn));
    }
    opts.io_queues = args.nr_io_queues;
    opts.digests = Digests {
        header: args.hdr_digest,
        data: args.data_digest,
    };
    Controller::connect(opts)
        .await
        .with_context(|| format!("connecting to {} at {addr}", args.nqn))
}

async fn io_check(ctrl: &Controller, nsid: u32, slba: u64, blocks: u32) -> Result<()> {
    let lba_size = ctrl.lba_size(nsid).await?;
    let len = blocks as usize * lba_size as usize;
    let clock = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let data = Bytes::from(pattern(
        len,
        clock.as_nanos() as u64 ^ std::process::id() as u64,
    ));
    let started = Instant::now();
    ctrl.write(nsid, slba, data.clone(), false).await?;
    let written = started.elapsed();
    let read = ctrl.read(nsid, slba, blocks).await?;
    let total = started.elapsed();
    if read != data {
        let first = read
            .iter()
            .zip(data.iter())
            .position(|(a, b)| a != b)
            .unwrap_or(read.len().min(data.len()));
        bail!(
            "data mismatch at byte {first} (block {})",
            slba + (first / lba_size as usize) as u64
        );
    }
    println!(
        "io-check: {blocks} blocks of {lba_size} bytes at LBA {slba} of namespace {nsid}: written in {written:?}, read back and verified in {:?}",
        total - written
    );
    Ok(())
}

/// Pseudo-random bytes (xorshift64*) so every run writes something different.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        out.extend_from_slice(&state.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    out.truncate(len);
    out
}

fn print_discovery_table(entries: &[DiscoveryLogEntry]) {
    println!(
        "{:<4} {:<6} {:<8} {:<6} {:<24} {:<8} {:<6} SUBNQN",
        "#", "TRTYPE", "SUBTYPE", "ADRFAM", "TRADDR", "TRSVCID", "PORTID"
    );
    for (i, e) in entries.iter().enumerate() {
        let tr = match e.trtype {
            trtype::TCP => "tcp",
            trtype::RDMA => "rdma",
            trtype::FC => "fc",
            _ => "?",
        };
        let sub = match e.subtype {
            subtype::NVM => "nvm",
            subtype::REFERRAL => "referral",
            subtype::CURRENT_DISCOVERY => "discovery",
            _ => "?",
        };
        let fam = match e.adrfam {
            adrfam::IPV4 => "ipv4",
            adrfam::IPV6 => "ipv6",
            adrfam::IB => "ib",
            adrfam::FC => "fc",
            _ => "?",
        };
        println!(
            "{i:<4} {tr:<6} {sub:<8} {fam:<6} {:<24} {:<8} {:<6} {}",
            e.traddr, e.trsvcid, e.portid, e.subnqn
        );
    }
}
