//! The 1024-byte Connect data: whatever decodes must encode and decode to the same value.

#![no_main]

use fabrik_proto::fabrics::ConnectData;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(cd) = ConnectData::decode(data) {
        let bytes = cd.to_bytes();
        assert_eq!(
            ConnectData::decode(&bytes[..]),
            Ok(cd.clone()),
            "round trip of {cd:?}"
        );
        // HOSTID and CNTLID are copied verbatim.
        assert_eq!(bytes[..18], data[..18]);
    }
});
