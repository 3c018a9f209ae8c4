//! Persistent reservations on the wire: the Reservation Register, Acquire, Release and Report
//! commands (NVM I/O command set), their data, the Reservation Status data a Report returns
//! (normal and extended form), and the Reservation Notification log page (LID 80h).
//!
//! Layouts as the NVMe base specification gives them (checked against what the Linux host
//! sends: `host/pr.c`, and nvme-cli's `resv-*`): all little-endian.

use crate::nvme::sqe::Sqe;
use crate::Status;

/// Opcodes.
pub mod op {
    pub const REGISTER: u8 = 0x0D;
    pub const REPORT: u8 = 0x0E;
    pub const ACQUIRE: u8 = 0x11;
    pub const RELEASE: u8 = 0x15;
}

/// Log page ID of the Reservation Notification log.
pub const NOTIFICATION_LOG: u8 = 0x80;
/// Bytes of the Reservation Notification log page.
pub const NOTIFICATION_LOG_LEN: usize = 64;

/// Identify Namespace RESCAP bits (byte 31).
pub mod rescap {
    /// Persist Through Power Loss.
    pub const PTPL: u8 = 1 << 0;
    /// Types 1 to 6 (bits 1 to 6).
    pub const ALL_TYPES: u8 = 0x7E;
    /// Ignore Existing Key means what NVMe 1.3 says (Register only).
    pub const IEKEY_1_3: u8 = 1 << 7;
}

/// Identify Controller ONCS bit: reservations.
pub const ONCS_RESERVATIONS: u16 = 1 << 5;

/// A reservation type (RTYPE).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum ReservationType {
    WriteExclusive = 1,
    ExclusiveAccess = 2,
    WriteExclusiveRegistrantsOnly = 3,
    ExclusiveAccessRegistrantsOnly = 4,
    WriteExclusiveAllRegistrants = 5,
    ExclusiveAccessAllRegistrants = 6,
}

impl ReservationType {
    pub fn from_code(code: u8) -> Option<ReservationType> {
        use ReservationType::*;
        Some(match code {
            1 => WriteExclusive,
            2 => ExclusiveAccess,
            3 => WriteExclusiveRegistrantsOnly,
            4 => ExclusiveAccessRegistrantsOnly,
            5 => WriteExclusiveAllRegistrants,
            6 => ExclusiveAccessAllRegistrants,
            _ => return None,
        })
    }

    pub fn code(self) -> u8 {
        self as u8
    }

    /// Every registrant holds the reservation (types 5 and 6).
    pub fn all_registrants(self) -> bool {
        matches!(
            self,
            ReservationType::WriteExclusiveAllRegistrants
                | ReservationType::ExclusiveAccessAllRegistrants
        )
    }

    /// Registrants that do not hold it may read and write (types 3 to 6).
    pub fn registrants_have_access(self) -> bool {
        self.code() >= 3
    }

    /// Hosts without access may not read either (exclusive access: types 2, 4, 6).
    pub fn excludes_reads(self) -> bool {
        self.code().is_multiple_of(2)
    }
}

/// Reservation Register action (RREGA).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegisterAction {
    Register,
    Unregister,
    Replace,
}

/// Reservation Acquire action (RACQA).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcquireAction {
    Acquire,
    Preempt,
    PreemptAndAbort,
}

/// Reservation Release action (RRELA).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReleaseAction {
    Release,
    Clear,
}

/// Change Persist Through Power Loss State (CPTPL) of a Register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cptpl {
    NoChange,
    Clear,
    Set,
}

/// A reservation command, from its submission queue entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReservationCommand {
    /// Data: `KeyPair` (CRKEY, NRKEY), 16 bytes.
    Register {
        nsid: u32,
        action: RegisterAction,
        iekey: bool,
        cptpl: Cptpl,
    },
    /// Data: `KeyPair` (CRKEY, PRKEY), 16 bytes. `rtype` None: RTYPE 0 (valid only where the
    /// action does not acquire, which the controller decides).
    Acquire {
        nsid: u32,
        action: AcquireAction,
        iekey: bool,
        rtype: Option<ReservationType>,
    },
    /// Data: CRKEY, 8 bytes (the Linux 6.1 host sends 16).
    Release {
        nsid: u32,
        action: ReleaseAction,
        iekey: bool,
        rtype: Option<ReservationType>,
    },
    /// Returns `len` bytes of Reservation Status data, extended (128-bit host IDs) if `eds`.
    Report { nsid: u32, len: usize, eds: bool },
}

