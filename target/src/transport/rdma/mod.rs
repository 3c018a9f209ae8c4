//! NVMe/RDMA (RoCEv2, iWARP, InfiniBand through rdma_cm), controller side. One rdma_cm
//! listener per port; each connect request carries the NVMe/RDMA private data (queue ID and
//! sizes) and becomes one RC queue pair served by its own task (see `queue`). CM events for
//! every queue arrive on the listener's event channel and are routed to their queue's task.
//! A queue's reactor is chosen when its connect request comes, and the queue pairs of one
//! device on one reactor share a receive queue (as nvmet-rdma keeps one per completion
//! vector) and a completion queue (`completions`): both are used on that reactor's core alone.

mod completions;
mod pool;
mod queue;
mod window;
pub mod wire;

use fabrik_rdma as verbs;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fabrik_proto::fabrics::discovery::Tsas;
use fabrik_proto::rdma::{CmAccept, CmReject, CmRequest, RejectStatus};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio_util::sync::CancellationToken;

use super::{Listener, RdmaUnavailable};
use crate::controller::{limits, Queue, TargetState};
use crate::model::{Port, Transport, TransportCaps};
use crate::reactor::Seat;
use completions::DeviceQueues;
use queue::Connection;
use verbs::{CmEvent, EventChannel, QueuePair, Raw, SharedRecv};

/// Checks that the RDMA libraries can be loaded, so a missing rdma-core says so up front.
pub fn available() -> Result<(), String> {
    verbs::check_libraries()
}

/// What NVMe/RDMA offers: keyed SGLs (we RDMA-READ and -WRITE host memory), in-capsule data
/// up to what a receive buffer holds after the SQE (`queue::CAPSULE_SIZE`), and connected
/// queue pairs set up through rdma_cm on any RDMA fabric.
pub const CAPS: TransportCaps = TransportCaps {
    keyed_sgls: true,
    in_capsule_data: limits::IO_INLINE_DATA,
    tsas: Tsas::Rdma {
        qptype: 1, // reliable connected
        prtype: 1, // not specified
        cms: 1,    // rdma_cm
        pkey: 0,
    },
    treq: 0,
};

pub struct RdmaListenerPort {
    channel: EventChannel,
    port: Port,
}

impl RdmaListenerPort {
    /// Binds an rdma_cm listener (needs a tokio runtime: the event channel is driven by it).
    /// No RDMA on this machine (libraries, rdma_cm, or a device for `addr`) is
    /// `RdmaUnavailable`.
    pub fn bind(addr: SocketAddr, port_id: u16) -> anyhow::Result<RdmaListenerPort> {
        available().map_err(RdmaUnavailable)?;
        let mut channel = EventChannel::new().map_err(|e| RdmaUnavailable(e.to_string()))?;
        channel
            .bind_listen(addr, 128)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ENODEV | libc::EADDRNOTAVAIL) => {
                    anyhow::Error::new(RdmaUnavailable(format!("no RDMA device for {addr}: {e}")))
                }
                _ => anyhow::Error::new(e),
            })?;
        let addr = channel.local_addr().unwrap_or(addr);
        Ok(RdmaListenerPort {
            channel,
            port: Port {
                id: port_id,
                transport: Transport::Rdma,
                addr,
                caps: CAPS,
            },
        })
    }
}

type Routes = Arc<Mutex<HashMap<usize, UnboundedSender<u32>>>>;
/// Shared receive and completion queues by device and reactor.
type Devices = HashMap<(usize, usize), DeviceQueues>;

/// Where the listener's new queues go: a reactor near the NIC of its address.
struct Placement {
    target: Arc<TargetState>,
    ip: std::net::IpAddr,
}

/// What a CM event asks of the listener once the event is acked.
enum Outcome {
    None,
    /// A connection was accepted: serve it on its reactor.
    Accepted(Box<Connection>, CmRequest, Seat),
    /// A refused or failed connect request: its resources and id go (only after the ack,
    /// as rdma_destroy_id waits for it).
    Drop(QueuePair),
}

impl Listener for RdmaListenerPort {
    fn port(&self) -> &Port {
        &self.port
    }

