//! NVMe completion status: Status Code Type, Status Code, and the More / CRD / DNR bits.
//!
//! Stored as the 15-bit value Linux uses (DNR bit 14, More bit 13, CRD 12:11, SCT 10:8, SC 7:0);
//! on the wire (CQE bytes 14..16) it is shifted left by one, bit 0 being the phase tag.

use std::fmt;

/// Status Code Types.
pub mod sct {
    pub const GENERIC: u8 = 0;
    pub const COMMAND_SPECIFIC: u8 = 1;
    pub const MEDIA: u8 = 2;
    pub const PATH: u8 = 3;
    pub const VENDOR: u8 = 7;
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Status(u16);

const DNR: u16 = 1 << 14;
const MORE: u16 = 1 << 13;

macro_rules! statuses {
    ($($name:ident = ($sct:expr, $sc:expr, $dnr:expr, $text:expr);)*) => {
        impl Status {
            $(pub const $name: Status = Status::with(($sct as u16) << 8 | $sc as u16, $dnr);)*

            /// The spec's name of the status code, for logs and error messages. Command-specific
            /// codes 0x80..0x84 mean different things for Fabrics and NVM commands; the Fabrics
            /// meaning is given (see `name_for_io` for the I/O one).
            pub fn name(self) -> &'static str {
                let code = self.0 & 0x7ff;
                $(if code == Status::$name.0 & 0x7ff { return $text; })*
                match self.sct() {
                    sct::GENERIC => "Generic Status (unknown code)",
                    sct::COMMAND_SPECIFIC => "Command Specific Status (unknown code)",
                    sct::MEDIA => "Media and Data Integrity Error (unknown code)",
                    sct::PATH => "Path Related Status (unknown code)",
                    _ => "Vendor Specific Status",
                }
            }
        }
    };
}

