//! I/O without a task per command: a worker's `iodepth` loops are lanes of one task, which
//! starts each lane's command tagged with the lane's index and takes the answers from one
//! completion queue (`transport::completions`), woken once per batch of them.
//!
//! With a task per loop, each command cost a task wake-up and a poll down every layer of the
//! loop's future (session, controller, queue): the most of the host's user-space time per 4K
//! read after the copy (callgrind, QD32).
//!
//! GPU memory goes staged here (NVMe/TCP carries no peer transfers): a read lands in a slot of
//! the worker's read pipeline, a write sends a slot of its write pipeline (`gpu::pipeline`). A
//! lane that finds no slot free waits in line; the first in line waits for the pipeline while
//! the others' answers keep coming (their slots are what frees one).
//!
//! A command that cannot start this way (no path live at that moment) or whose answer is an
//! error goes the way of the futures (`Session::read_into` / `read_to` / `write`), which retry
//! on another path or wait for one, in a task of its own; its lane goes on when that ends.

use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Poll;

use bytes::{Bytes, BytesMut};
use fabrik_proto::fabrics::Transport;
use hdrhistogram::Histogram;
use tokio::task::{JoinError, JoinSet};

use super::{
    command_clock, io_error, new_histogram, record, BenchError, Context, IoLoop, LoopResult, Next,
    Rw, PROGRESS_STEP,
};
use crate::error::HostError;
use crate::gpu::mover::{GpuMover, Staging};
use crate::gpu::pipeline::{read, ReadPipeline, WritePipeline};
use crate::gpu::GpuError;
use crate::host::session::Session;
use crate::transport::{CompletionQueue, Tagged};

/// Whether a run's I/O goes this way: every path NVMe/TCP (NVMe/RDMA queues answer through
/// futures only for now); GPU memory only one way at a time and unchecked (a check waits for
/// the data in the GPU, which the futures' way does).
pub(super) fn applies(ctx: &Context, rw: Rw) -> bool {
    let tcp = ctx.drives.iter().all(|d| {
        let s = &d.session;
        (0..s.path_count()).all(|i| {
            s.path_options(i)
                .is_some_and(|o| o.transport == Transport::Tcp)
        })
    });
    decide(tcp, ctx.gpu.is_some(), ctx.verify.is_some(), rw)
}

/// `applies`, from what it depends on.
fn decide(all_tcp: bool, gpu: bool, verify: bool, rw: Rw) -> bool {
    all_tcp && (!gpu || (!verify && rw != Rw::RandRw))
}

/// Runs one worker's loops to their end; the first error ends it.
pub(super) async fn run(loops: Vec<IoLoop>) -> Result<LoopResult, BenchError> {
    let Some(first) = loops.first() else {
        return Ok(LoopResult::default());
    };
    let ctx = first.ctx.clone();
    let bs = ctx.spec.bs as usize;
    let staging = match (&ctx.gpu, first.rw.reads()) {
        (None, _) => None,
        (Some(_), true) => first.reads.clone().map(Pipeline::Reads),
        (Some(_), false) => first.writes.clone().map(Pipeline::Writes),
    };
    if ctx.gpu.is_some() && staging.is_none() {
        return Err(BenchError::Invalid(
            "GPU memory without a staging pipeline (a bug)".into(),
        ));
    }
    let mover = match &ctx.gpu {
        Some(g) => Some(staged_paths(&ctx, first, g.buffer.clone()).await?),
        None => None,
    };
    // One write buffer per loop, as fio has one per iodepth: a single one shared by all loops
    // would stay in the CPU's cache however deep the queue, which flatters host memory.
    let host_writes = first.rw.writes() && ctx.gpu.is_none();
    let mut worker = Worker {
        lanes: loops
            .into_iter()
            .map(|io| Lane {
                io,
                current: None,
                check: false,
                staged: None,
                read_buf: Some(BytesMut::with_capacity(bs)),
                write_buf: match host_writes {
                    true => Bytes::from(vec![0xa5u8; bs]),
                    false => Bytes::new(),
                },
            })
            .collect(),
        ctx,
        answers: CompletionQueue::new(),
        retries: JoinSet::new(),
        staging,
        starved: VecDeque::new(),
        acquiring: None,
        result: LoopResult::default(),
        reads: new_histogram(),
        writes: new_histogram(),
        progress: 0,
    };
    let outcome = worker.run().await;
    worker.account(mover);
    outcome.map(|()| worker.result)
}

