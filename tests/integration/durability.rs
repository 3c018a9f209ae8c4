//! A Flush never reports success for data the media lost. A drive whose Flush (fdatasync) or
//! FUA write failed turns read-only for every host until an operator clears it: Linux reports a
//! lost writeback once and then lets the next fdatasync succeed. Here the failure is injected
//! at the drive (the interop guest has the real one: a file system whose device runs out of
//! space); the real fabrikd path above it is exercised end to end, over NVMe/TCP and REST.

mod common;
mod metrics_scrape;

use common::api::*;
use fabrik_api::client::ClientError;
use fabrik_api::models::Drive;
use fabrik_initiator::HostIdentity;
use fabrik_proto::nvme::features::fid;
use fabrik_proto::nvme::log::critical;
use fabrik_proto::nvme::NSID_BROADCAST;
use fabrik_proto::Status;
use fabrik_target::backend::guard::Inject;

const BLOCK: usize = 4096;

#[track_caller]
fn status<T: std::fmt::Debug>(r: Result<T, fabrik_initiator::HostError>) -> Option<Status> {
    match r {
        Ok(_) => Some(Status::SUCCESS),
        Err(e) => e.status(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_write_is_never_flushed_away() {
    let dir = tempfile::tempdir().unwrap();
    let api = start(dir.path()).await;
    let drive = "00";
    let (one, two) = (HostIdentity::random(), HostIdentity::random());
    let host1 = connect(api.nvme(), &nqn(drive), &one).await.unwrap();
    let host2 = connect(api.nvme(), &nqn(drive), &two).await.unwrap();

    // Host 1 writes (cached), then its Flush meets the lost writeback.
    let data = common::random_data(BLOCK, 1);
    host1.write(1, 0, data.clone(), false).await.unwrap();
    let guard = api.target.manager().drive_guard(drive).unwrap();
    guard.inject(Inject::SyncError);
    assert_eq!(status(host1.flush(1).await), Some(Status::WRITE_FAULT));

    // No Flush or FUA write succeeds on the drive again, for anyone: the next fdatasync would
    // have succeeded (Linux reports the error once).
    assert_eq!(status(host1.flush(1).await), Some(Status::WRITE_FAULT));
    assert_eq!(status(host2.flush(1).await), Some(Status::WRITE_FAULT));
    assert_eq!(
        status(host2.flush(NSID_BROADCAST).await),
        Some(Status::WRITE_FAULT)
    );
    let other = common::random_data(BLOCK, 2);
    assert_eq!(
        status(host2.write(1, 8, other.clone(), true).await),
        Some(Status::WRITE_FAULT)
    );
    assert_eq!(
        status(host2.write(1, 8, other.clone(), false).await),
        Some(Status::WRITE_FAULT)
    );
    assert_eq!(
        status(host2.write_zeroes(1, 8, 1).await),
        Some(Status::WRITE_FAULT)
    );
    assert_eq!(
        status(host2.deallocate(1, &[(8, 1)]).await),
        Some(Status::WRITE_FAULT)
    );
    // Reads go on.
    host2.read(1, 0, 1).await.unwrap();

    // Where people look: SMART, REST, metrics.
    let smart = host2.smart_log().await.unwrap();
    assert_eq!(
        smart.critical_warning & (critical::READ_ONLY | critical::DEGRADED),
        critical::READ_ONLY | critical::DEGRADED
    );
    let d = api.local.drive(drive).await.unwrap();
    assert_eq!(d.health.state, "read_only");
    assert!(
        d.health.fault.as_deref().unwrap().contains("writeback"),
        "{:?}",
        d.health
    );
    assert_eq!(
        d.health.critical_warnings & critical::READ_ONLY,
        critical::READ_ONLY
    );
    let (_, text) = metrics_scrape::scrape_with(api.api, None, Some(TOKEN)).await;
    let samples = metrics_scrape::parse(&text);
    assert_eq!(
        metrics_scrape::value(&samples, "fabrik_drive_read_only", &[("drive", drive)]),
        1.0
    );
    assert_eq!(
        metrics_scrape::value(&samples, "fabrik_drive_read_only", &[("drive", "01")]),
        0.0,
        "only the drive that lost a write"
    );

    // Kept across a restart (recorded in the state file).
    drop((host1, host2));
    let (mut state, deadline) = (String::new(), std::time::Instant::now());
    while !state.contains("drive_faults") {
        assert!(
            deadline.elapsed().as_secs() < 5,
            "the fault is not in state.json"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        state = std::fs::read_to_string(dir.path().join("state.json")).unwrap();
    }
    api.stop().await;
    let api = start(dir.path()).await;
    let host = connect(api.nvme(), &nqn(drive), &one).await.unwrap();
    assert_eq!(status(host.flush(1).await), Some(Status::WRITE_FAULT));
    assert_eq!(
        api.local.drive(drive).await.unwrap().health.state,
        "read_only"
    );

    // The operator clears it: writable again, and only once.
    match api
        .anon
        .post::<Drive>(&format!("/drives/{drive}/clear-fault"), &())
        .await
    {
        Err(ClientError::Api(p)) => assert_eq!(p.status, 401),
        other => panic!("clearing without the token: {other:?}"),
    }
    let d: Drive = api
        .local
        .post(&format!("/drives/{drive}/clear-fault"), &())
        .await
        .unwrap();
    assert_eq!((d.health.state.as_str(), d.health.fault), ("ok", None));
    assert_problem(
        api.local
            .post::<Drive>(&format!("/drives/{drive}/clear-fault"), &())
            .await,
        409,
        "no fault",
    );
    host.flush(1).await.unwrap();
    host.write(1, 0, data.clone(), true).await.unwrap();
    common::assert_same_data(&host.read(1, 0, 1).await.unwrap(), &data, "after clearing");
    host.shutdown().await.unwrap();
    api.stop().await;
}

/// A full file system fails that one write with Capacity Exceeded (as nvmet maps ENOSPC), not
/// as a media error, and the drive stays writable: nothing acknowledged was lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_space_is_capacity_exceeded_not_a_media_error() {
    let dir = tempfile::tempdir().unwrap();
    let api = start(dir.path()).await;
    let host = connect(api.nvme(), &nqn("01"), &HostIdentity::random())
        .await
        .unwrap();
    api.target
        .manager()
        .drive_guard("01")
        .unwrap()
        .inject(Inject::NoSpace);
    let data = common::random_data(BLOCK, 3);
    assert_eq!(
        status(host.write(1, 0, data.clone(), false).await),
        Some(Status::CAPACITY_EXCEEDED)
    );
    let d = api.local.drive("01").await.unwrap();
    assert_eq!((d.health.state.as_str(), d.health.media_errors), ("ok", 0));
    host.write(1, 0, data.clone(), false).await.unwrap();
    host.flush(1).await.unwrap();
    assert_eq!(host.smart_log().await.unwrap().media_errors, 0);
    host.shutdown().await.unwrap();
    api.stop().await;
}

/// Identify and Get Features agree on the volatile write cache, also once a namespace with a
/// cache joins the subsystem after the host connected; with the cache off, a deallocate is
/// durable when it completes (it ends with a flush, whose failure is its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_write_cache_is_reported_alike_and_honoured() {
    use fabrik_target::backend::guard::Guarded;
    use fabrik_target::model::Namespace;
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let target = common::start(common::config(
        dir.path(),
        fabrik_target::backend::BackendKind::Ram,
        1,
        16 << 20,
    ))
    .await;
    let nqn = common::nqns(&target)[0].clone();
    let host = fabrik_initiator::Controller::connect(common::options(common::addr(&target), &nqn))
        .await
        .unwrap();
    let reported = || async {
        let present = host.identify_controller().await.unwrap().vwc & 1;
        let enabled = host
            .get_features(fid::VOLATILE_WRITE_CACHE, 0, 0)
            .await
            .unwrap()
            & 1;
        (present as u32, enabled)
    };
    assert_eq!(
        reported().await,
        (0, 0),
        "RAM drives have no volatile cache"
    );
    let file =
        fabrik_target::backend::file::FileDrive::open(&dir.path().join("x.img"), 16 << 20, 4096)
            .unwrap();
    let guard = Arc::new(Guarded::new(Arc::new(file), None, Box::new(|_| {})));
    target
        .state()
        .subsystem(&nqn)
        .unwrap()
        .add_namespace(Arc::new(Namespace::new(2, "x", guard.clone(), "testbox:x")));
    assert_eq!(
        reported().await,
        (1, 1),
        "a file namespace joined: both say so"
    );
    host.set_features(fid::VOLATILE_WRITE_CACHE, 0, 0)
        .await
        .unwrap();
    assert_eq!(reported().await, (1, 0));
    guard.inject(Inject::SyncError);
    assert_eq!(
        status(host.deallocate(2, &[(0, 8)]).await),
        Some(Status::WRITE_FAULT),
        "with the cache off a deallocate is flushed before it completes"
    );
    // The drive lost a write: a shutdown (CC.SHN) cannot flush it and is never reported
    // complete (CSTS.SHST stays "occurring", CFS is set); the host gives up on it.
    let csts = host.property_get(0x1c, false).await.unwrap();
    assert_eq!(csts & 2, 0, "CSTS.CFS clear before the shutdown");
    assert!(
        host.shutdown().await.is_err(),
        "a shutdown that lost data is not complete"
    );
    target.shutdown().await;
}

/// A host that drops its connections while a write is still at the drive, then connects
/// again at once and writes the same block: the old write completes first (the queue waits
/// for its commands when it ends, and the host's new Connect waits for the old controller's
/// queues), so it cannot land over the new data afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_of_a_lost_connection_cannot_land_after_the_reconnect() {
    let dir = tempfile::tempdir().unwrap();
    let api = start(dir.path()).await;
    let me = HostIdentity::random();
    let old = connect(api.nvme(), &nqn("03"), &me).await.unwrap();
    let guard = api.target.manager().drive_guard("03").unwrap();
    guard.inject(Inject::SlowWrite(std::time::Duration::from_millis(800)));
    let stale = common::random_data(BLOCK, 10);
    let write = tokio::spawn(async move {
        // The connection goes away while this write waits at the drive.
        let _ = tokio::time::timeout(
            std::time::Duration::from_millis(200),
            old.write(1, 5, stale, false),
        )
        .await;
    });
    write.await.unwrap();
    let start = std::time::Instant::now();
    let new = connect(api.nvme(), &nqn("03"), &me).await.unwrap();
    let fresh = common::random_data(BLOCK, 11);
    new.write(1, 5, fresh.clone(), false).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1000)).await;
    common::assert_same_data(&new.read(1, 5, 1).await.unwrap(), &fresh, "block 5");
    assert!(
        start.elapsed() >= std::time::Duration::from_millis(400),
        "the reconnect waited for the old write"
    );
    new.shutdown().await.unwrap();
    api.stop().await;
}
