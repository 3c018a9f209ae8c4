//! The host half of NVMe/TCP against a scripted fake target speaking raw PDUs over an in-memory
//! stream: reassembly, R2T answering, digests, and how protocol violations end the queue.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use fabrik_proto::nvme::io_opcode;
use fabrik_proto::tcp::{
    fes, C2HData, CapsuleCmd, CapsuleResp, Decoder, Digests, IcResp, Pdu, Role, TermReq, R2T,
};
use fabrik_proto::{Cqe, SglDescriptor, Sqe, Status};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::*;
use crate::transport::Tagged;

const ALL_DIGESTS: [Digests; 4] = [
    Digests {
        header: false,
        data: false,
    },
    Digests {
        header: true,
        data: false,
    },
    Digests {
        header: false,
        data: true,
    },
    Digests {
        header: true,
        data: true,
    },
];

/// The target end of the stream: decodes the host's PDUs, sends whatever a test scripts.
pub(super) struct FakeTarget {
    stream: DuplexStream,
    decoder: Decoder,
    buf: BytesMut,
    digests: Digests,
}

impl FakeTarget {
    async fn recv(&mut self) -> Pdu {
        loop {
            if let Some(pdu) = self
                .decoder
                .decode(&mut self.buf)
                .expect("host sent a bad PDU")
            {
                return pdu;
            }
            let n = self.stream.read_buf(&mut self.buf).await.unwrap();
            assert!(n > 0, "host closed the connection");
        }
    }

    pub(super) async fn recv_capsule(&mut self) -> CapsuleCmd {
        match self.recv().await {
            Pdu::CapsuleCmd(capsule) => capsule,
            other => panic!("expected a command capsule, got {other:?}"),
        }
    }

    async fn send(&mut self, pdu: Pdu) {
        let mut out = BytesMut::new();
        pdu.encode(self.digests, &mut out);
        self.stream.write_all(&out).await.unwrap();
    }

    pub(super) async fn respond(&mut self, cid: u16, status: Status) {
        self.send(Pdu::CapsuleResp(CapsuleResp {
            cqe: Cqe::new(cid, status),
        }))
        .await;
    }

    pub(super) async fn send_data(
        &mut self,
        cid: u16,
        datao: u32,
        data: &[u8],
        last: bool,
        success: bool,
    ) {
        let data = Bytes::copy_from_slice(data);
        self.send(Pdu::C2HData(C2HData {
            cccid: cid,
            datao,
            last,
            success,
            data,
        }))
        .await;
    }

    /// True once the host has closed its end.
    pub(super) async fn host_closed(&mut self) -> bool {
        let mut scratch = [0u8; 4096];
        matches!(
            tokio::time::timeout(Duration::from_secs(2), self.stream.read(&mut scratch)).await,
            Ok(Ok(0)) | Ok(Err(_))
        )
    }
}

/// A queue and the fake target it talks to, after a normal ICReq/ICResp exchange.
async fn pair(digests: Digests, maxh2cdata: u32) -> (TcpQueue, FakeTarget) {
    pair_with(TcpQueueConfig::new(1, 32, digests), maxh2cdata).await
}

pub(super) async fn pair_with(config: TcpQueueConfig, maxh2cdata: u32) -> (TcpQueue, FakeTarget) {
    let digests = config.digests;
    let (host_end, target_end) = tokio::io::duplex(1 << 20);
    let mut target = FakeTarget {
        stream: target_end,
        decoder: Decoder::new(Role::Controller, 1 << 24),
        buf: BytesMut::new(),
        digests: Digests::default(),
    };
    let accept = async move {
        let Pdu::IcReq(icreq) = target.recv().await else {
            panic!("expected ICReq")
        };
        assert_eq!((icreq.pfv, icreq.hpda, icreq.maxr2t), (0, 0, 0));
        assert_eq!(icreq.digests, digests);
        target
            .send(Pdu::IcResp(IcResp {
                pfv: 0,
                cpda: 0,
                digests,
                maxh2cdata,
            }))
            .await;
        target.decoder.set_digests(digests);
        target.digests = digests;
        target
    };
    let (queue, target) = tokio::join!(TcpQueue::establish(host_end, config), accept);
    (queue.expect("queue set up"), target)
}

pub(super) fn read_sqe(blocks: u32) -> Sqe {
    Sqe {
        opcode: io_opcode::READ,
        nsid: 1,
        cdw12: blocks - 1,
        ..Sqe::default()
    }
}

