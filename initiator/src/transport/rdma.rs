//! NVMe/RDMA, host side: one RC queue pair per queue, connected through rdma_cm with the
//! NVMe/RDMA private data. Commands go by SEND; every data transfer is a keyed SGL (type 0x40)
//! naming the command's slot in a buffer registered once at connect time, which the target
//! RDMA-READs (writes) or RDMA-WRITEs (reads). Completions arrive by SEND into 16-byte
//! receives. A driver task owns the queue pair; callers talk to it through a channel.
//!
//! Peer transfers (`submit_peer`) name caller memory instead of the slot: memory registered
//! once on the queue's protection domain (a GPU's, by dma-buf or pointer, or the host's), so
//! the data moves between the target and that memory without a copy.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use fabrik_proto::rdma::cm::RECFMT;
use fabrik_proto::rdma::{CmReject, CmRequest, RejectStatus};
use fabrik_proto::{Cqe, SglDescriptor, Sqe};
use fabrik_rdma::{
    self as verbs, Completion as Wc, EventChannel, QpSizes, QueuePair, SendOp, SendWr,
};
use tokio::sync::{mpsc, oneshot};

use self::peer_region::{check_direction, PeerRegion};

use super::peer::{self, PeerMemory, Registration};
use super::Completion;
use crate::error::HostError;
use crate::transport::target::RecvTarget;

/// Data one command may move: each slot has this much registered memory.
pub const SLOT_DATA: usize = 128 * 1024;
/// Data one peer transfer may move: a keyed SGL's length field is 24 bits.
pub const PEER_DATA_MAX: usize = (1 << 24) - 1;
const SQE_LEN: usize = 64;
const CQE_LEN: usize = 16;
const WR_RECV: u64 = 1;
const WR_SEND: u64 = 2;
/// IBV_WC_WR_FLUSH_ERR.
const WC_WR_FLUSH_ERR: u32 = 5;
/// rdma_cm address and route resolution timeout.
const RESOLVE_TIMEOUT_MS: i32 = 2000;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

mod peer_region;

/// What callers send the driver task.
enum Message {
    Command(Request),
    /// Register peer memory on the queue's protection domain (if it is not yet).
    Register {
        mem: Arc<dyn PeerMemory>,
        done: oneshot::Sender<Result<Registration, HostError>>,
    },
}

/// The caller's place for a read's data.
enum Into {
    Buffer(BytesMut),
    Target(RecvTarget),
}

struct Request {
    sqe: Sqe,
    data_out: Bytes,
    data_in_len: usize,
    /// Where the data read lands (the caller's buffer or memory), else a buffer of its own.
    into: Option<Into>,
    sgl: SglChoice,
    /// The data moves to or from this caller memory instead of the slot.
    peer: Option<PeerTransfer>,
    done: oneshot::Sender<Result<Completion, HostError>>,
}

struct PeerTransfer {
    mem: Arc<dyn PeerMemory>,
    offset: usize,
    len: usize,
}

/// How a command's SGL is built. Anything but `Auto` is for exercising a target with
/// commands the Linux host would never send.
#[derive(Clone, Copy, Debug)]
pub enum SglChoice {
    /// A keyed SGL naming the command's slot (or a null one without data).
    Auto,
    /// This descriptor, as given.
    Exact(SglDescriptor),
    /// The slot's keyed SGL with a wrong rkey.
    BadKey,
    /// The slot's keyed SGL with this length.
    Length(u32),
}

/// One NVMe/RDMA queue. Dropping it disconnects.
pub struct RdmaQueue {
    qid: u16,
    /// The device the queue runs on ("rxe0", "mlx5_2").
    nic: String,
    requests: mpsc::UnboundedSender<Message>,
    closed: Arc<Mutex<Option<HostError>>>,
    stop: mpsc::UnboundedSender<HostError>,
}

