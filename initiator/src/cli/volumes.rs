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
    },
    /// One volume, with its members.
    Show { name: String },
    /// Fail a member (fault injection, or before pulling the drive).
    Fail { name: String, drive: String },
    /// Delete a volume: its drives go back to the subsystems they had.
    Delete { name: String },
}

pub async fn run(args: VolumesArgs) -> Result<()> {
    let client = args.api.client()?;
    let volume = match args.action {
        None => {
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
        }) => {
            let req = VolumeRequest {
                name,
                level,
                drives,
                strip_kib,
                spares,
            };
            client.create_volume(&req).await?
        }
        Some(VolumesAction::Show { name }) => client.volume(&name).await?,
        Some(VolumesAction::Fail { name, drive }) => {
            client.fail_volume_member(&name, &drive).await?
        }
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
