//! A host connection driven PDU by PDU: for tests that send what a well-behaved host would
//! not (malformed PDUs), or what another host does (SPDK's), byte for byte.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use fabrik_initiator::proto::fabrics::nqn::Nqn;
use fabrik_initiator::proto::fabrics::{ConnectData, FabricsCommand};
use fabrik_initiator::proto::nvme::admin::AdminCommand;
use fabrik_initiator::proto::tcp::{CapsuleCmd, Decoder, Digests, IcReq, Pdu, Role, TermReq};
use fabrik_initiator::proto::{Cqe, SglDescriptor, Sqe};
use fabrik_initiator::HostIdentity;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A host connection driven PDU by PDU.
pub struct RawConn {
    pub stream: TcpStream,
    pub decoder: Decoder,
    pub buf: BytesMut,
    pub digests: Digests,
}

impl RawConn {
    pub async fn open(addr: SocketAddr) -> RawConn {
        let stream = TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        RawConn {
            stream,
            decoder: Decoder::new(Role::Host, 1 << 24),
            buf: BytesMut::new(),
            digests: Digests::default(),
        }
    }

    /// Opens a connection and does the ICReq / ICResp exchange.
    pub async fn connect(addr: SocketAddr, digests: Digests) -> RawConn {
        let mut conn = RawConn::open(addr).await;
        conn.send(Pdu::IcReq(IcReq {
            pfv: 0,
            hpda: 0,
            digests,
            maxr2t: 0,
        }))
        .await;
        let Some(Pdu::IcResp(icresp)) = conn.next().await else {
            panic!("expected ICResp")
        };
        assert_eq!(icresp.digests, digests);
        conn.decoder.set_digests(digests);
        conn.digests = digests;
        conn
    }

    pub async fn send(&mut self, pdu: Pdu) {
        let mut out = BytesMut::new();
        let digests = if matches!(pdu, Pdu::IcReq(_)) {
            Digests::default()
        } else {
            self.digests
        };
        pdu.encode(digests, &mut out);
        self.send_raw(&out).await;
    }

    pub async fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    /// The next PDU from the target, or None once it has closed the connection.
    pub async fn next(&mut self) -> Option<Pdu> {
        let deadline = Duration::from_secs(15);
        loop {
            if let Some(pdu) = self
                .decoder
                .decode(&mut self.buf)
                .expect("target sent a bad PDU")
            {
                return Some(pdu);
            }
            match tokio::time::timeout(deadline, self.stream.read_buf(&mut self.buf)).await {
                Err(_) => panic!("target neither answered nor closed within {deadline:?}"),
                Ok(Ok(0)) | Ok(Err(_)) => return None,
                Ok(Ok(_)) => {}
            }
        }
    }

    /// The target must send a C2HTermReq with `fes`, then close.
    pub async fn expect_termination(&mut self, expected_fes: u16) -> TermReq {
        let term = match self.next().await {
            Some(Pdu::C2HTermReq(term)) => term,
            other => panic!("expected C2HTermReq (FES {expected_fes}), got {other:?}"),
        };
        assert_eq!(term.fes, expected_fes, "FES of {term:?}");
        assert!(
            self.next().await.is_none(),
            "connection closed after C2HTermReq"
        );
        self.expect_graceful_close().await;
        term
    }

