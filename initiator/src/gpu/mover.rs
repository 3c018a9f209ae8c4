//! Moving data between namespaces and one GPU buffer, by the path each I/O queue allows:
//! peer-to-peer where the queue's NIC registers the GPU memory, else staged. The choice is made
//! at a queue's first transfer and kept, unless the session later runs the queue where peer
//! memory is refused (a multipath session that fails over from NVMe/RDMA to NVMe/TCP): that
//! transfer and the queue's later ones go staged. `paths` says what ran and why.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::BytesMut;

use super::staged::StagingRing;
use super::GpuBuffer;
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

/// The staging ring of a mover: how many buffers, how large.
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

/// Moves data for one GPU buffer; one transfer at a time (make one mover per concurrent
/// stream of transfers: they share the buffer, each has its own staging ring).
pub struct GpuMover {
    /// First, so it is dropped first: its Drop waits for copies into `memory`.
    ring: Option<StagingRing>,
    memory: Arc<GpuBuffer>,
    staging: Staging,
    /// The path of each (session, queue) used so far.
    paths: HashMap<(usize, usize), (String, DataPath)>,
    lba_sizes: HashMap<(usize, u32), u32>,
}

fn session_key(session: &Arc<Session>) -> usize {
    Arc::as_ptr(session) as usize
}

impl GpuMover {
    pub fn new(memory: Arc<GpuBuffer>, staging: Staging) -> GpuMover {
        GpuMover {
            ring: None,
            memory,
            staging,
            paths: HashMap::new(),
            lba_sizes: HashMap::new(),
        }
    }

    pub fn memory(&self) -> &Arc<GpuBuffer> {
        &self.memory
    }

    /// The path each queue used: (session description and queue, path).
    pub fn paths(&self) -> impl Iterator<Item = &(String, DataPath)> {
        self.paths.values()
    }

    /// Staging buffers that came back from the transport as other allocations (0 in the
    /// normal course: reads land in the pinned buffers themselves).
    pub fn restaged(&self) -> u64 {
        self.ring.as_ref().map_or(0, StagingRing::restaged)
    }

    /// The path for I/O queue `queue` of `session`, chosen at its first use: peer-to-peer when
    /// the queue's NIC registers the memory, else staged with the reason.
    pub async fn path(
        &mut self,
        session: &Arc<Session>,
        queue: usize,
    ) -> Result<DataPath, HostError> {
        let key = (session_key(session), queue);
        if let Some((_, path)) = self.paths.get(&key) {
            return Ok(path.clone());
        }
        let peer: Arc<dyn PeerMemory> = self.memory.clone();
        let path = match session.register_peer(queue, &peer).await {
            Ok((registration, nic)) => DataPath::PeerToPeer { nic, registration },
            Err(e @ HostError::PeerMemory { .. }) => DataPath::Staged {
                reason: e.to_string(),
            },
            Err(e) => return Err(e),
        };
        let name = format!("{} queue {queue}", session.subnqn());
        self.paths.insert(key, (name, path.clone()));
        Ok(path)
    }

    /// Whether transfers on I/O queue `queue` of `session` go peer-to-peer (as `path`, without
    /// a copy of the path: it is asked once per transfer).
    pub async fn is_peer(
        &mut self,
        session: &Arc<Session>,
        queue: usize,
    ) -> Result<bool, HostError> {
        let peer = |p: &DataPath| matches!(p, DataPath::PeerToPeer { .. });
        match self.paths.get(&(session_key(session), queue)) {
            Some((_, path)) => Ok(peer(path)),
            None => self.path(session, queue).await.map(|p| peer(&p)),
        }
    }

    /// A peer transfer on `queue` was refused where the session runs it now (before anything
    /// was sent: the refusal comes before the first command). It and the queue's later
    /// transfers go staged, and the path says why.
    fn peer_refused(&mut self, session: &Arc<Session>, queue: usize, e: &HostError) {
        let name = format!("{} queue {queue}", session.subnqn());
        let reason = format!("peer-to-peer refused after the session changed paths: {e}");
        let path = DataPath::Staged { reason };
        self.paths
            .insert((session_key(session), queue), (name, path));
    }

    fn ring(&mut self) -> Result<&mut StagingRing, HostError> {
        if self.ring.is_none() {
            let driver = self.memory.driver.clone();
            let ring = StagingRing::new(driver, self.staging.buffers, self.staging.chunk)?;
            self.ring = Some(ring);
        }
        Ok(self.ring.as_mut().expect("just made"))
    }

