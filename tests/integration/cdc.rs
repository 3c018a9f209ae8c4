//! Many boxes: a central discovery controller (`fabrikd --role cdc`) that boxes register with
//! (`--cdc`), and hosts discover every box's subsystems from, each host those it may use.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use fabrik_api::Management;
use fabrik_initiator::proto::fabrics::dim::{etype, tas, DimData, EKTYPE};
use fabrik_initiator::proto::fabrics::discovery::subtype;
use fabrik_initiator::proto::nvme::admin::AdminCommand;
use fabrik_initiator::proto::nvme::features::{aec, fid};
use fabrik_initiator::proto::nvme::identify::dctype;
use fabrik_initiator::proto::nvme::log::{aen, lid};
use fabrik_initiator::proto::Status;
use fabrik_initiator::{discover, ConnectOptions, Controller, HostError, HostIdentity};
use fabrik_target::backend::BackendKind;
use fabrik_target::config::Config;
use fabrik_target::Target;

fn cdc_config(dir: &std::path::Path) -> Config {
    let mut cfg = config(dir, BackendKind::Null, 0, 1 << 30);
    cfg.cdc_role = true;
    cfg
}

fn box_config(
    dir: &std::path::Path,
    name: &str,
    cdc: SocketAddr,
    hosts: &[&HostIdentity],
) -> Config {
    let mut cfg = config(dir, BackendKind::Null, 2, 1 << 30);
    cfg.box_name = name.into();
    cfg.cdc = Some(cdc);
    cfg.allowed_hosts = Some(hosts.iter().map(|h| h.nqn.clone()).collect());
    cfg
}

/// What `host` discovers from the CDC: subsystem NQNs, sorted.
async fn seen(cdc: SocketAddr, host: &HostIdentity) -> Vec<String> {
    let log = discover(cdc, &host.nqn).await.unwrap();
    assert!(log.entries.iter().all(|e| e.subtype == subtype::NVM));
    let mut nqns: Vec<String> = log.entries.iter().map(|e| e.subnqn.clone()).collect();
    nqns.sort();
    nqns
}

