//! io_uring for the file and block backends. On a reactor thread an operation goes to that
//! reactor's own ring (`reactor_ring`); elsewhere (the control runtime, tests) to the drive's
//! ring, owned by a dedicated thread.
//!
//! Tasks await a oneshot for each operation. Off a reactor they send it over a channel; the
//! drive's thread pushes SQEs, waits for CQEs and sends each result back with the operation's
//! buffer. Buffers and file handles travel *with* the operation, so a caller that drops its
//! future (cancellation) never frees memory the kernel still reads or writes.

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};

use io_uring::{opcode, squeue, types, IoUring};
use tokio::sync::oneshot;

use super::aligned::BufPool;
use super::engine::{retryable, Buf};

/// Largest single submission; bigger transfers loop (like short reads and writes do).
const MAX_CHUNK: usize = 1 << 30;

pub(super) enum Kind {
    Read {
        buf: Buf,
        pos: usize,
        offset: u64,
    },
    Write {
        buf: Buf,
        pos: usize,
        offset: u64,
        dsync: bool,
    },
    Fdatasync,
    Fallocate {
        mode: i32,
        offset: u64,
        len: u64,
    },
}

impl Kind {
    fn into_buf(self) -> Option<Buf> {
        match self {
            Kind::Read { buf, .. } | Kind::Write { buf, .. } => Some(buf),
            _ => None,
        }
    }
}

pub(super) type Done = (io::Result<u32>, Option<Buf>);

pub(super) struct Op {
    /// Keeps the descriptor open (and unreused) until the kernel is done with it.
    file: Arc<File>,
    kind: Kind,
    done: oneshot::Sender<Done>,
}

impl Op {
    fn complete(self, res: io::Result<u32>) {
        let Op { file, kind, done } = self;
        // Close our handle before the caller learns the result, so that e.g. reopening the
        // drive right after dropping it never finds the file still held.
        drop(file);
        let _ = done.send((res, kind.into_buf()));
    }
}

fn gone() -> io::Error {
    io::Error::other("io_uring thread is gone")
}

/// State shared by the submitters and the ring thread.
struct Shared {
    /// Written by submitters to wake the thread while it sleeps in io_uring_enter; the thread
    /// keeps a POLL_ADD on it, so new work interrupts the wait for completions.
    wake_fd: OwnedFd,
    /// Set by the thread just before it sleeps; a submitter that swaps it back to false owes
    /// one wake-up. Saves a syscall per I/O while the thread is busy.
    sleeping: AtomicBool,
}

impl Shared {
    fn wake(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes to an eventfd we own. A full counter (EAGAIN) already wakes.
        unsafe { libc::write(self.wake_fd.as_raw_fd(), one.as_ptr().cast(), 8) };
    }

    fn clear(&self) {
        let mut buf = [0u8; 8];
        // SAFETY: reads 8 bytes from a non-blocking eventfd we own into `buf`.
        unsafe { libc::read(self.wake_fd.as_raw_fd(), buf.as_mut_ptr().cast(), 8) };
    }
}

pub(crate) struct Ring {
    /// `None` only during drop: dropping the sender is how the thread learns to stop.
    tx: Option<mpsc::Sender<Op>>,
    shared: Arc<Shared>,
    pool: Option<Arc<BufPool>>,
    /// The block size O_DIRECT needs (1 for buffered files).
    align: usize,
}