fn write_sqe(blocks: u32) -> Sqe {
    Sqe {
        opcode: io_opcode::WRITE,
        nsid: 1,
        cdw12: blocks - 1,
        ..Sqe::default()
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

#[tokio::test]
async fn read_reassembles_c2h_data_with_every_digest_combination() {
    for digests in ALL_DIGESTS {
        let (queue, mut target) = pair(digests, 4096).await;
        let expected = pattern(12288, 7);
        let script = async {
            let capsule = target.recv_capsule().await;
            assert_eq!(
                capsule.sqe.sgl().unwrap(),
                SglDescriptor::TransportDataBlock { length: 12288 }
            );
            assert!(capsule.data.is_empty());
            for (i, chunk) in expected.chunks(4096).enumerate() {
                target
                    .send_data(capsule.sqe.cid, i as u32 * 4096, chunk, i == 2, false)
                    .await;
            }
            target.respond(capsule.sqe.cid, Status::SUCCESS).await;
        };
        let (completion, ()) = tokio::join!(queue.submit(read_sqe(3), None, 12288, 0), script);
        let completion = completion.unwrap_or_else(|e| panic!("{digests:?}: {e}"));
        assert!(completion.cqe.status.is_success());
        assert_eq!(&completion.data[..], &expected[..], "{digests:?}");
    }
}

#[tokio::test]
async fn success_flag_completes_a_read_without_a_response_capsule() {
    let (queue, mut target) = pair(Digests::default(), 4096).await;
    let expected = pattern(8192, 3);
    let script = async {
        let capsule = target.recv_capsule().await;
        target
            .send_data(capsule.sqe.cid, 0, &expected[..4096], false, false)
            .await;
        target
            .send_data(capsule.sqe.cid, 4096, &expected[4096..], true, true)
            .await;
    };
    let (completion, ()) = tokio::join!(queue.submit(read_sqe(2), None, 8192, 0), script);
    assert_eq!(&completion.unwrap().data[..], &expected[..]);
    // The queue is still usable: the next command gets a fresh answer.
    let script = async {
        let capsule = target.recv_capsule().await;
        target.respond(capsule.sqe.cid, Status::INVALID_FIELD).await;
    };
    let (completion, ()) = tokio::join!(queue.submit(Sqe::default(), None, 0, 0), script);
    assert_eq!(completion.unwrap().cqe.status, Status::INVALID_FIELD);
}

#[tokio::test]
async fn c2h_data_with_a_gap_ends_the_queue() {
    let (queue, mut target) = pair(Digests::default(), 4096).await;
    let script = async {
        let capsule = target.recv_capsule().await;
        target
            .send_data(capsule.sqe.cid, 4096, &[0u8; 4096], true, false)
            .await;
        assert!(target.host_closed().await);
    };
    let (result, ()) = tokio::join!(queue.submit(read_sqe(2), None, 8192, 0), script);
    let err = result.unwrap_err();
    assert!(
        matches!(&err, HostError::Protocol { reason, .. } if reason.contains("DATAO 4096")),
        "{err}"
    );
    // Later commands get the error that closed the queue.
    assert!(matches!(
        queue.submit(Sqe::default(), None, 0, 0).await,
        Err(HostError::Protocol { .. })
    ));
}

#[tokio::test]
async fn c2h_data_beyond_the_transfer_ends_the_queue() {
    let (queue, mut target) = pair(Digests::default(), 4096).await;
    let script = async {
        let capsule = target.recv_capsule().await;
        target
            .send_data(capsule.sqe.cid, 0, &[0u8; 8192], true, false)
            .await;
    };
    let (result, ()) = tokio::join!(queue.submit(read_sqe(1), None, 4096, 0), script);
    assert!(
        matches!(result, Err(HostError::Protocol { reason, .. }) if reason.contains("4096-byte transfer"))
    );
}

#[tokio::test]
async fn success_without_last_pdu_ends_the_queue() {
    let (queue, mut target) = pair(Digests::default(), 4096).await;
    let script = async {
        let capsule = target.recv_capsule().await;
        target
            .send_data(capsule.sqe.cid, 0, &[0u8; 4096], false, true)
            .await;
    };
    let (result, ()) = tokio::join!(queue.submit(read_sqe(2), None, 8192, 0), script);
    assert!(
        matches!(result, Err(HostError::Protocol { reason, .. }) if reason.contains("LAST_PDU"))
    );
}

#[tokio::test]
async fn short_read_fails_only_that_command() {
    let (queue, mut target) = pair(Digests::default(), 4096).await;
    let script = async {
        let capsule = target.recv_capsule().await;
        target
            .send_data(capsule.sqe.cid, 0, &[0u8; 4096], true, false)
            .await;
        target.respond(capsule.sqe.cid, Status::SUCCESS).await;
    };
    let (result, ()) = tokio::join!(queue.submit(read_sqe(2), None, 8192, 0), script);
    assert!(
        matches!(result, Err(HostError::Protocol { reason, .. }) if reason.contains("4096 of its 8192"))
    );
    assert!(queue.closed().is_none());
}

/// Receives the H2CData PDUs answering one R2T and checks their framing.
async fn collect_h2c(target: &mut FakeTarget, r2t: R2T, maxh2cdata: u32) -> Vec<u8> {
    let mut data = Vec::new();
    loop {
        let Pdu::H2CData(h2c) = target.recv().await else {
            panic!("expected H2CData")
        };
        assert_eq!((h2c.cccid, h2c.ttag), (r2t.cccid, r2t.ttag));
        assert_eq!(
            h2c.datao,
            r2t.r2to + data.len() as u32,
            "H2CData offsets are contiguous"
        );
        assert!(
            h2c.data.len() as u32 <= maxh2cdata,
            "H2CData honours MAXH2CDATA"
        );
        data.extend_from_slice(&h2c.data);
        let complete = data.len() as u32 == r2t.r2tl;
        assert_eq!(
            h2c.last, complete,
            "LAST_PDU exactly on the final PDU of the R2T"
        );
        if complete {
            return data;
        }
    }
}

#[tokio::test]
async fn write_answers_r2t_with_h2c_data_split_by_maxh2cdata() {
    for digests in ALL_DIGESTS {
        let (queue, mut target) = pair(digests, 4096).await;
        let payload = pattern(10_000, 9);
        let script = async {
            let capsule = target.recv_capsule().await;
            assert_eq!(
                capsule.sqe.sgl().unwrap(),
                SglDescriptor::TransportDataBlock { length: 10_000 }
            );
            assert!(capsule.data.is_empty());
            let cid = capsule.sqe.cid;
            // Two R2Ts, one after the other, as a target with a small buffer would send.
            let first = R2T {
                cccid: cid,
                ttag: 5,
                r2to: 0,
                r2tl: 6000,
            };
            target.send(Pdu::R2T(first)).await;
            let mut received = collect_h2c(&mut target, first, 4096).await;
            let second = R2T {
                cccid: cid,
                ttag: 6,
                r2to: 6000,
                r2tl: 4000,
            };
            target.send(Pdu::R2T(second)).await;
            received.extend(collect_h2c(&mut target, second, 4096).await);
            target.respond(cid, Status::SUCCESS).await;
            received
        };
        let data = Bytes::from(payload.clone());
        let (completion, received) =
            tokio::join!(queue.submit(write_sqe(3), Some(data), 0, 0), script);
        completion.unwrap_or_else(|e| panic!("{digests:?}: {e}"));
        assert_eq!(received, payload, "{digests:?}");
    }
}

#[tokio::test]
async fn small_write_goes_in_capsule() {
    let (queue, mut target) = pair(
        Digests {
            header: true,
            data: true,
        },
        4096,
    )
    .await;
    let payload = pattern(4096, 1);
    let script = async {
        let capsule = target.recv_capsule().await;
        assert_eq!(
            capsule.sqe.sgl().unwrap(),
            SglDescriptor::DataBlockOffset {
                offset: 0,
                length: 4096
            }
        );
        target.respond(capsule.sqe.cid, Status::SUCCESS).await;
        capsule.data
    };
    let data = Bytes::from(payload.clone());
    let (completion, received) =
        tokio::join!(queue.submit(write_sqe(1), Some(data), 0, 8192), script);
    completion.unwrap();
    assert_eq!(&received[..], &payload[..]);
}

#[tokio::test]
async fn write_completed_before_its_data_was_fetched_is_an_error() {
    let (queue, mut target) = pair(Digests::default(), 4096).await;
    let script = async {
        let capsule = target.recv_capsule().await;
        target.respond(capsule.sqe.cid, Status::SUCCESS).await;
    };
    let (result, ()) = tokio::join!(
        queue.submit(write_sqe(2), Some(Bytes::from(vec![1u8; 8192])), 0, 0),
        script
    );
    assert!(matches!(result, Err(HostError::Protocol { .. })));
    // An error status instead of R2T is fine: nothing had to move.
    let script = async {
        let capsule = target.recv_capsule().await;
        target
            .respond(capsule.sqe.cid, Status::LBA_OUT_OF_RANGE)
            .await;
    };
    let (result, ()) = tokio::join!(
        queue.submit(write_sqe(2), Some(Bytes::from(vec![1u8; 8192])), 0, 0),
        script
    );
    assert_eq!(result.unwrap().cqe.status, Status::LBA_OUT_OF_RANGE);
}

#[tokio::test]
async fn r2t_beyond_the_data_ends_the_queue() {
    let (queue, mut target) = pair(Digests::default(), 4096).await;
    let script = async {
        let capsule = target.recv_capsule().await;
        target
            .send(Pdu::R2T(R2T {
                cccid: capsule.sqe.cid,
                ttag: 0,
                r2to: 4096,
                r2tl: 8192,
            }))
            .await;
    };
    let (result, ()) = tokio::join!(
        queue.submit(write_sqe(2), Some(Bytes::from(vec![1u8; 8192])), 0, 0),
        script
    );
    assert!(matches!(result, Err(HostError::Protocol { reason, .. }) if reason.contains("R2T")));
}

#[tokio::test]
async fn commands_are_pipelined_and_matched_by_cid() {
    let (queue, mut target) = pair(Digests::default(), 4096).await;
    let script = async {
        let mut cids = Vec::new();
        for _ in 0..8 {
            cids.push(target.recv_capsule().await.sqe);
        }
        // Answer in reverse order, each read with data derived from its SLBA.
        for sqe in cids.iter().rev() {
            target
                .send_data(sqe.cid, 0, &pattern(4096, sqe.cdw10 as u8), true, true)
                .await;
        }
    };
    // All eight must be in flight before the target answers: run them concurrently.
    let (results, ()) = tokio::join!(join_all_local(reads_concurrently(&queue)), script);
    for (slba, result) in results {
        assert_eq!(&result.unwrap().data[..], &pattern(4096, slba as u8)[..]);
    }
}

/// Eight reads of one block at SLBA 0..8, all in flight at once.
fn reads_concurrently(
    queue: &TcpQueue,
) -> Vec<impl std::future::Future<Output = (u32, Result<Completion, HostError>)> + '_> {
    (0..8u32)
        .map(move |slba| async move {
            let sqe = Sqe {
                cdw10: slba,
                ..read_sqe(1)
            };
            (slba, queue.submit(sqe, None, 4096, 0).await)
        })
        .collect()
}

/// Polls every future to completion concurrently on the current task.
async fn join_all_local<F: std::future::Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<_> = futures.into_iter().map(Box::pin).collect();
    let mut results: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, slot) in futures.iter_mut().zip(results.iter_mut()) {
            if slot.is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(out) => *slot = Some(out),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    results.into_iter().map(Option::unwrap).collect()
}

