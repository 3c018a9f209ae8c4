//! Discovery and access control: the discovery log lists what a host may reach, and a host that
//! is not allowed can neither see nor connect to a subsystem.

mod common;

use common::*;
use fabrik_initiator::proto::fabrics::discovery::{adrfam, subtype, Tsas};
use fabrik_initiator::proto::fabrics::nqn::DISCOVERY_NQN;
use fabrik_initiator::proto::fabrics::Transport;
use fabrik_initiator::proto::Status;
use fabrik_initiator::{discover, ConnectOptions, Controller, HostError, HostIdentity};
use fabrik_target::backend::BackendKind;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_lists_all_24_subsystems() {
    let dir = tempfile::tempdir().unwrap();
    let target = start(config(dir.path(), BackendKind::Null, 24, 1 << 30)).await;
    let addr = addr(&target);
    let log = discover(addr, &HostIdentity::random().nqn).await.unwrap();

    let mut listed: Vec<String> = log.entries.iter().map(|e| e.subnqn.clone()).collect();
    listed.sort();
    assert_eq!(listed, nqns(&target));
    for entry in &log.entries {
        assert_eq!(entry.trtype, Transport::Tcp.trtype());
        assert_eq!(entry.adrfam, adrfam::IPV4);
        assert_eq!(entry.subtype, subtype::NVM);
        assert_eq!(entry.traddr, addr.ip().to_string());
        assert_eq!(entry.trsvcid, addr.port().to_string());
        assert_eq!(entry.cntlid, 0xFFFF, "dynamic controller model");
        assert_eq!(entry.treq & 0x3, 0, "no TLS requirement bits (6.1 hosts)");
        assert_eq!(entry.tsas, Tsas::Tcp { sectype: 0 });
    }

    // A persistent discovery controller: Identify says what it is.
    let mut opts = ConnectOptions::discovery(addr);
    opts.kato_ms = 5000;
    let ctrl = Controller::connect(opts).await.unwrap();
    assert_eq!(ctrl.identity().subnqn, DISCOVERY_NQN);
    assert_eq!(ctrl.io_queue_count(), 0);
    assert_eq!(ctrl.discovery_log().await.unwrap().entries.len(), 24);
    ctrl.keep_alive().await.unwrap();
    ctrl.shutdown().await.unwrap();
    target.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_not_allowed_can_neither_connect_nor_see() {
    let dir = tempfile::tempdir().unwrap();
    let allowed = HostIdentity::random();
    let stranger = HostIdentity::random();
    let mut cfg = config(dir.path(), BackendKind::Null, 3, 1 << 30);
    cfg.allowed_hosts = Some(vec![allowed.nqn.clone()]);
    let target = start(cfg).await;
    let addr = addr(&target);
    let nqn = nqns(&target)[0].clone();

    let err = Controller::connect(options(addr, &nqn).with_host(&stranger))
        .await
        .err()
        .expect("connect refused");
    match &err {
        HostError::Status { status, qid: 0, .. } => {
            assert!(status.same_code(Status::CONNECT_INVALID_HOST), "{err}");
            assert!(status.is_dnr(), "{err}");
        }
        other => panic!("expected Connect Invalid Host, got {other}"),
    }
    assert!(err.to_string().contains("Connect Invalid Host"), "{err}");
    let log = discover(addr, &stranger.nqn).await.unwrap();
    assert!(
        log.entries.is_empty(),
        "a stranger sees nothing: {:?}",
        log.entries
    );

    let log = discover(addr, &allowed.nqn).await.unwrap();
    assert_eq!(log.entries.len(), 3);
    let ctrl = Controller::connect(options(addr, &nqn).with_host(&allowed))
        .await
        .unwrap();
    ctrl.read(1, 0, 1).await.unwrap();
    ctrl.shutdown().await.unwrap();
    target.shutdown().await;
}
