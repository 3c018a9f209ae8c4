//! Admin subcommands over fabrikd's management API: `drives`, `compose`, `decompose`,
//! `compositions`, `subsystems`, `controllers`. Tables for people, `--json` for scripts.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use fabrik_api::client::Client;
use fabrik_api::models::{AnaGroup, AnaState, CompositionRequest, Drive};

#[derive(Args)]
pub struct ApiArgs {
    /// fabrikd's management API: `http://HOST:PORT` (every call needs the token) or
    /// `unix:PATH` [default: fabrikd's local socket, api.sock in $FABRIK_DATA_DIR,
    /// /var/lib/fabrik or ~/.local/share/fabrik: no token needed].
    #[arg(long, env = "FABRIK_API")]
    pub api: Option<String>,
    /// API token for calls over HTTP [default: the api-token file in $FABRIK_DATA_DIR,
    /// /var/lib/fabrik or ~/.local/share/fabrik].
    #[arg(long, env = "FABRIK_API_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// For an `https://` API: the CA certificate (PEM) that signed the box's certificate
    /// [default: the system's roots].
    #[arg(long, env = "FABRIK_API_CA", value_name = "FILE")]
    pub api_ca: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

impl ApiArgs {
    pub(super) fn client(&self) -> Result<Client> {
        let client = api_client(self.api.as_deref(), self.token.clone())?;
        Ok(match (&self.api_ca, &self.api) {
            (Some(ca), Some(url)) if url.starts_with("https://") => {
                Client::with_ca(url, client.token().map(str::to_string), Some(ca))
            }
            _ => client,
        })
    }
}

/// Where fabrikd keeps its files, in the order they are looked for.
fn data_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(d) = std::env::var_os("FABRIK_DATA_DIR") {
        dirs.push(d.into());
    }
    dirs.push("/var/lib/fabrik".into());
    if let Some(h) = std::env::var_os("HOME") {
        dirs.push(PathBuf::from(h).join(".local/share/fabrik"));
    }
    dirs
}

fn listed(dirs: &[PathBuf]) -> String {
    dirs.iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A client of fabrikd's API: at `api` (over HTTP with `token`, else the token file), or by
/// default on fabrikd's local socket, which needs no token. The token never goes to a TCP
/// port nobody named: whoever holds 127.0.0.1:8080 while fabrikd does not would receive it.
pub(super) fn api_client(api: Option<&str>, token: Option<String>) -> Result<Client> {
    match api {
        Some(url) if url.starts_with("unix:") => Ok(Client::new(url, None)),
        Some(url) => {
            let token = match token.or_else(|| std::env::var("FABRIK_API_TOKEN").ok()) {
                Some(t) => t,
                None => token_from_file().with_context(|| format!("calls to {url}"))?,
            };
            Ok(Client::new(url, Some(token)))
        }
        None => {
            let dirs = data_dirs();
            match dirs.iter().map(|d| d.join("api.sock")).find(|p| p.exists()) {
                Some(socket) => Ok(Client::unix(&socket)),
                None => bail!(
                    "no fabrikd API socket (api.sock) in {}: is fabrikd running on this machine? \
                     Otherwise give --api http://BOX:PORT and the token",
                    listed(&dirs)
                ),
            }
        }
    }
}

pub(super) fn token_from_file() -> Result<String> {
    let dirs = data_dirs();
    for d in &dirs {
        if let Ok(t) = std::fs::read_to_string(d.join("api-token")) {
            return Ok(t.trim().to_string());
        }
    }
    bail!(
        "the API token is needed: give --token or FABRIK_API_TOKEN (no readable api-token file in {})",
        listed(&dirs)
    )
}

pub(super) fn print_json(v: &impl serde::Serialize) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

/// Prints rows as aligned columns.
pub(super) fn table(header: &[&str], rows: Vec<Vec<String>>) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let line = |cells: Vec<String>| {
        let mut out = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                out.push_str(c);
            } else {
                out.push_str(&format!("{c:<w$}  "));
            }
        }
        println!("{}", out.trim_end());
    };
    line(header.iter().map(|h| h.to_string()).collect());
    for r in rows {
        line(r);
    }
}

fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let (mut v, mut u) = (bytes as f64, 0);
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.0} {}", UNITS[u])
}

#[derive(Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub api: ApiArgs,
}