impl Ring {
    pub(crate) fn new(
        name: &str,
        entries: u32,
        pool: Option<Arc<BufPool>>,
        align: usize,
    ) -> io::Result<Ring> {
        let ring = IoUring::new(entries)?;
        check_opcodes(&ring)?;
        let pool = pool.and_then(|pool| {
            // SAFETY: the pool's memory stays allocated while the ring exists: the thread
            // holds an `Arc` to it and drops that only after the ring.
            match unsafe { ring.submitter().register_buffers(&pool.iovecs()) } {
                Ok(()) => Some(pool),
                Err(e) => {
                    tracing::warn!(
                        drive = name,
                        "cannot register I/O buffers ({e}); using unregistered ones"
                    );
                    None
                }
            }
        });
        // SAFETY: plain syscall; on success we own the returned descriptor.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        let wake_fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let shared = Arc::new(Shared {
            wake_fd,
            sleeping: AtomicBool::new(false),
        });
        let (tx, rx) = mpsc::channel();
        let thread = RingThread {
            ring,
            rx,
            shared: shared.clone(),
            pool: pool.clone(),
            ops: Ops::default(),
        };
        std::thread::Builder::new()
            .name(thread_name(name))
            .spawn(move || thread.run())?;
        Ok(Ring {
            tx: Some(tx),
            shared,
            pool,
            align,
        })
    }

    async fn submit(&self, file: &Arc<File>, kind: Kind) -> Done {
        let (done, rx) = oneshot::channel();
        let op = Op {
            file: file.clone(),
            kind,
            done,
        };
        // On a reactor, its own ring takes the operation: no thread hand-off either way.
        if let Err(op) = super::reactor_ring::submit(op) {
            let Some(tx) = &self.tx else {
                return (Err(gone()), op.kind.into_buf());
            };
            if let Err(mpsc::SendError(op)) = tx.send(op) {
                return (Err(gone()), op.kind.into_buf());
            }
            if self.shared.sleeping.swap(false, Ordering::SeqCst) {
                self.shared.wake();
            }
        }
        rx.await.unwrap_or_else(|_| (Err(gone()), None))
    }

    /// The registered buffer pool, if registration succeeded.
    pub(crate) fn pool(&self) -> Option<&Arc<BufPool>> {
        self.pool.as_ref()
    }

    /// Reads (`write` is `None`) or writes (`Some(dsync)`, RWF_DSYNC) all of `buf` at
    /// `offset`, resubmitting the rest after a short transfer. Returns the buffer.
    pub(crate) async fn transfer(
        &self,
        file: &Arc<File>,
        mut buf: Buf,
        offset: u64,
        write: Option<bool>,
    ) -> io::Result<Buf> {
        let mut pos = 0;
        while pos < buf.as_slice().len() {
            let at = offset + pos as u64;
            let kind = match write {
                None => Kind::Read {
                    buf,
                    pos,
                    offset: at,
                },
                Some(dsync) => Kind::Write {
                    buf,
                    pos,
                    offset: at,
                    dsync,
                },
            };
            let (res, back) = self.submit(file, kind).await;
            buf = back.ok_or_else(gone)?;
            pos += match res {
                Ok(0) if write.is_some() => return Err(io::ErrorKind::WriteZero.into()),
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => n as usize,
                Err(e) if retryable(&e) => 0,
                Err(e) => return Err(e),
            };
            if pos < buf.as_slice().len() {
                super::engine::check_resume(pos, self.align)?;
            }
        }
        Ok(buf)
    }

    pub(crate) async fn fdatasync(&self, file: &Arc<File>) -> io::Result<()> {
        self.submit(file, Kind::Fdatasync).await.0.map(drop)
    }

    pub(crate) async fn fallocate(
        &self,
        file: &Arc<File>,
        mode: i32,
        offset: u64,
        len: u64,
    ) -> io::Result<()> {
        let kind = Kind::Fallocate { mode, offset, len };
        self.submit(file, kind).await.0.map(drop)
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        drop(self.tx.take());
        self.shared.wake();
    }
}

/// "uring-" and the drive's file name, cut to the 15 bytes Linux keeps of a thread name.
fn thread_name(drive: &str) -> String {
    let base = drive.rsplit('/').next().unwrap_or(drive);
    let mut name = format!("uring-{base}");
    while name.len() > 15 {
        name.pop();
    }
    name
}

