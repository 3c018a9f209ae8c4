//! SQE decoding and the admin, I/O and fabrics command parsers on top of it.
//!
//! A parsed command must come back unchanged through `to_sqe` and `parse` again; the SQE bytes
//! round trip exactly. Bytes after the first 64 feed the DSM range list decoder.

#![no_main]

use fabrik_proto::fabrics::FabricsCommand;
use fabrik_proto::nvme::admin::AdminCommand;
use fabrik_proto::nvme::data_direction;
use fabrik_proto::nvme::io::{DsmRange, IoCommand};
use fabrik_proto::nvme::reservation::ReservationCommand;
use fabrik_proto::nvme::sqe::{Sqe, SQE_LEN};
use fabrik_proto::SglDescriptor;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(sqe) = Sqe::decode(data) else {
        assert!(data.len() < SQE_LEN);
        return;
    };
    assert_eq!(sqe.to_bytes()[..], data[..SQE_LEN]);
    let _ = data_direction(sqe.opcode, sqe.fctype());
    if let Ok(Some(cmd)) = ReservationCommand::parse(&sqe) {
        assert_eq!(ReservationCommand::parse(&cmd.to_sqe()), Ok(Some(cmd)));
    }

    if let Ok(cmd) = AdminCommand::parse(&sqe) {
        let _ = cmd.log_len();
        let again = cmd.to_sqe(sqe.cid);
        assert_eq!(again.cid, sqe.cid);
        assert_eq!(
            AdminCommand::parse(&again),
            Ok(cmd),
            "admin round trip via {again:?}"
        );
    }
    if let Ok(cmd) = IoCommand::parse(&sqe) {
        let _ = (
            cmd.nsid(),
            cmd.data_len(512),
            cmd.data_len(4096),
            cmd.data_len(u32::MAX),
        );
        let again = cmd.to_sqe(sqe.cid);
        assert_eq!(again.cid, sqe.cid);
        assert_eq!(
            IoCommand::parse(&again),
            Ok(cmd),
            "I/O round trip via {again:?}"
        );
        if let IoCommand::DatasetManagement { ranges, .. } = cmd {
            if let Ok(list) = DsmRange::decode_list(&data[SQE_LEN..], ranges as usize) {
                assert_eq!(list.len(), ranges as usize);
                for (i, r) in list.iter().enumerate() {
                    let mut b = [0u8; 16];
                    r.encode(&mut b);
                    let off = SQE_LEN + 16 * i;
                    assert_eq!(b[..], data[off..off + 16]);
                }
            }
        }
    }
    if let Ok(cmd) = FabricsCommand::parse(&sqe) {
        let again = cmd.to_sqe(sqe.cid);
        assert_eq!(again.cid, sqe.cid);
        assert_eq!(
            FabricsCommand::parse(&again),
            Ok(cmd),
            "fabrics round trip via {again:?}"
        );
    }
    if let Ok(sgl) = sqe.sgl() {
        assert_eq!(sgl.encode(), sqe.dptr);
        assert_eq!(SglDescriptor::decode(&sgl.encode()), Ok(sgl));
    }
});