/// CDW10 bits.
const IEKEY: u32 = 1 << 3;

impl ReservationCommand {
    /// Parses a reservation command; `Ok(None)` for another opcode. An action or type the
    /// specification reserves is Invalid Field.
    pub fn parse(sqe: &Sqe) -> Result<Option<ReservationCommand>, Status> {
        let (nsid, cdw10) = (sqe.nsid, sqe.cdw10);
        let iekey = cdw10 & IEKEY != 0;
        let rtype = |cdw10: u32| -> Result<Option<ReservationType>, Status> {
            match (cdw10 >> 8) as u8 {
                0 => Ok(None),
                code => ReservationType::from_code(code)
                    .map(Some)
                    .ok_or(Status::INVALID_FIELD),
            }
        };
        Ok(Some(match sqe.opcode {
            op::REGISTER => ReservationCommand::Register {
                nsid,
                action: match cdw10 & 7 {
                    0 => RegisterAction::Register,
                    1 => RegisterAction::Unregister,
                    2 => RegisterAction::Replace,
                    _ => return Err(Status::INVALID_FIELD),
                },
                iekey,
                cptpl: match cdw10 >> 30 {
                    0 => Cptpl::NoChange,
                    2 => Cptpl::Clear,
                    3 => Cptpl::Set,
                    _ => return Err(Status::INVALID_FIELD),
                },
            },
            op::ACQUIRE => ReservationCommand::Acquire {
                nsid,
                action: match cdw10 & 7 {
                    0 => AcquireAction::Acquire,
                    1 => AcquireAction::Preempt,
                    2 => AcquireAction::PreemptAndAbort,
                    _ => return Err(Status::INVALID_FIELD),
                },
                iekey,
                rtype: rtype(cdw10 & 0xff00)?,
            },
            op::RELEASE => ReservationCommand::Release {
                nsid,
                action: match cdw10 & 7 {
                    0 => ReleaseAction::Release,
                    1 => ReleaseAction::Clear,
                    _ => return Err(Status::INVALID_FIELD),
                },
                iekey,
                rtype: rtype(cdw10 & 0xff00)?,
            },
            op::REPORT => ReservationCommand::Report {
                nsid,
                len: (cdw10 as usize + 1) * 4,
                eds: sqe.cdw11 & 1 != 0,
            },
            _ => return Ok(None),
        }))
    }

    /// The submission queue entry (command ID 0; the transport sets the data pointer).
    pub fn to_sqe(&self) -> Sqe {
        let mut sqe = Sqe::default();
        let (opcode, nsid, cdw10, cdw11) = match *self {
            ReservationCommand::Register {
                nsid,
                action,
                iekey,
                cptpl,
            } => {
                let a = match action {
                    RegisterAction::Register => 0,
                    RegisterAction::Unregister => 1,
                    RegisterAction::Replace => 2,
                };
                let c = match cptpl {
                    Cptpl::NoChange => 0,
                    Cptpl::Clear => 2,
                    Cptpl::Set => 3,
                };
                (op::REGISTER, nsid, a | flag(iekey) | c << 30, 0)
            }
            ReservationCommand::Acquire {
                nsid,
                action,
                iekey,
                rtype,
            } => {
                let a = match action {
                    AcquireAction::Acquire => 0,
                    AcquireAction::Preempt => 1,
                    AcquireAction::PreemptAndAbort => 2,
                };
                (op::ACQUIRE, nsid, a | flag(iekey) | type_bits(rtype), 0)
            }
            ReservationCommand::Release {
                nsid,
                action,
                iekey,
                rtype,
            } => {
                let a = match action {
                    ReleaseAction::Release => 0,
                    ReleaseAction::Clear => 1,
                };
                (op::RELEASE, nsid, a | flag(iekey) | type_bits(rtype), 0)
            }
            ReservationCommand::Report { nsid, len, eds } => (
                op::REPORT,
                nsid,
                (len / 4).saturating_sub(1) as u32,
                eds as u32,
            ),
        };
        sqe.opcode = opcode;
        sqe.nsid = nsid;
        sqe.cdw10 = cdw10;
        sqe.cdw11 = cdw11;
        sqe
    }

