//! Timers, for code on any thread. The reactors run without tokio's time driver: with it, every
//! park of a reactor looked at the timer wheel and the clock (about 400 of the 5,200 user-space
//! instructions of a QD1 4K read, callgrind), though a connected queue sets no timer. The few
//! timers there are (a Connect deadline, a close's linger, fault injection) live on one thread
//! of their own instead, which wakes the task that waits when one fires.
//!
//! Code in this crate takes its timers from here, never from `tokio::time` directly (a reactor
//! would panic there); `tests/timers.rs` checks that.

use std::future::IntoFuture;
use std::sync::LazyLock;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::time::{Instant, Sleep, Timeout};

/// The timer thread's runtime: time only, never shut down.
static TIMERS: LazyLock<Handle> = LazyLock::new(|| {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("the timer runtime builds");
    let handle = runtime.handle().clone();
    std::thread::Builder::new()
        .name("fabrik-timers".into())
        .spawn(move || runtime.block_on(std::future::pending::<()>()))
        .expect("spawn the timer thread");
    handle
});

/// `tokio::time::sleep`, on the timer thread.
pub fn sleep(duration: Duration) -> Sleep {
    let _timers = TIMERS.enter();
    tokio::time::sleep(duration)
}

/// `tokio::time::sleep_until`, on the timer thread.
pub fn sleep_until(deadline: Instant) -> Sleep {
    let _timers = TIMERS.enter();
    tokio::time::sleep_until(deadline)
}

/// `tokio::time::timeout`, its timer on the timer thread (the future runs where it is polled).
pub fn timeout<F: IntoFuture>(duration: Duration, future: F) -> Timeout<F::IntoFuture> {
    let _timers = TIMERS.enter();
    tokio::time::timeout(duration, future)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A runtime without a time driver, as a reactor's, sleeps and times out through here.
    #[test]
    fn timers_work_on_a_runtime_without_time() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .unwrap();
        runtime.block_on(async {
            let start = std::time::Instant::now();
            sleep(Duration::from_millis(30)).await;
            assert!(start.elapsed() >= Duration::from_millis(30));
            let late = timeout(Duration::from_millis(20), std::future::pending::<()>()).await;
            assert!(late.is_err(), "the timeout fired");
            let on_time = timeout(Duration::from_secs(5), async { 7 }).await;
            assert_eq!(on_time.ok(), Some(7));
            let until = sleep_until(Instant::now() + Duration::from_millis(10));
            until.await;
        });
    }
}