impl RdmaQueue {
    /// Connects queue `qid` of `depth` entries to the target at `addr`, from the local address
    /// `src` if given (nvme-cli `--host-traddr`).
    pub async fn connect(
        src: Option<IpAddr>,
        addr: SocketAddr,
        qid: u16,
        depth: u16,
    ) -> Result<RdmaQueue, HostError> {
        match Self::connect_from(src, addr, qid, depth, connect_request(qid, depth)).await? {
            Ok(q) => Ok(q),
            Err(status) => Err(rejected(qid, status)),
        }
    }

    /// Connects with the given CM request, which may be one the Linux host would never send;
    /// a target's reject gives its NVMe/RDMA status (None when the reject carried none).
    pub async fn connect_with(
        addr: SocketAddr,
        qid: u16,
        depth: u16,
        request: CmRequest,
    ) -> Result<Result<RdmaQueue, Option<RejectStatus>>, HostError> {
        Self::connect_from(None, addr, qid, depth, request).await
    }

    async fn connect_from(
        src: Option<IpAddr>,
        addr: SocketAddr,
        qid: u16,
        depth: u16,
        request: CmRequest,
    ) -> Result<Result<RdmaQueue, Option<RejectStatus>>, HostError> {
        verbs::check_libraries()
            .and_then(|_| verbs::check_devices())
            .map_err(|e| HostError::Invalid(format!("RDMA unavailable: {e}")))?;
        let io = |what: &str| {
            let what = format!("queue {qid}: {what} {addr}");
            move |e: std::io::Error| HostError::io(what, e)
        };
        let channel = EventChannel::new().map_err(io("rdma_cm channel for"))?;
        let id = channel.create_id().map_err(io("rdma_cm id for"))?;
        let mut qp = QueuePair::new(id);
        qp.resolve(&channel, src, addr, RESOLVE_TIMEOUT_MS)
            .await
            .map_err(io("resolving"))?;
        let slots = u32::from(depth);
        let (sizes, limits) = qp
            .setup(
                |_| QpSizes {
                    recv_slots: slots,
                    recv_size: CQE_LEN,
                    send_wr: slots * 2,
                    send_sge: 1,
                    pool_bytes: slots as usize * (SQE_LEN + SLOT_DATA),
                    remote_access: true,
                },
                None,
                None,
            )
            .map_err(io("queue pair for"))?;
        let layout = Layout { sizes };
        let nic = qp.device_name();
        for slot in 0..slots as usize {
            qp.post_recv(wr_id(WR_RECV, slot), layout.cqe_off(slot), CQE_LEN)
                .map_err(io("posting receives for"))?;
        }
        let connected = tokio::time::timeout(
            CONNECT_TIMEOUT,
            qp.connect(&channel, &request.to_bytes(), limits.max_qp_rd_atom, 0),
        )
        .await
        .map_err(|_| {
            HostError::io(
                format!("queue {qid}: connecting to {addr}"),
                std::io::ErrorKind::TimedOut.into(),
            )
        })?
        .map_err(io("connecting to"))?;
        if let Err(ev) = connected {
            tracing::debug!(qid, event = %verbs::event_name(ev.kind), "connect refused");
            return Ok(Err(reject_status(&ev)));
        }
        let (requests, rx) = mpsc::unbounded_channel();
        let (stop, stop_rx) = mpsc::unbounded_channel();
        let closed = Arc::new(Mutex::new(None));
        let driver = Driver {
            qid,
            qp,
            channel,
            layout,
            free: (0..slots as u16).rev().collect(),
            inflight: (0..slots).map(|_| None).collect(),
            waiting: VecDeque::new(),
            closed: closed.clone(),
            nic: nic.clone(),
            peers: HashMap::new(),
        };
        tokio::spawn(driver.run(rx, stop_rx));
        Ok(Ok(RdmaQueue {
            qid,
            nic,
            requests,
            closed,
            stop,
        }))
    }

    pub fn qid(&self) -> u16 {
        self.qid
    }

    /// The name of the NIC the queue runs on ("rxe0", "mlx5_2").
    pub fn nic(&self) -> &str {
        &self.nic
    }

