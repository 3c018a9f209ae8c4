//! Pacing one queue pair's work requests for Soft-RoCE, so that its packets arrive in order.
//!
//! Soft-RoCE (rxe) runs RC in software, and its packets can overtake each other: for a user
//! queue pair the requester runs in the thread that rings the doorbell, and once stopped (more
//! than 128 sequence numbers unacknowledged before a packet, RXE_MAX_UNACKED_PSNS) it is resumed
//! from a tasklet on whichever CPU took the acknowledgement; the peer's responder answers an
//! RDMA READ on the CPU its request arrived on. Packets that leave from two CPUs go through two
//! CPUs' receive backlogs. Read from rxe's source (Linux 6.1), not traced.
//!
//! What that cost in the interop guest (Linux 6.1 host, rxe on a veth pair): without pacing, a
//! 128K read at QD16 drew 18-45 sequence-error NAKs per 8 s figure. 128K writes (fabrikd
//! fetches the data by RDMA READ) drew 50-100 READ retries per figure: the completer retries a
//! READ when any later packet (another READ's response, a SEND's acknowledgement) comes before
//! its last response, the host answers each retry with the READ's data again, the receive
//! backlog overflowed (50-100 drops per figure), the host's own requester retried, and rxe 6.1
//! then executes the fast registration that the retry passes over a second time: the host logs
//! `rxe_reg_fast_mr: ... not free`, its queue pair stops, and 16 commands time out after 30 s
//! (in one or two of three write figures). nvmet-rdma in the same boots: no retry, no drop.
//!
//! So on Soft-RoCE:
//! - every work request (a response's WRITE and SEND go together) waits until rxe would send
//!   each of its packets at once: sequence numbers in flight counted as rxe counts them, and
//!   given back when this queue sees the completion that covers them (later than rxe sees the
//!   acknowledgement, so never more than rxe allows); one larger than the whole window goes
//!   when nothing else is in flight;
//! - an RDMA READ goes alone: nothing follows it until it completes, so nothing can overtake its
//!   responses. This removed the READ retries and the drops (none in seven write runs; 128K
//!   writes 0.67x of nvmet-rdma, against 0.43x with the sequence window alone, two READs at a
//!   time as rxe allows, which kept 57-83 retries per figure and stalled once in three).
//!
//! The stall is rarer, not gone: one in four 20 s write runs, after one of the host's own
//! packets came out of order (its requester runs on two CPUs too) and its retry hit the same
//! registration. That is not this queue's to pace: under the interop suite's load (4
//! namespaces, 128K random writes) nvmet-rdma stalls the same way.
//!
//! Hardware keeps its transport on the NIC and gets no pacing (`None`).
//!
//! Earlier versions counted only RDMA WRITE packets (4K reads 1-22 % lower than without a
//! window in five boots, within their noise; see the README). Tried, not kept: splitting a long
//! WRITE into signaled pieces of half the window, to slide it, brought 15-35 NAKs per figure
//! back and no throughput; pinning fabrikd's reactor to one guest CPU kept the write stall.

use std::collections::VecDeque;

use fabrik_rdma::{SendOp, SendWr};

/// Soft-RoCE's vendor ID (IBTA vendor information: none), as `ibv_query_device` reports it.
pub const SOFT_ROCE_VENDOR_ID: u32 = 0xff_ffff;
/// Sequence numbers Soft-RoCE's requester leaves unacknowledged before a packet it sends
/// (RXE_MAX_UNACKED_PSNS).
pub const SOFT_ROCE_UNACKED_PACKETS: u32 = 128;

