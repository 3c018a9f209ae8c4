//! `fabrik bench`'s engine against an in-process fabrikd: figures consistent with the bytes
//! moved, verify mode catching corrupted and misplaced blocks, striping over several drives,
//! time-bound runs, checkpoints.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use fabrik_initiator::bench::checkpoint::{self, CheckpointSpec};
use fabrik_initiator::bench::pattern::{self, drive_tag};
use fabrik_initiator::bench::{self, Drive, Memory, Progress, Rw, Spec, VerifySpec, WorkerDrives};
use fabrik_initiator::host::session::{RecoveryPolicy, Session};
use fabrik_initiator::Controller;
use fabrik_target::backend::BackendKind;
use fabrik_target::Target;

const MIB: u64 = 1 << 20;

async fn open(target: &Target, index: usize, queues: u16) -> Drive {
    let mut opts = options(addr(target), &nqns(target)[index]);
    opts.io_queues = queues;
    let ctrl = Controller::connect(opts.clone()).await.expect("connect");
    let session = Session::from_controllers(vec![(opts, Some(ctrl))], RecoveryPolicy::default())
        .await
        .expect("session");
    Drive::open(session, 1).await.expect("namespace 1")
}

async fn run(drives: &[Drive], spec: Spec) -> bench::Report {
    bench::run(drives.to_vec(), spec, Arc::new(Progress::default()))
        .await
        .expect("bench run")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_is_consistent_with_the_bytes_moved() {
    let dir = tempfile::tempdir().unwrap();
    let target = start(config(dir.path(), BackendKind::Ram, 1, 64 * MIB)).await;
    let drive = open(&target, 0, 2).await;
    let spec = Spec {
        rw: Rw::RandRead,
        bs: 4096,
        iodepth: 8,
        threads: 2,
        size: Some(8 * MIB),
        ..Spec::default()
    };
    let report = run(&[drive], spec).await;
    // Size-bound: one region's worth of I/Os, each bs bytes.
    assert_eq!(report.ios, 2048);
    assert_eq!(report.bytes, 8 * MIB);
    let read = report.read.as_ref().expect("reads reported");
    assert!(report.write.is_none());
    assert_eq!((read.ios, read.bytes), (2048, 8 * MIB));
    let implied = report.bytes_per_sec * report.runtime_s;
    assert!((implied - report.bytes as f64).abs() < 1.0, "{implied}");
    assert!((report.iops * report.runtime_s - report.ios as f64).abs() < 0.5);
    let lat = report.lat_us;
    assert!(lat.min > 0.0 && lat.min <= lat.p50, "{lat:?}");
    assert!(
        lat.p50 <= lat.p99 && lat.p99 <= lat.p999 && lat.p999 <= lat.max,
        "{lat:?}"
    );
    assert!(lat.avg >= lat.min && lat.avg <= lat.max, "{lat:?}");

    let json = serde_json::to_value(&report).unwrap();
    for field in ["iops", "bytes_per_sec"] {
        assert!(json[field].as_f64().unwrap() > 0.0, "{field} in {json}");
    }
    for field in ["avg", "p50", "p99", "p999", "max"] {
        assert!(
            json["lat_us"][field].as_f64().unwrap() > 0.0,
            "lat_us.{field}"
        );
    }
    assert_eq!(json["bytes"].as_u64(), Some(8 * MIB));
    target.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_catches_corrupted_and_misplaced_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let target = start(config(dir.path(), BackendKind::Ram, 1, 64 * MIB)).await;
    let drive = open(&target, 0, 2).await;
    let verify = |prefill| {
        Some(VerifySpec {
            seed: 0x5eed,
            prefill,
        })
    };
    let write = Spec {
        rw: Rw::Write,
        bs: 16384,
        iodepth: 4,
        threads: 2,
        size: Some(4 * MIB),
        verify: verify(true),
        ..Spec::default()
    };
    let report = run(std::slice::from_ref(&drive), write.clone()).await;
    let v = report.verify.expect("verify results");
    assert_eq!(v.errors, 0, "{:?}", v.first_errors);
    assert_eq!(v.blocks_checked, 1024, "every block written is read back");

    // A read run trusting the earlier one finds it clean...
    let read = Spec {
        rw: Rw::RandRead,
        bs: 16384,
        iodepth: 4,
        threads: 2,
        size: Some(4 * MIB),
        verify: verify(false),
        ..Spec::default()
    };
    let clean = run(std::slice::from_ref(&drive), read.clone()).await;
    assert_eq!(clean.verify.unwrap().errors, 0);

    // ...then block 77 is overwritten with other data and block 6 gets block 5's content.
    let ctrl = drive.session.controller().unwrap();
    ctrl.write(1, 77, random_data(4096, 1), false)
        .await
        .unwrap();
    let five = ctrl.read(1, 5, 1).await.unwrap();
    ctrl.write(1, 6, five, false).await.unwrap();
    let sequential = Spec {
        rw: Rw::Read,
        ..read
    };
    let bad = run(std::slice::from_ref(&drive), sequential).await;
    let v = bad.verify.unwrap();
    assert_eq!(v.errors, 2, "{:?}", v.first_errors);
    assert_eq!(v.blocks_checked, 1024);
    assert!(
        v.first_errors
            .iter()
            .any(|e| e.contains("LBA 77: no verify header")),
        "{:?}",
        v.first_errors
    );
    assert!(
        v.first_errors
            .iter()
            .any(|e| e.contains("LBA 6: holds the block of LBA 5")),
        "{:?}",
        v.first_errors
    );

    // Another seed: every block is named as written by another run.
    let other = Spec {
        size: Some(MIB),
        verify: Some(VerifySpec {
            seed: 1,
            prefill: false,
        }),
        ..Spec {
            rw: Rw::Read,
            ..write
        }
    };
    let other = run(&[drive], other).await.verify.unwrap();
    assert_eq!(other.errors, 256);
    target.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_writes_stripe_over_the_drives() {
    let dir = tempfile::tempdir().unwrap();
    let target = start(config(dir.path(), BackendKind::Ram, 2, 32 * MIB)).await;
    let drives = vec![open(&target, 0, 1).await, open(&target, 1, 1).await];
    let spec = Spec {
        rw: Rw::Write,
        bs: 8192,
        iodepth: 2,
        size: Some(MIB),
        verify: Some(VerifySpec {
            seed: 9,
            prefill: true,
        }),
        ..Spec::default()
    };
    let report = run(&drives, spec).await;
    assert_eq!(report.drives, 2);
    assert_eq!(report.bytes, MIB);
    assert_eq!(report.verify.unwrap().errors, 0);
    // Unit k of 8 KiB is on drive k % 2 at unit k / 2: half a MiB on each, from LBA 0.
    for (i, d) in drives.iter().enumerate() {
        let tag = drive_tag(d.session.subnqn(), 1);
        let ctrl = d.session.controller().unwrap();
        let data = ctrl.read(1, 0, 128).await.unwrap();
        assert!(
            pattern::check(&data, 4096, 0, tag, 9).is_empty(),
            "drive {i}"
        );
        let past = ctrl.read(1, 128, 1).await.unwrap();
        assert!(
            past.iter().all(|&b| b == 0),
            "drive {i}: nothing past its half"
        );
    }
    target.shutdown().await;
}

/// Workers with drives of their own (2 workers, 3 drives: worker 0 has drives 0 and 2) or
/// all drives each: either way a sequential pass writes the whole region once, and reads
/// find it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_with_their_own_drives_cover_the_region() {
    let dir = tempfile::tempdir().unwrap();
    let target = start(config(dir.path(), BackendKind::Ram, 3, 32 * MIB)).await;
    let mut drives = Vec::new();
    for i in 0..3 {
        drives.push(open(&target, i, 2).await);
    }
    for (seed, sharing) in [(21, WorkerDrives::Own), (22, WorkerDrives::All)] {
        let spec = Spec {
            rw: Rw::Write,
            bs: 4096,
            iodepth: 3,
            threads: 2,
            worker_drives: sharing,
            size: Some(3 * MIB),
            verify: Some(VerifySpec {
                seed,
                prefill: true,
            }),
            ..Spec::default()
        };
        let report = run(&drives, spec.clone()).await;
        assert_eq!(report.bytes, 3 * MIB, "{sharing:?}");
        assert_eq!(report.verify.unwrap().errors, 0, "{sharing:?}");
        for (i, d) in drives.iter().enumerate() {
            let tag = drive_tag(d.session.subnqn(), 1);
            let ctrl = d.session.controller().unwrap();
            let data = ctrl.read(1, 0, 256).await.unwrap();
            assert!(
                pattern::check(&data, 4096, 0, tag, seed).is_empty(),
                "{sharing:?}: drive {i}'s MiB"
            );
        }
        let reads = Spec {
            rw: Rw::RandRead,
            verify: Some(VerifySpec {
                seed,
                prefill: false,
            }),
            ..spec
        };
        let report = run(&drives, reads).await;
        assert_eq!(report.bytes, 3 * MIB, "{sharing:?}");
        let verify = report.verify.unwrap();
        assert_eq!(verify.errors, 0, "{sharing:?}");
        assert_eq!(verify.blocks_checked, 768, "{sharing:?}");
    }
    target.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_bound_runs_stop_on_time_and_mix_reads_and_writes() {
    let dir = tempfile::tempdir().unwrap();
    let target = start(config(dir.path(), BackendKind::Ram, 1, 16 * MIB)).await;
    let drive = open(&target, 0, 1).await;
    let spec = Spec {
        rw: Rw::RandRw,
        read_percent: 70,
        iodepth: 4,
        time: Some(Duration::from_millis(500)),
        verify: Some(VerifySpec {
            seed: 3,
            prefill: true,
        }),
        ..Spec::default()
    };
    let started = Instant::now();
    let report = run(&[drive], spec).await;
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(
        report.runtime_s >= 0.5 && report.runtime_s < 2.0,
        "{}",
        report.runtime_s
    );
    let (r, w) = (report.read.unwrap(), report.write.unwrap());
    assert!(r.ios > 0 && w.ios > 0);
    assert_eq!(r.ios + w.ios, report.ios);
    let share = r.ios as f64 / report.ios as f64;
    assert!((0.55..0.85).contains(&share), "read share {share}");
    assert_eq!(report.verify.unwrap().errors, 0);
    target.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_specs_are_refused_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let target = start(config(dir.path(), BackendKind::Ram, 1, 4 * MIB)).await;
    let drive = open(&target, 0, 1).await;
    for (spec, says) in [
        (
            Spec {
                bs: 1000,
                ..Spec::default()
            },
            "not a multiple",
        ),
        (
            Spec {
                threads: 2,
                ..Spec::default()
            },
            "1 I/O queues, none for worker 1 of the 2 threads",
        ),
        (
            Spec {
                size: Some(8 * MIB),
                ..Spec::default()
            },
            "the smallest has",
        ),
        (
            Spec {
                iodepth: 0,
                ..Spec::default()
            },
            "must be positive",
        ),
    ] {
        let err = bench::run(vec![drive.clone()], spec, Arc::new(Progress::default()))
            .await
            .expect_err("refused");
        assert!(err.to_string().contains(says), "{err}");
    }
    target.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_write_shards_to_successive_regions() {
    let dir = tempfile::tempdir().unwrap();
    let target = start(config(dir.path(), BackendKind::Ram, 2, 16 * MIB)).await;
    let drives = vec![open(&target, 0, 1).await, open(&target, 1, 1).await];
    let spec = CheckpointSpec {
        count: 5,
        size: 8 * MIB,
        bs: 256 * 1024,
        iodepth: 4,
        threads: 1,
        memory: Memory::Host,
    };
    let mut seen = 0;
    let report = checkpoint::run(drives, spec, Arc::new(Progress::default()), |_| seen += 1)
        .await
        .expect("checkpoints");
    assert_eq!(seen, 5);
    assert_eq!(report.shard_bytes, 4 * MIB);
    let offsets: Vec<u64> = report.checkpoints.iter().map(|c| c.drive_offset).collect();
    // 16 MiB drives hold four 4 MiB shards; the fifth checkpoint wraps round.
    assert_eq!(offsets, [0, 4 * MIB, 8 * MIB, 12 * MIB, 0]);
    for c in &report.checkpoints {
        assert_eq!(c.bytes, 8 * MIB);
        assert!(c.seconds > 0.0 && c.bytes_per_sec > 0.0);
    }
    target.shutdown().await;
}
