//! Sessions that outlive their connections: a target restarted in the middle of a verified
//! benchmark (the session reconnects, nothing acknowledged is lost, no command is dropped), a
//! path pulled during a multipath run (I/O continues on the survivor), and a target gone for
//! good (commands fail after the controller loss timeout, naming it, instead of hanging).

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use fabrik_initiator::bench::{self, Drive, Progress, Rw, Spec, VerifySpec};
use fabrik_initiator::host::session::{RecoveryPolicy, Session, SessionEvent};
use fabrik_initiator::ConnectOptions;
use fabrik_target::backend::BackendKind;
use fabrik_target::config::Config;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

const MIB: u64 = 1 << 20;

fn quick_policy(ctrl_loss: Duration) -> RecoveryPolicy {
    RecoveryPolicy {
        reconnect_delay: Duration::from_millis(100),
        ctrl_loss_tmo: Some(ctrl_loss),
    }
}

fn path_options(addr: SocketAddr, nqn: &str) -> ConnectOptions {
    let mut opts = options(addr, nqn);
    opts.io_queues = 2;
    opts.command_timeout = Duration::from_secs(5);
    opts
}

/// A TCP forwarder standing for a network path that can be pulled.
struct Proxy {
    addr: SocketAddr,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Proxy {
    async fn start(to: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let tasks: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let accept = tokio::spawn({
            let tasks = tasks.clone();
            async move {
                while let Ok((mut inbound, _)) = listener.accept().await {
                    let conn = tokio::spawn(async move {
                        if let Ok(mut outbound) = TcpStream::connect(to).await {
                            let _ = outbound.set_nodelay(true);
                            let _ = inbound.set_nodelay(true);
                            let _ =
                                tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        }
                    });
                    tasks.lock().unwrap().push(conn);
                }
            }
        });
        tasks.lock().unwrap().push(accept);
        Proxy { addr, tasks }
    }

    /// Pulls the path: no more connections, and the open ones are cut.
    fn pull(&self) {
        for t in self.tasks.lock().unwrap().drain(..) {
            t.abort();
        }
    }
}

async fn run_spec(drives: Vec<Drive>, spec: Spec) -> bench::Report {
    bench::run(drives, spec, Arc::new(Progress::default()))
        .await
        .expect("the run completes")
}

fn verified_mix(secs: f64) -> Spec {
    Spec {
        rw: Rw::RandRw,
        read_percent: 50,
        bs: 16384,
        iodepth: 4,
        threads: 2,
        size: Some(8 * MIB),
        time: Some(Duration::from_secs_f64(secs)),
        verify: Some(VerifySpec {
            seed: 0xfab,
            prefill: true,
        }),
        ..Spec::default()
    }
}

/// A target on one file drive in `dir`, its config (to start it again on the same port) and a
/// session to it that waits out a restart.
async fn restartable(dir: &std::path::Path) -> (Config, fabrik_target::Target, Arc<Session>) {
    let mut cfg: Config = config(dir, BackendKind::File, 1, 64 * MIB);
    let target = start(cfg.clone()).await;
    let addr = addr(&target);
    cfg.listen = vec![addr]; // the restarted target comes back on the same port
    let nqn = nqns(&target)[0].clone();
    let session = Session::connect(
        vec![path_options(addr, &nqn)],
        quick_policy(Duration::from_secs(30)),
    )
    .await
    .unwrap();
    (cfg, target, session)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn target_restart_mid_run_reconnects_with_no_verify_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, target, session) = restartable(dir.path()).await;
    let mut events = session.events();
    let drive = Drive::open(session.clone(), 1).await.unwrap();

    let run = tokio::spawn(run_spec(vec![drive], verified_mix(3.0)));
    tokio::time::sleep(Duration::from_millis(800)).await;
    target.shutdown().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let target = start(cfg).await;
    let report = run.await.unwrap();

