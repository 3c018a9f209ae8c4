//! `fabrik volumes`: protected volumes (RAID) on a box (management API).

use anyhow::Result;
use clap::{Args, Subcommand};
use fabrik_api::models::{Volume, VolumeRequest};

use super::admin::{print_json, table, ApiArgs};

#[derive(Args)]
pub struct VolumesArgs {
    #[command(subcommand)]
    action: Option<VolumesAction>,
    #[command(flatten)]
    api: ApiArgs,
}

#[derive(Subcommand)]
enum VolumesAction {
    /// Every volume (the same as no action).
    List,
    /// Make a volume over drives no subsystem exports but alone (their data is erased).
    Create {
        name: String,
        /// raid0, raid1, raid10, raid5 or raid6.
        #[arg(long)]
        level: String,
        /// Member drives, in order (comma-separated IDs).
        #[arg(long, value_delimiter = ',', required = true)]
        drives: Vec<String>,
        /// Strip size in KiB [default: 64].
        #[arg(long)]
        strip_kib: Option<u64>,
        /// Drives kept to rebuild onto.
        #[arg(long, value_delimiter = ',')]
        spares: Vec<String>,
        /// Serve only this much (e.g. 100G; rounded up to whole stripes) [default: all].
        #[arg(long, value_parser = fabrik_initiator::bench::parse_size)]
        size: Option<u64>,
        /// Serve it to no host till one is composed to it (default: any host, as drives).
        #[arg(long)]
        closed: bool,
    },
    /// One volume, with its members.
    Show { name: String },
    /// Fail a member (fault injection, or before pulling the drive).
    Fail { name: String, drive: String },
    /// Delete a volume: its drives go back to the subsystems they had.
    Delete { name: String },
    /// Add a spare (a volume with a failed member is rebuilt onto it at once).
    Spare { name: String, drive: String },
    /// Limit how fast rebuilds write, in MiB/s (none given: no limit).
    RebuildLimit {
        name: String,
        mib_per_sec: Option<u64>,
    },
    /// Check every stripe's parity (or mirror copies) against the data, repairing where they
    /// disagree; `show` tells the result.
    Scrub { name: String },
}

pub async fn run(args: VolumesArgs) -> Result<()> {
    let client = args.api.client()?;
    let volume = match args.action {
        None | Some(VolumesAction::List) => {
            let volumes = client.volumes().await?;
            if args.api.json {
                return print_json(&volumes);
            }
            let rows = volumes
                .into_iter()
                .map(|v| {
                    vec![
                        v.name.clone(),
                        v.level.clone(),
                        v.state.clone(),
                        format!("{:.1} GiB", v.capacity_bytes as f64 / (1u64 << 30) as f64),
                        members(&v),
                        v.nqn,
                    ]
                })
                .collect();
            table(&["NAME", "LEVEL", "STATE", "SIZE", "MEMBERS", "NQN"], rows);
            return Ok(());
        }
        Some(VolumesAction::Create {
            name,
            level,
            drives,
            strip_kib,
            spares,
            size,
            closed,
        }) => {
            let req = VolumeRequest {
                name,
                level,
                drives,
                strip_kib,
                spares,
                capacity_bytes: size,
                allow_any_host: closed.then_some(false),
            };
            client.create_volume(&req).await?
        }
        Some(VolumesAction::Show { name }) => client.volume(&name).await?,
        Some(VolumesAction::Fail { name, drive }) => {
            client.fail_volume_member(&name, &drive).await?
        }
        Some(VolumesAction::Spare { name, drive }) => {
            client.add_volume_spare(&name, &drive).await?
        }
        Some(VolumesAction::RebuildLimit { name, mib_per_sec }) => {
            client.set_volume_rebuild_limit(&name, mib_per_sec).await?
        }
        Some(VolumesAction::Scrub { name }) => client.scrub_volume(&name).await?,
        Some(VolumesAction::Delete { name }) => {
            client.delete_volume(&name).await?;
            println!("volume {name} deleted");
            return Ok(());
        }
    };
    if args.api.json {
        return print_json(&volume);
    }
    println!(
        "volume {} ({}, {} KiB strips): {}, {} bytes, {}",
        volume.name,
        volume.level,
        volume.strip_kib,
        volume.state,
        volume.capacity_bytes,
        volume.nqn
    );
    println!("members: {}", members(&volume));
    if !volume.spares.is_empty() {
        println!("spares: {}", volume.spares.join(" "));
    }
    if let Some(r) = &volume.rebuild {
        let eta = r.eta_seconds.map_or("-".into(), |s| format!("{s} s"));
        println!(
            "rebuilding {}: {:.1} % at {:.0} MiB/s, {eta} left",
            r.drive,
            r.progress * 100.0,
            r.mib_per_sec
        );
    }
    if let Some(s) = &volume.scrub {
        println!(
            "scrub: {} ({} of {} stripes, {} mismatches, {} repaired){}",
            s.state,
            s.checked_stripes,
            s.total_stripes,
            s.mismatches,
            s.repaired,
            s.error.as_ref().map_or(String::new(), |e| format!(": {e}"))
        );
    }
    if volume.unsynced_regions > 0 {
        println!(
            "warning: {} regions written at a crash could not be resynced (degraded): data there may be wrong",
            volume.unsynced_regions
        );
    }
    Ok(())
}

/// "00 01 02(failed)".
fn members(v: &Volume) -> String {
    v.members
        .iter()
        .map(|m| match m.state.as_str() {
            "active" => m.drive.clone(),
            s => format!("{}({s})", m.drive),
        })
        .collect::<Vec<_>>()
        .join(" ")
}
