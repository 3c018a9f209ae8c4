//! The userspace host against an in-process fabrikd: bring-up, admin commands, and I/O that is
//! verified byte for byte, over every drive, many queues, both data paths (in-capsule and R2T)
//! and every digest combination; data survives a target restart.

mod common;

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use common::raw::RawConn;
use common::*;
use fabrik_initiator::proto::fabrics::CATTR_DISABLE_SQ_FLOW;
use fabrik_initiator::proto::nvme::features::fid;
use fabrik_initiator::proto::nvme::identify::NsDescriptor;
use fabrik_initiator::proto::nvme::io::IoCommand;
use fabrik_initiator::proto::tcp::{CapsuleCmd, Digests, Pdu};
use fabrik_initiator::proto::SglDescriptor;
use fabrik_initiator::Controller;
use fabrik_initiator::HostIdentity;
use fabrik_target::backend::BackendKind;
use tokio::task::JoinSet;

const MIB: usize = 1 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bring_up_and_admin_commands() {
    let dir = tempfile::tempdir().unwrap();
    let target = start(config(dir.path(), BackendKind::Ram, 2, 64 << 20)).await;
    let nqn = &nqns(&target)[0];
    let ctrl = Controller::connect(options(addr(&target), nqn))
        .await
        .unwrap();

    let id = ctrl.identity();
    assert_eq!(id.cntlid, ctrl.cntlid());
    assert_eq!(&id.subnqn, nqn);
    assert_eq!(id.cntrltype, 1, "an I/O controller");
    assert!(id.kas > 0 && id.maxcmd > 0 && id.ioccsz >= 4);
    assert_eq!(ctrl.identify_controller().await.unwrap(), *id);
    assert!(ctrl.cap().css_nvm);
    assert!(ctrl.version() >= 0x0001_0300, "VS {:#x}", ctrl.version());
    assert_eq!(ctrl.io_queue_count(), 1);

    assert_eq!(ctrl.active_namespaces().await.unwrap(), vec![1]);
    let ns = ctrl.identify_namespace(1).await.unwrap();
    assert_eq!(ns.nsze, (64 << 20) / 4096);
    assert_eq!(ns.ncap, ns.nsze);
    assert_eq!(ns.lba_size(), Some(4096));
    let descriptors = ctrl.ns_descriptors(1).await.unwrap();
    assert!(
        descriptors
            .iter()
            .any(|d| matches!(d, NsDescriptor::Nguid(_) | NsDescriptor::Uuid(_))),
        "{descriptors:?}"
    );
    ctrl.smart_log().await.unwrap();
    let kato = ctrl
        .get_features(fid::KEEP_ALIVE_TIMER, 0, 0)
        .await
        .unwrap();
    assert_eq!(kato, ctrl.options().kato_ms);
    ctrl.keep_alive().await.unwrap();
    ctrl.shutdown().await.unwrap();
    target.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_drive_keeps_its_own_data() {
    let dir = tempfile::tempdir().unwrap();
    let target = start(config(dir.path(), BackendKind::File, 24, 1 << 30)).await;
    let nqns = nqns(&target);
    assert_eq!(nqns.len(), 24);
    let mut controllers = Vec::new();
    for nqn in &nqns {
        controllers.push(
            Controller::connect(options(addr(&target), nqn))
                .await
                .unwrap(),
        );
    }
    // The same LBAs on every drive, different data per drive: aliasing would show.
    let data = |drive: usize, lba: u64| random_data(64 * 1024, (drive as u64) << 32 | lba);
    for (drive, ctrl) in controllers.iter().enumerate() {
        for lba in [0, 1000, (1 << 18) - 16] {
            ctrl.write(1, lba, data(drive, lba), false).await.unwrap();
        }
    }
    for (drive, ctrl) in controllers.iter().enumerate() {
        for lba in [0, 1000, (1 << 18) - 16] {
            let read = ctrl.read(1, lba, 16).await.unwrap();
            assert_same_data(
                &read,
                &data(drive, lba),
                &format!("drive {drive} LBA {lba}"),
            );
        }
    }
    for ctrl in controllers {
        ctrl.shutdown().await.unwrap();
    }
    target.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_queues_with_64_commands_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let target = start(config(dir.path(), BackendKind::File, 1, 1 << 30)).await;
    let mut opts = options(addr(&target), &nqns(&target)[0]);
    opts.io_queues = 4;
    opts.queue_size = 32;
    let ctrl = Arc::new(Controller::connect(opts).await.unwrap());
    assert_eq!(ctrl.io_queue_count(), 4);

    // 64 workers, 16 per queue, each with its own LBA range; all start together.
    let barrier = Arc::new(tokio::sync::Barrier::new(64));
    let mut workers = JoinSet::new();
    for worker in 0..64u64 {
        let (ctrl, barrier) = (ctrl.clone(), barrier.clone());
        workers.spawn(async move {
            barrier.wait().await;
            let queue = ctrl.io_queue(worker as usize % 4).unwrap();
            for round in 0..8u64 {
                let blocks = [1u32, 2, 8, 64][round as usize % 4]; // in-capsule and R2T sizes
                let slba = worker * 1024 + round * 64;
                let data = random_data(blocks as usize * 4096, worker << 8 | round);
                queue.write(1, slba, data.clone(), false).await.unwrap();
                let read = queue.read(1, slba, blocks).await.unwrap();
                assert_same_data(&read, &data, &format!("worker {worker} round {round}"));
            }
        });
    }
    while let Some(result) = workers.join_next().await {
        result.unwrap();
    }
    Arc::into_inner(ctrl).unwrap().shutdown().await.unwrap();
    target.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_and_large_transfers() {
    let dir = tempfile::tempdir().unwrap();
    let target = start(config(dir.path(), BackendKind::File, 1, 1 << 30)).await;
    let nqn = nqns(&target)[0].clone();
    let ctrl = Controller::connect(options(addr(&target), &nqn))
        .await
        .unwrap();
    let in_capsule = ctrl.identity().ioccsz as usize * 16 - 64;
    assert!(in_capsule >= 4096, "4 KiB writes go in-capsule");

    // 4 KiB in-capsule; the largest in-capsule write; 1 MiB (one R2T, one H2CData with the
    // target's MAXH2CDATA); 4 MiB (split by MDTS into several commands).
    for (i, len) in [4096, in_capsule, MIB, 4 * MIB].into_iter().enumerate() {
        let data = random_data(len, i as u64);
        let slba = i as u64 * 2048;
        ctrl.write(1, slba, data.clone(), false).await.unwrap();
        let read = ctrl.read(1, slba, (len / 4096) as u32).await.unwrap();
        assert_same_data(&read, &data, &format!("{len}-byte transfer"));
    }
    ctrl.shutdown().await.unwrap();

    // 1 MiB in 64 KiB H2CData PDUs: the target reassembles one R2T's data from many PDUs.
    let mut opts = options(addr(&target), &nqn);
    opts.h2c_data_limit = Some(64 * 1024);
    let ctrl = Controller::connect(opts).await.unwrap();
    let data = random_data(MIB, 99);
    ctrl.write(1, 100_000, data.clone(), true).await.unwrap();
    let read = ctrl.read(1, 100_000, (MIB / 4096) as u32).await.unwrap();
    assert_same_data(&read, &data, "1 MiB written in 16 H2CData PDUs");
    ctrl.shutdown().await.unwrap();
    target.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_digest_combination() {
    let dir = tempfile::tempdir().unwrap();
    let target = start(config(dir.path(), BackendKind::Ram, 1, 64 << 20)).await;
    let nqn = nqns(&target)[0].clone();
    for (i, (header, data)) in [(false, false), (true, false), (false, true), (true, true)]
        .into_iter()
        .enumerate()
    {
        let mut opts = options(addr(&target), &nqn);
        opts.digests = Digests { header, data };
        opts.io_queues = 2;
        let ctrl = Controller::connect(opts)
            .await
            .unwrap_or_else(|e| panic!("digests {header}/{data}: {e}"));
        for (j, len) in [4096usize, 256 * 1024].into_iter().enumerate() {
            let payload = random_data(len, (i * 2 + j) as u64);
            let slba = (i * 2 + j) as u64 * 128;
            ctrl.write(1, slba, payload.clone(), false).await.unwrap();
            let read = ctrl.read(1, slba, (len / 4096) as u32).await.unwrap();
            assert_same_data(
                &read,
                &payload,
                &format!("header digest {header}, data digest {data}, {len} bytes"),
            );
            // Into a buffer of the caller's (large payloads are received straight into it).
            let mut buf = BytesMut::with_capacity(len);
            for round in 0..3 {
                buf = ctrl
                    .read_into(1, slba, (len / 4096) as u32, buf)
                    .await
                    .unwrap();
                let what = format!("read_into #{round}, digests {header}/{data}, {len} bytes");
                assert_same_data(&buf, &payload, &what);
            }
        }
        ctrl.identify_namespace(1).await.unwrap();
        ctrl.shutdown().await.unwrap();
    }
    target.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flush_write_zeroes_and_deallocate() {
    let dir = tempfile::tempdir().unwrap();
    let target = start(config(dir.path(), BackendKind::File, 1, 1 << 30)).await;
    let ctrl = Controller::connect(options(addr(&target), &nqns(&target)[0]))
        .await
        .unwrap();
    let data = random_data(16 * 4096, 5);
    ctrl.write(1, 10, data.clone(), false).await.unwrap();
    ctrl.flush(1).await.unwrap();
    ctrl.write_zeroes(1, 12, 4).await.unwrap();
    let read = ctrl.read(1, 10, 16).await.unwrap();
    let mut expected = data.to_vec();
    expected[2 * 4096..6 * 4096].fill(0);
    assert_same_data(&read, &expected, "after Write Zeroes");
    ctrl.deallocate(1, &[(10, 2), (20, 4)]).await.unwrap();
    ctrl.shutdown().await.unwrap();
    target.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_survives_a_target_restart() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), BackendKind::File, 2, 1 << 30);
    let target = start(cfg.clone()).await;
    let nqn = nqns(&target)[1].clone();
    let ctrl = Controller::connect(options(addr(&target), &nqn))
        .await
        .unwrap();
    let small = random_data(4096, 1);
    let large = random_data(MIB, 2);
    ctrl.write(1, 7, small.clone(), false).await.unwrap();
    ctrl.write(1, 4096, large.clone(), false).await.unwrap();
    ctrl.shutdown().await.unwrap();
    target.shutdown().await;

    let target = start(cfg).await;
    assert!(nqns(&target).contains(&nqn));
    let ctrl = Controller::connect(options(addr(&target), &nqn))
        .await
        .unwrap();
    assert_same_data(
        &ctrl.read(1, 7, 1).await.unwrap(),
        &small,
        "4 KiB after restart",
    );
    assert_same_data(
        &ctrl.read(1, 4096, 256).await.unwrap(),
        &large,
        "1 MiB after restart",
    );
    ctrl.shutdown().await.unwrap();
    target.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn io_errors_carry_their_nvme_status() {
    use fabrik_initiator::proto::Status;
    let dir = tempfile::tempdir().unwrap();
    let target = start(config(dir.path(), BackendKind::Ram, 1, 64 << 20)).await;
    let ctrl = Controller::connect(options(addr(&target), &nqns(&target)[0]))
        .await
        .unwrap();
    let blocks = ctrl.identify_namespace(1).await.unwrap().nsze;
    let err = ctrl
        .write(1, blocks - 1, Bytes::from(vec![0u8; 8192]), false)
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(Status::LBA_OUT_OF_RANGE), "{err}");
    let err = ctrl.read(1, blocks, 1).await.unwrap_err();
    assert_eq!(err.status(), Some(Status::LBA_OUT_OF_RANGE), "{err}");
    assert!(err.to_string().contains("LBA Out of Range"), "{err}");
    // The queue is still fine after errors.
    ctrl.write(1, blocks - 1, Bytes::from(vec![7u8; 4096]), false)
        .await
        .unwrap();
    ctrl.shutdown().await.unwrap();
    target.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_holds_an_idle_controller() {
    let dir = tempfile::tempdir().unwrap();
    let target = start(config(dir.path(), BackendKind::Ram, 1, 64 << 20)).await;
    let mut opts = options(addr(&target), &nqns(&target)[0]);
    opts.kato_ms = 1000;
    let ctrl = Controller::connect(opts).await.unwrap();
    // Idle for three keep-alive timeouts: only the Keep Alive commands keep the target's timer
    // from expiring and tearing the association down.
    tokio::time::sleep(std::time::Duration::from_millis(3500)).await;
    ctrl.read(1, 0, 1).await.unwrap();
    ctrl.shutdown().await.unwrap();
    target.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sq_flow_control_disabled() {
    // Without SQ flow control the target may end a read with a SUCCESS-flagged C2HData and no
    // response capsule: the host must complete the command from that PDU alone.
    let dir = tempfile::tempdir().unwrap();
    let target = start(config(dir.path(), BackendKind::Ram, 1, 64 << 20)).await;
    for digests in [
        Digests::default(),
        Digests {
            header: true,
            data: true,
        },
    ] {
        let mut opts = options(addr(&target), &nqns(&target)[0]);
        opts.disable_sq_flow = true;
        opts.digests = digests;
        let ctrl = Controller::connect(opts).await.unwrap();
        for (i, blocks) in [1u32, 16, 256].into_iter().enumerate() {
            let data = random_data(blocks as usize * 4096, 40 + i as u64);
            ctrl.write(1, 1000 * i as u64, data.clone(), false)
                .await
                .unwrap();
            let read = ctrl.read(1, 1000 * i as u64, blocks).await.unwrap();
            assert_same_data(&read, &data, &format!("{blocks} blocks, {digests:?}"));
        }
        assert_eq!(
            ctrl.identify_namespace(1).await.unwrap().lba_size(),
            Some(4096)
        );
        ctrl.shutdown().await.unwrap();
    }
    target.shutdown().await;
}

/// With `c2h_success` a read ends with its SUCCESS-flagged C2HData and no response capsule,
/// whether or not the host disabled SQ flow control; without it, only when it did. On the wire,
/// as SPDK's and the Linux host's queues see it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c2h_success_ends_reads_without_a_response_capsule() {
    for c2h_success in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = config(dir.path(), BackendKind::Ram, 1, 64 << 20);
        cfg.c2h_success = c2h_success;
        let target = start(cfg).await;
        let nqn = &nqns(&target)[0];
        let host = HostIdentity::random();
        let mut admin = RawConn::connect(addr(&target), Digests::default()).await;
        let cntlid = admin.admin_connect_as(nqn, Some(&host.nqn)).await.dw0() as u16;
        admin.enable_controller().await;
        for disable_sq_flow in [false, true] {
            let mut io = RawConn::connect(addr(&target), Digests::default()).await;
            let cattr = if disable_sq_flow {
                CATTR_DISABLE_SQ_FLOW
            } else {
                0
            };
            // A queue ID of its own: the previous connection's queue may not be detached yet.
            let qid = 1 + disable_sq_flow as u16;
            let connected = io
                .connect_queue_with(nqn, Some(&host.nqn), qid, cntlid, cattr)
                .await;
            assert!(connected.status.is_success(), "{connected:?}");
            let mut read = IoCommand::Read {
                nsid: 1,
                slba: 0,
                nlb: 1,
                fua: false,
            }
            .to_sqe(7);
            read.set_sgl(&SglDescriptor::TransportDataBlock { length: 4096 });
            io.send(Pdu::CapsuleCmd(CapsuleCmd {
                sqe: read,
                data: Bytes::new(),
            }))
            .await;
            let what =
                format!("c2h_success {c2h_success}, SQ flow control disabled {disable_sq_flow}");
            let Some(Pdu::C2HData(data)) = io.next().await else {
                panic!("{what}: expected C2HData")
            };
            assert!(
                data.last && data.cccid == 7 && data.data.len() == 4096,
                "{what}"
            );
            let expect_success = c2h_success || disable_sq_flow;
            assert_eq!(data.success, expect_success, "{what}");
            let next = tokio::time::timeout(std::time::Duration::from_millis(300), io.next()).await;
            match next {
                Ok(Some(Pdu::CapsuleResp(r))) if !expect_success => {
                    assert!(r.cqe.status.is_success() && r.cqe.cid == 7, "{what}: {r:?}")
                }
                Err(_) if expect_success => {}
                other => panic!("{what}: after the data, {other:?}"),
            }
        }
        // A host of ours reads and verifies through either kind of answer.
        let ctrl = Controller::connect(options(addr(&target), nqn))
            .await
            .unwrap();
        let data = random_data(64 << 10, 9);
        ctrl.write(1, 64, data.clone(), false).await.unwrap();
        assert_same_data(&ctrl.read(1, 64, 16).await.unwrap(), &data, "read back");
        ctrl.shutdown().await.unwrap();
        target.shutdown().await;
    }
}

/// More write data in flight on one queue than the target's per-connection R2T budget (16 MiB):
/// every write still lands. (That the budget holds R2Ts back is asserted on the wire in
/// malformed.rs, `r2ts_are_bounded_by_the_budget`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_beyond_the_r2t_budget() {
    let dir = tempfile::tempdir().unwrap();
    let target = start(config(dir.path(), BackendKind::Ram, 1, 1 << 30)).await;
    let mut opts = options(addr(&target), &nqns(&target)[0]);
    opts.queue_size = 64;
    let ctrl = Arc::new(Controller::connect(opts).await.unwrap());
    let mut writers = JoinSet::new();
    for i in 0..48u64 {
        let ctrl = ctrl.clone();
        writers.spawn(async move {
            let data = random_data(1 << 20, 1000 + i);
            ctrl.write(1, i * 256, data.clone(), false).await.unwrap();
            (i, data)
        });
    }
    let mut written = Vec::new();
    while let Some(result) = writers.join_next().await {
        written.push(result.unwrap());
    }
    for (i, data) in written {
        let read = ctrl.read(1, i * 256, 256).await.unwrap();
        assert_same_data(&read, &data, &format!("1 MiB write {i}"));
    }
    Arc::into_inner(ctrl).unwrap().shutdown().await.unwrap();
    target.shutdown().await;
}

/// A subsystem configured with two drives shows them as namespaces 1 and 2, each with its data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subsystem_with_two_namespaces() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), BackendKind::Ram, 3, 64 << 20);
    cfg.subsystem_specs = vec![fabrik_target::config::SubsystemSpec {
        nqn: "nqn.2024-01.io.fabrik:testbox:pair".into(),
        drives: vec!["02".into(), "00".into()],
        hosts: None,
        model: Some("fabrik pair".into()),
    }];
    let target = start(cfg).await;
    assert_eq!(
        target.subsystem_nqns(),
        vec!["nqn.2024-01.io.fabrik:testbox:pair".to_string()]
    );
    let ctrl = Controller::connect(options(addr(&target), "nqn.2024-01.io.fabrik:testbox:pair"))
        .await
        .unwrap();
    assert_eq!(ctrl.identity().model, "fabrik pair");
    assert_eq!(ctrl.active_namespaces().await.unwrap(), vec![1, 2]);
    let (a, b) = (random_data(4096, 1), random_data(4096, 2));
    ctrl.write(1, 5, a.clone(), false).await.unwrap();
    ctrl.write(2, 5, b.clone(), false).await.unwrap();
    assert_same_data(&ctrl.read(1, 5, 1).await.unwrap(), &a, "namespace 1");
    assert_same_data(&ctrl.read(2, 5, 1).await.unwrap(), &b, "namespace 2");
    let state = target
        .state()
        .subsystem("nqn.2024-01.io.fabrik:testbox:pair")
        .unwrap();
    assert_eq!(
        state.namespace(1).unwrap().drive_id,
        "02",
        "namespaces follow the configured order"
    );
    ctrl.shutdown().await.unwrap();
    target.shutdown().await;
}

