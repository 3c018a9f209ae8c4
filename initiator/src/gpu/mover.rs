//! Moving data between namespaces and one GPU buffer over one I/O queue of a session, by the
//! path that queue allows: peer-to-peer when its NIC registers the GPU memory, else staged.
//! The choice is made once, when the mover is made, and said in `DataPath`.

use std::collections::HashMap;
use std::sync::Arc;

use super::staged::StagingRing;
use super::{GpuBuffer, GpuError};
use crate::error::HostError;
use crate::host::session::Session;
use crate::transport::peer::{PeerMemory, Registration};

/// Which way data moves between the network and the GPU, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataPath {
    /// GPUDirect RDMA: the NIC reads and writes GPU memory itself.
    PeerToPeer {
        nic: String,
        registration: Registration,
    },
    /// Through pinned host buffers and asynchronous copies.
    Staged { reason: String },
}

impl DataPath {
    /// "p2p" or "staged".
    pub fn name(&self) -> &'static str {
        match self {
            DataPath::PeerToPeer { .. } => "p2p",
            DataPath::Staged { .. } => "staged",
        }
    }
}

impl std::fmt::Display for DataPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DataPath::PeerToPeer { nic, registration } => {
                let how = match registration {
                    Registration::DmaBuf => "as a dma-buf",
                    Registration::Pointer => "by address",
                };
                write!(f, "p2p: GPU memory registered on NIC {nic} {how}")
            }
            DataPath::Staged { reason } => write!(f, "staged: {reason}"),
        }
    }
}

/// The staging ring of a staged mover: how many buffers, how large.
#[derive(Debug, Clone, Copy)]
pub struct Staging {
    /// Buffers in the ring (at least 2).
    pub buffers: usize,
    /// Bytes per buffer: transfers larger than this go in pieces, pipelined.
    pub chunk: usize,
}

impl Default for Staging {
    fn default() -> Staging {
        Staging {
            buffers: 2,
            chunk: 1 << 20,
        }
    }
}

pub struct GpuMover {
    /// First, so it is dropped first: its Drop waits for copies into `memory`.
    ring: Option<StagingRing>,
    session: Arc<Session>,
    queue: usize,
    memory: Arc<GpuBuffer>,
    path: DataPath,
    lba_sizes: HashMap<u32, u32>,
}

fn gpu_error(e: GpuError) -> HostError {
    HostError::Gpu(e.0)
}

impl GpuMover {
    /// A mover for `memory` on I/O queue `queue` of `session`: peer-to-peer when the queue's
    /// NIC registers the memory, else staged (the reason kept in `path`).
    pub async fn new(
        session: Arc<Session>,
        queue: usize,
        memory: Arc<GpuBuffer>,
        staging: Staging,
    ) -> Result<GpuMover, HostError> {
        let peer: Arc<dyn PeerMemory> = memory.clone();
        match session.register_peer(queue, &peer).await {
            Ok((registration, nic)) => Ok(GpuMover {
                session,
                queue,
                memory,
                path: DataPath::PeerToPeer { nic, registration },
                ring: None,
                lba_sizes: HashMap::new(),
            }),
            Err(e @ HostError::PeerMemory { .. }) => {
                GpuMover::staged(session, queue, memory, staging, e.to_string())
            }
            Err(e) => Err(e),
        }
    }

    /// A staged mover whatever the queue could do (`reason` says why).
    pub fn staged(
        session: Arc<Session>,
        queue: usize,
        memory: Arc<GpuBuffer>,
        staging: Staging,
        reason: String,
    ) -> Result<GpuMover, HostError> {
        let driver = memory.driver.clone();
        let ring = StagingRing::new(driver, staging.buffers, staging.chunk).map_err(gpu_error)?;
        Ok(GpuMover {
            session,
            queue,
            memory,
            path: DataPath::Staged { reason },
            ring: Some(ring),
            lba_sizes: HashMap::new(),
        })
    }

    pub fn path(&self) -> &DataPath {
        &self.path
    }