/// Asks each of the worker's drives for its data path, as the futures' way does at a queue's
/// first transfer, so that the report names it: staged, over NVMe/TCP.
async fn staged_paths(
    ctx: &Context,
    first: &IoLoop,
    memory: Arc<crate::gpu::GpuBuffer>,
) -> Result<GpuMover, BenchError> {
    let staging = Staging {
        buffers: 2,
        chunk: (ctx.spec.bs as usize).min(4 << 20),
    };
    let mut mover = GpuMover::new(memory, staging);
    let drives = first.view.units().min(ctx.drives.len() as u64);
    for d in (0..drives).map(|unit| first.view.locate(unit).0) {
        let drive = &ctx.drives[d];
        let peer = mover
            .is_peer(&drive.session, drive.queue(first.worker))
            .await;
        if peer.map_err(|e| io_error(drive, e))? {
            return Err(BenchError::Invalid(format!(
                "{}: a peer-to-peer path over NVMe/TCP (a bug)",
                drive.describe()
            )));
        }
    }
    Ok(mover)
}

struct Worker {
    ctx: Arc<Context>,
    lanes: Vec<Lane>,
    answers: CompletionQueue,
    /// Commands gone the futures' way, each to its lane's index.
    retries: JoinSet<(usize, Result<Option<BytesMut>, HostError>)>,
    /// GPU memory: the worker's staging pipeline.
    staging: Option<Pipeline>,
    /// Lanes waiting for a staging slot, in order, and the first one's wait.
    starved: VecDeque<usize>,
    acquiring: Option<Acquiring>,
    result: LoopResult,
    /// The worker's latencies, added to its shared ones at the end (no lock per command).
    reads: Histogram<u64>,
    writes: Histogram<u64>,
    /// Bytes moved since the shared progress counter was last told.
    progress: u64,
}

/// One loop of the worker.
struct Lane {
    io: IoLoop,
    /// Its command in flight.
    current: Option<Next>,
    /// Whether the read in flight is checked: decided when it starts, as a unit written while
    /// it is in flight may or may not be in what it reads.
    check: bool,
    /// The staging slot of its command in flight (GPU memory), given back when it is done.
    staged: Option<StagedSlot>,
    /// The buffer reads land in (host memory), between reads.
    read_buf: Option<BytesMut>,
    write_buf: Bytes,
}

enum Pipeline {
    Reads(Arc<ReadPipeline>),
    Writes(Arc<WritePipeline>),
}

enum StagedSlot {
    /// Where a read lands.
    Read(read::Slot),
    /// What a write sends: the slot, given back when the last copy of these bytes goes.
    Write(Bytes),
}

type Acquiring = Pin<Box<dyn Future<Output = Result<StagedSlot, GpuError>> + Send>>;

/// What woke the worker.
enum Event {
    Answers,
    Retried(Result<(usize, Result<Option<BytesMut>, HostError>), JoinError>),
    Staged(Result<StagedSlot, GpuError>),
}

impl Pipeline {
    fn try_slot(&self) -> Result<Option<StagedSlot>, GpuError> {
        Ok(match self {
            Pipeline::Reads(p) => p.try_slot()?.map(StagedSlot::Read),
            Pipeline::Writes(p) => p.try_slot()?.map(|s| StagedSlot::Write(s.into_bytes())),
        })
    }

