//! Which NVMe/RDMA connect requests this target takes. The private data's layout is
//! `fabrik_proto::rdma::cm`; the limits on queue IDs and sizes are ours.

use fabrik_proto::rdma::{CmRequest, RejectStatus};

use crate::controller::limits;

/// Parses and checks a connect request's private data. An error is the reject status to
/// answer with.
pub fn check_request(data: &[u8]) -> Result<CmRequest, RejectStatus> {
    let req = CmRequest::parse(data)?;
    if u32::from(req.qid) > limits::MAX_IO_QUEUES {
        return Err(RejectStatus::INVALID_QID);
    }
    let max_entries = limits::max_queue_entries(req.qid);
    // A queue holds at least 2 entries (one always empty), so HSQSIZE 0 is invalid too.
    if req.hsqsize == 0 || req.entries() > max_entries {
        return Err(RejectStatus::INVALID_HSQSIZE);
    }
    if req.hrqsize == 0 || u32::from(req.hrqsize) > limits::MAX_QUEUE_ENTRIES {
        return Err(RejectStatus::INVALID_HRQSIZE);
    }
    Ok(req)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabrik_proto::rdma::cm::RECFMT;

    fn req(recfmt: u16, qid: u16, hrqsize: u16, hsqsize: u16, len: usize) -> Vec<u8> {
        let mut b = CmRequest {
            recfmt,
            qid,
            hrqsize,
            hsqsize,
            cntlid: 0,
        }
        .to_bytes()
        .to_vec();
        b.resize(len, 0);
        b
    }

    #[test]
    fn linux_admin_and_io_requests_are_taken() {
        // The Linux host: admin HRQSIZE 32, HSQSIZE 31; the CM pads private data to 56 bytes.
        let admin = check_request(&req(RECFMT, 0, 32, 31, 56)).unwrap();
        assert_eq!((admin.qid, admin.entries()), (0, 32));
        let io = check_request(&req(RECFMT, 3, 128, 127, 32)).unwrap();
        assert_eq!((io.qid, io.hrqsize, io.entries()), (3, 128, 128));
    }

    #[test]
    fn bad_requests_get_the_spec_reject_status() {
        let cases = [
            (req(0, 0, 32, 31, 31), RejectStatus::INVALID_LENGTH),
            (req(1, 0, 32, 31, 32), RejectStatus::INVALID_RECFMT),
            (req(0, 0, 33, 32, 32), RejectStatus::INVALID_HSQSIZE),
            (req(0, 1, 128, 0, 32), RejectStatus::INVALID_HSQSIZE),
            (req(0, 1, 2048, 1024, 32), RejectStatus::INVALID_HSQSIZE),
            (req(0, 1, 0, 127, 32), RejectStatus::INVALID_HRQSIZE),
            (req(0, 1000, 128, 127, 32), RejectStatus::INVALID_QID),
        ];
        for (data, status) in cases {
            assert_eq!(check_request(&data), Err(status), "{data:?}");
        }
    }
}
