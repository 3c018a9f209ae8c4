//! Completion queues shared by the queue pairs of one device on one reactor, as nvmet-rdma takes
//! its CQs from a pool per completion vector and SPDK polls one per poll group and device. A
//! reactor with many queue pairs then sleeps on one completion channel per device, and a wake-up
//! (a system call to read the event and one to re-arm) serves every queue pair that completed
//! something meanwhile, instead of one of each per queue pair.
//!
//! A poller task on the reactor polls the shared queue and routes each completion to its queue
//! pair's inbox by QP number; the queue pair's own task takes them from there, on the same
//! thread. A queue pair is routed before it is accepted, so its first completion finds its
//! inbox, and it is drained (`QueuePair::post_drain`) before it goes, so no completion of it is
//! left in the shared queue when its QP number can be given to another.
//!
//! Room: a shared queue must never hold more completions than its entries (an overrun fails
//! every queue pair on it). Each queue pair reserves its send-queue depth (a flushed work
//! request completes even when unsignaled), and each completion queue reserves once the shared
//! receive queue's depth (receives complete from there, whichever queue pair took them). A
//! reactor and device start another completion queue when the first is full.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use fabrik_rdma::{self as verbs, Completion, CompletionQueue, QueuePair, SharedRecv};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::reactor::Seat;

/// Entries of a shared completion queue (fewer where the device allows fewer): the SRQ's
/// receives and the send queues of about sixty I/O queue pairs of 128 entries.
const CQ_ENTRIES: u32 = 32 * 1024;

/// Batches of completions (32 each) the poller routes before the reactor's other tasks get a
/// turn, as a queue pair takes at most as many (`queue::MAX_POLLS_PER_TURN`).
const MAX_POLLS_PER_TURN: usize = 4;

/// Where a queue pair's completions arrive, in the order its completion queue gave them.
type Inbox = UnboundedReceiver<Completion>;

enum RouteChange {
    Add(u32, UnboundedSender<Completion>),
    Remove(u32),
}

/// The shared receive queue and the completion queues of one device on one reactor.
pub struct DeviceQueues {
    pub srq: Arc<SharedRecv>,
    cqs: Vec<SharedCq>,
}

struct SharedCq {
    cq: Arc<CompletionQueue>,
    room: Arc<Room>,
    routes: UnboundedSender<RouteChange>,
    /// Ends its poller when the listener lets go of it (after every queue pair on it ended).
    _poller: DropGuard,
}

impl DeviceQueues {
    pub fn new(srq: Arc<SharedRecv>) -> DeviceQueues {
        DeviceQueues {
            srq,
            cqs: Vec::new(),
        }
    }

    /// Room for a queue pair of `send_wr` send-queue entries on a shared completion queue of
    /// the device of `qp` (before its setup), on `seat`'s reactor: on one that has room, else
    /// on a new one whose poller starts there.
    pub fn place(&mut self, qp: &QueuePair, send_wr: u32, seat: &Seat) -> io::Result<CqPlace> {
        for shared in &self.cqs {
            if let Some(place) = shared.reserve(send_wr) {
                return Ok(place);
            }
        }
        let cq = Arc::new(CompletionQueue::for_device_of(qp, CQ_ENTRIES)?);
        let receives = self.srq.count();
        if receives + send_wr > cq.entries() {
            return Err(io::Error::other(format!(
                "a completion queue of {} entries has no room for {receives} receives and {send_wr} sends",
                cq.entries()
            )));
        }
        let (routes, changes) = unbounded_channel();
        let stop = CancellationToken::new();
        seat.spawn_beside(route_completions(
            cq.clone(),
            self.srq.clone(),
            changes,
            stop.clone(),
        ));
        tracing::info!(
            entries = cq.entries(),
            reactor = seat.index(),
            "shared completion queue created for an RDMA device"
        );
        let room = Room::new(cq.entries());
        assert!(room.take(receives), "room checked above");
        let shared = SharedCq {
            cq,
            room: Arc::new(room),
            routes,
            _poller: stop.drop_guard(),
        };
        let place = shared.reserve(send_wr).expect("room checked above");
        self.cqs.push(shared);
        Ok(place)
    }
}

