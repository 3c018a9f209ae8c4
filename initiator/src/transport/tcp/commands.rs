//! A queue's commands by command ID: `depth` slots made when the queue is set up, each holding
//! its command while the target has it and then its answer until the caller takes it. The
//! caller's future waits on the slot (its waker is kept there), so a command allocates nothing:
//! a one-shot channel per command cost a heap allocation and its free, five atomic operations
//! and about 400 instructions of each 4K read (callgrind, `fabrik bench` QD32).
//!
//! A CID is a slot's index with the slot's generation above it (as the Linux host's tags): a
//! slot used again gets another CID, so a late answer to a command the queue gave up on does not
//! match the next one in that slot.

use std::task::{Poll, Waker};

use super::{Completion, InFlight};
use crate::error::HostError;
use crate::transport::{checked, CompletionQueue};

pub(super) struct Commands {
    slots: Vec<Slot>,
    /// Indices of free slots, the most recently freed last (its memory is likely in cache).
    free: Vec<u16>,
    /// Slots whose command the target has (not yet answered).
    in_flight: usize,
    /// Bits of a CID that hold the slot's index; the rest hold its generation.
    index_bits: u32,
    /// The queue's, to name a command in a failed status posted to a completion queue.
    qid: u16,
}

/// What became of an answer (`Commands::answer`).
#[derive(Debug)]
pub(super) enum Answered {
    /// No command is in flight under its CID.
    Unknown,
    /// The command is settled: `delivery` is for once the queue's lock is let go; `freed` when
    /// its slot is free again (its caller had stopped waiting, or the answer went to a
    /// completion queue).
    Settled { delivery: Delivery, freed: bool },
}

/// What to do with a settled command's answer, outside the queue's lock.
#[must_use]
#[derive(Debug)]
pub(super) enum Delivery {
    Nothing,
    /// Its caller's future waits: wake it to take the answer from the slot.
    Wake(Waker),
    /// The answer goes to a completion queue under its tag.
    Post(CompletionQueue, u64, Result<Completion, HostError>),
}

impl Delivery {
    pub(super) fn deliver(self) {
        match self {
            Delivery::Nothing => {}
            Delivery::Wake(waker) => waker.wake(),
            Delivery::Post(queue, tag, result) => queue.post(tag, result),
        }
    }
}

struct Slot {
    generation: u16,
    state: SlotState,
}

enum SlotState {
    Free,
    /// Sent; the target's answer has not come.
    InFlight {
        command: InFlight,
        waiter: Waiter,
    },
    /// Answered (or failed with the queue); its caller takes the result.
    Done(Result<Completion, HostError>),
}

/// Who waits for a command's answer.
#[derive(Default)]
pub(super) enum Waiter {
    /// The caller's future has not looked yet.
    #[default]
    None,
    Waker(Waker),
    /// A completion queue, under this tag (`TcpQueue::start`): the slot frees with the answer.
    Queue(CompletionQueue, u64),
    /// The caller stopped waiting: the slot is freed when the answer comes.
    Gone,
}

impl Commands {
    pub(super) fn new(depth: usize, qid: u16) -> Commands {
        let depth = depth.clamp(1, 1 << 16);
        // The fewest bits that index every slot; the rest count generations.
        let index_bits = usize::BITS - (depth - 1).leading_zeros();
        Commands {
            slots: (0..depth)
                .map(|_| Slot {
                    generation: 0,
                    state: SlotState::Free,
                })
                .collect(),
            free: (0..depth as u32).rev().map(|i| i as u16).collect(),
            in_flight: 0,
            index_bits,
            qid,
        }
    }

    /// Commands the target has and has not answered.
    pub(super) fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Whether every slot is taken (by a command in flight or an answer not yet taken).
    pub(super) fn full(&self) -> bool {
        self.free.is_empty()
    }

