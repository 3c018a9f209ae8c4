//! A typed client of the `/api/v1` API: HTTPS (trusting the CA file in `FABRIK_API_CA`, or the
//! system's roots), plain HTTP/1.1 on loopback, or fabrikd's local socket.

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::path::{Path, PathBuf};

use crate::models::*;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The API answered with a problem.
    #[error("{} {}: {}", .0.status, .0.title, .0.detail)]
    Api(Problem),
    #[error("cannot reach the fabrik API at {url}: {message}")]
    Transport { url: String, message: String },
    #[error("unexpected answer from {url}: {message}")]
    Protocol { url: String, message: String },
}

impl ClientError {
    /// The HTTP status of an API error.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Api(p) => Some(p.status),
            _ => None,
        }
    }
}

pub struct Client {
    base: String,
    token: Option<String>,
    via: Via,
}

type Https = hyper_rustls::HttpsConnector<HttpConnector>;

/// How requests reach fabrikd.
enum Via {
    /// HTTP or HTTPS; an error when the trusted roots could not be read (said at each call).
    /// (Boxed: the client is large, more so with HTTP/2 compiled in for gRPC elsewhere.)
    Http(Result<Box<HyperClient<Https, Full<Bytes>>>, String>),
    /// fabrikd's local socket: no token, the socket's file permissions decide.
    Unix(PathBuf),
}

impl Client {
    /// `base` is e.g. `http://127.0.0.1:8080` (every call needs `token`), or `unix:PATH` for
    /// fabrikd's local socket (no token needed).
    pub fn new(base: &str, token: Option<String>) -> Client {
        let ca = std::env::var_os("FABRIK_API_CA").map(PathBuf::from);
        Client::with_ca(base, token, ca.as_deref())
    }

    /// `new`, an `https://` base trusting the certificates in `ca` (PEM) rather than the
    /// system's roots.
    pub fn with_ca(base: &str, token: Option<String>, ca: Option<&Path>) -> Client {
        if let Some(path) = base.strip_prefix("unix:") {
            return Client::unix(Path::new(path));
        }
        let http = crate::tls::client_config(ca).map(|tls| {
            let connector = hyper_rustls::HttpsConnectorBuilder::new()
                .with_tls_config(tls)
                .https_or_http()
                .enable_http1()
                .build();
            Box::new(HyperClient::builder(TokioExecutor::new()).build(connector))
        });
        Client {
            base: base.trim_end_matches('/').to_string(),
            token,
            via: Via::Http(http),
        }
    }

    /// A client of fabrikd's local socket at `path` (`api.sock` in its data directory).
    pub fn unix(path: &Path) -> Client {
        Client {
            base: format!("unix:{}", path.display()),
            token: None,
            via: Via::Unix(path.to_path_buf()),
        }
    }

    /// Where this client sends its requests, as people write it.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The token it sends.
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    async fn send(&self, req: Request<Full<Bytes>>) -> Result<hyper::Response<Incoming>, String> {
        match &self.via {
            Via::Http(Ok(http)) => http.request(req).await.map_err(|e| {
                // The TLS error (an untrusted certificate, a name mismatch) is the useful part.
                let mut text = e.to_string();
                let mut source = std::error::Error::source(&e);
                while let Some(s) = source {
                    text = format!("{text}: {s}");
                    source = s.source();
                }
                text
            }),
            Via::Http(Err(e)) => Err(e.clone()),
            Via::Unix(path) => {
                let stream = tokio::net::UnixStream::connect(path)
                    .await
                    .map_err(|e| e.to_string())?;
                let (mut sender, conn) =
                    hyper::client::conn::http1::handshake(TokioIo::new(stream))
                        .await
                        .map_err(|e| e.to_string())?;
                tokio::spawn(conn);
                sender.send_request(req).await.map_err(|e| e.to_string())
            }
        }
    }

