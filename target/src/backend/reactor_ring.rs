//! A reactor's own io_uring for drive I/O. A file or block drive's operation started on a
//! reactor thread goes into that thread's ring, and its completion comes back on the same
//! thread through the reactor's event loop (the ring signals an eventfd the loop watches): no
//! hand-off to the drive's ring thread and back per operation, which cost two cross-thread
//! wake-ups each. Operations started in one pass of the reactor go to the kernel together, in
//! one io_uring_enter, when the ring's task next runs.
//!
//! The ring is made on a reactor's first drive operation; where io_uring is not available the
//! operation goes the drive's way instead (`uring::Ring`). Its buffers are not registered (the
//! drives' pools are registered with the drives' own rings), so it uses plain reads and writes.

use std::cell::RefCell;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use io_uring::IoUring;
use tokio::io::unix::AsyncFd;
use tokio::sync::Notify;

use super::uring::{check_opcodes, Op, Ops};

/// Submission queue entries of a reactor's ring; operations beyond wait in its backlog.
const ENTRIES: u32 = 512;

struct LocalRing {
    ring: IoUring,
    ops: Ops,
    /// Wakes the ring's task: operations were queued.
    queued: Arc<Notify>,
}

enum Local {
    /// Not tried yet on this thread.
    Untried,
    Ready(Box<LocalRing>),
    /// Not a reactor, or io_uring refused: the drives' own rings serve this thread.
    Unavailable,
}

thread_local! {
    static LOCAL: RefCell<Local> = const { RefCell::new(Local::Untried) };
}

#[cfg(test)]
thread_local! {
    /// Operations this thread's ring took.
    static TAKEN: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Queues `op` on this reactor's ring; gives it back where there is none (off a reactor, or no
/// io_uring), for the drive's own ring.
pub(super) fn submit(op: Op) -> Result<(), Op> {
    LOCAL.with(|local| {
        let mut local = local.borrow_mut();
        if matches!(*local, Local::Untried) {
            *local = if crate::reactor::on_reactor() {
                match LocalRing::start() {
                    Ok(ring) => Local::Ready(Box::new(ring)),
                    Err(e) => {
                        tracing::warn!(
                            "no io_uring for a reactor ({e}): its drive I/O goes through the \
                             drives' threads"
                        );
                        Local::Unavailable
                    }
                }
            } else {
                Local::Unavailable
            };
        }
        match &mut *local {
            Local::Ready(r) => {
                #[cfg(test)]
                TAKEN.with(|t| t.set(t.get() + 1));
                r.ops.backlog.push_back(op);
                r.queued.notify_one();
                Ok(())
            }
            _ => Err(op),
        }
    })
}

impl LocalRing {
    /// Makes the ring and starts its task on this reactor's runtime.
    fn start() -> io::Result<LocalRing> {
        let ring = IoUring::new(ENTRIES)?;
        check_opcodes(&ring)?;
        // SAFETY: plain syscall; on success we own the returned descriptor.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        let completed = unsafe { OwnedFd::from_raw_fd(fd) };
        ring.submitter().register_eventfd(completed.as_raw_fd())?;
        // SAFETY: the AsyncFd owns the descriptor, which stays open while it is registered.
        let completed = unsafe { AsyncFd::register(completed) }?;
        let queued = Arc::new(Notify::new());
        tokio::spawn(run(completed, queued.clone()));
        Ok(LocalRing {
            ring,
            ops: Ops::default(),
            queued,
        })
    }

    /// Submits what is queued and completes what is done, until neither makes progress.
    fn turn(&mut self) {
        // Capping operations in flight at the SQ size keeps the (twice as large) CQ from
        // overflowing.
        let cap = self.ring.params().sq_entries() as usize;
        loop {
            self.ops.push_backlog(&mut self.ring, cap, None);
            if !self.ring.submission().is_empty() {
                if let Err(e) = self.ring.submit() {
                    if !matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                    ) {
                        tracing::error!("io_uring_enter failed: {e}");
                    }
                }
            }
            // Completions made room for the backlog, and more may have come meanwhile.
            if !self.reap() {
                return;
            }
        }
    }

    /// Completes every finished operation; false if there was none.
    fn reap(&mut self) -> bool {
        let mut reaped = false;
        for cqe in self.ring.completion() {
            self.ops.complete(cqe.user_data(), cqe.result());
            reaped = true;
        }
        reaped
    }
}

impl Drop for LocalRing {
    /// The reactor thread ends: the kernel may still write into buffers of operations in
    /// flight, which live in `ops`, so they are waited for first.
    fn drop(&mut self) {
        while self.ops.in_flight > 0 {
            if self.ring.submit_and_wait(1).is_err() {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            self.reap();
        }
    }
}

/// The ring's task: submits queued operations and completes finished ones, woken by new
/// operations and by the ring's eventfd.
async fn run(completed: AsyncFd<OwnedFd>, queued: Arc<Notify>) {
    loop {
        LOCAL.with(|local| {
            if let Local::Ready(r) = &mut *local.borrow_mut() {
                r.turn();
            }
        });
        tokio::select! {
            _ = queued.notified() => {}
            ready = completed.readable() => match ready {
                Ok(mut guard) => {
                    let mut count = [0u8; 8];
                    // SAFETY: reads 8 bytes from our non-blocking eventfd into `count`.
                    unsafe { libc::read(completed.as_raw_fd(), count.as_mut_ptr().cast(), 8) };
                    guard.clear_ready();
                }
                Err(e) => {
                    tracing::error!("a reactor's io_uring eventfd failed: {e}");
                    return;
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::file::FileDrive;
    use super::super::{testkit, Drive, IoMode};
    use super::*;
    use crate::reactor::{allowed_cores, Polling, Reactors};

    fn taken() -> u64 {
        TAKEN.with(|t| t.get())
    }

    #[test]
    fn a_drive_on_a_reactor_does_its_io_through_the_reactor_s_ring() {
        if !testkit::uring_works() {
            return; // io_uring refused here: the drives' own threads serve (tested in `file`).
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("disk.img");
        let drive = Arc::new(FileDrive::open_with(&path, 16 << 20, 4096, IoMode::Uring).unwrap());
        let reactors = Reactors::new(vec![allowed_cores()[0]], Polling::default());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut set = tokio::task::JoinSet::new();
        // Data written reads back, ranges, zeroing, FUA and flush, and 64 tasks at once (more
        // operations than the ring holds: the backlog), all on the reactor.
        let on_reactor = drive.clone();
        reactors.place(&mut set, async move {
            testkit::conformance(on_reactor).await;
            taken()
        });
        let taken_there = rt.block_on(set.join_next()).unwrap().unwrap();
        assert!(taken_there > 1000, "{taken_there} operations");
        // Off a reactor the drive's own ring does the work.
        rt.block_on(async {
            drive
                .write(0, testkit::pattern(1, 4096), false)
                .await
                .unwrap();
            assert_eq!(
                drive.read(0, 4096).await.unwrap(),
                testkit::pattern(1, 4096)
            );
        });
        assert_eq!(taken(), 0);
    }
}