    /// Takes a free slot for `command`, answered to `waiter`, and gives its CID (None: all are
    /// taken). `command.sqe` gets the CID too.
    pub(super) fn insert(&mut self, mut command: InFlight, waiter: Waiter) -> Option<u16> {
        let index = self.free.pop()?;
        let mask = self.generation_mask();
        let generation = self.slots[index as usize].generation.wrapping_add(1) & mask;
        let cid = self.cid(index, generation);
        command.sqe.cid = cid;
        let slot = &mut self.slots[index as usize];
        slot.generation = generation;
        slot.state = SlotState::InFlight { command, waiter };
        self.in_flight += 1;
        Some(cid)
    }

    /// The command in flight under `cid`.
    pub(super) fn get_mut(&mut self, cid: u16) -> Option<&mut InFlight> {
        match &mut self.slot_mut(cid)?.state {
            SlotState::InFlight { command, .. } => Some(command),
            _ => None,
        }
    }

    /// Commands in flight, to look for one past its deadline.
    pub(super) fn commands(&self) -> impl Iterator<Item = &InFlight> {
        self.slots.iter().filter_map(|s| match &s.state {
            SlotState::InFlight { command, .. } => Some(command),
            _ => None,
        })
    }

    /// Ends the command in flight under `cid` with what `answer` makes of it.
    pub(super) fn answer(
        &mut self,
        cid: u16,
        answer: impl FnOnce(&mut InFlight) -> Result<Completion, HostError>,
    ) -> Answered {
        match self.slot_mut(cid) {
            Some(_) => self.settle(cid & self.index_mask(), answer),
            None => Answered::Unknown,
        }
    }

    /// Fails every command in flight with `err`; gives what to deliver.
    pub(super) fn fail_all(&mut self, err: &HostError) -> Vec<Delivery> {
        (0..self.slots.len() as u16)
            .filter_map(|index| match self.settle(index, |_| Err(err.clone())) {
                Answered::Settled { delivery, .. } => Some(delivery),
                Answered::Unknown => None,
            })
            .collect()
    }

    /// Settles the command in flight in slot `index` (Unknown: none is): its result (made in
    /// place, the command not moved out first) is kept for its caller's future, or posted to its
    /// completion queue, or dropped if its caller is gone.
    fn settle(
        &mut self,
        index: u16,
        result: impl FnOnce(&mut InFlight) -> Result<Completion, HostError>,
    ) -> Answered {
        let qid = self.qid;
        let slot = &mut self.slots[index as usize];
        let SlotState::InFlight { command, waiter } = &mut slot.state else {
            return Answered::Unknown;
        };
        self.in_flight -= 1;
        let (delivery, kept) = match std::mem::take(waiter) {
            Waiter::Gone => (Delivery::Nothing, None),
            Waiter::Queue(queue, tag) => {
                let answer = result(command);
                let answer = checked(qid, &command.sqe, answer);
                (Delivery::Post(queue, tag, answer), None)
            }
            Waiter::Waker(w) => (Delivery::Wake(w), Some(result(command))),
            Waiter::None => (Delivery::Nothing, Some(result(command))),
        };
        let freed = kept.is_none();
        match kept {
            Some(result) => slot.state = SlotState::Done(result),
            None => {
                slot.state = SlotState::Free;
                self.free.push(index);
            }
        }
        Answered::Settled { delivery, freed }
    }

    /// The caller of `cid` looks for its answer: taken (and the slot freed) if it came, else
    /// `waker` is kept to be woken when it does. None: no command under `cid` (a bug).
    pub(super) fn take(
        &mut self,
        cid: u16,
        waker: &Waker,
    ) -> Option<Poll<Result<Completion, HostError>>> {
        let mask = self.index_mask();
        let slot = self.slot_mut(cid)?;
        match &mut slot.state {
            SlotState::Free => None,
            SlotState::InFlight { waiter, .. } => {
                match waiter {
                    Waiter::Waker(w) if w.will_wake(waker) => {}
                    _ => *waiter = Waiter::Waker(waker.clone()),
                }
                Some(Poll::Pending)
            }
            SlotState::Done(_) => {
                let SlotState::Done(result) = std::mem::replace(&mut slot.state, SlotState::Free)
                else {
                    unreachable!("matched above")
                };
                self.free.push(cid & mask);
                Some(Poll::Ready(result))
            }
        }
    }