impl SharedCq {
    fn reserve(&self, send_wr: u32) -> Option<CqPlace> {
        self.room.take(send_wr).then(|| CqPlace {
            cq: self.cq.clone(),
            routes: self.routes.clone(),
            room: self.room.clone(),
            send_wr,
            qp_num: None,
        })
    }
}

/// The entries of a completion queue its users may fill: taken on the listener's thread when a
/// queue pair is accepted, given back on the reactor's when it is gone.
struct Room {
    entries: u32,
    taken: AtomicU32,
}

impl Room {
    fn new(entries: u32) -> Room {
        Room {
            entries,
            taken: AtomicU32::new(0),
        }
    }

    /// Takes `n` entries if they are free.
    fn take(&self, n: u32) -> bool {
        self.taken
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                t.checked_add(n).filter(|&t| t <= self.entries)
            })
            .is_ok()
    }

    fn give(&self, n: u32) {
        self.taken.fetch_sub(n, Ordering::AcqRel);
    }
}

/// A queue pair's room on a shared completion queue, given back when it drops (after the queue
/// pair was drained), with its route.
pub struct CqPlace {
    pub cq: Arc<CompletionQueue>,
    routes: UnboundedSender<RouteChange>,
    room: Arc<Room>,
    send_wr: u32,
    qp_num: Option<u32>,
}

impl CqPlace {
    /// From now on, the completions of queue pair `qp_num` go to the inbox of the value
    /// returned. Before the queue pair is accepted: it completes nothing earlier.
    pub fn route(mut self, qp_num: u32) -> Routed {
        let (tx, inbox) = unbounded_channel();
        // A poller that ended closes the inbox (the sender drops here): the queue then ends.
        let _ = self.routes.send(RouteChange::Add(qp_num, tx));
        self.qp_num = Some(qp_num);
        Routed {
            inbox,
            _place: self,
        }
    }
}

/// A queue pair's completions on a shared completion queue: its inbox, and its room there.
pub struct Routed {
    pub inbox: Inbox,
    _place: CqPlace,
}

impl Drop for CqPlace {
    fn drop(&mut self) {
        if let Some(qp_num) = self.qp_num {
            let _ = self.routes.send(RouteChange::Remove(qp_num));
        }
        self.room.give(self.send_wr);
    }
}

/// The poller of a shared completion queue, on its reactor: routes each completion to its queue
/// pair's inbox, with the same adaptive policy as a queue pair's own polling had (it keeps
/// polling for `reactor::poll_window` after its last completion, then arms the channel and
/// sleeps). A receive completion nobody takes (its queue pair is gone) gives its buffer back
/// to the SRQ.
async fn route_completions(
    cq: Arc<CompletionQueue>,
    srq: Arc<SharedRecv>,
    mut changes: UnboundedReceiver<RouteChange>,
    stop: CancellationToken,
) {
    let mut routes = Routes::default();
    let mut wcs = [Completion::default(); 32];
    let poll_window = crate::reactor::poll_window();
    let mut last_work = std::time::Instant::now();
    loop {
        let mut worked = false;
        for _ in 0..MAX_POLLS_PER_TURN {
            let n = match cq.poll(&mut wcs) {
                Ok(n) => n,
                Err(e) => {
                    // Its queue pairs see their inboxes close and end.
                    tracing::error!("shared completion queue: {e}");
                    return;
                }
            };
            if n == 0 {
                break;
            }
            worked = true;
            // Read after the poll: a queue pair's route is sent before it is accepted, so
            // before any completion of it could be polled.
            while let Ok(change) = changes.try_recv() {
                routes.apply(change);
            }
            for wc in &wcs[..n] {
                if let Err(wc) = routes.deliver(*wc) {
                    unclaimed(wc, &srq);
                }
            }
            if n < wcs.len() {
                break;
            }
        }
        if stop.is_cancelled() {
            return;
        }
        if worked && !poll_window.is_zero() {
            last_work = std::time::Instant::now();
        }
        if worked || (!poll_window.is_zero() && last_work.elapsed() < poll_window) {
            tokio::task::yield_now().await;
            continue;
        }
        tokio::select! {
            r = cq.wait() => {
                if let Err(e) = r.and_then(|()| cq.arm()) {
                    tracing::error!("shared completion queue: {e}");
                    return;
                }
            }
            Some(change) = changes.recv() => routes.apply(change),
            _ = stop.cancelled() => return,
        }
    }
}