#[tokio::test]
async fn completion_for_an_unknown_cid_fails_everything_in_flight() {
    let (queue, mut target) = pair(Digests::default(), 4096).await;
    let script = async {
        let capsule = target.recv_capsule().await;
        target
            .respond(capsule.sqe.cid.wrapping_add(100), Status::SUCCESS)
            .await;
        assert!(target.host_closed().await);
    };
    let (result, ()) = tokio::join!(queue.submit(Sqe::default(), None, 0, 0), script);
    assert!(
        matches!(result, Err(HostError::Protocol { reason, .. }) if reason.contains("unknown command id"))
    );
}

#[tokio::test]
async fn c2h_term_req_ends_the_queue_with_its_fes() {
    let (queue, mut target) = pair(
        Digests {
            header: true,
            data: false,
        },
        4096,
    )
    .await;
    let script = async {
        target.recv_capsule().await;
        let term = TermReq {
            fes: fes::INVALID_HEADER_FIELD,
            fei: 2,
            header: Bytes::from(vec![0u8; 24]),
        };
        target.send(Pdu::C2HTermReq(term)).await;
    };
    let (result, ()) = tokio::join!(queue.submit(Sqe::default(), None, 0, 0), script);
    assert!(
        matches!(result, Err(HostError::Terminated { fes: 1, fei: 2, .. })),
        "{result:?}"
    );
}