    let v = report.verify.expect("verify results");
    assert_eq!(v.errors, 0, "{:?}", v.first_errors);
    assert!(v.blocks_checked > 0);
    let (r, w) = (report.read.unwrap(), report.write.unwrap());
    assert!(r.ios > 0 && w.ios > 0);
    let mut down = false;
    let mut up = false;
    while let Ok(e) = events.try_recv() {
        match e {
            SessionEvent::PathDown { path: 0, .. } => down = true,
            SessionEvent::PathUp { path: 0, .. } => up = true,
            _ => {}
        }
    }
    assert!(down && up, "the session saw the path go down and come back");
    assert_eq!(session.live_paths(), 1);
    session.shutdown().await;
    target.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pulled_path_loses_no_io_in_a_multipath_run() {
    let dir = tempfile::tempdir().unwrap();
    let target = start(config(dir.path(), BackendKind::Ram, 1, 64 * MIB)).await;
    let nqn = nqns(&target)[0].clone();
    let proxy = Proxy::start(addr(&target)).await;
    let host = fabrik_initiator::HostIdentity::random();
    let paths = vec![
        path_options(addr(&target), &nqn).with_host(&host),
        path_options(proxy.addr, &nqn).with_host(&host),
    ];
    // The proxied path never comes back: it is given up after a second, the run goes on.
    let session = Session::connect(paths, quick_policy(Duration::from_secs(1)))
        .await
        .unwrap();
    assert_eq!(session.live_paths(), 2, "one device, two paths");
    let mut events = session.events();
    let drive = Drive::open(session.clone(), 1).await.unwrap();

    let started = Instant::now();
    let run = tokio::spawn(run_spec(vec![drive], verified_mix(2.5)));
    tokio::time::sleep(Duration::from_millis(700)).await;
    proxy.pull();
    let report = run.await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(15));
    let v = report.verify.expect("verify results");
    assert_eq!(v.errors, 0, "{:?}", v.first_errors);
    assert!(report.ios > 0);
    assert_eq!(session.live_paths(), 1, "the survivor");
    let mut seen = Vec::new();
    while let Ok(e) = events.try_recv() {
        seen.push(format!("{e:?}"));
    }
    assert!(
        seen.iter().any(|e| e.starts_with("PathDown { path: 1")),
        "{seen:?}"
    );
    assert!(
        seen.iter().any(|e| e.starts_with("PathGivenUp { path: 1")),
        "{seen:?}"
    );
    assert!(!seen.iter().any(|e| e.contains("path: 0")), "{seen:?}");
    session.shutdown().await;
    target.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_fail_after_the_controller_loss_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let target = start(config(dir.path(), BackendKind::Ram, 1, 16 * MIB)).await;
    let nqn = nqns(&target)[0].clone();
    let session = Session::connect(
        vec![path_options(addr(&target), &nqn)],
        quick_policy(Duration::from_millis(800)),
    )
    .await
    .unwrap();
    session
        .read(0, 1, 0, 1)
        .await
        .expect("a read while the target is up");
    target.shutdown().await;