    /// Registers `mem` on the queue's protection domain, unless it is already: by dma-buf if
    /// it exports one, else by pointer if that may work. The registration lasts as long as
    /// the memory (it is dropped at a later registration or transfer after the memory is)
    /// or the queue. It runs on the queue's driver task, which waits for it meanwhile.
    pub async fn register(&self, mem: &Arc<dyn PeerMemory>) -> Result<Registration, HostError> {
        self.check_open()?;
        let (done, rx) = oneshot::channel();
        let mem = mem.clone();
        self.requests
            .send(Message::Register { mem, done })
            .map_err(|_| self.closed_error())?;
        rx.await.unwrap_or_else(|_| Err(self.closed_error()))
    }

    /// Sends a command whose data, `len` bytes at `offset` in `mem`, moves straight between
    /// the target and that memory (registered first if need be): to the target when
    /// `host_to_target`, which must agree with the opcode. Nothing is copied either way; the
    /// completion's data is empty. Callers keep `len` within MDTS and `PEER_DATA_MAX`.
    pub async fn submit_peer(
        &self,
        sqe: Sqe,
        mem: &Arc<dyn PeerMemory>,
        offset: usize,
        len: usize,
        host_to_target: bool,
    ) -> Result<Completion, HostError> {
        peer::check_range(mem.as_ref(), offset, len)?;
        if len > PEER_DATA_MAX {
            return Err(HostError::Invalid(format!(
                "a peer-memory transfer of {len} bytes: one keyed SGL names at most {PEER_DATA_MAX}"
            )));
        }
        check_direction(&sqe, host_to_target)?;
        let peer = PeerTransfer {
            mem: mem.clone(),
            offset,
            len,
        };
        self.request(sqe, None, 0, None, SglChoice::Auto, Some(peer))
            .await
    }

    /// Sends a command (its data by keyed SGL) and waits for its completion.
    pub async fn submit(
        &self,
        sqe: Sqe,
        data_out: Option<Bytes>,
        data_in_len: usize,
    ) -> Result<Completion, HostError> {
        self.submit_with(sqe, data_out, data_in_len, SglChoice::Auto)
            .await
    }

    /// Sends a command that reads `len` bytes into `buf` (cleared first): the data is copied
    /// once, from the registered buffer into `buf`, which the completion's data is (frozen).
    pub async fn submit_into(
        &self,
        sqe: Sqe,
        buf: BytesMut,
        len: usize,
    ) -> Result<Completion, HostError> {
        self.request(
            sqe,
            None,
            len,
            Some(Into::Buffer(buf)),
            SglChoice::Auto,
            None,
        )
        .await
    }

    /// Sends a command that reads `target.len()` bytes into `target` (copied once from the
    /// registered buffer); the completion's data is empty.
    pub async fn submit_to(&self, sqe: Sqe, target: RecvTarget) -> Result<Completion, HostError> {
        let len = target.len();
        self.request(
            sqe,
            None,
            len,
            Some(Into::Target(target)),
            SglChoice::Auto,
            None,
        )
        .await
    }

    /// As `submit`, with the SGL built as `sgl` says.
    pub async fn submit_with(
        &self,
        sqe: Sqe,
        data_out: Option<Bytes>,
        data_in_len: usize,
        sgl: SglChoice,
    ) -> Result<Completion, HostError> {
        self.request(sqe, data_out, data_in_len, None, sgl, None)
            .await
    }

    async fn request(
        &self,
        sqe: Sqe,
        data_out: Option<Bytes>,
        data_in_len: usize,
        into: Option<Into>,
        sgl: SglChoice,
        peer: Option<PeerTransfer>,
    ) -> Result<Completion, HostError> {
        let data_out = data_out.unwrap_or_default();
        if !data_out.is_empty() && data_in_len > 0 {
            return Err(HostError::Invalid(
                "a command cannot both send and receive data".into(),
            ));
        }
        if data_out.len().max(data_in_len) > SLOT_DATA {
            return Err(HostError::Invalid(format!(
                "NVMe/RDMA transfers are limited to {SLOT_DATA} bytes per command"
            )));
        }
        self.check_open()?;
        let (done, rx) = oneshot::channel();
        let req = Request {
            sqe,
            data_out,
            data_in_len,
            into,
            sgl,
            peer,
            done,
        };
        self.requests
            .send(Message::Command(req))
            .map_err(|_| self.closed_error())?;
        rx.await.unwrap_or_else(|_| Err(self.closed_error()))
    }