#[tokio::test]
async fn closed_connection_fails_commands_in_flight() {
    let (queue, mut target) = pair(Digests::default(), 4096).await;
    let script = async {
        target.recv_capsule().await;
        drop(target);
    };
    let (result, ()) = tokio::join!(queue.submit(Sqe::default(), None, 0, 0), script);
    assert!(
        matches!(result, Err(HostError::ConnectionClosed { qid: 1 })),
        "{result:?}"
    );
}

#[tokio::test]
async fn bad_data_digest_fails_the_command_but_not_the_queue() {
    let (queue, mut target) = pair(
        Digests {
            header: false,
            data: true,
        },
        4096,
    )
    .await;
    let script = async {
        let capsule = target.recv_capsule().await;
        let pdu = Pdu::C2HData(C2HData {
            cccid: capsule.sqe.cid,
            datao: 0,
            last: true,
            success: true,
            data: Bytes::from(vec![0xAB; 4096]),
        });
        let mut out = BytesMut::new();
        pdu.encode(target.digests, &mut out);
        let n = out.len();
        out[n - 1] ^= 0xFF; // corrupt the data digest
        target.stream.write_all(&out).await.unwrap();
    };
    let (result, ()) = tokio::join!(queue.submit(read_sqe(1), None, 4096, 0), script);
    assert!(
        matches!(result, Err(HostError::DataDigest { .. })),
        "{result:?}"
    );
    assert!(queue.closed().is_none());
    let script = async {
        let capsule = target.recv_capsule().await;
        target.respond(capsule.sqe.cid, Status::SUCCESS).await;
    };
    let (result, ()) = tokio::join!(queue.submit(Sqe::default(), None, 0, 0), script);
    assert!(result.is_ok());
}

