//! Ports: listeners started at boot and added or removed live through the API.

use std::net::SocketAddr;

use fabrik_api::models as api;
use fabrik_api::{MgmtError, MgmtResult};
use tokio_util::sync::CancellationToken;

use super::{conflict, invalid, not_found, Manager};
use crate::model::{TlsMode, Transport};
use crate::state::PortState;
use crate::transport::tcp::PortTls;
use crate::transport::{self, Listener};

/// A listener: serving, or stopped and draining its connections.
pub(super) struct Listening {
    id: u16,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Listening {
    /// Still serving: not told to stop.
    fn serving(&self) -> bool {
        !self.stop.is_cancelled()
    }
}

impl Manager {
    /// Binds and serves a port of the state (at start); returns the address bound.
    pub async fn listen(&self, p: &PortState) -> anyhow::Result<SocketAddr> {
        let tls = self.port_tls(p.tls).map_err(|e| anyhow::anyhow!("{e}"))?;
        let port = transport::bind(p.transport, p.address, p.id, tls).await?;
        Ok(self.serve(port))
    }

    /// What a port of TLS mode `mode` is served with: the keys fabrikd was started with.
    fn port_tls(&self, mode: TlsMode) -> Result<Option<PortTls>, String> {
        match (mode, &self.tls) {
            (TlsMode::None, _) => Ok(None),
            (mode, Some(server)) => Ok(Some(PortTls {
                mode,
                server: server.clone(),
            })),
            (mode, None) => Err(format!(
                "a port with TLS {} needs PSKs: start fabrikd with --tls-psk FILE",
                mode.name()
            )),
        }
    }

    fn serve(&self, port: Box<dyn Listener>) -> SocketAddr {
        let addr = port.port().addr;
        let id = port.port().id;
        self.target.add_port(port.port().clone());
        let stop = self.stop.child_token();
        let task = port.serve(self.target.clone(), stop.clone());
        self.listeners
            .lock()
            .unwrap()
            .push(Listening { id, stop, task });
        addr
    }

    /// Waits for every listener (and its connections) to finish after the stop token.
    pub async fn join_listeners(&self) {
        let all: Vec<Listening> = std::mem::take(&mut *self.listeners.lock().unwrap());
        for l in all {
            let _ = l.task.await;
        }
    }

    /// Binds first (a taken address is a 409 and changes nothing), then records the port, then
    /// serves it.
    pub(super) fn add_listener(&self, req: api::PortRequest) -> MgmtResult<api::Port> {
        let kind = match &req.transport {
            Some(name) => name
                .parse::<Transport>()
                .map_err(|e| invalid(e.to_string()))?,
            None => Transport::Tcp,
        };
        let ip: std::net::IpAddr = req
            .address
            .parse()
            .map_err(|_| invalid(format!("address {:?} is not an IP address", req.address)))?;
        let addr = SocketAddr::new(ip, req.service_id);
        let tls = match req.tls.as_deref() {
            None => TlsMode::None,
            Some(name) => TlsMode::from_name(name).ok_or_else(|| {
                invalid(format!(
                    "tls {name:?}: expected \"none\", \"allowed\" or \"required\""
                ))
            })?,
        };
        if kind != Transport::Tcp && !tls.is_none() {
            return Err(invalid("TLS is for NVMe/TCP ports, not NVMe/RDMA"));
        }
        let port_tls = self.port_tls(tls).map_err(invalid)?;
        let _serial = self.port_change.lock().unwrap();
        let id = {
            let st = self.state();
            if req.service_id != 0 && st.ports.iter().any(|p| p.address == addr) {
                return Err(conflict(format!("port {addr} exists")));
            }
            self.unused_port_id(&st)?
        };
        let bound = tokio::runtime::Handle::current()
            .block_on(transport::bind(kind, addr, id, port_tls))
            .map_err(|e| {
                let in_use = e
                    .downcast_ref::<std::io::Error>()
                    .is_some_and(|e| e.kind() == std::io::ErrorKind::AddrInUse);
                match in_use {
                    true => conflict(format!("{addr} is in use")),
                    false => invalid(format!("cannot listen on {addr}: {e:#}")),
                }
            })?;
        // The address bound (port 0 picks one): what a restart must listen on again.
        let address = bound.port().addr;
        self.mutate(|st| {
            st.ports.push(PortState {
                id,
                transport: kind,
                address,
                tls,
            });
            Ok(())
        })?;
        self.serve(bound);
        self.find_port(id)
            .ok_or_else(|| MgmtError::Internal(format!("port {id} vanished")))
    }

    /// An ID no port of the state and no listener still alive (draining its connections after a
    /// DELETE) has: reusing a draining port's ID let a later DELETE stop the old listener, not
    /// the new one, which went on serving.
    fn unused_port_id(&self, st: &crate::state::State) -> MgmtResult<u16> {
        let mut listeners = self.listeners.lock().unwrap();
        listeners.retain(|l| l.serving() || !l.task.is_finished());
        let live = listeners.iter().map(|l| l.id);
        let max = st.ports.iter().map(|p| p.id).chain(live).max().unwrap_or(0);
        max.checked_add(1)
            .ok_or_else(|| conflict("no port IDs left: restart fabrikd to number them afresh"))
    }

    /// Stops the listener; its connections finish their commands and close.
    pub(super) fn remove_listener(&self, id: u16) -> MgmtResult<()> {
        let _serial = self.port_change.lock().unwrap();
        self.mutate(|st| {
            if !st.ports.iter().any(|p| p.id == id) {
                return Err(not_found(format!("no port {id}")));
            }
            if st.ports.len() == 1 {
                return Err(conflict(format!("port {id} is the last port")));
            }
            if let Some(c) = st
                .compositions
                .iter()
                .find(|c| c.ports.as_ref().is_some_and(|p| p.contains(&id)))
            {
                return Err(conflict(format!(
                    "composition {} names port {id}: decompose it first",
                    c.id
                )));
            }
            st.ports.retain(|p| p.id != id);
            Ok(())
        })?;
        let mut listeners = self.listeners.lock().unwrap();
        for l in listeners.iter().filter(|l| l.id == id) {
            l.stop.cancel();
        }
        self.target.remove_port(id);
        // The task finishes on its own; `join_listeners` still awaits it at shutdown, and its
        // ID stays taken until then.
        listeners.retain(|l| l.serving() || !l.task.is_finished());
        Ok(())
    }
}
