//! The `fabrik` binary against an in-process fabrikd: `bench --json` figures consistent with
//! the bytes moved, verify failures exit non-zero and name the block, dd-like write/read round
//! trips a file, id-ns/smart-log JSON, and clear refusals (rdma, bad sizes).
//!
//! These live here, not in tests/, because only this package's tests get the binary's path.

use std::process::Command;

use fabrik_target::backend::BackendKind;
use fabrik_target::config::Config;
use fabrik_target::Target;

const MIB: u64 = 1 << 20;

async fn target(dir: &std::path::Path, drives: u32) -> Target {
    target_on(dir, drives, 1).await
}

async fn target_on(dir: &std::path::Path, drives: u32, ports: usize) -> Target {
    let mut cfg = Config::default_jbof(dir.to_path_buf());
    cfg.listen = vec!["127.0.0.1:0".parse().unwrap(); ports];
    cfg.box_name = "clitest".into();
    cfg.drives = drives;
    cfg.drive_size = 32 * MIB;
    cfg.backend = BackendKind::Ram;
    Target::start(cfg).await.expect("target starts")
}

struct Output {
    ok: bool,
    stdout: String,
    stderr: String,
}

/// Runs `fabrik ARGS` off the runtime (the target keeps serving meanwhile).
async fn fabrik(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || {
        let out = Command::new(env!("CARGO_BIN_EXE_fabrik"))
            .args(&args)
            // As on many developer and CI machines: expected errors must still read as one line.
            .env("RUST_BACKTRACE", "1")
            .output()
            .expect("fabrik runs");
        Output {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    })
    .await
    .unwrap()
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn address(target: &Target, drive: usize) -> Vec<String> {
    let mut nqns = target.subsystem_nqns();
    nqns.sort();
    let addr = target.listen_addrs()[0];
    args(&[
        "-a",
        &addr.ip().to_string(),
        "-s",
        &addr.port().to_string(),
        "-n",
        &nqns[drive],
    ])
}

/// `fabrik bench` gives a controller one I/O queue per worker sending to its drives: 2 threads
/// over 2 drives, a drive each (one queue per controller); with `--worker-drives all`, both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_opens_a_queue_per_worker_that_sends_to_a_drive() {
    use fabrik_api::management::Management;
    let dir = tempfile::tempdir().unwrap();
    let target = target(dir.path(), 2).await;
    let port = target.listen_addrs()[0].port().to_string();
    for (sharing, queues) in [("own", 1), ("all", 2)] {
        let run = tokio::spawn(fabrik(args(&[
            "bench",
            "-a",
            "127.0.0.1",
            "-s",
            &port,
            "--all",
            "--iodepth",
            "2",
            "--threads",
            "2",
            "--worker-drives",
            sharing,
            "--time",
            "1.5",
            "--json",
        ])));
        let mut seen = Vec::new();
        for _ in 0..100 {
            seen = (target.manager().controllers().iter())
                .filter(|c| !c.discovery && c.io_queues > 0)
                .map(|c| c.io_queues)
                .collect();
            if seen.len() == 2 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert_eq!(seen, [queues, queues], "--worker-drives {sharing}");
        let out = run.await.unwrap();
        assert!(out.ok, "{}", out.stderr);
        let json: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON on stdout");
        assert_eq!(json["drives"], 2);
        assert!(json["ios"].as_u64().unwrap() > 0);
    }
}

/// `fabrik bench` connects every controller's admin queue before the first I/O queue, as
/// spdk_nvme_perf does: a target that gives each new connection its next core (SPDK's
/// round-robin) then spreads the I/O queues over its cores. Seen through a proxy that notes the
/// queue ID of each connection's Fabrics Connect, in the order the connections came.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_connects_every_admin_queue_before_the_io_queues() {
    use tokio::io::AsyncReadExt;
    use tokio::net::{TcpListener, TcpStream};
    let dir = tempfile::tempdir().unwrap();
    let target = target(dir.path(), 3).await;
    let upstream = target.listen_addrs()[0];
    let proxy = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = proxy.local_addr().unwrap().port().to_string();
    let (tx, mut connects) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        for order in 0.. {
            let (mut host, _) = proxy.accept().await.unwrap();
            let tx = tx.clone();
            tokio::spawn(async move {
                use tokio::io::AsyncWriteExt;
                let mut target = TcpStream::connect(upstream).await.unwrap();
                // ICReq and ICResp (128 bytes each), then the Connect capsule: an 8-byte header
                // and the SQE, whose CDW10 (at 40) holds RECFMT and then the queue ID.
                let mut ic = [0u8; 128];
                host.read_exact(&mut ic).await.unwrap();
                target.write_all(&ic).await.unwrap();
                target.read_exact(&mut ic).await.unwrap();
                host.write_all(&ic).await.unwrap();
                let mut head = [0u8; 8 + 44];
                host.read_exact(&mut head).await.unwrap();
                let qid = u16::from_le_bytes([head[8 + 42], head[8 + 43]]);
                tx.send((order, qid)).unwrap();
                target.write_all(&head).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut host, &mut target).await;
            });
        }
    });
    let mut nqns = target.subsystem_nqns();
    nqns.sort();
    let mut bench = args(&["bench", "-a", "127.0.0.1", "-s", &port]);
    for nqn in &nqns[..3] {
        bench.extend(args(&["-n", nqn]));
    }
    bench.extend(args(&[
        "--threads",
        "3",
        "--worker-drives",
        "own",
        "--iodepth",
        "2",
        "--time",
        "0.5",
        "--json",
    ]));
    let out = fabrik(bench).await;
    assert!(out.ok, "{}", out.stderr);
    let mut seen = Vec::new();
    while let Ok((order, qid)) = connects.try_recv() {
        seen.push((order, qid));
    }
    seen.sort();
    let qids: Vec<u16> = seen.iter().map(|&(_, qid)| qid).collect();
    // (The namespaces are listed first, on admin queues of their own.)
    assert_eq!(qids.iter().filter(|&&q| q == 1).count(), 3, "{qids:?}");
    assert!(
        qids.is_sorted(),
        "an admin queue after an I/O queue, in connection order: {qids:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_json_is_consistent_with_the_bytes_moved() {
    let dir = tempfile::tempdir().unwrap();
    let target = target(dir.path(), 2).await;
    let addr = target.listen_addrs()[0];
    // --all: every subsystem of the discovery log (on the I/O port here), striped.
    let out = fabrik(args(&[
        "bench",
        "-a",
        "127.0.0.1",
        "-s",
        &addr.port().to_string(),
        "--all",
        "--rw",
        "randwrite",
        "--bs",
        "8k",
        "--iodepth",
        "4",
        "--threads",
        "2",
        "--size",
        "4m",
        "--json",
    ]))
    .await;
    assert!(out.ok, "{}", out.stderr);
    let json: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON on stdout");
    assert_eq!(json["drives"], 2);
    assert_eq!(json["bytes"].as_u64(), Some(4 * MIB));
    assert_eq!(json["ios"].as_u64(), Some(512));
    let runtime = json["runtime_s"].as_f64().unwrap();
    let bps = json["bytes_per_sec"].as_f64().unwrap();
    assert!((bps * runtime - (4 * MIB) as f64).abs() < 1.0);
    assert!((json["iops"].as_f64().unwrap() * runtime - 512.0).abs() < 0.5);
    let lat = &json["lat_us"];
    let field = |k: &str| lat[k].as_f64().unwrap_or_else(|| panic!("lat_us.{k}"));
    assert!(field("p50") <= field("p99") && field("p99") <= field("p999"));
    assert!(field("p999") <= field("max") && field("avg") > 0.0);
    assert!(json["write"]["ios"].as_u64() == Some(512) && json["read"].is_null());
    let cpu = |k: &str| json["cpu"][k].as_f64().unwrap_or_else(|| panic!("cpu.{k}"));
    assert!(cpu("percent") > 0.0 && cpu("us_per_io") > 0.0);
    // CPU per I/O: the phase's CPU time over its 512 commands, user and system adding up.
    let per_io = (cpu("user_s") + cpu("sys_s")) * 1e6 / 512.0;
    assert!((cpu("us_per_io") - per_io).abs() < 1e-6 * per_io.max(1.0));
    assert!((cpu("user_us_per_io") + cpu("sys_us_per_io") - cpu("us_per_io")).abs() < 1e-6);
    target.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_verify_names_a_corrupted_block_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    let target = target(dir.path(), 1).await;
    let a = address(&target, 0);
    let bench = |extra: &[&str]| {
        let mut v = args(&[
            "bench",
            "--quiet",
            "--bs",
            "16k",
            "--size",
            "2m",
            "--verify",
            "--verify-seed",
            "77",
        ]);
        v.extend(a.clone());
        v.extend(args(extra));
        v
    };
    let written = fabrik(bench(&["--rw", "write"])).await;
    assert!(written.ok, "{}", written.stderr);
    assert!(
        written.stdout.contains("512 blocks checked, 0 errors"),
        "{}",
        written.stdout
    );

    // Overwrite block 33 with a file's bytes through `fabrik write`.
    let junk = dir.path().join("junk");
    std::fs::write(&junk, vec![0x42u8; 4096]).unwrap();
    let mut w = args(&["write", "--slba", "33", "-d", junk.to_str().unwrap()]);
    w.extend(a.clone());
    assert!(fabrik(w).await.ok);

    let read = fabrik(bench(&["--rw", "read", "--no-prefill"])).await;
    assert!(!read.ok, "a verify error fails the run");
    assert!(read.stdout.contains("1 errors"), "{}", read.stdout);
    assert!(
        read.stdout.contains("LBA 33: no verify header"),
        "{}",
        read.stdout
    );
    assert!(
        read.stderr.contains("verify: 1 bad blocks"),
        "{}",
        read.stderr
    );
    target.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_and_read_round_trip_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let target = target(dir.path(), 1).await;
    let a = address(&target, 0);
    // Not a whole number of blocks: the last one is padded with zeroes.
    let data: Vec<u8> = (0..3 * MIB as usize + 1000)
        .map(|i| (i * 7 % 251) as u8)
        .collect();
    let input = dir.path().join("in");
    let output = dir.path().join("out");
    std::fs::write(&input, &data).unwrap();
    let mut w = args(&["write", "--slba", "100", "-d", input.to_str().unwrap()]);
    w.extend(a.clone());
    let out = fabrik(w).await;
    assert!(out.ok, "{}", out.stderr);
    let mut r = args(&[
        "read",
        "--slba",
        "100",
        "-z",
        &(data.len() + 100).to_string(),
        "-d",
        output.to_str().unwrap(),
    ]);
    r.extend(a.clone());
    let out = fabrik(r).await;
    assert!(out.ok, "{}", out.stderr);
    let back = std::fs::read(&output).unwrap();
    assert_eq!(back.len(), data.len() + 100);
    assert!(back[..data.len()] == data[..], "data read back differs");
    assert!(
        back[data.len()..].iter().all(|&b| b == 0),
        "padding is zeroes"
    );
    target.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn id_ns_smart_log_and_id_ctrl_json() {
    let dir = tempfile::tempdir().unwrap();
    let target = target(dir.path(), 1).await;
    // From another loopback address (nvme-cli's --host-traddr).
    let mut id = args(&["id-ns", "--json", "--host-traddr", "127.0.0.2"]);
    id.extend(address(&target, 0));
    let out = fabrik(id).await;
    assert!(out.ok, "{}", out.stderr);
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(json["nsze"].as_u64(), Some(32 * MIB / 4096));
    assert_eq!(json["lba_size"], 4096);
    let mut smart = args(&["smart-log", "--json"]);
    smart.extend(address(&target, 0));
    let out = fabrik(smart).await;
    assert!(out.ok, "{}", out.stderr);
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert!(json["avail_spare"].as_u64().is_some() && json["media_errors"].as_u64().is_some());
    let mut ctrl = args(&["id-ctrl", "--json"]);
    ctrl.extend(address(&target, 0));
    let out = fabrik(ctrl).await;
    assert!(out.ok, "{}", out.stderr);
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let mut nqns = target.subsystem_nqns();
    nqns.sort();
    assert_eq!(json["subnqn"], nqns[0].as_str());
    assert_eq!(json["active_namespaces"], serde_json::json!([1]));
    assert!(json["ioccsz"].as_u64().unwrap() >= 4, "{json}");
    target.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_clear() {
    let dir = tempfile::tempdir().unwrap();
    let target = target(dir.path(), 1).await;
    let a = address(&target, 0);
    for (extra, says) in [
        (vec!["-t", "fc"], "-t fc: unknown transport"),
        (
            vec!["--bs", "1000", "--time", "1"],
            "not a multiple of the 4096-byte blocks",
        ),
        (vec!["--size", "1g"], "the smallest has"),
        (
            vec!["--mem", "gpu"],
            "no NVIDIA driver found: GPU memory unavailable",
        ),
        (
            vec!["--mem", "tpu"],
            "host, gpu, gpu:N (CUDA device N) or emulated-gpu",
        ),
        (vec!["--rw", "sideways"], "unknown --rw"),
        (vec!["--rw", "read", "--verify"], "say how much with --size"),
        (vec!["-w", "192.0.2.1"], "not an address of this host"),
        (vec!["-f", "fabrik-none0"], "interface \"fabrik-none0\""),
    ] {
        let mut v = args(&["bench", "--quiet"]);
        v.extend(a.clone());
        v.extend(args(&extra));
        let out = fabrik(v).await;
        assert!(!out.ok, "{extra:?} is refused");
        assert!(out.stderr.contains(says), "{extra:?}: {}", out.stderr);
        assert!(out.stderr.starts_with("error: "), "{}", out.stderr);
        assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
        assert!(!out.stderr.contains("backtrace"), "{}", out.stderr);
    }
    // NVMe/RDMA where there is no RDMA device (CI, the GPU machine): said plainly.
    let no_rdma_device =
        std::fs::read_dir("/sys/class/infiniband").map_or(true, |mut d| d.next().is_none());
    if no_rdma_device {
        let mut v = args(&["bench", "--quiet", "-t", "rdma", "--time", "1"]);
        v.extend(a.clone());
        let out = fabrik(v).await;
        // With the feature: no device, or no libibverbs/librdmacm to begin with.
        let plain = if cfg!(feature = "rdma") {
            out.stderr
                .contains("RDMA unavailable: no RDMA device on this machine")
                || out.stderr.contains(".so.1 not found")
        } else {
            out.stderr
                .contains("RDMA unavailable: this build has no `rdma` feature")
        };
        assert!(!out.ok && plain, "{}", out.stderr);
    }
    // --all: the discovery connection is bound too.
    let port = target.listen_addrs()[0].port().to_string();
    let out = fabrik(args(&[
        "bench",
        "--quiet",
        "-a",
        "127.0.0.1",
        "-s",
        &port,
        "--all",
        "-w",
        "192.0.2.1",
    ]))
    .await;
    assert!(
        !out.ok && out.stderr.contains("discovery at"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("not an address of this host"),
        "{}",
        out.stderr
    );
    target.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fabrik_gpu_says_plainly_when_there_is_no_nvidia_driver() {
    let has_driver = ["libcuda.so.1", "libcuda.so"].iter().any(|lib| {
        [
            "/usr/lib/x86_64-linux-gnu",
            "/usr/lib64",
            "/usr/local/nvidia/lib64",
        ]
        .iter()
        .any(|dir| std::path::Path::new(dir).join(lib).exists())
    });
    if has_driver {
        return; // a GPU machine: `fabrik gpu` lists its GPUs instead
    }
    let out = fabrik(args(&["gpu"])).await;
    assert!(!out.ok, "{}", out.stdout);
    assert!(
        out.stderr
            .contains("no NVIDIA driver found: GPU memory unavailable"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subsystem_on_two_ports_is_one_drive_with_two_paths() {
    let dir = tempfile::tempdir().unwrap();
    let target = target_on(dir.path(), 2, 2).await;
    let ports = target.listen_addrs();
    assert_eq!(ports.len(), 2);
    let out = fabrik(args(&[
        "bench",
        "-a",
        "127.0.0.1",
        "-s",
        &ports[0].port().to_string(),
        "--all",
        "--rw",
        "randread",
        "--size",
        "1m",
        "--json",
    ]))
    .await;
    assert!(out.ok, "{}", out.stderr);
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(json["drives"], 2, "2 subsystems x 2 ports = 2 drives");
    assert_eq!(json["bytes"].as_u64(), Some(MIB));
    target.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_writes_a_table_json_and_heatmaps() {
    let dir = tempfile::tempdir().unwrap();
    let target = target(dir.path(), 1).await;
    let svg = dir.path().join("sweep.svg");
    let mut v = args(&[
        "bench",
        "--sweep",
        "--sweep-bs",
        "4k,64k",
        "--sweep-threads",
        "1,2",
        "--sweep-iodepth",
        "1,4",
        "--time",
        "0.2",
        "--json",
        "--svg",
        svg.to_str().unwrap(),
    ]);
    v.extend(address(&target, 0));
    let out = fabrik(v).await;
    assert!(out.ok, "{}", out.stderr);
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let points = json.as_array().expect("one entry per point");
    assert_eq!(points.len(), 8);
    assert_eq!(points[7]["point"]["bs"], 65536);
    assert_eq!(points[7]["point"]["threads"], 2);
    assert_eq!(points[7]["report"]["iodepth"], 4);
    assert!(points.iter().all(|p| p["report"]["ios"].as_u64() > Some(0)));
    let picture = std::fs::read_to_string(&svg).unwrap();
    assert_eq!(
        picture.matches("<rect x=").count(),
        16,
        "8 points x 2 heatmaps"
    );
    target.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoint_reports_every_iteration() {
    let dir = tempfile::tempdir().unwrap();
    let target = target(dir.path(), 2).await;
    let addr = target.listen_addrs()[0];
    let out = fabrik(args(&[
        "bench",
        "checkpoint",
        "-a",
        "127.0.0.1",
        "-s",
        &addr.port().to_string(),
        "--all",
        "--count",
        "3",
        "--size",
        "4m",
        "--bs",
        "256k",
        "--json",
    ]))
    .await;
    assert!(out.ok, "{}", out.stderr);
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(json["drives"], 2);
    assert_eq!(json["shard_bytes"].as_u64(), Some(2 * MIB));
    let checkpoints = json["checkpoints"].as_array().unwrap();
    assert_eq!(checkpoints.len(), 3);
    for (i, c) in checkpoints.iter().enumerate() {
        assert_eq!(c["index"], i);
        assert_eq!(c["bytes"].as_u64(), Some(4 * MIB));
        assert_eq!(c["drive_offset"].as_u64(), Some(i as u64 * 2 * MIB));
    }
    target.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_rides_out_a_target_restart_with_no_verify_errors() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = Config::default_jbof(dir.path().to_path_buf());
    cfg.listen = vec!["127.0.0.1:0".parse().unwrap()];
    cfg.box_name = "clitest".into();
    cfg.drives = 1;
    cfg.drive_size = 32 * MIB;
    cfg.backend = BackendKind::File; // the data outlives the restart
    let target = Target::start(cfg.clone()).await.unwrap();
    cfg.listen = target.listen_addrs();
    let mut v = args(&[
        "bench",
        "--rw",
        "randrw",
        "--bs",
        "16k",
        "--iodepth",
        "4",
        "--size",
        "8m",
        "--time",
        "3",
        "--verify",
        "-c",
        "0.2",
        "--json",
    ]);
    v.extend(address(&target, 0));
    let run = tokio::spawn(fabrik(v));
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    target.shutdown().await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let target = Target::start(cfg).await.unwrap();
    let out = run.await.unwrap();
    assert!(out.ok, "{}", out.stderr);
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(json["verify"]["errors"], 0, "{}", json["verify"]);
    let events: Vec<&str> = json["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e.as_str())
        .collect();
    assert!(
        events
            .iter()
            .any(|e| e.contains("path 0") && e.contains("down")),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| e.contains("path 0") && e.contains("back")),
        "{events:?}"
    );
    assert!(out.stderr.contains("back (cntlid"), "{}", out.stderr);
    target.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discover_prints_the_log_as_json_and_binds_like_nvme_cli() {
    let dir = tempfile::tempdir().unwrap();
    let target = target(dir.path(), 3).await;
    let addr = target.listen_addrs()[0];
    let (ip, port) = (addr.ip().to_string(), addr.port().to_string());
    let out = fabrik(args(&[
        "discover",
        "-a",
        &ip,
        "-s",
        &port,
        "-w",
        "127.0.0.1",
        "--json",
    ]))
    .await;
    assert!(out.ok, "{}", out.stderr);
    let log: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let records = log["records"].as_array().unwrap();
    let mut nqns: Vec<&str> = records
        .iter()
        .map(|r| r["subnqn"].as_str().unwrap())
        .collect();
    nqns.sort();
    let mut want = target.subsystem_nqns();
    want.sort();
    assert_eq!(nqns, want);
    for r in records {
        assert_eq!(r["trtype"], "tcp");
        assert_eq!(r["adrfam"], "ipv4");
        assert_eq!(r["subtype"], "nvme subsystem");
        assert_eq!(r["traddr"], ip.as_str());
        assert_eq!(r["trsvcid"], port.as_str());
    }
    // The table names the same subsystems; a host address not of this host is refused.
    let table = fabrik(args(&["discover", "-a", &ip, "-s", &port])).await;
    assert!(table.ok, "{}", table.stderr);
    assert!(want.iter().all(|n| table.stdout.contains(n.as_str())));
    let out = fabrik(args(&[
        "discover",
        "-a",
        &ip,
        "-s",
        &port,
        "-w",
        "192.0.2.1",
    ]))
    .await;
    assert!(!out.ok);
    assert!(
        out.stderr.contains("not an address of this host"),
        "{}",
        out.stderr
    );
    target.shutdown().await;
}
