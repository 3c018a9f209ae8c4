//! The management API for the API tests: a persisted in-process fabrikd with its API served on a
//! free loopback port, clients with and without the token, raw HTTP, problem assertions.

use std::net::SocketAddr;
use std::path::Path;

use fabrik_api::client::{Client, ClientError};
use fabrik_initiator::{Controller, HostError, HostIdentity};
use fabrik_target::backend::BackendKind;
use fabrik_target::endpoints::{ApiEndpoint, API_SOCKET};
use fabrik_target::Target;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub const MIB: u64 = 1 << 20;
pub const TOKEN: &str = "test-token-0123456789";

pub struct Api {
    pub target: Target,
    pub api: SocketAddr,
    endpoint: ApiEndpoint,
    /// Client with the token.
    pub admin: Client,
    /// Client without a token.
    pub anon: Client,
    /// Client of the local socket (no token: the socket's file mode decides).
    pub local: Client,
}

/// A persisted 4-drive RAM target in `dir` and its API, as fabrikd serves it: on a free
/// loopback port and on the local socket in `dir`.
pub async fn start(dir: &Path) -> Api {
    start_with(super::config(dir, BackendKind::Ram, 4, 16 * MIB)).await
}

/// `cfg`, persisted in its data directory, and its API.
pub async fn start_with(cfg: fabrik_target::config::Config) -> Api {
    start_with_api(cfg, "127.0.0.1:0".parse().unwrap()).await
}

/// `start_with`, the API on `api`.
pub async fn start_with_api(mut cfg: fabrik_target::config::Config, api: SocketAddr) -> Api {
    cfg.persist_state = true;
    let dir = cfg.data_dir.clone();
    let target = super::start(cfg).await;
    let listener = tokio::net::TcpListener::bind(api).await.unwrap();
    let api = listener.local_addr().unwrap();
    let socket = dir.join(API_SOCKET);
    let endpoint = ApiEndpoint::start(&target, TOKEN.into(), Some(listener), Some(&socket))
        .await
        .unwrap();
    let base = format!("http://{api}");
    Api {
        target,
        api,
        endpoint,
        admin: Client::new(&base, Some(TOKEN.into())),
        anon: Client::new(&base, None),
        local: Client::unix(&socket),
    }
}

impl Api {
    pub async fn stop(self) {
        self.endpoint.shutdown().await;
        self.target.shutdown().await;
    }

    pub fn nvme(&self) -> SocketAddr {
        self.target.listen_addrs()[0]
    }
}

pub fn nqn(drive: &str) -> String {
    format!("nqn.2024-01.io.fabrik:testbox:drive-{drive}")
}

/// An HTTP request by hand: (status, content type, body).
pub async fn raw(
    api: SocketAddr,
    method: &str,
    path: &str,
    body: Option<(&str, &str)>,
) -> (u16, String, String) {
    let mut s = tokio::net::TcpStream::connect(api).await.unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer {TOKEN}\r\n"
    );
    if let Some((ctype, b)) = body {
        req += &format!(
            "Content-Type: {ctype}\r\nContent-Length: {}\r\n\r\n{b}",
            b.len()
        );
    } else {
        req += "\r\n";
    }
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap();
    let status = head[9..12].parse().unwrap();
    let ctype = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-type: ")
                .map(str::to_string)
        })
        .unwrap_or_default();
    (status, ctype, body.to_string())
}

/// Asserts an API error of this status whose detail mentions `words`.
#[track_caller]
pub fn assert_problem<T: std::fmt::Debug>(r: Result<T, ClientError>, status: u16, words: &str) {
    match r {
        Err(ClientError::Api(p)) => {
            assert_eq!(p.status, status, "{p:?}");
            assert!(
                p.detail.contains(words),
                "detail {:?} lacks {words:?}",
                p.detail
            );
            assert!(!p.title.is_empty() && p.kind == "about:blank", "{p:?}");
        }
        other => panic!("expected a {status} problem, got {other:?}"),
    }
}

pub async fn connect(
    addr: SocketAddr,
    subnqn: &str,
    host: &HostIdentity,
) -> Result<Controller, HostError> {
    Controller::connect(super::options(addr, subnqn).with_host(host)).await
}

/// Connects `host` to `subnqn` (panics if refused) and closes the controller cleanly.
pub async fn connect_and_close(addr: SocketAddr, subnqn: &str, host: &HostIdentity) {
    connect(addr, subnqn, host)
        .await
        .unwrap()
        .shutdown()
        .await
        .unwrap();
}

pub fn nqn_list(ids: &[&str]) -> Vec<String> {
    ids.iter().map(|d| nqn(d)).collect()
}