    /// After the target's FIN (seen as end of stream), what the host still sends is taken and
    /// dropped, not answered with a reset: a reset makes the Linux host's next send fail with
    /// EPIPE, and the process that submitted the I/O gets a SIGPIPE. Two sends, so that the
    /// second would meet the reset the first provoked; then the host closes and reads the end.
    pub async fn expect_graceful_close(&mut self) {
        let capsule = capsule_bytes(self.digests);
        for _ in 0..2 {
            self.stream
                .write_all(&capsule)
                .await
                .expect("the target reads on after its FIN: no reset");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.stream.shutdown().await.unwrap();
        let mut rest = Vec::new();
        let n = self
            .stream
            .read_to_end(&mut rest)
            .await
            .expect("a clean end of stream, not a reset");
        assert_eq!(n, 0, "nothing after the FIN");
    }

    /// Admin Connect to `subnqn` as a new random host; returns the CNTLID.
    pub async fn admin_connect(&mut self, subnqn: &str) -> u16 {
        let host = HostIdentity::random();
        match self.admin_connect_as(subnqn, Some(&host.nqn)).await {
            resp if resp.status.is_success() => resp.dw0() as u16,
            other => panic!("admin Connect failed: {other:?}"),
        }
    }

    /// Admin Connect (CID 1) to `subnqn` as `hostnqn` (None: the field left empty, as SPDK's
    /// host sends it by default); returns the completion.
    pub async fn admin_connect_as(&mut self, subnqn: &str, hostnqn: Option<&str>) -> Cqe {
        self.connect_queue(subnqn, hostnqn, 0, 0xFFFF).await
    }

    /// Connect (CID 1) of queue `qid` to controller `cntlid` (0xFFFF for a new one).
    pub async fn connect_queue(
        &mut self,
        subnqn: &str,
        hostnqn: Option<&str>,
        qid: u16,
        cntlid: u16,
    ) -> Cqe {
        self.connect_queue_with(subnqn, hostnqn, qid, cntlid, 0)
            .await
    }

    /// `connect_queue` with these Connect attributes (CATTR).
    pub async fn connect_queue_with(
        &mut self,
        subnqn: &str,
        hostnqn: Option<&str>,
        qid: u16,
        cntlid: u16,
        cattr: u8,
    ) -> Cqe {
        self.connect_queue_kato(subnqn, hostnqn, qid, cntlid, cattr, 0)
            .await
    }

    /// `connect_queue_with` and this KATO (ms).
    pub async fn connect_queue_kato(
        &mut self,
        subnqn: &str,
        hostnqn: Option<&str>,
        qid: u16,
        cntlid: u16,
        cattr: u8,
        kato: u32,
    ) -> Cqe {
        let data = ConnectData {
            host_id: [0x5d; 16],
            cntlid,
            subnqn: Nqn::new(subnqn).unwrap(),
            hostnqn: hostnqn.map(|h| Nqn::new(h).unwrap()),
        };
        let mut sqe = FabricsCommand::Connect {
            recfmt: 0,
            qid,
            sqsize: 31,
            cattr,
            kato,
        }
        .to_sqe(1);
        sqe.set_sgl(&SglDescriptor::DataBlockOffset {
            offset: 0,
            length: 1024,
        });
        let data = Bytes::copy_from_slice(&data.to_bytes()[..]);
        self.send(Pdu::CapsuleCmd(CapsuleCmd { sqe, data })).await;
        match self.next().await {
            Some(Pdu::CapsuleResp(resp)) => resp.cqe,
            other => panic!("no answer to Connect: {other:?}"),
        }
    }

    /// Sends a command without data (SGL: none) and returns the next completion.
    pub async fn command(&mut self, sqe: Sqe) -> Cqe {
        self.send_command(sqe).await;
        self.next_completion().await
    }

    /// Sends a command with `data` in the capsule and returns the next completion.
    #[allow(dead_code)]
    pub async fn command_with_data(&mut self, mut sqe: Sqe, data: Bytes) -> Cqe {
        sqe.set_sgl(&SglDescriptor::DataBlockOffset {
            offset: 0,
            length: data.len() as u32,
        });
        self.send(Pdu::CapsuleCmd(CapsuleCmd { sqe, data })).await;
        self.next_completion().await
    }

    /// Sends a command that returns up to `len` bytes (C2HData) and collects them with its
    /// completion (a SUCCESS-flagged last C2HData stands for it).
    #[allow(dead_code)]
    pub async fn command_reading(&mut self, mut sqe: Sqe, len: u32) -> (Cqe, BytesMut) {
        sqe.set_sgl(&SglDescriptor::TransportDataBlock { length: len });
        let cid = sqe.cid;
        self.send(Pdu::CapsuleCmd(CapsuleCmd {
            sqe,
            data: Bytes::new(),
        }))
        .await;
        let mut data = BytesMut::new();
        loop {
            match self.next().await {
                Some(Pdu::C2HData(d)) => {
                    data.extend_from_slice(&d.data);
                    if d.success {
                        let cqe = Cqe {
                            cid,
                            ..Cqe::default()
                        };
                        return (cqe, data);
                    }
                }
                Some(Pdu::CapsuleResp(resp)) => return (resp.cqe, data),
                other => panic!("expected data or a completion, got {other:?}"),
            }
        }
    }

    /// Sends a command without data (SGL: none).
    pub async fn send_command(&mut self, mut sqe: Sqe) {
        sqe.set_sgl(&SglDescriptor::NONE_TCP);
        self.send(Pdu::CapsuleCmd(CapsuleCmd {
            sqe,
            data: Bytes::new(),
        }))
        .await;
    }

    /// The next completion (panics on any other PDU or a close).
    pub async fn next_completion(&mut self) -> Cqe {
        match self.next().await {
            Some(Pdu::CapsuleResp(resp)) => resp.cqe,
            other => panic!("expected a completion, got {other:?}"),
        }
    }

    /// Property Set CC.EN=1 (with the IOSQES/IOCQES the kernel host sets); asserts success.
    pub async fn enable_controller(&mut self) {
        let mut sqe = FabricsCommand::PropertySet {
            size8: false,
            offset: 0x14,
            value: 0x0046_0001,
        }
        .to_sqe(2);
        sqe.set_sgl(&SglDescriptor::NONE_TCP);
        self.send(Pdu::CapsuleCmd(CapsuleCmd {
            sqe,
            data: Bytes::new(),
        }))
        .await;
        assert!(
            matches!(self.next().await, Some(Pdu::CapsuleResp(r)) if r.cqe.status.is_success())
        );
    }
}

/// A command capsule without data, as bytes (to be corrupted by the test).
pub fn capsule_bytes(digests: Digests) -> BytesMut {
    let mut sqe = AdminCommand::KeepAlive.to_sqe(3);
    sqe.set_sgl(&SglDescriptor::NONE_TCP);
    let mut out = BytesMut::new();
    Pdu::CapsuleCmd(CapsuleCmd {
        sqe,
        data: Bytes::new(),
    })
    .encode(digests, &mut out);
    out
}