    /// Any call: `body` is JSON.
    pub async fn request<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<T, ClientError> {
        let url = format!("{}/api/v1{path}", self.base);
        let mut req = Request::builder().method(method);
        req = match self.via {
            Via::Http(_) => req.uri(&url),
            Via::Unix(_) => req
                .uri(format!("/api/v1{path}"))
                .header("host", "localhost"),
        };
        if let Some(t) = &self.token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        if body.is_some() {
            req = req.header("content-type", "application/json");
        }
        let req = req
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| ClientError::Transport {
                url: url.clone(),
                message: e.to_string(),
            })?;
        let resp = self
            .send(req)
            .await
            .map_err(|message| ClientError::Transport {
                url: url.clone(),
                message,
            })?;
        let status = resp.status();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| ClientError::Transport {
                url: url.clone(),
                message: e.to_string(),
            })?
            .to_bytes();
        if !status.is_success() {
            return Err(match serde_json::from_slice::<Problem>(&bytes) {
                Ok(p) => ClientError::Api(p),
                Err(_) => ClientError::Protocol {
                    url,
                    message: format!("{status} without a problem body"),
                },
            });
        }
        let bytes = if status == StatusCode::NO_CONTENT {
            Bytes::from_static(b"null")
        } else {
            bytes
        };
        serde_json::from_slice(&bytes).map_err(|e| ClientError::Protocol {
            url,
            message: e.to_string(),
        })
    }

    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        self.request(Method::GET, path, None).await
    }

    pub async fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &impl Serialize,
    ) -> Result<T, ClientError> {
        let body = serde_json::to_vec(body).expect("request serializes");
        self.request(Method::POST, path, Some(body)).await
    }

    pub async fn put<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &impl Serialize,
    ) -> Result<T, ClientError> {
        let body = serde_json::to_vec(body).expect("request serializes");
        self.request(Method::PUT, path, Some(body)).await
    }

    pub async fn delete(&self, path: &str) -> Result<(), ClientError> {
        self.request::<()>(Method::DELETE, path, None).await
    }

    pub async fn drives(&self) -> Result<Vec<Drive>, ClientError> {
        self.get("/drives").await
    }

    pub async fn drive(&self, id: &str) -> Result<Drive, ClientError> {
        self.get(&format!("/drives/{}", seg(id))).await
    }

    pub async fn subsystems(&self) -> Result<Vec<Subsystem>, ClientError> {
        self.get("/subsystems").await
    }

    pub async fn subsystem(&self, nqn: &str) -> Result<Subsystem, ClientError> {
        self.get(&format!("/subsystems/{}", seg(nqn))).await
    }

    pub async fn hosts(&self) -> Result<Vec<Host>, ClientError> {
        self.get("/hosts").await
    }

    pub async fn add_host(&self, req: &HostRequest) -> Result<Host, ClientError> {
        self.post("/hosts", req).await
    }

    pub async fn set_host_keys(
        &self,
        nqn: &str,
        req: &HostKeysRequest,
    ) -> Result<Host, ClientError> {
        self.put(&format!("/hosts/{}/keys", seg(nqn)), req).await
    }

    pub async fn set_subsystem_authentication(
        &self,
        nqn: &str,
        required: bool,
    ) -> Result<Subsystem, ClientError> {
        let req = AuthenticationRequest { required };
        self.put(&format!("/subsystems/{}/authentication", seg(nqn)), &req)
            .await
    }

    pub async fn set_drive_qos(&self, id: &str, req: &QosLimits) -> Result<Drive, ClientError> {
        self.put(&format!("/drives/{}/qos", seg(id)), req).await
    }

    pub async fn set_host_qos(&self, nqn: &str, req: &QosLimits) -> Result<Host, ClientError> {
        self.put(&format!("/hosts/{}/qos", seg(nqn)), req).await
    }

    pub async fn ports(&self) -> Result<Vec<Port>, ClientError> {
        self.get("/ports").await
    }

    pub async fn port(&self, id: u16) -> Result<Port, ClientError> {
        self.get(&format!("/ports/{id}")).await
    }

    pub async fn ana_groups(&self) -> Result<Vec<AnaGroup>, ClientError> {
        self.get("/ana-groups").await
    }

    pub async fn set_ana_group(&self, id: u32, state: AnaState) -> Result<AnaGroup, ClientError> {
        self.put(&format!("/ana-groups/{id}"), &AnaGroupRequest { state })
            .await
    }

    /// What is registered with a central discovery controller (404 from a box).
    pub async fn cdc_registrations(&self) -> Result<Vec<CdcRegistration>, ClientError> {
        self.get("/cdc/registrations").await
    }

    pub async fn module(&self) -> Result<Module, ClientError> {
        self.get("/module").await
    }

    pub async fn set_maintenance(&self, maintenance: bool) -> Result<Module, ClientError> {
        self.put("/module", &ModuleRequest { maintenance }).await
    }

    pub async fn module_config(&self) -> Result<ModuleConfig, ClientError> {
        self.get("/module/config").await
    }

    pub async fn apply_module_config(
        &self,
        push: &ModuleConfigPush,
    ) -> Result<ModuleConfig, ClientError> {
        self.put("/module/config", push).await
    }

    pub async fn push_module_config(&self) -> Result<Module, ClientError> {
        self.post("/module/config/push", &serde_json::json!({}))
            .await
    }

    pub async fn controllers(&self) -> Result<Vec<Controller>, ClientError> {
        self.get("/controllers").await
    }

    pub async fn controller(&self, id: u64) -> Result<Controller, ClientError> {
        self.get(&format!("/controllers/{id}")).await
    }

    pub async fn disconnect_controller(&self, id: u64) -> Result<(), ClientError> {
        self.request::<()>(Method::POST, &format!("/controllers/{id}/disconnect"), None)
            .await
    }

    pub async fn compositions(&self) -> Result<Vec<Composition>, ClientError> {
        self.get("/compositions").await
    }

    pub async fn compose(&self, req: &CompositionRequest) -> Result<Composition, ClientError> {
        self.post("/compositions", req).await
    }

    pub async fn decompose(&self, id: &str) -> Result<(), ClientError> {
        self.delete(&format!("/compositions/{}", seg(id))).await
    }

    pub async fn volumes(&self) -> Result<Vec<Volume>, ClientError> {
        self.get("/volumes").await
    }

    pub async fn volume(&self, name: &str) -> Result<Volume, ClientError> {
        self.get(&format!("/volumes/{}", seg(name))).await
    }

    pub async fn create_volume(&self, req: &VolumeRequest) -> Result<Volume, ClientError> {
        self.post("/volumes", req).await
    }

    pub async fn delete_volume(&self, name: &str) -> Result<(), ClientError> {
        self.delete(&format!("/volumes/{}", seg(name))).await
    }

    pub async fn add_volume_spare(&self, name: &str, drive: &str) -> Result<Volume, ClientError> {
        let req = SpareRequest {
            drive: drive.into(),
        };
        self.post(&format!("/volumes/{}/spares", seg(name)), &req)
            .await
    }

    pub async fn set_volume_rebuild_limit(
        &self,
        name: &str,
        mib_per_sec: Option<u64>,
    ) -> Result<Volume, ClientError> {
        let req = RebuildLimit { mib_per_sec };
        let path = format!("/volumes/{}/rebuild-limit", seg(name));
        self.put(&path, &req).await
    }

    pub async fn scrub_volume(&self, name: &str) -> Result<Volume, ClientError> {
        let path = format!("/volumes/{}/scrub", seg(name));
        self.post(&path, &serde_json::json!({})).await
    }

    pub async fn fail_volume_member(&self, name: &str, drive: &str) -> Result<Volume, ClientError> {
        let path = format!("/volumes/{}/members/{}/fail", seg(name), seg(drive));
        self.post(&path, &serde_json::json!({})).await
    }
}

/// Percent-encodes a path segment (NQNs carry ':' which is fine, but not '/', '?', '#', ' ').
pub fn seg(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~:@".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