/// Waits (10 s at most) until `host` discovers exactly `want` from the CDC.
async fn wait_seen(cdc: SocketAddr, host: &HostIdentity, want: &[String], what: &str) {
    let mut want = want.to_vec();
    want.sort();
    for _ in 0..100 {
        if seen(cdc, host).await == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(seen(cdc, host).await, want, "{what}");
}

fn all(targets: &[&Target]) -> Vec<String> {
    targets.iter().flat_map(|t| nqns(t)).collect()
}

/// A persistent discovery connection to the CDC with discovery log change notices on.
async fn persistent(cdc: SocketAddr, host: &HostIdentity) -> Controller {
    let mut opts = ConnectOptions::discovery(cdc).with_host(host);
    opts.kato_ms = 5000;
    let ctrl = Controller::connect(opts).await.unwrap();
    assert_eq!(ctrl.identity().cntrltype, 2, "a discovery controller");
    assert_eq!(ctrl.identity().dctype, dctype::CDC, "a central one");
    ctrl.set_features(
        fid::ASYNC_EVENT_CONFIG,
        0,
        aec::DISCOVERY_LOG_CHANGE_NOTICES,
    )
    .await
    .unwrap();
    ctrl
}

const CHANGED: u32 = 0x0070_F002;

/// Waits for the discovery log change notice, then reads the log (which re-arms the notice).
async fn notified(ctrl: &Controller, what: &str) {
    let event = tokio::time::timeout(Duration::from_secs(10), ctrl.async_event_request())
        .await
        .unwrap_or_else(|_| panic!("no discovery log change notice: {what}"))
        .unwrap();
    assert_eq!(
        event,
        aen::result(
            aen::TYPE_NOTICE,
            aen::NOTICE_DISCOVERY_LOG_CHANGED,
            lid::DISCOVERY
        )
    );
    assert_eq!(event, CHANGED);
    ctrl.discovery_log().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_discover_every_box_from_the_cdc_each_what_it_may_use() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let (a, b, c) = (
        HostIdentity::random(),
        HostIdentity::random(),
        HostIdentity::random(),
    );
    let cdc_api = common::api::start_with(cdc_config(dirs[0].path())).await;
    let cdc = &cdc_api.target;
    let at = addr(cdc);
    assert!(cdc.subsystem_nqns().is_empty(), "a CDC serves no drives");
    let watcher = persistent(at, &a).await;

    let box1 = start(box_config(dirs[1].path(), "box1", at, &[&a])).await;
    let box2 = start(box_config(dirs[2].path(), "box2", at, &[&a, &b])).await;
    wait_seen(
        at,
        &a,
        &all(&[&box1, &box2]),
        "A may use both boxes' subsystems",
    )
    .await;
    notified(&watcher, "boxes registered").await;
    assert_eq!(seen(at, &b).await, nqns(&box2), "B only box2's");
    // The CDC's management API lists them.
    let regs = cdc_api.admin.cdc_registrations().await.unwrap();
    let listed: Vec<(&str, &str, String)> = regs
        .iter()
        .map(|r| {
            let a = &r.addresses[0];
            (
                r.nqn.as_str(),
                r.entity.as_str(),
                format!("{} {}:{}", a.transport, a.traddr, a.trsvcid),
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            (
                "nqn.2024-01.io.fabrik:box1",
                "box",
                format!("tcp {}", addr(&box1))
            ),
            (
                "nqn.2024-01.io.fabrik:box2",
                "box",
                format!("tcp {}", addr(&box2))
            ),
        ]
    );
    assert!(seen(at, &c).await.is_empty(), "C none");
    // Each entry is a path to the box that serves it, not to the CDC.
    let log = discover(at, &a.nqn).await.unwrap();
    for e in &log.entries {
        let serves = if nqns(&box1).contains(&e.subnqn) {
            &box1
        } else {
            &box2
        };
        assert_eq!(e.trsvcid, addr(serves).port().to_string(), "{}", e.subnqn);
        assert_eq!(e.traddr, addr(serves).ip().to_string());
    }

    // A change on a box reaches the CDC's hosts: C is let into box1's first subsystem.
    let first = nqns(&box1)[0].clone();
    let m = box1.manager();
    let (sub, host) = (first.clone(), c.nqn.clone());
    tokio::task::spawn_blocking(move || m.allow_host(&sub, &host))
        .await
        .unwrap()
        .unwrap();
    wait_seen(
        at,
        &c,
        std::slice::from_ref(&first),
        "C was allowed into one subsystem",
    )
    .await;
    notified(&watcher, "a box's access changed").await;

    // A box that stops deregisters before it goes: its subsystems leave every log at once.
    box2.shutdown().await;
    assert_eq!(seen(at, &a).await, nqns(&box1));
    assert!(seen(at, &b).await.is_empty());
    notified(&watcher, "a box left").await;

    assert_eq!(cdc_api.admin.cdc_registrations().await.unwrap().len(), 1);
    watcher.shutdown().await.unwrap();
    box1.shutdown().await;
    cdc_api.stop().await;
}

/// The raw DIM command, with any data.
async fn dim_raw(ctrl: &Controller, task: u8, data: Vec<u8>) -> Status {
    let sqe = AdminCommand::DiscoveryInfoManagement { tas: task }.to_sqe(0);
    match ctrl.submit_admin(sqe, Some(data.into()), 0).await {
        Ok(c) => c.cqe.status,
        Err(HostError::Status { status, .. }) => status,
        Err(e) => panic!("DIM: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registrations_are_checked_and_only_a_cdc_takes_them() {
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let cdc = start(cdc_config(dirs[0].path())).await;
    let plain_api =
        common::api::start_with(config(dirs[1].path(), BackendKind::Null, 1, 1 << 20)).await;
    common::api::assert_problem(
        plain_api.admin.cdc_registrations().await,
        404,
        "not a central discovery controller",
    );
    let plain = &plain_api.target;
    let host = HostIdentity::random();
    let data = DimData {
        etype: etype::HOST,
        portlcl: 0,
        ektype: EKTYPE,
        eid: host.nqn.clone(),
        ename: "gpu-node-1".into(),
        ever: "Linux".into(),
        entries: Vec::new(),
    };

    // A box's own discovery controller is no CDC: DIM is not a command it knows.
    let ctrl = Controller::connect(ConnectOptions::discovery(addr(plain)).with_host(&host))
        .await
        .unwrap();
    assert_eq!(ctrl.identity().dctype, dctype::DDC);
    match ctrl.discovery_info_management(tas::REGISTER, &data).await {
        Err(HostError::Status { status, .. }) => assert_eq!(status, Status::INVALID_OPCODE),
        other => panic!("DIM to a box's discovery controller: {other:?}"),
    }
    ctrl.shutdown().await.unwrap();

    let ctrl = Controller::connect(ConnectOptions::discovery(addr(&cdc)).with_host(&host))
        .await
        .unwrap();
    // A host registers (as `nvme dim` does) and deregisters.
    let registered = || cdc.manager().cdc_registrations().unwrap().len();
    ctrl.discovery_info_management(tas::REGISTER, &data)
        .await
        .unwrap();
    assert_eq!(registered(), 1);
    ctrl.discovery_info_management(tas::DEREGISTER, &data)
        .await
        .unwrap();
    assert_eq!(registered(), 0);
    // Malformed data, an unknown task, a CDC registering, a box with no address.
    let mut encoded = data.encode();
    assert_eq!(
        dim_raw(&ctrl, tas::REGISTER, encoded[..100].to_vec()).await,
        Status::INVALID_FIELD
    );
    encoded[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(
        dim_raw(&ctrl, tas::REGISTER, encoded).await,
        Status::INVALID_FIELD,
        "TDL past the data"
    );
    assert_eq!(
        dim_raw(&ctrl, 7, data.encode()).await,
        Status::INVALID_FIELD
    );
    let cdc_entity = DimData {
        etype: etype::CDC,
        ..data.clone()
    };
    assert_eq!(
        dim_raw(&ctrl, tas::REGISTER, cdc_entity.encode()).await,
        Status::INVALID_DISCOVERY_INFO
    );
    let no_address = DimData {
        etype: etype::DDC,
        ..data.clone()
    };
    assert_eq!(
        dim_raw(&ctrl, tas::REGISTER, no_address.encode()).await,
        Status::INVALID_DISCOVERY_INFO
    );
    // None of it registered anything; the connection still serves.
    assert_eq!(registered(), 0);
    assert!(ctrl.discovery_log().await.unwrap().entries.is_empty());
    ctrl.shutdown().await.unwrap();

    // A box pointed at a box's discovery controller instead of a CDC serves on (no
    // registration can be seen from outside: the box's log says it found no CDC there).
    let dir = tempfile::tempdir().unwrap();
    let confused = start(box_config(dir.path(), "confused", addr(plain), &[&host])).await;
    assert_eq!(
        discover(addr(&confused), &host.nqn)
            .await
            .unwrap()
            .entries
            .len(),
        2
    );
    confused.shutdown().await;
    plain_api.stop().await;
    cdc.shutdown().await;
}

#[test]
fn a_cdc_serves_no_drives() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = cdc_config(dir.path());
    cfg.drives = 3;
    let err = cfg.validate().unwrap_err().to_string();
    assert!(err.contains("serves no drives"), "{err}");
}

/// Browses `_nvme-disc._tcp` on loopback until `name` is withdrawn (true), or 10 s pass.
fn withdrawn(name: &str) -> bool {
    use mdns_sd::{IfKind, ServiceDaemon, ServiceEvent};
    let daemon = ServiceDaemon::new().unwrap();
    daemon.disable_interface(IfKind::All).unwrap();
    daemon.enable_interface(IfKind::LoopbackV4).unwrap();
    let events = daemon
        .browse(fabrik_target::announce::SERVICE_TYPE)
        .unwrap();
    let start = std::time::Instant::now();
    let mut gone = false;
    while !gone && start.elapsed() < Duration::from_secs(10) {
        if let Ok(ServiceEvent::ServiceRemoved(_, n)) =
            events.recv_timeout(Duration::from_millis(200))
        {
            gone = n == name;
        }
    }
    let _ = daemon.shutdown();
    gone
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boxes_and_the_cdc_announce_themselves_over_mdns() {
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut cfg = cdc_config(dirs[0].path());
    cfg.box_name = "mdns-test".into();
    cfg.mdns = true;
    let cdc = start(cfg).await;
    let mut cfg = config(dirs[1].path(), BackendKind::Null, 1, 1 << 20);
    cfg.box_name = "mdns-test-box".into();
    cfg.mdns = true;
    let b = start(cfg).await;
    let box_name = format!("mdns-test-box.{}", fabrik_target::announce::SERVICE_TYPE);
    // What `fabrik mdns` lists.
    let found = tokio::task::spawn_blocking(|| {
        fabrik_initiator::host::mdns::browse(Duration::from_secs(3), true)
    })
    .await
    .unwrap()
    .unwrap();
    let by_name = |n: &str| found.iter().find(|a| a.instance == n).cloned();
    let (c, bx) = (by_name("mdns-test-cdc"), by_name("mdns-test-box"));
    let (c, bx) = (
        c.expect("the CDC announced"),
        bx.expect("the box announced"),
    );
    assert_eq!(c.addrs, [addr(&cdc)]);
    assert_eq!(bx.addrs, [addr(&b)]);
    assert_eq!(
        (c.role.as_deref(), bx.role.as_deref()),
        (Some("cdc"), Some("box"))
    );
    assert_eq!(c.transport, Some(fabrik_initiator::Transport::Tcp));
    assert_eq!(c.nqn, fabrik_initiator::proto::fabrics::nqn::DISCOVERY_NQN);

    // A clean stop withdraws the announcement.
    let browsing = tokio::task::spawn_blocking({
        let name = box_name.clone();
        move || withdrawn(&name)
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    b.shutdown().await;
    assert!(
        browsing.await.unwrap(),
        "{box_name} withdrawn at the box's stop"
    );
    cdc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_box_registers_again_with_a_cdc_that_restarted() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let host = HostIdentity::random();
    let cdc = start(cdc_config(dirs[0].path())).await;
    let at = addr(&cdc);
    let b = start(box_config(dirs[1].path(), "box1", at, &[&host])).await;
    wait_seen(at, &host, &nqns(&b), "registered").await;
    cdc.shutdown().await;
    // A new CDC on the same address: the box finds it again (its retries start at 1 s).
    let mut cfg = cdc_config(dirs[2].path());
    cfg.listen = vec![at];
    let cdc = start(cfg).await;
    wait_seen(
        at,
        &host,
        &nqns(&b),
        "registered again after the CDC restarted",
    )
    .await;
    b.shutdown().await;
    assert!(
        seen(at, &host).await.is_empty(),
        "deregistered at the box's stop"
    );
    cdc.shutdown().await;
}