pub async fn drives(args: ListArgs) -> Result<()> {
    let drives = args.api.client()?.drives().await?;
    if args.api.json {
        return print_json(&drives);
    }
    table(
        &[
            "ID",
            "SIZE",
            "BACKEND",
            "HEALTH",
            "MEDIA ERR",
            "SUBSYSTEM",
            "HOSTS",
        ],
        drives
            .iter()
            .map(|d| {
                vec![
                    d.id.clone(),
                    human(d.capacity_bytes),
                    d.backend.clone(),
                    d.health.state.clone(),
                    d.health.media_errors.to_string(),
                    d.subsystems.join(","),
                    match &d.hosts {
                        None => "any".into(),
                        Some(h) if h.is_empty() => "none".into(),
                        Some(h) => h.join(","),
                    },
                ]
            })
            .collect(),
    );
    Ok(())
}

#[derive(Args)]
pub struct ComposeArgs {
    /// Host NQN that gets the drives.
    #[arg(long = "host", value_name = "NQN")]
    pub host: String,
    /// Drives: IDs or numbers, lists and ranges, e.g. 0-11 or 3,5,nvme0.
    #[arg(long, value_name = "LIST")]
    pub drives: String,
    /// Port IDs to print connect commands for [default: every port].
    #[arg(long, value_delimiter = ',')]
    pub ports: Vec<u16>,
    /// Let other hosts be composed to these drives too.
    #[arg(long)]
    pub shared: bool,
    #[command(flatten)]
    pub api: ApiArgs,
}

/// Expands `0-3,7,nvme0` into drive IDs, matching numbers to the box's numbered drives ("07").
pub fn parse_drive_list(list: &str, drives: &[Drive]) -> Result<Vec<String>> {
    let by_number = |n: u64| -> String {
        drives
            .iter()
            .find(|d| d.id.parse::<u64>().ok() == Some(n))
            .map_or_else(|| format!("{n:02}"), |d| d.id.clone())
    };
    let mut out = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let range = item
            .split_once('-')
            .and_then(|(a, b)| Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?)));
        if let Some((a, b)) = range {
            if a > b {
                bail!("drive range {item:?} runs backwards");
            }
            out.extend((a..=b).map(by_number));
        } else if let Ok(n) = item.parse::<u64>() {
            out.push(by_number(n));
        } else {
            out.push(item.to_string());
        }
    }
    if out.is_empty() {
        bail!("no drives in {list:?}");
    }
    Ok(out)
}

pub async fn compose(args: ComposeArgs) -> Result<()> {
    let client = args.api.client()?;
    let all = client.drives().await?;
    let req = CompositionRequest {
        host_nqn: args.host.clone(),
        drives: parse_drive_list(&args.drives, &all)?,
        ports: (!args.ports.is_empty()).then_some(args.ports.clone()),
        shared: args.shared,
    };
    let c = client.compose(&req).await?;
    if args.api.json {
        return print_json(&c);
    }
    println!(
        "composition {}: {} drive(s) for {}",
        c.id,
        c.drives.len(),
        c.host_nqn
    );
    println!("Connect from the host (nvme-cli):");
    for cmd in &c.connect {
        println!("  {}", cmd.nvme_cli);
    }
    println!("or with fabrik:");
    for cmd in &c.connect {
        println!("  {}", cmd.fabrik);
    }
    Ok(())
}

#[derive(Args)]
pub struct ClearFaultArgs {
    /// Drive ID (see `fabrik drives`: HEALTH read_only).
    pub drive: String,
    #[command(flatten)]
    pub api: ApiArgs,
}

/// A drive that lost a write (a failed Flush or FUA write) refuses writes until this: after
/// dealing with the cause, and with what hosts wrote since their last good Flush.
pub async fn clear_fault(args: ClearFaultArgs) -> Result<()> {
    let path = format!(
        "/drives/{}/clear-fault",
        fabrik_api::client::seg(&args.drive)
    );
    let d: Drive = args
        .api
        .client()?
        .post(&path, &serde_json::json!({}))
        .await?;
    if args.api.json {
        return print_json(&d);
    }
    println!(
        "drive {}: fault cleared, writable again (health {})",
        d.id, d.health.state
    );
    Ok(())
}

