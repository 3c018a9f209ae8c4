//! Serving HTTP (the management API, metrics) without letting slow or idle clients take what
//! the NVMe ports need. Every connection must send its request head within a deadline (also
//! the keep-alive idle limit), lives at most a bounded time, and a listener holds at most so
//! many at once: past that, new connections are closed at once. Accept errors (EMFILE) back
//! off and are logged once per burst.
//!
//! The failure that taught it: 300 half-sent request heads held open made fabrikd run out of
//! descriptors, and NVMe hosts could no longer connect.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::Semaphore;
use tower_service::Service;

/// Bounds on one HTTP listener.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections served at once.
    pub max_connections: usize,
    /// Time to send a request head, and to start the next one on a kept-alive connection.
    pub header_timeout: Duration,
    /// Longest life of a connection (a client that reads its answer slowly ends there).
    pub max_connection_time: Duration,
}

impl Default for Limits {
    /// At most 128 connections, and at most a sixteenth of the process's descriptors: the
    /// rest stay for the NVMe ports (the API, its socket and the metrics port together take
    /// under a fifth).
    fn default() -> Limits {
        let open_files = rlimit::getrlimit(rlimit::Resource::NOFILE).map_or(1024, |(soft, _)| soft);
        Limits {
            max_connections: (open_files / 16).clamp(4, 128) as usize,
            header_timeout: Duration::from_secs(10),
            max_connection_time: Duration::from_secs(300),
        }
    }
}

/// A client of the Unix socket: local administration, its credential the socket's file
/// permissions (as SPDK's RPC socket and Docker's). Handlers find it in the request's extensions.
#[derive(Clone, Copy, Debug)]
pub struct LocalAdmin;

/// Serves `app` on a TCP listener until `stop`; handlers find `ConnectInfo<SocketAddr>`.
pub async fn serve_tcp(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    stop: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let what = format!("HTTP {}", listener.local_addr()?);
    serve(listener, None, app, limits, what, stop).await
}

/// `serve_tcp` over TLS (HTTPS): the handshake runs in the connection's own task, within the
/// request head's deadline, so a slow client holds only its own slot.
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: Router,
    limits: Limits,
    stop: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let what = format!("HTTPS {}", listener.local_addr()?);
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    serve(listener, Some(acceptor), app, limits, what, stop).await
}

/// Serves `app` on a Unix socket until `stop`; handlers find `LocalAdmin`.
pub async fn serve_unix(
    listener: UnixListener,
    app: Router,
    limits: Limits,
    stop: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let what = match listener.local_addr()?.as_pathname() {
        Some(p) => format!("HTTP unix:{}", p.display()),
        None => "HTTP unix socket".to_string(),
    };
    serve(listener, None, app, limits, what, stop).await
}

/// Binds a Unix socket at `path`, readable and writable by this user alone (0600). A socket
/// file left by an earlier run is replaced; one that answers means another fabrikd serves
/// there, and is an error.
pub async fn bind_unix(path: &Path) -> io::Result<UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    if tokio::net::UnixStream::connect(path).await.is_ok() {
        return Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("{} answers: another fabrikd serves there", path.display()),
        ));
    }
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let listener = UnixListener::bind(path)?;
    // Between bind and chmod the socket has the umask's mode; the directory (0700) keeps
    // others out meanwhile.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

#[derive(Clone, Copy)]
enum Peer {
    Tcp(SocketAddr),
    Local,
}

/// A listening socket of either kind.
trait Accept {
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    fn accept(&self) -> impl Future<Output = io::Result<(Self::Io, Peer)>> + Send;
}

impl Accept for TcpListener {
    type Io = tokio::net::TcpStream;
    async fn accept(&self) -> io::Result<(Self::Io, Peer)> {
        let (s, peer) = TcpListener::accept(self).await?;
        Ok((s, Peer::Tcp(peer)))
    }
}

impl Accept for UnixListener {
    type Io = tokio::net::UnixStream;
    async fn accept(&self) -> io::Result<(Self::Io, Peer)> {
        let (s, _) = UnixListener::accept(self).await?;
        Ok((s, Peer::Local))
    }
}

async fn serve<L: Accept>(
    listener: L,
    tls: Option<tokio_rustls::TlsAcceptor>,
    app: Router,
    limits: Limits,
    what: String,
    stop: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut failures = 0u32;
    let mut refused = 0u64;
    tokio::pin!(stop);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    if failures == 0 {
                        tracing::warn!("{what}: accept failed: {e} (retrying, backing off up to 1 s)");
                    }
                    failures += 1;
                    let ms = (10u64 << failures.min(7)).min(1000);
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    continue;
                }
            },
        };
        if failures > 0 {
            tracing::info!(
                failures,
                "{what}: accepting again after a burst of accept errors"
            );
            failures = 0;
        }
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            if refused.is_multiple_of(1000) {
                tracing::warn!(
                    refused = refused + 1,
                    "{what}: connection closed at once: {} are open already",
                    limits.max_connections
                );
            }
            refused += 1;
            continue;
        };
        refused = 0;
        let app = app.clone();
        let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
            match peer {
                Peer::Tcp(addr) => {
                    req.extensions_mut().insert(ConnectInfo(addr));
                }
                Peer::Local => {
                    req.extensions_mut().insert(LocalAdmin);
                }
            }
            let mut app = app.clone();
            async move { Ok::<_, Infallible>(app.call(req).await.unwrap_or_else(|e| match e {})) }
        });
        let watcher = graceful.watcher();
        let tls = tls.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let lifetime = limits.max_connection_time;
            let http = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .to_owned();
            // An error here is the client's (a reset, a malformed request, a timeout, a failed
            // handshake).
            match tls {
                None => {
                    let conn = http.serve_connection(TokioIo::new(stream), service);
                    let _ = tokio::time::timeout(lifetime, watcher.watch(conn)).await;
                }
                Some(acceptor) => {
                    let handshake = acceptor.accept(stream);
                    let Ok(Ok(stream)) =
                        tokio::time::timeout(limits.header_timeout, handshake).await
                    else {
                        return;
                    };
                    let conn = http.serve_connection(TokioIo::new(stream), service);
                    let _ = tokio::time::timeout(lifetime, watcher.watch(conn)).await;
                }
            }
        });
    }
    // Answer what is in progress, then close.
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(Duration::from_secs(5)) => {}
    }
    Ok(())
}