statuses! {
    SUCCESS = (sct::GENERIC, 0x00, false, "Successful Completion");
    INVALID_OPCODE = (sct::GENERIC, 0x01, true, "Invalid Command Opcode");
    INVALID_FIELD = (sct::GENERIC, 0x02, true, "Invalid Field in Command");
    CID_CONFLICT = (sct::GENERIC, 0x03, true, "Command ID Conflict");
    DATA_TRANSFER_ERROR = (sct::GENERIC, 0x04, false, "Data Transfer Error");
    POWER_LOSS_ABORT = (sct::GENERIC, 0x05, false, "Commands Aborted due to Power Loss Notification");
    INTERNAL_ERROR = (sct::GENERIC, 0x06, true, "Internal Error");
    ABORT_REQUESTED = (sct::GENERIC, 0x07, false, "Command Abort Requested");
    ABORT_SQ_DELETED = (sct::GENERIC, 0x08, false, "Command Aborted due to SQ Deletion");
    INVALID_NAMESPACE = (sct::GENERIC, 0x0B, true, "Invalid Namespace or Format");
    COMMAND_SEQUENCE_ERROR = (sct::GENERIC, 0x0C, true, "Command Sequence Error");
    INVALID_SGL_LAST_SEGMENT = (sct::GENERIC, 0x0D, true, "Invalid SGL Segment Descriptor");
    INVALID_SGL_COUNT = (sct::GENERIC, 0x0E, true, "Invalid Number of SGL Descriptors");
    SGL_LENGTH_INVALID = (sct::GENERIC, 0x0F, true, "Data SGL Length Invalid");
    METADATA_SGL_LENGTH_INVALID = (sct::GENERIC, 0x10, true, "Metadata SGL Length Invalid");
    SGL_TYPE_INVALID = (sct::GENERIC, 0x11, true, "SGL Descriptor Type Invalid");
    SGL_OFFSET_INVALID = (sct::GENERIC, 0x16, true, "SGL Offset Invalid");
    HOST_ID_INCONSISTENT_FORMAT = (sct::GENERIC, 0x18, true, "Host Identifier Inconsistent Format");
    KEEP_ALIVE_EXPIRED = (sct::GENERIC, 0x19, true, "Keep Alive Timer Expired");
    KEEP_ALIVE_INVALID = (sct::GENERIC, 0x1A, true, "Keep Alive Timeout Invalid");
    TRANSIENT_TRANSPORT_ERROR = (sct::GENERIC, 0x22, false, "Transient Transport Error");
    LBA_OUT_OF_RANGE = (sct::GENERIC, 0x80, true, "LBA Out of Range");
    CAPACITY_EXCEEDED = (sct::GENERIC, 0x81, true, "Capacity Exceeded");
    NAMESPACE_NOT_READY = (sct::GENERIC, 0x82, false, "Namespace Not Ready");
    RESERVATION_CONFLICT = (sct::GENERIC, 0x83, true, "Reservation Conflict");
    INVALID_QUEUE_ID = (sct::COMMAND_SPECIFIC, 0x01, true, "Invalid Queue Identifier");
    ABORT_LIMIT_EXCEEDED = (sct::COMMAND_SPECIFIC, 0x03, false, "Abort Command Limit Exceeded");
    AER_LIMIT_EXCEEDED = (sct::COMMAND_SPECIFIC, 0x05, true, "Asynchronous Event Request Limit Exceeded");
    INVALID_LOG_PAGE = (sct::COMMAND_SPECIFIC, 0x09, true, "Invalid Log Page");
    FEATURE_NOT_SAVEABLE = (sct::COMMAND_SPECIFIC, 0x0D, true, "Feature Identifier Not Saveable");
    FEATURE_NOT_CHANGEABLE = (sct::COMMAND_SPECIFIC, 0x0E, true, "Feature Not Changeable");
    FEATURE_NOT_NS_SPECIFIC = (sct::COMMAND_SPECIFIC, 0x0F, true, "Feature Not Namespace Specific");
    // Discovery Information Management (TP8010). 0x32 may clear once the CDC frees room: no DNR.
    INVALID_DISCOVERY_INFO = (sct::COMMAND_SPECIFIC, 0x2F, true, "Invalid Discovery Information");
    INSUFFICIENT_DISCOVERY_RESOURCES = (sct::COMMAND_SPECIFIC, 0x32, false, "Insufficient Discovery Resources");
    CONNECT_INCOMPATIBLE_FORMAT = (sct::COMMAND_SPECIFIC, 0x80, true, "Connect Incompatible Format");
    CONNECT_CONTROLLER_BUSY = (sct::COMMAND_SPECIFIC, 0x81, true, "Connect Controller Busy");
    CONNECT_INVALID_PARAMETERS = (sct::COMMAND_SPECIFIC, 0x82, true, "Connect Invalid Parameters");
    CONNECT_RESTART_DISCOVERY = (sct::COMMAND_SPECIFIC, 0x83, false, "Connect Restart Discovery");
    CONNECT_INVALID_HOST = (sct::COMMAND_SPECIFIC, 0x84, true, "Connect Invalid Host");
    DISCOVER_RESTART = (sct::COMMAND_SPECIFIC, 0x90, false, "Discover Restart");
    AUTH_REQUIRED = (sct::COMMAND_SPECIFIC, 0x91, true, "Authentication Required");
    WRITE_FAULT = (sct::MEDIA, 0x80, true, "Write Fault");
    UNRECOVERED_READ_ERROR = (sct::MEDIA, 0x81, true, "Unrecovered Read Error");
    ACCESS_DENIED = (sct::MEDIA, 0x86, true, "Access Denied");
    ANA_PERSISTENT_LOSS = (sct::PATH, 0x01, false, "Asymmetric Access Persistent Loss");
    ANA_INACCESSIBLE = (sct::PATH, 0x02, false, "Asymmetric Access Inaccessible");
    ANA_TRANSITION = (sct::PATH, 0x03, false, "Asymmetric Access Transition");
}

impl Status {
    /// The NVM command set's command-specific code 0x82 (same code as Connect Invalid Parameters).
    pub const WRITE_TO_READ_ONLY: Status = Status::with(0x182, true);