#[derive(Args)]
pub struct AnaGroupsArgs {
    /// Put this group (ANAGRPID) in --state.
    #[arg(long, requires = "state")]
    pub group: Option<u32>,
    /// optimized, non-optimized, inaccessible, persistent-loss or change.
    #[arg(long, requires = "group", value_parser = parse_ana_state)]
    pub state: Option<AnaState>,
    #[command(flatten)]
    pub api: ApiArgs,
}

fn parse_ana_state(text: &str) -> Result<AnaState, String> {
    (AnaState::ALL.into_iter().find(|s| s.name() == text)).ok_or_else(|| {
        format!("{text}: optimized, non-optimized, inaccessible, persistent-loss or change")
    })
}

/// Lists the ANA groups with their states, or puts one in a state: `inaccessible` before
/// taking the target away (multipath hosts move their I/O to another path), `optimized` after.
pub async fn ana_groups(args: AnaGroupsArgs) -> Result<()> {
    let client = args.api.client()?;
    let groups: Vec<AnaGroup> = match (args.group, args.state) {
        (Some(id), Some(state)) => vec![client.set_ana_group(id, state).await?],
        _ => client.ana_groups().await?,
    };
    if args.api.json {
        return print_json(&groups);
    }
    let rows = (groups.iter())
        .map(|g| {
            let state = g.state.name().to_string();
            vec![g.id.to_string(), state, g.change_count.to_string()]
        })
        .collect();
    table(&["GROUP", "STATE", "CHANGES"], rows);
    Ok(())
}

#[derive(Args)]
pub struct ModuleArgs {
    /// Put the module into maintenance (on: every ANA group inaccessible through its ports,
    /// hosts move to the other module) or back into service (off).
    #[arg(long, value_name = "on|off", value_parser = parse_on_off)]
    pub maintenance: Option<bool>,
    #[command(flatten)]
    pub api: ApiArgs,
}

fn parse_on_off(text: &str) -> Result<bool, String> {
    match text {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("{text}: on or off")),
    }
}

/// Shows this I/O module (maintenance, commands in flight, ANA groups), or puts it into
/// maintenance and back: a planned failover is `--maintenance on`, wait for `drained`, stop it.
pub async fn module(args: ModuleArgs) -> Result<()> {
    let client = args.api.client()?;
    let m = match args.maintenance {
        Some(on) => client.set_maintenance(on).await?,
        None => client.module().await?,
    };
    if args.api.json {
        return print_json(&m);
    }
    let state = match (m.maintenance, m.drained) {
        (false, _) => "in service",
        (true, false) => "maintenance, draining",
        (true, true) => "maintenance, drained",
    };
    println!(
        "module {}: {state}, {} I/O command(s) in flight",
        m.name.as_deref().unwrap_or("(the box's only one)"),
        m.io_in_flight
    );
    let rows = (m.ana_groups.iter())
        .map(|g| vec![g.id.to_string(), g.state.name().to_string()])
        .collect();
    table(&["GROUP", "STATE"], rows);
    Ok(())
}

#[derive(Args)]
pub struct DecomposeArgs {
    /// Composition ID (see `fabrik compositions`).
    #[arg(required_unless_present = "host", conflicts_with = "host")]
    pub id: Option<String>,
    /// Remove every composition of this host.
    #[arg(long = "host", value_name = "NQN")]
    pub host: Option<String>,
    #[command(flatten)]
    pub api: ApiArgs,
}

pub async fn decompose(args: DecomposeArgs) -> Result<()> {
    let client = args.api.client()?;
    let ids: Vec<String> = match (&args.id, &args.host) {
        (Some(id), _) => vec![id.clone()],
        (None, Some(host)) => {
            let ids: Vec<String> = client
                .compositions()
                .await?
                .into_iter()
                .filter(|c| &c.host_nqn == host)
                .map(|c| c.id)
                .collect();
            if ids.is_empty() {
                bail!("host {host} has no compositions");
            }
            ids
        }
        (None, None) => unreachable!("clap requires an ID or --host"),
    };
    for id in &ids {
        client
            .decompose(id)
            .await
            .with_context(|| format!("composition {id}"))?;
    }
    if args.api.json {
        return print_json(&ids);
    }
    println!("removed composition(s) {}", ids.join(", "));
    Ok(())
}

pub async fn compositions(args: ListArgs) -> Result<()> {
    let list = args.api.client()?.compositions().await?;
    if args.api.json {
        return print_json(&list);
    }
    table(
        &["ID", "HOST", "DRIVES", "SHARED"],
        list.iter()
            .map(|c| {
                vec![
                    c.id.clone(),
                    c.host_nqn.clone(),
                    c.drives.join(","),
                    if c.shared { "yes" } else { "no" }.into(),
                ]
            })
            .collect(),
    );
    Ok(())
}