/// The window for a device at its path MTU: Soft-RoCE's, none for hardware.
pub fn for_device(vendor_id: u32, path_mtu: u32) -> Option<Window> {
    (vendor_id == SOFT_ROCE_VENDOR_ID).then_some(Window {
        packets: SOFT_ROCE_UNACKED_PACKETS,
        mtu: path_mtu.max(256),
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub packets: u32,
    pub mtu: u32,
}

impl Window {
    /// The sequence numbers a work request takes: one per packet, and for an RDMA READ one
    /// per response packet.
    fn packets_of(&self, wr: &SendWr) -> u32 {
        wr.local.1.div_ceil(self.mtu).max(1)
    }

    /// The sequence numbers in flight before the last packet rxe holds to the limit: each
    /// packet of a WRITE or SEND, only the request of a READ.
    fn last_checked(&self, wr: &SendWr) -> u32 {
        match wr.op {
            SendOp::Read { .. } => 0,
            SendOp::Write { .. } | SendOp::Send { .. } => self.packets_of(wr) - 1,
        }
    }

    /// Whether rxe sends every packet of `wr` and `then` at once with `in_flight` before them.
    fn fits(&self, in_flight: u32, wr: &SendWr, then: Option<&SendWr>) -> bool {
        let first = in_flight + self.last_checked(wr);
        let second = then.map_or(0, |t| {
            in_flight + self.packets_of(wr) + self.last_checked(t)
        });
        first.max(second) <= self.packets
    }
}

pub struct InFlight {
    window: Option<Window>,
    /// Sequence numbers posted and not yet known to be acknowledged.
    packets: u32,
    /// Work requests waiting for room, in the order they were made: each with the one chained
    /// after it (a response's SEND after its WRITE) and the packets of both.
    held: VecDeque<(SendWr, Option<SendWr>, u32)>,
    /// An RDMA READ is in flight: nothing follows it until it completes.
    reading: bool,
}

impl InFlight {
    pub fn new(window: Option<Window>) -> InFlight {
        InFlight {
            window,
            packets: 0,
            held: VecDeque::new(),
            reading: false,
        }
    }

    /// Queues a work request and the one chained after it (they go together); what may go
    /// now is appended to `out`. Returns the packets the caller gives back (`acknowledged`)
    /// when the completion that covers them comes.
    pub fn push(&mut self, wr: SendWr, then: Option<SendWr>, out: &mut Vec<SendWr>) -> u32 {
        let Some(window) = self.window else {
            out.push(wr);
            out.extend(then);
            return 0;
        };
        let n = window.packets_of(&wr) + then.as_ref().map_or(0, |t| window.packets_of(t));
        self.held.push_back((wr, then, n));
        self.release(out);
        n
    }

    /// `packets` were acknowledged: work requests waiting for room go to `out`.
    pub fn acknowledged(&mut self, packets: u32, out: &mut Vec<SendWr>) {
        self.packets -= packets;
        self.release(out);
    }

    /// The RDMA READ in flight completed, giving back `packets`: what waited behind it may go.
    pub fn read_completed(&mut self, packets: u32, out: &mut Vec<SendWr>) {
        self.reading = false;
        self.acknowledged(packets, out);
    }

    fn release(&mut self, out: &mut Vec<SendWr>) {
        let Some(window) = self.window else { return };
        while let Some((wr, then, _)) = self.held.front() {
            if self.reading || (self.packets > 0 && !window.fits(self.packets, wr, then.as_ref())) {
                return;
            }
            let (wr, then, n) = self.held.pop_front().expect("front");
            self.reading = matches!(wr.op, SendOp::Read { .. });
            self.packets += n;
            out.push(wr);
            out.extend(then);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(id: u64, len: u32) -> SendWr {
        SendWr {
            wr_id: id,
            op: SendOp::Write {
                remote: 0x1000,
                rkey: 7,
            },
            local: (0, len),
            signaled: false,
        }
    }

    fn send(id: u64) -> SendWr {
        SendWr {
            wr_id: id,
            op: SendOp::Send { invalidate: None },
            local: (0, 16),
            signaled: true,
        }
    }

    fn ids(out: &[SendWr]) -> Vec<u64> {
        out.iter().map(|w| w.wr_id).collect()
    }

    #[test]
    fn hardware_gets_every_work_request_at_once() {
        assert_eq!(for_device(0x02c9, 1024), None); // Mellanox
        let mut f = InFlight::new(for_device(0x02c9, 1024));
        let mut out = Vec::new();
        for id in 0..16 {
            assert_eq!(f.push(write(id, 1 << 20), None, &mut out), 0);
        }
        assert_eq!(ids(&out), (0..16).collect::<Vec<_>>());
    }

    fn read(id: u64, len: u32) -> SendWr {
        SendWr {
            wr_id: id,
            op: SendOp::Read {
                remote: 0x1000,
                rkey: 7,
            },
            local: (0, len),
            signaled: true,
        }
    }

    #[test]
    fn soft_roce_sends_a_long_answer_alone_and_the_next_when_it_is_acknowledged() {
        let window = for_device(SOFT_ROCE_VENDOR_ID, 1024).unwrap();
        assert_eq!(
            window,
            Window {
                packets: 128,
                mtu: 1024
            }
        );
        let mut f = InFlight::new(Some(window));
        let mut out = Vec::new();
        // Two 128K reads' answers: 128 WRITE packets and a SEND each. The first goes (its
        // SEND leaves with 128 before it, as rxe allows), the second waits for it.
        let a = f.push(write(1, 128 << 10), Some(send(2)), &mut out);
        let b = f.push(write(3, 128 << 10), Some(send(4)), &mut out);
        assert_eq!((a, b), (129, 129));
        assert_eq!(ids(&out), vec![1, 2]);
        out.clear();
        // An answer without data is one packet, and waits its turn behind them.
        assert_eq!(f.push(send(5), None, &mut out), 1);
        assert!(out.is_empty());
        f.acknowledged(a, &mut out);
        assert_eq!(ids(&out), vec![3, 4]);
        f.acknowledged(b, &mut out);
        assert_eq!(ids(&out), vec![3, 4, 5]);
        out.clear();
        f.acknowledged(1, &mut out);
        // Nothing in flight: the next goes at once.
        f.push(send(6), None, &mut out);
        assert_eq!(ids(&out), vec![6]);
    }

    #[test]
    fn small_answers_share_the_window() {
        let mut f = InFlight::new(for_device(SOFT_ROCE_VENDOR_ID, 1024));
        let mut out = Vec::new();
        // A 4K answer is 4 WRITE packets and a SEND: at QD32, 25 of them go (the 25th's last
        // packet leaves with 124 before it), the others wait.
        let given: Vec<u32> = (0..32)
            .map(|id| f.push(write(2 * id, 4096), Some(send(2 * id + 1)), &mut out))
            .collect();
        assert_eq!(given, vec![5; 32]);
        assert_eq!(ids(&out), (0..50).collect::<Vec<_>>());
        // The first one's completion lets the 26th go.
        f.acknowledged(given[0], &mut out);
        assert_eq!(ids(&out[50..]), vec![50, 51]);
    }

    #[test]
    fn a_read_goes_alone() {
        let mut f = InFlight::new(for_device(SOFT_ROCE_VENDOR_ID, 1024));
        let mut out = Vec::new();
        // A 128K write's data: one READ request for 128 response packets. It goes alone:
        // the next READ and an answer's SEND wait for its completion.
        let reads: Vec<u32> = (1..=2)
            .map(|id| f.push(read(id, 128 << 10), None, &mut out))
            .collect();
        assert_eq!(reads, vec![128; 2]);
        assert_eq!(f.push(send(3), None, &mut out), 1);
        assert_eq!(ids(&out), vec![1]);
        f.read_completed(reads[0], &mut out);
        assert_eq!(ids(&out), vec![1, 2]);
        f.read_completed(reads[1], &mut out);
        assert_eq!(ids(&out), vec![1, 2, 3]);
    }

    #[test]
    fn a_read_waits_for_room_and_then_holds_what_follows() {
        let mut f = InFlight::new(for_device(SOFT_ROCE_VENDOR_ID, 1024));
        let mut out = Vec::new();
        // Answers in flight do not hold a READ back while rxe would send its request at once.
        let answers: Vec<u32> = (0..2)
            .map(|id| f.push(write(2 * id, 32 << 10), Some(send(2 * id + 1)), &mut out))
            .collect();
        let r = f.push(read(10, 128 << 10), None, &mut out);
        let small = f.push(write(11, 4096), Some(send(12)), &mut out);
        assert_eq!(ids(&out), vec![0, 1, 2, 3, 10]);
        // The answers' completions make room, but the READ still holds the next answer.
        for a in answers {
            f.acknowledged(a, &mut out);
        }
        assert_eq!(ids(&out), vec![0, 1, 2, 3, 10]);
        f.read_completed(r, &mut out);
        assert_eq!(ids(&out), vec![0, 1, 2, 3, 10, 11, 12]);
        // A READ that would leave with more than 128 before it waits for room.
        f.acknowledged(small, &mut out);
        let big = f.push(write(20, 128 << 10), Some(send(21)), &mut out);
        f.push(read(22, 4096), None, &mut out);
        assert_eq!(ids(&out[7..]), vec![20, 21]);
        f.acknowledged(big, &mut out);
        assert_eq!(ids(&out[7..]), vec![20, 21, 22]);
    }

    #[test]
    fn an_answer_larger_than_the_window_goes_whole_when_nothing_else_is_in_flight() {
        let mut f = InFlight::new(for_device(SOFT_ROCE_VENDOR_ID, 1024));
        let mut out = Vec::new();
        let small = f.push(write(1, 4096), Some(send(2)), &mut out);
        // 1 MiB: 1024 packets, more than the window; it waits for the 4K answer, then goes
        // with its SEND (never the WRITE alone: nothing would complete it).
        let big = f.push(write(3, 1 << 20), Some(send(4)), &mut out);
        assert_eq!((small, big), (5, 1025));
        assert_eq!(ids(&out), vec![1, 2]);
        f.acknowledged(small, &mut out);
        assert_eq!(ids(&out), vec![1, 2, 3, 4]);
    }
}
