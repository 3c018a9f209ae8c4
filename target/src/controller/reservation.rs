//! Persistent reservation commands on a controller: Register, Acquire and Release change the
//! namespace's drive's reservation through the management layer (`ReservationStore`: persisted
//! and on the other I/O module before the command completes); Report reads it. The rules are
//! `model::reservation`'s; the I/O path's access check is `Namespace::check_access`.

use std::sync::Weak;

use bytes::Bytes;
use fabrik_proto::nvme::reservation::{KeyPair, ReservationCommand};
use fabrik_proto::Status;

use super::ns_cache::{NamespaceCache, QueueNamespace};
use super::queue::Response;
use super::{Controller, TargetState};
use crate::model::reservation::{Notice, Reservations};

/// A change of a drive's reservations, with whom to tell, or the status that refuses it.
pub type ReservationChange =
    Box<dyn FnOnce(&mut Reservations) -> Result<Vec<Notice>, Status> + Send>;

/// Where reservation changes are made durable: the management layer (the state file, the other
/// module). Held weakly by the target state, which the management layer holds.
pub trait ReservationStore: Send + Sync {
    /// Applies `change` to drive `drive`'s reservations: persisted (and made on the other I/O
    /// module) before it returns, the live namespaces updated. A status from `change` leaves
    /// everything as it was.
    fn change_reservations(
        &self,
        drive: &str,
        change: ReservationChange,
    ) -> Result<Vec<Notice>, Status>;
}

impl TargetState {
    /// Reservation changes go to `store` from now on (without one, they stay in memory).
    pub fn set_reservation_store(&self, store: Weak<dyn ReservationStore>) {
        let _ = self.reservation_store.set(store);
    }
}

impl Controller {
    /// Checks a reservation command before its data moves: the namespace, the data length.
    pub(super) fn admit_reservation(
        &self,
        cmd: &ReservationCommand,
        transfer_len: u32,
        namespaces: &NamespaceCache,
    ) -> Result<QueueNamespace, Status> {
        self.keep_alive();
        let ns = namespaces.get(cmd.nsid(), || self.namespace_for_io(cmd.nsid()))?;
        let len = transfer_len as usize;
        let fits = match cmd {
            ReservationCommand::Report { len: asked, .. } => len == *asked && len <= 1 << 20,
            // The Linux 6.1 host sends a Release 16 bytes.
            ReservationCommand::Release { .. } => len == 8 || len == 16,
            _ => len == cmd.data_to_controller(),
        };
        if !fits {
            return Err(Status::SGL_LENGTH_INVALID);
        }
        Ok(ns)
    }

    pub(super) async fn execute_reservation(
        &self,
        cmd: ReservationCommand,
        ns: QueueNamespace,
        data: Bytes,
    ) -> Response {
        let host = self.host_id;
        if let ReservationCommand::Report { len, eds, .. } = cmd {
            // Hosts are known by 128-bit identifiers: only the extended form can name them.
            if !eds {
                return Response::status(Status::HOST_ID_INCONSISTENT_FORMAT);
            }
            return Response::data(ns.reservations().report().encode(true, len));
        }
        let Some(keys) = KeyPair::decode(&data) else {
            return Response::status(Status::SGL_LENGTH_INVALID);
        };
        let change: ReservationChange = match cmd {
            ReservationCommand::Register {
                action,
                iekey,
                cptpl,
                ..
            } => Box::new(move |r| r.register(&host, action, iekey, cptpl, keys)),
            ReservationCommand::Acquire {
                action,
                iekey,
                rtype,
                ..
            } => Box::new(move |r| r.acquire(&host, action, iekey, rtype, keys)),
            ReservationCommand::Release {
                action,
                iekey,
                rtype,
                ..
            } => Box::new(move |r| r.release(&host, action, iekey, rtype, keys.current)),
            ReservationCommand::Report { .. } => unreachable!("answered above"),
        };
        let store = self.target.reservation_store.get().and_then(Weak::upgrade);
        let result = match store {
            Some(store) => {
                // Off the reactor: the change writes the state file and may ask the other
                // module.
                let drive = ns.drive_id.clone();
                let work =
                    tokio::task::spawn_blocking(move || store.change_reservations(&drive, change));
                match self.target.spawn_control(work).await {
                    Ok(Ok(r)) => r,
                    _ => Err(Status::INTERNAL_ERROR),
                }
            }
            None => {
                let mut r = Reservations::clone(&ns.reservations());
                let out = change(&mut r);
                if out.is_ok() {
                    ns.set_reservations(&r);
                }
                out
            }
        };
        match result {
            Ok(notices) => {
                if !notices.is_empty() {
                    tracing::debug!(
                        nsid = ns.nsid,
                        "reservation notices not sent yet: {notices:?}"
                    );
                }
                Response::ok()
            }
            Err(status) => Response::status(status),
        }
    }
}