    let started = Instant::now();
    let err = session
        .read(0, 1, 0, 1)
        .await
        .expect_err("no target, no path: the read fails");
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(8),
        "failed after {waited:?}, not hung"
    );
    let text = err.to_string();
    assert!(
        text.contains("controller loss timeout") && text.contains(&nqn),
        "{text}"
    );
    // A command error (not a path error) comes back at once, not retried: a fresh session
    // to a live target, an LBA past the end.
    let target = start(config(dir.path(), BackendKind::Ram, 1, 16 * MIB)).await;
    let session = Session::connect(
        vec![path_options(addr(&target), &nqns(&target)[0])],
        quick_policy(Duration::from_secs(5)),
    )
    .await
    .unwrap();
    let err = session
        .read(0, 1, 1 << 40, 1)
        .await
        .expect_err("out of range");
    assert!(err.status().is_some(), "an NVMe status: {err}");
    assert!(
        err.to_string()
            .contains("Read (NSID 1, SLBA 1099511627776)"),
        "{err}"
    );
    session.shutdown().await;
    target.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_changes_are_surfaced_once_per_session() {
    use fabrik_target::backend::ram::RamDrive;
    use fabrik_target::model::Namespace;

    let dir = tempfile::tempdir().unwrap();
    let target = start(config(dir.path(), BackendKind::Ram, 1, 16 * MIB)).await;
    let nqn = nqns(&target)[0].clone();
    let host = fabrik_initiator::HostIdentity::random();
    // Two paths (two controllers): each gets the notice, the session reports it once.
    let session = Session::connect(
        vec![
            path_options(addr(&target), &nqn).with_host(&host),
            path_options(addr(&target), &nqn).with_host(&host),
        ],
        quick_policy(Duration::from_secs(5)),
    )
    .await
    .unwrap();
    let mut events = session.events();
    let deadline = Instant::now() + Duration::from_secs(10);
    while session.namespaces().is_none() {
        assert!(
            Instant::now() < deadline,
            "the session lists its namespaces"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(session.namespaces(), Some(vec![1]));

    let subsystem = target.state().subsystem(&nqn).unwrap();
    let drive = Arc::new(RamDrive::new(8 * MIB, 4096).unwrap());
    subsystem.add_namespace(Arc::new(Namespace::new(2, "extra", drive, "testbox:extra")));
    let event = tokio::time::timeout(Duration::from_secs(10), events.recv())
        .await
        .expect("an event in time")
        .unwrap();
    assert!(
        matches!(event, SessionEvent::NamespaceAdded { nsid: 2 }),
        "{event:?}"
    );
    // The namespace is usable through the session right away.
    session
        .write(0, 2, 0, bytes::Bytes::from(vec![7u8; 4096]), false)
        .await
        .unwrap();
    assert_eq!(
        &session.read(0, 2, 0, 1).await.unwrap()[..],
        &[7u8; 4096][..]
    );

    subsystem.remove_namespace(1);
    let event = tokio::time::timeout(Duration::from_secs(10), events.recv())
        .await
        .expect("an event in time")
        .unwrap();
    assert!(
        matches!(event, SessionEvent::NamespaceRemoved { nsid: 1 }),
        "{event:?}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        events.try_recv().is_err(),
        "the other path's notices added nothing"
    );
    assert_eq!(session.namespaces(), Some(vec![2]));
    session.shutdown().await;
    target.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_failing_on_every_connection_is_failed_not_retried_forever() {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use fabrik_initiator::proto::Status;
    use fabrik_initiator::HostError;

    let dir = tempfile::tempdir().unwrap();
    let target = start(config(dir.path(), BackendKind::Ram, 1, 16 * MIB)).await;
    let nqn = nqns(&target)[0].clone();
    let policy = RecoveryPolicy {
        reconnect_delay: Duration::from_millis(30),
        ctrl_loss_tmo: Some(Duration::from_secs(30)),
    };
    let session = Session::connect(vec![path_options(addr(&target), &nqn)], policy)
        .await
        .unwrap();
    let mut events = session.events();

    // A path failure every time: retried on a new connection each time, then failed.
    let tries = AtomicUsize::new(0);
    let err = session
        .with_path(|_ctrl| {
            tries.fetch_add(1, Ordering::Relaxed);
            async { Err::<(), _>(HostError::ConnectionClosed { qid: 1 }) }
        })
        .await
        .expect_err("given up");
    assert_eq!(tries.load(Ordering::Relaxed), 8);
    assert!(
        err.to_string().contains("failed on 8 connections in turn"),
        "{err}"
    );
    let mut ups = 0;
    while let Ok(e) = events.try_recv() {
        ups += matches!(e, SessionEvent::PathUp { .. }) as usize;
    }
    assert_eq!(ups, 7, "a new connection before each retry");

    // The command's own error status: returned at once.
    let tries = AtomicUsize::new(0);
    let err = session
        .with_path(|_ctrl| {
            tries.fetch_add(1, Ordering::Relaxed);
            async {
                Err::<(), _>(HostError::Status {
                    status: Status::LBA_OUT_OF_RANGE,
                    command: "Read (NSID 1, SLBA 99)".into(),
                    qid: 1,
                    result: 0,
                })
            }
        })
        .await
        .expect_err("the status");
    assert_eq!(tries.load(Ordering::Relaxed), 1);
    assert_eq!(err.status(), Some(Status::LBA_OUT_OF_RANGE));
    session.shutdown().await;
    target.shutdown().await;
}

/// A target exporting its drive 00 as `nqn`. Namespace identifiers derive from the box name:
/// two boxes give the same NQN different namespaces (a misconfiguration multipath must catch).
/// File drives: a RAM drive's identity is new at every start.
fn shared_nqn_config(dir: &std::path::Path, box_name: &str, nqn: &str) -> Config {
    let mut cfg = config(dir, BackendKind::File, 1, 16 * MIB);
    cfg.box_name = box_name.into();
    cfg.subsystem_specs = vec![fabrik_target::config::SubsystemSpec {
        nqn: nqn.into(),
        drives: vec!["00".into()],
        hosts: None,
        model: None,
    }];
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_to_other_namespaces_under_the_same_nqn_is_refused() {
    let nqn = "nqn.2024-01.io.fabrik.test:shared";
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let box_a = start(shared_nqn_config(dirs[0].path(), "box-a", nqn)).await;
    let box_b = start(shared_nqn_config(dirs[1].path(), "box-b", nqn)).await;
    let policy = quick_policy(Duration::from_secs(1));

    // Box a and box b: the same NQN, not the same namespace. Refused at connect.
    let err = Session::connect(
        vec![
            path_options(addr(&box_a), nqn),
            path_options(addr(&box_b), nqn),
        ],
        policy,
    )
    .await
    .err()
    .expect("refused");
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("path 1 ({})", addr(&box_b)))
            && msg.contains("other namespaces under the same NQN")
            && msg.contains("namespace 1 is NGUID"),
        "{msg}"
    );

    // A twin of box a (same box name, so the same identifiers): one device, two paths.
    let twin = start(shared_nqn_config(dirs[2].path(), "box-a", nqn)).await;
    let session = Session::connect(
        vec![
            path_options(addr(&box_a), nqn),
            path_options(addr(&twin), nqn),
        ],
        policy,
    )
    .await
    .unwrap();
    assert_eq!(session.live_paths(), 2);
    session.shutdown().await;
    twin.shutdown().await;
    box_b.shutdown().await;

    // Box a replaced on its port by box b: the path is not re-joined, it is given up.
    let a_addr = addr(&box_a);
    let session = Session::connect(vec![path_options(a_addr, nqn)], policy)
        .await
        .unwrap();
    let mut events = session.events();
    session.read(0, 1, 0, 1).await.unwrap();
    box_a.shutdown().await;
    let mut cfg = shared_nqn_config(dirs[1].path(), "box-b", nqn);
    cfg.listen = vec![a_addr];
    let box_b = start(cfg).await;
    let err = session.read(0, 1, 0, 1).await.expect_err("no path left");
    let msg = err.to_string();
    assert!(
        msg.contains("every path lost") && msg.contains("other namespaces under the same NQN"),
        "{msg}"
    );
    let mut seen = Vec::new();
    while let Ok(e) = events.try_recv() {
        seen.push(format!("{e:?}"));
    }
    assert!(
        seen.iter().any(|e| e.starts_with("PathGivenUp")),
        "{seen:?}"
    );
    assert!(!seen.iter().any(|e| e.starts_with("PathUp")), "{seen:?}");
    session.shutdown().await;
    box_b.shutdown().await;
}

/// Staged GPU reads (an emulated GPU, no --verify: the workers' completion queues) across a
/// target restart: the reads in flight when it goes fail, go once more the futures' way with
/// their staging slots, and the pass still reads every unit once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn staged_gpu_reads_survive_a_target_restart() {
    use fabrik_initiator::bench::Memory;
    use fabrik_initiator::gpu::Gpu;
    let dir = tempfile::tempdir().unwrap();
    let (cfg, target, session) = restartable(dir.path()).await;
    let drive = Drive::open(session.clone(), 1).await.unwrap();
    let spec = Spec {
        rw: Rw::RandRead,
        bs: 16384,
        iodepth: 8,
        threads: 2,
        size: Some(8 * MIB),
        time: Some(Duration::from_secs(3)),
        memory: Memory::Gpu(Gpu::emulated()),
        ..Spec::default()
    };
    let run = tokio::spawn(run_spec(vec![drive], spec));
    tokio::time::sleep(Duration::from_millis(800)).await;
    target.shutdown().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let target = start(cfg).await;
    let report = run.await.unwrap();
    let r = report.read.expect("reads");
    assert!(r.ios > 0);
    assert_eq!(report.memory.expect("memory").path, "staged");
    // The longest read waited for the target to come back.
    assert!(report.lat_us.max >= 300_000.0, "{:?}", report.lat_us);
    session.shutdown().await;
    target.shutdown().await;
}