    pub fn memory(&self) -> &Arc<GpuBuffer> {
        &self.memory
    }

    /// Staging buffers that came back from the transport as other allocations (0 in the
    /// normal course: reads land in the pinned buffers themselves).
    pub fn restaged(&self) -> u64 {
        self.ring.as_ref().map_or(0, StagingRing::restaged)
    }

    async fn lba_size(&mut self, nsid: u32) -> Result<u32, HostError> {
        if let Some(&size) = self.lba_sizes.get(&nsid) {
            return Ok(size);
        }
        let size = self
            .session
            .with_path(|ctrl| async move { ctrl.lba_size(nsid).await })
            .await?;
        self.lba_sizes.insert(nsid, size);
        Ok(size)
    }

    /// Bytes of `nlb` blocks, checked to fit the buffer at `offset`.
    async fn extent(&mut self, nsid: u32, nlb: u32, offset: usize) -> Result<u32, HostError> {
        if nlb == 0 {
            return Err(HostError::Invalid("a transfer of 0 blocks".into()));
        }
        let lba_size = self.lba_size(nsid).await?;
        let len = nlb as usize * lba_size as usize;
        self.memory.check_range(offset, len).map_err(gpu_error)?;
        Ok(lba_size)
    }

    /// Reads `nlb` blocks from `slba` into the GPU buffer at `offset`. Staged, the data may
    /// still be on its way to the GPU when this returns: `finish` waits for it.
    pub async fn read(
        &mut self,
        nsid: u32,
        slba: u64,
        nlb: u32,
        offset: usize,
    ) -> Result<(), HostError> {
        let lba_size = self.extent(nsid, nlb, offset).await?;
        let Some(ring) = self.ring.as_mut() else {
            let peer: Arc<dyn PeerMemory> = self.memory.clone();
            return self
                .session
                .read_peer(self.queue, nsid, slba, nlb, &peer, offset)
                .await;
        };
        let per_piece = (ring.chunk() / lba_size as usize).max(1) as u32;
        let mut done = 0;
        while done < nlb {
            let count = per_piece.min(nlb - done);
            let (index, buf) = ring.take().await.map_err(gpu_error)?;
            let buf = self
                .session
                .read_into(self.queue, nsid, slba + done as u64, count, buf)
                .await?;
            let dst = self.memory.ptr + (offset + done as usize * lba_size as usize) as u64;
            ring.to_device(index, buf, dst).map_err(gpu_error)?;
            done += count;
        }
        Ok(())
    }

    /// Writes `nlb` blocks at `slba` from the GPU buffer at `offset`.
    pub async fn write(
        &mut self,
        nsid: u32,
        slba: u64,
        nlb: u32,
        offset: usize,
        fua: bool,
    ) -> Result<(), HostError> {
        let lba_size = self.extent(nsid, nlb, offset).await?;
        let Some(ring) = self.ring.as_mut() else {
            let peer: Arc<dyn PeerMemory> = self.memory.clone();
            return self
                .session
                .write_peer(self.queue, nsid, slba, nlb, &peer, offset, fua)
                .await;
        };
        let per_piece = (ring.chunk() / lba_size as usize).max(1) as u32;
        let mut done = 0;
        while done < nlb {
            let count = per_piece.min(nlb - done);
            let len = count as usize * lba_size as usize;
            let src = self.memory.ptr + (offset + done as usize * lba_size as usize) as u64;
            let (index, buf) = ring.take().await.map_err(gpu_error)?;
            let data = ring
                .from_device(index, buf, src, len)
                .await
                .map_err(gpu_error)?;
            let written = self
                .session
                .write(self.queue, nsid, slba + done as u64, data.clone(), fua)
                .await;
            ring.sent(index, data);
            written?;
            done += count;
        }
        Ok(())
    }

    /// Waits until everything read has landed in the GPU.
    pub async fn finish(&mut self) -> Result<(), HostError> {
        match self.ring.as_mut() {
            Some(ring) => ring.drain().await.map_err(gpu_error),
            None => Ok(()),
        }
    }
}
