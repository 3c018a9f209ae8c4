//! `fabrik mdns`: the NVMe-oF discovery controllers announced over mDNS (boxes and central
//! discovery controllers started with `fabrikd --mdns`, or any TP8009 announcer).

use std::time::Duration;

use anyhow::Result;
use clap::Args;
use fabrik_initiator::host::mdns;

use super::admin::{print_json, table};

#[derive(Args)]
pub struct MdnsArgs {
    /// How long to listen for announcements, in seconds.
    #[arg(long, default_value_t = 3.0)]
    wait: f64,
    /// Listen on loopback only (discovery controllers on this machine).
    #[arg(long)]
    loopback: bool,
    /// Print them as JSON.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: MdnsArgs) -> Result<()> {
    if !(args.wait.is_finite() && args.wait > 0.0 && args.wait <= 600.0) {
        anyhow::bail!(
            "--wait {}: expected seconds, more than 0 and at most 600",
            args.wait
        );
    }
    let wait = Duration::from_secs_f64(args.wait);
    let found = tokio::task::spawn_blocking(move || mdns::browse(wait, args.loopback)).await??;
    if args.json {
        return print_json(&found);
    }
    table(
        &["INSTANCE", "ROLE", "TRANSPORT", "ADDRESSES", "NQN"],
        found
            .iter()
            .map(|a| {
                let addrs: Vec<String> = a.addrs.iter().map(|s| s.to_string()).collect();
                vec![
                    a.instance.clone(),
                    a.role.clone().unwrap_or_else(|| "-".into()),
                    a.transport.map_or("-".into(), |t| t.as_str().into()),
                    addrs.join(", "),
                    a.nqn.clone(),
                ]
            })
            .collect(),
    );
    Ok(())
}
