//! fabrik-target: the NVMe-oF target behind `fabrikd`.
//!
//! Drives (backends) are exported as Namespaces of Subsystems, reachable through Ports
//! (transport listeners). Hosts connect and get a Controller each (dynamic model).

pub mod backend;
pub mod config;
pub mod controller;
pub mod model;
pub mod transport;

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use fabrik_proto::fabrics::nqn::Nqn;
use tokio_util::sync::CancellationToken;

use backend::{BackendKind, Drive};
use config::{Config, DriveSpec};
use model::{Namespace, Subsystem, TargetState};
use transport::tcp::TcpListenerPort;
use transport::Listener;

/// A running target.
pub struct Target {
    state: Arc<TargetState>,
    listen_addrs: Vec<SocketAddr>,
    rdma_listen_addrs: Vec<SocketAddr>,
    stop: CancellationToken,
    listeners: Vec<tokio::task::JoinHandle<()>>,
}

impl Target {
    /// Opens every drive, builds the subsystems, binds every listener and starts serving.
    pub async fn start(config: Config) -> anyhow::Result<Target> {
        config.validate()?;
        let state = Arc::new(TargetState::new(config.box_name.clone()));
        let mut drives = std::collections::HashMap::new();
        for spec in config.drive_list() {
            let drive = open_drive(&spec).with_context(|| format!("drive {}", spec.id))?;
            drives.insert(spec.id.clone(), (spec, drive));
        }
        for sub in config.subsystem_list() {
            let nqn = Nqn::new(&sub.nqn).with_context(|| format!("subsystem NQN {:?}", sub.nqn))?;
            let first = &drives[&sub.drives[0]].0;
            let serial_key = if sub.drives.len() == 1 {
                first.id.clone()
            } else {
                let h = model::stable_id(&sub.nqn, b"serial");
                format!("S{:02X}{:02X}{:02X}", h[0], h[1], h[2])
            };
            let subsystem = Subsystem::new(
                nqn,
                serial_number(&config.box_name, &serial_key),
                sub.model
                    .clone()
                    .unwrap_or_else(|| format!("fabrik {} drive", first.backend.name())),
                config.allowed_hosts_for(&sub),
            );
            for (i, id) in sub.drives.iter().enumerate() {
                let (spec, drive) = &drives[id];
                let identity = format!("{}:{}", config.box_name, spec.id);
                subsystem.add_namespace(Arc::new(Namespace::new(
                    i as u32 + 1,
                    &spec.id,
                    drive.clone(),
                    &identity,
                )));
            }
            state.add_subsystem(Arc::new(subsystem));
        }
        let stop = CancellationToken::new();
        let mut listeners = Vec::new();
        let mut listen_addrs = Vec::new();
        for addr in &config.listen {
            let port = TcpListenerPort::bind(*addr, state.next_port_id())
                .await
                .with_context(|| format!("cannot listen on {addr} (NVMe/TCP)"))?;
            listen_addrs.push(port.port().addr);
            state.add_port(port.port().clone());
            listeners.push(Box::new(port).serve(state.clone(), stop.clone()));
        }
        let mut rdma_listen_addrs = Vec::new();
        for addr in &config.rdma_listen {
            let port = match bind_rdma(*addr, state.next_port_id()) {
                Ok(port) => port,
                Err(e) if !listen_addrs.is_empty() && e.is::<transport::RdmaUnavailable>() => {
                    tracing::error!("NVMe/RDMA listener {addr}: {e}; serving NVMe/TCP only");
                    continue;
                }
                Err(e) => return Err(e.context(format!("cannot listen on {addr} (NVMe/RDMA)"))),
            };
            rdma_listen_addrs.push(port.port().addr);
            state.add_port(port.port().clone());
            listeners.push(port.serve(state.clone(), stop.clone()));
        }
        Ok(Target {
            state,
            listen_addrs,
            rdma_listen_addrs,
            stop,
            listeners,
        })
    }

    /// The NVMe/TCP addresses actually bound (a port 0 in the configuration becomes the one chosen).
    pub fn listen_addrs(&self) -> Vec<SocketAddr> {
        self.listen_addrs.clone()
    }