/// `fabrik cdc`: what is registered with a central discovery controller.
pub async fn cdc(args: ListArgs) -> Result<()> {
    let list = args.api.client()?.cdc_registrations().await?;
    if args.api.json {
        return print_json(&list);
    }
    table(
        &["NQN", "NAME", "ENTITY", "DISCOVERY AT"],
        list.iter()
            .map(|r| {
                let at: Vec<String> = r
                    .addresses
                    .iter()
                    .map(|a| format!("{} {}:{}", a.transport, a.traddr, a.trsvcid))
                    .collect();
                vec![
                    r.nqn.clone(),
                    r.name.clone(),
                    r.entity.clone(),
                    at.join(", "),
                ]
            })
            .collect(),
    );
    Ok(())
}

pub async fn subsystems(args: ListArgs) -> Result<()> {
    let list = args.api.client()?.subsystems().await?;
    if args.api.json {
        return print_json(&list);
    }
    table(
        &["NQN", "NAMESPACES", "HOSTS", "CONTROLLERS"],
        list.iter()
            .map(|s| {
                vec![
                    s.nqn.clone(),
                    s.namespaces
                        .iter()
                        .map(|n| format!("{}:{}", n.nsid, n.drive))
                        .collect::<Vec<_>>()
                        .join(","),
                    if s.allow_any_host {
                        "any".into()
                    } else if s.hosts.is_empty() {
                        "none".into()
                    } else {
                        s.hosts.join(",")
                    },
                    s.controllers.to_string(),
                ]
            })
            .collect(),
    );
    Ok(())
}

#[derive(Args)]
pub struct ControllersArgs {
    /// Disconnect this controller (its `ID`) instead of listing.
    #[arg(long, value_name = "ID")]
    pub disconnect: Option<u64>,
    #[command(flatten)]
    pub api: ApiArgs,
}

pub async fn controllers(args: ControllersArgs) -> Result<()> {
    if let Some(id) = args.disconnect {
        args.api.client()?.disconnect_controller(id).await?;
        if !args.api.json {
            println!("controller {id} disconnected");
        }
        return Ok(());
    }
    let list = args.api.client()?.controllers().await?;
    if args.api.json {
        return print_json(&list);
    }
    table(
        &[
            "ID",
            "CNTLID",
            "HOST",
            "ADDRESS",
            "SUBSYSTEM",
            "IOQ",
            "KATO",
            "UP",
        ],
        list.iter()
            .map(|c| {
                vec![
                    c.id.to_string(),
                    c.cntlid.to_string(),
                    // A host that sent no host NQN (SPDK's default).
                    c.host_nqn.clone().unwrap_or_else(|| "(anonymous)".into()),
                    c.address.clone(),
                    c.subsystem.clone(),
                    c.io_queues.to_string(),
                    format!("{} ms", c.keep_alive_ms),
                    format!("{} s", c.connected_seconds),
                ]
            })
            .collect(),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drive(id: &str) -> Drive {
        serde_json::from_value(serde_json::json!({
            "id": id, "slot": 0, "serial": "", "model": "", "backend": "ram", "path": null,
            "capacity_bytes": 0, "block_size": 4096,
            "health": {"state": "ok", "source": "fabrikd", "source_error": null, "temperature_celsius": null, "percentage_used": null,
                "media_errors": 0, "critical_warnings": 0, "power_on_hours": 0, "read_commands": 0,
                "write_commands": 0, "bytes_read": 0, "bytes_written": 0},
            "subsystems": [], "hosts": null, "composed_to": []
        }))
        .unwrap()
    }

    #[test]
    fn drive_lists_expand() {
        let drives: Vec<Drive> = ["00", "01", "02", "11", "nvme0"].map(drive).to_vec();
        assert_eq!(
            parse_drive_list("0-2,11,nvme0", &drives).unwrap(),
            ["00", "01", "02", "11", "nvme0"]
        );
        assert_eq!(parse_drive_list("30", &drives).unwrap(), ["30"]);
        assert!(parse_drive_list("5-1", &drives).is_err());
        assert!(parse_drive_list(" , ", &drives).is_err());
    }
}