    async fn lba_size(&mut self, session: &Arc<Session>, nsid: u32) -> Result<u32, HostError> {
        let key = (session_key(session), nsid);
        if let Some(&size) = self.lba_sizes.get(&key) {
            return Ok(size);
        }
        let size = session
            .with_path(|ctrl| async move { ctrl.lba_size(nsid).await })
            .await?;
        self.lba_sizes.insert(key, size);
        Ok(size)
    }

    /// The block size, with `nlb` blocks checked to fit the buffer at `offset`.
    async fn extent(
        &mut self,
        session: &Arc<Session>,
        nsid: u32,
        nlb: u32,
        offset: usize,
    ) -> Result<u32, HostError> {
        if nlb == 0 {
            return Err(HostError::Invalid("a transfer of 0 blocks".into()));
        }
        let lba_size = self.lba_size(session, nsid).await?;
        let len = nlb as usize * lba_size as usize;
        self.memory.check_range(offset, len)?;
        Ok(lba_size)
    }

    /// Reads `nlb` blocks from `slba` into the GPU buffer at `offset`. Staged, the data may
    /// still be on its way to the GPU when this returns: `finish` waits for it.
    pub async fn read(
        &mut self,
        session: &Arc<Session>,
        queue: usize,
        nsid: u32,
        slba: u64,
        nlb: u32,
        offset: usize,
    ) -> Result<(), HostError> {
        let lba_size = self.extent(session, nsid, nlb, offset).await?;
        if self.is_peer(session, queue).await? {
            let peer: Arc<dyn PeerMemory> = self.memory.clone();
            match session
                .read_peer(queue, nsid, slba, nlb, &peer, offset)
                .await
            {
                Err(e @ HostError::PeerMemory { .. }) => self.peer_refused(session, queue, &e),
                done => return done,
            }
        }
        let base = self.memory.ptr + offset as u64;
        let ring = self.ring()?;
        let per_piece = (ring.chunk() / lba_size as usize).max(1) as u32;
        let mut done = 0;
        while done < nlb {
            let count = per_piece.min(nlb - done);
            let (index, buf) = ring.take().await?;
            let buf = session
                .read_into(queue, nsid, slba + done as u64, count, buf)
                .await?;
            let dst = base + done as u64 * lba_size as u64;
            ring.to_device(index, buf, dst)?;
            done += count;
        }
        Ok(())
    }

    /// Writes `nlb` blocks at `slba` from the GPU buffer at `offset`.
    #[allow(clippy::too_many_arguments)]
    pub async fn write(
        &mut self,
        session: &Arc<Session>,
        queue: usize,
        nsid: u32,
        slba: u64,
        nlb: u32,
        offset: usize,
        fua: bool,
    ) -> Result<(), HostError> {
        let lba_size = self.extent(session, nsid, nlb, offset).await?;
        if self.is_peer(session, queue).await? {
            let peer: Arc<dyn PeerMemory> = self.memory.clone();
            match session
                .write_peer(queue, nsid, slba, nlb, &peer, offset, fua)
                .await
            {
                Err(e @ HostError::PeerMemory { .. }) => self.peer_refused(session, queue, &e),
                done => return done,
            }
        }
        let base = self.memory.ptr + offset as u64;
        let ring = self.ring()?;
        let per_piece = (ring.chunk() / lba_size as usize).max(1) as u32;
        let mut done = 0;
        while done < nlb {
            let count = per_piece.min(nlb - done);
            let len = count as usize * lba_size as usize;
            let src = base + done as u64 * lba_size as u64;
            let (index, buf) = ring.take().await?;
            let data = ring.from_device(index, buf, src, len).await?;
            let written = session
                .write(queue, nsid, slba + done as u64, data.clone(), fua)
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
            Some(ring) => ring.drain().await.map_err(HostError::from),
            None => Ok(()),
        }
    }

    /// Copies `len` bytes of the GPU buffer at `offset` to the host, after every read so far
    /// has landed (checks of what a read put in the GPU).
    pub async fn download(&mut self, offset: usize, len: usize) -> Result<BytesMut, HostError> {
        self.memory.check_range(offset, len)?;
        let base = self.memory.ptr + offset as u64;
        let ring = self.ring()?;
        let mut out = BytesMut::with_capacity(len);
        while out.len() < len {
            let piece = ring.chunk().min(len - out.len());
            let (index, buf) = ring.take().await?;
            // The ring's stream runs in order: this copy follows every copy of earlier reads.
            let data = ring
                .from_device(index, buf, base + out.len() as u64, piece)
                .await?;
            out.extend_from_slice(&data);
            ring.sent(index, data);
        }
        Ok(out)
    }