#[tokio::test]
async fn icresp_with_other_digests_is_refused() {
    let (host_end, target_end) = tokio::io::duplex(1 << 16);
    let mut target = FakeTarget {
        stream: target_end,
        decoder: Decoder::new(Role::Controller, 1 << 20),
        buf: BytesMut::new(),
        digests: Digests::default(),
    };
    let script = async {
        target.recv().await;
        let icresp = IcResp {
            pfv: 0,
            cpda: 0,
            digests: Digests::default(),
            maxh2cdata: 4096,
        };
        target.send(Pdu::IcResp(icresp)).await;
    };
    let config = TcpQueueConfig::new(
        0,
        32,
        Digests {
            header: true,
            data: false,
        },
    );
    let (result, ()) = tokio::join!(TcpQueue::establish(host_end, config), script);
    assert!(
        matches!(result, Err(HostError::Protocol { reason, .. }) if reason.contains("digests"))
    );
}

#[test]
fn icresp_checks_follow_the_linux_host() {
    let asked = Digests {
        header: true,
        data: true,
    };
    let good = IcResp {
        pfv: 0,
        cpda: 0,
        digests: asked,
        maxh2cdata: 0x40_0000,
    };
    assert!(check_icresp(0, &good, asked).is_ok());
    assert!(check_icresp(0, &IcResp { pfv: 1, ..good }, asked).is_err());
    assert!(check_icresp(0, &IcResp { cpda: 1, ..good }, asked).is_err());
    assert!(check_icresp(
        0,
        &IcResp {
            maxh2cdata: 2048,
            ..good
        },
        asked
    )
    .is_err());
    assert!(check_icresp(
        0,
        &IcResp {
            maxh2cdata: 4098,
            ..good
        },
        asked
    )
    .is_err());
    let header_only = Digests {
        header: true,
        data: false,
    };
    assert!(check_icresp(
        0,
        &IcResp {
            digests: header_only,
            ..good
        },
        asked
    )
    .is_err());
}

