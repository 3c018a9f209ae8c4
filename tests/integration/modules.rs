//! The two I/O modules of a box, as two in-process targets over the same drive files: both
//! serve the same namespaces with disjoint controller IDs and an ANA group each, what one
//! writes the other reads, and a module in maintenance turns its paths inaccessible.

mod common;

use std::path::Path;

use common::api::{start_with, Api, MIB};
use fabrik_api::models::{AnaState, CompositionRequest, ConfigSync, HostRequest};
use fabrik_initiator::{Controller, HostIdentity};
use fabrik_proto::nvme::log::{ana_state, lid, AnaLog};
use fabrik_proto::nvme::reservation::{KeyPair, ReservationCommand, ReservationStatus};
use fabrik_proto::Status;
use fabrik_target::backend::BackendKind;
use fabrik_target::module::ModuleId;

/// Module `module` of box "testbox": 2 file drives in `drives`, its own data directory.
async fn module(root: &Path, module: ModuleId) -> Api {
    let mut cfg = common::config(&root.join(module.name()), BackendKind::File, 2, 16 * MIB);
    cfg.module = Some(module);
    cfg.drive_dir = Some(root.join("drives"));
    start_with(cfg).await
}

async fn connect(api: &Api, drive: &str, host: &HostIdentity) -> Controller {
    common::api::connect(api.nvme(), &common::api::nqn(drive), host)
        .await
        .unwrap()
}

async fn ana_log(ctrl: &Controller) -> AnaLog {
    let page = ctrl.get_log_page(lid::ANA, 0xffff_ffff, 16 + 2 * 32 + 4 * 1024, 0);
    AnaLog::decode(&page.await.unwrap()).unwrap()
}