    fn check_open(&self) -> Result<(), HostError> {
        match self.closed.lock().unwrap().clone() {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }

    fn closed_error(&self) -> HostError {
        self.closed
            .lock()
            .unwrap()
            .clone()
            .unwrap_or(HostError::ConnectionClosed { qid: self.qid })
    }

    /// Fails every command in flight with `err` and disconnects.
    pub fn abort(&self, err: HostError) {
        let _ = self.stop.send(err);
    }

    pub fn close(&self, reason: &str) {
        self.abort(HostError::QueueClosed {
            qid: self.qid,
            reason: reason.into(),
        });
    }
}

impl Drop for RdmaQueue {
    fn drop(&mut self) {
        self.close("the queue was dropped");
    }
}

/// The CM request for queue `qid` of `depth` entries: we take a response for every command
/// we may have outstanding (HRQSIZE = depth, HSQSIZE = depth - 1, 0's based).
pub fn connect_request(qid: u16, depth: u16) -> CmRequest {
    CmRequest {
        recfmt: RECFMT,
        qid,
        hrqsize: depth,
        hsqsize: depth - 1,
        cntlid: 0,
    }
}

/// The NVMe/RDMA status of a reject, if the event is one that carries it.
fn reject_status(ev: &verbs::CmEvent) -> Option<RejectStatus> {
    if ev.kind != verbs::EV_REJECTED {
        return None;
    }
    CmReject::parse(&ev.private_data).ok().map(|r| r.status)
}

fn rejected(qid: u16, status: Option<RejectStatus>) -> HostError {
    let code = status.map_or(0, RejectStatus::code);
    let name = status
        .and_then(RejectStatus::name)
        .unwrap_or("no NVMe/RDMA reason");
    HostError::Protocol {
        qid,
        reason: format!("connect rejected: NVMe/RDMA status {code} ({name})"),
    }
}

fn wr_id(kind: u64, slot: usize) -> u64 {
    kind << 32 | slot as u64
}

/// Where things sit in the registered region: receives (CQEs), then per slot its SQE and data.
struct Layout {
    sizes: QpSizes,
}

impl Layout {
    fn cqe_off(&self, slot: usize) -> usize {
        slot * CQE_LEN
    }
    fn sqe_off(&self, slot: usize) -> usize {
        self.sizes.recv_slots as usize * CQE_LEN + slot * (SQE_LEN + SLOT_DATA)
    }
    fn data_off(&self, slot: usize) -> usize {
        self.sqe_off(slot) + SQE_LEN
    }
}

struct Pending {
    done: oneshot::Sender<Result<Completion, HostError>>,
    data_in_len: usize,
    into: Option<Into>,
    /// The peer memory the command's SGL names, kept alive until the target is done with it.
    peer: Option<Arc<dyn PeerMemory>>,
}

struct Driver {
    /// Registered peer memory by `PeerMemory::id`. First: fields drop in order, and the
    /// regions must go before the queue pair (and its PD).
    peers: HashMap<u64, PeerRegion>,
    qid: u16,
    qp: QueuePair,
    channel: EventChannel,
    layout: Layout,
    free: Vec<u16>,
    inflight: Vec<Option<Pending>>,
    waiting: VecDeque<Request>,
    closed: Arc<Mutex<Option<HostError>>>,
    nic: String,
}

impl Driver {
    async fn run(
        mut self,
        mut requests: mpsc::UnboundedReceiver<Message>,
        mut stop: mpsc::UnboundedReceiver<HostError>,
    ) {
        let err = self.serve(&mut requests, &mut stop).await;
        *self.closed.lock().unwrap() = Some(err.clone());
        // Peer memory of commands in flight stays allocated until the queue pair is gone:
        // the target may still be writing into it.
        let mut in_use = Vec::new();
        for p in self.inflight.iter_mut().filter_map(Option::take) {
            in_use.extend(p.peer);
            let _ = p.done.send(Err(err.clone()));
        }
        for r in self.waiting.drain(..) {
            let _ = r.done.send(Err(err.clone()));
        }
        requests.close();
        while let Ok(m) = requests.try_recv() {
            match m {
                Message::Command(r) => {
                    let _ = r.done.send(Err(err.clone()));
                }
                Message::Register { done, .. } => {
                    let _ = done.send(Err(err.clone()));
                }
            }
        }
        self.qp.disconnect();
        let Driver {
            qp, channel, peers, ..
        } = self;
        // Peer regions before the queue pair (and its PD); the queue pair (and its cm_id)
        // before the channel; rdma_destroy_id may block.
        let _ = tokio::task::spawn_blocking(move || {
            drop(peers);
            drop(qp);
            drop(channel);
            drop(in_use);
        })
        .await;
    }

