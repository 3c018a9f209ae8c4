//! One NVMe/RDMA queue (one RC queue pair), controller side. Commands arrive by SEND into
//! receive buffers posted ahead; write data comes by RDMA READ from the host's keyed buffer (or
//! in the capsule), read data goes by RDMA WRITE chained before the 16-byte response SEND.
//! Commands run concurrently; a single task drives the queue pair from its inbox of completions,
//! routed there from the completion queue its reactor shares among its queue pairs on the device
//! (`completions`).
//!
//! Capsules arrive in the device's shared receive queue (SRQ): the SQE and any in-capsule data
//! are copied out and the buffer goes straight back. Each command then takes a slot of this queue
//! (its response buffer and data chunks) until its response SEND completes. There are twice as
//! many slots as queue entries (a host may send the next command as soon as it sees a response,
//! before our SEND completion is polled); a host with more commands outstanding than that breaks
//! the queue-size contract and loses the queue.
//!
//! No copies of data: a write's data lands by RDMA READ in a run of the queue's registered pool
//! and goes to the drive from there; a read's drive reads into a run lent at admission
//! (`Drive::read_into`) and the RDMA WRITE sends from it. The work requests a pass over the
//! completion queue makes are posted together at its end.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use fabrik_proto::nvme::cqe::CQE_LEN;
use fabrik_proto::nvme::sqe::SQE_LEN;
use fabrik_proto::{SglDescriptor, Sqe, Status};
use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::FutureExt;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

use super::completions::Routed;
use super::pool::{Lease, Pool, Run};
use super::window::{InFlight, Window};
use crate::controller::books::{Arrival, QueueBooks};
use crate::controller::{limits, Admitted, Queue, Response, Route};
use crate::transport::signals::{Signal, Signals};
use fabrik_rdma::{self as verbs, Completion, QpSizes, QueuePair, SendOp, SendWr, SharedRecv};

/// Unit of the data buffer pool: a transfer takes a run of whole chunks (see `pool`).
pub const CHUNK: usize = 32 * 1024;
/// Where the pool starts in the region: page-aligned, after the response buffers.
const PAGE: usize = 4096;
/// Where the SGL descriptor (DPTR) sits in the SQE.
const SGL_AT: usize = 24;

const WR_RECV: u64 = verbs::SRQ_WR_KIND;
const WR_READ: u64 = 2;
const WR_SEND: u64 = 3;
const WR_WRITE: u64 = 4;
/// The empty work request that drains a queue pair at its end (see `drain`).
const WR_DRAIN: u64 = 5;

fn wr_id(kind: u64, slot: usize) -> u64 {
    kind << 32 | slot as u64
}

/// Receive buffers of a device's shared receive queue, as nvmet-rdma's default SRQ size.
pub const SRQ_DEPTH: u32 = 1024;
/// One receive buffer: a command and the largest in-capsule data (I/O queues; admin less).
pub const CAPSULE_SIZE: usize = SQE_LEN + limits::IO_INLINE_DATA as usize;

/// Where the data pool lies in a region of `queue_sizes`: (its first byte, its chunks), from
/// the first page after the response buffers.
fn pool_layout(sizes: &QpSizes) -> (usize, u32) {
    let base = (sizes.recv_slots as usize * CQE_LEN).next_multiple_of(PAGE);
    (base, ((sizes.pool_bytes - PAGE) / CHUNK) as u32)
}

/// The sizes of one queue's resources, for the queue size the host's CM request asks.
pub fn queue_sizes(qid: u16, entries: u32) -> QpSizes {
    let slots = 2 * entries;
    // A transfer is one piece of memory (a run of the pool): one SGE, one work request. A slot
    // has at most its RDMA READ, or its RDMA WRITE and the response SEND, posted.
    let wrs_per_slot = 2;
    QpSizes {
        // Receives come from the SRQ: `recv_slots` only sizes the response buffers.
        recv_slots: slots,
        recv_size: 0,
        send_wr: slots * wrs_per_slot,
        send_sge: 1,
        // Room for one largest transfer on the admin queue, a few on I/O queues (commands
        // beyond it wait for buffers: back-pressure), and the page that aligns the pool after
        // the response buffers.
        pool_bytes: if qid == 0 { 1 } else { 4 } * limits::MAX_TRANSFER as usize + PAGE,
        remote_access: false,
    }
}