pub(super) fn check_opcodes(ring: &IoUring) -> io::Result<()> {
    let mut probe = io_uring::Probe::new();
    ring.submitter().register_probe(&mut probe)?;
    let needed = [
        opcode::Read::CODE,
        opcode::Write::CODE,
        opcode::ReadFixed::CODE,
        opcode::WriteFixed::CODE,
        opcode::Fsync::CODE,
        opcode::Fallocate::CODE,
        opcode::PollAdd::CODE,
    ];
    match needed.iter().all(|&op| probe.is_supported(op)) {
        true => Ok(()),
        false => Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "kernel lacks needed io_uring opcodes",
        )),
    }
}

/// user_data of the wake-up poll; operations use their slot index.
const WAKE: u64 = u64::MAX;

struct RingThread {
    ring: IoUring,
    rx: mpsc::Receiver<Op>,
    shared: Arc<Shared>,
    /// Registered buffers; dropped after `ring` (field order) so they outlive the registration.
    pool: Option<Arc<BufPool>>,
    ops: Ops,
}

/// The operations of one ring: in flight by slot (= user_data), and those waiting for room.
#[derive(Default)]
pub(super) struct Ops {
    slots: Vec<Option<Op>>,
    free: Vec<usize>,
    pub(super) in_flight: usize,
    /// Received but not yet submitted (the ring is full).
    pub(super) backlog: VecDeque<Op>,
}

impl Ops {
    /// Moves backlog operations into `ring`'s submission queue while fewer than `cap` are in
    /// flight.
    pub(super) fn push_backlog(
        &mut self,
        ring: &mut IoUring,
        cap: usize,
        pool: Option<&Arc<BufPool>>,
    ) {
        while self.in_flight < cap {
            let Some(mut op) = self.backlog.pop_front() else {
                break;
            };
            let slot = self.free.pop().unwrap_or_else(|| {
                self.slots.push(None);
                self.slots.len() - 1
            });
            let Some(sqe) = sqe_for(&mut op, pool) else {
                self.free.push(slot);
                op.complete(Err(io::ErrorKind::InvalidInput.into()));
                continue;
            };
            // SAFETY: the SQE points into the heap memory of `op`'s buffer, which does not
            // move with `op`, and uses its descriptor; `op` stays in `slots` until reaped.
            if unsafe { ring.submission().push(&sqe.user_data(slot as u64)) }.is_err() {
                self.free.push(slot);
                self.backlog.push_front(op);
                break;
            }
            self.slots[slot] = Some(op);
            self.in_flight += 1;
        }
    }

    /// Completes the operation of a CQE.
    pub(super) fn complete(&mut self, user_data: u64, res: i32) {
        let slot = user_data as usize;
        let Some(op) = self.slots.get_mut(slot).and_then(Option::take) else {
            return;
        };
        self.free.push(slot);
        self.in_flight -= 1;
        op.complete(if res < 0 {
            Err(io::Error::from_raw_os_error(-res))
        } else {
            Ok(res as u32)
        });
    }
}