    async fn serve(
        &mut self,
        requests: &mut mpsc::UnboundedReceiver<Message>,
        stop: &mut mpsc::UnboundedReceiver<HostError>,
    ) -> HostError {
        let mut wcs = [Wc::default(); 32];
        loop {
            loop {
                let n = match self.qp.poll(&mut wcs) {
                    Ok(n) => n,
                    Err(e) => return HostError::io(format!("queue {}: polling", self.qid), e),
                };
                for wc in &wcs[..n] {
                    if let Err(e) = self.on_completion(*wc) {
                        return e;
                    }
                }
                if n < wcs.len() {
                    break;
                }
            }
            tokio::select! {
                r = self.qp.wait() => {
                    if let Err(e) = r.and_then(|_| self.qp.arm()) {
                        return HostError::io(format!("queue {}: completion channel", self.qid), e);
                    }
                }
                message = requests.recv() => match message {
                    Some(Message::Command(req)) => {
                        if let Err(e) = self.take(req) {
                            return e;
                        }
                    }
                    Some(Message::Register { mem, done }) => {
                        let _ = done.send(self.register(&mem).map(|(how, _)| how));
                    }
                    None => return HostError::QueueClosed { qid: self.qid, reason: "the queue was dropped".into() },
                },
                Some(err) = stop.recv() => return err,
                ev = self.channel.next(|e| e.kind) => {
                    let kind = ev.unwrap_or(verbs::EV_REJECTED);
                    if kind != verbs::EV_ESTABLISHED {
                        tracing::debug!(qid = self.qid, event = %verbs::event_name(kind), "rdma_cm event");
                        return HostError::ConnectionClosed { qid: self.qid };
                    }
                }
            }
        }
    }

    /// Queues a caller's command and sends what slots allow. A peer transfer's memory is
    /// registered first; if that fails, only this command fails.
    fn take(&mut self, mut req: Request) -> Result<(), HostError> {
        if let Some(p) = &req.peer {
            match self.register(&p.mem) {
                Ok((_, rkey)) => {
                    req.sgl = SglChoice::Exact(SglDescriptor::KeyedDataBlock {
                        address: p.mem.addr() + p.offset as u64,
                        length: p.len as u32,
                        key: rkey,
                        invalidate: false,
                    })
                }
                Err(e) => {
                    let _ = req.done.send(Err(e));
                    return Ok(());
                }
            }
        }
        self.waiting.push_back(req);
        self.start_waiting()
    }

