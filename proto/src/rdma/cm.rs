//! The rdma_cm private data of NVMe/RDMA connection setup: the host's REQUEST, the controller's
//! ACCEPT or REJECT (NVMEOF-FACTS 2.1, Linux `include/linux/nvme-rdma.h`). All little-endian.
//!
//! Parsing checks structure only (length, RECFMT): which queue IDs and sizes a controller takes
//! is its own policy.

use std::fmt;

use crate::error::{need, DecodeError};
use crate::le::{put_u16, u16_at};

/// The one record format (NVMe/RDMA 1.0).
pub const RECFMT: u16 = 0;
pub const REQUEST_LEN: usize = 32;
pub const ACCEPT_LEN: usize = 32;
pub const REJECT_LEN: usize = 4;

/// Offsets of the fields that follow RECFMT (0..2) in every message.
mod offset {
    pub const QID: usize = 2;
    pub const HRQSIZE: usize = 4;
    pub const HSQSIZE: usize = 6;
    pub const CNTLID: usize = 8;
    pub const CRQSIZE: usize = 2;
    pub const STS: usize = 2;
}

/// The host's RDMA_CM_REQUEST private data: RECFMT 0..2, QID 2..4, HRQSIZE 4..6, HSQSIZE 6..8,
/// CNTLID 8..10, reserved to 32.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmRequest {
    pub recfmt: u16,
    /// 0 for the admin queue.
    pub qid: u16,
    /// Host receive queue size: responses the host can take at once.
    pub hrqsize: u16,
    /// Host send queue size, 0's based: commands the host may have outstanding, minus one.
    pub hsqsize: u16,
    /// The controller the queue is for, as the host knows it (0 when it does not say: older
    /// hosts leave the field reserved).
    pub cntlid: u16,
}

impl CmRequest {
    /// Parses the request. The CM may pad private data (to 56 bytes on InfiniBand and RoCE), so
    /// only the structure's own length is demanded, and the reserved bytes are not read. An
    /// error is the reject status the binding defines for it.
    pub fn parse(data: &[u8]) -> Result<CmRequest, RejectStatus> {
        if data.len() < REQUEST_LEN {
            return Err(RejectStatus::INVALID_LENGTH);
        }
        let recfmt = u16_at(data, 0);
        if recfmt != RECFMT {
            return Err(RejectStatus::INVALID_RECFMT);
        }
        Ok(CmRequest {
            recfmt,
            qid: u16_at(data, offset::QID),
            hrqsize: u16_at(data, offset::HRQSIZE),
            hsqsize: u16_at(data, offset::HSQSIZE),
            cntlid: u16_at(data, offset::CNTLID),
        })
    }

    /// The 32 bytes, reserved ones zero. Any RECFMT is written as given (to test controllers).
    pub fn to_bytes(&self) -> [u8; REQUEST_LEN] {
        let mut b = [0u8; REQUEST_LEN];
        put_u16(&mut b, 0, self.recfmt);
        put_u16(&mut b, offset::QID, self.qid);
        put_u16(&mut b, offset::HRQSIZE, self.hrqsize);
        put_u16(&mut b, offset::HSQSIZE, self.hsqsize);
        put_u16(&mut b, offset::CNTLID, self.cntlid);
        b
    }

    /// Entries in the submission queue (HSQSIZE + 1).
    pub fn entries(&self) -> u32 {
        u32::from(self.hsqsize) + 1
    }
}

/// The controller's RDMA_CM_ACCEPT private data: RECFMT 0..2, CRQSIZE 2..4, reserved to 32.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmAccept {
    pub recfmt: u16,
    /// Controller receive queue size: commands the controller can take at once.
    pub crqsize: u16,
}

impl CmAccept {
    pub fn new(crqsize: u16) -> CmAccept {
        CmAccept {
            recfmt: RECFMT,
            crqsize,
        }
    }

    /// Parses the accept (padding and reserved bytes ignored).
    pub fn parse(data: &[u8]) -> Result<CmAccept, DecodeError> {
        need("NVMe/RDMA accept", data, ACCEPT_LEN)?;
        Ok(CmAccept {
            recfmt: recfmt("NVMe/RDMA accept", data)?,
            crqsize: u16_at(data, offset::CRQSIZE),
        })
    }

