//! Where the management API is served: fabrikd's local socket (`api.sock` in the data
//! directory, mode 0600: its file permissions are the credential, as for SPDK's RPC socket
//! and Docker's; the `fabrik` CLI's default) and, where asked, a TCP address (every call
//! with the token). Both serve `/metrics` too, under the same rule.
//!
//! The CLI no longer sends its token to whatever listens on 127.0.0.1:8080: a local user who
//! held that port while fabrikd ran without it received the token (and then used it).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use fabrik_api::http::{self, Limits};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::Target;

/// The file name of the local socket in the data directory.
pub const API_SOCKET: &str = "api.sock";

/// The API being served.
pub struct ApiEndpoint {
    tcp: Option<SocketAddr>,
    https: bool,
    socket: Option<PathBuf>,
    stop: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// The API's sockets, bound but not yet answering. fabrikd binds them before it serves
/// NVMe: a script that waits for the NVMe port and then calls `fabrik` found no local socket
/// yet (CI's interop compose step failed that way). A client that connects before
/// `serve` waits in the listen backlog.
pub struct ApiListeners {
    tcp: Option<TcpListener>,
    unix: Option<(tokio::net::UnixListener, PathBuf)>,
    /// HTTPS on the TCP listener.
    tls: Option<std::sync::Arc<fabrik_api::tls::rustls::ServerConfig>>,
}

impl ApiListeners {
    /// Binds the local socket at `socket` (replacing a stale one; an error if another fabrikd
    /// answers there) beside `tcp` (already bound).
    pub async fn bind(tcp: Option<TcpListener>, socket: Option<&Path>) -> anyhow::Result<Self> {
        let unix = match socket {
            Some(path) => {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    crate::files::create_private_dir(dir)?;
                }
                let listener = http::bind_unix(path)
                    .await
                    .with_context(|| format!("cannot serve the API on {}", path.display()))?;
                Some((listener, path.to_path_buf()))
            }
            None => None,
        };
        Ok(ApiListeners {
            tcp,
            unix,
            tls: None,
        })
    }

    /// Serves the TCP listener over HTTPS (see `fabrik_api::tls::server_config`).
    pub fn with_tls(
        mut self,
        tls: Option<std::sync::Arc<fabrik_api::tls::rustls::ServerConfig>>,
    ) -> Self {
        self.tls = tls;
        self
    }

    /// Answers the API of `target` on these sockets.
    pub fn serve(self, target: &Target, token: String) -> anyhow::Result<ApiEndpoint> {
        let app = target
            .api_router(token.clone())
            .merge(target.metrics_router(token));
        let stop = CancellationToken::new();
        let mut tasks = Vec::new();
        let socket = match self.unix {
            Some((listener, path)) => {
                let (app, stop) = (app.clone(), stop.clone());
                tasks.push(tokio::spawn(async move {
                    let stopped = async move { stop.cancelled().await };
                    if let Err(e) =
                        http::serve_unix(listener, app, Limits::default(), stopped).await
                    {
                        tracing::error!("the API's local socket failed: {e}");
                    }
                }));
                Some(path)
            }
            None => None,
        };
        let tcp = match self.tcp {
            Some(listener) => {
                let addr = listener.local_addr()?;
                let stop = stop.clone();
                let tls = self.tls.clone();
                tasks.push(tokio::spawn(async move {
                    let stopped = async move { stop.cancelled().await };
                    let served = match tls {
                        Some(tls) => {
                            http::serve_tls(listener, tls, app, Limits::default(), stopped).await
                        }
                        None => http::serve_tcp(listener, app, Limits::default(), stopped).await,
                    };
                    if let Err(e) = served {
                        tracing::error!("the API on {addr} failed: {e}");
                    }
                }));
                Some(addr)
            }
            None => None,
        };
        Ok(ApiEndpoint {
            tcp,
            https: self.tls.is_some(),
            socket,
            stop,
            tasks,
        })
    }

    /// Removes the socket file of listeners never served (fabrikd failed to start).
    pub fn discard(self) {
        if let Some((_, path)) = self.unix {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl ApiEndpoint {
    /// Serves the API of `target` on `tcp` (already bound) and on a Unix socket at `socket`.
    pub async fn start(
        target: &Target,
        token: String,
        tcp: Option<TcpListener>,
        socket: Option<&Path>,
    ) -> anyhow::Result<ApiEndpoint> {
        ApiListeners::bind(tcp, socket).await?.serve(target, token)
    }

    /// The TCP address actually bound.
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        self.tcp
    }

    /// The TCP address serves HTTPS.
    pub fn https(&self) -> bool {
        self.https
    }

    pub fn socket_path(&self) -> Option<&Path> {
        self.socket.as_deref()
    }

    /// Answers what is in progress, stops, and removes the socket file.
    pub async fn shutdown(self) {
        self.stop.cancel();
        for t in self.tasks {
            let _ = t.await;
        }
        if let Some(p) = &self.socket {
            let _ = std::fs::remove_file(p);
        }
    }
}