    pub fn nsid(&self) -> u32 {
        match *self {
            ReservationCommand::Register { nsid, .. }
            | ReservationCommand::Acquire { nsid, .. }
            | ReservationCommand::Release { nsid, .. }
            | ReservationCommand::Report { nsid, .. } => nsid,
        }
    }

    /// Bytes the host sends with it (the least a controller accepts for a Release: 8).
    pub fn data_to_controller(&self) -> usize {
        match self {
            ReservationCommand::Register { .. } | ReservationCommand::Acquire { .. } => 16,
            ReservationCommand::Release { .. } => 8,
            ReservationCommand::Report { .. } => 0,
        }
    }
}

fn flag(iekey: bool) -> u32 {
    if iekey {
        IEKEY
    } else {
        0
    }
}

fn type_bits(rtype: Option<ReservationType>) -> u32 {
    u32::from(rtype.map_or(0, ReservationType::code)) << 8
}

/// The keys a Register (current, new) or Acquire (current, preempt) carries; a Release carries
/// the first only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct KeyPair {
    pub current: u64,
    pub other: u64,
}

impl KeyPair {
    /// From the command's data: 16 bytes, or 8 (a Release: `other` is 0).
    pub fn decode(data: &[u8]) -> Option<KeyPair> {
        let key = |at: usize| Some(u64::from_le_bytes(data.get(at..at + 8)?.try_into().ok()?));
        Some(KeyPair {
            current: key(0)?,
            other: if data.len() >= 16 { key(8)? } else { 0 },
        })
    }

    pub fn encode(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.current.to_le_bytes());
        b[8..].copy_from_slice(&self.other.to_le_bytes());
        b
    }
}

/// One registrant in the Reservation Status data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegisteredController {
    pub cntlid: u16,
    /// Holds the reservation (RCSTS bit 0).
    pub holds: bool,
    pub hostid: [u8; 16],
    pub key: u64,
}

/// What a Reservation Report returns.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ReservationStatus {
    pub generation: u32,
    pub rtype: Option<ReservationType>,
    /// Persist Through Power Loss State.
    pub ptpls: bool,
    pub registrants: Vec<RegisteredController>,
}

/// Header bytes of the normal form; the extended form's entries start at 64.
const STATUS_HEADER: usize = 24;
const EXTENDED_HEADER: usize = 64;

impl ReservationStatus {
    /// The data, normal (24-byte entries, 64-bit host IDs: the low 8 bytes) or extended
    /// (64-byte entries, 128-bit host IDs), cut to `len` bytes (REGCTL still counts every
    /// registrant, as the host learns from a short read how much to ask for).
    pub fn encode(&self, extended: bool, len: usize) -> Vec<u8> {
        let (header, entry) = if extended {
            (EXTENDED_HEADER, 64)
        } else {
            (STATUS_HEADER, 24)
        };
        let mut b = vec![0u8; header + entry * self.registrants.len()];
        b[0..4].copy_from_slice(&self.generation.to_le_bytes());
        b[4] = self.rtype.map_or(0, ReservationType::code);
        b[5..7].copy_from_slice(&(self.registrants.len() as u16).to_le_bytes());
        b[9] = self.ptpls as u8;
        for (i, r) in self.registrants.iter().enumerate() {
            let e = &mut b[header + i * entry..header + (i + 1) * entry];
            e[0..2].copy_from_slice(&r.cntlid.to_le_bytes());
            e[2] = r.holds as u8;
            if extended {
                e[8..16].copy_from_slice(&r.key.to_le_bytes());
                e[16..32].copy_from_slice(&r.hostid);
            } else {
                e[8..16].copy_from_slice(&r.hostid[..8]);
                e[16..24].copy_from_slice(&r.key.to_le_bytes());
            }
        }
        b.resize(len, 0);
        b
    }