    /// The caller of `cid` stops waiting: its slot is freed now if answered, else when the
    /// answer comes (the CID stays taken until then). True if a slot was freed.
    pub(super) fn abandon(&mut self, cid: u16) -> bool {
        let mask = self.index_mask();
        let Some(slot) = self.slot_mut(cid) else {
            return false;
        };
        match &mut slot.state {
            SlotState::Free => false,
            SlotState::InFlight { waiter, .. } => {
                *waiter = Waiter::Gone;
                false
            }
            SlotState::Done(_) => {
                slot.state = SlotState::Free;
                self.free.push(cid & mask);
                true
            }
        }
    }

    fn slot_mut(&mut self, cid: u16) -> Option<&mut Slot> {
        let (index, generation) = (cid & self.index_mask(), self.generation_of(cid));
        self.slots
            .get_mut(index as usize)
            .filter(|s| s.generation == generation)
    }

    // In u32, so that at 16 index bits the generation is simply empty.
    fn cid(&self, index: u16, generation: u16) -> u16 {
        ((generation as u32) << self.index_bits | index as u32) as u16
    }

    fn generation_of(&self, cid: u16) -> u16 {
        (cid as u32 >> self.index_bits) as u16
    }

    fn index_mask(&self) -> u16 {
        ((1u32 << self.index_bits) - 1) as u16
    }

    fn generation_mask(&self) -> u16 {
        (u16::MAX as u32 >> self.index_bits) as u16
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    use bytes::Bytes;
    use fabrik_proto::{Cqe, Sqe, Status};

    use super::*;
    use crate::transport::tcp::data_in::DataIn;

    fn command() -> InFlight {
        InFlight {
            sqe: Sqe::default(),
            issued: None,
            data_out: Bytes::new(),
            requested: 0,
            data_in: DataIn::Empty,
            data_in_len: 0,
            digest_error: false,
        }
    }

    fn ok(command: &mut InFlight) -> Result<Completion, HostError> {
        Ok(Completion {
            cqe: Cqe::new(command.sqe.cid, Status::SUCCESS),
            data: Bytes::new(),
        })
    }

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn waker() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        (count.clone(), Waker::from(count))
    }

    /// Whether the answer settled the command and freed its slot.
    fn settled(answered: Answered) -> (Delivery, bool) {
        match answered {
            Answered::Settled { delivery, freed } => (delivery, freed),
            Answered::Unknown => panic!("no command under that CID"),
        }
    }

    #[test]
    fn a_slot_used_again_gets_another_cid() {
        let mut commands = Commands::new(2, 1);
        let (_, w) = waker();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..64 {
            let cid = commands.insert(command(), Waiter::None).unwrap();
            assert!(seen.insert(cid), "CID {cid:#x} twice");
            assert!(!settled(commands.answer(cid, ok)).1, "kept for its caller");
            assert!(matches!(commands.take(cid, &w), Some(Poll::Ready(Ok(_)))));
            // The old CID finds nothing now.
            assert!(matches!(commands.answer(cid, ok), Answered::Unknown));
        }
    }

    #[test]
    fn depth_slots_and_no_more() {
        let mut commands = Commands::new(3, 1);
        let cids: Vec<u16> = (0..3)
            .map(|_| commands.insert(command(), Waiter::None).unwrap())
            .collect();
        assert!(commands.full());
        assert!(commands.insert(command(), Waiter::None).is_none());
        assert_eq!(commands.in_flight(), 3);
        // An answer not yet taken still holds its slot.
        let _ = commands.answer(cids[0], ok);
        assert_eq!(commands.in_flight(), 2);
        assert!(commands.full());
        let (_, w) = waker();
        assert!(matches!(
            commands.take(cids[0], &w),
            Some(Poll::Ready(Ok(_)))
        ));
        assert!(!commands.full());
    }

