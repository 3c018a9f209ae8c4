//! QoS (issue 19): a host capped at N IOPS gets N ± 5%, another host on the same drives is not
//! held back, a bandwidth cap holds, lifting the cap frees the host, and the controller's
//! metrics count the waits.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::api::{self, MIB};
use fabrik_api::models::QosLimits;
use fabrik_initiator::{Controller, HostIdentity};
use fabrik_target::backend::BackendKind;

/// Reads of `blocks` 4 KiB blocks, 8 at a time, from `start` for `run`; the completions
/// counted between `from` and `run` after start, per second.
async fn read_rate(c: Arc<Controller>, blocks: u32, run: Duration, from: Duration) -> f64 {
    let t0 = Instant::now();
    let counted = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for w in 0..8u64 {
        let (c, counted) = (c.clone(), counted.clone());
        tasks.push(tokio::spawn(async move {
            let mut lba = w * 64;
            while t0.elapsed() < run {
                c.read(1, lba % 2048, blocks).await.unwrap();
                let at = t0.elapsed();
                if at >= from && at < run {
                    counted.fetch_add(1, Ordering::Relaxed);
                }
                lba += blocks as u64;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    counted.load(Ordering::Relaxed) as f64 / (run - from).as_secs_f64()
}

async fn connect(a: &api::Api, host: &HostIdentity) -> Arc<Controller> {
    connect_to(a, "00", host).await
}

async fn connect_to(a: &api::Api, drive: &str, host: &HostIdentity) -> Arc<Controller> {
    let mut opts = common::options(a.nvme(), &api::nqn(drive)).with_host(host);
    opts.queue_size = 32;
    Arc::new(Controller::connect(opts).await.unwrap())
}

fn throttled_ops(a: &api::Api, host: &HostIdentity) -> u64 {
    a.target
        .state()
        .controllers()
        .iter()
        .filter(|c| c.hostnqn.as_deref() == Some(host.nqn.as_str()))
        .flat_map(|c| {
            c.io_counters
                .all()
                .map(|x| x.throttled_ops.load(Ordering::Relaxed))
                .collect::<Vec<_>>()
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capped_host_gets_its_rate_and_the_other_is_not_held_back() {
    let dir = tempfile::tempdir().unwrap();
    let a = api::start_with(common::config(dir.path(), BackendKind::Ram, 1, 16 * MIB)).await;
    let (capped, free) = (HostIdentity::random(), HostIdentity::random());
    let (c1, c2) = (connect(&a, &capped).await, connect(&a, &free).await);
    let window = |s: u64| (Duration::from_millis(s), Duration::from_millis(500));

    let (run, from) = window(1500);
    let solo = read_rate(c2.clone(), 1, run, from).await;

    let view = a
        .admin
        .set_host_qos(
            &capped.nqn,
            &QosLimits {
                iops: Some(1000),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(view.qos.unwrap().iops, Some(1000));
    // Both at once: the capped host at 1000 ± 5%, the other at least well past it and not
    // far below its rate alone (this machine's noise: a loose bound).
    let (run, from) = window(3000);
    let (r1, r2) = tokio::join!(
        read_rate(c1.clone(), 1, run, from),
        read_rate(c2.clone(), 1, run, from)
    );
    assert!((950.0..=1050.0).contains(&r1), "capped host: {r1:.0} IOPS");
    assert!(
        r2 > 3000.0 && r2 > 0.5 * solo,
        "free host: {r2:.0} IOPS (alone {solo:.0})"
    );
    assert!(throttled_ops(&a, &capped) > 0);
    assert_eq!(throttled_ops(&a, &free), 0);

    // A bandwidth cap on reads: 64 KiB reads at 8 MiB/s, 128 per second.
    a.admin
        .set_host_qos(
            &capped.nqn,
            &QosLimits {
                read_bytes_per_sec: Some(8 << 20),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let (run, from) = window(3000);
    let r = read_rate(c1.clone(), 16, run, from).await;
    assert!(
        (121.0..=135.0).contains(&r),
        "8 MiB/s of 64 KiB reads: {r:.1} per second"
    );

    // Lifted: the host runs free again.
    let view = a
        .admin
        .set_host_qos(&capped.nqn, &QosLimits::default())
        .await
        .unwrap();
    assert!(view.qos.is_none());
    let (run, from) = window(1500);
    let r = read_rate(c1.clone(), 1, run, from).await;
    assert!(r > 3000.0, "lifted: {r:.0} IOPS");

    // A limit of 0 is refused: lifting is null.
    let r = a
        .admin
        .set_host_qos(
            &capped.nqn,
            &QosLimits {
                iops: Some(0),
                ..Default::default()
            },
        )
        .await;
    api::assert_problem(r, 422, "null");
    a.stop().await;
}

/// A drive's limit is shared by every host that reads it; another drive is not held back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drive_limit_is_shared_by_its_hosts() {
    let dir = tempfile::tempdir().unwrap();
    let a = api::start_with(common::config(dir.path(), BackendKind::Ram, 2, 16 * MIB)).await;
    let (h1, h2) = (HostIdentity::random(), HostIdentity::random());
    let (c1, c2) = (connect(&a, &h1).await, connect(&a, &h2).await);
    let other = connect_to(&a, "01", &h1).await;
    let view = a
        .admin
        .set_drive_qos(
            "00",
            &QosLimits {
                read_iops: Some(800),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(view.qos.unwrap().read_iops, Some(800));
    let (run, from) = (Duration::from_millis(3000), Duration::from_millis(500));
    let (r1, r2, free) = tokio::join!(
        read_rate(c1.clone(), 1, run, from),
        read_rate(c2.clone(), 1, run, from),
        read_rate(other.clone(), 1, run, from)
    );
    assert!(
        (760.0..=840.0).contains(&(r1 + r2)),
        "drive 00: {r1:.0} + {r2:.0} IOPS"
    );
    assert!(
        r1 > 200.0 && r2 > 200.0,
        "both hosts get a share: {r1:.0}, {r2:.0}"
    );
    assert!(free > 2000.0, "drive 01: {free:.0} IOPS");
    // Lifted, and unknown drives are 404.
    let view = a
        .admin
        .set_drive_qos("00", &QosLimits::default())
        .await
        .unwrap();
    assert!(view.qos.is_none());
    api::assert_problem(
        a.admin.set_drive_qos("99", &QosLimits::default()).await,
        404,
        "99",
    );
    a.stop().await;
}
