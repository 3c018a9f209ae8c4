//! fabrik-csi: a Kubernetes CSI driver for fabrik boxes. The controller makes volumes (RAID
//! volumes of a box's drives, by capacity and topology) and composes them to nodes through the
//! boxes' REST API; the node plugin connects them with the kernel NVMe host and hands over a
//! block device or a mounted filesystem.

#![forbid(unsafe_code)]

pub mod boxes;
pub mod busy;
pub mod caps;
pub mod controller;
pub mod identity;
pub mod names;
pub mod node;

/// The CSI v1 messages and services (generated from `proto/csi.proto`).
#[allow(clippy::all, missing_docs)]
pub mod pb {
    tonic::include_proto!("csi.v1");
}

use std::future::Future;
use std::path::{Path, PathBuf};

/// The socket path of a CSI endpoint (`unix:///PATH` or `unix:PATH`).
pub fn endpoint_path(endpoint: &str) -> Result<PathBuf, String> {
    let path = endpoint
        .strip_prefix("unix://")
        .or_else(|| endpoint.strip_prefix("unix:"))
        .filter(|p| p.starts_with('/'))
        .ok_or_else(|| {
            format!("endpoint {endpoint:?} is not unix:///PATH (an absolute socket path)")
        })?;
    Ok(PathBuf::from(path))
}

/// A gRPC channel to a CSI endpoint's socket (for clients: tests, tools).
pub async fn channel(path: &Path) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    let path = path.to_path_buf();
    // The URI is a placeholder: every connection goes to the socket.
    tonic::transport::Endpoint::from_static("http://csi.invalid")
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        }))
        .await
}

/// Serves the CSI services on the Unix socket `path` until `stop`: Identity always, Controller
/// and Node where given. A socket file left by an earlier run is replaced.
pub async fn serve(
    path: &Path,
    controller: Option<controller::ControllerService>,
    node: Option<node::NodeService>,
    stop: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    use anyhow::Context;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("{}", dir.display()))?;
    }
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(e).with_context(|| format!("removing the old socket {}", path.display()))
        }
        _ => {}
    }
    let listener = tokio::net::UnixListener::bind(path)
        .with_context(|| format!("binding {}", path.display()))?;
    let identity = identity::IdentityService {
        controller: controller.is_some(),
        topology: controller.as_ref().is_some_and(|c| c.has_racks())
            || node.as_ref().is_some_and(|n| n.has_rack()),
    };
    tracing::info!(
        socket = %path.display(),
        controller = controller.is_some(),
        node = node.is_some(),
        "serving CSI"
    );
    let served = tonic::transport::Server::builder()
        .add_service(pb::identity_server::IdentityServer::new(identity))
        .add_optional_service(controller.map(pb::controller_server::ControllerServer::new))
        .add_optional_service(node.map(pb::node_server::NodeServer::new))
        .serve_with_incoming_shutdown(
            tokio_stream::wrappers::UnixListenerStream::new(listener),
            stop,
        )
        .await;
    let _ = std::fs::remove_file(path);
    served.context("serving gRPC")
}