    fn serve(
        self: Box<Self>,
        target: Arc<TargetState>,
        stop: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let routes: Routes = Arc::default();
            // Shared receive and completion queues per device and reactor, kept while the
            // listener runs.
            let mut devices: Devices = HashMap::new();
            let mut connections = tokio::task::JoinSet::new();
            let mut stopping = false;
            let placement = Placement {
                target: target.clone(),
                ip: self.port.addr.ip(),
            };
            loop {
                if stopping && connections.is_empty() {
                    break;
                }
                tokio::select! {
                    _ = stop.cancelled(), if !stopping => stopping = true,
                    ev = self.channel.next(|ev| on_event(ev, &routes, &mut devices, stopping, &placement)) => match ev {
                        Ok(Outcome::None) => {}
                        Ok(Outcome::Drop(qp)) => drop_blocking(qp),
                        Ok(Outcome::Accepted(conn, req, seat)) => {
                            let (tx, rx) = unbounded_channel();
                            let id = conn.qp.id();
                            routes.lock().unwrap().insert(id.0 as usize, tx);
                            let (t, port, stop, routes) =
                                (target.clone(), self.port.clone(), stop.clone(), routes.clone());
                            // The queue's reactor polls its completions for its whole life.
                            let serve = serve_queue(*conn, req, rx, t, port, stop, routes);
                            seat.spawn(&mut connections, serve);
                        }
                        Err(e) => {
                            tracing::warn!("rdma_cm event channel: {e}");
                            crate::timer::sleep(Duration::from_millis(50)).await;
                        }
                    },
                    Some(done) = connections.join_next(), if !connections.is_empty() => {
                        if let Err(e) = done {
                            if e.is_panic() {
                                tracing::error!("BUG: an RDMA queue task panicked: {e}");
                            }
                        }
                    }
                }
            }
            // Every queue's id is gone: the shared queues (their pollers end), the listening id
            // and the channel may go too.
            drop(devices);
            drop(self);
        })
    }
}

/// Handles a CM event while it is held (a connect request is accepted or rejected here).
fn on_event(
    ev: &CmEvent,
    routes: &Routes,
    devices: &mut Devices,
    stopping: bool,
    placement: &Placement,
) -> Outcome {
    if ev.kind != verbs::EV_CONNECT_REQUEST {
        match routes.lock().unwrap().get(&(ev.id.0 as usize)) {
            Some(tx) => {
                let _ = tx.send(ev.kind);
            }
            None if ev.kind == verbs::EV_DEVICE_REMOVAL => {
                // The listening id's device went away: its queues end through their own
                // events; this port takes no new connections until fabrikd restarts.
                tracing::error!("RDMA device removed under an NVMe/RDMA listener");
            }
            None => {}
        }
        return Outcome::None;
    }
    let qp = QueuePair::new(ev.id);
    let req = match wire::check_request(&ev.private_data) {
        Ok(r) if !stopping => r,
        Ok(_) => return reject(qp, RejectStatus::NO_RESOURCES),
        Err(status) => {
            tracing::warn!(
                status = status.code(),
                "NVMe/RDMA connect request rejected: bad private data ({status})"
            );
            return reject(qp, status);
        }
    };
    // Its reactor, near the NIC where that is known.
    let seat = placement.target.reactors.seat_near_nic(placement.ip);
    // SAFETY: the connect request's id is valid and bound to its device.
    let key = (unsafe { verbs::device_key(ev.id) }, seat.index());
    let device = match devices.entry(key) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(e) => {
            match SharedRecv::new(ev.id, queue::SRQ_DEPTH, queue::CAPSULE_SIZE) {
                Ok(srq) => {
                    tracing::info!(
                        receives = srq.count(),
                        reactor = seat.index(),
                        "shared receive queue created for an RDMA device"
                    );
                    e.insert(DeviceQueues::new(Arc::new(srq)))
                }
                Err(e) => {
                    tracing::warn!(
                        "NVMe/RDMA connect request failed: no shared receive queue: {e}"
                    );
                    return reject(qp, RejectStatus::NO_RESOURCES);
                }
            }
        }
    };
    match accept(qp, req, ev, device, &seat) {
        Ok(conn) => Outcome::Accepted(Box::new(conn), req, seat),
        Err((qp, e)) => {
            tracing::warn!(qid = req.qid, "NVMe/RDMA connect request failed: {e}");
            reject(qp, RejectStatus::NO_RESOURCES)
        }
    }
}

