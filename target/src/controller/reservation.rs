//! Persistent reservation commands on a controller: Register, Acquire and Release change the
//! namespace's drive's reservation through the management layer (`ReservationStore`: persisted
//! and on the other I/O module before the command completes); Report reads it. The rules are
//! `model::reservation`'s; the I/O path's access check is `Namespace::check_access`.
//!
//! A change tells the hosts it affects (preempted, released): each of their controllers that
//! reaches the drive queues a Reservation Notification log page and raises the event, unless
//! its Reservation Notification Mask (feature 82h) keeps that kind from it. The other module
//! tells its own controllers when it takes the change (`TargetState::tell_reservation_notices`).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use fabrik_proto::nvme::log::aen;
use fabrik_proto::nvme::reservation::{
    self, mask, AcquireAction, KeyPair, Notification, NotificationKind, ReservationCommand,
};
use fabrik_proto::nvme::NSID_BROADCAST;
use fabrik_proto::Status;

use super::ns_cache::{NamespaceCache, QueueNamespace};
use super::queue::Response;
use super::{Controller, TargetState};
use crate::model::reservation::{HostId, Notice, Reservations};
use crate::model::Namespace;

/// Most notification pages a controller keeps unread. Past that a notice is dropped, but the
/// page count still moves, so the host sees the gap (as the specification has it).
const NOTICE_LOG_MAX: usize = 64;

/// A controller's reservation notices.
#[derive(Default)]
pub(super) struct NoticeLog {
    /// Pages not read yet, oldest first.
    pages: VecDeque<Notification>,
    /// The count of the last page made (0: none yet; wraps past u64::MAX to 1).
    count: u64,
    /// Reservation Notification Mask per namespace; under NSID_BROADCAST the mask set for
    /// all of them, for those without their own.
    masks: HashMap<u32, u32>,
}

impl NoticeLog {
    fn mask(&self, nsid: u32) -> u32 {
        let own = self.masks.get(&nsid);
        own.or(self.masks.get(&NSID_BROADCAST))
            .copied()
            .unwrap_or(0)
    }

    /// Queues a page unless masked; whether one was made.
    fn push(&mut self, nsid: u32, kind: NotificationKind) -> bool {
        if self.mask(nsid) & kind.mask_bit() != 0 {
            return false;
        }
        self.count = self.count.checked_add(1).unwrap_or(1);
        if self.pages.len() < NOTICE_LOG_MAX {
            self.pages.push_back(Notification {
                count: self.count,
                kind: Some(kind),
                available: 0,
                nsid,
            });
        }
        true
    }

    /// The next page, taken (an empty one, count 0, when none is queued).
    fn take(&mut self) -> Notification {
        match self.pages.pop_front() {
            Some(page) => Notification {
                available: self.pages.len().min(u8::MAX as usize) as u8,
                ..page
            },
            None => Notification::default(),
        }
    }
}

/// A change of a drive's reservations, with whom to tell, or the status that refuses it.
pub type ReservationChange =
    Box<dyn FnOnce(&mut Reservations) -> Result<Vec<Notice>, Status> + Send>;

/// Where reservation changes are made durable: the management layer (the state file, the other
/// module). Held weakly by the target state, which the management layer holds.
pub trait ReservationStore: Send + Sync {
    /// Applies `change` to drive `drive`'s reservations: persisted (and made on the other I/O
    /// module) before it returns, the live namespaces updated. A status from `change` leaves
    /// everything as it was. `abort` (Preempt and Abort): the other module lets the preempted
    /// hosts' commands in flight there finish before it acknowledges.
    fn change_reservations(
        &self,
        drive: &str,
        change: ReservationChange,
        abort: bool,
    ) -> Result<Vec<Notice>, Status>;
}

/// How long Preempt and Abort waits for the preempted hosts' commands in flight (a command
/// stuck longer at its drive is the drive's failure, not the host's; the acquire then completes
/// and says so in the log).
pub const ABORT_DRAIN: Duration = Duration::from_secs(30);

impl TargetState {
    /// Reservation changes go to `store` from now on (without one, they stay in memory).
    pub fn set_reservation_store(&self, store: Weak<dyn ReservationStore>) {
        let _ = self.reservation_store.set(store);
    }

