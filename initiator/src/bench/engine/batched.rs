//! Host-memory I/O without a task per command: a worker's `iodepth` loops are slots of one
//! task, which starts each loop's command tagged with the loop's index and takes the answers
//! from one completion queue (`transport::completions`), woken once per batch of them.
//!
//! With a task per loop, each command cost a task wake-up and a poll down every layer of the
//! loop's future (session, controller, queue): the most of the host's user-space time per 4K
//! read after the copy (callgrind, QD32).
//!
//! A command that cannot start that way (no path live at that moment) or whose answer is an
//! error goes the way of the futures (`Session::read_into` / `write`), which retry on another
//! path or wait for one, in a task of its own; its slot goes on when that ends.

use std::future::poll_fn;
use std::sync::Arc;
use std::task::Poll;

use bytes::{Bytes, BytesMut};
use fabrik_proto::fabrics::Transport;
use hdrhistogram::Histogram;
use tokio::task::JoinSet;

use super::{
    command_clock, io_error, new_histogram, record, BenchError, Context, IoLoop, LoopResult, Next,
    PROGRESS_STEP,
};
use crate::error::HostError;
use crate::transport::{CompletionQueue, Tagged};
use std::sync::atomic::Ordering;

/// Whether a run's I/O goes this way: host memory, every path NVMe/TCP (NVMe/RDMA queues answer
/// through futures only for now).
pub(super) fn applies(ctx: &Context) -> bool {
    ctx.gpu.is_none()
        && ctx.drives.iter().all(|d| {
            let s = &d.session;
            (0..s.path_count()).all(|i| {
                s.path_options(i)
                    .is_some_and(|o| o.transport == Transport::Tcp)
            })
        })
}

/// Runs one worker's loops to their end; the first error ends it.
pub(super) async fn run(loops: Vec<IoLoop>) -> Result<LoopResult, BenchError> {
    let Some(first) = loops.first() else {
        return Ok(LoopResult::default());
    };
    let ctx = first.ctx.clone();
    let bs = ctx.spec.bs as usize;
    // One write buffer per loop, as fio has one per iodepth: a single one shared by all loops
    // would stay in the CPU's cache however deep the queue, which flatters host memory.
    let writes = first.rw.writes();
    let mut worker = Worker {
        slots: loops
            .into_iter()
            .map(|io| Slot {
                io,
                current: None,
                check: false,
                read_buf: Some(BytesMut::with_capacity(bs)),
                write_buf: match writes {
                    true => Bytes::from(vec![0xa5u8; bs]),
                    false => Bytes::new(),
                },
            })
            .collect(),
        ctx,
        answers: CompletionQueue::new(),
        retries: JoinSet::new(),
        result: LoopResult::default(),
        reads: new_histogram(),
        writes: new_histogram(),
        progress: 0,
    };
    let outcome = worker.run().await;
    worker.account();
    outcome.map(|()| worker.result)
}

struct Worker {
    ctx: Arc<Context>,
    slots: Vec<Slot>,
    answers: CompletionQueue,
    /// Commands gone the futures' way, each to its slot's index.
    retries: JoinSet<(usize, Result<Option<BytesMut>, HostError>)>,
    result: LoopResult,
    /// The worker's latencies, added to its shared ones at the end (no lock per command).
    reads: Histogram<u64>,
    writes: Histogram<u64>,
    /// Bytes moved since the shared progress counter was last told.
    progress: u64,
}

struct Slot {
    io: IoLoop,
    /// The loop's command in flight.
    current: Option<Next>,
    /// Whether the read in flight is checked: decided when it starts, as a unit written while
    /// it is in flight may or may not be in what it reads.
    check: bool,
    /// The buffer reads land in, between reads.
    read_buf: Option<BytesMut>,
    write_buf: Bytes,
}

impl Worker {
    async fn run(&mut self) -> Result<(), BenchError> {
        let mut active = 0;
        for i in 0..self.slots.len() {
            active += self.start(i) as usize;
        }
        let mut answers: Vec<Tagged> = Vec::new();
        // Kept from batch to batch: neither vector allocates once grown.
        let mut finished = Vec::new();
        while active > 0 {
            let retried = poll_fn(|cx| {
                if self.answers.poll_take(cx, &mut answers).is_ready() {
                    return Poll::Ready(None);
                }
                match self.retries.poll_join_next(cx) {
                    Poll::Ready(Some(done)) => Poll::Ready(Some(done)),
                    _ => Poll::Pending,
                }
            })
            .await;
            match retried {
                Some(Ok((i, Ok(data)))) => finished.push((i, data)),
                Some(Ok((i, Err(e)))) => {
                    let d = self.slots[i].current.map_or(0, |n| n.d);
                    return Err(io_error(&self.ctx.drives[d], e));
                }
                Some(Err(join)) => {
                    return Err(BenchError::Invalid(format!(
                        "a retried command failed (a bug): {join}"
                    )))
                }
                None => {}
            }
            for Tagged { tag, result } in answers.drain(..) {
                let i = tag as usize;
                match result {
                    Ok(completion) => finished.push((i, Some(into_buffer(completion.data)))),
                    // Once more the futures' way: another path, or a wait for one.
                    Err(_) => self.retry(i, None),
                }
            }
            for (i, data) in finished.drain(..) {
                self.finish(i, data);
                if !self.start(i) {
                    active -= 1;
                }
            }
        }
        Ok(())
    }