    /// Parses the data (as many entries as it holds, up to REGCTL).
    pub fn decode(b: &[u8], extended: bool) -> Option<ReservationStatus> {
        let (header, entry) = if extended {
            (EXTENDED_HEADER, 64)
        } else {
            (STATUS_HEADER, 24)
        };
        if b.len() < STATUS_HEADER {
            return None;
        }
        let count = u16::from_le_bytes([b[5], b[6]]) as usize;
        let registrants = (0..count)
            .map_while(|i| b.get(header + i * entry..header + (i + 1) * entry))
            .map(|e| {
                let mut hostid = [0u8; 16];
                let key;
                if extended {
                    key = u64::from_le_bytes(e[8..16].try_into().unwrap());
                    hostid.copy_from_slice(&e[16..32]);
                } else {
                    hostid[..8].copy_from_slice(&e[8..16]);
                    key = u64::from_le_bytes(e[16..24].try_into().unwrap());
                }
                RegisteredController {
                    cntlid: u16::from_le_bytes([e[0], e[1]]),
                    holds: e[2] & 1 != 0,
                    hostid,
                    key,
                }
            })
            .collect();
        Some(ReservationStatus {
            generation: u32::from_le_bytes(b[0..4].try_into().unwrap()),
            rtype: ReservationType::from_code(b[4]),
            ptpls: b[9] & 1 != 0,
            registrants,
        })
    }
}

/// Reservation Notification Mask (feature 82h, CDW11 and result): a set bit keeps that kind of
/// notice from the controller.
pub mod mask {
    pub const REGISTRATION_PREEMPTED: u32 = 1 << 1;
    pub const RESERVATION_RELEASED: u32 = 1 << 2;
    pub const RESERVATION_PREEMPTED: u32 = 1 << 3;
    pub const ALL: u32 = REGISTRATION_PREEMPTED | RESERVATION_RELEASED | RESERVATION_PREEMPTED;
}

/// What a Reservation Notification log page reports (RNLPT).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotificationKind {
    RegistrationPreempted = 1,
    ReservationReleased = 2,
    ReservationPreempted = 3,
}

impl NotificationKind {
    /// Its bit in the Reservation Notification Mask.
    pub const fn mask_bit(self) -> u32 {
        1 << self as u32
    }
}

/// One Reservation Notification log page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Notification {
    /// Log page count (0: empty; wraps past u64::MAX to 1).
    pub count: u64,
    pub kind: Option<NotificationKind>,
    /// Pages still queued after this one.
    pub available: u8,
    pub nsid: u32,
}

