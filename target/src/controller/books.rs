//! A queue's books, kept the same on every transport: the submission queue head, the command
//! identifiers in flight, the Asynchronous Event Requests parked on them, the rule for a queue
//! that is fuller than it can be, and the completion queue entry every answer goes out in.
//!
//! Sans-IO: a transport tells the books what arrived and what was answered and asks them for
//! the completion; they never touch a socket or a queue pair, so the rules are tested here,
//! once, in memory.

use std::future::Future;
use std::sync::atomic::Ordering::Relaxed;

use fabrik_proto::Cqe;

use super::parked::ParkedEvents;
use super::queue::{Queue, Response};

/// Every CID in flight, one bit each: a fixed 8 KiB, nothing allocated per command.
struct CidSet(Box<[u64; 1024]>);

impl CidSet {
    fn new() -> CidSet {
        CidSet(Box::new([0; 1024]))
    }
    /// Adds `cid`; false if it was present.
    fn insert(&mut self, cid: u16) -> bool {
        let (word, bit) = (usize::from(cid >> 6), 1u64 << (cid & 63));
        let fresh = self.0[word] & bit == 0;
        self.0[word] |= bit;
        fresh
    }
    /// Removes `cid`; false if it was absent.
    fn remove(&mut self, cid: u16) -> bool {
        let (word, bit) = (usize::from(cid >> 6), 1u64 << (cid & 63));
        let present = self.0[word] & bit != 0;
        self.0[word] &= !bit;
        present
    }
}

/// What the books make of a command that arrived.
#[derive(Debug, PartialEq, Eq)]
pub enum Arrival {
    /// In the books: run it, and answer it exactly once (`answered`).
    New,
    /// Its CID was a parked AER's: the AER is retired (never answered: the host has finished
    /// it already, see `parked`), and the CID is this command's now.
    RetiredEvent,
    /// Another command in flight holds the CID. Answer this one with CID_CONFLICT (not
    /// `answered`: the other command keeps the CID).
    CidConflict,
}

/// The host has more commands outstanding than its queue holds: it broke the queue-size
/// contract, and the transport ends the connection (NVMe/TCP: a C2HTermReq).
#[derive(Debug, PartialEq, Eq)]
pub struct QueueOverrun {
    pub entries: u32,
}

pub struct QueueBooks {
    /// Commands fetched from the host, modulo nothing: SQHD is this modulo the queue size.
    sq_head: u32,
    in_flight: CidSet,
    outstanding: u32,
    parked: ParkedEvents,
    /// Queue size and ID before Connect binds the queue (the transport's own view of them:
    /// NVMe/RDMA's CM request, NVMe/TCP's admin queue defaults).
    unbound_entries: u32,
    unbound_qid: u16,
}

impl QueueBooks {
    pub fn new(unbound_qid: u16, unbound_entries: u32) -> QueueBooks {
        QueueBooks {
            sq_head: 0,
            in_flight: CidSet::new(),
            outstanding: 0,
            parked: ParkedEvents::default(),
            unbound_entries,
            unbound_qid,
        }
    }

    /// Entries of the queue: SQSIZE + 1 from Connect once bound.
    fn entries(&self, queue: &Queue) -> u32 {
        queue.binding().map_or(self.unbound_entries, |b| b.entries)
    }

    /// A command with `cid` arrived (was fetched from the submission queue).
    ///
    /// A host may have at most `entries - 1` commands outstanding (a full queue keeps one
    /// entry empty); one that has `entries` already and sends more is overrunning the queue.
    /// A command that takes a retired AER's place is not an extra one.
    pub fn arrived(&mut self, queue: &Queue, cid: u16) -> Result<Arrival, QueueOverrun> {
        self.sq_head = self.sq_head.wrapping_add(1);
        if !self.in_flight.insert(cid) {
            return Ok(if self.parked.retire(cid) {
                Arrival::RetiredEvent
            } else {
                Arrival::CidConflict
            });
        }
        let entries = self.entries(queue);
        if self.outstanding >= entries {
            self.in_flight.remove(cid);
            return Err(QueueOverrun { entries });
        }
        self.outstanding += 1;
        queue.in_flight.store(self.outstanding, Relaxed);
        Ok(Arrival::New)
    }

    /// The command `cid` (`Arrival::New` or `RetiredEvent`) is answered: its CID is free.
    pub fn answered(&mut self, queue: &Queue, cid: u16) {
        if self.in_flight.remove(cid) {
            self.outstanding -= 1;
            queue.in_flight.store(self.outstanding, Relaxed);
        }
        self.parked.answered(cid);
    }

    /// Parks the AER `cid` until an event: the future yields its answer, or None if a new
    /// command retired it (then it must not be answered).
    pub fn park<F: Future>(
        &mut self,
        cid: u16,
        request: F,
    ) -> impl Future<Output = Option<F::Output>> {
        self.parked.park(cid, request)
    }

    /// AERs parked: they wait for events, not for the backend, so a closing queue does not
    /// wait for them.
    pub fn parked(&self) -> usize {
        self.parked.len()
    }

    /// Commands in the books (parked AERs included).
    pub fn outstanding(&self) -> u32 {
        self.outstanding
    }

    /// The queue ends: parked AERs are retired, their futures yield None at once.
    pub fn retire_parked(&mut self) {
        self.parked.retire_all();
    }

    /// The completion for `cid` answering `resp`. SQHD is the head as of now (every command
    /// fetched so far), or 0xFFFF where the host disabled SQ flow control.
    pub fn completion(&self, queue: &Queue, cid: u16, resp: &Response) -> Cqe {
        let binding = queue.binding();
        let sqhd = match binding {
            Some(b) if b.sq_flow_disabled => 0xffff,
            _ => (self.sq_head % self.entries(queue).max(1)) as u16,
        };
        Cqe {
            result: resp.result,
            sqhd,
            sqid: binding.map_or(self.unbound_qid, |b| b.qid),
            cid,
            status: resp.status,
        }
    }
}
