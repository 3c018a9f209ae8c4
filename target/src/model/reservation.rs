//! A namespace's persistent reservation, sans-IO: who is registered with which key, who holds
//! the reservation and of which type, what each command does to that (the rules of the NVMe
//! base specification, with Linux nvmet's and SPDK's readings where it leaves room), and whom
//! a change must be told. Hosts are known by their 128-bit host identifier (Connect HOSTID), so
//! every controller of one host shares its registration, as the specification asks.
//!
//! The state is plain data: the management layer persists it and hands it to the other I/O
//! module like the rest of the shared configuration.

use fabrik_proto::nvme::reservation::{
    AcquireAction, Cptpl, KeyPair, NotificationKind, RegisterAction, RegisteredController,
    ReleaseAction, ReservationStatus, ReservationType,
};
use fabrik_proto::Status;
use serde::{Deserialize, Serialize};

/// A host identifier (Connect HOSTID).
pub type HostId = [u8; 16];

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reservations {
    /// Bumped by every change of the registrants (PRGENERATION).
    pub generation: u32,
    /// In the order they registered.
    pub registrants: Vec<Registrant>,
    pub reservation: Option<Reservation>,
    /// Persist Through Power Loss: always kept (the state is persisted), reported as asked.
    pub ptpl: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Registrant {
    pub host: HostId,
    pub key: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reservation {
    /// RTYPE (1 to 6).
    pub rtype: u8,
    /// The holder; None for the all-registrants types, where every registrant holds it.
    pub holder: Option<HostId>,
}

/// A host to tell (Reservation Notification log page and its event).
pub type Notice = (HostId, NotificationKind);

fn conflict<T>() -> Result<T, Status> {
    Err(Status::RESERVATION_CONFLICT)
}

impl Reservation {
    fn rtype(&self) -> ReservationType {
        ReservationType::from_code(self.rtype).unwrap_or(ReservationType::WriteExclusive)
    }
}

impl Reservations {
    fn key_of(&self, host: &HostId) -> Option<u64> {
        (self.registrants.iter())
            .find(|r| r.host == *host)
            .map(|r| r.key)
    }

    /// Whether `host` holds the reservation.
    pub fn holds(&self, host: &HostId) -> bool {
        match &self.reservation {
            Some(r) if r.rtype().all_registrants() => self.key_of(host).is_some(),
            Some(r) => r.holder == Some(*host),
            None => false,
        }
    }

    /// Whether anything restricts access (the I/O path's quick test).
    pub fn restricts(&self) -> bool {
        self.reservation.is_some()
    }

    /// Whether `host` may run a command that reads (`write` false) or writes the namespace.
    pub fn access(&self, host: &HostId, write: bool) -> Result<(), Status> {
        let Some(r) = &self.reservation else {
            return Ok(());
        };
        let rtype = r.rtype();
        if self.holds(host) || (rtype.registrants_have_access() && self.key_of(host).is_some()) {
            return Ok(());
        }
        if write || rtype.excludes_reads() {
            return conflict();
        }
        Ok(())
    }

    /// The checks every command but Register makes: registered, with that key.
    fn check_key(&self, host: &HostId, key: u64) -> Result<(), Status> {
        match self.key_of(host) {
            Some(k) if k == key => Ok(()),
            _ => conflict(),
        }
    }

    /// Everyone registered but `host`, told `kind`.
    fn tell_others(&self, host: &HostId, kind: NotificationKind) -> Vec<Notice> {
        (self.registrants.iter())
            .filter(|r| r.host != *host)
            .map(|r| (r.host, kind))
            .collect()
    }

    pub fn register(
        &mut self,
        host: &HostId,
        action: RegisterAction,
        iekey: bool,
        cptpl: Cptpl,
        keys: KeyPair,
    ) -> Result<Vec<Notice>, Status> {
        let mut notices = Vec::new();
        match action {
            RegisterAction::Register => match self.key_of(host) {
                // Registering again with the key it has is fine; with another, a conflict.
                Some(k) if k == keys.other => {}
                Some(_) => return conflict(),
                None => {
                    self.registrants.push(Registrant {
                        host: *host,
                        key: keys.other,
                    });
                    self.generation = self.generation.wrapping_add(1);
                }
            },
            RegisterAction::Unregister => {
                let key = self.key_of(host).ok_or(Status::RESERVATION_CONFLICT)?;
                if !iekey && key != keys.current {
                    return conflict();
                }
                let held = self.holds(host);
                self.registrants.retain(|r| r.host != *host);
                self.generation = self.generation.wrapping_add(1);
                if held {
                    let rtype = self.reservation.as_ref().map(|r| r.rtype());
                    match rtype {
                        // The others hold it still, while any is left.
                        Some(t) if t.all_registrants() && !self.registrants.is_empty() => {}
                        Some(t) => {
                            if t.registrants_have_access() {
                                notices =
                                    self.tell_others(host, NotificationKind::ReservationReleased);
                            }
                            self.reservation = None;
                        }
                        None => {}
                    }
                }
            }
            RegisterAction::Replace => {
                let key = self.key_of(host).ok_or(Status::RESERVATION_CONFLICT)?;
                if !iekey && key != keys.current {
                    return conflict();
                }
                if let Some(r) = self.registrants.iter_mut().find(|r| r.host == *host) {
                    r.key = keys.other;
                }
                self.generation = self.generation.wrapping_add(1);
            }
        }
        match cptpl {
            Cptpl::NoChange => {}
            Cptpl::Clear => self.ptpl = false,
            Cptpl::Set => self.ptpl = true,
        }
        Ok(notices)
    }

    pub fn acquire(
        &mut self,
        host: &HostId,
        action: AcquireAction,
        iekey: bool,
        rtype: Option<ReservationType>,
        keys: KeyPair,
    ) -> Result<Vec<Notice>, Status> {
        // IEKEY means something for Register only (NVMe 1.3; nvmet and SPDK refuse it here).
        if iekey {
            return Err(Status::INVALID_FIELD);
        }
        let rtype = rtype.ok_or(Status::INVALID_FIELD)?;
        self.check_key(host, keys.current)?;
        let new = Reservation {
            rtype: rtype.code(),
            holder: (!rtype.all_registrants()).then_some(*host),
        };
        if action == AcquireAction::Acquire {
            return match &self.reservation {
                None => {
                    self.reservation = Some(new);
                    Ok(Vec::new())
                }
                Some(r) if self.holds(host) && r.rtype == rtype.code() => Ok(Vec::new()),
                Some(_) => conflict(),
            };
        }
        // Preempt (and abort: the preempted hosts' commands in flight are let finish before
        // the command completes, on both modules; see `Controller::change_reservations`).
        let preempt_key = keys.other;
        let mut notices = Vec::new();
        let mut remove = |me: &mut Reservations, key: u64| -> bool {
            let before = me.registrants.len();
            for r in me
                .registrants
                .iter()
                .filter(|r| r.key == key && r.host != *host)
            {
                notices.push((r.host, NotificationKind::RegistrationPreempted));
            }
            me.registrants.retain(|r| r.key != key || r.host == *host);
            me.registrants.len() != before
        };
        match self.reservation.clone() {
            None => {
                if !remove(self, preempt_key) {
                    return conflict();
                }
            }
            Some(r) if r.rtype().all_registrants() => {
                if preempt_key == 0 {
                    for o in self.registrants.iter().filter(|o| o.host != *host) {
                        notices.push((o.host, NotificationKind::RegistrationPreempted));
                    }
                    self.registrants.retain(|o| o.host == *host);
                    self.reservation = Some(new);
                } else if !remove(self, preempt_key) {
                    return conflict();
                }
            }
            Some(r) => {
                let holder_key = r.holder.and_then(|h| self.key_of(&h));
                if holder_key == Some(preempt_key) {
                    let released = r.rtype != rtype.code();
                    remove(self, preempt_key);
                    self.reservation = Some(new);
                    if released {
                        for o in self.registrants.iter().filter(|o| o.host != *host) {
                            if !notices.iter().any(|(h, _)| *h == o.host) {
                                notices.push((o.host, NotificationKind::ReservationReleased));
                            }
                        }
                    }
                } else if preempt_key == 0 {
                    return Err(Status::INVALID_FIELD);
                } else if !remove(self, preempt_key) {
                    return conflict();
                }
            }
        }
        self.generation = self.generation.wrapping_add(1);
        Ok(notices)
    }

    pub fn release(
        &mut self,
        host: &HostId,
        action: ReleaseAction,
        iekey: bool,
        rtype: Option<ReservationType>,
        key: u64,
    ) -> Result<Vec<Notice>, Status> {
        if iekey {
            return Err(Status::INVALID_FIELD);
        }
        self.check_key(host, key)?;
        match action {
            ReleaseAction::Release => {
                let Some(r) = self.reservation.clone() else {
                    return Ok(Vec::new());
                };
                if !self.holds(host) {
                    return Ok(Vec::new()); // not the holder: no effect
                }
                if rtype.map(ReservationType::code) != Some(r.rtype) {
                    return Err(Status::INVALID_FIELD);
                }
                self.reservation = None;
                Ok(if r.rtype().registrants_have_access() {
                    self.tell_others(host, NotificationKind::ReservationReleased)
                } else {
                    Vec::new()
                })
            }
            ReleaseAction::Clear => {
                let notices = self.tell_others(host, NotificationKind::ReservationPreempted);
                self.registrants.clear();
                self.reservation = None;
                self.generation = self.generation.wrapping_add(1);
                Ok(notices)
            }
        }
    }

    /// The Reservation Status data (controller IDs are dynamic: 0xFFFF, as nvmet reports).
    pub fn report(&self) -> ReservationStatus {
        ReservationStatus {
            generation: self.generation,
            rtype: self.reservation.as_ref().map(|r| r.rtype()),
            ptpls: self.ptpl,
            registrants: (self.registrants.iter())
                .map(|r| RegisteredController {
                    cntlid: 0xffff,
                    holds: self.holds(&r.host),
                    hostid: r.host,
                    key: r.key,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ReservationType::*;

    const A: HostId = [0xa; 16];
    const B: HostId = [0xb; 16];
    const C: HostId = [0xc; 16];

    fn keys(current: u64, other: u64) -> KeyPair {
        KeyPair { current, other }
    }

    fn registered(hosts: &[(HostId, u64)]) -> Reservations {
        let mut r = Reservations::default();
        for (h, k) in hosts {
            r.register(
                h,
                RegisterAction::Register,
                false,
                Cptpl::NoChange,
                keys(0, *k),
            )
            .unwrap();
        }
        r
    }

    fn acquire(
        r: &mut Reservations,
        h: &HostId,
        key: u64,
        t: ReservationType,
    ) -> Result<Vec<Notice>, Status> {
        r.acquire(h, AcquireAction::Acquire, false, Some(t), keys(key, 0))
    }

    #[test]
    fn registration_rules() {
        let mut r = registered(&[(A, 1)]);
        assert_eq!(r.generation, 1);
        let reg =
            |r: &mut Reservations, a, iekey, k: KeyPair| r.register(&A, a, iekey, Cptpl::Set, k);
        assert!(
            reg(&mut r, RegisterAction::Register, false, keys(0, 1)).is_ok(),
            "again, same key"
        );
        assert_eq!(
            reg(&mut r, RegisterAction::Register, false, keys(0, 2)),
            conflict()
        );
        assert_eq!(
            reg(&mut r, RegisterAction::Replace, false, keys(9, 2)),
            conflict(),
            "wrong key"
        );
        assert!(reg(&mut r, RegisterAction::Replace, false, keys(1, 2)).is_ok());
        assert!(
            reg(&mut r, RegisterAction::Replace, true, keys(9, 3)).is_ok(),
            "IEKEY"
        );
        assert_eq!(r.key_of(&A), Some(3));
        assert!(r.ptpl, "CPTPL set");
        assert_eq!(
            reg(&mut r, RegisterAction::Unregister, false, keys(1, 0)),
            conflict()
        );
        assert!(reg(&mut r, RegisterAction::Unregister, false, keys(3, 0)).is_ok());
        assert!(r.registrants.is_empty());
        assert_eq!(r.generation, 4);
        assert_eq!(
            reg(&mut r, RegisterAction::Unregister, true, keys(0, 0)),
            conflict(),
            "not registered"
        );
    }

    #[test]
    fn who_may_read_and_write_under_each_type() {
        // (type, registrant not holding: read, write; non-registrant: read, write)
        let table = [
            (WriteExclusive, true, false, true, false),
            (ExclusiveAccess, false, false, false, false),
            (WriteExclusiveRegistrantsOnly, true, true, true, false),
            (ExclusiveAccessRegistrantsOnly, true, true, false, false),
            (WriteExclusiveAllRegistrants, true, true, true, false),
            (ExclusiveAccessAllRegistrants, true, true, false, false),
        ];
        for (t, rr, rw, nr, nw) in table {
            let mut r = registered(&[(A, 1), (B, 2)]);
            acquire(&mut r, &A, 1, t).unwrap();
            assert!(r.access(&A, true).is_ok(), "{t:?}: the holder");
            assert_eq!(r.access(&B, false).is_ok(), rr, "{t:?}: registrant reads");
            assert_eq!(r.access(&B, true).is_ok(), rw, "{t:?}: registrant writes");
            assert_eq!(r.access(&C, false).is_ok(), nr, "{t:?}: others read");
            assert_eq!(r.access(&C, true).is_ok(), nw, "{t:?}: others write");
            assert_eq!(
                r.access(&C, true).unwrap_err(),
                Status::RESERVATION_CONFLICT
            );
        }
        assert!(
            Reservations::default().access(&C, true).is_ok(),
            "no reservation"
        );
    }

    #[test]
    fn acquire_and_release() {
        let mut r = registered(&[(A, 1), (B, 2)]);
        assert_eq!(
            acquire(&mut r, &A, 9, WriteExclusive),
            conflict(),
            "wrong key"
        );
        assert_eq!(
            acquire(&mut r, &C, 0, WriteExclusive),
            conflict(),
            "not registered"
        );
        assert_eq!(
            r.acquire(
                &A,
                AcquireAction::Acquire,
                true,
                Some(WriteExclusive),
                keys(1, 0)
            ),
            Err(Status::INVALID_FIELD),
            "IEKEY"
        );
        acquire(&mut r, &A, 1, WriteExclusiveRegistrantsOnly).unwrap();
        assert!(
            acquire(&mut r, &A, 1, WriteExclusiveRegistrantsOnly).is_ok(),
            "again"
        );
        assert_eq!(
            acquire(&mut r, &A, 1, WriteExclusive),
            conflict(),
            "another type"
        );
        assert_eq!(
            acquire(&mut r, &B, 2, WriteExclusiveRegistrantsOnly),
            conflict(),
            "held"
        );
        // Release by a non-holder: no effect; with the wrong type: Invalid Field.
        let rel = |r: &mut Reservations, h: &HostId, k, t| {
            r.release(h, ReleaseAction::Release, false, Some(t), k)
        };
        assert_eq!(
            rel(&mut r, &B, 2, WriteExclusiveRegistrantsOnly),
            Ok(vec![])
        );
        assert!(r.holds(&A));
        assert_eq!(
            rel(&mut r, &A, 1, WriteExclusive),
            Err(Status::INVALID_FIELD)
        );
        assert_eq!(
            rel(&mut r, &A, 1, WriteExclusiveRegistrantsOnly),
            Ok(vec![(B, NotificationKind::ReservationReleased)])
        );
        assert!(!r.restricts());
        // Clear: everything goes, the others are told.
        acquire(&mut r, &B, 2, ExclusiveAccess).unwrap();
        assert_eq!(
            r.release(&A, ReleaseAction::Clear, false, None, 1),
            Ok(vec![(B, NotificationKind::ReservationPreempted)])
        );
        assert!(r.registrants.is_empty() && !r.restricts());
    }

    #[test]
    fn preempt() {
        // The holder's key: the issuer takes the reservation, the holder is unregistered.
        let mut r = registered(&[(A, 1), (B, 2), (C, 3)]);
        acquire(&mut r, &A, 1, WriteExclusive).unwrap();
        let gen = r.generation;
        let n = r
            .acquire(
                &B,
                AcquireAction::Preempt,
                false,
                Some(ExclusiveAccess),
                keys(2, 1),
            )
            .unwrap();
        assert!(
            n.contains(&(A, NotificationKind::RegistrationPreempted)),
            "{n:?}"
        );
        assert!(
            n.contains(&(C, NotificationKind::ReservationReleased)),
            "type changed: {n:?}"
        );
        assert!(r.holds(&B) && r.key_of(&A).is_none());
        assert_eq!(r.generation, gen + 1);
        // Another registrant's key: it goes, the reservation stays.
        r.acquire(
            &B,
            AcquireAction::PreemptAndAbort,
            false,
            Some(ExclusiveAccess),
            keys(2, 3),
        )
        .unwrap();
        assert!(r.key_of(&C).is_none() && r.holds(&B));
        assert_eq!(
            r.acquire(
                &B,
                AcquireAction::Preempt,
                false,
                Some(ExclusiveAccess),
                keys(2, 0)
            ),
            Err(Status::INVALID_FIELD),
            "key 0 of a holder-type reservation"
        );
        assert_eq!(
            r.acquire(
                &B,
                AcquireAction::Preempt,
                false,
                Some(ExclusiveAccess),
                keys(2, 77)
            ),
            conflict(),
            "nobody has that key"
        );
        // All registrants: key 0 makes the issuer the only one.
        let mut r = registered(&[(A, 1), (B, 2), (C, 3)]);
        acquire(&mut r, &A, 1, WriteExclusiveAllRegistrants).unwrap();
        assert!(r.holds(&B), "every registrant holds it");
        r.acquire(
            &C,
            AcquireAction::Preempt,
            false,
            Some(WriteExclusive),
            keys(3, 0),
        )
        .unwrap();
        assert_eq!(r.registrants.len(), 1);
        assert!(r.holds(&C) && r.access(&A, true).is_err());
    }

    #[test]
    fn a_holder_leaving_releases_except_all_registrants() {
        let mut r = registered(&[(A, 1), (B, 2)]);
        acquire(&mut r, &A, 1, ExclusiveAccessRegistrantsOnly).unwrap();
        let n = r
            .register(
                &A,
                RegisterAction::Unregister,
                false,
                Cptpl::NoChange,
                keys(1, 0),
            )
            .unwrap();
        assert_eq!(n, [(B, NotificationKind::ReservationReleased)]);
        assert!(!r.restricts());
        let mut r = registered(&[(A, 1), (B, 2)]);
        acquire(&mut r, &A, 1, ExclusiveAccessAllRegistrants).unwrap();
        r.register(
            &A,
            RegisterAction::Unregister,
            false,
            Cptpl::NoChange,
            keys(1, 0),
        )
        .unwrap();
        assert!(r.holds(&B), "B holds it still");
        r.register(
            &B,
            RegisterAction::Unregister,
            false,
            Cptpl::NoChange,
            keys(2, 0),
        )
        .unwrap();
        assert!(!r.restricts(), "the last one left");
    }

    #[test]
    fn the_report_lists_registrants_and_holders() {
        let mut r = registered(&[(A, 1), (B, 2)]);
        acquire(&mut r, &B, 2, WriteExclusive).unwrap();
        let s = r.report();
        assert_eq!((s.generation, s.rtype), (2, Some(WriteExclusive)));
        let holds: Vec<bool> = s.registrants.iter().map(|e| e.holds).collect();
        assert_eq!(holds, [false, true]);
        assert_eq!(s.registrants[1].hostid, B);
    }
}