    /// I/O commands in flight from `hosts` on namespaces of drive `drive`: their controllers'
    /// (a controller's count covers all its namespaces: a host preempted on one drive waits for
    /// its commands on the others too, which only makes the wait longer).
    fn hosts_in_flight(&self, drive: &str, hosts: &[HostId]) -> u64 {
        let mut total = 0;
        for sub in self.subsystems() {
            if !sub.namespaces().iter().any(|ns| ns.drive_id == drive) {
                continue;
            }
            for c in sub.controllers() {
                if hosts.contains(&c.host_id) {
                    total += c.io_in_flight();
                }
            }
        }
        total
    }

    /// Preempt and Abort: waits until the preempted `hosts` have no command in flight on drive
    /// `drive` (each one admitted before the preempt finishes; later ones are refused by the
    /// reservation), at most `ABORT_DRAIN`. Whether they drained. Blocking (it polls): run off
    /// the reactors, as the management layer's calls are.
    pub fn drain_hosts(&self, drive: &str, hosts: &[HostId]) -> bool {
        let start = std::time::Instant::now();
        while self.hosts_in_flight(drive, hosts) > 0 {
            if start.elapsed() >= ABORT_DRAIN {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }

    /// Tells the hosts in `notices` of a change of drive `drive`'s reservation: every
    /// controller of theirs, for each namespace of that drive its subsystem has.
    pub fn tell_reservation_notices(&self, drive: &str, notices: &[Notice]) {
        if notices.is_empty() {
            return;
        }
        for sub in self.subsystems() {
            let nsids: Vec<u32> = (sub.namespaces().iter())
                .filter(|ns| ns.drive_id == drive)
                .map(|ns| ns.nsid)
                .collect();
            if nsids.is_empty() {
                continue;
            }
            for c in sub.controllers() {
                for (_, kind) in notices.iter().filter(|(host, _)| *host == c.host_id) {
                    for &nsid in &nsids {
                        c.reservation_notice(nsid, *kind);
                    }
                }
            }
        }
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
        let abort = matches!(
            cmd,
            ReservationCommand::Acquire {
                action: AcquireAction::PreemptAndAbort,
                ..
            }
        );
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
        match self.change_reservations(&ns, change, abort).await {
            Ok(()) => Response::ok(),
            Err(status) => Response::status(status),
        }
    }

    /// Makes a change of `ns`'s drive's reservation (through the store where there is one)
    /// and tells the hosts it affects. `abort` (Preempt and Abort): the change completes once
    /// the preempted hosts' commands in flight have finished, here and on the other module, so
    /// that none of their writes lands after it (the fencing a cluster relies on).
    async fn change_reservations(
        &self,
        ns: &Arc<Namespace>,
        change: ReservationChange,
        abort: bool,
    ) -> Result<(), Status> {
        let store = self.target.reservation_store.get().and_then(Weak::upgrade);
        let notices = match store {
            Some(store) => {
                // Off the reactor: the change writes the state file and may ask the other
                // module.
                let drive = ns.drive_id.clone();
                let work = tokio::task::spawn_blocking(move || {
                    store.change_reservations(&drive, change, abort)
                });
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
        }?;
        self.target.tell_reservation_notices(&ns.drive_id, &notices);
        if abort {
            let preempted: Vec<HostId> = (notices.iter())
                .filter(|(_, kind)| *kind == NotificationKind::RegistrationPreempted)
                .map(|(host, _)| *host)
                .collect();
            let (target, drive) = (self.target.clone(), ns.drive_id.clone());
            let work = tokio::task::spawn_blocking(move || target.drain_hosts(&drive, &preempted));
            if !matches!(self.target.spawn_control(work).await, Ok(Ok(true))) {
                tracing::warn!(drive = %ns.drive_id, "Preempt and Abort: the preempted hosts' commands did not finish within {ABORT_DRAIN:?}; completing it anyway");
            }
        }
        Ok(())
    }

    /// Queues a notification page for namespace `nsid` and raises the event (not governed by
    /// Asynchronous Event Configuration), unless the mask keeps `kind` from this controller.
    fn reservation_notice(&self, nsid: u32, kind: NotificationKind) {
        let made = self.state.lock().unwrap().reservation_log.push(nsid, kind);
        if made {
            self.queue_event(aen::result(
                aen::TYPE_IO_COMMAND_SET,
                aen::IO_RESERVATION_LOG_AVAILABLE,
                reservation::NOTIFICATION_LOG,
            ));
        }
    }

    /// Get Log Page 80h: each read takes one page.
    pub(super) fn take_reservation_notice(&self) -> Notification {
        self.state.lock().unwrap().reservation_log.take()
    }

    /// An active namespace of this controller's subsystem, for the per-namespace features.
    fn feature_namespace(&self, nsid: u32) -> Result<Arc<Namespace>, Status> {
        let sub = self.subsystem().ok_or(Status::INVALID_FIELD)?;
        sub.namespace(nsid).ok_or(Status::INVALID_NAMESPACE)
    }

    /// Get Features 82h.
    pub(super) fn reservation_mask(&self, nsid: u32, default: bool) -> Response {
        if let Err(status) = self.feature_namespace(nsid) {
            return Response::status(status);
        }
        let st = self.state.lock().unwrap();
        Response::result(if default {
            0
        } else {
            st.reservation_log.mask(nsid) as u64
        })
    }

    /// Set Features 82h: one namespace, or all of them (broadcast).
    pub(super) fn set_reservation_mask(&self, nsid: u32, cdw11: u32) -> Response {
        if cdw11 & !mask::ALL != 0 {
            return Response::status(Status::INVALID_FIELD);
        }
        if nsid != NSID_BROADCAST {
            if let Err(status) = self.feature_namespace(nsid) {
                return Response::status(status);
            }
        }
        let mut st = self.state.lock().unwrap();
        let masks = &mut st.reservation_log.masks;
        if nsid == NSID_BROADCAST {
            masks.clear();
        }
        masks.insert(nsid, cdw11);
        Response::ok()
    }

    /// Get Features 83h: PTPL of the namespace's reservation.
    pub(super) fn reservation_persistence(&self, nsid: u32, default: bool) -> Response {
        match self.feature_namespace(nsid) {
            Ok(ns) => Response::result((!default && ns.reservations().ptpl) as u64),
            Err(status) => Response::status(status),
        }
    }

    /// Set Features 83h: PTPL, a change of the reservation like Register's CPTPL.
    pub(super) async fn set_reservation_persistence(&self, nsid: u32, cdw11: u32) -> Response {
        if cdw11 & !1 != 0 {
            return Response::status(Status::INVALID_FIELD);
        }
        let ns = match self.feature_namespace(nsid) {
            Ok(ns) => ns,
            Err(status) => return Response::status(status),
        };
        let ptpl = cdw11 & 1 != 0;
        let change: ReservationChange = Box::new(move |r| {
            r.ptpl = ptpl;
            Ok(Vec::new())
        });
        match self.change_reservations(&ns, change, false).await {
            Ok(()) => Response::ok(),
            Err(status) => Response::status(status),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notice_pages_are_taken_in_order_and_say_how_many_follow() {
        let mut log = NoticeLog::default();
        assert_eq!(log.take(), Notification::default(), "empty: count 0");
        assert!(log.push(1, NotificationKind::RegistrationPreempted));
        assert!(log.push(2, NotificationKind::ReservationReleased));
        let first = log.take();
        assert_eq!(
            (first.count, first.kind, first.nsid, first.available),
            (1, Some(NotificationKind::RegistrationPreempted), 1, 1)
        );
        let second = log.take();
        assert_eq!((second.count, second.nsid, second.available), (2, 2, 0));
        assert_eq!(log.take().count, 0);
    }

    #[test]
    fn a_full_log_drops_notices_but_its_count_shows_the_gap() {
        let mut log = NoticeLog::default();
        for _ in 0..NOTICE_LOG_MAX + 3 {
            log.push(1, NotificationKind::ReservationPreempted);
        }
        let first = log.take();
        assert_eq!(
            (first.count, first.available as usize),
            (1, NOTICE_LOG_MAX - 1)
        );
        for _ in 1..NOTICE_LOG_MAX {
            log.take();
        }
        assert!(log.push(1, NotificationKind::ReservationPreempted));
        assert_eq!(log.take().count, NOTICE_LOG_MAX as u64 + 4, "3 lost");
    }

    #[test]
    fn the_count_wraps_past_zero_and_masks_keep_kinds_out() {
        let mut log = NoticeLog {
            count: u64::MAX,
            ..NoticeLog::default()
        };
        log.push(1, NotificationKind::ReservationPreempted);
        assert_eq!(log.take().count, 1, "0 means empty: skipped");
        log.masks.insert(NSID_BROADCAST, mask::RESERVATION_RELEASED);
        log.masks.insert(2, mask::REGISTRATION_PREEMPTED);
        assert!(!log.push(1, NotificationKind::ReservationReleased), "all");
        assert!(
            log.push(2, NotificationKind::ReservationReleased),
            "own mask"
        );
        assert!(!log.push(2, NotificationKind::RegistrationPreempted));
        assert_eq!(log.take().count, 2, "masked notices make no page");
    }
}