/// (group, state, NSIDs) of every group in the log.
fn groups(log: &AnaLog) -> Vec<(u32, u8, Vec<u32>)> {
    (log.groups.iter())
        .map(|g| (g.grpid, g.state, g.nsids.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_modules_serve_one_box() {
    let root = tempfile::tempdir().unwrap();
    let a = module(root.path(), ModuleId::A).await;
    let b = module(root.path(), ModuleId::B).await;
    let host = HostIdentity::random();

    // Drive 00 is in group 1 (module A's), drive 01 in group 2 (module B's).
    let a0 = connect(&a, "00", &host).await;
    let b0 = connect(&b, "00", &host).await;
    assert!(
        a0.cntlid() < 0x8000 && b0.cntlid() >= 0x8000,
        "{} {}",
        a0.cntlid(),
        b0.cntlid()
    );
    for ctrl in [&a0, &b0] {
        let id = ctrl.identify_controller().await.unwrap();
        assert_eq!((id.anagrpmax, id.nanagrpid), (2, 2));
        assert_eq!(ctrl.identify_namespace(1).await.unwrap().anagrpid, 1);
    }
    let b1 = connect(&b, "01", &host).await;
    assert_eq!(b1.identify_namespace(1).await.unwrap().anagrpid, 2);
    let same_ids = |x: &fabrik_proto::nvme::identify::IdentifyNamespace,
                    y: &fabrik_proto::nvme::identify::IdentifyNamespace| {
        x.nguid == y.nguid && x.eui64 == y.eui64
    };
    assert!(
        same_ids(
            &a0.identify_namespace(1).await.unwrap(),
            &b0.identify_namespace(1).await.unwrap()
        ),
        "one namespace, two paths: the same identity"
    );
    // Each module reports its own group optimized and the other's non-optimized.
    let (opt, non) = (ana_state::OPTIMIZED, ana_state::NON_OPTIMIZED);
    assert_eq!(
        groups(&ana_log(&a0).await),
        [(1, opt, vec![1]), (2, non, vec![])]
    );
    assert_eq!(
        groups(&ana_log(&b0).await),
        [(1, non, vec![1]), (2, opt, vec![])]
    );
    assert_eq!(
        groups(&ana_log(&b1).await),
        [(1, non, vec![]), (2, opt, vec![1])]
    );

    // What one module writes, the other reads: both write through to the same file.
    let data = common::random_data(64 * 1024, 1);
    a0.write(1, 8, data.clone(), false).await.unwrap();
    common::assert_same_data(&b0.read(1, 8, 16).await.unwrap(), &data, "read through B");
    let data = common::random_data(64 * 1024, 2);
    b0.write(1, 8, data.clone(), true).await.unwrap();
    common::assert_same_data(&a0.read(1, 8, 16).await.unwrap(), &data, "read through A");

    // Maintenance: every group inaccessible through A (I/O there gets the path status
    // without DNR; B serves on), drained at once (nothing in flight), kept across a restart.
    let m = a.admin.module().await.unwrap();
    assert_eq!((m.name.as_deref(), m.maintenance), (Some("a"), false));
    let m = a.admin.set_maintenance(true).await.unwrap();
    assert!(m.maintenance && m.drained, "{m:?}");
    assert_eq!(m.io_in_flight, 0);
    assert!(
        m.ana_groups
            .iter()
            .all(|g| g.state == AnaState::Inaccessible),
        "{m:?}"
    );
    let err = a0.read(1, 8, 16).await.unwrap_err();
    assert_eq!(err.status(), Some(Status::ANA_INACCESSIBLE));
    assert!(!err.status().unwrap().is_dnr());
    assert!(groups(&ana_log(&a0).await)
        .iter()
        .all(|g| g.1 == ana_state::INACCESSIBLE));
    common::assert_same_data(&b0.read(1, 8, 16).await.unwrap(), &data, "B serves on");
    assert!(
        !b.admin.module().await.unwrap().maintenance,
        "B is not in maintenance"
    );
    for c in [a0, b0, b1] {
        c.shutdown().await.unwrap();
    }
    a.stop().await;
    let a = module(root.path(), ModuleId::A).await;
    assert!(
        a.local.module().await.unwrap().maintenance,
        "kept across a restart"
    );
    let m = a.admin.set_maintenance(false).await.unwrap();
    let states: Vec<AnaState> = m.ana_groups.iter().map(|g| g.state).collect();
    assert_eq!(states, [AnaState::Optimized, AnaState::NonOptimized]);
    let a0 = connect(&a, "00", &host).await;
    common::assert_same_data(&a0.read(1, 8, 16).await.unwrap(), &data, "back in service");
    a0.shutdown().await.unwrap();

    // A target that is not a module cannot open drives the modules serve.
    let mut alone = common::config(&root.path().join("alone"), BackendKind::File, 2, 16 * MIB);
    alone.drive_dir = Some(root.path().join("drives"));
    let err = format!(
        "{:#}",
        fabrik_target::Target::start(alone).await.err().unwrap()
    );
    assert!(err.contains("I/O modules of a box"), "{err}");
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_refuses_drives_kept_in_its_own_memory() {
    let root = tempfile::tempdir().unwrap();
    let mut cfg = common::config(root.path(), BackendKind::Ram, 2, 16 * MIB);
    cfg.module = Some(ModuleId::B);
    let err = format!(
        "{:#}",
        fabrik_target::Target::start(cfg).await.err().unwrap()
    );
    assert!(err.contains("ram backend") && err.contains("I/O"), "{err}");
}

fn free_addr() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// A pair whose APIs are on fixed addresses, each the other's peer.
struct Pair {
    root: tempfile::TempDir,
    apis: [std::net::SocketAddr; 2],
    nvme: [std::net::SocketAddr; 2],
}

impl Pair {
    fn new() -> Pair {
        Pair {
            root: tempfile::tempdir().unwrap(),
            apis: [free_addr(), free_addr()],
            nvme: [free_addr(), free_addr()],
        }
    }

    async fn start(&self, m: ModuleId) -> Api {
        let (me, other) = match m {
            ModuleId::A => (0, 1),
            ModuleId::B => (1, 0),
        };
        let root = self.root.path();
        let mut cfg = common::config(&root.join(m.name()), BackendKind::File, 2, 16 * MIB);
        cfg.module = Some(m);
        cfg.drive_dir = Some(root.join("drives"));
        cfg.listen = vec![self.nvme[me]];
        cfg.peer = Some(format!("http://{}", self.apis[other]));
        cfg.peer_token = Some(common::api::TOKEN.into());
        common::api::start_with_api(cfg, self.apis[me]).await
    }
}

async fn host_nqns(api: &Api) -> Vec<String> {
    api.admin
        .hosts()
        .await
        .unwrap()
        .into_iter()
        .map(|h| h.nqn)
        .collect()
}

async fn add_host(
    api: &Api,
    n: u8,
) -> Result<fabrik_api::models::Host, fabrik_api::client::ClientError> {
    api.admin.post("/hosts", &host(n)).await
}

fn host(n: u8) -> HostRequest {
    HostRequest {
        nqn: format!("nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000{n:02x}"),
        name: None,
        ..Default::default()
    }
}

/// Waits (the modules look at each other every 2 s) until `api`'s module reports `sync`.
async fn wait_sync(api: &Api, sync: ConfigSync) -> fabrik_api::models::Module {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let m = api.admin.module().await.unwrap();
        if m.config_sync == Some(sync) {
            return m;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never {sync:?}: {m:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_through_either_module_is_made_on_both() {
    let pair = Pair::new();
    let a = pair.start(ModuleId::A).await;
    let b = pair.start(ModuleId::B).await;
    // Through A, then through B: both have both, at the same generation.
    add_host(&a, 1).await.unwrap();
    let comp = b
        .admin
        .compose(&CompositionRequest {
            host_nqn: host(1).nqn,
            drives: vec!["01".into()],
            ports: None,
            shared: false,
        })
        .await
        .unwrap();
    for api in [&a, &b] {
        assert_eq!(host_nqns(api).await, [host(1).nqn]);
        assert_eq!(
            api.admin
                .get::<fabrik_api::models::Composition>(&format!("/compositions/{}", comp.id))
                .await
                .unwrap()
                .drives,
            ["01"]
        );
        let m = api.admin.module().await.unwrap();
        assert_eq!(
            (m.config_generation, m.config_sync),
            (2, Some(ConfigSync::InStep))
        );
    }
    // A change the other module refuses is refused here too, and leaves no trace.
    let taken = CompositionRequest {
        host_nqn: host(2).nqn,
        drives: vec!["01".into()],
        ports: None,
        shared: false,
    };
    assert!(a.admin.compose(&taken).await.is_err());
    assert_eq!(a.admin.module().await.unwrap().config_generation, 2);

    // B is down: a change through A is made on A alone, and B gets it when it is back.
    b.stop().await;
    add_host(&a, 3).await.unwrap();
    assert_eq!(
        a.admin.module().await.unwrap().config_sync,
        Some(ConfigSync::PeerBehind)
    );
    let b = pair.start(ModuleId::B).await;
    wait_sync(&a, ConfigSync::InStep).await;
    assert_eq!(host_nqns(&b).await, [host(1).nqn, host(3).nqn]);
    assert_eq!(b.admin.module().await.unwrap().config_generation, 3);

    // Both changed while apart: diverged, changes refused on both, until an operator keeps
    // one side's.
    b.stop().await;
    add_host(&a, 4).await.unwrap(); // A alone
    a.stop().await;
    let b = pair.start(ModuleId::B).await;
    add_host(&b, 5).await.unwrap(); // B alone
    let a = pair.start(ModuleId::A).await;
    wait_sync(&a, ConfigSync::Diverged).await;
    wait_sync(&b, ConfigSync::Diverged).await;
    let refused = add_host(&a, 6).await.unwrap_err();
    assert_eq!(refused.status(), Some(409), "{refused}");
    assert!(refused.to_string().contains("diverged"), "{refused}");
    let m = b.admin.push_module_config().await.unwrap();
    assert_eq!(m.config_sync, Some(ConfigSync::InStep));
    assert_eq!(
        host_nqns(&a).await,
        [host(1).nqn, host(3).nqn, host(5).nqn],
        "B's kept"
    );
    wait_sync(&a, ConfigSync::InStep).await;
    add_host(&a, 6).await.unwrap();
    assert!(host_nqns(&b).await.contains(&host(6).nqn));
    a.stop().await;
    b.stop().await;
}

/// Reads of namespace 1 (drive 00) each module has served.
fn reads(api: &Api) -> u64 {
    let sub = api
        .target
        .state()
        .subsystem(&common::api::nqn("00"))
        .unwrap();
    sub.namespace(1).unwrap().stats.read_commands()
}

/// fabrik's own multipath over the two modules: I/O goes through the path where the namespace
/// is optimized, moves to the other module when this one turns inaccessible (maintenance,
/// told by an ANA change notice) or goes away, and comes back when it is optimized again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fabrik_s_session_follows_the_ana_states() {
    use fabrik_initiator::host::session::{RecoveryPolicy, Session};
    let root = tempfile::tempdir().unwrap();
    let a = module(root.path(), ModuleId::A).await;
    let b = module(root.path(), ModuleId::B).await;
    let host = HostIdentity::random();
    let nqn = common::api::nqn("00");
    let path = |api: &Api| common::options(api.nvme(), &nqn).with_host(&host);
    let policy = RecoveryPolicy {
        reconnect_delay: std::time::Duration::from_millis(200),
        ctrl_loss_tmo: None,
    };
    let session = Session::connect(vec![path(&b), path(&a)], policy)
        .await
        .unwrap();
    let data = common::random_data(4096, 7);
    session.write(0, 1, 0, data.clone(), false).await.unwrap();
    let read_all = |n: usize| {
        let session = session.clone();
        let data = data.clone();
        async move {
            for _ in 0..n {
                common::assert_same_data(&session.read(0, 1, 0, 1).await.unwrap(), &data, "read");
            }
        }
    };
    // Drive 00 is optimized through A (the second path): every read goes there.
    read_all(20).await;
    assert_eq!((reads(&a), reads(&b)), (20, 0));

    // A into maintenance: the notice moves the reads to B, with no error.
    a.admin.set_maintenance(true).await.unwrap();
    read_all(20).await;
    assert_eq!(reads(&a), 20, "none through the inaccessible path");
    assert_eq!(reads(&b), 20);

    // Back: the reads return to A once its notice is read.
    a.admin.set_maintenance(false).await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while reads(&a) == 20 {
        assert!(std::time::Instant::now() < deadline, "never back to A");
        read_all(1).await;
    }
    let before_b = reads(&b);
    read_all(10).await;
    assert_eq!(reads(&b), before_b, "optimized again: all through A");
    session.shutdown().await;
    a.stop().await;
    b.stop().await;
}

/// Sends reservation command `cmd` (with its key data) on `ctrl`'s first I/O queue.
async fn resv(
    ctrl: &Controller,
    cmd: ReservationCommand,
    keys: KeyPair,
) -> Result<fabrik_initiator::Completion, fabrik_initiator::HostError> {
    let (out, in_len) = match &cmd {
        ReservationCommand::Report { len, .. } => (None, *len),
        ReservationCommand::Release { .. } => {
            (Some(bytes::Bytes::copy_from_slice(&keys.encode()[..8])), 0)
        }
        _ => (Some(bytes::Bytes::copy_from_slice(&keys.encode())), 0),
    };
    ctrl.io_queue(0)?.submit(cmd.to_sqe(), out, in_len).await
}

async fn report(ctrl: &Controller) -> ReservationStatus {
    let c = resv(
        ctrl,
        ReservationCommand::Report {
            nsid: 1,
            len: 4096,
            eds: true,
        },
        KeyPair::default(),
    )
    .await
    .unwrap();
    ReservationStatus::decode(&c.data, true).unwrap()
}

/// A reservation made through one module holds through the other (both keep the same,
/// persisted), and keeps other hosts' writes out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservations_hold_through_both_modules_and_across_restarts() {
    use fabrik_proto::nvme::reservation::*;
    let pair = Pair::new();
    let a = pair.start(ModuleId::A).await;
    let b = pair.start(ModuleId::B).await;
    let (x, y) = (HostIdentity::random(), HostIdentity::random());
    let xa = connect(&a, "00", &x).await;
    let yb = connect(&b, "00", &y).await;
    let id = xa.identify_controller().await.unwrap();
    assert_ne!(id.oncs & ONCS_RESERVATIONS, 0, "ONCS: reservations");
    let rescap = xa.identify_namespace(1).await.unwrap().rescap;
    assert_eq!(rescap, rescap::PTPL | rescap::ALL_TYPES | rescap::IEKEY_1_3);

    // X registers and takes a Write Exclusive reservation through module A.
    let register = ReservationCommand::Register {
        nsid: 1,
        action: RegisterAction::Register,
        iekey: false,
        cptpl: Cptpl::Set,
    };
    resv(
        &xa,
        register.clone(),
        KeyPair {
            current: 0,
            other: 0xaa,
        },
    )
    .await
    .unwrap();
    let acquire = ReservationCommand::Acquire {
        nsid: 1,
        action: AcquireAction::Acquire,
        iekey: false,
        rtype: Some(ReservationType::WriteExclusive),
    };
    let wrong_key = resv(
        &xa,
        acquire.clone(),
        KeyPair {
            current: 0xbb,
            other: 0,
        },
    )
    .await;
    assert_eq!(
        wrong_key.unwrap_err().status(),
        Some(Status::RESERVATION_CONFLICT)
    );
    resv(
        &xa,
        acquire.clone(),
        KeyPair {
            current: 0xaa,
            other: 0,
        },
    )
    .await
    .unwrap();

    // Module B reports it and enforces it: Y may read, not write; X writes through A.
    let status = report(&yb).await;
    assert_eq!(
        (status.generation, status.rtype, status.ptpls),
        (1, Some(ReservationType::WriteExclusive), true)
    );
    assert_eq!(status.registrants.len(), 1);
    assert_eq!(status.registrants[0].hostid, x.id);
    assert!(status.registrants[0].holds);
    let data = common::random_data(4096, 3);
    let denied = yb.write(1, 0, data.clone(), false).await.unwrap_err();
    assert_eq!(denied.status(), Some(Status::RESERVATION_CONFLICT));
    assert!(denied.status().unwrap().is_dnr());
    yb.read(1, 0, 1).await.unwrap();
    xa.write(1, 0, data.clone(), false).await.unwrap();
    let short = resv(
        &yb,
        ReservationCommand::Report {
            nsid: 1,
            len: 4096,
            eds: false,
        },
        KeyPair::default(),
    )
    .await;
    assert_eq!(
        short.unwrap_err().status(),
        Some(Status::HOST_ID_INCONSISTENT_FORMAT)
    );

    // Kept across a restart of both modules.
    for c in [xa, yb] {
        c.shutdown().await.unwrap();
    }
    a.stop().await;
    b.stop().await;
    let a = pair.start(ModuleId::A).await;
    let b = pair.start(ModuleId::B).await;
    let xa = connect(&a, "00", &x).await;
    let yb = connect(&b, "00", &y).await;
    assert!(report(&yb).await.registrants[0].holds, "kept");
    assert!(yb.write(1, 0, data.clone(), false).await.is_err());
    // Released through A: Y writes through B.
    let release = ReservationCommand::Release {
        nsid: 1,
        action: ReleaseAction::Release,
        iekey: false,
        rtype: Some(ReservationType::WriteExclusive),
    };
    resv(
        &xa,
        release,
        KeyPair {
            current: 0xaa,
            other: 0,
        },
    )
    .await
    .unwrap();
    yb.write(1, 0, data, false).await.unwrap();
    assert_eq!(report(&yb).await.rtype, None);
    for c in [xa, yb] {
        c.shutdown().await.unwrap();
    }
    a.stop().await;
    b.stop().await;
}

/// Reads one Reservation Notification log page through `ctrl`.
async fn notice(ctrl: &Controller) -> fabrik_proto::nvme::reservation::Notification {
    use fabrik_proto::nvme::reservation::*;
    let page = ctrl.get_log_page(NOTIFICATION_LOG, 0xffff_ffff, NOTIFICATION_LOG_LEN, 0);
    Notification::decode(&page.await.unwrap()).unwrap()
}

/// A host whose registration is preempted, or whose reservation is released, is told on each
/// of its controllers, through either module: a notification page and the event, unless the
/// controller masked that kind. PTPL (feature 83h) is one setting for both modules.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservation_notices_reach_the_host_on_both_modules() {
    use fabrik_proto::nvme::features::fid;
    use fabrik_proto::nvme::log::aen;
    use fabrik_proto::nvme::reservation::*;
    let pair = Pair::new();
    let a = pair.start(ModuleId::A).await;
    let b = pair.start(ModuleId::B).await;
    let (x, y) = (HostIdentity::random(), HostIdentity::random());
    let xa = connect(&a, "00", &x).await;
    let ya = connect(&a, "00", &y).await;
    let yb = connect(&b, "00", &y).await;
    let key = |current, other| KeyPair { current, other };
    let status = |r: Result<u32, fabrik_initiator::HostError>| r.unwrap_err().status();

    // Y's controller on A keeps "registration preempted" notices out.
    let mask = fid::RESERVATION_NOTIFICATION_MASK;
    ya.set_features(mask, 1, mask::REGISTRATION_PREEMPTED)
        .await
        .unwrap();
    assert_eq!(
        ya.get_features(mask, 1, 0).await.unwrap(),
        mask::REGISTRATION_PREEMPTED
    );
    assert_eq!(
        yb.get_features(mask, 1, 0).await.unwrap(),
        0,
        "per controller"
    );
    assert_eq!(
        status(ya.set_features(mask, 1, 1).await),
        Some(Status::INVALID_FIELD)
    );
    assert_eq!(
        status(ya.get_features(mask, 7, 0).await),
        Some(Status::INVALID_NAMESPACE)
    );

    let register = |nsid| ReservationCommand::Register {
        nsid,
        action: RegisterAction::Register,
        iekey: false,
        cptpl: Cptpl::NoChange,
    };
    resv(&xa, register(1), key(0, 0xaa)).await.unwrap();
    resv(&yb, register(1), key(0, 0xbb)).await.unwrap();
    let x_on_a = xa;
    let xa = &x_on_a;
    let acquire = |action, rtype, keys| async move {
        let cmd = ReservationCommand::Acquire {
            nsid: 1,
            action,
            iekey: false,
            rtype: Some(rtype),
        };
        resv(xa, cmd, keys).await.unwrap();
    };
    acquire(
        AcquireAction::Acquire,
        ReservationType::WriteExclusive,
        key(0xaa, 0),
    )
    .await;
    assert_eq!(notice(&yb).await, Notification::default(), "nothing yet");

    // X preempts Y's registration (through A): Y's controller on B hears of it.
    let event = tokio::spawn(yb.async_event_request());
    acquire(
        AcquireAction::Preempt,
        ReservationType::WriteExclusive,
        key(0xaa, 0xbb),
    )
    .await;
    let expected_event = aen::result(
        aen::TYPE_IO_COMMAND_SET,
        aen::IO_RESERVATION_LOG_AVAILABLE,
        NOTIFICATION_LOG,
    );
    let got = tokio::time::timeout(std::time::Duration::from_secs(10), event);
    assert_eq!(got.await.unwrap().unwrap().unwrap(), expected_event);
    let page = notice(&yb).await;
    assert_eq!(
        (page.count, page.kind, page.nsid, page.available),
        (1, Some(NotificationKind::RegistrationPreempted), 1, 0)
    );
    assert_eq!(notice(&yb).await.count, 0, "a read takes the page");
    assert_eq!(notice(&ya).await.count, 0, "masked on A");
    assert_eq!(notice(xa).await.count, 0, "the preempting host is not told");

    // A Write Exclusive - Registrants Only reservation released: the other registrant is told
    // on both its controllers (A's mask does not cover releases).
    resv(&ya, register(1), key(0, 0xbc)).await.unwrap();
    resv(
        xa,
        ReservationCommand::Release {
            nsid: 1,
            action: ReleaseAction::Release,
            iekey: false,
            rtype: Some(ReservationType::WriteExclusive),
        },
        key(0xaa, 0),
    )
    .await
    .unwrap();
    let ro = ReservationType::WriteExclusiveRegistrantsOnly;
    acquire(AcquireAction::Acquire, ro, key(0xaa, 0)).await;
    let event = tokio::spawn(yb.async_event_request());
    resv(
        xa,
        ReservationCommand::Release {
            nsid: 1,
            action: ReleaseAction::Release,
            iekey: false,
            rtype: Some(ro),
        },
        key(0xaa, 0),
    )
    .await
    .unwrap();
    let got = tokio::time::timeout(std::time::Duration::from_secs(10), event);
    assert_eq!(got.await.unwrap().unwrap().unwrap(), expected_event);
    for (ctrl, count) in [(&yb, 2), (&ya, 1)] {
        let page = notice(ctrl).await;
        assert_eq!(
            (page.count, page.kind),
            (count, Some(NotificationKind::ReservationReleased))
        );
    }

    // PTPL through A is what B reports.
    let ptpl = fid::RESERVATION_PERSISTENCE;
    assert_eq!(yb.get_features(ptpl, 1, 0).await.unwrap(), 0);
    xa.set_features(ptpl, 1, 1).await.unwrap();
    assert_eq!(yb.get_features(ptpl, 1, 0).await.unwrap(), 1);
    assert!(report(&yb).await.ptpls);
    for c in [x_on_a, ya, yb] {
        c.shutdown().await.unwrap();
    }
    a.stop().await;
    b.stop().await;
}

/// Preempt and Abort completes only once the preempted host's commands in flight have
/// finished, whichever module they went through: no write of a fenced host lands after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preempt_and_abort_waits_for_the_preempted_hosts_writes_on_both_modules() {
    use fabrik_proto::nvme::reservation::*;
    use fabrik_target::backend::guard::Inject;
    use std::time::{Duration, Instant};
    let pair = Pair::new();
    let a = pair.start(ModuleId::A).await;
    let b = pair.start(ModuleId::B).await;
    let (x, y) = (HostIdentity::random(), HostIdentity::random());
    let xa = connect(&a, "00", &x).await;
    let ya = connect(&a, "00", &y).await;
    let yb = connect(&b, "00", &y).await;
    let key = |current, other| KeyPair { current, other };
    let we = Some(ReservationType::WriteExclusive);
    let register = ReservationCommand::Register {
        nsid: 1,
        action: RegisterAction::Register,
        iekey: false,
        cptpl: Cptpl::NoChange,
    };
    let acquire = |action| ReservationCommand::Acquire {
        nsid: 1,
        action,
        iekey: false,
        rtype: we,
    };
    resv(&xa, register.clone(), key(0, 0xaa)).await.unwrap();
    for (name, module, yc) in [("b", &b, &yb), ("a", &a, &ya)] {
        // Y registered and holding Write Exclusive (X released it, if it held it).
        let release = ReservationCommand::Release {
            nsid: 1,
            action: ReleaseAction::Release,
            iekey: false,
            rtype: we,
        };
        resv(&xa, release, key(0xaa, 0)).await.unwrap();
        resv(yc, register.clone(), key(0, 0xbb)).await.unwrap();
        resv(yc, acquire(AcquireAction::Acquire), key(0xbb, 0))
            .await
            .unwrap();
        // Y's next write is slow at the drive, through `module`; X preempts Y meanwhile.
        let guard = module.target.manager().drive_guard("00").unwrap();
        guard.inject(Inject::SlowWrite(Duration::from_millis(1500)));
        let write = async {
            let done = yc.write(1, 8, common::random_data(4096, 9), false).await;
            (done, Instant::now())
        };
        let preempt = async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let done = resv(
                &xa,
                acquire(AcquireAction::PreemptAndAbort),
                key(0xaa, 0xbb),
            )
            .await;
            (done, Instant::now())
        };
        let ((written, written_at), (preempted, preempted_at)) = tokio::join!(write, preempt);
        written.expect("admitted before the preempt, the write completes");
        preempted.expect("X preempts Y");
        assert!(
            written_at <= preempted_at + Duration::from_millis(100),
            "through module {name}: Preempt and Abort completed {:?} before the preempted host's write",
            written_at - preempted_at
        );
        let fenced = yc.write(1, 8, common::random_data(4096, 10), false).await;
        assert_eq!(
            fenced.unwrap_err().status(),
            Some(Status::RESERVATION_CONFLICT)
        );
    }
    for c in [xa, ya, yb] {
        c.shutdown().await.unwrap();
    }
    a.stop().await;
    b.stop().await;
}

/// DH-HMAC-CHAP keys set through one module hold on the other (they travel in the
/// configuration push, never in an answer), and a module that was down gets them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_keys_set_through_one_module_hold_on_both() {
    use fabrik_proto::auth::Secret;
    let pair = Pair::new();
    let a = pair.start(ModuleId::A).await;
    let b = pair.start(ModuleId::B).await;
    let host = HostIdentity::random();
    let s = Secret::new(1, &[0x61; 32]).unwrap();
    a.admin
        .add_host(&HostRequest {
            nqn: host.nqn.clone(),
            dhchap_secret: Some(s.to_text().to_string()),
            ..Default::default()
        })
        .await
        .unwrap();
    let opts = |api: &Api, secret: Option<Secret>| {
        let mut o = common::options(api.nvme(), &common::api::nqn("00")).with_host(&host);
        o.dhchap_secret = secret;
        o
    };
    for api in [&a, &b] {
        assert!(Controller::connect(opts(api, None)).await.is_err());
        let c = Controller::connect(opts(api, Some(s.clone())))
            .await
            .unwrap();
        c.shutdown().await.unwrap();
        // The peer's view of the shared configuration shows no secret.
        let config = api.admin.module_config().await.unwrap().config.to_string();
        assert!(!config.contains(&s.to_text()[10..40]), "{config}");
    }
    // Rotated through B while A is down: A takes the new key when it is back.
    a.stop().await;
    let rotated = Secret::new(3, &[0x62; 64]).unwrap();
    b.admin
        .set_host_keys(
            &host.nqn,
            &fabrik_api::models::HostKeysRequest {
                dhchap_secret: Some(rotated.to_text().to_string()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let a = pair.start(ModuleId::A).await;
    wait_sync(&b, ConfigSync::InStep).await;
    assert!(Controller::connect(opts(&a, Some(s.clone())))
        .await
        .is_err());
    let c = Controller::connect(opts(&a, Some(rotated))).await.unwrap();
    c.shutdown().await.unwrap();
    a.stop().await;
    b.stop().await;
}
