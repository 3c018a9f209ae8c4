//! Malformed input: broken PDUs over raw sockets must end that connection with a C2HTermReq
//! naming the fault (FES, FEI) and a close; bad commands must get the right NVMe status. In every
//! case another host's I/O loop on other connections keeps going and verifying throughout.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use common::raw::{capsule_bytes, RawConn};
use common::*;
use fabrik_initiator::proto::fabrics::nqn::Nqn;
use fabrik_initiator::proto::fabrics::{ConnectData, FabricsCommand};
use fabrik_initiator::proto::nvme::admin::{cns, AdminCommand};
use fabrik_initiator::proto::nvme::io::IoCommand;
use fabrik_initiator::proto::tcp::{fes, pdu_type, CapsuleCmd, Digests, H2CData, IcReq, Pdu};
use fabrik_initiator::proto::{SglDescriptor, Sqe, Status};
use fabrik_initiator::transport::{TcpQueue, TcpQueueConfig};
use fabrik_initiator::{Controller, HostError, HostIdentity};
use fabrik_target::backend::BackendKind;
use fabrik_target::Target;
use tokio::io::AsyncWriteExt;

/// A target with two drives: drive 0 is the victim of the test, drive 1 serves the background
/// host whose I/O must go on undisturbed.
struct Setup {
    _dir: tempfile::TempDir,
    target: Target,
    addr: SocketAddr,
    nqn: String,
    background: BackgroundIo,
    rounds_before: u64,
}

async fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let target = start(config(dir.path(), BackendKind::Ram, 2, 64 << 20)).await;
    let addr = addr(&target);
    let nqns = nqns(&target);
    let background = BackgroundIo::start(addr, &nqns[1]).await;
    let rounds_before = background.rounds();
    Setup {
        _dir: dir,
        target,
        addr,
        nqn: nqns[0].clone(),
        background,
        rounds_before,
    }
}

