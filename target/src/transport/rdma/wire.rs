//! NVMe/RDMA CM private data (NVMe over Fabrics transport binding for RDMA; Linux
//! `include/linux/nvme-rdma.h`): the host's connect request, our accept, and the reject.
//! All fields little-endian.

use crate::controller::limits;

/// Length of the request and accept structures; a reject is 4 bytes.
pub const CM_REQ_LEN: usize = 32;
pub const CM_REP_LEN: usize = 32;
pub const CM_REJ_LEN: usize = 4;

/// Reject status codes (NVMe/RDMA binding, "RDMA_CM_REJECT status").
pub mod reject {
    pub const INVALID_LENGTH: u16 = 1;
    pub const INVALID_RECFMT: u16 = 2;
    pub const INVALID_QID: u16 = 3;
    pub const INVALID_HSQSIZE: u16 = 4;
    pub const INVALID_HRQSIZE: u16 = 5;
    pub const NO_RESOURCES: u16 = 6;
}

/// The host's RDMA_CM_REQUEST private data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmRequest {
    pub qid: u16,
    /// Host receive queue size: responses the host can take at once.
    pub hrqsize: u16,
    /// Host send queue size, 0's based: commands the host may have outstanding, minus one.
    pub hsqsize: u16,
}

impl CmRequest {
    /// Parses and checks the request. Private data arrives zero-padded by the CM, so only the
    /// structure's own length is demanded. An error is the reject status to answer with.
    pub fn parse(data: &[u8]) -> Result<CmRequest, u16> {
        if data.len() < CM_REQ_LEN {
            return Err(reject::INVALID_LENGTH);
        }
        let le = |o: usize| u16::from_le_bytes([data[o], data[o + 1]]);
        if le(0) != 0 {
            return Err(reject::INVALID_RECFMT);
        }
        let req = CmRequest {
            qid: le(2),
            hrqsize: le(4),
            hsqsize: le(6),
        };
        if u32::from(req.qid) > limits::MAX_IO_QUEUES {
            return Err(reject::INVALID_QID);
        }
        let max_entries = if req.qid == 0 {
            limits::MAX_ADMIN_QUEUE_ENTRIES
        } else {
            limits::MAX_QUEUE_ENTRIES
        };
        // A queue holds at least 2 entries (one always empty), so HSQSIZE 0 is invalid too.
        if req.hsqsize == 0 || req.entries() > max_entries {
            return Err(reject::INVALID_HSQSIZE);
        }
        if req.hrqsize == 0 || u32::from(req.hrqsize) > limits::MAX_QUEUE_ENTRIES {
            return Err(reject::INVALID_HRQSIZE);
        }
        Ok(req)
    }

    /// Entries in the submission queue (HSQSIZE + 1).
    pub fn entries(&self) -> u32 {
        u32::from(self.hsqsize) + 1
    }
}

/// Our RDMA_CM_REPLY private data: the controller receive queue size we provide.
pub fn accept_data(crqsize: u16) -> [u8; CM_REP_LEN] {
    let mut b = [0u8; CM_REP_LEN];
    b[2..4].copy_from_slice(&crqsize.to_le_bytes());
    b
}

/// RDMA_CM_REJECT private data.
pub fn reject_data(status: u16) -> [u8; CM_REJ_LEN] {
    let mut b = [0u8; CM_REJ_LEN];
    b[2..4].copy_from_slice(&status.to_le_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(recfmt: u16, qid: u16, hrqsize: u16, hsqsize: u16, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len];
        for (o, v) in [(0, recfmt), (2, qid), (4, hrqsize), (6, hsqsize)] {
            b[o..o + 2].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    #[test]
    fn linux_admin_and_io_requests_parse_with_padding() {
        // The Linux host: admin HRQSIZE 32, HSQSIZE 31; the CM pads private data to 56 bytes.
        let admin = CmRequest::parse(&req(0, 0, 32, 31, 56)).unwrap();
        assert_eq!((admin.qid, admin.entries()), (0, 32));
        let io = CmRequest::parse(&req(0, 3, 128, 127, 32)).unwrap();
        assert_eq!((io.qid, io.hrqsize, io.entries()), (3, 128, 128));
    }

    #[test]
    fn bad_requests_get_the_spec_reject_status() {
        assert_eq!(
            CmRequest::parse(&req(0, 0, 32, 31, 31)),
            Err(reject::INVALID_LENGTH)
        );
        assert_eq!(
            CmRequest::parse(&req(1, 0, 32, 31, 32)),
            Err(reject::INVALID_RECFMT)
        );
        assert_eq!(
            CmRequest::parse(&req(0, 0, 33, 32, 32)),
            Err(reject::INVALID_HSQSIZE)
        );
        assert_eq!(
            CmRequest::parse(&req(0, 1, 128, 0, 32)),
            Err(reject::INVALID_HSQSIZE)
        );
        assert_eq!(
            CmRequest::parse(&req(0, 1, 2048, 1024, 32)),
            Err(reject::INVALID_HSQSIZE)
        );
        assert_eq!(
            CmRequest::parse(&req(0, 1, 0, 127, 32)),
            Err(reject::INVALID_HRQSIZE)
        );
        assert_eq!(
            CmRequest::parse(&req(0, 1000, 128, 127, 32)),
            Err(reject::INVALID_QID)
        );
    }

    #[test]
    fn accept_and_reject_layouts() {
        assert_eq!(&accept_data(128)[..4], &[0, 0, 128, 0]);
        assert_eq!(reject_data(reject::INVALID_HSQSIZE), [0, 0, 4, 0]);
    }
}
