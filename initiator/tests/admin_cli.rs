//! The `fabrik` admin subcommands against an in-process fabrikd and its management API.

use std::process::Output;

use fabrik_api::models::{AnaGroup, AnaState, Composition, Drive};
use fabrik_target::backend::BackendKind;
use fabrik_target::config::Config;
use fabrik_target::endpoints::ApiEndpoint;

const TOKEN: &str = "cli-test-token";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000c1";

/// `fabrik ARGS` with FABRIK_DATA_DIR and HOME `home`; at `api`, else at its default (the
/// local socket in the data directory).
async fn fabrik(api: Option<&str>, home: &std::path::Path, args: &[&str]) -> Output {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_fabrik"));
    match api {
        Some(api) => cmd.env("FABRIK_API", api),
        None => cmd.env_remove("FABRIK_API"),
    };
    cmd.args(args)
        .env_remove("FABRIK_API_TOKEN")
        .env("FABRIK_DATA_DIR", home)
        .env("HOME", home)
        // As on many developer and CI machines: expected errors must still read as one line.
        .env("RUST_BACKTRACE", "1")
        .output()
        .await
        .unwrap()
}

/// A refusal: non-zero exit, and stderr is `error: ...` (a line, then causes a line each),
/// never a backtrace. Returns stderr.
#[track_caller]
fn refused(o: &Output) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success(), "{err}");
    assert!(err.starts_with("error: "), "{err}");
    assert!(
        err.lines().skip(1).all(|l| l.starts_with("  caused by: ")),
        "{err}"
    );
    assert!(!err.to_lowercase().contains("backtrace"), "{err}");
    err
}

fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "fabrik failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compose_list_decompose() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let mut cfg = Config::default_jbof(dir.path().to_path_buf());
    cfg.listen = vec!["127.0.0.1:0".parse().unwrap()];
    cfg.box_name = "clibox".into();
    cfg.drives = 3;
    cfg.drive_size = 1 << 24;
    cfg.backend = BackendKind::Ram;
    let target = fabrik_target::Target::start(cfg).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let api = Some(url.as_str());
    // Served as fabrikd serves it: on TCP, and on the local socket in the data directory.
    let socket = home.path().join("api.sock");
    let endpoint = ApiEndpoint::start(&target, TOKEN.into(), Some(listener), Some(&socket))
        .await
        .unwrap();

    // No socket anywhere (another data directory): said plainly.
    let elsewhere = tempfile::tempdir().unwrap();
    if !std::path::Path::new("/var/lib/fabrik/api.sock").exists() {
        let o = fabrik(None, elsewhere.path(), &["drives"]).await;
        assert!(refused(&o).contains("no fabrikd API socket"), "{o:?}");
    }

    // By default the local socket: no token needed.
    let drives: Vec<Drive> = serde_json::from_str(&stdout(
        &fabrik(None, home.path(), &["drives", "--json"]).await,
    ))
    .unwrap();
    assert_eq!(drives.len(), 3);
    let table = stdout(&fabrik(None, home.path(), &["drives"]).await);
    assert!(
        table.starts_with("ID") && table.contains("16 MiB") && table.lines().count() == 4,
        "{table}"
    );

    // Over HTTP with no token anywhere: a clear refusal, reads too, nothing composed.
    let o = fabrik(api, home.path(), &["drives"]).await;
    assert!(refused(&o).contains("token"), "{o:?}");
    let o = fabrik(
        api,
        home.path(),
        &["compose", "--host", HOST, "--drives", "0-1"],
    )
    .await;
    assert!(refused(&o).contains("token"), "{o:?}");

    // The token from the data directory's file, as fabrikd writes it.
    std::fs::write(home.path().join("api-token"), format!("{TOKEN}\n")).unwrap();
    let c: Composition = serde_json::from_str(&stdout(
        &fabrik(
            api,
            home.path(),
            &["compose", "--host", HOST, "--drives", "0-1", "--json"],
        )
        .await,
    ))
    .unwrap();
    assert_eq!(c.drives, ["00", "01"]);
    let text = stdout(
        &fabrik(
            api,
            home.path(),
            &["compose", "--host", HOST, "--drives", "2"],
        )
        .await,
    );
    assert!(
        text.contains("nvme connect -t tcp") && text.contains("drive-02"),
        "{text}"
    );
    let o = fabrik(
        api,
        home.path(),
        &["compose", "--host", HOST, "--drives", "1"],
    )
    .await;
    let err = refused(&o);
    assert!(
        err.starts_with("error: 409 Conflict: drive \"01\" is already composed")
            && err.lines().count() == 1,
        "{err}"
    );
    let o = fabrik(
        api,
        home.path(),
        &["compose", "--host", "not an nqn", "--drives", "0"],
    )
    .await;
    assert!(refused(&o).contains("422"), "{o:?}");

    let subs = stdout(&fabrik(api, home.path(), &["subsystems"]).await);
    assert_eq!(subs.matches(HOST).count(), 3, "{subs}");
    let list = stdout(&fabrik(None, home.path(), &["compositions"]).await);
    assert!(list.contains("c1") && list.contains("c2"), "{list}");
    let ctrls = stdout(&fabrik(None, home.path(), &["controllers", "--json"]).await);
    assert_eq!(ctrls.trim(), "[]");

    // Changes on the local socket need no token either.
    std::fs::remove_file(home.path().join("api-token")).unwrap();
    stdout(&fabrik(None, home.path(), &["decompose", "--host", HOST]).await);
    let left = stdout(&fabrik(None, home.path(), &["compositions", "--json"]).await);
    assert_eq!(left.trim(), "[]");

    // ANA groups: listed, set, and a state that does not exist refused in a line.
    let set = ["ana-groups", "--group", "1", "--state", "inaccessible"];
    let table = stdout(&fabrik(None, home.path(), &set).await);
    assert!(
        table.starts_with("GROUP") && table.contains("inaccessible"),
        "{table}"
    );
    let groups: Vec<AnaGroup> = serde_json::from_str(&stdout(
        &fabrik(None, home.path(), &["ana-groups", "--json"]).await,
    ))
    .unwrap();
    assert_eq!(
        (groups[0].state, groups[0].change_count),
        (AnaState::Inaccessible, 1)
    );
    let bad = ["ana-groups", "--group", "1", "--state", "sleepy"];
    let o = fabrik(None, home.path(), &bad).await;
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("sleepy"));

    // The module: into maintenance (every group inaccessible, nothing in flight) and back.
    let on = stdout(&fabrik(None, home.path(), &["module", "--maintenance", "on"]).await);
    assert!(on.contains("maintenance, drained"), "{on}");
    let off = stdout(&fabrik(None, home.path(), &["module", "--maintenance", "off"]).await);
    assert!(off.contains("in service"), "{off}");
    let o = fabrik(None, home.path(), &["module", "--maintenance", "maybe"]).await;
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("on or off"), "{err}");
    endpoint.shutdown().await;
    target.shutdown().await;
}
