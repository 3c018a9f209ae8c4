//! `fabrik bench checkpoint`: time per checkpoint and aggregate GB/s per iteration.

use std::sync::Arc;

use anyhow::Result;
use clap::Args;
use fabrik_initiator::bench::checkpoint::{self, CheckpointSpec};
use fabrik_initiator::bench::report::PlacementReport;
use fabrik_initiator::bench::{parse_size, Progress, WorkerDrives};

use super::bench::{
    close_drives, on_bench_runtime, open_drives, AddressArgs, DriveSource, SessionArgs,
};
use super::bench_place::{self, PlacedArgs};

#[derive(Args)]
pub struct CheckpointArgs {
    #[command(flatten)]
    address: Option<AddressArgs>,
    #[command(flatten)]
    session: SessionArgs,
    #[command(flatten)]
    placed: PlacedArgs,
    /// Number of checkpoints to write.
    #[arg(long, default_value_t = 10)]
    count: u32,
    /// Bytes per checkpoint, all shards together (e.g. 8g).
    #[arg(long, value_parser = parse_size, default_value = "1g")]
    size: u64,
    /// Bytes per write command.
    #[arg(long, value_parser = parse_size, default_value = "1m")]
    bs: u64,
    /// Writes in flight per thread.
    #[arg(long, default_value_t = 8)]
    iodepth: u32,
    /// Worker threads, each with its own I/O queue on every controller.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Where the checkpoint is written from: host, gpu, gpu:N or emulated-gpu (see bench --mem)
    /// [default: host; with --gpu N, that GPU].
    #[arg(long)]
    mem: Option<String>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: CheckpointArgs) -> Result<()> {
    let threads = args.threads;
    let source = DriveSource::from_args(args.address.clone(), &args.placed, &args.session).await?;
    let memory = bench_place::memory(args.mem.as_deref(), source.placed())?;
    // Checkpoints keep their I/O on the control runtime (not measured on I/O threads yet).
    on_bench_runtime(threads, None, |_| async move {
        // Checkpoint jobs send every worker to every drive (`Spec::default`).
        let drives = open_drives(
            &source,
            &args.session,
            threads,
            WorkerDrives::All,
            args.iodepth,
            Vec::new(),
        )
        .await?;
        let spec = CheckpointSpec {
            count: args.count,
            size: args.size,
            bs: u32::try_from(args.bs)?,
            iodepth: args.iodepth,
            threads,
            memory,
        };
        let placement = source.placed().map(PlacementReport::of);
        if !args.json {
            println!(
                "{} checkpoints of {} over {} drives",
                spec.count,
                fabrik_initiator::bench::report::human_bytes(spec.size as f64),
                drives.len()
            );
            if let Some(p) = &placement {
                print!("{}", p.to_text());
            }
            println!("{:>5} {:>10} {:>10}", "#", "seconds", "GB/s");
        }
        let json = args.json;
        let result = checkpoint::run(drives.clone(), spec, Arc::new(Progress::default()), |c| {
            if !json {
                println!(
                    "{:>5} {:>10.3} {:>10.3}",
                    c.index,
                    c.seconds,
                    c.bytes_per_sec / 1e9
                );
            }
        })
        .await;
        close_drives(drives).await;
        let mut report = result?;
        report.placement = placement;
        if json {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            println!("aggregate: {:.3} GB/s", report.bytes_per_sec / 1e9);
        }
        Ok(())
    })
}
