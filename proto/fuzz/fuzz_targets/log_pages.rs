//! Log pages: SMART, Error Information, Firmware Slot, Changed Namespace List, ANA, Reservation
//! Notification, the discovery log (whole page and single entries), and Reservation Status
//! data, all fed the same bytes.

#![no_main]

use fabrik_proto::fabrics::discovery::*;
use fabrik_proto::nvme::log::*;
use fabrik_proto::nvme::reservation::{Notification, ReservationStatus};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(smart) = SmartLog::decode(data) {
        let mut buf = [0u8; SMART_LOG_LEN];
        smart.encode(&mut buf);
        assert_eq!(SmartLog::decode(&buf), Ok(smart));
    }
    if let Ok(entry) = ErrorLogEntry::decode(data) {
        let mut buf = [0u8; ERROR_LOG_ENTRY_LEN];
        entry.encode(&mut buf);
        assert_eq!(ErrorLogEntry::decode(&buf), Ok(entry));
    }
    if let Ok(fw) = FirmwareSlotLog::decode(data) {
        let mut buf = [0u8; FIRMWARE_SLOT_LOG_LEN];
        fw.encode(&mut buf);
        assert_eq!(
            FirmwareSlotLog::decode(&buf),
            Ok(fw.clone()),
            "firmware slots {fw:?}"
        );
    }
    if let Ok(list) = decode_changed_ns_list(data) {
        if list.len() <= CHANGED_NS_LIST_LEN / 4 {
            let mut buf = [0u8; CHANGED_NS_LIST_LEN];
            encode_changed_ns_list(&list, &mut buf);
            assert_eq!(decode_changed_ns_list(&buf), Ok(list));
        }
    }
    if let Ok(ana) = AnaLog::decode(data) {
        assert_eq!(
            AnaLog::decode(&ana.encode(false)),
            Ok(ana.clone()),
            "ANA {ana:?}"
        );
    }
    if let Some(n) = Notification::decode(data) {
        assert_eq!(Notification::decode(&n.encode()), Some(n));
    }
    for extended in [false, true] {
        if let Some(status) = ReservationStatus::decode(data, extended) {
            let len = if extended { 64 } else { 24 } * (1 + status.registrants.len());
            let again = ReservationStatus::decode(&status.encode(extended, len), extended);
            if extended {
                assert_eq!(again, Some(status), "status data round trips");
            } else {
                // The normal form carries 64 of the 128 host ID bits.
                assert_eq!(
                    again.map(|s| s.registrants.len()),
                    Some(status.registrants.len())
                );
            }
        }
    }
    if let Ok(header) = DiscoveryLogHeader::decode(data) {
        let mut buf = [0u8; DISCOVERY_HEADER_LEN];
        header.encode(&mut buf);
        assert_eq!(DiscoveryLogHeader::decode(&buf), Ok(header));
    }
    if let Ok(entry) = DiscoveryLogEntry::decode(data) {
        let mut buf = [0u8; DISCOVERY_ENTRY_LEN];
        entry.encode(&mut buf);
        assert_eq!(
            DiscoveryLogEntry::decode(&buf),
            Ok(entry.clone()),
            "entry {entry:?}"
        );
    }
    if let Ok((header, entries)) = decode_discovery_log(data) {
        assert_eq!(header.numrec, entries.len() as u64);
        let page = encode_discovery_log(header.genctr, &entries);
        let (h2, e2) = decode_discovery_log(&page).expect("an encoded page decodes");
        assert_eq!((h2.genctr, h2.numrec), (header.genctr, header.numrec));
        assert_eq!(e2, entries);
    }
});
