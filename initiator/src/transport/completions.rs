//! A completion queue: answers to commands started with a tag (`TcpQueue::start`) gather here,
//! and one consumer takes every answer that came since it last looked, woken once per batch.
//!
//! The future per command (`TcpQueue::submit`) costs each command a task wake-up and a poll down
//! every layer of its caller's future: `fabrik bench` on a completion queue took 4,542 to 3,911
//! instructions per 4K read at QD32 (callgrind). A caller that keeps many commands in flight from one task (the bench's I/O
//! workers; a data loader) takes their answers here instead, as SPDK's callers take theirs from
//! completion callbacks and io_uring's from its completion ring.

use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use super::Completion;
use crate::error::HostError;

/// The answer to a command started with `tag`: its completion (a success status: any other
/// status is `HostError::Status`, as from `Queue::submit`) or why it failed.
#[derive(Debug)]
pub struct Tagged {
    pub tag: u64,
    pub result: Result<Completion, HostError>,
}

/// Where a started command's answer goes: a completion queue, under a tag.
#[derive(Clone, Copy, Debug)]
pub struct AnswerTo<'a> {
    pub queue: &'a CompletionQueue,
    pub tag: u64,
}

impl AnswerTo<'_> {
    pub(crate) fn post(self, result: Result<Completion, HostError>) {
        self.queue.post(self.tag, result);
    }
}

/// Where started commands' answers gather. Cloned into every command started with it; one task
/// takes the answers.
#[derive(Clone, Default)]
pub struct CompletionQueue(Arc<Mutex<Inner>>);

#[derive(Default)]
struct Inner {
    ready: Vec<Tagged>,
    /// The consumer, waiting for the first answer of the next batch.
    waker: Option<Waker>,
}

impl std::fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ready = self.0.lock().map_or(0, |inner| inner.ready.len());
        f.debug_struct("CompletionQueue")
            .field("ready", &ready)
            .finish()
    }
}

impl CompletionQueue {
    pub fn new() -> CompletionQueue {
        CompletionQueue::default()
    }

    /// The answer of a command to start, under `tag`.
    pub fn to(&self, tag: u64) -> AnswerTo<'_> {
        AnswerTo { queue: self, tag }
    }

    /// Adds an answer; wakes the consumer if it waits (only the batch's first answer does).
    pub(crate) fn post(&self, tag: u64, result: Result<Completion, HostError>) {
        let waker = {
            let mut inner = self.0.lock().unwrap();
            inner.ready.push(Tagged { tag, result });
            inner.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// Moves every answer that came into `into` (appended); Pending, with `cx` woken by the
    /// next answer, if none has.
    pub fn poll_take(&self, cx: &mut Context<'_>, into: &mut Vec<Tagged>) -> Poll<()> {
        let mut inner = self.0.lock().unwrap();
        if inner.ready.is_empty() {
            match &inner.waker {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => inner.waker = Some(cx.waker().clone()),
            }
            return Poll::Pending;
        }
        if into.is_empty() {
            // The two vectors trade places: neither allocates once both have grown.
            std::mem::swap(&mut inner.ready, into);
        } else {
            into.append(&mut inner.ready);
        }
        Poll::Ready(())
    }

    /// Waits for answers and moves them into `into` (see `poll_take`).
    pub async fn take(&self, into: &mut Vec<Tagged>) {
        std::future::poll_fn(|cx| self.poll_take(cx, into)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabrik_proto::{Cqe, Status};

    fn ok(cid: u16) -> Result<Completion, HostError> {
        Ok(Completion {
            cqe: Cqe::new(cid, Status::SUCCESS),
            data: bytes::Bytes::new(),
        })
    }

    #[tokio::test]
    async fn answers_posted_before_and_while_waiting_come_in_order() {
        let cq = CompletionQueue::new();
        cq.post(7, ok(1));
        cq.post(8, Err(HostError::ConnectionClosed { qid: 1 }));
        let mut got = Vec::new();
        cq.take(&mut got).await;
        assert_eq!(got.iter().map(|t| t.tag).collect::<Vec<_>>(), [7, 8]);
        assert!(got[0].result.is_ok() && got[1].result.is_err());

        let poster = cq.clone();
        let later = tokio::spawn(async move {
            tokio::task::yield_now().await;
            poster.post(9, ok(2));
        });
        got.clear();
        cq.take(&mut got).await;
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].tag, 9);
        later.await.unwrap();
    }

    #[test]
    fn a_waiting_consumer_is_woken_once_per_batch() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        struct Count(AtomicUsize);
        impl std::task::Wake for Count {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        let cq = CompletionQueue::new();
        let mut got = Vec::new();
        assert!(cq.poll_take(&mut cx, &mut got).is_pending());
        for tag in 0..5 {
            cq.post(tag, ok(tag as u16));
        }
        assert_eq!(count.0.load(Ordering::Relaxed), 1);
        assert!(cq.poll_take(&mut cx, &mut got).is_ready());
        assert_eq!(got.len(), 5);
    }
}