    /// The NVMe/RDMA addresses actually bound.
    pub fn rdma_listen_addrs(&self) -> Vec<SocketAddr> {
        self.rdma_listen_addrs.clone()
    }

    pub fn subsystem_nqns(&self) -> Vec<String> {
        self.state
            .subsystems()
            .iter()
            .map(|s| s.nqn.to_string())
            .collect()
    }

    pub fn state(&self) -> &Arc<TargetState> {
        &self.state
    }

    /// Stops accepting, lets in-flight commands complete and their answers reach the hosts,
    /// closes every connection, then flushes every drive.
    pub async fn shutdown(self) {
        self.stop.cancel();
        for l in self.listeners {
            let _ = l.await;
        }
        for sub in self.state.subsystems() {
            for ns in sub.namespaces() {
                if let Err(e) = ns.drive.flush().await {
                    tracing::error!(drive = %ns.drive_id, "flush at shutdown failed: {e}");
                }
            }
        }
    }
}

#[cfg(feature = "rdma")]
fn bind_rdma(addr: SocketAddr, port_id: u16) -> anyhow::Result<Box<dyn Listener>> {
    Ok(Box::new(transport::rdma::RdmaListenerPort::bind(
        addr, port_id,
    )?))
}

#[cfg(not(feature = "rdma"))]
fn bind_rdma(_addr: SocketAddr, _port_id: u16) -> anyhow::Result<Box<dyn Listener>> {
    Err(
        transport::RdmaUnavailable("fabrikd was built without the `rdma` cargo feature".into())
            .into(),
    )
}

fn open_drive(spec: &DriveSpec) -> anyhow::Result<Arc<dyn Drive>> {
    Ok(match spec.backend {
        BackendKind::File => {
            let path = spec
                .path
                .as_ref()
                .context("the file backend needs a path")?;
            Arc::new(backend::file::FileDrive::open(
                path,
                spec.size,
                spec.block_size,
            )?)
        }
        BackendKind::Block => {
            let path = spec
                .path
                .as_ref()
                .context("the block backend needs a path")?;
            Arc::new(backend::block::BlockDrive::open(path)?)
        }
        BackendKind::Ram => Arc::new(backend::ram::RamDrive::new(spec.size, spec.block_size)?),
        BackendKind::Null => Arc::new(backend::null::NullDrive::new(spec.size, spec.block_size)?),
    })
}

/// A 20-character serial number, stable for a box and drive.
fn serial_number(box_name: &str, drive_id: &str) -> String {
    let h = model::stable_id(box_name, b"serial");
    let mut s = format!(
        "FBK{:02X}{:02X}{:02X}{:02X}-{}",
        h[0],
        h[1],
        h[2],
        h[3],
        drive_id.to_ascii_uppercase()
    );
    s.truncate(20);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without RDMA on the machine (or in the build), an RDMA listener beside a TCP one is
    /// skipped with an error message and NVMe/TCP serves; alone, it fails the start.
    #[tokio::test]
    async fn tcp_serves_when_rdma_is_unavailable() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::default_jbof(dir.path().into());
        config.drives = 1;
        config.drive_size = 1 << 20;
        config.backend = BackendKind::Ram;
        config.listen = vec!["127.0.0.1:0".parse().unwrap()];
        config.rdma_listen = vec!["127.0.0.1:0".parse().unwrap()];
        let target = Target::start(config.clone()).await.unwrap();
        assert_eq!(target.listen_addrs().len(), 1);
        let rdma_bound = !target.rdma_listen_addrs().is_empty();
        let tcp = tokio::net::TcpStream::connect(target.listen_addrs()[0]).await;
        assert!(tcp.is_ok());
        target.shutdown().await;
        if !rdma_bound {
            config.listen.clear();
            let err = Target::start(config)
                .await
                .err()
                .expect("RDMA-only start fails");
            assert!(format!("{err:#}").contains("RDMA unavailable"), "{err:#}");
        }
    }
}
