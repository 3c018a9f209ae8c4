//! TLS PSK inputs a peer or an operator controls: a ClientHello's PSK identity and an
//! `NVMeTLSkey-1:` text. Whatever parses re-encodes to the same text (the identity) or value
//! (the key), and deriving a TLS PSK from it never panics.

#![no_main]

use fabrik_proto::tls::{tls_psk, ConfiguredPsk, LabelEncoding, PskIdentity};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(id) = PskIdentity::parse(data) {
        assert_eq!(id.to_text().as_bytes(), data, "identity round trip");
        let key = ConfiguredPsk::new(None, &[7; 32]).unwrap();
        for e in LabelEncoding::ALL {
            let _ = tls_psk(&key, &id, e);
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(key) = ConfiguredPsk::parse(text) {
            let again = ConfiguredPsk::parse(&key.to_text()).expect("re-encoded key parses");
            assert_eq!(again, key, "key round trip");
        }
    }
});
