//! Transports: how capsules, data and responses move between a host and a `Queue`.
//! The controller logic never knows which one it runs on.

mod admission;
#[cfg(feature = "rdma")]
pub mod rdma;
pub(crate) mod signals;
pub mod tcp;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::controller::TargetState;
use crate::model::{Port, Transport};

/// A listening transport endpoint, serving connections until `stop` is cancelled and then
/// letting every connection finish the commands it has in flight.
pub trait Listener: Send + 'static {
    /// The port as the discovery log reports it (with the address actually bound).
    fn port(&self) -> &Port;
    fn serve(
        self: Box<Self>,
        target: Arc<TargetState>,
        stop: CancellationToken,
    ) -> tokio::task::JoinHandle<()>;
}

/// The machine cannot do RDMA (no rdma-core libraries, no rdma_cm, no device for the address,
/// or a build without the `rdma` feature): NVMe/TCP listeners still serve.
#[derive(Debug, thiserror::Error)]
#[error("RDMA unavailable: {0}")]
pub struct RdmaUnavailable(pub String);

/// Binds a listener of `transport` for port `id` on `addr`, with TLS where `tls` says (NVMe/TCP
/// only).
pub async fn bind(
    transport: Transport,
    addr: SocketAddr,
    id: u16,
    tls: Option<tcp::PortTls>,
) -> anyhow::Result<Box<dyn Listener>> {
    match transport {
        Transport::Tcp => Ok(Box::new(tcp::TcpListenerPort::bind(addr, id, tls).await?)),
        Transport::Rdma if tls.is_some_and(|t| !t.mode.is_none()) => {
            anyhow::bail!("TLS is for NVMe/TCP ports, not NVMe/RDMA")
        }
        Transport::Rdma => bind_rdma(addr, id),
    }
}

#[cfg(feature = "rdma")]
fn bind_rdma(addr: SocketAddr, id: u16) -> anyhow::Result<Box<dyn Listener>> {
    Ok(Box::new(rdma::RdmaListenerPort::bind(addr, id)?))
}

#[cfg(not(feature = "rdma"))]
fn bind_rdma(_addr: SocketAddr, _id: u16) -> anyhow::Result<Box<dyn Listener>> {
    Err(RdmaUnavailable("fabrikd was built without the `rdma` cargo feature".into()).into())
}