impl Notification {
    pub fn encode(&self) -> [u8; NOTIFICATION_LOG_LEN] {
        let mut b = [0u8; NOTIFICATION_LOG_LEN];
        b[0..8].copy_from_slice(&self.count.to_le_bytes());
        b[8] = self.kind.map_or(0, |k| k as u8);
        b[9] = self.available;
        b[12..16].copy_from_slice(&self.nsid.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Option<Notification> {
        let b: &[u8; NOTIFICATION_LOG_LEN] = b.get(..NOTIFICATION_LOG_LEN)?.try_into().ok()?;
        Some(Notification {
            count: u64::from_le_bytes(b[0..8].try_into().unwrap()),
            kind: match b[8] {
                1 => Some(NotificationKind::RegistrationPreempted),
                2 => Some(NotificationKind::ReservationReleased),
                3 => Some(NotificationKind::ReservationPreempted),
                _ => None,
            },
            available: b[9],
            nsid: u32::from_le_bytes(b[12..16].try_into().unwrap()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn commands_round_trip_and_reserved_values_are_invalid() {
        let cmds = [
            ReservationCommand::Register {
                nsid: 1,
                action: RegisterAction::Replace,
                iekey: true,
                cptpl: Cptpl::Set,
            },
            ReservationCommand::Acquire {
                nsid: 2,
                action: AcquireAction::PreemptAndAbort,
                iekey: false,
                rtype: Some(ReservationType::ExclusiveAccessAllRegistrants),
            },
            ReservationCommand::Release {
                nsid: 3,
                action: ReleaseAction::Clear,
                iekey: false,
                rtype: None,
            },
            ReservationCommand::Report {
                nsid: 4,
                len: 4096,
                eds: true,
            },
        ];
        for cmd in cmds {
            assert_eq!(
                ReservationCommand::parse(&cmd.to_sqe()),
                Ok(Some(cmd.clone()))
            );
        }
        // The Linux host's register: RREGA 0, CPTPL 11b (cdw10 = 0xC000_0000).
        let mut sqe = Sqe {
            opcode: op::REGISTER,
            nsid: 1,
            cdw10: 0xC000_0000,
            ..Sqe::default()
        };
        assert!(matches!(
            ReservationCommand::parse(&sqe),
            Ok(Some(ReservationCommand::Register {
                cptpl: Cptpl::Set,
                ..
            }))
        ));
        for bad in [3, 1 << 30, 7] {
            sqe.cdw10 = bad;
            assert_eq!(
                ReservationCommand::parse(&sqe),
                Err(Status::INVALID_FIELD),
                "{bad:#x}"
            );
        }
        sqe.opcode = op::ACQUIRE;
        sqe.cdw10 = 7 << 8; // RTYPE 7
        assert_eq!(ReservationCommand::parse(&sqe), Err(Status::INVALID_FIELD));
        sqe.opcode = 0x02;
        assert_eq!(ReservationCommand::parse(&sqe), Ok(None));
    }

    #[test]
    fn status_data_has_the_spec_layout() {
        let status = ReservationStatus {
            generation: 7,
            rtype: Some(ReservationType::WriteExclusive),
            ptpls: true,
            registrants: vec![RegisteredController {
                cntlid: 0xffff,
                holds: true,
                hostid: [0x11; 16],
                key: 0xabcd,
            }],
        };
        let ext = status.encode(true, 128);
        assert_eq!((ext[0], ext[4], ext[5], ext[9]), (7, 1, 1, 1));
        assert_eq!(&ext[64..66], &[0xff, 0xff]);
        assert_eq!(ext[66], 1);
        assert_eq!(u64::from_le_bytes(ext[72..80].try_into().unwrap()), 0xabcd);
        assert_eq!(&ext[80..96], &[0x11; 16]);
        let normal = status.encode(false, 48);
        assert_eq!(
            &normal[32..40],
            &[0x11; 8],
            "HOSTID before RKEY in the normal form"
        );
        assert_eq!(
            u64::from_le_bytes(normal[40..48].try_into().unwrap()),
            0xabcd
        );
        // Cut short, the header still counts every registrant.
        let short = status.encode(true, 24);
        assert_eq!((short.len(), short[5]), (24, 1));
        assert_eq!(ReservationStatus::decode(&ext, true), Some(status));
    }

    proptest! {
        #[test]
        fn status_and_notifications_round_trip(
            generation: u32, code in 0u8..7, ptpls: bool,
            regs in proptest::collection::vec((any::<u16>(), any::<bool>(), any::<[u8; 16]>(), any::<u64>()), 0..8),
            count: u64, kind in 0u8..4, available: u8, nsid: u32,
        ) {
            let status = ReservationStatus {
                generation,
                rtype: ReservationType::from_code(code),
                ptpls,
                registrants: regs.into_iter().map(|(cntlid, holds, hostid, key)| RegisteredController { cntlid, holds, hostid, key }).collect(),
            };
            let len = 64 + 64 * status.registrants.len();
            prop_assert_eq!(ReservationStatus::decode(&status.encode(true, len), true), Some(status));
            let n = Notification {
                count,
                kind: match kind { 1 => Some(NotificationKind::RegistrationPreempted), 2 => Some(NotificationKind::ReservationReleased), 3 => Some(NotificationKind::ReservationPreempted), _ => None },
                available,
                nsid,
            };
            prop_assert_eq!(Notification::decode(&n.encode()), Some(n));
        }

        #[test]
        fn any_entry_parses_or_is_refused_without_panic(opcode in prop::sample::select(vec![op::REGISTER, op::ACQUIRE, op::RELEASE, op::REPORT]), cdw10: u32, cdw11: u32) {
            let sqe = Sqe { opcode, nsid: 1, cdw10, cdw11, ..Sqe::default() };
            if let Ok(Some(cmd)) = ReservationCommand::parse(&sqe) {
                prop_assert_eq!(ReservationCommand::parse(&cmd.to_sqe()), Ok(Some(cmd)));
            }
        }
    }
}