fn reject(qp: QueuePair, status: RejectStatus) -> Outcome {
    qp.reject(&CmReject::new(status).to_bytes());
    Outcome::Drop(qp)
}

fn accept(
    mut qp: QueuePair,
    req: CmRequest,
    ev: &CmEvent,
    device: &mut DeviceQueues,
    seat: &Seat,
) -> Result<Connection, (QueuePair, std::io::Error)> {
    let sizes = queue::queue_sizes(req.qid, req.entries());
    let place = match device.place(&qp, sizes.send_wr, seat) {
        Ok(place) => place,
        Err(e) => return Err((qp, e)),
    };
    let srq = device.srq.clone();
    let (sizes, limits) = match qp.setup(|_| sizes, Some(srq.clone()), Some(place.cq.clone())) {
        Ok(s) => s,
        Err(e) => return Err((qp, e)),
    };
    if sizes.send_wr > limits.max_qp_wr {
        return Err((qp, std::io::Error::other("device queue pairs too small")));
    }
    let Some(qp_num) = qp.qp_num() else {
        return Err((qp, std::io::Error::other("no queue pair after setup")));
    };
    // Routed before it is accepted: its first completion finds its inbox.
    let completions = place.route(qp_num);
    let window = window::for_device(limits.vendor_id, qp.active_mtu().unwrap_or(256));
    let conn = Connection::new(qp, srq, completions, sizes, req.qid, req.entries(), window);
    // The CM already turned the host's values round to our side: its responder resources
    // arrive as our initiator depth (how many RDMA READs we may have outstanding, 0 would
    // stall them), as nvmet-rdma uses them.
    let responder = ev.responder_resources.min(limits.max_qp_rd_atom);
    let initiator = ev.initiator_depth.min(limits.max_qp_init_rd_atom);
    let accept = CmAccept::new(req.entries() as u16);
    if let Err(e) = conn.qp.accept(&accept.to_bytes(), responder, initiator) {
        return Err((conn.qp, e));
    }
    Ok(conn)
}

/// Tears a queue's verbs objects down off the runtime (rdma_destroy_id may wait for the
/// listener to ack this id's last events).
fn drop_blocking(qp: QueuePair) {
    tokio::task::spawn_blocking(move || drop(qp));
}

async fn serve_queue(
    mut conn: Connection,
    req: CmRequest,
    mut events: UnboundedReceiver<u32>,
    target: Arc<TargetState>,
    port: Port,
    stop: CancellationToken,
    routes: Routes,
) {
    let id: Raw<_> = conn.qp.id();
    // SAFETY: the id is valid while its QueuePair lives.
    let (local, peer) = unsafe { (verbs::local_addr(id), verbs::peer_addr(id)) };
    let unspecified = SocketAddr::from(([0, 0, 0, 0], 0));
    let (local, peer) = (local.unwrap_or(port.addr), peer.unwrap_or(unspecified));
    let queue = Queue::new(target, port, local, peer);
    // The queue's own child token: a busy queue looks at it on every pass, and through the
    // listener's token, shared by every queue, that was a lock contended across cores (as on
    // NVMe/TCP: see `tcp::serve_connection`).
    let stop = stop.child_token();
    tracing::debug!(%peer, qid = req.qid, entries = req.entries(), "NVMe/RDMA queue connected");
    let result = conn.run(&queue, &mut events, &stop).await;
    queue.closed();
    match result {
        Ok(()) => tracing::debug!(%peer, qid = req.qid, "NVMe/RDMA queue closed"),
        Err(e) => tracing::info!(%peer, qid = req.qid, "NVMe/RDMA queue ended: {e}"),
    }
    conn.qp.disconnect();
    conn.drain().await;
    routes.lock().unwrap().remove(&(id.0 as usize));
    let qp = conn.qp;
    let _ = tokio::task::spawn_blocking(move || drop(qp)).await;
}