/// Each queue pair's inbox, by QP number.
#[derive(Default)]
struct Routes(HashMap<u32, UnboundedSender<Completion>>);

impl Routes {
    fn apply(&mut self, change: RouteChange) {
        match change {
            RouteChange::Add(qp_num, inbox) => {
                self.0.insert(qp_num, inbox);
            }
            RouteChange::Remove(qp_num) => {
                self.0.remove(&qp_num);
            }
        }
    }

    /// Into its queue pair's inbox; back when there is none (the queue pair is gone).
    fn deliver(&self, wc: Completion) -> Result<(), Completion> {
        match self.0.get(&wc.qp_num) {
            Some(inbox) => inbox.send(wc).map_err(|e| e.0),
            None => Err(wc),
        }
    }
}

/// A completion of a queue pair that is gone: a receive's buffer goes back to the SRQ.
fn unclaimed(wc: Completion, srq: &SharedRecv) {
    if wc.wr_id >> 32 == verbs::SRQ_WR_KIND {
        let _ = srq.post((wc.wr_id & 0xffff_ffff) as usize);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wc(qp_num: u32, wr_id: u64) -> Completion {
        Completion {
            wr_id,
            qp_num,
            ..Completion::default()
        }
    }

    #[test]
    fn completions_go_to_their_queue_pair_until_it_is_removed() {
        let mut routes = Routes::default();
        let (a_tx, mut a) = unbounded_channel();
        let (b_tx, mut b) = unbounded_channel();
        routes.apply(RouteChange::Add(7, a_tx));
        routes.apply(RouteChange::Add(9, b_tx));
        routes.deliver(wc(7, 1)).unwrap();
        routes.deliver(wc(9, 2)).unwrap();
        routes.deliver(wc(7, 3)).unwrap();
        assert_eq!(a.try_recv().unwrap().wr_id, 1);
        assert_eq!(a.try_recv().unwrap().wr_id, 3);
        assert_eq!(b.try_recv().unwrap().wr_id, 2);
        assert!(a.try_recv().is_err() && b.try_recv().is_err());
        // No route: the completion comes back (a receive's buffer then goes to the SRQ).
        assert_eq!(routes.deliver(wc(8, 4)).unwrap_err().wr_id, 4);
        routes.apply(RouteChange::Remove(7));
        assert_eq!(routes.deliver(wc(7, 5)).unwrap_err().wr_id, 5);
        // A QP number given to a new queue pair after the old one was removed.
        let (c_tx, mut c) = unbounded_channel();
        routes.apply(RouteChange::Add(7, c_tx));
        routes.deliver(wc(7, 6)).unwrap();
        assert_eq!(c.try_recv().unwrap().wr_id, 6);
        assert!(a.try_recv().is_err());
        // A queue that dropped its inbox without being removed yet.
        drop(b);
        assert_eq!(routes.deliver(wc(9, 7)).unwrap_err().wr_id, 7);
    }

    #[test]
    fn room_is_taken_up_to_the_entries_and_given_back() {
        let room = Room::new(1024 + 1000);
        assert!(room.take(1024), "the SRQ's receives");
        assert!(room.take(512));
        assert!(!room.take(512), "488 left");
        assert!(room.take(488));
        assert!(!room.take(1));
        room.give(512);
        assert!(room.take(512));
        assert!(!room.take(u32::MAX), "no overflow");
    }
}
