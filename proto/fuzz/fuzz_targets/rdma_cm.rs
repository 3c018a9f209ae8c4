//! NVMe/RDMA CM private data: every input is read as a request, an accept and a reject. What
//! parses must keep its fields through an encode and parse again; what does not must fail for
//! the structural reason (length, RECFMT).

#![no_main]

use fabrik_proto::rdma::cm::{ACCEPT_LEN, RECFMT, REJECT_LEN, REQUEST_LEN};
use fabrik_proto::rdma::{CmAccept, CmReject, CmRequest, RejectStatus};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let recfmt_ok = data.len() >= 2 && data[..2] == RECFMT.to_le_bytes();
    match CmRequest::parse(data) {
        Ok(req) => {
            let bytes = req.to_bytes();
            // RECFMT, QID, HRQSIZE, HSQSIZE, CNTLID verbatim; reserved bytes written zero.
            assert_eq!(bytes[..10], data[..10]);
            assert!(bytes[10..].iter().all(|&b| b == 0));
            assert_eq!(CmRequest::parse(&bytes), Ok(req));
        }
        Err(status) if data.len() < REQUEST_LEN => {
            assert_eq!(status, RejectStatus::INVALID_LENGTH)
        }
        Err(status) => {
            assert!(!recfmt_ok);
            assert_eq!(status, RejectStatus::INVALID_RECFMT);
        }
    }
    match CmAccept::parse(data) {
        Ok(accept) => {
            let bytes = accept.to_bytes();
            assert_eq!(bytes[..4], data[..4]);
            assert_eq!(CmAccept::parse(&bytes), Ok(accept));
        }
        Err(_) => assert!(data.len() < ACCEPT_LEN || !recfmt_ok),
    }
    match CmReject::parse(data) {
        Ok(reject) => {
            let bytes = reject.to_bytes();
            assert_eq!(bytes[..], data[..REJECT_LEN]);
            assert_eq!(CmReject::parse(&bytes), Ok(reject));
            let _ = reject.status.to_string();
        }
        Err(_) => assert!(data.len() < REJECT_LEN || !recfmt_ok),
    }
});
