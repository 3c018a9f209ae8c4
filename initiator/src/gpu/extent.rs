//! Reading one extent striped over several drives into one GPU buffer: what loading a file
//! (a checkpoint shard, a dataset file) from a RAID-0 of NVMe-oF drives into a GPU looks like.
//!
//! Stripe unit `k` of the extent lives on drive `k % n` at `start + (k / n) * stripe` bytes and
//! lands at `k * stripe` in the buffer. Each drive is read by `queues` movers at once (one per
//! I/O queue), each taking the next unit of its drive: every drive and queue stays busy.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::mover::{DataPath, GpuMover, Staging};
use super::GpuBuffer;
use crate::error::HostError;
use crate::host::session::Session;

/// One drive of the stripe: a namespace of a session, with its block size.
#[derive(Clone)]
pub struct StripeMember {
    pub session: Arc<Session>,
    pub nsid: u32,
    pub lba_size: u32,
}

/// Where the extent is and how it is striped.
#[derive(Debug, Clone, Copy)]
pub struct Extent {
    /// Bytes from each drive's start where the extent's first unit on it is.
    pub start: u64,
    /// Bytes of the extent (the buffer's first `len` bytes).
    pub len: u64,
    /// Stripe unit, a multiple of every drive's block size.
    pub stripe: u64,
}

/// What a read did: the path each queue took.
#[derive(Debug, Clone)]
pub struct ExtentRead {
    pub paths: Vec<(String, DataPath)>,
}

/// Reads `extent` from `drives` into `buffer`, `queues` transfers in flight per drive; returns
/// once all of it is in GPU memory.
pub async fn read_extent(
    drives: &[StripeMember],
    extent: Extent,
    buffer: &Arc<GpuBuffer>,
    queues: usize,
) -> Result<ExtentRead, HostError> {
    let invalid = |m: String| Err(HostError::Invalid(m));
    if drives.is_empty() || queues == 0 || extent.stripe == 0 {
        return invalid("an extent needs drives, queues and a stripe unit".into());
    }
    if extent.len > buffer.len() as u64 {
        return invalid(format!(
            "a {}-byte extent does not fit the {}-byte GPU buffer",
            extent.len,
            buffer.len()
        ));
    }
    for d in drives {
        let lba = d.lba_size as u64;
        if !extent.stripe.is_multiple_of(lba)
            || !extent.start.is_multiple_of(lba)
            || !extent.len.is_multiple_of(lba)
        {
            return invalid(format!(
                "stripe, start and length must be multiples of the {lba}-byte blocks of {}",
                d.session.subnqn()
            ));
        }
    }
    let units = extent.len.div_ceil(extent.stripe);
    let n = drives.len() as u64;
    let staging = Staging {
        buffers: 3,
        chunk: (extent.stripe as usize).min(1 << 20),
    };
    let mut tasks = Vec::new();
    for (i, drive) in drives.iter().enumerate() {
        // The drive's units, handed out to its movers as they come free.
        let next = Arc::new(AtomicU64::new(0));
        let mine = units.saturating_sub(i as u64).div_ceil(n);
        for queue in 0..queues {
            let (drive, next, buffer) = (drive.clone(), next.clone(), buffer.clone());
            tasks.push(tokio::spawn(async move {
                let mut mover = GpuMover::new(buffer, staging);
                loop {
                    let j = next.fetch_add(1, Ordering::Relaxed);
                    if j >= mine {
                        break;
                    }
                    let unit = j * n + i as u64;
                    let offset = unit * extent.stripe;
                    let len = extent.stripe.min(extent.len - offset);
                    let slba = (extent.start + j * extent.stripe) / drive.lba_size as u64;
                    let nlb = (len / drive.lba_size as u64) as u32;
                    mover
                        .read(
                            &drive.session,
                            queue,
                            drive.nsid,
                            slba,
                            nlb,
                            offset as usize,
                        )
                        .await?;
                }
                mover.finish().await?;
                Ok::<_, HostError>(mover.paths().cloned().collect::<Vec<_>>())
            }));
        }
    }
    let mut paths = Vec::new();
    let mut first_error = None;
    for task in tasks {
        match task.await {
            Ok(Ok(p)) => paths.extend(p),
            Ok(Err(e)) => {
                first_error.get_or_insert(e);
            }
            Err(e) => {
                first_error.get_or_insert(HostError::Invalid(format!("a read task failed: {e}")));
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(ExtentRead { paths }),
    }
}
