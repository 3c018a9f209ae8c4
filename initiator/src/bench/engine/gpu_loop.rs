//! An I/O loop's transfers into and from GPU memory: staged through the worker's pipeline, or
//! peer-to-peer on the loop's own bytes where the queue's NIC registers GPU memory.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::{io_error, BenchError, Drive, IoLoop, VerifyState};
use crate::gpu::mover::GpuMover;

impl IoLoop {
    /// Reads `nlb` blocks at `slba` of drive `d` into GPU memory: staged, into a slot of the
    /// worker's pipeline; peer-to-peer, into the loop's own bytes. With `check`, what landed in
    /// the GPU is copied back and checked. Gives the read's time (not waiting for a slot).
    pub(super) async fn read_gpu(
        &self,
        g: &mut LoopGpu,
        d: usize,
        slba: u64,
        nlb: u32,
        check: Option<&VerifyState>,
    ) -> Result<Duration, BenchError> {
        let drive = &self.ctx.drives[d];
        let io = |e| io_error(drive, e);
        let (took, landed, _slot) = match g.staged(d, drive, &self.reads, self.worker).await? {
            Some(pipeline) => {
                let mut slot = pipeline.slot().await.map_err(|e| io(e.into()))?;
                let t0 = Instant::now();
                drive
                    .session
                    .read_to(
                        drive.queue(self.worker),
                        drive.nsid,
                        slba,
                        nlb,
                        slot.target(),
                    )
                    .await
                    .map_err(io)?;
                let took = t0.elapsed();
                // Given back received as the slot drops (one lock for both), unless the data is
                // checked: then it must be in the GPU first (and the slot is held meanwhile).
                if check.is_some() {
                    slot.landed().await.map_err(|e| io(e.into()))?;
                }
                (took, g.reads_at + slot.device_offset(), Some(slot))
            }
            None => {
                let t0 = Instant::now();
                g.mover
                    .read(
                        &drive.session,
                        drive.queue(self.worker),
                        drive.nsid,
                        slba,
                        nlb,
                        g.own,
                    )
                    .await
                    .map_err(io)?;
                (t0.elapsed(), g.own, None)
            }
        };
        if let Some(v) = check {
            let data = g.mover.download(landed, self.ctx.spec.bs as usize).await;
            v.check(drive, d, slba, &data.map_err(io)?);
        }
        Ok(took)
    }

    /// Writes `nlb` blocks at `slba` of drive `d` from GPU memory: staged, from a slot of the
    /// worker's pipeline; peer-to-peer, from the loop's own bytes. A `pattern` (verify) goes to
    /// the GPU first, so that the write sends what the GPU holds. Gives the write's time.
    pub(super) async fn write_gpu(
        &self,
        g: &mut LoopGpu,
        d: usize,
        slba: u64,
        nlb: u32,
        pattern: Option<Bytes>,
    ) -> Result<Duration, BenchError> {
        let drive = &self.ctx.drives[d];
        let io = |e| io_error(drive, e);
        match g.staged(d, drive, &self.writes, self.worker).await? {
            Some(pipeline) => {
                let mut slot = pipeline.slot().await.map_err(|e| io(e.into()))?;
                if let Some(data) = pattern {
                    let at = g.writes_at + slot.device_offset();
                    g.mover.upload(at, &data).await.map_err(io)?;
                    slot.refresh().await.map_err(|e| io(e.into()))?;
                }
                let t0 = Instant::now();
                drive
                    .session
                    .write(
                        drive.queue(self.worker),
                        drive.nsid,
                        slba,
                        slot.into_bytes(),
                        false,
                    )
                    .await
                    .map_err(io)?;
                Ok(t0.elapsed())
            }
            None => {
                if let Some(data) = pattern {
                    g.mover.upload(g.own, &data).await.map_err(io)?;
                }
                let t0 = Instant::now();
                g.mover
                    .write(
                        &drive.session,
                        drive.queue(self.worker),
                        drive.nsid,
                        slba,
                        nlb,
                        g.own,
                        false,
                    )
                    .await
                    .map_err(io)?;
                Ok(t0.elapsed())
            }
        }
    }
}

/// An I/O loop's way into GPU memory.
pub(super) struct LoopGpu {
    /// Peer-to-peer transfers, and staged ones of its own where a queue has no pipeline.
    pub(super) mover: GpuMover,
    /// Per drive: whether transfers go peer-to-peer on the loop's queue (the mover chooses at
    /// the queue's first transfer and keeps it; asked once).
    pub(super) peer: Vec<Option<bool>>,
    /// The loop's own `bs` bytes of the run's allocation, and the starts of its worker's
    /// staged-read and staged-write regions.
    pub(super) own: usize,
    pub(super) reads_at: usize,
    pub(super) writes_at: usize,
}

impl LoopGpu {
    /// The worker's `pipeline` where drive `d` (`drive`) is staged on worker `worker`'s queue;
    /// None where it goes peer-to-peer.
    async fn staged<P>(
        &mut self,
        d: usize,
        drive: &Drive,
        pipeline: &Option<Arc<P>>,
        worker: usize,
    ) -> Result<Option<Arc<P>>, BenchError> {
        let peer = match self.peer[d] {
            Some(peer) => peer,
            None => {
                let peer = (self
                    .mover
                    .is_peer(&drive.session, drive.queue(worker))
                    .await)
                    .map_err(|e| io_error(drive, e))?;
                self.peer[d] = Some(peer);
                peer
            }
        };
        Ok(if peer { None } else { pipeline.clone() })
    }
}
