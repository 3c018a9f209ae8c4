//! A completion queue with its completion channel: one queue pair's own (the host's queues), or
//! one that many queue pairs of a device share (the target's, one per reactor and device, as
//! nvmet-rdma takes its CQs from a pool per completion vector).

use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use rdma_mummy_sys as sys;
use tokio::io::unix::AsyncFd;

use crate::qp::{query_limits, QueuePair};
use crate::util::{check, os_err, set_nonblocking, when_readable, Fd, Raw};

/// Completion events taken from the channel before they are acknowledged in one call.
const ACK_BATCH: u32 = 64;

pub struct CompletionQueue {
    channel: *mut sys::ibv_comp_channel,
    cq: *mut sys::ibv_cq,
    entries: u32,
    /// The channel's fd, registered with the runtime of the first `wait` (see there).
    fd: OnceLock<AsyncFd<Fd>>,
    unacked: AtomicU32,
}

// SAFETY: CQs and completion channels are thread-safe verbs objects; `wait` is called by one
// task at a time (the queue pair's, or the shared queue's poller).
unsafe impl Send for CompletionQueue {}
// SAFETY: as above; shared references poll, arm and wait, which libibverbs serializes.
unsafe impl Sync for CompletionQueue {}

/// A completion, reduced to what the queues need.
#[derive(Clone, Copy, Debug, Default)]
pub struct Completion {
    pub wr_id: u64,
    pub ok: bool,
    pub status: u32,
    pub byte_len: u32,
    /// The queue pair it belongs to: how a shared completion queue's completions are routed.
    pub qp_num: u32,
}

impl CompletionQueue {
    /// A completion queue of up to `entries` entries (fewer where the device allows fewer:
    /// see `entries`) on the device of `qp`'s cm_id (before `QueuePair::setup`), armed.
    pub fn for_device_of(qp: &QueuePair, entries: u32) -> io::Result<CompletionQueue> {
        let id = qp.id();
        // SAFETY: a valid id bound to its device, whose context lives as long as the device
        // is open (past this queue: see `create`).
        unsafe {
            let verbs = (*id.0).verbs;
            let limits = query_limits(verbs)?;
            CompletionQueue::create(verbs, entries.min(limits.max_cqe))
        }
    }

    /// # Safety
    /// `verbs` is a valid device context that outlives the queue.
    pub(crate) unsafe fn create(
        verbs: *mut sys::ibv_context,
        entries: u32,
    ) -> io::Result<CompletionQueue> {
        let mut cq = CompletionQueue {
            channel: sys::ibv_create_comp_channel(verbs),
            cq: std::ptr::null_mut(),
            entries,
            fd: OnceLock::new(),
            unacked: AtomicU32::new(0),
        };
        if cq.channel.is_null() {
            return Err(os_err("ibv_create_comp_channel"));
        }
        set_nonblocking((*cq.channel).fd)?;
        cq.cq = sys::ibv_create_cq(verbs, entries as i32, std::ptr::null_mut(), cq.channel, 0);
        if cq.cq.is_null() {
            return Err(os_err("ibv_create_cq"));
        }
        cq.arm()?;
        Ok(cq)
    }

    /// How many completions it holds at most: the queue pairs on it must not have more work
    /// requests that can complete outstanding, or it overruns and every one of them fails.
    pub fn entries(&self) -> u32 {
        self.entries
    }

    pub(crate) fn raw(&self) -> *mut sys::ibv_cq {
        self.cq
    }

    /// Takes up to `wcs.len()` completions (32 at most per call).
    pub fn poll(&self, wcs: &mut [Completion]) -> io::Result<usize> {
        // SAFETY: all-zero is a valid ibv_wc.
        let mut raw: [sys::ibv_wc; 32] = unsafe { std::mem::zeroed() };
        let want = wcs.len().min(raw.len()) as i32;
        // SAFETY: valid CQ; raw holds `want` entries.
        let n = unsafe { sys::ibv_poll_cq(self.cq, want, raw.as_mut_ptr()) };
        if n < 0 {
            return Err(io::Error::other("ibv_poll_cq failed"));
        }
        for (w, r) in wcs.iter_mut().zip(&raw[..n as usize]) {
            *w = Completion {
                wr_id: r.wr_id,
                ok: r.status == sys::ibv_wc_status::IBV_WC_SUCCESS,
                status: r.status,
                byte_len: r.byte_len,
                qp_num: r.qp_num,
            };
        }
        Ok(n as usize)
    }

    /// Re-arms completion notification (then poll once more: completions may have arrived
    /// before the arming).
    pub fn arm(&self) -> io::Result<()> {
        // SAFETY: valid CQ.
        check(
            unsafe { sys::ibv_req_notify_cq(self.cq, 0) },
            "ibv_req_notify_cq",
        )
    }

    /// Waits for the completion channel to signal and consumes the event.
    ///
    /// The channel's fd is registered with the runtime of the first wait, not at creation: a
    /// target makes a queue on its control thread and serves it on a reactor, whose own event
    /// loop must be the one that watches the queue (a wake-up through another thread's epoll
    /// is the hand-off the reactors exist to avoid).
    pub async fn wait(&self) -> io::Result<()> {
        let fd = match self.fd.get() {
            Some(fd) => fd,
            None => {
                // SAFETY: the channel and its fd stay open until Drop, which deregisters the
                // fd first.
                let fd = unsafe { AsyncFd::register(Fd((*self.channel).fd)) }?;
                // One waiter at a time (see the Sync impl): nobody set it meanwhile.
                let _ = self.fd.set(fd);
                self.fd.get().expect("just set")
            }
        };
        let channel = Raw(self.channel);
        when_readable(fd, || {
            let mut cq = std::ptr::null_mut();
            let mut ctx = std::ptr::null_mut();
            // SAFETY: valid channel with a non-blocking fd; out pointers to locals.
            unsafe { sys::ibv_get_cq_event(channel.get(), &mut cq, &mut ctx) }
        })
        .await?;
        let unacked = self.unacked.fetch_add(1, Ordering::Relaxed) + 1;
        if unacked >= ACK_BATCH {
            self.unacked.fetch_sub(unacked, Ordering::Relaxed);
            // SAFETY: the events came from this CQ.
            unsafe { sys::ibv_ack_cq_events(self.cq, unacked) };
        }
        Ok(())
    }
}

impl Drop for CompletionQueue {
    fn drop(&mut self) {
        // SAFETY: ours, destroyed once; the queue pairs using the CQ are gone (each holds an
        // Arc of it, or owns it and destroys its QP first). Every event is acknowledged before
        // the CQ goes (ibv_destroy_cq waits for that), and the CQ before its channel.
        unsafe {
            if !self.cq.is_null() {
                let unacked = *self.unacked.get_mut();
                if unacked > 0 {
                    sys::ibv_ack_cq_events(self.cq, unacked);
                }
                sys::ibv_destroy_cq(self.cq);
            }
            self.fd.take();
            if !self.channel.is_null() {
                sys::ibv_destroy_comp_channel(self.channel);
            }
        }
    }
}