    fn slot(&self) -> Acquiring {
        match self {
            Pipeline::Reads(p) => {
                let p = p.clone();
                Box::pin(async move { p.slot().await.map(StagedSlot::Read) })
            }
            Pipeline::Writes(p) => {
                let p = p.clone();
                Box::pin(async move { p.slot().await.map(|s| StagedSlot::Write(s.into_bytes())) })
            }
        }
    }
}

impl Worker {
    async fn run(&mut self) -> Result<(), BenchError> {
        let mut active = 0;
        for i in 0..self.lanes.len() {
            active += self.start(i)? as usize;
        }
        let mut answers: Vec<Tagged> = Vec::new();
        // Kept from batch to batch: neither vector allocates once grown.
        let mut finished = Vec::new();
        while active > 0 {
            let event = poll_fn(|cx| {
                if self.answers.poll_take(cx, &mut answers).is_ready() {
                    return Poll::Ready(Event::Answers);
                }
                if let Poll::Ready(Some(done)) = self.retries.poll_join_next(cx) {
                    return Poll::Ready(Event::Retried(done));
                }
                match self.acquiring.as_mut().map(|a| a.as_mut().poll(cx)) {
                    Some(Poll::Ready(slot)) => Poll::Ready(Event::Staged(slot)),
                    _ => Poll::Pending,
                }
            })
            .await;
            match event {
                Event::Answers => {}
                Event::Retried(Ok((i, Ok(data)))) => finished.push((i, data)),
                Event::Retried(Ok((i, Err(e)))) => {
                    let next = self.lanes[i].current.expect("a command in flight");
                    return Err(io_error(&self.ctx.drives[next.d], e));
                }
                Event::Retried(Err(join)) => {
                    return Err(BenchError::Invalid(format!(
                        "a retried command failed (a bug): {join}"
                    )))
                }
                Event::Staged(slot) => {
                    self.acquiring = None;
                    let slot = slot.map_err(|e| self.gpu_error(e))?;
                    let i = self.starved.pop_front().expect("a lane waits");
                    self.send(i, Some(slot));
                    self.feed_starved()?;
                }
            }
            for Tagged { tag, result } in answers.drain(..) {
                let i = tag as usize;
                match result {
                    Ok(completion) => finished.push((i, Some(completion.into_buffer()))),
                    // Once more the futures' way: another path, or a wait for one.
                    Err(_) => self.retry(i),
                }
            }
            for (i, data) in finished.drain(..) {
                self.finish(i, data);
                if !self.start(i)? {
                    active -= 1;
                }
            }
            // Slots given back just now may serve the lanes in line.
            self.feed_starved()?;
        }
        Ok(())
    }

    /// Starts lane `i`'s next command; false when its loop is done.
    fn start(&mut self, i: usize) -> Result<bool, BenchError> {
        let lane = &mut self.lanes[i];
        let Some(next) = lane.io.next() else {
            return Ok(false);
        };
        lane.current = Some(next);
        let Some(staging) = &self.staging else {
            self.send(i, None);
            return Ok(true);
        };
        // Behind the lanes already in line for a slot.
        let slot = match self.starved.is_empty() {
            true => staging.try_slot().map_err(|e| self.gpu_error(e))?,
            false => None,
        };
        match slot {
            Some(slot) => self.send(i, Some(slot)),
            None => {
                self.starved.push_back(i);
                self.feed_starved()?;
            }
        }
        Ok(true)
    }

    /// Gives free staging slots to the lanes in line, in order; the first left waits for one.
    fn feed_starved(&mut self) -> Result<(), BenchError> {
        if self.acquiring.is_some() {
            return Ok(());
        }
        while let Some(&i) = self.starved.front() {
            let Some(staging) = &self.staging else {
                return Ok(());
            };
            match staging.try_slot().map_err(|e| self.gpu_error(e))? {
                Some(slot) => {
                    self.starved.pop_front();
                    self.send(i, Some(slot));
                }
                None => {
                    self.acquiring = Some(staging.slot());
                    break;
                }
            }
        }
        Ok(())
    }

