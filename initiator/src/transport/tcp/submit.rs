//! Queueing a command: what the caller gets back is a small future that waits for the
//! completion. The command goes into its slot (`commands.rs`) and its capsule to the writer
//! when it is submitted, not when the future is first polled, so that the future holds only the
//! slot's CID: every layer above (the host queue, the controller's
//! I/O queue, a session's paths, the caller) moves it once per command, and an async fn doing
//! the queueing itself held the command's whole state (about 600 bytes at this level, more at
//! each above: callgrind counted about 500 instructions of copying per 4K read).
//!
//! A queue at its depth is the rare case: the command then waits for room in a boxed future of
//! its own.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use super::commands::Waiter;
use super::data_in::DataIn;
use super::{Backlogged, Completion, Shared};
use crate::error::HostError;
use crate::transport::AnswerTo;
use bytes::Bytes;
use fabrik_proto::Sqe;

/// A command to queue, its SGL set.
pub(super) struct Command {
    pub(super) sqe: Sqe,
    pub(super) data_out: Bytes,
    /// `data_out` goes in the capsule (else the target asks for it with R2T).
    pub(super) in_capsule: bool,
    pub(super) data_in: DataIn,
    pub(super) data_in_len: usize,
    /// Within the queue's command timeout (an Asynchronous Event Request is not).
    pub(super) timed: bool,
}

/// A submitted command's completion, when it comes (see `TcpQueue::submit`).
pub struct Submitted<'a> {
    shared: &'a Shared,
    state: State,
}

enum State {
    /// In the slot of this CID.
    Queued(u16),
    /// The answer was taken.
    Taken,
    Failed(Option<HostError>),
    WaitingForRoom(Pin<Box<dyn Future<Output = Result<Completion, HostError>> + Send>>),
}

impl<'a> Submitted<'a> {
    pub(super) fn new(shared: &'a Arc<Shared>, command: Command) -> Submitted<'a> {
        let state = match shared.try_queue(command) {
            Ok(cid) => State::Queued(cid),
            Err(Refused::Closed(err)) => State::Failed(Some(err)),
            Err(Refused::Full(command)) => {
                State::WaitingForRoom(Box::pin(wait_for_room(shared.clone(), *command)))
            }
        };
        Submitted { shared, state }
    }

    pub(super) fn failed(shared: &'a Shared, err: HostError) -> Submitted<'a> {
        Submitted {
            shared,
            state: State::Failed(Some(err)),
        }
    }
}

impl Future for Submitted<'_> {
    type Output = Result<Completion, HostError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Submitted { shared, state } = self.get_mut();
        match state {
            State::Queued(cid) => {
                let result = shared.take(*cid, cx.waker());
                if result.is_ready() {
                    *state = State::Taken;
                }
                result
            }
            State::Taken => panic!("polled after it completed"),
            State::Failed(err) => Poll::Ready(Err(err.take().expect("polled after it failed"))),
            State::WaitingForRoom(waiting) => waiting.as_mut().poll(cx),
        }
    }
}

impl Drop for Submitted<'_> {
    /// A caller that stops waiting gives its slot up (once the target answered).
    fn drop(&mut self) {
        if let State::Queued(cid) = self.state {
            let mut state = self.shared.state.lock().unwrap();
            if state.commands.abandon(cid) {
                state.slot_freed(self.shared);
            }
        }
    }
}

/// Why a command was not queued.
enum Refused {
    Closed(HostError),
    /// The queue's depth is in flight; the command is given back (boxed: the rare case).
    Full(Box<Command>),
}

impl Shared {
    /// Queues `command` in a free slot, and its capsule for the writer; gives its CID.
    fn try_queue(&self, command: Command) -> Result<u16, Refused> {
        let (cid, wake_writer) = {
            let mut state = self.state.lock().unwrap();
            if let Some(err) = &state.closed {
                return Err(Refused::Closed(err.clone()));
            }
            if state.commands.full() {
                return Err(Refused::Full(Box::new(command)));
            }
            state.queue_command(command, Waiter::None)
        };
        if wake_writer {
            self.writer_wake.notify_one();
        }
        Ok(cid)
    }

    /// Queues `command`, its answer to go where `answer` says: in a free slot, else after the
    /// commands already waiting for one (they start in the order given). A closed queue posts
    /// its error at once.
    pub(super) fn start(&self, command: Command, answer: AnswerTo<'_>) {
        let wake_writer = {
            let mut state = self.state.lock().unwrap();
            if let Some(err) = &state.closed {
                let err = err.clone();
                drop(state);
                answer.post(Err(err));
                return;
            }
            let (queue, tag) = (answer.queue.clone(), answer.tag);
            if state.backlog.is_empty() && !state.commands.full() {
                state.queue_command(command, Waiter::Queue(queue, tag)).1
            } else {
                state.backlog.push_back(Backlogged {
                    command,
                    queue,
                    tag,
                });
                false
            }
        };
        if wake_writer {
            self.writer_wake.notify_one();
        }
    }

    /// The answer to the command in slot `cid`, if it came (the slot is then freed); else
    /// `waker` is woken when it comes.
    fn take(&self, cid: u16, waker: &std::task::Waker) -> Poll<Result<Completion, HostError>> {
        let mut state = self.state.lock().unwrap();
        match state.commands.take(cid, waker) {
            Some(Poll::Ready(result)) => {
                state.slot_freed(self);
                Poll::Ready(result)
            }
            Some(Poll::Pending) => Poll::Pending,
            // Not the slot's command any more: a bug, reported rather than waited on forever.
            None => Poll::Ready(Err(state.closed.clone().unwrap_or(
                HostError::QueueClosed {
                    qid: self.qid,
                    reason: format!("command {cid:#06x} lost its slot"),
                },
            ))),
        }
    }
}

/// Queues `command` once a command completes and makes room (or fails with the close).
async fn wait_for_room(shared: Arc<Shared>, mut command: Command) -> Result<Completion, HostError> {
    loop {
        // Told by a completion from here on: registered, and counted as waiting, before the
        // attempt, so a completion between the attempt and the wait is not missed.
        let room = shared.room.notified();
        let mut room = std::pin::pin!(room);
        room.as_mut().enable();
        let waiting = Waiting::new(&shared);
        match shared.try_queue(command) {
            Ok(cid) => {
                drop(waiting);
                let submitted = Submitted {
                    shared: &shared,
                    state: State::Queued(cid),
                };
                return submitted.await;
            }
            Err(Refused::Closed(err)) => return Err(err),
            Err(Refused::Full(back)) => command = *back,
        }
        room.await;
    }
}

/// A caller waiting for room, counted in `State::waiting` until it stops (or is dropped).
struct Waiting<'a>(&'a Shared);

impl<'a> Waiting<'a> {
    fn new(shared: &'a Shared) -> Waiting<'a> {
        shared.state.lock().unwrap().waiting += 1;
        Waiting(shared)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.state.lock().unwrap().waiting -= 1;
    }
}
