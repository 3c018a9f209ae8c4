//! A bound on the RDMA WRITE packets one queue pair has in flight, for Soft-RoCE.
//!
//! Soft-RoCE (rxe) stops a queue pair's requester when 128 packets are unacknowledged
//! (RXE_MAX_UNACKED_PSNS). The likely mechanism, read from its source and not traced: for a
//! user queue pair the requester runs in the thread that rings the doorbell, and the
//! acknowledgement resumes it from a tasklet on whichever CPU took that acknowledgement, so
//! packets of one queue pair leave from two CPUs, arrive out of order, and RC's go-back-N sends
//! them again. A 128K read at QD16 puts 16 x 128 packets of RDMA WRITE on one queue pair at once.
//!
//! So on Soft-RoCE a queue's responses go out only while the RDMA WRITE packets in flight (at
//! the path MTU) stay within those 128, and one larger than the whole window goes when nothing
//! else is in flight. A response's WRITE and SEND go together, and its packets come back with
//! the SEND's completion (an RC queue completes in order). SENDs and RDMA READs are not
//! counted: a SEND is one packet, and counting them would hold 4K reads at QD32 to 25 in
//! flight; holding READs back (one 128K write's data at a time) cost 128K writes 5 % and 15 % in
//! two boots, with no error to remove (their requests are one packet each). Hardware keeps its
//! transport on the NIC and gets no window (`None`): every work request goes out as it is made.
//!
//! Measured in the interop guest (README, "NVMe/RDMA over Soft-RoCE"), at the default MTU: no
//! sequence-error NAKs in any windowed 128K read figure whose counters could be read (18-45 per
//! figure without). 128K reads from null drives, windowed against not in the same boots:
//! 0.69x/0.51x, 0.73x/0.64x, 0.74x/0.68x, and in a fourth boot 0.73x/0.80x of nvmet-rdma; from
//! ram drives 0.77x both ways. 4K reads were 1-22 % lower with the window in all five boots,
//! within their round-to-round noise. With a 9000-byte MTU the NAKs stay: the limit is not the
//! whole story there.
//!
//! Tried, not kept: splitting a long WRITE into signaled pieces of half the window, to slide
//! it, brought 15-35 NAKs per figure back and no throughput.

use std::collections::VecDeque;

use fabrik_rdma::{SendOp, SendWr};

/// Soft-RoCE's vendor ID (IBTA vendor information: none), as `ibv_query_device` reports it.
pub const SOFT_ROCE_VENDOR_ID: u32 = 0xff_ffff;
/// Packets Soft-RoCE's requester sends before it waits for an acknowledgement
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
    /// The RDMA WRITE packets a work request puts in flight.
    fn packets_of(&self, wr: &SendWr) -> u32 {
        match wr.op {
            SendOp::Write { .. } => wr.local.1.div_ceil(self.mtu).max(1),
            SendOp::Send { .. } | SendOp::Read { .. } => 0,
        }
    }
}

pub struct InFlight {
    window: Option<Window>,
    /// WRITE packets posted and not yet known to be acknowledged.
    packets: u32,
    /// Work requests waiting for room, in the order they were made: each with the one chained
    /// after it (a response's SEND after its WRITE) and the packets of both.
    held: VecDeque<(SendWr, Option<SendWr>, u32)>,
}

impl InFlight {
    pub fn new(window: Option<Window>) -> InFlight {
        InFlight {
            window,
            packets: 0,
            held: VecDeque::new(),
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

    fn release(&mut self, out: &mut Vec<SendWr>) {
        let limit = self.window.map_or(u32::MAX, |w| w.packets);
        while let Some(&(_, _, n)) = self.held.front() {
            if self.packets > 0 && self.packets + n > limit {
                return;
            }
            let (wr, then, n) = self.held.pop_front().expect("front");
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
        // Two 128K reads' answers: 128 packets each. The first goes with its SEND, the second
        // waits for it.
        let a = f.push(write(1, 128 << 10), Some(send(2)), &mut out);
        let b = f.push(write(3, 128 << 10), Some(send(4)), &mut out);
        assert_eq!((a, b), (128, 128));
        assert_eq!(ids(&out), vec![1, 2]);
        out.clear();
        // An answer without data counts nothing, but waits its turn behind them.
        assert_eq!(f.push(send(5), None, &mut out), 0);
        assert!(out.is_empty());
        f.acknowledged(a, &mut out);
        assert_eq!(ids(&out), vec![3, 4, 5]);
        out.clear();
        f.acknowledged(b, &mut out);
        assert!(out.is_empty());
        // Nothing in flight: the next goes at once.
        f.push(send(6), None, &mut out);
        assert_eq!(ids(&out), vec![6]);
    }

    #[test]
    fn small_answers_share_the_window() {
        let mut f = InFlight::new(for_device(SOFT_ROCE_VENDOR_ID, 1024));
        let mut out = Vec::new();
        // A 4K answer is 4 WRITE packets: 32 of them (QD32) all go.
        let given: Vec<u32> = (0..32)
            .map(|id| f.push(write(2 * id, 4096), Some(send(2 * id + 1)), &mut out))
            .collect();
        assert_eq!(given, vec![4; 32]);
        assert_eq!(out.len(), 64);
        // The 33rd waits for one of them.
        assert_eq!(f.push(write(100, 4096), Some(send(101)), &mut out), 4);
        assert_eq!(out.len(), 64);
        f.acknowledged(given[0], &mut out);
        assert_eq!(ids(&out[64..]), vec![100, 101]);
    }

    #[test]
    fn an_answer_larger_than_the_window_goes_whole_when_nothing_else_is_in_flight() {
        let mut f = InFlight::new(for_device(SOFT_ROCE_VENDOR_ID, 1024));
        let mut out = Vec::new();
        let small = f.push(write(1, 4096), Some(send(2)), &mut out);
        // 1 MiB: 1024 packets, more than the window; it waits for the 4K answer, then goes
        // with its SEND (never the WRITE alone: nothing would complete it).
        let big = f.push(write(3, 1 << 20), Some(send(4)), &mut out);
        assert_eq!((small, big), (4, 1024));
        assert_eq!(ids(&out), vec![1, 2]);
        f.acknowledged(small, &mut out);
        assert_eq!(ids(&out), vec![1, 2, 3, 4]);
    }
}