impl Setup {
    /// The background host kept going and saw no error; the target still takes new hosts.
    async fn finish(self) {
        let ctrl = Controller::connect(options(self.addr, &self.nqn))
            .await
            .expect("target still accepts hosts");
        let data = random_data(8192, 1);
        ctrl.write(1, 0, data.clone(), false).await.unwrap();
        assert_same_data(
            &ctrl.read(1, 0, 2).await.unwrap(),
            &data,
            "fresh host after the test",
        );
        ctrl.shutdown().await.unwrap();
        self.background.finish(self.rounds_before).await;
        self.target.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_pdu_then_close() {
    let s = setup().await;
    // Half a command capsule, then the host goes away.
    let mut conn = RawConn::connect(s.addr, Digests::default()).await;
    conn.send_raw(&capsule_bytes(Digests::default())[..30])
        .await;
    conn.stream.shutdown().await.unwrap();
    assert!(
        conn.next().await.is_none(),
        "target closes without answering"
    );
    // Half an ICReq, then close.
    let mut conn = RawConn::open(s.addr).await;
    let mut icreq = BytesMut::new();
    Pdu::IcReq(IcReq {
        pfv: 0,
        hpda: 0,
        digests: Digests::default(),
        maxr2t: 0,
    })
    .encode(Digests::default(), &mut icreq);
    conn.send_raw(&icreq[..50]).await;
    conn.stream.shutdown().await.unwrap();
    assert!(conn.next().await.is_none());
    s.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_plen() {
    let s = setup().await;
    let mut conn = RawConn::connect(s.addr, Digests::default()).await;
    let mut pdu = capsule_bytes(Digests::default());
    pdu[3] = 72; // PDO: data would follow the header...
    pdu[4..8].copy_from_slice(&0x7FFF_FFF0u32.to_le_bytes()); // ...2 GiB of it
    conn.send_raw(&pdu).await;
    let term = conn.expect_termination(fes::INVALID_HEADER_FIELD).await;
    assert_eq!(term.fei, 4, "FEI points at PLEN");
    assert_eq!(
        &term.header[..8],
        &pdu[..8],
        "the offending header is copied back"
    );
    s.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_hlen() {
    let s = setup().await;
    let mut conn = RawConn::connect(s.addr, Digests::default()).await;
    let mut pdu = capsule_bytes(Digests::default());
    pdu[2] = 24;
    conn.send_raw(&pdu).await;
    let term = conn.expect_termination(fes::INVALID_HEADER_FIELD).await;
    assert_eq!(term.fei, 2, "FEI points at HLEN");
    s.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_header_digest() {
    let s = setup().await;
    let digests = Digests {
        header: true,
        data: false,
    };
    let mut conn = RawConn::connect(s.addr, digests).await;
    let mut pdu = capsule_bytes(digests);
    pdu[72] ^= 0x5A; // first byte of the header digest
    conn.send_raw(&pdu).await;
    conn.expect_termination(fes::HEADER_DIGEST_ERROR).await;
    s.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_pdu_type() {
    let s = setup().await;
    for ty in [0x0A, 0x7F, pdu_type::CAPSULE_RESP] {
        let mut conn = RawConn::connect(s.addr, Digests::default()).await;
        let mut pdu = [0u8; 24];
        pdu[0] = ty;
        pdu[2] = 24;
        pdu[4] = 24;
        conn.send_raw(&pdu).await;
        let term = conn.expect_termination(fes::INVALID_HEADER_FIELD).await;
        assert_eq!(term.fei, 0, "FEI points at the PDU type ({ty:#04x})");
    }
    s.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_data_for_an_unknown_command() {
    let s = setup().await;
    let mut conn = RawConn::connect(s.addr, Digests::default()).await;
    conn.admin_connect(&s.nqn).await;
    let data = Bytes::from(vec![0u8; 4096]);
    conn.send(Pdu::H2CData(H2CData {
        cccid: 77,
        ttag: 77,
        datao: 0,
        last: true,
        data,
    }))
    .await;
    let term = conn.expect_termination(fes::INVALID_HEADER_FIELD).await;
    assert!(
        matches!(term.fei, 8 | 10),
        "FEI points at CCCID or TTAG: {}",
        term.fei
    );
    s.finish().await;
}

/// A queue that has done ICReq/ICResp but no Connect.
async fn unconnected_queue(addr: SocketAddr, qid: u16) -> TcpQueue {
    TcpQueue::connect(addr, TcpQueueConfig::new(qid, 32, Digests::default()))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_before_connect() {
    let s = setup().await;
    // NVMe-oF: until Connect succeeds, any other command fails with Command Sequence Error.
    let queue = unconnected_queue(s.addr, 0).await;
    let identify = AdminCommand::Identify {
        nsid: 0,
        cns: cns::CONTROLLER,
        cntid: 0,
        csi: 0,
    }
    .to_sqe(0);
    let completion = queue.submit(identify, None, 4096, 8192).await.unwrap();
    assert_eq!(completion.cqe.status, Status::COMMAND_SEQUENCE_ERROR);
    let property_get = FabricsCommand::PropertyGet {
        size8: true,
        offset: 0,
    }
    .to_sqe(0);
    let completion = queue.submit(property_get, None, 0, 8192).await.unwrap();
    assert_eq!(completion.cqe.status, Status::COMMAND_SEQUENCE_ERROR);
    let read = IoCommand::Read {
        nsid: 1,
        slba: 0,
        nlb: 1,
        fua: false,
    }
    .to_sqe(0);
    let completion = queue.submit(read, None, 4096, 8192).await.unwrap();
    assert_eq!(completion.cqe.status, Status::COMMAND_SEQUENCE_ERROR);
    assert!(
        queue.closed().is_none(),
        "a command error does not end the connection"
    );
    s.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn io_on_an_unknown_namespace() {
    let s = setup().await;
    let ctrl = Controller::connect(options(s.addr, &s.nqn)).await.unwrap();
    let queue = ctrl.io_queue(0).unwrap();
    for nsid in [0, 2, 0xFFFF_FFFF] {
        let read = IoCommand::Read {
            nsid,
            slba: 0,
            nlb: 1,
            fua: false,
        }
        .to_sqe(0);
        let err = queue.submit(read, None, 4096).await.unwrap_err();
        assert_eq!(
            err.status(),
            Some(Status::INVALID_NAMESPACE),
            "NSID {nsid:#x}: {err}"
        );
        let write = IoCommand::Write {
            nsid,
            slba: 0,
            nlb: 1,
            fua: false,
        }
        .to_sqe(0);
        let err = queue
            .submit(write, Some(random_data(4096, 3)), 0)
            .await
            .unwrap_err();
        assert_eq!(
            err.status(),
            Some(Status::INVALID_NAMESPACE),
            "NSID {nsid:#x}: {err}"
        );
    }
    ctrl.read(1, 0, 1).await.unwrap();
    ctrl.shutdown().await.unwrap();
    s.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lba_out_of_range() {
    let s = setup().await;
    let ctrl = Controller::connect(options(s.addr, &s.nqn)).await.unwrap();
    let nsze = ctrl.identify_namespace(1).await.unwrap().nsze;
    let queue = ctrl.io_queue(0).unwrap();
    for (slba, nlb) in [(nsze, 1), (nsze - 1, 2), (u64::MAX, 1)] {
        let read = IoCommand::Read {
            nsid: 1,
            slba,
            nlb,
            fua: false,
        }
        .to_sqe(0);
        let err = queue
            .submit(read, None, nlb as usize * 4096)
            .await
            .unwrap_err();
        assert_eq!(
            err.status(),
            Some(Status::LBA_OUT_OF_RANGE),
            "read {slba}+{nlb}: {err}"
        );
        // In-capsule and through R2T.
        for blocks_of_data in [nlb, 64] {
            let write = IoCommand::Write {
                nsid: 1,
                slba,
                nlb: blocks_of_data,
                fua: false,
            }
            .to_sqe(0);
            let data = random_data(blocks_of_data as usize * 4096, 4);
            let err = queue.submit(write, Some(data), 0).await.unwrap_err();
            assert_eq!(
                err.status(),
                Some(Status::LBA_OUT_OF_RANGE),
                "write {slba}+{blocks_of_data}: {err}"
            );
        }
    }
    let err = ctrl.write_zeroes(1, nsze, 1).await.unwrap_err();
    assert_eq!(err.status(), Some(Status::LBA_OUT_OF_RANGE), "{err}");
    ctrl.read(1, nsze - 1, 1).await.unwrap();
    ctrl.shutdown().await.unwrap();
    s.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_opcode() {
    let s = setup().await;
    let ctrl = Controller::connect(options(s.addr, &s.nqn)).await.unwrap();
    for opcode in [0x80u8, 0x7C, 0xFC] {
        let sqe = Sqe {
            opcode,
            nsid: 1,
            ..Sqe::default()
        };
        let err = ctrl.submit_io(1, sqe, None, 0).await.unwrap_err();
        assert_eq!(
            err.status(),
            Some(Status::INVALID_OPCODE),
            "I/O opcode {opcode:#04x}: {err}"
        );
    }
    for opcode in [0x80u8, 0xC0, 0x3C] {
        let sqe = Sqe {
            opcode,
            ..Sqe::default()
        };
        let err = ctrl.submit_admin(sqe, None, 0).await.unwrap_err();
        assert_eq!(
            err.status(),
            Some(Status::INVALID_OPCODE),
            "admin opcode {opcode:#04x}: {err}"
        );
    }
    ctrl.keep_alive().await.unwrap();
    ctrl.read(1, 0, 1).await.unwrap();
    ctrl.shutdown().await.unwrap();
    s.finish().await;
}

/// Only a command that takes data may carry some in its capsule: an Identify (data goes to the
/// host) with in-capsule data is an Invalid Field, and the queue goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_capsule_data_on_a_command_that_returns_data() {
    let s = setup().await;
    let ctrl = Controller::connect(options(s.addr, &s.nqn)).await.unwrap();
    let sqe = AdminCommand::Identify {
        cns: cns::CONTROLLER,
        cntid: 0,
        nsid: 0,
        csi: 0,
    }
    .to_sqe(0);
    let err = ctrl
        .submit_admin(sqe, Some(Bytes::from(vec![0u8; 4096])), 0)
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(Status::INVALID_FIELD), "{err}");
    ctrl.keep_alive().await.unwrap();
    ctrl.read(1, 0, 1).await.unwrap();
    ctrl.shutdown().await.unwrap();
    s.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_to_an_unknown_nqn() {
    let s = setup().await;
    let err = Controller::connect(options(s.addr, "nqn.2024-01.io.fabrik:testbox:drive-99"))
        .await
        .err()
        .unwrap();
    match &err {
        HostError::Status {
            status,
            result,
            qid: 0,
            ..
        } => {
            assert_eq!(*status, Status::CONNECT_INVALID_PARAMETERS, "{err}");
            assert_eq!(
                *result,
                1 << 16 | 256,
                "IATTR 1 (connect data), IPO 256 (SUBNQN)"
            );
        }
        other => panic!("expected Connect Invalid Parameters, got {other}"),
    }
    s.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn io_queue_connect_with_a_wrong_cntlid() {
    let s = setup().await;
    let host = HostIdentity::random();
    let ctrl = Controller::connect(options(s.addr, &s.nqn).with_host(&host))
        .await
        .unwrap();
    let connect_io = |cntlid: u16, hostnqn: &str| {
        let data = ConnectData {
            host_id: host.id,
            cntlid,
            subnqn: Nqn::new(&s.nqn).unwrap(),
            hostnqn: Some(Nqn::new(hostnqn).unwrap()),
        };
        (
            FabricsCommand::Connect {
                recfmt: 0,
                qid: 1,
                sqsize: 31,
                cattr: 0,
                kato: 0,
            }
            .to_sqe(0),
            data,
        )
    };
    let stranger = HostIdentity::random().nqn;
    let cases = [
        (ctrl.cntlid().wrapping_add(1), host.nqn.as_str()),
        (0xFFFF, host.nqn.as_str()),
        (ctrl.cntlid(), stranger.as_str()), // the right controller, but not this host's
    ];
    for (cntlid, hostnqn) in cases {
        let queue = unconnected_queue(s.addr, 1).await;
        let (sqe, data) = connect_io(cntlid, hostnqn);
        let data = Bytes::copy_from_slice(&data.to_bytes()[..]);
        let completion = queue.submit(sqe, Some(data), 0, 0).await.unwrap();
        assert_eq!(
            completion.cqe.status,
            Status::CONNECT_INVALID_PARAMETERS,
            "cntlid {cntlid:#x}"
        );
        assert_eq!(
            completion.cqe.dw0(),
            1 << 16 | 16,
            "IATTR 1 (connect data), IPO 16 (CNTLID)"
        );
    }
    // The real controller is untouched.
    ctrl.read(1, 0, 1).await.unwrap();
    ctrl.shutdown().await.unwrap();
    s.finish().await;
}

/// A host asking to write more than the per-connection R2T budget (16 MiB) at once gets R2Ts
/// only up to the budget; the rest follow as data comes in. Keeps one host from making the
/// target hold unbounded write buffers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r2ts_are_bounded_by_the_budget() {
    let s = setup().await;
    let mut conn = RawConn::connect(s.addr, Digests::default()).await;
    conn.admin_connect(&s.nqn).await;
    conn.enable_controller().await;

    // 20 commands each asking to send 1 MiB (Set Features with data; the feature is refused
    // once the data is in, which does not matter here).
    for cid in 10..30u16 {
        let mut sqe = AdminCommand::SetFeatures {
            nsid: 0,
            fid: 0x0E,
            save: false,
            cdw11: 0,
            cdw12: 0,
            cdw13: 0,
            cdw14: 0,
        }
        .to_sqe(cid);
        sqe.set_sgl(&SglDescriptor::TransportDataBlock { length: 1 << 20 });
        conn.send(Pdu::CapsuleCmd(CapsuleCmd {
            sqe,
            data: Bytes::new(),
        }))
        .await;
    }
    let mut r2ts = Vec::new();
    while let Ok(Some(pdu)) = tokio::time::timeout(Duration::from_millis(500), conn.next()).await {
        match pdu {
            Pdu::R2T(r) => r2ts.push(r),
            other => panic!("expected only R2Ts, got {other:?}"),
        }
    }
    assert_eq!(r2ts.len(), 16, "R2Ts for 16 MiB, the budget");
    assert!(r2ts.iter().all(|r| r.r2tl == 1 << 20 && r.r2to == 0));

    // Data for the first: its command completes and one more R2T goes out.
    let first = r2ts[0];
    conn.send(Pdu::H2CData(H2CData {
        cccid: first.cccid,
        ttag: first.ttag,
        datao: 0,
        last: true,
        data: Bytes::from(vec![0u8; 1 << 20]),
    }))
    .await;
    let (mut responses, mut more_r2ts) = (0, 0);
    while let Ok(Some(pdu)) = tokio::time::timeout(Duration::from_millis(500), conn.next()).await {
        match pdu {
            Pdu::CapsuleResp(r) => {
                assert_eq!(r.cqe.cid, first.cccid);
                responses += 1;
            }
            Pdu::R2T(r) => {
                assert!(
                    !r2ts.iter().any(|old| old.cccid == r.cccid),
                    "a new command's R2T"
                );
                more_r2ts += 1;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!((responses, more_r2ts), (1, 1));
    drop(conn);
    s.finish().await;
}

/// A command whose CID is already in flight is answered Command ID Conflict, every time, and
/// the command that holds the CID carries on to its own completion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cid_conflicts_leave_the_first_command_in_flight() {
    let s = setup().await;
    let mut conn = RawConn::connect(s.addr, Digests::default()).await;
    conn.admin_connect(&s.nqn).await;
    conn.enable_controller().await;

    // CID 5 waits for its data (R2T), so it stays in flight.
    let with_data = |cid| {
        let mut sqe = AdminCommand::SetFeatures {
            nsid: 0,
            fid: 0x0E,
            save: false,
            cdw11: 0,
            cdw12: 0,
            cdw13: 0,
            cdw14: 0,
        }
        .to_sqe(cid);
        sqe.set_sgl(&SglDescriptor::TransportDataBlock { length: 4096 });
        Pdu::CapsuleCmd(CapsuleCmd {
            sqe,
            data: Bytes::new(),
        })
    };
    conn.send(with_data(5)).await;
    let Some(Pdu::R2T(r2t)) = conn.next().await else {
        panic!("expected an R2T for CID 5")
    };
    for _ in 0..2 {
        conn.send(with_data(5)).await;
        match conn.next().await {
            Some(Pdu::CapsuleResp(r)) => {
                assert_eq!(r.cqe.cid, 5);
                assert_eq!(r.cqe.status, Status::CID_CONFLICT);
            }
            other => panic!("expected Command ID Conflict, got {other:?}"),
        }
    }
    conn.send(Pdu::H2CData(H2CData {
        cccid: 5,
        ttag: r2t.ttag,
        datao: 0,
        last: true,
        data: Bytes::from(vec![0u8; 4096]),
    }))
    .await;
    match conn.next().await {
        Some(Pdu::CapsuleResp(r)) => {
            assert_eq!(r.cqe.cid, 5);
            assert_ne!(r.cqe.status, Status::CID_CONFLICT, "CID 5's own completion");
        }
        other => panic!("expected CID 5's completion, got {other:?}"),
    }
    drop(conn);
    s.finish().await;
}

/// A connection that does ICReq and then never Connects is closed after 10 s: it would
/// otherwise hold a descriptor for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_never_connects_is_closed() {
    let s = setup().await;
    let start = std::time::Instant::now();
    let mut idle = RawConn::connect(s.addr, Digests::default()).await;
    // A keep-alive before Connect is answered (Command Sequence Error), and does not count
    // as connecting.
    let cqe = idle.command(AdminCommand::KeepAlive.to_sqe(3)).await;
    assert_eq!(cqe.status, Status::COMMAND_SEQUENCE_ERROR);
    assert!(idle.next().await.is_none(), "closed by the target");
    let waited = start.elapsed();
    assert!(
        (Duration::from_secs(9)..Duration::from_secs(14)).contains(&waited),
        "closed after {waited:?}"
    );
    idle.expect_graceful_close().await;
    s.finish().await;
}

/// Not malformed input, but the same rule for how a connection ends: a stopping target sends
/// its FIN and reads on until the host closes too, so a host still sending meets no reset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_target_closes_with_a_fin_not_a_reset() {
    let dir = tempfile::tempdir().unwrap();
    let target = start(config(dir.path(), BackendKind::Ram, 1, 64 << 20)).await;
    let mut conn = RawConn::connect(addr(&target), Digests::default()).await;
    conn.admin_connect(&nqns(&target)[0]).await;
    conn.enable_controller().await;
    let stopping = tokio::spawn(target.shutdown());
    assert!(
        conn.next().await.is_none(),
        "the target closes the connection"
    );
    conn.expect_graceful_close().await;
    tokio::time::timeout(Duration::from_secs(10), stopping)
        .await
        .expect("the target stops once the host has closed")
        .unwrap();
}
