//! Protected volumes end to end: made through REST, served over NVMe/TCP as namespace 1 of
//! their own subsystem, a member failed mid-I/O with no error for the host and the data whole,
//! kept across a restart (degraded, the failure remembered), deleted with the drives back in
//! their subsystems; and the API's refusals.

mod common;
mod metrics_scrape;

use common::api::*;
use fabrik_api::models::{Volume, VolumeRequest};
use fabrik_initiator::HostIdentity;
use fabrik_target::backend::BackendKind;

const BLOCK: usize = 4096;
/// Past the first 16 MiB, where `BackgroundIo` writes.
const BEYOND_BACKGROUND: u64 = 4096;

fn r5_request() -> VolumeRequest {
    VolumeRequest {
        name: "r5".into(),
        level: "raid5".into(),
        drives: ["00", "01", "02", "03", "04"].map(String::from).to_vec(),
        strip_kib: Some(64),
        spares: vec!["05".into()],
        ..Default::default()
    }
}

fn member_states(v: &Volume) -> Vec<(&str, &str)> {
    v.members
        .iter()
        .map(|m| (m.drive.as_str(), m.state.as_str()))
        .collect()
}

/// Writes `count` chunks of `blocks` blocks spread over the volume and returns them.
async fn write_spread(
    ctrl: &fabrik_initiator::Controller,
    base: u64,
    count: u64,
    blocks: u32,
    seed: u64,
) -> Vec<(u64, bytes::Bytes)> {
    let mut out = Vec::new();
    for i in 0..count {
        // Odd offsets: most writes are parts of stripes (read-modify-write), some whole.
        let slba = base + i * 97 + 3 * (i % 2);
        let data = common::random_data(blocks as usize * BLOCK, seed + i);
        ctrl.write(1, slba, data.clone(), i % 5 == 0).await.unwrap();
        out.push((slba, data));
    }
    out
}