impl FakeTarget {
    /// Sends a PDU in two writes, `first` bytes then the rest after a pause, so that the host
    /// sees the header before the payload (and receives the payload straight into its buffer).
    async fn send_trickled(&mut self, pdu: Pdu, first: usize, corrupt_digest: bool) {
        let mut out = BytesMut::new();
        pdu.encode(self.digests, &mut out);
        if corrupt_digest {
            let n = out.len();
            out[n - 1] ^= 0xFF;
        }
        self.stream.write_all(&out[..first]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        // The host may have hung up on the header already.
        let _ = self.stream.write_all(&out[first..]).await;
    }
}

fn c2h(cid: u16, datao: u32, data: &[u8], last: bool) -> Pdu {
    Pdu::C2HData(C2HData {
        cccid: cid,
        datao,
        last,
        success: false,
        data: Bytes::copy_from_slice(data),
    })
}

#[tokio::test]
async fn large_reads_are_received_into_the_callers_buffer_with_every_digest_combination() {
    for digests in ALL_DIGESTS {
        let (queue, mut target) = pair(digests, 4096).await;
        let mut buf = BytesMut::with_capacity(128 << 10);
        let at = buf.as_ptr();
        for round in 0..3u8 {
            let expected = pattern(128 << 10, round);
            let script = async {
                let capsule = target.recv_capsule().await;
                let cid = capsule.sqe.cid;
                // Two 64 KiB PDUs, each split after 100 bytes (header and a little data).
                for (i, half) in expected.chunks(64 << 10).enumerate() {
                    let pdu = c2h(cid, (i << 16) as u32, half, i == 1);
                    target.send_trickled(pdu, 100, false).await;
                }
                target.respond(cid, Status::SUCCESS).await;
            };
            let submit = async {
                if round == 2 {
                    // Without a buffer of the caller's, the queue makes one.
                    queue.submit(read_sqe(32), None, 128 << 10, 0).await
                } else {
                    let buf = std::mem::take(&mut buf);
                    queue.submit_into(read_sqe(32), buf, 128 << 10).await
                }
            };
            let (completion, ()) = tokio::join!(submit, script);
            let data = completion
                .unwrap_or_else(|e| panic!("{digests:?}: {e}"))
                .data;
            assert!(data[..] == expected[..], "{digests:?} round {round}");
            if round < 2 {
                buf = data
                    .try_into_mut()
                    .expect("the caller's buffer, given back");
                assert_eq!(buf.as_ptr(), at, "the same memory, reused");
            }
        }
    }
}

#[tokio::test]
async fn bad_data_digest_on_a_large_pdu_fails_the_command_but_not_the_queue() {
    let digests = Digests {
        header: true,
        data: true,
    };
    let (queue, mut target) = pair(digests, 4096).await;
    let script = async {
        let capsule = target.recv_capsule().await;
        let pdu = c2h(capsule.sqe.cid, 0, &pattern(64 << 10, 1), true);
        target.send_trickled(pdu, 100, true).await;
        target.respond(capsule.sqe.cid, Status::SUCCESS).await;
    };
    let buf = BytesMut::with_capacity(64 << 10);
    let (result, ()) = tokio::join!(queue.submit_into(read_sqe(16), buf, 64 << 10), script);
    assert!(
        matches!(result, Err(HostError::DataDigest { .. })),
        "{result:?}"
    );
    assert!(queue.closed().is_none());
    let script = async {
        let capsule = target.recv_capsule().await;
        let pdu = c2h(capsule.sqe.cid, 0, &pattern(64 << 10, 2), true);
        target.send_trickled(pdu, 100, false).await;
        target.respond(capsule.sqe.cid, Status::SUCCESS).await;
    };
    let (result, ()) = tokio::join!(queue.submit(read_sqe(16), None, 64 << 10, 0), script);
    assert!(result.unwrap().data[..] == pattern(64 << 10, 2)[..]);
}

#[tokio::test]
async fn large_c2h_data_beyond_the_transfer_ends_the_queue() {
    let (queue, mut target) = pair(Digests::default(), 4096).await;
    let script = async {
        let capsule = target.recv_capsule().await;
        let pdu = c2h(capsule.sqe.cid, 0, &pattern(64 << 10, 1), true);
        target.send_trickled(pdu, 100, false).await;
    };
    let buf = BytesMut::with_capacity(32 << 10);
    let (result, ()) = tokio::join!(queue.submit_into(read_sqe(8), buf, 32 << 10), script);
    let err = result.unwrap_err().to_string();
    assert!(err.contains("of a 32768-byte transfer"), "{err}");
    assert!(queue.closed().is_some());
}

fn polling(window: std::time::Duration) -> TcpQueueConfig {
    TcpQueueConfig {
        poll_window: window,
        ..TcpQueueConfig::new(1, 32, Digests::default())
    }
}

/// CPU time of the calling thread.
fn thread_cpu() -> std::time::Duration {
    // SAFETY: getrusage writes into the struct passed; zeroed is a valid rusage.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    assert_eq!(
        unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) },
        0
    );
    let tv = |t: libc::timeval| std::time::Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

