//! `fabrik smart-log`: the SMART / Health Information log over a userspace session.

use anyhow::Result;
use clap::Args;
use serde_json::json;

use super::args::{connect_controller, ConnectArgs};

#[derive(Args)]
pub struct SmartLogArgs {
    #[command(flatten)]
    connect: ConnectArgs,
    /// Print as JSON.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: SmartLogArgs) -> Result<()> {
    let ctrl = connect_controller(&args.connect).await?;
    let log = ctrl.smart_log().await;
    ctrl.shutdown().await?;
    let log = log?;
    let n = |v: u128| u64::try_from(v).unwrap_or(u64::MAX);
    let celsius = log.temperature_k as i32 - 273;
    let rows: Vec<(&str, serde_json::Value, String)> = vec![
        (
            "critical_warning",
            json!(log.critical_warning),
            format!("{:#x}", log.critical_warning),
        ),
        (
            "temperature",
            json!(celsius),
            format!("{celsius} C ({} K)", log.temperature_k),
        ),
        (
            "avail_spare",
            json!(log.available_spare),
            format!("{}%", log.available_spare),
        ),
        (
            "spare_thresh",
            json!(log.available_spare_threshold),
            format!("{}%", log.available_spare_threshold),
        ),
        (
            "percent_used",
            json!(log.percentage_used),
            format!("{}%", log.percentage_used),
        ),
        (
            "data_units_read",
            json!(n(log.data_units_read)),
            n(log.data_units_read).to_string(),
        ),
        (
            "data_units_written",
            json!(n(log.data_units_written)),
            n(log.data_units_written).to_string(),
        ),
        (
            "host_read_commands",
            json!(n(log.host_read_commands)),
            n(log.host_read_commands).to_string(),
        ),
        (
            "host_write_commands",
            json!(n(log.host_write_commands)),
            n(log.host_write_commands).to_string(),
        ),
        (
            "controller_busy_time",
            json!(n(log.controller_busy_time)),
            n(log.controller_busy_time).to_string(),
        ),
        (
            "power_cycles",
            json!(n(log.power_cycles)),
            n(log.power_cycles).to_string(),
        ),
        (
            "power_on_hours",
            json!(n(log.power_on_hours)),
            n(log.power_on_hours).to_string(),
        ),
        (
            "unsafe_shutdowns",
            json!(n(log.unsafe_shutdowns)),
            n(log.unsafe_shutdowns).to_string(),
        ),
        (
            "media_errors",
            json!(n(log.media_errors)),
            n(log.media_errors).to_string(),
        ),
        (
            "num_err_log_entries",
            json!(n(log.error_log_entries)),
            n(log.error_log_entries).to_string(),
        ),
        (
            "warning_temp_time",
            json!(log.warning_temp_time),
            log.warning_temp_time.to_string(),
        ),
        (
            "critical_comp_time",
            json!(log.critical_temp_time),
            log.critical_temp_time.to_string(),
        ),
    ];
    if args.json {
        let map: serde_json::Map<String, serde_json::Value> = rows
            .into_iter()
            .map(|(k, v, _)| (k.to_string(), v))
            .collect();
        println!("{}", serde_json::to_string_pretty(&map)?);
    } else {
        println!("Smart Log for NVME device {}:", args.connect.nqn);
        for (k, _, text) in rows {
            println!("{k:<24}: {text}");
        }
    }
    Ok(())
}