    /// Copies `data` into the GPU buffer at `offset` (what a later write sends), and waits
    /// for it.
    pub async fn upload(&mut self, offset: usize, data: &[u8]) -> Result<(), HostError> {
        self.memory.check_range(offset, data.len())?;
        let base = self.memory.ptr + offset as u64;
        let ring = self.ring()?;
        let chunk = ring.chunk();
        for (i, piece) in data.chunks(chunk).enumerate() {
            let (index, mut buf) = ring.take().await?;
            buf.clear();
            buf.extend_from_slice(piece);
            ring.to_device(index, buf, base + (i * chunk) as u64)?;
        }
        // A peer-to-peer write reads GPU memory without the stream: wait for the copies.
        ring.drain().await.map_err(HostError::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::emulated::EmulatedGpu;
    use crate::gpu::Gpu;
    use crate::host::session::RecoveryPolicy;
    use crate::{ConnectOptions, Controller};
    use std::time::Duration;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_queue_refused_peer_memory_after_a_path_change_goes_staged() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = fabrik_target::config::Config::default_jbof(dir.path().to_path_buf());
        cfg.listen = vec!["127.0.0.1:0".parse().unwrap()];
        cfg.box_name = "moverbox".into();
        cfg.drives = 1;
        cfg.drive_size = 16 << 20;
        cfg.backend = fabrik_target::backend::BackendKind::Ram;
        let target = fabrik_target::Target::start(cfg).await.unwrap();
        let opts = ConnectOptions::new(target.listen_addrs()[0], &target.subsystem_nqns()[0]);
        let ctrl = Controller::connect(opts.clone()).await.unwrap();
        let session =
            Session::from_controllers(vec![(opts, Some(ctrl))], RecoveryPolicy::default())
                .await
                .unwrap();
        let gpu = Gpu::with_driver(Arc::new(EmulatedGpu::new(Duration::ZERO)));
        let buffer = gpu.alloc(256 << 10).unwrap();
        let data: Vec<u8> = (0..128 << 10).map(|i| (i * 7 % 251) as u8).collect();
        buffer.copy_from_host(0, &data).unwrap();
        let mut mover = GpuMover::new(buffer.clone(), Staging::default());
        // The queue chose p2p at its first transfer, on an NVMe/RDMA path; the session now runs
        // it on NVMe/TCP (its only path here), which refuses peer memory.
        let p2p = DataPath::PeerToPeer {
            nic: "rxe0".into(),
            registration: Registration::DmaBuf,
        };
        mover
            .paths
            .insert((session_key(&session), 0), ("queue 0".into(), p2p));
        let nlb = (data.len() / mover.lba_size(&session, 1).await.unwrap() as usize) as u32;
        mover
            .write(&session, 0, 1, 0, nlb, 0, false)
            .await
            .expect("the write goes staged");
        mover
            .read(&session, 0, 1, 0, nlb, 128 << 10)
            .await
            .expect("the read goes staged");
        mover.finish().await.unwrap();
        let mut back = vec![0u8; data.len()];
        buffer.copy_to_host(128 << 10, &mut back).unwrap();
        assert!(
            back == data,
            "what was read back differs from what was written"
        );
        let (_, path) = mover.paths().next().expect("a path");
        match path {
            DataPath::Staged { reason } => {
                assert!(reason.contains("changed paths"), "{reason}");
                assert!(reason.contains("NVMe/TCP"), "{reason}");
            }
            other => panic!("expected staged after the refusal, got {other}"),
        }
    }

    #[test]
    fn paths_say_which_way_and_why() {
        let p2p = DataPath::PeerToPeer {
            nic: "mlx5_2".into(),
            registration: Registration::DmaBuf,
        };
        assert_eq!(p2p.name(), "p2p");
        assert_eq!(
            p2p.to_string(),
            "p2p: GPU memory registered on NIC mlx5_2 as a dma-buf"
        );
        let staged = DataPath::Staged {
            reason: "NIC rxe0 cannot register GPU memory: dma-buf: not supported".into(),
        };
        assert_eq!(staged.name(), "staged");
        assert_eq!(
            staged.to_string(),
            "staged: NIC rxe0 cannot register GPU memory: dma-buf: not supported"
        );
    }
}