impl RingThread {
    fn run(mut self) {
        // One SQ slot stays for the wake-up poll, and capping in-flight operations at the SQ
        // size keeps the (twice as large) CQ from ever overflowing.
        let cap = self.ring.params().sq_entries() as usize - 1;
        let (mut open, mut poll_armed) = (true, false);
        loop {
            open &= self.receive();
            self.push_backlog(cap);
            if open && !poll_armed {
                let poll = opcode::PollAdd::new(
                    types::Fd(self.shared.wake_fd.as_raw_fd()),
                    libc::POLLIN as u32,
                );
                // SAFETY: a poll references no user memory.
                poll_armed =
                    unsafe { self.ring.submission().push(&poll.build().user_data(WAKE)) }.is_ok();
            }
            if !open && self.ops.in_flight == 0 && self.ops.backlog.is_empty() {
                return; // A still-armed poll references no memory, so dropping the ring is safe.
            }
            // Sleep only if nothing else can be submitted now; announce it first, then look
            // once more, so a submitter either sees the flag or we see its operation.
            let more = !self.ops.backlog.is_empty() && self.ops.in_flight < cap; // SQ was full
            let mut want = usize::from(!more && (self.ops.in_flight > 0 || poll_armed));
            if want == 1 && self.ops.in_flight < cap {
                self.shared.sleeping.store(true, Ordering::SeqCst);
                match self.rx.try_recv() {
                    Ok(op) => {
                        self.ops.backlog.push_back(op);
                        want = 0;
                    }
                    Err(mpsc::TryRecvError::Disconnected) => open = false,
                    Err(mpsc::TryRecvError::Empty) => {}
                }
            }
            let res = self.ring.submit_and_wait(want);
            self.shared.sleeping.store(false, Ordering::SeqCst);
            if let Err(e) = res {
                if !matches!(
                    e.raw_os_error(),
                    Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                ) {
                    tracing::error!("io_uring_enter failed: {e}");
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
            }
            poll_armed &= !self.reap();
        }
    }

    /// Moves every queued operation to the backlog; false once all senders are gone.
    fn receive(&mut self) -> bool {
        loop {
            match self.rx.try_recv() {
                Ok(op) => self.ops.backlog.push_back(op),
                Err(mpsc::TryRecvError::Empty) => return true,
                Err(mpsc::TryRecvError::Disconnected) => return false,
            }
        }
    }

    fn push_backlog(&mut self, cap: usize) {
        self.ops
            .push_backlog(&mut self.ring, cap, self.pool.as_ref());
    }

    /// Completes every finished operation; true if the wake-up poll fired.
    fn reap(&mut self) -> bool {
        let mut woken = false;
        for cqe in self.ring.completion() {
            if cqe.user_data() == WAKE {
                self.shared.clear();
                woken = true;
                continue;
            }
            self.ops.complete(cqe.user_data(), cqe.result());
        }
        woken
    }
}

/// The SQE for `op`, or `None` if it asks to read into an immutable buffer.
fn sqe_for(op: &mut Op, pool: Option<&Arc<BufPool>>) -> Option<squeue::Entry> {
    let fd = types::Fd(op.file.as_raw_fd());
    let fixed = |buf: &Buf| match (buf, pool) {
        (Buf::Aligned(a), Some(pool)) => a.fixed_index(pool),
        _ => None,
    };
    Some(match &mut op.kind {
        Kind::Read { buf, pos, offset } => {
            let index = fixed(buf);
            let s = &mut buf.as_mut_slice()?[*pos..];
            let (ptr, len) = (s.as_mut_ptr(), s.len().min(MAX_CHUNK) as u32);
            match index {
                Some(i) => opcode::ReadFixed::new(fd, ptr, len, i)
                    .offset(*offset)
                    .build(),
                None => opcode::Read::new(fd, ptr, len).offset(*offset).build(),
            }
        }
        Kind::Write {
            buf,
            pos,
            offset,
            dsync,
        } => {
            let s = &buf.as_slice()[*pos..];
            let (ptr, len) = (s.as_ptr(), s.len().min(MAX_CHUNK) as u32);
            let flags = if *dsync { libc::RWF_DSYNC } else { 0 };
            match fixed(buf) {
                Some(i) => opcode::WriteFixed::new(fd, ptr, len, i)
                    .offset(*offset)
                    .rw_flags(flags)
                    .build(),
                None => opcode::Write::new(fd, ptr, len)
                    .offset(*offset)
                    .rw_flags(flags)
                    .build(),
            }
        }
        Kind::Fdatasync => opcode::Fsync::new(fd)
            .flags(types::FsyncFlags::DATASYNC)
            .build(),
        Kind::Fallocate { mode, offset, len } => opcode::Fallocate::new(fd, *len)
            .offset(*offset)
            .mode(*mode)
            .build(),
    })
}