    pub fn to_bytes(&self) -> [u8; ACCEPT_LEN] {
        let mut b = [0u8; ACCEPT_LEN];
        put_u16(&mut b, 0, self.recfmt);
        put_u16(&mut b, offset::CRQSIZE, self.crqsize);
        b
    }
}

/// The controller's RDMA_CM_REJECT private data: RECFMT 0..2, STS 2..4.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmReject {
    pub recfmt: u16,
    pub status: RejectStatus,
}

impl CmReject {
    pub fn new(status: RejectStatus) -> CmReject {
        CmReject {
            recfmt: RECFMT,
            status,
        }
    }

    /// Parses the reject (padding ignored). Any status code is kept: hosts report the ones
    /// they do not know by number.
    pub fn parse(data: &[u8]) -> Result<CmReject, DecodeError> {
        need("NVMe/RDMA reject", data, REJECT_LEN)?;
        Ok(CmReject {
            recfmt: recfmt("NVMe/RDMA reject", data)?,
            status: RejectStatus(u16_at(data, offset::STS)),
        })
    }

    pub fn to_bytes(&self) -> [u8; REJECT_LEN] {
        let mut b = [0u8; REJECT_LEN];
        put_u16(&mut b, 0, self.recfmt);
        put_u16(&mut b, offset::STS, self.status.0);
        b
    }
}

fn recfmt(what: &'static str, data: &[u8]) -> Result<u16, DecodeError> {
    match u16_at(data, 0) {
        RECFMT => Ok(RECFMT),
        _ => Err(DecodeError::field(what, 0, "unknown RECFMT")),
    }
}

/// Why a controller refused a connect request (the REJECT's STS). A code outside the binding's
/// table is kept as it came.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RejectStatus(pub u16);

macro_rules! reject_statuses {
    ($($name:ident = ($code:expr, $text:expr);)*) => {
        impl RejectStatus {
            $(pub const $name: RejectStatus = RejectStatus($code);)*

            /// Every status the binding defines.
            pub const ALL: &'static [RejectStatus] = &[$(RejectStatus::$name),*];

            /// The binding's name of the status; None for a code it does not define.
            pub fn name(self) -> Option<&'static str> {
                match self {
                    $(RejectStatus::$name => Some($text),)*
                    _ => None,
                }
            }
        }
    };
}

reject_statuses! {
    INVALID_LENGTH = (1, "invalid private data length");
    INVALID_RECFMT = (2, "invalid RECFMT");
    INVALID_QID = (3, "invalid QID");
    INVALID_HSQSIZE = (4, "invalid HSQSIZE");
    INVALID_HRQSIZE = (5, "invalid HRQSIZE");
    NO_RESOURCES = (6, "no resources");
    INVALID_IRD = (7, "invalid IRD");
    INVALID_ORD = (8, "invalid ORD");
    INVALID_CNTLID = (9, "invalid controller ID");
}

impl RejectStatus {
    pub fn code(self) -> u16 {
        self.0
    }
}

/// The name, or "unknown status N".
impl fmt::Display for RejectStatus {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "unknown status {}", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn any_request() -> impl Strategy<Value = CmRequest> {
        any::<[u16; 4]>().prop_map(|w| CmRequest {
            recfmt: RECFMT,
            qid: w[0],
            hrqsize: w[1],
            hsqsize: w[2],
            cntlid: w[3],
        })
    }

    proptest! {
        #[test]
        fn round_trip(req in any_request(), crqsize: u16, sts: u16) {
            prop_assert_eq!(CmRequest::parse(&req.to_bytes()), Ok(req));
            let accept = CmAccept::new(crqsize);
            prop_assert_eq!(CmAccept::parse(&accept.to_bytes()), Ok(accept));
            let reject = CmReject::new(RejectStatus(sts));
            prop_assert_eq!(CmReject::parse(&reject.to_bytes()), Ok(reject));
        }

        #[test]
        fn parse_never_panics_and_keeps_the_fields(
            bytes in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let recfmt_ok = bytes.len() >= 2 && bytes[..2] == [0, 0];
            match CmRequest::parse(&bytes) {
                Ok(req) => prop_assert_eq!(&req.to_bytes()[..10], &bytes[..10]),
                Err(s) if bytes.len() < REQUEST_LEN => {
                    prop_assert_eq!(s, RejectStatus::INVALID_LENGTH)
                }
                Err(s) => {
                    prop_assert!(!recfmt_ok);
                    prop_assert_eq!(s, RejectStatus::INVALID_RECFMT);
                }
            }
            if let Ok(a) = CmAccept::parse(&bytes) {
                prop_assert_eq!(&a.to_bytes()[..4], &bytes[..4]);
            }
            match CmReject::parse(&bytes) {
                Ok(r) => prop_assert_eq!(&r.to_bytes()[..], &bytes[..4]),
                Err(e) => prop_assert!(bytes.len() < REJECT_LEN || (!recfmt_ok && e.offset() == 0)),
            }
        }
    }

