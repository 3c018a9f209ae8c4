//! Discovery Information Management data (what a CDC receives from any host or box): never a
//! panic, and whatever decodes must encode and decode to the same value.

#![no_main]

use fabrik_proto::fabrics::dim::DimData;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(dim) = DimData::decode(data) {
        let bytes = dim.encode();
        assert_eq!(bytes.len(), dim.encoded_len());
        assert_eq!(DimData::decode(&bytes), Ok(dim.clone()), "round trip of {dim:?}");
    }
});
