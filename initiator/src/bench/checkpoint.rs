//! The LLM-checkpoint workload (DLIO-like): `count` checkpoints of `size` bytes, each written as
//! one shard per drive, all shards in parallel, then flushed. Successive checkpoints go to
//! successive regions of the drives (wrapping round), so a drive slowing down under sustained
//! writes shows as a rising time per checkpoint.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{BenchError, Drive, Memory, Progress, Rw, Spec};

/// What to write.
#[derive(Debug, Clone)]
pub struct CheckpointSpec {
    pub count: u32,
    /// Bytes per checkpoint, all shards together.
    pub size: u64,
    /// Bytes per write command.
    pub bs: u32,
    pub iodepth: u32,
    pub threads: usize,
    /// Where the checkpoint's data comes from (GPU memory, as a training job's would).
    pub memory: Memory,
}

/// One checkpoint's figures.
#[derive(Debug, Clone, Serialize)]
pub struct CheckpointResult {
    pub index: u32,
    pub seconds: f64,
    pub bytes: u64,
    pub bytes_per_sec: f64,
    /// Where this checkpoint's shards start on each drive.
    pub drive_offset: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct CheckpointReport {
    pub drives: usize,
    pub shard_bytes: u64,
    pub bs: u32,
    pub iodepth: u32,
    pub threads: usize,
    pub checkpoints: Vec<CheckpointResult>,
    /// All bytes over all time.
    pub bytes_per_sec: f64,
    /// The drives placed for a GPU, when the run used a placement plan.
    pub placement: Option<super::report::PlacementReport>,
}

/// Writes the checkpoints; `on_checkpoint` sees each result as it completes.
pub async fn run(
    drives: Vec<Drive>,
    spec: CheckpointSpec,
    progress: Arc<Progress>,
    mut on_checkpoint: impl FnMut(&CheckpointResult),
) -> Result<CheckpointReport, BenchError> {
    let bs = spec.bs as u64;
    if drives.is_empty() || bs == 0 || spec.count == 0 {
        return Err(BenchError::Invalid(
            "a checkpoint run needs drives, a block size and a count".into(),
        ));
    }
    let shard = spec.size / drives.len() as u64 / bs * bs;
    if shard == 0 {
        return Err(BenchError::Invalid(format!(
            "a {}-byte checkpoint over {} drives is less than one {bs}-byte write per drive",
            spec.size,
            drives.len()
        )));
    }
    let smallest = drives
        .iter()
        .map(|d| d.blocks * d.lba_size as u64)
        .min()
        .unwrap_or(0);
    let slots = smallest / shard;
    if slots == 0 {
        return Err(BenchError::Invalid(format!(
            "a {shard}-byte shard does not fit on the smallest drive ({smallest} bytes)"
        )));
    }
    let mut checkpoints = Vec::new();
    let started = Instant::now();
    for index in 0..spec.count {
        let offset = (index as u64 % slots) * shard;
        let job = Spec {
            rw: Rw::Write,
            bs: spec.bs,
            iodepth: spec.iodepth,
            threads: spec.threads,
            size: Some(shard * drives.len() as u64),
            time: None,
            offset,
            memory: spec.memory.clone(),
            ..Spec::default()
        };
        let t0 = Instant::now();
        let report = super::run(drives.clone(), job, progress.clone()).await?;
        flush_all(&drives).await?;
        let seconds = t0.elapsed().as_secs_f64();
        let result = CheckpointResult {
            index,
            seconds,
            bytes: report.bytes,
            bytes_per_sec: report.bytes as f64 / seconds.max(1e-9),
            drive_offset: offset,
        };
        on_checkpoint(&result);
        checkpoints.push(result);
    }
    let total: u64 = checkpoints.iter().map(|c| c.bytes).sum();
    Ok(CheckpointReport {
        drives: drives.len(),
        shard_bytes: shard,
        bs: spec.bs,
        iodepth: spec.iodepth,
        threads: spec.threads,
        checkpoints,
        bytes_per_sec: total as f64 / started.elapsed().max(Duration::from_nanos(1)).as_secs_f64(),
        placement: None,
    })
}

/// A checkpoint is complete when it is durable: Flush on every drive, in parallel.
async fn flush_all(drives: &[Drive]) -> Result<(), BenchError> {
    let flushes = drives.iter().map(|d| {
        let d = d.clone();
        tokio::spawn(async move {
            d.session
                .flush(0, d.nsid)
                .await
                .map_err(|error| BenchError::Io {
                    path: d.describe(),
                    error,
                })
        })
    });
    let handles: Vec<_> = flushes.collect();
    for h in handles {
        h.await
            .map_err(|e| BenchError::Invalid(format!("a flush task failed (a bug): {e}")))??;
    }
    Ok(())
}