/// Commands started on a completion queue (`IoQueue::start_write` / `start_read_into`), more
/// than the queue's depth at once: every write lands, every read brings its own blocks back
/// under its own tag, into the buffer it was given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_started_on_a_completion_queue_move_their_own_data() {
    use fabrik_initiator::transport::{CompletionQueue, Tagged};
    let dir = tempfile::tempdir().unwrap();
    let target = start(config(dir.path(), BackendKind::Ram, 1, 64 << 20)).await;
    let mut opts = options(addr(&target), &nqns(&target)[0]);
    opts.queue_size = 8;
    let ctrl = Controller::connect(opts).await.unwrap();
    let lba_size = ctrl.lba_size(1).await.unwrap() as usize;
    let block = |lba: u64| -> Vec<u8> {
        (0..lba_size)
            .map(|i| (i as u8).wrapping_mul(7) ^ lba as u8)
            .collect()
    };
    const BLOCKS: u64 = 40; // beyond the depth: the rest wait in the queue for slots
    let answers = CompletionQueue::new();
    let queue = ctrl.io_queue(0).unwrap();
    for lba in 0..BLOCKS {
        let data = Bytes::from(block(lba));
        assert!(queue
            .start_write(1, lba, data, false, answers.to(lba))
            .is_ok());
    }
    let mut got: Vec<Tagged> = Vec::new();
    while got.len() < BLOCKS as usize {
        answers.take(&mut got).await;
    }
    for t in got.drain(..) {
        t.result
            .unwrap_or_else(|e| panic!("write of LBA {}: {e}", t.tag));
    }
    for lba in 0..BLOCKS {
        let buf = BytesMut::with_capacity(lba_size);
        assert!(queue
            .start_read_into(1, lba, 1, buf, answers.to(lba))
            .is_ok());
    }
    while got.len() < BLOCKS as usize {
        answers.take(&mut got).await;
    }
    got.sort_by_key(|t| t.tag);
    for (lba, t) in got.into_iter().enumerate() {
        assert_eq!(t.tag, lba as u64);
        let data = t.result.unwrap().data;
        assert_eq!(&data[..], &block(lba as u64)[..], "LBA {lba}");
    }
    ctrl.shutdown().await.unwrap();
    target.shutdown().await;
}
