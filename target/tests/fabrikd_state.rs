//! The real `fabrikd` binary: its state survives `kill -9` and a restart, a corrupt state file
//! stops it with a clear message (and stays untouched), drive flags that contradict the state
//! are refused.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fabrik_api::client::Client;
use fabrik_api::models::{CompositionRequest, HostRequest};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Ports {
    nvme: u16,
    api: u16,
}

fn fabrikd(dir: &Path, ports: &Ports, extra: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fabrikd"));
    cmd.arg("--data-dir")
        .arg(dir)
        .args(["--listen", &format!("127.0.0.1:{}", ports.nvme)])
        .args(["--api", &format!("127.0.0.1:{}", ports.api)])
        .args(["--box-name", "tb", "--drives", "4", "--drive-size", "16M"])
        .args(extra)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

/// Starts fabrikd and waits until its API answers.
async fn start(dir: &Path, ports: &Ports) -> (Child, Client) {
    let mut child = fabrikd(dir, ports, &[]).spawn().unwrap();
    // The local socket answers without a token.
    let reader = Client::unix(&dir.join("api.sock"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while reader.drives().await.is_err() {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            panic!(
                "fabrikd exited with {status}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert!(Instant::now() < deadline, "fabrikd's API did not come up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let token = std::fs::read_to_string(dir.join("api-token")).unwrap();
    let admin = Client::new(
        &format!("http://127.0.0.1:{}", ports.api),
        Some(token.trim().to_string()),
    );
    (child, admin)
}

fn kill9(mut child: Child) {
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
}

/// Runs fabrikd expecting it to fail at start; returns its stderr, which ends with the error
/// as `error: ...` and its causes, a line each, and never a backtrace (with RUST_BACKTRACE=1,
/// as on many developer and CI machines).
fn start_fails(dir: &Path, ports: &Ports, extra: &[&str]) -> String {
    let out = fabrikd(dir, ports, extra)
        .env("RUST_BACKTRACE", "1")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
        .wait_with_output()
        .unwrap();
    assert!(!out.status.success(), "fabrikd started");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let last = err.lines().skip_while(|l| !l.starts_with("error: "));
    assert!(
        last.skip(1).all(|l| l.starts_with("  caused by: ")),
        "the error comes last, its causes a line each: {err}"
    );
    assert!(err.contains("error: "), "{err}");
    assert!(!err.to_lowercase().contains("backtrace"), "{err}");
    err
}

/// What fabrikd creates in its data directory is its user's alone, whatever the umask (this
/// test's is the usual 022): drive images hold tenants' data, the token file the API's key,
/// the state every host's NQN.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_data_directory_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("data");
    let ports = Ports {
        nvme: free_port(),
        api: free_port(),
    };
    let (child, _api) = start(&dir, &ports).await;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700, "data directory");
    assert_eq!(mode(&dir.join("drives")), 0o700, "drives directory");
    assert_eq!(mode(&dir.join("drives/drive-00.img")), 0o600, "drive image");
    assert_eq!(mode(&dir.join("state.json")), 0o600, "state file");
    assert_eq!(mode(&dir.join("api-token")), 0o600, "token file");
    kill9(child);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_survives_kill_9_and_a_corrupt_file_stops_fabrikd() {
    let dir = tempfile::tempdir().unwrap();
    let ports = Ports {
        nvme: free_port(),
        api: free_port(),
    };
    let (child, api) = start(dir.path(), &ports).await;
    let host = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000aa";
    let comp = api
        .compose(&CompositionRequest {
            host_nqn: host.into(),
            drives: vec!["00".into(), "01".into()],
            ports: None,
            shared: false,
        })
        .await
        .unwrap();
    let _: fabrik_api::models::Host = api
        .post(
            "/hosts",
            &HostRequest {
                nqn: host.into(),
                name: Some("gpu-7".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    api.delete("/subsystems/nqn.2024-01.io.fabrik:tb:drive-03/namespaces/1")
        .await
        .unwrap();
    let before = (
        api.subsystems().await.unwrap(),
        api.compositions().await.unwrap(),
        api.hosts().await.unwrap(),
        api.drives().await.unwrap().len(),
    );
    let file_before = std::fs::read(dir.path().join("state.json")).unwrap();
    kill9(child);

    let (child, api) = start(dir.path(), &ports).await;
    let after = (
        api.subsystems().await.unwrap(),
        api.compositions().await.unwrap(),
        api.hosts().await.unwrap(),
        api.drives().await.unwrap().len(),
    );
    assert_eq!(after, before, "the API shows the same configuration");
    assert_eq!(after.1[0], comp);
    assert_eq!(
        std::fs::read(dir.path().join("state.json")).unwrap(),
        file_before,
        "restored exactly"
    );

    // Drive flags that contradict the state are refused, naming the file.
    kill9(child);
    // An API address asked for and held by someone else stops fabrikd: it never runs with
    // whoever holds the port standing in for its API (and receiving the tokens sent there).
    let squatter = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = Ports {
        nvme: ports.nvme,
        api: squatter.local_addr().unwrap().port(),
    };
    let err = start_fails(dir.path(), &taken, &[]);
    assert!(
        err.contains("cannot listen on") && err.contains("--api"),
        "{err}"
    );
    drop(squatter);
    let err = start_fails(dir.path(), &ports, &["--backend", "ram"]);
    assert!(
        err.contains("differ") && err.contains("state.json"),
        "{err}"
    );

    // A torn or edited file stops fabrikd and is left as it was.
    let corrupt = &file_before[..file_before.len() / 2];
    std::fs::write(dir.path().join("state.json"), corrupt).unwrap();
    let err = start_fails(dir.path(), &ports, &[]);
    assert!(
        err.contains("corrupt") && err.contains("state.json"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(dir.path().join("state.json")).unwrap(),
        corrupt
    );
}

/// Once fabrikd accepts NVMe connections its API answers too: scripts (CI's kernel interop
/// among them) wait for the NVMe port and then call `fabrik`, which failed while the local
/// socket was bound after the target started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_answers_as_soon_as_the_nvme_port_does() {
    let dir = tempfile::tempdir().unwrap();
    let ports = Ports {
        nvme: free_port(),
        api: free_port(),
    };
    let mut child = fabrikd(dir.path(), &ports, &[]).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", ports.nvme)).is_err() {
        assert!(child.try_wait().unwrap().is_none(), "fabrikd exited");
        assert!(
            Instant::now() < deadline,
            "fabrikd's NVMe port did not come up"
        );
        std::thread::yield_now();
    }
    let drives = Client::unix(&dir.path().join("api.sock")).drives().await;
    kill9(child);
    assert_eq!(drives.expect("the API's local socket answers").len(), 4);
}

/// The management API over HTTPS: a client trusting the box's CA gets answers; one trusting
/// only the system's roots, or speaking plain HTTP, gets none; an address beyond loopback
/// without a certificate stops fabrikd.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_serves_https_and_plain_http_only_on_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let ports = Ports {
        nvme: free_port(),
        api: free_port(),
    };
    let out = Command::new(env!("CARGO_BIN_EXE_fabrikd"))
        .arg("--data-dir")
        .arg(dir.path())
        .args(["--listen", &format!("127.0.0.1:{}", ports.nvme)])
        .args(["--api", &format!("0.0.0.0:{}", ports.api)])
        .args(["--drives", "1", "--drive-size", "16M"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("beyond loopback") && err.contains("--api-tls-cert"),
        "{err}"
    );

    let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let (cert, key) = (dir.path().join("api.crt"), dir.path().join("api.key"));
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
    let tls = [
        "--api-tls-cert",
        cert.to_str().unwrap(),
        "--api-tls-key",
        key.to_str().unwrap(),
    ];
    let mut child = fabrikd(dir.path(), &ports, &tls).spawn().unwrap();
    let socket = Client::unix(&dir.path().join("api.sock"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while socket.drives().await.is_err() {
        assert!(child.try_wait().unwrap().is_none(), "fabrikd exited");
        assert!(Instant::now() < deadline, "fabrikd's API did not come up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let token = std::fs::read_to_string(dir.path().join("api-token")).unwrap();
    let token = Some(token.trim().to_string());
    let url = format!("https://127.0.0.1:{}", ports.api);
    let trusted = Client::with_ca(&url, token.clone(), Some(&cert));
    assert_eq!(trusted.drives().await.unwrap().len(), 4);
    let untrusted = Client::with_ca(&url, token.clone(), None);
    let e = untrusted.drives().await.unwrap_err().to_string();
    assert!(e.to_lowercase().contains("certificate"), "{e}");
    let plain = Client::new(&format!("http://127.0.0.1:{}", ports.api), token);
    assert!(plain.drives().await.is_err());
    kill9(child);
}