    /// Sends lane `i`'s command, into or from `staged` for GPU memory.
    fn send(&mut self, i: usize, staged: Option<StagedSlot>) {
        let lane = &mut self.lanes[i];
        let mut next = lane.current.expect("a command to send");
        let drive = &self.ctx.drives[next.d];
        let (queue, answer) = (drive.queue(lane.io.worker), self.answers.to(i as u64));
        match staged {
            Some(StagedSlot::Read(slot)) => {
                // The read's time, not the wait for its slot (as the futures' way).
                next.t0 = command_clock().now();
                lane.current = Some(next);
                let started = drive.session.start_read_to(
                    queue,
                    drive.nsid,
                    next.slba,
                    next.nlb,
                    slot.target(),
                    answer,
                );
                lane.staged = Some(StagedSlot::Read(slot));
                if !started {
                    self.retry(i);
                }
            }
            Some(StagedSlot::Write(data)) => {
                next.t0 = command_clock().now();
                lane.current = Some(next);
                lane.staged = Some(StagedSlot::Write(data.clone()));
                let started = drive
                    .session
                    .start_write(queue, drive.nsid, next.slba, data, false, answer);
                if let Err(data) = started {
                    self.retry_write(i, data);
                }
            }
            None if next.is_read => {
                lane.check = lane.io.read_check(next.d, next.drive_unit).is_some();
                let buf = lane.read_buf.take().unwrap_or_default();
                let started = drive
                    .session
                    .start_read_into(queue, drive.nsid, next.slba, next.nlb, buf, answer);
                if let Err(buf) = started {
                    self.retry_read_into(i, buf);
                }
            }
            None => {
                let data = match lane.io.write_pattern(next.d, next.slba) {
                    Some(pattern) => {
                        // Filling a --verify pattern is not the command's time.
                        next.t0 = command_clock().now();
                        lane.current = Some(next);
                        pattern
                    }
                    None => lane.write_buf.clone(),
                };
                let started = drive
                    .session
                    .start_write(queue, drive.nsid, next.slba, data, false, answer);
                if let Err(data) = started {
                    self.retry_write(i, data);
                }
            }
        }
    }

    /// Sends lane `i`'s command the futures' way, in a task of its own.
    fn retry(&mut self, i: usize) {
        let lane = &mut self.lanes[i];
        let next = lane.current.expect("a command in flight");
        match lane.staged.take() {
            Some(StagedSlot::Read(slot)) => self.retry_as(i, |session, queue, nsid| async move {
                let read = session.read_to(queue, nsid, next.slba, next.nlb, slot.target());
                let result = read.await.map(|()| None);
                // The slot goes back (received) once the read is done.
                drop(slot);
                result
            }),
            Some(StagedSlot::Write(data)) => {
                lane.staged = Some(StagedSlot::Write(data.clone()));
                self.retry_write(i, data);
            }
            None if next.is_read => {
                let buf = BytesMut::with_capacity(self.ctx.spec.bs as usize);
                self.retry_read_into(i, buf);
            }
            None => {
                let data = lane
                    .io
                    .write_pattern(next.d, next.slba)
                    .unwrap_or_else(|| lane.write_buf.clone());
                self.retry_write(i, data);
            }
        }
    }

    fn retry_read_into(&mut self, i: usize, buf: BytesMut) {
        let next = self.lanes[i].current.expect("a command in flight");
        self.retry_as(i, |session, queue, nsid| async move {
            let read = session.read_into(queue, nsid, next.slba, next.nlb, buf);
            read.await.map(Some)
        });
    }

    fn retry_write(&mut self, i: usize, data: Bytes) {
        let next = self.lanes[i].current.expect("a command in flight");
        self.retry_as(i, |session, queue, nsid| async move {
            let write = session.write(queue, nsid, next.slba, data, false);
            write.await.map(|()| None)
        });
    }