    #[test]
    fn linux_host_requests_parse_with_cm_padding() {
        // Admin queue: HRQSIZE 32, HSQSIZE 31, in 56 bytes of private data.
        let mut b = [0u8; 56];
        b[..8].copy_from_slice(&[0, 0, 0, 0, 32, 0, 31, 0]);
        let admin = CmRequest::parse(&b).unwrap();
        assert_eq!((admin.qid, admin.hrqsize, admin.entries()), (0, 32, 32));
        // An I/O queue of 128 entries of controller 5: reserved bytes are not read.
        let io = CmRequest {
            recfmt: RECFMT,
            qid: 3,
            hrqsize: 128,
            hsqsize: 127,
            cntlid: 5,
        };
        let mut b = io.to_bytes();
        assert_eq!(&b[..10], &[0, 0, 3, 0, 128, 0, 127, 0, 5, 0]);
        assert!(b[10..].iter().all(|&x| x == 0));
        b[31] = 0xff;
        assert_eq!(CmRequest::parse(&b), Ok(io));
    }

    #[test]
    fn structural_errors_are_their_reject_statuses() {
        let good = CmRequest {
            recfmt: RECFMT,
            qid: 0,
            hrqsize: 32,
            hsqsize: 31,
            cntlid: 0,
        };
        assert_eq!(
            CmRequest::parse(&good.to_bytes()[..31]),
            Err(RejectStatus::INVALID_LENGTH)
        );
        let bad = CmRequest { recfmt: 1, ..good };
        assert_eq!(
            CmRequest::parse(&bad.to_bytes()),
            Err(RejectStatus::INVALID_RECFMT)
        );
        // Queue sizes are not judged here.
        let huge = CmRequest {
            hsqsize: u16::MAX,
            ..good
        };
        assert_eq!(CmRequest::parse(&huge.to_bytes()), Ok(huge));
        assert!(CmAccept::parse(&[0; 31]).is_err());
        assert_eq!(CmAccept::parse(&[1; 32]).unwrap_err().offset(), 0);
        assert!(CmReject::parse(&[0, 0, 4]).is_err());
        assert_eq!(CmReject::parse(&[0, 1, 4, 0]).unwrap_err().offset(), 0);
    }

    #[test]
    fn accept_and_reject_layouts() {
        let accept = CmAccept::new(128).to_bytes();
        assert_eq!(&accept[..4], &[0, 0, 128, 0]);
        assert!(accept[4..].iter().all(|&x| x == 0));
        assert_eq!(
            CmReject::new(RejectStatus::INVALID_HSQSIZE).to_bytes(),
            [0, 0, 4, 0]
        );
        // A reject padded by the CM.
        let mut padded = [0u8; 148];
        padded[2] = 6;
        assert_eq!(
            CmReject::parse(&padded).map(|r| r.status),
            Ok(RejectStatus::NO_RESOURCES)
        );
    }

    #[test]
    fn every_status_of_the_binding_is_named() {
        let table: Vec<(u16, String)> = RejectStatus::ALL
            .iter()
            .map(|s| (s.code(), s.to_string()))
            .collect();
        assert_eq!(
            table,
            [
                (1, "invalid private data length"),
                (2, "invalid RECFMT"),
                (3, "invalid QID"),
                (4, "invalid HSQSIZE"),
                (5, "invalid HRQSIZE"),
                (6, "no resources"),
                (7, "invalid IRD"),
                (8, "invalid ORD"),
                (9, "invalid controller ID"),
            ]
            .map(|(c, n)| (c, n.to_string()))
        );
        assert_eq!(RejectStatus(0).name(), None);
        assert_eq!(RejectStatus(0x42).to_string(), "unknown status 66");
    }
}
