//! Identify Controller / Namespace, the active namespace list and the namespace
//! identification descriptors, all fed the same bytes. Decoded values must round trip.

#![no_main]

use fabrik_proto::nvme::identify::*;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(ctrl) = IdentifyController::decode(data) {
        let again = IdentifyController::decode(&ctrl.to_bytes()[..]);
        assert_eq!(again, Ok(ctrl.clone()), "controller round trip of {ctrl:?}");
    }
    if let Ok(ns) = IdentifyNamespace::decode(data) {
        let _ = ns.lba_size();
        let again = IdentifyNamespace::decode(&ns.to_bytes()[..]);
        assert_eq!(again, Ok(ns.clone()), "namespace round trip of {ns:?}");
    }
    if let Ok(list) = decode_ns_list(data) {
        assert!(list.len() <= IDENTIFY_LEN / 4);
        assert!(
            list.windows(2).all(|w| w[0] < w[1]),
            "not ascending: {list:?}"
        );
        let mut buf = [0u8; IDENTIFY_LEN];
        encode_ns_list(&list, &mut buf);
        assert_eq!(decode_ns_list(&buf), Ok(list));
    }
    if let Ok(descs) = decode_ns_descriptors(data) {
        // Only lists that fit one 4 KiB page (with their terminator) can be encoded.
        let len: usize = descs.iter().map(|d| 4 + desc_len(d)).sum::<usize>() + 4;
        if len <= IDENTIFY_LEN {
            let mut buf = [0u8; IDENTIFY_LEN];
            encode_ns_descriptors(&descs, &mut buf);
            assert_eq!(decode_ns_descriptors(&buf), Ok(descs));
        }
    }
});

fn desc_len(d: &NsDescriptor) -> usize {
    match d {
        NsDescriptor::Eui64(_) => 8,
        NsDescriptor::Nguid(_) | NsDescriptor::Uuid(_) => 16,
        NsDescriptor::Csi(_) => 1,
    }
}