#[tokio::test]
async fn a_polling_queue_matches_answers_that_come_slowly_and_sees_the_close() {
    // A window longer than the test: the reader polls through every gap between answers.
    let (queue, mut target) = pair_with(polling(std::time::Duration::from_secs(30)), 4096).await;
    let script = async {
        let mut sqes = Vec::new();
        for _ in 0..8 {
            sqes.push(target.recv_capsule().await.sqe);
        }
        for sqe in sqes.iter().rev() {
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            target
                .send_data(sqe.cid, 0, &pattern(4096, sqe.cdw10 as u8), true, true)
                .await;
        }
        target.recv_capsule().await;
        drop(target);
    };
    let reads_then_one_more = async {
        let results = join_all_local(reads_concurrently(&queue)).await;
        (results, queue.submit(Sqe::default(), None, 0, 0).await)
    };
    let ((results, last), ()) = tokio::join!(reads_then_one_more, script);
    for (slba, result) in results {
        assert_eq!(&result.unwrap().data[..], &pattern(4096, slba as u8)[..]);
    }
    assert!(
        matches!(last, Err(HostError::ConnectionClosed { qid: 1 })),
        "{last:?}"
    );
}

#[tokio::test]
async fn a_polling_queue_sleeps_once_nothing_is_in_flight() {
    let (queue, mut target) = pair_with(polling(std::time::Duration::from_secs(30)), 4096).await;
    let script = async {
        let sqe = target.recv_capsule().await.sqe;
        target
            .send_data(sqe.cid, 0, &pattern(4096, 1), true, true)
            .await;
        target
    };
    let (result, target) = tokio::join!(queue.submit(read_sqe(1), None, 4096, 0), script);
    assert_eq!(&result.unwrap().data[..], &pattern(4096, 1)[..]);
    // The reader and this test share the thread (a current-thread runtime): polling through
    // the idle time would take about all of it.
    let before = thread_cpu();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let spent = thread_cpu() - before;
    assert!(
        spent < std::time::Duration::from_millis(60),
        "{spent:?} of CPU while idle"
    );
    drop(target);
}

#[tokio::test]
async fn no_more_than_the_queue_depth_is_in_flight() {
    let (queue, mut target) = pair_with(TcpQueueConfig::new(1, 3, Digests::default()), 4096).await;
    let script = async {
        let mut answered = 0;
        while answered < 8 {
            // Everything the host may send now: as many commands as the depth leaves room for.
            let mut got = Vec::new();
            while let Ok(capsule) =
                tokio::time::timeout(Duration::from_millis(100), target.recv_capsule()).await
            {
                got.push(capsule.sqe);
            }
            assert_eq!(got.len(), 3.min(8 - answered), "in flight at once");
            // One answer makes room for one more.
            let sqe = got.remove(0);
            target
                .send_data(sqe.cid, 0, &pattern(4096, sqe.cdw10 as u8), true, true)
                .await;
            answered += 1;
            for sqe in got {
                target
                    .send_data(sqe.cid, 0, &pattern(4096, sqe.cdw10 as u8), true, true)
                    .await;
                answered += 1;
            }
        }
    };
    let (results, ()) = tokio::join!(join_all_local(reads_concurrently(&queue)), script);
    for (slba, result) in results {
        assert_eq!(&result.unwrap().data[..], &pattern(4096, slba as u8)[..]);
    }
}

#[tokio::test]
async fn a_caller_waiting_for_room_sees_the_close() {
    let (queue, mut target) = pair_with(TcpQueueConfig::new(1, 1, Digests::default()), 4096).await;
    let first = queue.submit(read_sqe(1), None, 4096, 0);
    let second = async {
        tokio::task::yield_now().await;
        queue.submit(read_sqe(1), None, 4096, 0).await
    };
    let script = async {
        target.recv_capsule().await;
        let nothing = tokio::time::timeout(Duration::from_millis(100), target.recv_capsule());
        assert!(nothing.await.is_err(), "a second command beyond depth 1");
        queue.close("test");
    };
    let (first, second, ()) = tokio::join!(first, second, script);
    for result in [first, second] {
        assert!(
            matches!(result, Err(HostError::QueueClosed { .. })),
            "{result:?}"
        );
    }
}

