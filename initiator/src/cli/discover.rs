//! `fabrik discover`: the discovery log of a target, as a table.

use anyhow::{Context, Result};
use clap::Args;
use fabrik_initiator::discover;
use fabrik_initiator::proto::fabrics::discovery::{adrfam, subtype, trtype, DiscoveryLogEntry};

use super::args::{host_identity, resolve, TargetArgs, DISCOVERY_PORT};

#[derive(Args)]
pub struct DiscoverArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// Host NQN (default: a random UUID-based NQN).
    #[arg(short = 'q', long)]
    hostnqn: Option<String>,
}

pub async fn run(DiscoverArgs { target, hostnqn }: DiscoverArgs) -> Result<()> {
    if super::args::transport(&target)? != fabrik_initiator::Transport::Tcp {
        anyhow::bail!("fabrik discover speaks NVMe/TCP only (connect-based commands take -t rdma)");
    }
    let addr = resolve(&target, DISCOVERY_PORT).await?;
    let host = host_identity(hostnqn);
    let log = discover(addr, &host.nqn)
        .await
        .with_context(|| format!("discovery at {addr}"))?;
    println!(
        "Discovery log, generation {}, {} records",
        log.genctr,
        log.entries.len()
    );
    print_discovery_table(&log.entries);
    Ok(())
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
