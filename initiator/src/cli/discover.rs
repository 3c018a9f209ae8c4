//! `fabrik discover`: the discovery log of a target, as a table or as JSON (nvme-cli's
//! `nvme discover -o json` field names).

use anyhow::{Context, Result};
use clap::Args;
use fabrik_initiator::proto::fabrics::discovery::{
    adrfam, sectype, subtype, trtype, DiscoveryLogEntry, Tsas,
};
use fabrik_initiator::proto::fabrics::Transport;
use fabrik_initiator::{discover_with, ConnectOptions, DiscoveryLog};

use super::args::{host_identity, resolve, AuthArgs, HostBindArgs, TargetArgs, DISCOVERY_PORT};

#[derive(Args)]
pub struct DiscoverArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// Host NQN (default: a random UUID-based NQN).
    #[arg(short = 'q', long)]
    hostnqn: Option<String>,
    #[command(flatten)]
    bind: HostBindArgs,
    /// TLS (--tls-key) for a discovery port that requires it.
    #[command(flatten)]
    auth: AuthArgs,
    /// Print the log as JSON.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: DiscoverArgs) -> Result<()> {
    let DiscoverArgs {
        target,
        hostnqn,
        bind,
        auth,
        json,
    } = args;
    let transport = super::args::transport(&target)?;
    let addr = resolve(&target, DISCOVERY_PORT).await?;
    let mut opts = ConnectOptions::discovery(addr).with_host(&host_identity(hostnqn));
    opts.transport = transport;
    bind.apply(&mut opts);
    auth.apply(&mut opts);
    let log = discover_with(opts)
        .await
        .with_context(|| format!("discovery at {addr}"))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&log_json(&log))?);
        return Ok(());
    }
    println!(
        "Discovery log, generation {}, {} records",
        log.genctr,
        log.entries.len()
    );
    print_discovery_table(&log.entries);
    Ok(())
}

/// The log as nvme-cli prints it with `-o json`.
fn log_json(log: &DiscoveryLog) -> serde_json::Value {
    let records: Vec<serde_json::Value> = log
        .entries
        .iter()
        .map(|e| {
            serde_json::json!({
                "trtype": trtype_name(e.trtype),
                "adrfam": adrfam_name(e.adrfam),
                "subtype": match e.subtype {
                    subtype::NVM => "nvme subsystem",
                    subtype::REFERRAL => "discovery subsystem referral",
                    subtype::CURRENT_DISCOVERY => "current discovery subsystem",
                    _ => "unrecognized",
                },
                "treq": e.treq,
                "sectype": sectype_name(e),
                "portid": e.portid,
                "trsvcid": e.trsvcid.trim(),
                "subnqn": e.subnqn,
                "traddr": e.traddr.trim(),
                "eflags": e.eflags,
                "cntlid": e.cntlid,
                "asqsz": e.asqsz,
            })
        })
        .collect();
    serde_json::json!({ "genctr": log.genctr, "records": records })
}

/// NVMe/TCP's security type (nvme-cli's names); null for other transports.
fn sectype_name(e: &DiscoveryLogEntry) -> serde_json::Value {
    match e.tsas {
        Tsas::Tcp { sectype: s } => match s {
            sectype::NONE => "none",
            sectype::TLS12 => "tls12",
            sectype::TLS13 => "tls13",
            _ => "reserved",
        }
        .into(),
        _ => serde_json::Value::Null,
    }
}

fn trtype_name(t: u8) -> &'static str {
    match (Transport::from_trtype(t), t) {
        (Some(t), _) => t.as_str(),
        (None, trtype::FC) => "fc",
        (None, _) => "?",
    }
}

fn adrfam_name(a: u8) -> &'static str {
    match a {
        adrfam::IPV4 => "ipv4",
        adrfam::IPV6 => "ipv6",
        adrfam::IB => "ib",
        adrfam::FC => "fc",
        _ => "?",
    }
}

fn print_discovery_table(entries: &[DiscoveryLogEntry]) {
    println!(
        "{:<4} {:<6} {:<8} {:<6} {:<24} {:<8} {:<6} SUBNQN",
        "#", "TRTYPE", "SUBTYPE", "ADRFAM", "TRADDR", "TRSVCID", "PORTID"
    );
    for (i, e) in entries.iter().enumerate() {
        let tr = trtype_name(e.trtype);
        let sub = match e.subtype {
            subtype::NVM => "nvm",
            subtype::REFERRAL => "referral",
            subtype::CURRENT_DISCOVERY => "discovery",
            _ => "?",
        };
        let fam = adrfam_name(e.adrfam);
        println!(
            "{i:<4} {tr:<6} {sub:<8} {fam:<6} {:<24} {:<8} {:<6} {}",
            e.traddr, e.trsvcid, e.portid, e.subnqn
        );
    }
}