    /// Starts slot `i`'s next command; false when its loop is done.
    fn start(&mut self, i: usize) -> bool {
        let slot = &mut self.slots[i];
        let Some(mut next) = slot.io.next() else {
            return false;
        };
        let drive = &self.ctx.drives[next.d];
        let queue = drive.queue(slot.io.worker);
        if next.is_read {
            slot.current = Some(next);
            slot.check = slot.io.read_check(next.d, next.drive_unit).is_some();
            let buf = slot.read_buf.take().unwrap_or_default();
            let started = drive.session.start_read_into(
                queue,
                drive.nsid,
                next.slba,
                next.nlb,
                buf,
                self.answers.to(i as u64),
            );
            if let Err(buf) = started {
                self.retry(i, Some(buf));
            }
        } else {
            let data = match slot.io.write_pattern(next.d, next.slba) {
                Some(pattern) => {
                    // Filling a --verify pattern is not the command's time.
                    next.t0 = command_clock().now();
                    pattern
                }
                None => slot.write_buf.clone(),
            };
            slot.current = Some(next);
            let started = drive.session.start_write(
                queue,
                drive.nsid,
                next.slba,
                data,
                false,
                self.answers.to(i as u64),
            );
            if let Err(data) = started {
                self.retry_write(i, data);
            }
        }
        true
    }

    /// Sends slot `i`'s command the futures' way, in a task of its own (a read into `buf`).
    fn retry(&mut self, i: usize, buf: Option<BytesMut>) {
        let next = self.slots[i].current.expect("a command in flight");
        if !next.is_read {
            let slot = &self.slots[i];
            let data = slot
                .io
                .write_pattern(next.d, next.slba)
                .unwrap_or_else(|| slot.write_buf.clone());
            return self.retry_write(i, data);
        }
        let drive = &self.ctx.drives[next.d];
        let (session, queue, nsid) = (
            drive.session.clone(),
            drive.queue(self.slots[i].io.worker),
            drive.nsid,
        );
        let buf = buf.unwrap_or_else(|| BytesMut::with_capacity(self.ctx.spec.bs as usize));
        self.retries.spawn(async move {
            let read = session.read_into(queue, nsid, next.slba, next.nlb, buf);
            (i, read.await.map(Some))
        });
    }

    fn retry_write(&mut self, i: usize, data: Bytes) {
        let next = self.slots[i].current.expect("a command in flight");
        let drive = &self.ctx.drives[next.d];
        let (session, queue, nsid) = (
            drive.session.clone(),
            drive.queue(self.slots[i].io.worker),
            drive.nsid,
        );
        self.retries.spawn(async move {
            let write = session.write(queue, nsid, next.slba, data, false);
            (i, write.await.map(|()| None))
        });
    }

    /// Slot `i`'s command is done (a read's data in `data`): its time, its check, its bytes.
    fn finish(&mut self, i: usize, data: Option<BytesMut>) {
        let slot = &mut self.slots[i];
        let next = slot.current.take().expect("a command in flight");
        let took = command_clock().now() - next.t0;
        let bs = self.ctx.spec.bs as u64;
        if next.is_read {
            let data = data.unwrap_or_default();
            if let Some(v) = self.ctx.verify.as_ref().filter(|_| slot.check) {
                v.check(&self.ctx.drives[next.d], next.d, next.slba, &data);
            }
            slot.read_buf = Some(data);
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

    /// Adds the worker's latencies and progress to what its loops share.
    fn account(&mut self) {
        let progress = std::mem::take(&mut self.progress);
        self.ctx
            .progress
            .bytes
            .fetch_add(progress, Ordering::Relaxed);
        let Some(slot) = self.slots.first() else {
            return;
        };
        let mut shared = slot.io.shared.latencies.lock().unwrap();
        shared.reads.add(&self.reads).expect("same bounds");
        shared.writes.add(&self.writes).expect("same bounds");
    }
}

/// A read's buffer back from its completion's data, for the next read (empty for a write).
fn into_buffer(data: Bytes) -> BytesMut {
    data.try_into_mut()
        .unwrap_or_else(|shared| BytesMut::from(&shared[..]))
}