    const fn with(code: u16, dnr: bool) -> Status {
        Status(if dnr { code | DNR } else { code })
    }

    /// A status from its type and code, without DNR.
    pub const fn new(sct: u8, sc: u8) -> Status {
        Status(((sct as u16 & 0x7) << 8) | sc as u16)
    }

    /// From the 15-bit value (DNR bit 14 .. SC bit 0).
    pub const fn from_raw(raw: u16) -> Status {
        Status(raw & 0x7fff)
    }

    /// From CQE bytes 14..16 (phase tag in bit 0 dropped).
    pub const fn from_wire(wire: u16) -> Status {
        Status(wire >> 1)
    }

    /// CQE bytes 14..16 with the given phase tag (fabrics hosts ignore it: pass false).
    pub const fn to_wire(self, phase: bool) -> u16 {
        (self.0 << 1) | phase as u16
    }

    pub const fn raw(self) -> u16 {
        self.0
    }
    pub const fn sct(self) -> u8 {
        ((self.0 >> 8) & 0x7) as u8
    }
    pub const fn sc(self) -> u8 {
        self.0 as u8
    }
    pub const fn crd(self) -> u8 {
        ((self.0 >> 11) & 0x3) as u8
    }
    pub const fn is_dnr(self) -> bool {
        self.0 & DNR != 0
    }
    pub const fn is_more(self) -> bool {
        self.0 & MORE != 0
    }
    pub const fn is_success(self) -> bool {
        self.0 & 0x7ff == 0
    }
    /// Same code with Do Not Retry set.
    pub const fn with_dnr(self) -> Status {
        Status(self.0 | DNR)
    }
    /// Same code with Do Not Retry cleared.
    pub const fn without_dnr(self) -> Status {
        Status(self.0 & !DNR)
    }
    /// Same type and code, ignoring DNR/More/CRD.
    pub const fn same_code(self, other: Status) -> bool {
        self.0 & 0x7ff == other.0 & 0x7ff
    }

    /// Name of the status for an NVM I/O command (command-specific codes differ from Fabrics).
    pub fn name_for_io(self) -> &'static str {
        if self.sct() == sct::COMMAND_SPECIFIC {
            match self.sc() {
                0x80 => return "Conflicting Attributes",
                0x81 => return "Invalid Protection Information",
                0x82 => return "Attempted Write to Read Only Range",
                _ => {}
            }
        }
        self.name()
    }
}

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (sct {:#x} sc {:#04x}{})",
            self.name(),
            self.sct(),
            self.sc(),
            if self.is_dnr() { " dnr" } else { "" }
        )
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_values_match_linux() {
        assert_eq!(Status::INVALID_FIELD.to_wire(false), 0x8004);
        assert_eq!(Status::INVALID_OPCODE.to_wire(false), 0x8002);
        assert_eq!(Status::NAMESPACE_NOT_READY.to_wire(false), 0x0104);
        assert_eq!(Status::CONNECT_INVALID_HOST.to_wire(false), 0x8308);
        assert_eq!(Status::LBA_OUT_OF_RANGE.to_wire(false), 0x8100);
        assert_eq!(Status::INVALID_DISCOVERY_INFO.raw(), 0x412f);
        assert_eq!(Status::INVALID_DISCOVERY_INFO.to_wire(false), 0x825e);
        assert_eq!(Status::INSUFFICIENT_DISCOVERY_RESOURCES.raw(), 0x0132);
        assert_eq!(
            Status::from_raw(0x0132).name(),
            "Insufficient Discovery Resources"
        );
        assert_eq!(Status::from_wire(0x8004), Status::INVALID_FIELD);
        assert!(Status::SUCCESS.is_success());
        assert_eq!(Status::INVALID_FIELD.name(), "Invalid Field in Command");
    }

    proptest::proptest! {
        #[test]
        fn wire_round_trip(raw in 0u16..0x8000, phase: bool) {
            let s = Status::from_raw(raw);
            proptest::prop_assert_eq!(Status::from_wire(s.to_wire(phase)), s);
            let _ = s.name();
        }
    }
}