    /// Runs what `op` makes of lane `i`'s drive (its session, the lane's queue, the namespace)
    /// in a task of its own; the lane goes on when it ends.
    fn retry_as<F, Fut>(&mut self, i: usize, op: F)
    where
        F: FnOnce(Arc<Session>, usize, u32) -> Fut,
        Fut: Future<Output = Result<Option<BytesMut>, HostError>> + Send + 'static,
    {
        let lane = &self.lanes[i];
        let next = lane.current.expect("a command in flight");
        let drive = &self.ctx.drives[next.d];
        let retried = op(
            drive.session.clone(),
            drive.queue(lane.io.worker),
            drive.nsid,
        );
        self.retries.spawn(async move { (i, retried.await) });
    }

    /// Lane `i`'s command is done (a read into host memory: its data in `data`): its time, its
    /// check, its bytes; its staging slot goes back.
    fn finish(&mut self, i: usize, data: Option<BytesMut>) {
        let lane = &mut self.lanes[i];
        let next = lane.current.take().expect("a command in flight");
        let took = command_clock().now() - next.t0;
        let bs = self.ctx.spec.bs as u64;
        // A staging slot goes back: its read is in it, or its write sent.
        lane.staged = None;
        if next.is_read {
            if self.staging.is_none() {
                let data = data.unwrap_or_default();
                if let Some(v) = self.ctx.verify.as_ref().filter(|_| lane.check) {
                    v.check(&self.ctx.drives[next.d], next.d, next.slba, &data);
                }
                lane.read_buf = Some(data);
            }
            record(&mut self.reads, took);
            self.result.read_bytes += bs;
        } else {
            record(&mut self.writes, took);
            self.result.write_bytes += bs;
            if let Some(v) = &self.ctx.verify {
                v.written[next.d].set(next.drive_unit);
            }
        }
        self.progress += bs;
        if self.progress >= PROGRESS_STEP {
            let progress = std::mem::take(&mut self.progress);
            self.ctx
                .progress
                .bytes
                .fetch_add(progress, Ordering::Relaxed);
        }
    }

    fn gpu_error(&self, e: GpuError) -> BenchError {
        let g = self.ctx.gpu.as_ref().expect("staging is for GPU memory");
        BenchError::Io {
            path: g.buffer.identity().to_string(),
            error: e.into(),
        }
    }

    /// Adds the worker's latencies, progress and data paths to what its loops share.
    fn account(&mut self, mover: Option<GpuMover>) {
        let progress = std::mem::take(&mut self.progress);
        self.ctx
            .progress
            .bytes
            .fetch_add(progress, Ordering::Relaxed);
        if let (Some(mover), Some(g)) = (mover, &self.ctx.gpu) {
            let mut paths = g.paths.lock().unwrap();
            for (_, path) in mover.paths() {
                paths.insert((path.name().to_string(), path.to_string()));
            }
        }
        let Some(lane) = self.lanes.first() else {
            return;
        };
        let mut shared = lane.io.shared.latencies.lock().unwrap();
        shared.reads.add(&self.reads).expect("same bounds");
        shared.writes.add(&self.writes).expect("same bounds");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The integration tests of staged GPU runs (`tests/integration/gpu.rs`, `session.rs`) rely
    /// on these going through the lanes.
    #[test]
    fn which_runs_go_through_the_lanes() {
        for rw in [Rw::Read, Rw::RandRead, Rw::Write, Rw::RandWrite, Rw::RandRw] {
            assert!(decide(true, false, false, rw), "host memory, {rw:?}");
            assert!(decide(true, false, true, rw), "host memory checked, {rw:?}");
            assert!(!decide(false, false, false, rw), "NVMe/RDMA, {rw:?}");
            assert!(!decide(true, true, true, rw), "GPU memory checked, {rw:?}");
        }
        assert!(decide(true, true, false, Rw::RandRead));
        assert!(decide(true, true, false, Rw::Write));
        assert!(
            !decide(true, true, false, Rw::RandRw),
            "GPU memory both ways"
        );
    }
}