    #[test]
    fn the_caller_is_woken_by_its_answer_and_by_a_failure() {
        let mut commands = Commands::new(4, 1);
        let (count, w) = waker();
        let a = commands.insert(command(), Waiter::None).unwrap();
        let b = commands.insert(command(), Waiter::None).unwrap();
        assert!(matches!(commands.take(a, &w), Some(Poll::Pending)));
        assert!(matches!(commands.take(b, &w), Some(Poll::Pending)));
        settled(commands.answer(a, ok)).0.deliver();
        assert_eq!(count.0.load(Ordering::Relaxed), 1);
        let err = HostError::ConnectionClosed { qid: 1 };
        commands
            .fail_all(&err)
            .into_iter()
            .for_each(Delivery::deliver);
        assert_eq!(count.0.load(Ordering::Relaxed), 2);
        assert!(matches!(commands.take(a, &w), Some(Poll::Ready(Ok(_)))));
        assert!(matches!(
            commands.take(b, &w),
            Some(Poll::Ready(Err(HostError::ConnectionClosed { .. })))
        ));
        assert_eq!(commands.in_flight(), 0);
        assert!(!commands.full());
    }

    #[test]
    fn an_abandoned_command_frees_its_slot_when_answered() {
        let mut commands = Commands::new(1, 1);
        let cid = commands.insert(command(), Waiter::None).unwrap();
        assert!(
            !commands.abandon(cid),
            "still in flight: the CID stays taken"
        );
        assert!(commands.full());
        let (delivery, freed) = settled(commands.answer(cid, |_| unreachable!("nobody waits")));
        assert!(freed && matches!(delivery, Delivery::Nothing));
        assert!(!commands.full());
        // Answered first, then abandoned: freed at once.
        let cid = commands.insert(command(), Waiter::None).unwrap();
        let _ = commands.answer(cid, ok);
        assert!(commands.abandon(cid));
        assert!(!commands.full());
    }

    #[test]
    fn a_tagged_answer_frees_its_slot_and_goes_to_its_queue_checked() {
        let mut commands = Commands::new(3, 3);
        let cq = CompletionQueue::new();
        let a = commands
            .insert(command(), Waiter::Queue(cq.clone(), 10))
            .unwrap();
        let b = commands
            .insert(command(), Waiter::Queue(cq.clone(), 11))
            .unwrap();
        commands
            .insert(command(), Waiter::Queue(cq.clone(), 12))
            .unwrap();
        assert!(commands.full());
        let (delivery, freed) = settled(commands.answer(a, ok));
        assert!(freed, "the slot is free with the answer");
        delivery.deliver();
        // A failed status is an error naming the command, as from the host queue.
        let failed = |command: &mut InFlight| {
            Ok(Completion {
                cqe: Cqe::new(command.sqe.cid, Status::new(0, 0x80)),
                data: Bytes::new(),
            })
        };
        settled(commands.answer(b, failed)).0.deliver();
        let err = HostError::ConnectionClosed { qid: 3 };
        commands
            .fail_all(&err)
            .into_iter()
            .for_each(Delivery::deliver);
        assert_eq!(commands.in_flight(), 0);
        let mut got = Vec::new();
        let mut cx = std::task::Context::from_waker(Waker::noop());
        assert!(cq.poll_take(&mut cx, &mut got).is_ready());
        let tags: Vec<u64> = got.iter().map(|t| t.tag).collect();
        assert_eq!(tags, [10, 11, 12]);
        assert!(got[0].result.is_ok());
        assert!(matches!(
            &got[1].result,
            Err(HostError::Status { qid: 3, status, .. }) if status.sc() == 0x80
        ));
        assert!(matches!(
            got[2].result,
            Err(HostError::ConnectionClosed { .. })
        ));
        assert!(!commands.full());
    }

    #[test]
    fn every_cid_bit_is_index_at_the_largest_depth() {
        let mut commands = Commands::new(1 << 16, 1);
        let (_, w) = waker();
        let a = commands.insert(command(), Waiter::None).unwrap();
        let b = commands.insert(command(), Waiter::None).unwrap();
        assert_eq!((a, b), (0, 1), "CID = index");
        let _ = commands.answer(a, ok);
        assert!(matches!(commands.take(a, &w), Some(Poll::Ready(Ok(_)))));
        // No bits are left for a generation: the slot's CID is the same again.
        assert_eq!(commands.insert(command(), Waiter::None), Some(0));
    }
}
