//! `fabrik hosts`: the hosts fabrikd knows, and their DH-HMAC-CHAP keys (management API).
//! Secrets are write-only: the API never returns them, so the table says only whether a host
//! has them.

use anyhow::Result;
use clap::{Args, Subcommand};
use fabrik_api::models::{HostKeysRequest, HostRequest, QosLimits};

use super::admin::{print_json, table, ApiArgs};

#[derive(Args)]
pub struct HostsArgs {
    #[command(subcommand)]
    action: Option<HostsAction>,
    #[command(flatten)]
    api: ApiArgs,
}

#[derive(Subcommand)]
enum HostsAction {
    /// Register a host (with keys: it must then authenticate on every subsystem).
    Add {
        /// The host's NQN.
        nqn: String,
        /// A name for people.
        #[arg(long)]
        name: Option<String>,
        #[command(flatten)]
        keys: KeyArgs,
    },
    /// Replace a host's keys; without --dhchap-secret it need not authenticate any more.
    /// Live connections stay.
    Keys {
        nqn: String,
        #[command(flatten)]
        keys: KeyArgs,
    },
    /// Replace a host's I/O limits on the box (none given: lifted). Live connections follow.
    Qos {
        nqn: String,
        /// Commands per second, reads and writes together.
        #[arg(long)]
        iops: Option<u64>,
        /// Bytes per second, reads and writes together.
        #[arg(long)]
        bytes_per_sec: Option<u64>,
        #[arg(long)]
        read_iops: Option<u64>,
        #[arg(long)]
        read_bytes_per_sec: Option<u64>,
        #[arg(long)]
        write_iops: Option<u64>,
        #[arg(long)]
        write_bytes_per_sec: Option<u64>,
        /// How far (ms of each rate) an idle host may run ahead [default: 50].
        #[arg(long)]
        burst_ms: Option<u32>,
    },
    /// Forget a host (it loses its access and controllers).
    Delete { nqn: String },
}

/// A host's DH-HMAC-CHAP settings. Secrets also come from the environment, so they need not
/// show in the process list.
#[derive(Args)]
struct KeyArgs {
    /// The host's secret (`DHHC-1:..`, from `nvme gen-dhchap-key -n HOSTNQN`).
    #[arg(long, env = "FABRIK_DHCHAP_SECRET", hide_env_values = true)]
    dhchap_secret: Option<String>,
    /// The controller's secret, for hosts that authenticate the box too.
    #[arg(long, env = "FABRIK_DHCHAP_CTRL_SECRET", hide_env_values = true)]
    dhchap_ctrl_secret: Option<String>,
    /// The one hash function the host must use: sha256, sha384 or sha512.
    #[arg(long)]
    dhchap_hash: Option<String>,
    /// The one DH group the host must use: null, ffdhe2048 .. ffdhe8192.
    #[arg(long)]
    dhchap_dhgroup: Option<String>,
}

impl KeyArgs {
    /// The keys as the API takes them (registering a host takes the same fields).
    fn request(self) -> HostKeysRequest {
        HostKeysRequest {
            dhchap_secret: self.dhchap_secret,
            dhchap_ctrl_secret: self.dhchap_ctrl_secret,
            dhchap_hash: self.dhchap_hash,
            dhchap_dhgroup: self.dhchap_dhgroup,
        }
    }
}

pub async fn run(args: HostsArgs) -> Result<()> {
    let client = args.api.client()?;
    let host = match args.action {
        None => {
            let hosts = client.hosts().await?;
            if args.api.json {
                return print_json(&hosts);
            }
            let yes = |b: bool| if b { "yes" } else { "no" }.to_string();
            let rows = hosts
                .into_iter()
                .map(|h| {
                    vec![
                        h.nqn,
                        h.name.unwrap_or_default(),
                        match (h.dhchap, h.dhchap_ctrl) {
                            (false, _) => "no".into(),
                            (true, false) => "host".into(),
                            (true, true) => "both ways".into(),
                        },
                        h.controllers.to_string(),
                        yes(!h.subsystems.is_empty()),
                        h.qos.as_ref().map_or("-".into(), describe),
                    ]
                })
                .collect();
            table(
                &[
                    "NQN",
                    "NAME",
                    "DH-HMAC-CHAP",
                    "CONTROLLERS",
                    "ACCESS",
                    "LIMITS",
                ],
                rows,
            );
            return Ok(());
        }
        Some(HostsAction::Add { nqn, name, keys }) => {
            let k = keys.request();
            client
                .add_host(&HostRequest {
                    nqn,
                    name,
                    dhchap_secret: k.dhchap_secret,
                    dhchap_ctrl_secret: k.dhchap_ctrl_secret,
                    dhchap_hash: k.dhchap_hash,
                    dhchap_dhgroup: k.dhchap_dhgroup,
                })
                .await?
        }
        Some(HostsAction::Keys { nqn, keys }) => {
            client.set_host_keys(&nqn, &keys.request()).await?
        }
        Some(HostsAction::Qos {
            nqn,
            iops,
            bytes_per_sec,
            read_iops,
            read_bytes_per_sec,
            write_iops,
            write_bytes_per_sec,
            burst_ms,
        }) => {
            let limits = QosLimits {
                iops,
                bytes_per_sec,
                read_iops,
                read_bytes_per_sec,
                write_iops,
                write_bytes_per_sec,
                burst_ms,
            };
            let host = client.set_host_qos(&nqn, &limits).await?;
            if args.api.json {
                return print_json(&host);
            }
            match host.qos {
                Some(q) => println!("host {}: limited to {}", host.nqn, describe(&q)),
                None => println!("host {}: no I/O limits", host.nqn),
            }
            return Ok(());
        }
        Some(HostsAction::Delete { nqn }) => {
            client
                .delete(&format!("/hosts/{}", fabrik_api::client::seg(&nqn)))
                .await?;
            println!("host {nqn} deleted");
            return Ok(());
        }
    };
    if args.api.json {
        return print_json(&host);
    }
    let auth = match (host.dhchap, host.dhchap_ctrl) {
        (false, _) => "need not authenticate",
        (true, false) => "must authenticate (DH-HMAC-CHAP)",
        (true, true) => "must authenticate, and may authenticate the box (DH-HMAC-CHAP)",
    };
    println!("host {}: {auth}", host.nqn);
    Ok(())
}

/// Limits in a few words: "iops 1000, read 8.0 MiB/s".
fn describe(q: &QosLimits) -> String {
    let mib = |b: u64| format!("{:.1} MiB/s", b as f64 / (1 << 20) as f64);
    let parts: Vec<String> = [
        q.iops.map(|v| format!("iops {v}")),
        q.bytes_per_sec.map(mib),
        q.read_iops.map(|v| format!("read iops {v}")),
        q.read_bytes_per_sec.map(|v| format!("read {}", mib(v))),
        q.write_iops.map(|v| format!("write iops {v}")),
        q.write_bytes_per_sec.map(|v| format!("write {}", mib(v))),
        q.burst_ms.map(|v| format!("burst {v} ms")),
    ]
    .into_iter()
    .flatten()
    .collect();
    parts.join(", ")
}