async fn verify(ctrl: &fabrik_initiator::Controller, written: &[(u64, bytes::Bytes)], what: &str) {
    for (slba, data) in written {
        let got = ctrl
            .read(1, *slba, (data.len() / BLOCK) as u32)
            .await
            .unwrap();
        common::assert_same_data(&got, data, &format!("{what}: LBA {slba}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raid5_volume_survives_a_member_failure_and_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = common::config(dir.path(), BackendKind::File, 8, 32 * MIB);
    let api = start_with(cfg.clone()).await;
    let mut no_spare = r5_request();
    no_spare.spares.clear();
    let v = api.admin.create_volume(&no_spare).await.unwrap();
    assert_eq!(v.nqn, "nqn.2024-01.io.fabrik:testbox:vol-r5");
    assert_eq!(v.state, "optimal");
    // 4 data strips of (32 - 4) MiB each.
    assert_eq!(v.capacity_bytes, 4 * 28 * MIB);
    // Its drives are no longer exported alone; the volume's subsystem is.
    let d = api.admin.drive("02").await.unwrap();
    assert!(d.subsystems.is_empty(), "{:?}", d.subsystems);
    assert_eq!(d.volume.as_deref(), Some("r5"));
    assert!(api.admin.subsystem(&nqn("02")).await.is_err());
    let host = HostIdentity::random();
    assert!(connect(api.nvme(), &nqn("02"), &host).await.is_err());

    let ctrl = connect(api.nvme(), &v.nqn, &host).await.unwrap();
    let ns = ctrl.identify_namespace(1).await.unwrap();
    assert_eq!(ns.nsze * BLOCK as u64, v.capacity_bytes);
    let mut written = write_spread(&ctrl, BEYOND_BACKGROUND, 40, 8, 100).await;
    // A whole 1 MiB of stripes, and a write across a stripe boundary.
    let big = common::random_data(1 << 20, 7);
    ctrl.write(1, 16384, big.clone(), false).await.unwrap();
    written.push((16384, big));
    verify(&ctrl, &written, "healthy").await;

    // A member fails while another host writes and reads: neither sees an error.
    let background = common::BackgroundIo::start(api.nvme(), &v.nqn).await;
    let since = background.rounds();
    let v = api.admin.fail_volume_member("r5", "03").await.unwrap();
    assert_eq!(v.state, "degraded");
    assert!(member_states(&v).contains(&("03", "failed")));
    assert_problem(
        api.admin.fail_volume_member("r5", "03").await,
        409,
        "failed already",
    );
    background.finish(since).await;
    verify(&ctrl, &written, "degraded").await;
    let (_, text) = metrics_scrape::scrape_with(api.api, None, Some(TOKEN)).await;
    let samples = metrics_scrape::parse(&text);
    let metric =
        |name: &str, labels: &[(&str, &str)]| metrics_scrape::value(&samples, name, labels);
    let r5 = ("volume", "r5");
    assert_eq!(
        metric("fabrik_volume_state", &[r5, ("state", "degraded")]),
        1.0
    );
    assert_eq!(
        metric("fabrik_volume_state", &[r5, ("state", "optimal")]),
        0.0
    );
    let failed = [r5, ("drive", "03"), ("state", "failed")];
    assert_eq!(metric("fabrik_volume_member_state", &failed), 1.0);
    assert!(metric("fabrik_volume_reconstructed_reads_total", &[r5]) > 0.0);
    assert!(metric("fabrik_volume_write_ops_total", &[r5]) >= 41.0);
    assert!(metric("fabrik_volume_rmw_stripes_total", &[r5]) > 0.0);
    assert!(metric("fabrik_volume_full_stripes_total", &[r5]) >= 4.0);
    let more = write_spread(&ctrl, BEYOND_BACKGROUND + 8192, 20, 3, 500).await;
    verify(&ctrl, &more, "written degraded").await;
    written.extend(more);
    ctrl.flush(1).await.unwrap();
    assert!(api.admin.volume("r5").await.unwrap().reconstructed_reads > 0);
    ctrl.shutdown().await.unwrap();
    api.stop().await;

    // Restarted: assembled degraded, the failed member still failed (never read again).
    let api = start_with(cfg).await;
    let v = api.admin.volume("r5").await.unwrap();
    assert_eq!(v.state, "degraded");
    assert!(member_states(&v).contains(&("03", "failed")));
    assert_eq!(v.unsynced_regions, 0);
    let ctrl = connect(api.nvme(), &v.nqn, &host).await.unwrap();
    verify(&ctrl, &written, "after the restart").await;
    ctrl.shutdown().await.unwrap();

    // Deleted: the drives are back in their own subsystems.
    api.admin.delete_volume("r5").await.unwrap();
    assert!(api.admin.volumes().await.unwrap().is_empty());
    let d = api.admin.drive("03").await.unwrap();
    assert_eq!(d.subsystems, [nqn("03")]);
    assert_eq!(d.volume, None);
    connect_and_close(api.nvme(), &nqn("05"), &host).await;
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_level_serves_and_raid6_survives_two_failures() {
    let dir = tempfile::tempdir().unwrap();
    let api = start_with(common::config(dir.path(), BackendKind::Ram, 12, 16 * MIB)).await;
    let host = HostIdentity::random();
    let levels = [
        ("m1", "raid1", &["00", "01"][..]),
        ("m10", "raid10", &["02", "03", "04", "05"][..]),
        ("s0", "raid0", &["06", "07"][..]),
        ("p6", "raid6", &["08", "09", "10", "11"][..]),
    ];
    for (name, level, drives) in levels {
        let v = api
            .admin
            .create_volume(&VolumeRequest {
                name: name.into(),
                level: level.into(),
                drives: drives.iter().map(|d| d.to_string()).collect(),
                strip_kib: Some(16),
                spares: vec![],
                ..Default::default()
            })
            .await
            .unwrap();
        let ctrl = connect(api.nvme(), &v.nqn, &host).await.unwrap();
        let written = write_spread(&ctrl, 0, 16, 5, 9).await;
        verify(&ctrl, &written, level).await;
        if level == "raid6" {
            api.admin.fail_volume_member(name, "08").await.unwrap();
            api.admin.fail_volume_member(name, "10").await.unwrap();
            verify(&ctrl, &written, "raid6 without two members").await;
            let more = write_spread(&ctrl, 0, 8, 2, 77).await;
            verify(&ctrl, &more, "raid6 written without two members").await;
            let v = api.admin.fail_volume_member(name, "11").await.unwrap();
            assert_eq!(v.state, "failed");
            assert!(ctrl.read(1, 0, 1).await.is_err(), "past its redundancy");
            // Its Flush fails, so a shutdown never reports complete.
            assert!(ctrl.shutdown().await.is_err());
            continue;
        }
        ctrl.shutdown().await.unwrap();
    }
    api.stop().await;
}

/// A one-drive RAID 0 capped below what its drive holds (what the CSI driver makes by
/// default): it serves the cap, rounded up to a stripe, reads zeros where an earlier tenant
/// wrote, keeps its size across a restart; a cap the drive cannot hold is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_drive_volume_serves_only_its_capacity() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = common::config(dir.path(), BackendKind::File, 2, 32 * MIB);
    let api = start_with(cfg.clone()).await;
    let host = HostIdentity::random();
    // An earlier tenant's data on drive 00, where the volume's data area will be.
    let open = fabrik_api::models::CompositionRequest {
        host_nqn: host.nqn.clone(),
        drives: vec!["00".into()],
        ports: None,
        shared: false,
    };
    let c = api.admin.compose(&open).await.unwrap();
    let ctrl = connect(api.nvme(), &nqn("00"), &host).await.unwrap();
    let old = common::random_data(64 * BLOCK, 3);
    ctrl.write(1, 2048, old, true).await.unwrap();
    ctrl.shutdown().await.unwrap();
    api.admin.decompose(&c.id).await.unwrap();

    let mut req = VolumeRequest {
        name: "one".into(),
        level: "raid0".into(),
        drives: vec!["00".into()],
        allow_any_host: Some(false),
        ..Default::default()
    };
    assert_problem(
        api.admin
            .create_volume(&VolumeRequest {
                capacity_bytes: Some(64 * MIB),
                ..req.clone()
            })
            .await,
        422,
        "not one these drives hold",
    );
    req.capacity_bytes = Some(10 * MIB + 1);
    let v = api.admin.create_volume(&req).await.unwrap();
    // Rounded up to whole 64 KiB stripes.
    assert_eq!(v.capacity_bytes, 10 * MIB + 64 * 1024);
    // Closed: no host till one is composed to it.
    assert!(connect(api.nvme(), &v.nqn, &host).await.is_err());
    let open = fabrik_api::models::CompositionRequest {
        drives: vec![v.id.clone()],
        ..open
    };
    api.admin.compose(&open).await.unwrap();
    let ctrl = connect(api.nvme(), &v.nqn, &host).await.unwrap();
    let ns = ctrl.identify_namespace(1).await.unwrap();
    assert_eq!(ns.nsze * BLOCK as u64, v.capacity_bytes);
    let zeros = ctrl.read(1, 0, 2560).await.unwrap();
    assert!(zeros.iter().all(|b| *b == 0), "a new volume reads zeros");
    let last = ns.nsze - 8;
    let data = common::random_data(8 * BLOCK, 9);
    ctrl.write(1, last, data.clone(), true).await.unwrap();
    assert!(ctrl.write(1, ns.nsze, data.clone(), false).await.is_err());
    ctrl.shutdown().await.unwrap();
    api.stop().await;

    // Restarted with hosts configured (any host, here): a closed volume stays closed.
    let mut cfg = cfg;
    cfg.explicit.hosts = true;
    cfg.allowed_hosts = None;
    let api = start_with(cfg).await;
    let v = api.admin.volume("one").await.unwrap();
    assert_eq!(v.capacity_bytes, 10 * MIB + 64 * 1024);
    assert!(connect(api.nvme(), &v.nqn, &HostIdentity::random())
        .await
        .is_err());
    let ctrl = connect(api.nvme(), &v.nqn, &host).await.unwrap();
    let got = ctrl.read(1, last, 8).await.unwrap();
    common::assert_same_data(&got, &data, "after the restart");
    ctrl.shutdown().await.unwrap();
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volume_requests_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let api = start_with(common::config(dir.path(), BackendKind::Ram, 8, 16 * MIB)).await;
    let a = &api.admin;
    let req = |f: &dyn Fn(&mut VolumeRequest)| {
        let mut r = r5_request();
        f(&mut r);
        r
    };
    assert_problem(
        a.create_volume(&req(&|r| r.level = "raid4".into())).await,
        422,
        "unknown level",
    );
    assert_problem(
        a.create_volume(&req(&|r| r.drives.truncate(2))).await,
        422,
        "at least 3",
    );
    assert_problem(
        a.create_volume(&req(&|r| r.strip_kib = Some(48))).await,
        422,
        "power of two",
    );
    assert_problem(
        a.create_volume(&req(&|r| r.name = "a/b".into())).await,
        422,
        "letters",
    );
    assert_problem(
        a.create_volume(&req(&|r| r.drives[1] = "00".into())).await,
        422,
        "twice",
    );
    assert_problem(
        a.create_volume(&req(&|r| r.drives[4] = "99".into())).await,
        404,
        "no drive",
    );
    assert_problem(
        api.anon.create_volume(&req(&|r| r.spares.clear())).await,
        401,
        "",
    );
    // A composed drive stays with its host.
    let host = HostIdentity::random();
    a.compose(&fabrik_api::models::CompositionRequest {
        host_nqn: host.nqn.clone(),
        drives: vec!["04".into()],
        ports: None,
        shared: false,
    })
    .await
    .unwrap();
    assert_problem(
        a.create_volume(&req(&|r| r.spares.clear())).await,
        409,
        "composed",
    );
    let ok = req(&|r| {
        r.spares = vec!["06".into()];
        r.drives[4] = "05".into();
    });
    let v = a.create_volume(&ok).await.unwrap();
    assert_problem(a.create_volume(&ok).await, 409, "exists");
    let again = req(&|r| {
        r.name = "other".into();
        r.drives = vec!["06".into(), "07".into(), "00".into()];
        r.spares.clear();
    });
    assert_problem(a.create_volume(&again).await, 409, "in volume r5");
    // A member cannot be exported alone while in the volume.
    let add = fabrik_api::models::NamespaceRequest {
        drive: "01".into(),
        nsid: None,
    };
    let path = format!("/subsystems/{}/namespaces", v.nqn);
    let added: Result<serde_json::Value, _> = a.post(&path, &add).await;
    assert_problem(added, 409, "in volume r5");
    assert_problem(a.fail_volume_member("r5", "07").await, 404, "no member");
    assert_problem(a.fail_volume_member("nope", "01").await, 404, "no volume");
    // Composed like a drive, by its ID; then it cannot be deleted.
    let c = a
        .compose(&fabrik_api::models::CompositionRequest {
            host_nqn: host.nqn.clone(),
            drives: vec![v.id.clone()],
            ports: None,
            shared: false,
        })
        .await
        .unwrap();
    connect_and_close(api.nvme(), &v.nqn, &host).await;
    assert!(connect(api.nvme(), &v.nqn, &HostIdentity::random())
        .await
        .is_err());
    assert_problem(a.delete_volume("r5").await, 409, "decompose");
    a.decompose(&c.id).await.unwrap();
    a.delete_volume("r5").await.unwrap();
    assert_problem(a.delete_volume("r5").await, 404, "no volume");
    api.stop().await;
}

/// Polls the volume until `done` holds (at most 30 s).
async fn wait_volume(api: &Api, name: &str, what: &str, done: impl Fn(&Volume) -> bool) -> Volume {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let v = api.admin.volume(name).await.unwrap();
        if done(&v) {
            return v;
        }
        assert!(std::time::Instant::now() < deadline, "{what}: {v:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// The contract's RAID 5 with its spare: a member failed under a host's verified I/O is
/// replaced by the spare, rebuilt (progress, limit, ETA in the view) while the host goes on;
/// a scrub afterwards is clean; a spare added later takes the next failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_member_is_rebuilt_onto_the_spare_while_hosts_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let api = start_with(common::config(dir.path(), BackendKind::Ram, 8, 32 * MIB)).await;
    let v = api.admin.create_volume(&r5_request()).await.unwrap();
    let host = HostIdentity::random();
    let ctrl = connect(api.nvme(), &v.nqn, &host).await.unwrap();
    let written = write_spread(&ctrl, BEYOND_BACKGROUND, 30, 16, 40).await;
    // Slow, so the host's I/O meets it and its progress shows.
    let v = api
        .admin
        .set_volume_rebuild_limit("r5", Some(8))
        .await
        .unwrap();
    assert_eq!(v.rebuild_limit_mib_per_sec, Some(8));
    assert_problem(
        api.admin.set_volume_rebuild_limit("r5", Some(0)).await,
        422,
        "1 to",
    );

    let background = common::BackgroundIo::start(api.nvme(), &v.nqn).await;
    let since = background.rounds();
    api.admin.fail_volume_member("r5", "01").await.unwrap();
    let v = wait_volume(&api, "r5", "rebuild starts", |v| v.rebuild.is_some()).await;
    assert_eq!(v.state, "rebuilding");
    assert!(member_states(&v).contains(&("05", "rebuilding")), "{v:?}");
    assert!(v.spares.is_empty());
    assert_problem(api.admin.scrub_volume("r5").await, 409, "rebuilding");
    let v = wait_volume(&api, "r5", "progress", |v| {
        v.rebuild.as_ref().is_some_and(|r| r.progress > 0.05)
    })
    .await;
    let r = v.rebuild.unwrap();
    assert_eq!(r.drive, "05");
    assert_eq!(r.total_bytes, 28 * MIB);
    assert!(r.mib_per_sec < 12.0, "limited to 8 MiB/s: {r:?}");
    assert!(r.eta_seconds.is_some_and(|s| s > 0), "{r:?}");
    // Faster now; done while the host reads and writes.
    api.admin
        .set_volume_rebuild_limit("r5", None)
        .await
        .unwrap();
    let v = wait_volume(&api, "r5", "rebuild done", |v| v.state == "optimal").await;
    background.finish(since).await;
    assert_eq!(
        member_states(&v),
        [
            ("00", "active"),
            ("05", "active"),
            ("02", "active"),
            ("03", "active"),
            ("04", "active")
        ]
    );
    assert_eq!(
        api.admin.drive("01").await.unwrap().volume,
        None,
        "the failed drive left"
    );
    verify(&ctrl, &written, "after the rebuild").await;

    // Scrub: clean.
    let v = api.admin.scrub_volume("r5").await.unwrap();
    assert!(v.scrub.is_some());
    let v = wait_volume(&api, "r5", "scrub", |v| {
        v.scrub.as_ref().is_some_and(|s| s.state != "running")
    })
    .await;
    let s = v.scrub.unwrap();
    assert_eq!((s.state.as_str(), s.mismatches), ("clean", 0), "{s:?}");
    assert_eq!(s.checked_stripes, s.total_stripes);

    // Without a spare a failure leaves it degraded; a spare added then is rebuilt onto.
    api.admin.fail_volume_member("r5", "02").await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(api.admin.volume("r5").await.unwrap().state, "degraded");
    assert_problem(
        api.admin.add_volume_spare("r5", "00").await,
        409,
        "in volume r5",
    );
    let v = api.admin.add_volume_spare("r5", "06").await.unwrap();
    assert!(member_states(&v).contains(&("06", "rebuilding")), "{v:?}");
    wait_volume(&api, "r5", "second rebuild", |v| v.state == "optimal").await;
    // Two members replaced since the data was written: it is all there.
    api.admin.fail_volume_member("r5", "04").await.unwrap();
    verify(&ctrl, &written, "rebuilt twice, degraded again").await;
    ctrl.shutdown().await.unwrap();
    api.stop().await;
}

/// Members of file drives that return errors (a media error on a read, one on a write, through
/// the drives' own guards): the host sees none, the data is whole, the members are failed, the
/// drive that lost a write is read-only until cleared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_returning_errors_are_failed_and_the_host_sees_none() {
    use fabrik_target::backend::guard::Inject;
    let dir = tempfile::tempdir().unwrap();
    let api = start_with(common::config(dir.path(), BackendKind::File, 6, 16 * MIB)).await;
    let req = VolumeRequest {
        name: "r6".into(),
        level: "raid6".into(),
        drives: ["00", "01", "02", "03", "04", "05"]
            .map(String::from)
            .to_vec(),
        strip_kib: Some(16),
        spares: vec![],
        ..Default::default()
    };
    let v = api.admin.create_volume(&req).await.unwrap();
    let host = HostIdentity::random();
    let ctrl = connect(api.nvme(), &v.nqn, &host).await.unwrap();
    // Four whole stripes (4 data strips of 16 KiB each): every member holds part of them.
    let data = common::random_data(256 << 10, 3);
    ctrl.write(1, 0, data.clone(), false).await.unwrap();
    let guard = |d: &str| api.target.manager().drive_guard(d).unwrap();
    guard("02").inject(Inject::ReadError);
    let got = ctrl.read(1, 0, 64).await.unwrap();
    common::assert_same_data(&got, &data, "read past a member's read error");
    guard("04").inject(Inject::WriteError);
    let more = common::random_data(256 << 10, 4);
    ctrl.write(1, 0, more.clone(), true).await.unwrap();
    let got = ctrl.read(1, 0, 64).await.unwrap();
    common::assert_same_data(&got, &more, "written past a member's write error");
    ctrl.flush(1).await.unwrap();
    let v = wait_volume(&api, "r6", "both failed", |v| {
        member_states(v).iter().filter(|m| m.1 == "failed").count() == 2
    })
    .await;
    assert_eq!(v.state, "degraded");
    assert!(member_states(&v).contains(&("02", "failed")));
    assert!(member_states(&v).contains(&("04", "failed")));
    let d = api.admin.drive("04").await.unwrap();
    assert_eq!(d.health.state, "read_only", "{:?}", d.health);
    ctrl.shutdown().await.unwrap();
    api.stop().await;
}
