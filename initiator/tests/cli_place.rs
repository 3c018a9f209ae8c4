//! `fabrik topo` and `fabrik place` as a user runs them, on fixture trees and on this machine.

mod fixtures;

use std::path::Path;
use std::process::{Command, Output};

fn fabrik(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fabrik"))
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .env_remove("FABRIK_API")
        .output()
        .expect("running fabrik")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn root(m: &fixtures::Machine) -> &str {
    m.root().to_str().unwrap()
}

#[test]
fn topo_json_has_every_gpu_nic_pair() {
    let m = fixtures::machines::dgx_h100();
    let out = fabrik(&["topo", "--sysfs-root", root(&m), "--json"]);
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let pairs = v["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 8 * 12);
    let pxb: Vec<String> = pairs
        .iter()
        .filter(|p| p["distance"] == "PXB")
        .map(|p| format!("GPU{}-{}", p["gpu"], p["name"].as_str().unwrap()))
        .collect();
    assert_eq!(
        pxb,
        [
            "GPU0-mlx5_0",
            "GPU1-mlx5_3",
            "GPU2-mlx5_4",
            "GPU3-mlx5_5",
            "GPU4-mlx5_6",
            "GPU5-mlx5_9",
            "GPU6-mlx5_10",
            "GPU7-mlx5_11"
        ]
    );
    let devices = v["devices"].as_array().unwrap();
    let gpus = devices.iter().filter(|d| d["kind"] == "gpu").count();
    let switches = devices
        .iter()
        .filter(|d| d["kind"] == "switch_upstream")
        .count();
    assert_eq!((gpus, switches), (8, 16));
}

#[test]
fn topo_prints_matrix_and_tree() {
    let m = fixtures::machines::asus_no_switch();
    let out = fabrik(&["topo", "--sysfs-root", root(&m)]);
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    let row = |label: &str| -> Vec<String> {
        let line = text
            .lines()
            .find(|l| l.starts_with(label))
            .unwrap_or_else(|| panic!("no row {label} in\n{text}"));
        line.split_whitespace().map(str::to_string).collect()
    };
    assert_eq!(
        row("GPU2 ")[..9],
        ["GPU2", "SYS", "SYS", "X", "NODE", "SYS", "SYS", "NODE", "NODE"]
    );
    assert_eq!(
        row("NIC1 ")[..9],
        ["NIC1", "NODE", "NODE", "SYS", "SYS", "PIX", "X", "SYS", "SYS"]
    );
    assert!(text.contains("  NIC1: mlx5_1"), "{text}");
    // The tree: the carrier board's two switch levels above the NVMe drive.
    assert!(text.contains("NUMA 0 pci0000:60"), "{text}");
    assert!(
        text.contains("      0000:62:00.0 downstream port"),
        "{text}"
    );
    assert!(text.contains("            0000:65:00.0 NVME"), "{text}");
}

#[test]
fn place_prints_the_plan_and_the_connect_commands() {
    let m = fixtures::machines::reference_2gpu();
    let box_file = m.root().join("box.json");
    let ports: Vec<String> = (0..6)
        .map(|k| format!(r#"{{"trtype":"rdma","traddr":"10.10.{k}.100"}}"#))
        .collect();
    let drives: Vec<String> = (0..24)
        .map(|i| format!(r#"{{"nqn":"nqn.2024-01.io.fabrik:box:drive-{i:02}"}}"#))
        .collect();
    std::fs::write(
        &box_file,
        format!(
            r#"{{"ports":[{}],"drives":[{}]}}"#,
            ports.join(","),
            drives.join(",")
        ),
    )
    .unwrap();
    let out = fabrik(&[
        "place",
        "--sysfs-root",
        root(&m),
        "--box",
        box_file.to_str().unwrap(),
        "--drive-gbps",
        "6.8",
        "--apply",
        "--no-compose",
        "--dry-run",
    ]);
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    let table: Vec<&str> = text.lines().take(3).collect();
    assert_eq!(
        table,
        [
            "GPU   PCI           NUMA PORTS  DRIVES      GB/s  BOTTLENECK",
            "GPU0  0000:18:00.0  0    4      12          63.0  GPU PCIe link",
            "GPU1  0000:9a:00.0  1    2      12          50.0  NIC ports",
        ]
    );
    assert!(text.contains("  ceiling 63.0 GB/s, limited by GPU PCIe link (GPU PCIe link 63.0, NIC ports 100.0, drives 81.6)"), "{text}");
    let cmds: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("nvme connect"))
        .collect();
    assert_eq!(cmds.len(), 24);
    assert_eq!(
        cmds[0],
        "nvme connect --transport rdma --traddr 10.10.0.100 --trsvcid 4420 \
         --nqn nqn.2024-01.io.fabrik:box:drive-00 --host-traddr 10.10.0.1"
    );
    assert!(
        !text.contains("would compose"),
        "--no-compose composes nothing"
    );

    let json = fabrik(&[
        "place",
        "--sysfs-root",
        root(&m),
        "--box",
        box_file.to_str().unwrap(),
        "--json",
        "--gpus",
        "1",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["gpus"].as_array().unwrap().len(), 1);
    assert_eq!(v["gpus"][0]["pci"], "0000:9a:00.0");
    assert_eq!(v["gpus"][0]["connections"].as_array().unwrap().len(), 24);
    assert_eq!(v["gpus"][0]["ceiling"]["bottleneck"]["kind"], "nic_ports");
}

/// `--apply` without `--dry-run` runs `nvme` once per drive and reports the ones that failed;
/// here `nvme` is a stand-in script on PATH that records its arguments and fails for one drive.
#[test]
fn apply_runs_nvme_connect_per_drive_and_reports_failures() {
    use std::os::unix::fs::PermissionsExt;
    let m = fixtures::machines::far_socket_nic();
    let bin = m.root().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let log = m.root().join("nvme.log");
    let script = format!(
        "#!/bin/sh\necho \"$@\" >> {}\ncase \"$*\" in *drive-2*) exit 1;; esac\nexit 0\n",
        log.display()
    );
    std::fs::write(bin.join("nvme"), script).unwrap();
    std::fs::set_permissions(bin.join("nvme"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let box_file = m.root().join("box.json");
    std::fs::write(
        &box_file,
        r#"{"ports":[{"trtype":"tcp","traddr":"10.30.0.100"},{"trtype":"tcp","traddr":"10.30.1.100"}],
            "drives":[{"nqn":"nqn.x:drive-0"},{"nqn":"nqn.x:drive-1"},{"nqn":"nqn.x:drive-2"},{"nqn":"nqn.x:drive-3"}]}"#,
    )
    .unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new(env!("CARGO_BIN_EXE_fabrik"))
        .args([
            "place",
            "--sysfs-root",
            root(&m),
            "--box",
            box_file.to_str().unwrap(),
            "--apply",
            "--no-compose",
            "-q",
            "nqn.host",
        ])
        .env("PATH", path)
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("nvme connect failed for nqn.x:drive-2 (exit status: 1)"),
        "{err}"
    );
    let calls = std::fs::read_to_string(&log).unwrap();
    let calls: Vec<&str> = calls.lines().collect();
    assert_eq!(
        calls,
        [
            "connect --transport tcp --traddr 10.30.0.100 --trsvcid 4420 --nqn nqn.x:drive-0 --host-traddr 10.30.0.1 --host-iface ens9f0np0 --hostnqn nqn.host",
            "connect --transport tcp --traddr 10.30.0.100 --trsvcid 4420 --nqn nqn.x:drive-2 --host-traddr 10.30.0.1 --host-iface ens9f0np0 --hostnqn nqn.host",
            "connect --transport tcp --traddr 10.30.1.100 --trsvcid 4420 --nqn nqn.x:drive-1 --host-traddr 10.30.1.1 --host-iface ens9f1np1 --hostnqn nqn.host",
            "connect --transport tcp --traddr 10.30.1.100 --trsvcid 4420 --nqn nqn.x:drive-3 --host-traddr 10.30.1.1 --host-iface ens9f1np1 --hostnqn nqn.host",
        ]
    );
}

/// The commands the kernel interop check runs in its guest (see
/// `tests/interop/place-apply.sh`); with FABRIK_FIXTURE_EXPORT=FILE the fixture tree
/// is also written there as a tar for the guest.
#[test]
fn guest_fixture_gives_the_connect_commands_the_interop_check_runs() {
    let m = fixtures::machines::guest_veth();
    let box_file = m.root().join("box.json");
    std::fs::write(
        &box_file,
        r#"{"ports":[{"trtype":"tcp","traddr":"10.99.0.2"}],"drives":[{"nqn":"nqn.2024-01.io.fabrik:interop:drive-00"}]}"#,
    )
    .unwrap();
    let out = fabrik(&[
        "place",
        "--sysfs-root",
        root(&m),
        "--box",
        box_file.to_str().unwrap(),
        "--apply",
        "--no-compose",
        "--dry-run",
    ]);
    assert!(out.status.success(), "{out:?}");
    let cmds: Vec<String> = stdout(&out)
        .lines()
        .filter(|l| l.starts_with("nvme "))
        .map(str::to_string)
        .collect();
    assert_eq!(
        cmds,
        ["nvme connect --transport tcp --traddr 10.99.0.2 --trsvcid 4420 --nqn nqn.2024-01.io.fabrik:interop:drive-00 \
          --host-traddr 10.99.0.1 --host-iface veth0"]
    );
    std::fs::remove_file(&box_file).unwrap();
    if let Some(dest) = std::env::var_os("FABRIK_FIXTURE_EXPORT") {
        let status = Command::new("tar")
            .arg("-cf")
            .arg(&dest)
            .arg("-C")
            .arg(m.root())
            .arg(".")
            .status()
            .unwrap();
        assert!(status.success());
    }
}

#[test]
fn place_refuses_bad_input_clearly() {
    let m = fixtures::machines::reference_2gpu();
    let out = fabrik(&["place", "--sysfs-root", root(&m), "--gpus", "5"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("GPU5: this machine has 2 GPUs"));
    let bad = m.root().join("bad.json");
    std::fs::write(&bad, "{\"ports\": 3}").unwrap();
    let out = fabrik(&[
        "place",
        "--sysfs-root",
        root(&m),
        "--box",
        bad.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a box description"));
    // --apply composes at the box's API: without one it says what to give.
    let good = m.root().join("good.json");
    std::fs::write(
        &good,
        r#"{"ports":[{"trtype":"rdma","traddr":"10.10.0.100"}],"drives":[{"nqn":"nqn.x:drive-0"}]}"#,
    )
    .unwrap();
    let out = fabrik(&[
        "place",
        "--sysfs-root",
        root(&m),
        "--box",
        good.to_str().unwrap(),
        "--apply",
        "-q",
        "nqn.host",
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("give --api URL (or FABRIK_API)"),
        "{out:?}"
    );
    let out = fabrik(&["topo", "--sysfs-root", "/nonexistent"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent is not a sysfs tree"));
}

/// On this machine (a build box without GPU or RDMA NIC) both commands succeed and say so.
#[test]
fn this_machine_says_plainly_what_it_lacks() {
    if !Path::new("/sys/bus/pci/devices").is_dir() {
        return;
    }
    let topo = fabrik(&["topo"]);
    assert!(topo.status.success(), "{topo:?}");
    let place = fabrik(&["place"]);
    assert!(place.status.success(), "{place:?}");
    let has_gpu = stdout(&topo).contains("GPU0");
    if !has_gpu {
        assert!(
            stdout(&topo).contains("note: no GPU or accelerator found under /sys/bus/pci/devices")
        );
        assert!(stdout(&place).contains("warning: no GPU found under /sys: nothing to place"));
    }
}

/// `fabrik place --api URL --apply` against an in-process fabrikd: the box's ports and drives
/// come from its API; the dry run prints the composition request and the commands and changes
/// nothing; the apply composes the drives to the host NQN given and runs `nvme connect` (a
/// stand-in on PATH) with that NQN; a second host is refused by the API (its problem detail
/// shown) and by the target; the composed host's userspace sessions read every drive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_composes_through_the_api_then_connects() {
    use std::os::unix::fs::PermissionsExt;
    const TOKEN: &str = "place-test-token";
    const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000a1";
    const OTHER: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000b2";
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = fabrik_target::config::Config::default_jbof(dir.path().join("data"));
    cfg.listen = vec!["127.0.0.1:0".parse().unwrap()];
    cfg.box_name = "placebox".into();
    cfg.drives = 3;
    cfg.drive_size = 1 << 24;
    cfg.backend = fabrik_target::backend::BackendKind::Ram;
    let target = fabrik_target::Target::start(cfg).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(fabrik_api::serve(
        listener,
        target.api_router(TOKEN.into()),
        std::future::pending(),
    ));
    let client = fabrik_api::client::Client::new(&api, Some(TOKEN.into()));

    let m = fixtures::machines::reference_2gpu();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let log = dir.path().join("nvme.log");
    std::fs::write(
        bin.join("nvme"),
        format!("#!/bin/sh\necho \"$@\" >> {}\n", log.display()),
    )
    .unwrap();
    std::fs::set_permissions(bin.join("nvme"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let place = |extra: &[&str]| {
        let mut args = vec![
            "place",
            "--sysfs-root",
            root(&m),
            "--api",
            &api,
            "--subnet-bits",
            "0",
            "--apply",
        ];
        args.extend_from_slice(extra);
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_fabrik"));
        cmd.args(args)
            .env("PATH", &path)
            .env("HOME", dir.path())
            .env("FABRIK_DATA_DIR", dir.path())
            .env_remove("FABRIK_API")
            .env_remove("FABRIK_API_TOKEN")
            .env_remove("RUST_BACKTRACE");
        cmd
    };
    let nqn = |i: u32| format!("nqn.2024-01.io.fabrik:placebox:drive-{i:02}");

    let out = place(&["--dry-run", "-q", HOST, "--token", TOKEN])
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    assert!(
        text.contains(&format!(
            "would compose: POST {api}/api/v1/compositions {{\"host_nqn\":\"{HOST}\",\"drives\":["
        )),
        "{text}"
    );
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("nvme connect "))
            .count(),
        3
    );
    assert!(client.compositions().await.unwrap().is_empty());
    assert!(!log.exists(), "the dry run ran nvme");

    // A wrong token: the API's problem is the error (reading the box already needs it).
    let out = place(&["-q", HOST, "--token", "wrong"])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("401 Unauthorized") && err.contains("Bearer <token>"),
        "{err}"
    );
    assert!(!log.exists(), "nvme ran after the composition was refused");

    let out = place(&["-q", HOST, "--token", TOKEN])
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        stdout(&out).contains(&format!("composed 3 drive(s) to {HOST}: composition c1")),
        "{}",
        stdout(&out)
    );
    let comps = client.compositions().await.unwrap();
    assert_eq!(comps.len(), 1);
    assert_eq!(comps[0].host_nqn, HOST);
    let mut drives = comps[0].drives.clone();
    drives.sort();
    assert_eq!(drives, ["00", "01", "02"]);
    let calls = std::fs::read_to_string(&log).unwrap();
    let mut connected: Vec<String> = calls
        .lines()
        .map(|l| {
            assert!(l.ends_with(&format!("--hostnqn {HOST}")), "{l}");
            l.split(" --nqn ")
                .nth(1)
                .unwrap()
                .split(' ')
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    connected.sort();
    assert_eq!(connected, [nqn(0), nqn(1), nqn(2)]);

    // Applying again: nothing composed twice, the drives connected again.
    let out = place(&["-q", HOST, "--token", TOKEN])
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        stdout(&out).contains(&format!(
            "already composed to {HOST}: composition c1 (3 drive(s))"
        )) && !stdout(&out).contains("composed 3 drive(s)"),
        "{}",
        stdout(&out)
    );
    assert_eq!(client.compositions().await.unwrap().len(), 1);
    assert_eq!(std::fs::read_to_string(&log).unwrap().lines().count(), 6);

    // Another host: the API refuses to compose, and the target refuses its sessions.
    let out = place(&["--userspace", "-q", OTHER, "--token", TOKEN])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("the box's API refused the composition: 409")
            && err.contains(&format!("is composed to {HOST}")),
        "{err}"
    );
    let out = place(&["--userspace", "--no-compose", "-q", OTHER, "--token", TOKEN])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("userspace connect failed for"),
        "{out:?}"
    );

    // The composed host's own sessions: a block read from every drive.
    let out = place(&["--userspace", "--no-compose", "-q", HOST, "--token", TOKEN])
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    for i in 0..3 {
        assert!(
            text.lines()
                .any(|l| l.starts_with("connected (userspace) tcp 127.0.0.1:")
                    && l.contains(&format!(
                        " {} as {HOST}: read 4096 bytes of namespace 1",
                        nqn(i)
                    ))),
            "{text}"
        );
    }
    target.shutdown().await;
}

/// A reader that goes away (`fabrik topo | head -1`) ends fabrik quietly with status 0, as Unix
/// tools do, instead of a panic about a broken pipe.
#[test]
fn a_closed_stdout_pipe_ends_fabrik_quietly() {
    let m = fixtures::machines::dgx_h100();
    let mut child = Command::new(env!("CARGO_BIN_EXE_fabrik"))
        .args(["topo", "--sysfs-root", root(&m)])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take()); // the reader is gone before fabrik writes a byte
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}

/// `fabrik bench --gpu N` runs on what `fabrik place` plans for GPU N: GPU0's drives of an
/// in-process fabrikd on 127.0.0.1, each connected from GPU0's NIC port on the fixture machine
/// (`lo`, 127.0.0.1), written and read back through emulated GPU memory; the drives placed for
/// GPU1 stay untouched. GPU1's port is on no interface of this host, so its run fails binding to
/// it; bad choices are refused clearly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_gpu_runs_on_the_drives_placed_for_that_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = fabrik_target::config::Config::default_jbof(dir.path().join("data"));
    cfg.listen = vec!["127.0.0.1:0".parse().unwrap()];
    cfg.box_name = "gpubox".into();
    cfg.drives = 4;
    cfg.drive_size = 1 << 24;
    cfg.backend = fabrik_target::backend::BackendKind::Ram;
    let target = fabrik_target::Target::start(cfg).await.unwrap();
    let port = target.listen_addrs()[0].port();
    let mut nqns = target.subsystem_nqns();
    nqns.sort();
    let write_box = |name: &str, nqns: &[String]| {
        let drives: Vec<String> = nqns.iter().map(|n| format!(r#"{{"nqn":"{n}"}}"#)).collect();
        let path = dir.path().join(name);
        std::fs::write(
            &path,
            format!(
                r#"{{"ports":[{{"trtype":"tcp","traddr":"127.0.0.1","trsvcid":{port}}}],"drives":[{}]}}"#,
                drives.join(",")
            ),
        )
        .unwrap();
        path.to_str().unwrap().to_string()
    };
    let box_file = write_box("box.json", &nqns);
    let m = fixtures::machines::loopback_2gpu();
    let run = |args: &[&str], plan_args: &[&str]| {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_fabrik"));
        cmd.args(args)
            .args(plan_args)
            .env_remove("FABRIK_API")
            .env_remove("RUST_BACKTRACE")
            .env_remove("RUST_LIB_BACKTRACE");
        cmd.output()
    };
    let plan_args = ["--sysfs-root", root(&m), "--box", &box_file];

    // What place plans for GPU0: every other drive, through mlx5_0 (lo).
    let out = run(&["place", "--json"], &plan_args).await.unwrap();
    assert!(out.status.success(), "{out:?}");
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let gpu0 = &plan["gpus"][0];
    assert_eq!(gpu0["gpu"], 0);
    let placed: Vec<&str> = gpu0["connections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["nqn"].as_str().unwrap())
        .collect();
    assert_eq!(placed, [nqns[0].as_str(), nqns[2].as_str()]);

    // Write the region and read it back, checked, on exactly those drives.
    let bench = [
        "bench",
        "--gpu",
        "0",
        "--mem",
        "emulated-gpu",
        "--rw",
        "read",
        "--bs",
        "128k",
        "--size",
        "4m",
        "--verify",
        "--json",
        "--quiet",
    ];
    let out = run(&bench, &plan_args).await.unwrap();
    assert!(out.status.success(), "{out:?}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["drives"], 2);
    let placement = &report["placement"];
    assert_eq!(placement["gpu"], 0);
    assert_eq!(placement["pci"], "0000:18:00.0");
    assert_eq!(placement["nic_ports"], serde_json::json!(["mlx5_0/1"]));
    assert_eq!(placement["connections"], gpu0["connections"]);
    assert_eq!(placement["connections"][0]["host_traddr"], "127.0.0.1");
    assert_eq!(placement["connections"][0]["host_iface"], "lo");
    assert_eq!(report["verify"]["errors"], 0);
    assert_eq!(report["verify"]["blocks_checked"].as_u64(), Some(1024));
    assert_eq!(report["memory"]["path"], "staged");
    // The data is on GPU0's drives only.
    for nqn in &nqns {
        let opts = fabrik_initiator::ConnectOptions::new(target.listen_addrs()[0], nqn.clone());
        let ctrl = fabrik_initiator::Controller::connect(opts).await.unwrap();
        let block = ctrl.read(1, 0, 1).await.unwrap();
        ctrl.shutdown().await.unwrap();
        let written = block.iter().any(|&b| b != 0);
        assert_eq!(written, placed.contains(&nqn.as_str()), "{nqn}");
    }

    // The text report names the placement; the checkpoint workload runs on it too.
    let out = run(&bench[..bench.len() - 2], &plan_args).await.unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    assert!(
        text.contains("\n  placement: GPU0 0000:18:00.0, NIC ports mlx5_0/1, 2 drive(s)\n")
            && text.contains(&format!(
                "\n    drive {} via mlx5_0/1 127.0.0.1 -> tcp 127.0.0.1:{port}\n",
                nqns[2]
            )),
        "{text}"
    );
    let checkpoint = [
        "bench",
        "checkpoint",
        "--gpu",
        "0",
        "--mem",
        "emulated-gpu",
        "--count",
        "1",
        "--size",
        "2m",
        "--bs",
        "256k",
        "--json",
    ];
    let out = run(&checkpoint, &plan_args).await.unwrap();
    assert!(out.status.success(), "{out:?}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["drives"], 2);
    assert_eq!(report["placement"]["connections"], gpu0["connections"]);

    // GPU1's drives are planned from its own port, on no interface of this host.
    let out = run(
        &[
            "bench",
            "--gpu",
            "1",
            "--mem",
            "host",
            "--size",
            "1m",
            "--subnet-bits",
            "0",
        ],
        &plan_args,
    )
    .await
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains(&format!(
                "connecting to {} at 127.0.0.1:{port} from GPU1's NIC port mlx5_1/1 (192.0.2.1)",
                nqns[1]
            ))
            && err.contains("binding to interface \"ens3f0np0\" (no such interface)"),
        "{err}"
    );

    // Clear refusals.
    let one_drive = write_box("one.json", &nqns[..1]);
    let no_drive = write_box("none.json", &[]);
    let no_driver = "no NVIDIA driver found: GPU memory unavailable";
    let driverless = !fabrik_initiator::gpu::cuda::driver_present();
    for (args, plan, says) in [
        (
            vec!["--gpu", "7"],
            box_file.as_str(),
            "--gpu 7: this machine has 2 GPU(s): GPU0 0000:18:00.0, GPU1 0000:9a:00.0",
        ),
        (
            vec!["--gpu", "1"],
            one_drive.as_str(),
            "mlx5_1 port 1 (192.0.2.1) has no box port on its network: not used; \
             the box's 1 drive(s) are dealt to the other GPUs",
        ),
        (
            vec!["--gpu", "0"],
            no_drive.as_str(),
            "the box lists no drives (give --box FILE, --api URL or --discover ADDR)",
        ),
        (
            vec!["--gpu", "0", "-a", "127.0.0.1"],
            box_file.as_str(),
            "the argument '--gpu <N>' cannot be used with",
        ),
        (
            vec!["-a", "127.0.0.1", "--all"],
            box_file.as_str(),
            "cannot be used with",
        ),
        (
            vec![],
            box_file.as_str(),
            "the following required arguments were not provided:\n  --gpu <N>",
        ),
        // Without --mem, the placed GPU's memory: without the NVIDIA driver, none.
        (
            vec!["--gpu", "0"],
            if driverless {
                box_file.as_str()
            } else {
                no_drive.as_str()
            },
            if driverless { no_driver } else { "no drive" },
        ),
    ] {
        let mut a = vec!["bench", "--size", "1m", "--quiet"];
        a.extend(args.iter().copied());
        let out = run(&a, &["--sysfs-root", root(&m), "--box", plan])
            .await
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} is refused");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    target.shutdown().await;
}
