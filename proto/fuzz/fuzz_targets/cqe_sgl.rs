//! CQE and SGL descriptor decoding. Both are fixed-size with every bit meaningful (except the
//! CQE phase tag, which fabrics ignore), so the bytes must round trip exactly.

#![no_main]

use fabrik_proto::nvme::sgl::SGL_LEN;
use fabrik_proto::{Cqe, SglDescriptor};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(cqe) = Cqe::decode(data) {
        let bytes = cqe.to_bytes();
        assert_eq!(bytes[..14], data[..14]);
        assert_eq!(
            bytes[14] & !1,
            data[14] & !1,
            "status changed (phase aside)"
        );
        assert_eq!(bytes[15], data[15]);
        assert_eq!(Cqe::decode(&bytes), Ok(cqe));
    }
    if let Some(raw) = data.get(..SGL_LEN) {
        let raw: &[u8; SGL_LEN] = raw.try_into().unwrap();
        if let Ok(sgl) = SglDescriptor::decode(raw) {
            assert_eq!(&sgl.encode(), raw, "{sgl:?}");
            let _ = sgl.data_len();
        }
    }
});