    /// Sends waiting commands while slots are free.
    fn start_waiting(&mut self) -> Result<(), HostError> {
        while !self.free.is_empty() {
            let Some(req) = self.waiting.pop_front() else {
                return Ok(());
            };
            let slot = self.free.pop().expect("a free slot") as usize;
            let region = self.qp.region.as_ref().expect("region");
            let mut sqe = req.sqe;
            sqe.cid = slot as u16;
            let length = req.data_out.len().max(req.data_in_len) as u32;
            let keyed = |length: u32, key: u32| SglDescriptor::KeyedDataBlock {
                address: region.addr(self.layout.data_off(slot)),
                length,
                key,
                invalidate: false,
            };
            sqe.set_sgl(&match req.sgl {
                SglChoice::Auto if length == 0 => SglDescriptor::KeyedDataBlock {
                    address: 0,
                    length: 0,
                    key: 0,
                    invalidate: false,
                },
                SglChoice::Auto => keyed(length, region.rkey()),
                SglChoice::Exact(sgl) => sgl,
                SglChoice::BadKey => keyed(length, region.rkey() ^ 0x00a5_5a00),
                SglChoice::Length(n) => keyed(n, region.rkey()),
            });
            // SAFETY: a free slot's SQE and data buffers are used by no work request and no
            // remote access (its previous command completed).
            unsafe {
                region
                    .slice_mut(self.layout.data_off(slot), req.data_out.len())
                    .copy_from_slice(&req.data_out);
                sqe.encode(region.slice_mut(self.layout.sqe_off(slot), SQE_LEN));
            }
            self.inflight[slot] = Some(Pending {
                done: req.done,
                data_in_len: req.data_in_len,
                into: req.into,
                peer: req.peer.map(|p| p.mem),
            });
            let wr = SendWr {
                wr_id: wr_id(WR_SEND, slot),
                op: SendOp::Send { invalidate: None },
                local: (self.layout.sqe_off(slot), SQE_LEN as u32),
                signaled: true,
            };
            self.qp
                .post_send(&[wr])
                .map_err(|e| HostError::io(format!("queue {}: posting a command", self.qid), e))?;
        }
        Ok(())
    }

    fn on_completion(&mut self, wc: Wc) -> Result<(), HostError> {
        let kind = wc.wr_id >> 32;
        let slot = (wc.wr_id & 0xffff_ffff) as usize;
        if !wc.ok && wc.status == WC_WR_FLUSH_ERR {
            // Work requests flushed: the queue pair went to the error state because the
            // connection ended (the target disconnected or failed it).
            return Err(HostError::ConnectionClosed { qid: self.qid });
        }
        if !wc.ok {
            return Err(HostError::Protocol {
                qid: self.qid,
                reason: format!("work request {kind} failed with status {}", wc.status),
            });
        }
        if kind != WR_RECV {
            return Ok(());
        }
        let region = self.qp.region.as_ref().expect("region");
        // SAFETY: the receive completed; nothing writes it until it is posted again.
        let cqe = Cqe::decode(unsafe { region.slice(self.layout.cqe_off(slot), CQE_LEN) })
            .map_err(|e| HostError::protocol(self.qid, format!("bad completion: {e}")))?;
        self.qp
            .post_recv(wr_id(WR_RECV, slot), self.layout.cqe_off(slot), CQE_LEN)
            .map_err(|e| HostError::io(format!("queue {}: posting a receive", self.qid), e))?;
        let cid = cqe.cid as usize;
        let Some(p) = self.inflight.get_mut(cid).and_then(Option::take) else {
            return Err(HostError::protocol(
                self.qid,
                format!("completion for command {cid}, which is not in flight"),
            ));
        };
        // SAFETY: the target RDMA-WROTE the data before its response SEND, which completed.
        let received = unsafe { region.slice(self.layout.data_off(cid), p.data_in_len) };
        let data = match p.into {
            Some(Into::Buffer(mut buf)) => {
                buf.clear();
                buf.extend_from_slice(received);
                buf.freeze()
            }
            Some(Into::Target(target)) => {
                target.write_at(0, received);
                Bytes::new()
            }
            None => Bytes::copy_from_slice(received),
        };
        let _ = p.done.send(Ok(Completion { cqe, data }));
        self.free.push(cid as u16);
        self.start_waiting()
    }
}
