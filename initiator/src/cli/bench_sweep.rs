//! `fabrik bench --sweep`: the job over block sizes x threads x queue depths; a table, JSON,
//! and an SVG with a throughput and a latency heatmap.

use std::time::Duration;

use anyhow::{bail, Result};
use fabrik_initiator::bench::report::PlacementReport;
use fabrik_initiator::bench::sweep::{self, parse_list, Point};
use fabrik_initiator::bench::{parse_size, Memory, Spec};

use super::bench::{
    close_drives, io_threads_for, on_bench_runtime, open_drives, run_spec, spec_from, DriveSource,
    JobArgs,
};

/// Seconds per point unless --time says otherwise.
const DEFAULT_SECS: f64 = 2.0;

pub fn run(job: JobArgs, source: DriveSource, memory: Memory) -> Result<()> {
    let bs: Vec<u32> = job
        .sweep_bs
        .split(',')
        .map(|s| {
            parse_size(s).and_then(|v| u32::try_from(v).map_err(|_| format!("{s}: too large")))
        })
        .collect::<Result<_, _>>()
        .map_err(anyhow::Error::msg)?;
    let threads: Vec<usize> = parse_list(&job.sweep_threads).map_err(anyhow::Error::msg)?;
    let iodepth: Vec<u32> = parse_list(&job.sweep_iodepth).map_err(anyhow::Error::msg)?;
    let points = sweep::points(&bs, &threads, &iodepth);
    if points.is_empty() {
        bail!("--sweep needs at least one block size, thread count and queue depth");
    }
    let max_threads = threads.iter().copied().max().unwrap_or(1);
    let max_depth = iodepth.iter().copied().max().unwrap_or(1);
    let secs = job.time.unwrap_or(DEFAULT_SECS);
    let cpus = job.session.cpus.clone();
    let io_cpus = io_threads_for(&memory, &cpus);
    let base = spec_from(
        &JobArgs {
            time: Some(secs),
            ..job.clone()
        },
        memory,
    )?;
    on_bench_runtime(max_threads, io_cpus, |io| async move {
        // Which drives a worker sends to, and so which queues a controller needs, depends on
        // the thread count: the drives are opened again when it changes.
        let mut open: Option<(usize, Vec<_>)> = None;
        let mut results = Vec::new();
        for point in points {
            let Point {
                bs,
                threads,
                iodepth,
            } = point;
            let drives = match open.take() {
                Some((t, drives)) if t == threads => drives,
                other => {
                    if let Some((_, drives)) = other {
                        close_drives(drives).await;
                    }
                    let (sharing, io) = (job.worker_drives, io.clone());
                    open_drives(&source, &job.session, threads, sharing, max_depth, io).await?
                }
            };
            let spec = Spec {
                bs,
                threads,
                iodepth,
                time: Some(Duration::from_secs_f64(secs)),
                ..base.clone()
            };
            if !job.quiet && !job.json {
                eprintln!("sweep: bs {bs} threads {threads} iodepth {iodepth}");
            }
            match run_spec(&drives, spec, job.quiet || job.json).await {
                Ok(mut report) => {
                    report.placement = source.placed().map(PlacementReport::of);
                    results.push((point, report));
                    open = Some((threads, drives));
                }
                Err(e) => {
                    close_drives(drives).await;
                    return Err(e.context(format!(
                        "sweep point bs {bs} threads {threads} iodepth {iodepth}"
                    )));
                }
            }
        }
        if let Some((_, drives)) = open {
            close_drives(drives).await;
        }
        let title = format!(
            "fabrik bench {} over {} ({secs} s per point)",
            job.rw.name(),
            source.describe()
        );
        std::fs::write(&job.svg, sweep::svg(&title, &results))?;
        if job.json {
            let list: Vec<_> = results
                .iter()
                .map(|(p, r)| serde_json::json!({"point": p, "report": r}))
                .collect();
            println!("{}", serde_json::to_string_pretty(&list)?);
        } else {
            print!("{}", sweep::table(&results));
            println!("heatmaps: {}", job.svg.display());
        }
        Ok(())
    })
}
