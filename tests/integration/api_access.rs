//! The management API's clients and audit log (issue 19): a read-only token may GET (the
//! metrics too) and nothing else; an admin client may change things; every change tried, made
//! or refused, is one line of the append-only audit log, with who and the outcome and never a
//! request body.

mod common;

use common::api::{self, MIB};
use fabrik_api::access::{ApiClient, Scope};
use fabrik_api::client::{Client, ClientError};
use fabrik_api::models::{Host, HostRequest};
use fabrik_initiator::HostIdentity;
use fabrik_target::backend::BackendKind;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_tokens_only_read_and_every_change_is_audited() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = common::config(dir.path(), BackendKind::Ram, 1, 16 * MIB);
    cfg.api_clients = vec![
        ApiClient {
            name: "grafana".into(),
            token: "read-only-token-0123456789".into(),
            scope: Scope::Read,
        },
        ApiClient {
            name: "ops".into(),
            token: "ops-admin-token-0123456789".into(),
            scope: Scope::Admin,
        },
    ];
    let a = api::start_with(cfg).await;
    let base = format!("http://{}", a.api);
    let grafana = Client::new(&base, Some("read-only-token-0123456789".into()));
    let ops = Client::new(&base, Some("ops-admin-token-0123456789".into()));
    let secret = fabrik_proto::auth::Secret::new(1, &[0x71; 32])
        .unwrap()
        .to_text()
        .to_string();
    let req = |nqn: &str| HostRequest {
        nqn: nqn.into(),
        dhchap_secret: Some(secret.clone()),
        ..Default::default()
    };
    let (h1, h2) = (HostIdentity::random().nqn, HostIdentity::random().nqn);

    // Read: fine; change: 403 and nothing changed.
    grafana.hosts().await.unwrap();
    let r = grafana.add_host(&req(&h1)).await;
    api::assert_problem(r, 403, "read-only");
    assert!(ops.hosts().await.unwrap().is_empty());
    // Its token scrapes the metrics on the API's port too.
    let (status, body) = get_with(a.api, "/metrics", "read-only-token-0123456789").await;
    assert_eq!(status, 200);
    assert!(body.contains("fabrik_build_info"));
    // Admin client and no token at all.
    let host: Host = ops.add_host(&req(&h2)).await.unwrap();
    assert!(host.dhchap);
    let r = a.anon.add_host(&req(&h1)).await;
    assert!(
        matches!(r, Err(ClientError::Api(ref p)) if p.status == 401),
        "{r:?}"
    );

    let log = std::fs::read_to_string(dir.path().join("audit.log")).unwrap();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let who_status: Vec<(String, u64)> = lines
        .iter()
        .map(|l| {
            assert_eq!(l["method"], "POST");
            assert_eq!(l["path"], "/api/v1/hosts");
            (
                l["who"].as_str().unwrap().to_string(),
                l["status"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        who_status,
        [
            ("grafana".to_string(), 403),
            ("ops".to_string(), 201),
            ("(no valid token)".to_string(), 401)
        ]
    );
    assert!(
        !log.contains(&secret[10..40]) && !log.contains(&h2),
        "no bodies: {log}"
    );
    a.stop().await;
}

/// GET `path` with this bearer token: (status, body).
async fn get_with(addr: std::net::SocketAddr, path: &str, token: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer {token}\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap();
    (head[9..12].parse().unwrap(), body.to_string())
}

#[test]
fn weak_or_shared_client_tokens_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = common::config(dir.path(), BackendKind::Ram, 1, 16 * MIB);
    let client = |name: &str, token: &str| ApiClient {
        name: name.into(),
        token: token.into(),
        scope: Scope::Read,
    };
    cfg.api_clients = vec![client("a", "short")];
    assert!(cfg
        .validate()
        .unwrap_err()
        .to_string()
        .contains("16 characters"));
    cfg.api_clients = vec![
        client("a", "same-token-0123456789"),
        client("b", "same-token-0123456789"),
    ];
    assert!(cfg
        .validate()
        .unwrap_err()
        .to_string()
        .contains("another client's"));
    cfg.api_clients = vec![
        client("a", "one-token-0123456789"),
        client("a", "two-token-0123456789"),
    ];
    assert!(cfg.validate().unwrap_err().to_string().contains("twice"));
}
