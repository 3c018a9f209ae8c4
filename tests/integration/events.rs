//! Asynchronous events and keep-alive: a namespace added to or removed from a subsystem reaches
//! a connected host as a Namespace Attribute Changed event with the Changed Namespace List; a
//! host that stops sending commands loses its controller after KATO; a change of the ANA
//! group's state reaches it as an ANA change notice, and I/O on an inaccessible path gets the
//! path-related status.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use fabrik_initiator::transport::tcp::{TcpQueue, TcpQueueConfig};
use fabrik_initiator::HostError;
use fabrik_proto::fabrics::nqn::Nqn;
use fabrik_proto::fabrics::{ConnectData, FabricsCommand};
use fabrik_proto::nvme::admin::AdminCommand;
use fabrik_proto::nvme::features::{aec, fid};
use fabrik_proto::nvme::log::{aen, ana_state, decode_changed_ns_list, lid, AnaLog};
use fabrik_proto::tcp::Digests;
use fabrik_proto::Status;
use fabrik_target::backend::ram::RamDrive;
use fabrik_target::backend::BackendKind;
use fabrik_target::model::Namespace;

const MIB: u64 = 1 << 20;

/// A one-drive RAM target, its subsystem, and a host connected to it.
async fn connected() -> (
    tempfile::TempDir,
    fabrik_target::Target,
    Arc<fabrik_target::controller::Subsystem>,
    fabrik_initiator::Controller,
) {
    let dir = tempfile::tempdir().unwrap();
    let target = common::start(common::config(dir.path(), BackendKind::Ram, 1, 64 * MIB)).await;
    let nqn = common::nqns(&target)[0].clone();
    let subsystem = target.state().subsystem(&nqn).unwrap();
    let ctrl = fabrik_initiator::Controller::connect(common::options(common::addr(&target), &nqn))
        .await
        .unwrap();
    (dir, target, subsystem, ctrl)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_changes_reach_the_host_as_events() {
    let (_dir, target, subsystem, ctrl) = connected().await;
    ctrl.set_features(fid::ASYNC_EVENT_CONFIG, 0, aec::NS_ATTR_NOTICES)
        .await
        .unwrap();
    let expected = aen::result(
        aen::TYPE_NOTICE,
        aen::NOTICE_NS_ATTR_CHANGED,
        lid::CHANGED_NS_LIST,
    ) as u64;

    // Add namespace 2 while an AER is outstanding.
    let aer = ctrl.submit_admin(AdminCommand::AsyncEventRequest.to_sqe(0), None, 0);
    let add = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let drive = Arc::new(RamDrive::new(32 * MIB, 4096).unwrap());
        subsystem.add_namespace(Arc::new(Namespace::new(2, "extra", drive, "testbox:extra")));
    };
    let (event, ()) = tokio::join!(aer, add);
    let event = event.unwrap();
    assert_eq!(event.cqe.status, Status::SUCCESS);
    assert_eq!(
        event.cqe.result, expected,
        "Namespace Attribute Changed notice"
    );
    let log = ctrl
        .get_log_page(lid::CHANGED_NS_LIST, 0xffff_ffff, 4096, 0)
        .await
        .unwrap();
    assert_eq!(decode_changed_ns_list(&log).unwrap(), vec![2]);
    let log = ctrl
        .get_log_page(lid::CHANGED_NS_LIST, 0xffff_ffff, 4096, 0)
        .await
        .unwrap();
    assert!(
        decode_changed_ns_list(&log).unwrap().is_empty(),
        "reading the log clears it"
    );
    assert_eq!(ctrl.active_namespaces().await.unwrap(), vec![1, 2]);
    assert_eq!(
        ctrl.identify_namespace(2).await.unwrap().nsze,
        32 * MIB / 4096
    );
    let data = common::random_data(8192, 2);
    ctrl.write(2, 10, data.clone(), false).await.unwrap();
    common::assert_same_data(&ctrl.read(2, 10, 2).await.unwrap(), &data, "namespace 2");

    // Remove it again: the next AER fires, I/O to it fails with Invalid Namespace.
    let aer = ctrl.submit_admin(AdminCommand::AsyncEventRequest.to_sqe(0), None, 0);
    let remove = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(subsystem.remove_namespace(2).is_some());
    };
    let (event, ()) = tokio::join!(aer, remove);
    assert_eq!(event.unwrap().cqe.result, expected);
    let log = ctrl
        .get_log_page(lid::CHANGED_NS_LIST, 0xffff_ffff, 4096, 0)
        .await
        .unwrap();
    assert_eq!(decode_changed_ns_list(&log).unwrap(), vec![2]);
    assert_eq!(ctrl.active_namespaces().await.unwrap(), vec![1]);
    match ctrl.read(2, 0, 1).await {
        Err(HostError::Status { status, .. }) => {
            assert!(status.same_code(Status::INVALID_NAMESPACE), "{status}")
        }
        other => panic!("read of a removed namespace: {other:?}"),
    }
    ctrl.shutdown().await.unwrap();
    target.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ana_state_change_reaches_the_host_and_gates_its_io() {
    let (_dir, target, _subsystem, ctrl) = connected().await;
    ctrl.set_features(fid::ASYNC_EVENT_CONFIG, 0, aec::ANA_CHANGE_NOTICES)
        .await
        .unwrap();
    let state = target.state().clone();
    let ana_log = || async {
        let page = ctrl.get_log_page(lid::ANA, 0xffff_ffff, 16 + 32 + 4 * 1024, 0);
        AnaLog::decode(&page.await.unwrap()).unwrap()
    };
    ctrl.write(1, 0, Bytes::from(vec![7u8; 4096]), false)
        .await
        .unwrap();

    let aer = ctrl.submit_admin(AdminCommand::AsyncEventRequest.to_sqe(0), None, 0);
    let change = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(state.set_ana_state(1, ana_state::INACCESSIBLE));
    };
    let (event, ()) = tokio::join!(aer, change);
    assert_eq!(
        event.unwrap().cqe.result,
        aen::result(aen::TYPE_NOTICE, aen::NOTICE_ANA_CHANGE, lid::ANA) as u64
    );
    // I/O on the path fails with a status the host may retry elsewhere; admin commands work.
    let err = ctrl.read(1, 0, 1).await.unwrap_err();
    assert_eq!(err.status(), Some(Status::ANA_INACCESSIBLE));
    assert!(
        !err.status().unwrap().is_dnr(),
        "no DNR: the host may retry on another path"
    );
    let log = ana_log().await;
    assert_eq!(log.chgcnt, 1);
    assert_eq!(
        (log.groups[0].state, log.groups[0].chgcnt),
        (ana_state::INACCESSIBLE, 1)
    );
    assert_eq!(log.groups[0].nsids, [1]);

    // The log was read (without RAE): the next change is told too, and I/O works again.
    let aer = ctrl.submit_admin(AdminCommand::AsyncEventRequest.to_sqe(0), None, 0);
    assert!(state.set_ana_state(1, ana_state::OPTIMIZED));
    assert!(
        !state.set_ana_state(1, ana_state::OPTIMIZED),
        "no change, no notice"
    );
    assert_eq!(aer.await.unwrap().cqe.status, Status::SUCCESS);
    assert_eq!(ctrl.read(1, 0, 1).await.unwrap()[..], [7u8; 4096][..]);
    assert_eq!(ana_log().await.groups[0].state, ana_state::OPTIMIZED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_not_sent_unless_enabled() {
    let (_dir, target, subsystem, ctrl) = connected().await;
    // No Set Features Asynchronous Event Configuration: the AER stays pending.
    let aer = ctrl.submit_admin(AdminCommand::AsyncEventRequest.to_sqe(0), None, 0);
    let drive = Arc::new(RamDrive::new(32 * MIB, 4096).unwrap());
    subsystem.add_namespace(Arc::new(Namespace::new(2, "extra", drive, "testbox:extra")));
    assert!(
        tokio::time::timeout(Duration::from_millis(500), aer)
            .await
            .is_err(),
        "no event while disabled"
    );
    target.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_host_loses_its_controller_after_kato() {
    let dir = tempfile::tempdir().unwrap();
    let target = common::start(common::config(dir.path(), BackendKind::Ram, 1, 64 * MIB)).await;
    let nqn = common::nqns(&target)[0].clone();
    let subsystem = target.state().subsystem(&nqn).unwrap();
    // A bare admin queue: Connect with KATO 1 s, then silence (no keep-alive task).
    let queue = TcpQueue::connect(
        common::addr(&target),
        TcpQueueConfig::new(0, 32, Digests::default()),
    )
    .await
    .unwrap();
    let connect = FabricsCommand::Connect {
        recfmt: 0,
        qid: 0,
        sqsize: 31,
        cattr: 0,
        kato: 1000,
    }
    .to_sqe(0);
    let data = ConnectData {
        host_id: [7; 16],
        cntlid: 0xffff,
        subnqn: Nqn::new(&nqn).unwrap(),
        hostnqn: Some(
            Nqn::new("nqn.2014-08.org.nvmexpress:uuid:6a1b2c3d-0000-4000-8000-00000000beef")
                .unwrap(),
        ),
    };
    let done = queue
        .submit(
            connect,
            Some(Bytes::copy_from_slice(&*data.to_bytes())),
            0,
            8192,
        )
        .await
        .unwrap();
    assert_eq!(done.cqe.status, Status::SUCCESS);
    let cntlid = done.cqe.result as u16;
    assert!(subsystem.controller(cntlid).is_some());
    let start = Instant::now();
    while queue.closed().is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "controller still alive 5 s after KATO 1 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        start.elapsed() >= Duration::from_millis(900),
        "torn down before KATO: {:?}",
        start.elapsed()
    );
    assert!(
        subsystem.controller(cntlid).is_none(),
        "the controller left its subsystem"
    );
    target.shutdown().await;
}