/// A caller that stops waiting leaves its command's CID taken until the command completes, and
/// its completion goes nowhere: the next commands get CIDs of their own and their own answers.
#[tokio::test]
async fn a_caller_that_stops_waiting_gives_its_cid_up_once_its_command_completes() {
    let (queue, mut target) = pair(Digests::default(), 4096).await;
    // Submitted (queued at once) and dropped before any answer.
    drop(queue.submit(read_sqe(1), None, 4096, 0));
    let abandoned = target.recv_capsule().await.sqe.cid;
    let second = queue.submit(read_sqe(1), None, 4096, 0);
    let cid = target.recv_capsule().await.sqe.cid;
    assert_ne!(
        cid, abandoned,
        "an abandoned command's CID is still in flight"
    );
    target
        .send_data(abandoned, 0, &pattern(4096, 1), true, true)
        .await;
    target
        .send_data(cid, 0, &pattern(4096, 2), true, true)
        .await;
    let completion = second.await.expect("the second read completes");
    assert_eq!(&completion.data[..], &pattern(4096, 2)[..]);
    // Both slots are free again: a full queue's worth of commands fits, none of them taking
    // an answer meant for another.
    let (results, ()) = tokio::join!(join_all_local(reads_concurrently(&queue)), async {
        let mut sqes = Vec::new();
        for _ in 0..8 {
            sqes.push(target.recv_capsule().await.sqe);
        }
        for sqe in sqes {
            let data = pattern(4096, sqe.cdw10 as u8);
            target.send_data(sqe.cid, 0, &data, true, true).await;
        }
    });
    for (slba, result) in results {
        assert_eq!(&result.unwrap().data[..], &pattern(4096, slba as u8)[..]);
    }
    assert_eq!(queue.shared.state.lock().unwrap().commands.in_flight(), 0);
}

/// Reads started with tags (`TcpQueue::start_into`) beyond the queue's depth: they go out as
/// slots free, in the order started, and every answer comes to the completion queue with its
/// own data under its own tag, the failed one as an error naming its status.
#[tokio::test]
async fn started_commands_beyond_the_depth_are_answered_in_the_completion_queue() {
    let (queue, mut target) = pair_with(TcpQueueConfig::new(1, 2, Digests::default()), 4096).await;
    let answers = CompletionQueue::new();
    for tag in 0..6u64 {
        let sqe = Sqe {
            cdw10: tag as u32,
            ..read_sqe(1)
        };
        queue.start_into(sqe, BytesMut::new(), 4096, answers.to(tag));
    }
    let script = async {
        let mut order = Vec::new();
        for _ in 0..3 {
            // Two in flight at most; both answered (tag 4 with an error status) make room.
            let a = target.recv_capsule().await.sqe;
            let b = target.recv_capsule().await.sqe;
            let nothing = tokio::time::timeout(Duration::from_millis(50), target.recv_capsule());
            assert!(nothing.await.is_err(), "a third command beyond depth 2");
            for sqe in [a, b] {
                order.push(sqe.cdw10);
                match sqe.cdw10 {
                    4 => target.respond(sqe.cid, Status::new(0, 0x81)).await,
                    slba => {
                        let data = pattern(4096, slba as u8);
                        target.send_data(sqe.cid, 0, &data, true, true).await
                    }
                }
            }
        }
        order
    };
    let mut got = Vec::new();
    let taking = async {
        while got.len() < 6 {
            answers.take(&mut got).await;
        }
    };
    let (order, ()) = tokio::join!(script, taking);
    assert_eq!(order, [0, 1, 2, 3, 4, 5], "started in order");
    got.sort_by_key(|t| t.tag);
    for Tagged { tag, result } in got {
        match tag {
            4 => assert!(
                matches!(&result, Err(HostError::Status { status, .. }) if status.sc() == 0x81),
                "{result:?}"
            ),
            _ => assert_eq!(&result.unwrap().data[..], &pattern(4096, tag as u8)[..]),
        }
    }
    assert_eq!(queue.shared.state.lock().unwrap().commands.in_flight(), 0);
}

/// A queue that fails answers every started command with its error: those in flight, those
/// waiting for a slot, and those started after it closed.
#[tokio::test]
async fn a_failing_queue_answers_every_started_command_with_its_error() {
    let (queue, mut target) = pair_with(TcpQueueConfig::new(1, 1, Digests::default()), 4096).await;
    let answers = CompletionQueue::new();
    queue.start_into(read_sqe(1), BytesMut::new(), 4096, answers.to(1));
    queue.start(
        write_sqe(1),
        Some(Bytes::from(vec![7; 4096])),
        0,
        0,
        answers.to(2),
    );
    let sqe = target.recv_capsule().await.sqe;
    target.respond(sqe.cid ^ 0x8000, Status::SUCCESS).await; // no such command
    let mut got = Vec::new();
    while got.len() < 2 {
        answers.take(&mut got).await;
    }
    queue.start_into(read_sqe(1), BytesMut::new(), 4096, answers.to(3));
    answers.take(&mut got).await;
    got.sort_by_key(|t| t.tag);
    assert_eq!(got.iter().map(|t| t.tag).collect::<Vec<_>>(), [1, 2, 3]);
    for Tagged { result, .. } in &got {
        assert!(
            matches!(result, Err(HostError::Protocol { .. })),
            "{result:?}"
        );
    }
}
