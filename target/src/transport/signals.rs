//! What a queue's loop waits for besides its transport and its commands: fabrikd stopping, the
//! queue's controller torn down, and the Connect that must come within a deadline.
//!
//! A loop looks at these on every turn, and they almost never fire. Cancellation tokens keep
//! their state and waiters behind locks, so the futures are made once and polled again only
//! after one of them woke the task: made anew and polled on every turn of the NVMe/TCP loop,
//! the stop and teardown tokens took 475 of the 6,594 user-space instructions of a QD1 4K read
//! (callgrind, one core, null drive); kept in a `FuturesUnordered`, 141 of 5,410; behind the
//! flag here, 40 of 5,306.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use futures_util::task::AtomicWaker;
use tokio_util::sync::CancellationToken;

use crate::controller::Queue;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// fabrikd is stopping: finish what is executing.
    Stop,
    /// The queue's controller was torn down: the queue ends.
    Teardown,
    /// No Connect came within the deadline: the queue ends.
    ConnectTimeout,
}

type Waiting = Pin<Box<dyn Future<Output = Signal> + Send>>;

pub struct Signals {
    /// Stop, then Teardown once the queue is connected; a future leaves when it fired.
    waiting: Vec<Waiting>,
    /// Until the queue is connected; dropped then, since a timer left registered costs every
    /// turn of the reactor a look at the timer wheel.
    connect_deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    bound: bool,
    /// The futures are polled with this flag's waker, and polled again only once it was woken.
    flag: Arc<Flag>,
    flag_waker: Waker,
    /// The task's waker the flag passes wake-ups on to, as last registered.
    task: Option<Waker>,
}

#[derive(Default)]
struct Flag {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl Signals {
    /// Watches `stop`, and the Connect deadline from now.
    pub fn new(stop: &CancellationToken, connect_timeout: Duration) -> Signals {
        let stopped = stop.clone().cancelled_owned();
        let flag = Arc::new(Flag::default());
        // Nothing polled yet.
        flag.woken.store(true, Ordering::Relaxed);
        Signals {
            waiting: vec![Box::pin(async move {
                stopped.await;
                Signal::Stop
            })],
            connect_deadline: Some(Box::pin(crate::timer::sleep(connect_timeout))),
            bound: false,
            flag_waker: Waker::from(flag.clone()),
            flag,
            task: None,
        }
    }

    /// Once `queue` is connected, watches its controller's teardown instead of the deadline.
    /// Cheap: call it on every turn.
    pub fn follow(&mut self, queue: &Queue) {
        if self.bound {
            return;
        }
        if let Some(binding) = queue.binding() {
            self.bound = true;
            self.connect_deadline = None;
            let torn_down = binding.teardown.clone().cancelled_owned();
            self.waiting.push(Box::pin(async move {
                torn_down.await;
                Signal::Teardown
            }));
            self.flag.woken.store(true, Ordering::Relaxed);
        }
    }

    /// The next signal. Each fires once (Stop and Teardown are not repeated).
    pub fn next(&mut self) -> impl Future<Output = Signal> + '_ {
        std::future::poll_fn(|cx| self.poll_next(cx))
    }

    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Signal> {
        if !self.task.as_ref().is_some_and(|t| t.will_wake(cx.waker())) {
            self.flag.task.register(cx.waker());
            self.task = Some(cx.waker().clone());
        }
        if !self.flag.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        // The wake took the registered waker with it: register again before looking, so that
        // a wake from here on finds it.
        self.flag.task.register(cx.waker());
        let mut flagged = Context::from_waker(&self.flag_waker);
        if let Some(deadline) = &mut self.connect_deadline {
            if deadline.as_mut().poll(&mut flagged).is_ready() {
                self.connect_deadline = None;
                return Poll::Ready(Signal::ConnectTimeout);
            }
        }
        for i in 0..self.waiting.len() {
            if let Poll::Ready(signal) = self.waiting[i].as_mut().poll(&mut flagged) {
                drop(self.waiting.swap_remove(i));
                // The others were not all looked at.
                self.flag.woken.store(true, Ordering::Relaxed);
                return Poll::Ready(signal);
            }
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    #[tokio::test]
    async fn stop_fires_once_and_the_deadline_after_its_time() {
        let start = std::time::Instant::now();
        let stop = CancellationToken::new();
        let mut signals = Signals::new(&stop, Duration::from_millis(100));
        assert_eq!(signals.next().now_or_never(), None);
        stop.cancel();
        assert_eq!(signals.next().await, Signal::Stop);
        assert_eq!(signals.next().now_or_never(), None, "Stop is not repeated");
        assert_eq!(signals.next().await, Signal::ConnectTimeout);
        assert!(start.elapsed() >= Duration::from_millis(100));
    }

    /// The task is woken for a second signal too, after the first one's wake.
    #[tokio::test]
    async fn each_signal_wakes_the_task() {
        let stop = CancellationToken::new();
        let mut signals = Signals::new(&stop, Duration::from_millis(200));
        let waiting = tokio::spawn(async move {
            let first = signals.next().await;
            let second = signals.next().await;
            (first, second)
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        stop.cancel();
        let (first, second) = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("both signals wake the task")
            .unwrap();
        assert_eq!((first, second), (Signal::Stop, Signal::ConnectTimeout));
    }
}