/// Batches of completions a queue takes from its inbox before its reactor's other tasks get a
/// turn (32 per batch).
const MAX_POLLS_PER_TURN: usize = 4;

/// How long a queue that ended waits for its drain marker's completion.
const DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// How long an accepted queue pair may go without a Connect command.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum ConnError {
    #[error("verbs: {0}")]
    Io(#[from] io::Error),
    #[error("{0}")]
    Protocol(&'static str),
    #[error("work request {kind} for slot {slot} failed with status {status}")]
    WorkRequest { kind: u64, slot: usize, status: u32 },
}

#[derive(Clone, Copy, Debug)]
struct Keyed {
    address: u64,
    length: u32,
    key: u32,
}

#[derive(Default)]
struct Slot {
    cid: u16,
    /// The command holds its CID in the books (not so for a CID conflict's answer).
    counted: bool,
    keyed: Option<Keyed>,
    /// The rkey to invalidate with the response SEND (the host asked, data was mapped).
    invalidate: Option<u32>,
    /// The slot's data buffer while an RDMA READ or WRITE uses it.
    run: Option<Run>,
    /// A write command waiting for its data.
    write: Option<Admitted>,
    /// A read command's answer waiting for buffers.
    response: Option<Response>,
    /// A read's data, read into this queue's memory (its run comes back when the SEND is done).
    lent: Option<Bytes>,
    /// Sequence numbers in `in_flight` that the completion of its RDMA READ, then of its
    /// response SEND, gives back.
    packets: u32,
}

/// Commands executing, each yielding its slot and answer (None: a retired AER, not answered).
type Inflight<'q> =
    FuturesUnordered<Pin<Box<dyn Future<Output = (usize, Option<Response>)> + Send + 'q>>>;

pub struct Connection {
    pub qp: QueuePair,
    srq: Arc<SharedRecv>,
    /// Its completions, routed from the reactor's shared completion queue.
    completions: Routed,
    slots: Vec<Slot>,
    free_slots: Vec<usize>,
    pool: Arc<Pool>,
    /// Slots waiting for pool chunks, oldest first: (slot, for an RDMA READ).
    waiting: VecDeque<(usize, bool)>,
    /// SQ head, CIDs in flight, parked AERs.
    books: QueueBooks,
    sends_outstanding: usize,
    close_after_send: bool,
    /// Work requests made during this pass, posted together at its end: one doorbell (with
    /// Soft-RoCE, one system call) for a pass's answers instead of one per command.
    outgoing: Vec<SendWr>,
    /// Where the device needs it, the bound on sequence numbers in flight (see `window`).
    in_flight: InFlight,
}

impl Connection {
    pub fn new(
        qp: QueuePair,
        srq: Arc<SharedRecv>,
        completions: Routed,
        sizes: QpSizes,
        qid: u16,
        entries: u32,
        window: Option<Window>,
    ) -> Connection {
        let (base, chunks) = pool_layout(&sizes);
        let memory = qp.region.as_ref().expect("region").memory().clone();
        Connection {
            qp,
            srq,
            completions,
            slots: (0..sizes.recv_slots).map(|_| Slot::default()).collect(),
            free_slots: (0..sizes.recv_slots as usize).rev().collect(),
            pool: Arc::new(Pool::new(memory, chunks, CHUNK, base)),
            waiting: VecDeque::new(),
            // Until Connect binds the queue, the CM request's QID and size.
            books: QueueBooks::new(qid, entries),
            sends_outstanding: 0,
            close_after_send: false,
            outgoing: Vec::with_capacity(sizes.send_wr as usize),
            in_flight: InFlight::new(window),
        }
    }

    fn cqe_off(&self, slot: usize) -> usize {
        slot * CQE_LEN
    }

    /// Serves the queue until the host disconnects, the controller is torn down, a response
    /// asks to close, or the target stops (then in-flight commands finish first).
    ///
    /// When it ends, for whatever reason, the commands it had passed to the backend are
    /// waited for (their answers dropped): dropped unfinished, they would still complete at
    /// the drive later, and a write of this association could land after the host,
    /// reconnected, wrote the same blocks anew.
    pub async fn run<'q>(
        &mut self,
        queue: &'q Queue,
        events: &mut UnboundedReceiver<u32>,
        stop: &CancellationToken,
    ) -> Result<(), ConnError> {
        let mut inflight: Inflight<'q> = FuturesUnordered::new();
        let result = self.serve(queue, events, stop, &mut inflight).await;
        self.books.retire_parked();
        while inflight.next().await.is_some() {}
        result
    }

    async fn serve<'q>(
        &mut self,
        queue: &'q Queue,
        events: &mut UnboundedReceiver<u32>,
        stop: &CancellationToken,
        inflight: &mut Inflight<'q>,
    ) -> Result<(), ConnError> {
        // As on NVMe/TCP: a queue pair that never sends its Connect holds resources for nothing.
        let mut signals = Signals::new(stop, CONNECT_TIMEOUT);
        let mut wcs = [Completion::default(); 32];
        let mut stopping = false;
        loop {
            // A bounded drain, then a turn for the reactor's other queues (below): under a
            // steady stream of completions, draining until the queue ran dry kept this task
            // on its thread for seconds in the Soft-RoCE guest, and the admin queue beside it
            // answered Keep Alive too late.
            let mut worked = false;
            for _ in 0..MAX_POLLS_PER_TURN {
                let n = self.take_completions(&mut wcs);
                worked |= n > 0;
                for wc in &wcs[..n] {
                    self.on_completion(*wc, queue, inflight)?;
                }
                if n < wcs.len() {
                    break;
                }
            }
            while let Some(Some((slot, resp))) = inflight.next().now_or_never() {
                self.executed(queue, slot, resp)?;
            }
            self.post_outgoing()?;
            if self.close_after_send && self.sends_outstanding == 0 {
                return Ok(());
            }
            signals.follow(queue);
            if worked {
                // Busy: back for more once the reactor's other tasks had their turn (the
                // shared completion queue's poller among them: adaptive polling is its
                // business, see `completions`). Signals and CM events are looked at here too
                // (a host streaming commands without a Connect keeps the queue busy).
                if let Some(signal) = signals.next().now_or_never() {
                    if let Some(end) = self.on_signal(signal, queue, &mut stopping) {
                        return end;
                    }
                }
                if let Ok(kind) = events.try_recv() {
                    if !self.on_cm_event(kind) {
                        return Ok(());
                    }
                }
            }
            if stopping && inflight.len() <= self.books.parked() && self.sends_outstanding == 0 {
                return Ok(());
            }
            if worked {
                tokio::task::yield_now().await;
                continue;
            }
            tracing::trace!(inflight = inflight.len(), "waiting");
            tokio::select! {
                wc = self.completions.inbox.recv() => match wc {
                    Some(wc) => self.on_completion(wc, queue, inflight)?,
                    None => return Err(ConnError::Protocol("the shared completion queue's poller ended")),
                },
                Some((slot, resp)) = inflight.next(), if !inflight.is_empty() => self.executed(queue, slot, resp)?,
                ev = events.recv() => match ev {
                    Some(kind) if self.on_cm_event(kind) => {}
                    _ => return Ok(()),
                },
                signal = signals.next() => {
                    if let Some(end) = self.on_signal(signal, queue, &mut stopping) {
                        return end;
                    }
                }
            }
        }
    }

    /// Stop: finish what is executing (commands still waiting for their data were never
    /// acknowledged). Teardown and a missed Connect end the queue: Some(how).
    fn on_signal(
        &self,
        signal: Signal,
        queue: &Queue,
        stopping: &mut bool,
    ) -> Option<Result<(), ConnError>> {
        match signal {
            Signal::Stop => {
                *stopping = true;
                queue.target.shutting_down.store(true, Ordering::Release);
                None
            }
            Signal::Teardown => Some(Ok(())),
            Signal::ConnectTimeout => Some(Err(ConnError::Protocol(
                "no Connect within 10 s of the connection",
            ))),
        }
    }

    /// A CM event for this queue pair: false when it ends the queue (a disconnect, an error).
    fn on_cm_event(&self, kind: u32) -> bool {
        if kind == verbs::EV_ESTABLISHED {
            return true;
        }
        tracing::debug!(event = %verbs::event_name(kind), "queue pair disconnected");
        false
    }

    fn on_completion<'q>(
        &mut self,
        wc: Completion,
        queue: &'q Queue,
        inflight: &mut Inflight<'q>,
    ) -> Result<(), ConnError> {
        let kind = wc.wr_id >> 32;
        let slot = (wc.wr_id & 0xffff_ffff) as usize;
        if kind == WR_RECV {
            // A capsule in SRQ buffer `slot`: copy it out and give the buffer back first.
            return self.on_receive(wc, queue, inflight);
        }
        tracing::trace!(
            kind,
            slot,
            ok = wc.ok,
            status = wc.status,
            len = wc.byte_len,
            "completion"
        );
        if !wc.ok || slot >= self.slots.len() {
            // Any failed work request (a bad key or length from the host, a flush after the
            // peer went away) puts the RC queue pair into the error state: the queue ends.
            return Err(ConnError::WorkRequest {
                kind,
                slot,
                status: wc.status,
            });
        }
        match kind {
            WR_READ => {
                let packets = std::mem::take(&mut self.slots[slot].packets);
                self.in_flight.read_completed(packets, &mut self.outgoing);
                self.data_read(slot, queue, inflight)?;
                self.serve_waiting(queue)
            }
            WR_SEND => {
                self.sends_outstanding -= 1;
                let packets = std::mem::take(&mut self.slots[slot].packets);
                self.in_flight.acknowledged(packets, &mut self.outgoing);
                if let Some(run) = self.slots[slot].run.take() {
                    self.pool.give(run);
                }
                self.slots[slot] = Slot::default();
                self.free_slots.push(slot);
                self.serve_waiting(queue)
            }
            _ => Ok(()),
        }
    }

    /// Up to `wcs.len()` completions from the inbox, in order.
    fn take_completions(&mut self, wcs: &mut [Completion]) -> usize {
        let mut n = 0;
        while n < wcs.len() {
            match self.completions.inbox.try_recv() {
                Ok(wc) => {
                    wcs[n] = wc;
                    n += 1;
                }
                Err(_) => break,
            }
        }
        n
    }

    /// After the disconnect (the QP is in the error state and takes no more receives): takes
    /// every completion of this queue pair left in the shared completion queue, up to the
    /// drain marker's, so none is left there when its QP number goes to another queue pair.
    /// The SRQ buffers among them (received into, never processed) go back to the SRQ, or the
    /// device's receive pool would shrink with each connection that went away mid-flight.
    pub async fn drain(&mut self) {
        let drained = match self.qp.post_drain(wr_id(WR_DRAIN, 0)) {
            Ok(()) => {
                let marker = async {
                    while let Some(wc) = self.completions.inbox.recv().await {
                        match wc.wr_id >> 32 {
                            WR_RECV => {
                                let _ = self.srq.post((wc.wr_id & 0xffff_ffff) as usize);
                            }
                            WR_DRAIN => return true,
                            _ => {}
                        }
                    }
                    false
                };
                crate::timer::timeout(DRAIN_TIMEOUT, marker).await == Ok(true)
            }
            Err(e) => {
                tracing::warn!("NVMe/RDMA queue not drained: {e}");
                false
            }
        };
        if !drained {
            // What came meanwhile; a receive polled later still goes back (see `completions`).
            tracing::warn!("NVMe/RDMA queue: no drain completion within {DRAIN_TIMEOUT:?}");
            while let Ok(wc) = self.completions.inbox.try_recv() {
                if wc.wr_id >> 32 == WR_RECV {
                    let _ = self.srq.post((wc.wr_id & 0xffff_ffff) as usize);
                }
            }
        }
    }

    fn on_receive<'q>(
        &mut self,
        wc: Completion,
        queue: &'q Queue,
        inflight: &mut Inflight<'q>,
    ) -> Result<(), ConnError> {
        let idx = (wc.wr_id & 0xffff_ffff) as usize;
        if !wc.ok {
            // Flushed at teardown (or failed): the buffer still belongs to the SRQ's pool.
            let _ = self.srq.post(idx);
            return Err(ConnError::WorkRequest {
                kind: WR_RECV,
                slot: idx,
                status: wc.status,
            });
        }
        let len = wc.byte_len as usize;
        if len < SQE_LEN {
            let _ = self.srq.post(idx);
            return Err(ConnError::Protocol("capsule shorter than a command"));
        }
        // The command onto the stack, in-capsule data (a small write's) into a buffer of its
        // own: nothing is allocated for a command without data.
        let mut sqe = [0u8; SQE_LEN];
        // SAFETY: the receive completed; the buffer is ours until posted again, just below.
        let received = unsafe { self.srq.received(idx, len) };
        sqe.copy_from_slice(&received[..SQE_LEN]);
        let carried = if len > SQE_LEN {
            Bytes::copy_from_slice(&received[SQE_LEN..])
        } else {
            Bytes::new()
        };
        self.srq.post(idx)?;
        let Some(slot) = self.free_slots.pop() else {
            return Err(ConnError::Protocol(
                "more commands outstanding than the queue size allows",
            ));
        };
        self.on_capsule(slot, sqe, carried, queue, inflight)
    }

    fn on_capsule<'q>(
        &mut self,
        slot: usize,
        mut raw: [u8; SQE_LEN],
        carried: Bytes,
        queue: &'q Queue,
        inflight: &mut Inflight<'q>,
    ) -> Result<(), ConnError> {
        // The Linux host reuses a request's SQE and fills an in-capsule (offset) SGL without
        // clearing its reserved bytes, where an earlier keyed SGL left its key: as nvmet-rdma
        // does, ignore them.
        if raw[SGL_AT + 15] == 0x01 {
            raw[SGL_AT + 12..SGL_AT + 15].fill(0);
        }
        let sqe = Sqe::decode(&raw).map_err(|_| ConnError::Protocol("bad SQE"))?;
        let cid = sqe.cid;
        self.slots[slot].cid = cid;
        match self.books.arrived(queue, cid) {
            Ok(Arrival::New) => {}
            Ok(Arrival::RetiredEvent) => {
                // The retired AER's slot is free: it holds no data and is never answered.
                if let Some(old) = (0..self.slots.len())
                    .find(|&s| s != slot && self.slots[s].counted && self.slots[s].cid == cid)
                {
                    self.slots[old] = Slot::default();
                    self.free_slots.push(old);
                }
            }
            Ok(Arrival::CidConflict) => {
                // The other command with this CID stays in flight; this one is answered as such.
                tracing::warn!(cid, "command identifier conflict");
                return self.post_response(
                    queue,
                    slot,
                    Response::status(Status::CID_CONFLICT),
                    None,
                );
            }
            Err(_) => {
                return Err(ConnError::Protocol(
                    "more commands outstanding than the queue size allows",
                ))
            }
        }
        self.slots[slot].counted = true;
        let (length, inline) = match sqe.sgl() {
            Ok(SglDescriptor::KeyedDataBlock {
                address,
                length,
                key,
                invalidate,
            }) => {
                self.slots[slot].keyed = Some(Keyed {
                    address,
                    length,
                    key,
                });
                if invalidate && length > 0 {
                    self.slots[slot].invalidate = Some(key);
                }
                (length, None)
            }
            Ok(SglDescriptor::DataBlockOffset { offset, length }) => {
                if offset
                    .checked_add(u64::from(length))
                    .is_none_or(|end| end > carried.len() as u64)
                    || length > queue.inline_data_limit(&sqe)
                {
                    return self.respond(queue, slot, Response::status(Status::SGL_OFFSET_INVALID));
                }
                let start = offset as usize;
                (length, Some(carried.slice(start..start + length as usize)))
            }
            Ok(_) | Err(_) => {
                return self.respond(queue, slot, Response::status(Status::SGL_TYPE_INVALID))
            }
        };
        match queue.route(&sqe, length, inline) {
            Route::Execute(mut cmd, data) => {
                if self.slots[slot].keyed.is_some() {
                    self.lend_for_read(&mut cmd);
                }
                if cmd.waits_for_an_event() {
                    let aer = self.books.park(cid, queue.execute(cmd, data));
                    inflight.push(Box::pin(async move { (slot, aer.await) }));
                } else {
                    return self.start(queue, inflight, slot, cmd, data);
                }
            }
            Route::FetchData(cmd) => {
                self.slots[slot].write = Some(cmd);
                self.waiting.push_back((slot, true));
                self.serve_waiting(queue)?;
            }
            Route::Fail(status) => {
                // Nothing was mapped: the host invalidates its key itself.
                self.slots[slot].invalidate = None;
                return self.respond(queue, slot, Response::status(status));
            }
        }
        Ok(())
    }

    /// Zero copy for a read: the drive reads into a run of this queue's registered memory, which
    /// the RDMA WRITE then sends from. Without a free run now, the read goes the way of any
    /// answer's data (copied into a run when one is free).
    fn lend_for_read(&mut self, cmd: &mut Admitted) {
        let len = cmd.transfer_len as usize;
        // Admin commands' data (Identify, log pages) goes the copying way: a run taken for it
        // would only go straight back.
        if len == 0 || !cmd.reads_into_lent_memory() {
            return;
        }
        let Some(run) = self.pool.take(self.pool.chunks_for(len)) else {
            return;
        };
        // SAFETY: just taken; no work request uses it until the read's data is sent.
        let buf = unsafe { self.pool.lend_for_read(run, len) };
        let _ = cmd.read_into(buf);
    }

    /// Starts the data movements waiting for pool chunks, oldest first (a large one is not
    /// overtaken for ever by small ones).
    fn serve_waiting(&mut self, queue: &Queue) -> Result<(), ConnError> {
        while let Some(&(slot, read)) = self.waiting.front() {
            let need = if read {
                self.slots[slot]
                    .write
                    .as_ref()
                    .map_or(0, |c| c.transfer_len as usize)
            } else {
                let keyed = self.slots[slot].keyed.map_or(0, |k| k.length as usize);
                self.slots[slot]
                    .response
                    .as_ref()
                    .map_or(0, |r| r.data.len().min(keyed))
            };
            // At most MAX_TRANSFER: the controller admits no longer command.
            let Some(run) = self.pool.take(self.pool.chunks_for(need).max(1)) else {
                return Ok(());
            };
            self.waiting.pop_front();
            self.slots[slot].run = Some(run);
            if read {
                self.post_reads(slot, need)?;
            } else {
                let resp = self.slots[slot].response.take().expect("waiting response");
                self.post_data_and_response(queue, slot, resp)?;
            }
        }
        Ok(())
    }

    /// Where the slot's run lies in the region.
    fn run_offset(&self, slot: usize) -> usize {
        self.pool
            .offset(self.slots[slot].run.expect("a slot moving data has a run"))
    }

    fn post_reads(&mut self, slot: usize, len: usize) -> Result<(), ConnError> {
        let k = self.slots[slot]
            .keyed
            .expect("write data comes by keyed SGL");
        let wr = SendWr {
            wr_id: wr_id(WR_READ, slot),
            op: SendOp::Read {
                remote: k.address,
                rkey: k.key,
            },
            signaled: true,
            local: (self.run_offset(slot), len as u32),
        };
        tracing::trace!(slot, len, rkey = k.key, "RDMA READ queued");
        self.slots[slot].packets = self.in_flight.push(wr, None, &mut self.outgoing);
        Ok(())
    }

    /// Posts the pass's work requests, in the order they were made.
    fn post_outgoing(&mut self) -> Result<(), ConnError> {
        if !self.outgoing.is_empty() {
            self.qp.post_send(&self.outgoing)?;
            self.outgoing.clear();
        }
        Ok(())
    }

    /// The write data arrived: the command runs with it where it lies, in the slot's run (which
    /// the data takes along: the pool has it back when the drive is done with it).
    fn data_read<'q>(
        &mut self,
        slot: usize,
        queue: &'q Queue,
        inflight: &mut Inflight<'q>,
    ) -> Result<(), ConnError> {
        let Some(cmd) = self.slots[slot].write.take() else {
            return Ok(());
        };
        let Some(run) = self.slots[slot].run.take() else {
            return Ok(());
        };
        // SAFETY: the run was taken from this pool and its RDMA READ completed: no work request
        // writes it any more.
        let data = unsafe { Lease::into_bytes(self.pool.clone(), run, cmd.transfer_len as usize) };
        self.start(queue, inflight, slot, cmd, data)
    }

    /// Runs a command. Reads and writes of drives that complete at once (RAM, null) run in
    /// place, with no future allocated; any other command that completes when first polled
    /// (most admin commands) is answered in this pass too: no task in `inflight`, no wake-up
    /// to come back for.
    fn start<'q>(
        &mut self,
        queue: &'q Queue,
        inflight: &mut Inflight<'q>,
        slot: usize,
        mut cmd: Admitted,
        data: Bytes,
    ) -> Result<(), ConnError> {
        if let Some(resp) = queue.execute_now(&mut cmd, &data) {
            return self.respond(queue, slot, resp);
        }
        let mut run = Box::pin(queue.execute(cmd, data));
        match run.as_mut().now_or_never() {
            Some(resp) => self.respond(queue, slot, resp),
            // `inflight` polls it again at once, with a waker of its own.
            None => {
                inflight.push(Box::pin(async move { (slot, Some(run.await)) }));
                Ok(())
            }
        }
    }

    /// A command finished executing. A retired AER has no answer, and its slot is free already.
    fn executed(
        &mut self,
        queue: &Queue,
        slot: usize,
        resp: Option<Response>,
    ) -> Result<(), ConnError> {
        match resp {
            Some(resp) => self.respond(queue, slot, resp),
            None => Ok(()),
        }
    }

    /// A command is done: it leaves the books and its answer goes out.
    fn respond(&mut self, queue: &Queue, slot: usize, resp: Response) -> Result<(), ConnError> {
        let s = &mut self.slots[slot];
        if s.counted {
            self.books.answered(queue, s.cid);
            s.counted = false;
        }
        if resp.close {
            self.close_after_send = true;
        }
        if resp.status.is_success() && !resp.data.is_empty() && s.keyed.is_some() {
            if let Some(at) = self.pool.offset_of(&resp.data) {
                return self.post_lent_data_and_response(queue, slot, resp, at);
            }
            s.response = Some(resp);
            self.waiting.push_back((slot, false));
            return self.serve_waiting(queue);
        }
        self.post_response(queue, slot, resp, None)
    }

    /// RDMA WRITEs the answer's data from where the drive read it in this queue's memory (at
    /// `at`), then the response.
    fn post_lent_data_and_response(
        &mut self,
        queue: &Queue,
        slot: usize,
        mut resp: Response,
        at: usize,
    ) -> Result<(), ConnError> {
        let data = std::mem::take(&mut resp.data);
        let len = data.len();
        self.slots[slot].lent = Some(data);
        self.post_write_and_response(queue, slot, resp, at, len)
    }

    /// RDMA WRITEs the answer's data into the host's buffer, then the response.
    fn post_data_and_response(
        &mut self,
        queue: &Queue,
        slot: usize,
        resp: Response,
    ) -> Result<(), ConnError> {
        let k = self.slots[slot].keyed.expect("read data goes by keyed SGL");
        let len = resp.data.len().min(k.length as usize);
        let run = self.slots[slot].run.expect("a slot moving data has a run");
        // SAFETY: the run belongs to this slot and no work request uses it yet.
        unsafe { self.pool.slice_mut(run, len) }.copy_from_slice(&resp.data[..len]);
        let at = self.pool.offset(run);
        self.post_write_and_response(queue, slot, resp, at, len)
    }

    /// RDMA WRITEs `len` bytes at `at` in the region (no more than the host's buffer takes)
    /// into the host's buffer, then the response.
    fn post_write_and_response(
        &mut self,
        queue: &Queue,
        slot: usize,
        resp: Response,
        at: usize,
        len: usize,
    ) -> Result<(), ConnError> {
        let k = self.slots[slot].keyed.expect("read data goes by keyed SGL");
        let write = SendWr {
            wr_id: wr_id(WR_WRITE, slot),
            op: SendOp::Write {
                remote: k.address,
                rkey: k.key,
            },
            signaled: false,
            local: (at, len.min(k.length as usize) as u32),
        };
        self.post_response(queue, slot, resp, Some(write))
    }

    /// Queues `data` (an RDMA WRITE) and the 16-byte response SEND (with invalidation where the
    /// host asked), chained, for the end of the pass.
    fn post_response(
        &mut self,
        queue: &Queue,
        slot: usize,
        resp: Response,
        data: Option<SendWr>,
    ) -> Result<(), ConnError> {
        let cqe = self.books.completion(queue, self.slots[slot].cid, &resp);
        let off = self.cqe_off(slot);
        // SAFETY: the slot's response buffer is not in use by any work request (one response
        // per slot, its SEND completes before the slot is reused).
        cqe.encode(unsafe {
            self.qp
                .region
                .as_ref()
                .expect("region")
                .slice_mut(off, CQE_LEN)
        });
        let send = SendWr {
            wr_id: wr_id(WR_SEND, slot),
            op: SendOp::Send {
                invalidate: self.slots[slot].invalidate,
            },
            local: (off, CQE_LEN as u32),
            signaled: true,
        };
        let with_data = data.is_some();
        tracing::trace!(
            slot,
            cid = cqe.cid,
            status = ?cqe.status,
            with_data,
            invalidate = ?self.slots[slot].invalidate,
            "response queued"
        );
        self.slots[slot].packets = match data {
            Some(write) => self.in_flight.push(write, Some(send), &mut self.outgoing),
            None => self.in_flight.push(send, None, &mut self.outgoing),
        };
        self.sends_outstanding += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_hold_the_largest_transfer_and_every_slot_s_work_requests() {
        for (qid, entries) in [(0, 32), (1, 128), (3, 1024), (1, 2)] {
            let s = queue_sizes(qid, entries);
            assert_eq!(s.recv_slots, 2 * entries);
            assert_eq!(s.send_sge, 1, "one run, one SGE");
            // The largest transfer, within one word of the pool's map, in a page-aligned pool
            // that fits the region after the response buffers.
            let (base, chunks) = pool_layout(&s);
            let region = s.recv_slots as usize * CQE_LEN + s.pool_bytes;
            assert!(chunks as usize * CHUNK >= limits::MAX_TRANSFER as usize);
            assert_eq!(base % PAGE, 0);
            assert!(base >= s.recv_slots as usize * CQE_LEN);
            assert!(base + chunks as usize * CHUNK <= region);
            assert!((limits::MAX_TRANSFER as usize).div_ceil(CHUNK) <= 64);
            // A slot's RDMA READ, or its RDMA WRITE and the response SEND, fit its share of the
            // send queue.
            assert!(2 * s.recv_slots <= s.send_wr, "{qid} {entries}");
        }
    }
}
