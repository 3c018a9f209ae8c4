use super::*;
use proptest::prelude::*;

/// Printable ASCII of at most `max` bytes with no trailing space (padding is stripped).
pub(crate) fn text(max: usize) -> impl Strategy<Value = String> {
    proptest::string::string_regex(&format!("[ -~]{{0,{max}}}"))
        .unwrap()
        .prop_map(|s| s.trim_end().to_string())
}

fn any_ctrl() -> impl Strategy<Value = IdentifyController> {
    (
        (text(20), text(40), text(8), text(223)),
        any::<[u16; 14]>(),
        any::<[u32; 13]>(),
        any::<[u8; 25]>(),
        any::<[u8; 16]>(),
    )
        .prop_map(
            |((serial, model, firmware, subnqn), w, d, b, fguid)| IdentifyController {
                vid: w[0],
                ssvid: w[1],
                serial,
                model,
                firmware,
                rab: b[0],
                ieee: [b[1], b[2], b[3]],
                cmic: b[4],
                mdts: b[5],
                cntlid: w[2],
                ver: d[0],
                rtd3r: d[1],
                rtd3e: d[2],
                oaes: d[3],
                ctratt: d[4],
                cntrltype: b[6],
                fguid,
                oacs: w[3],
                acl: b[7],
                aerl: b[8],
                frmw: b[9],
                lpa: b[10],
                elpe: b[11],
                npss: b[12],
                avscc: b[13],
                apsta: b[14],
                wctemp: w[4],
                cctemp: w[5],
                kas: w[6],
                anatt: b[21],
                anacap: b[22],
                anagrpmax: d[11],
                nanagrpid: d[12],
                sqes: b[15],
                cqes: b[16],
                maxcmd: w[7],
                nn: d[5],
                oncs: w[8],
                fuses: w[9],
                fna: b[17],
                vwc: b[18],
                awun: w[10],
                awupf: w[11],
                sgls: d[6],
                mnan: d[7],
                subnqn,
                ioccsz: d[8],
                iorcsz: d[9],
                icdoff: w[12],
                fcatt: b[19],
                msdbd: b[20],
                ofcs: w[13],
                dctype: b[23],
                ps0_max_power_cw: d[10] as u16,
            },
        )
}

fn any_lbaf() -> impl Strategy<Value = LbaFormat> {
    (any::<u16>(), any::<u8>(), 0u8..4).prop_map(|(ms, lbads, rp)| LbaFormat { ms, lbads, rp })
}

fn any_ns() -> impl Strategy<Value = IdentifyNamespace> {
    (
        any::<[u64; 3]>(),
        any::<[u8; 13]>(),
        any::<[u16; 14]>(),
        any::<u128>(),
        any::<u32>(),
        any::<[u8; 16]>(),
        any::<[u8; 8]>(),
        // A single all-zero format is "no format" (see decode); keep LBADS non-zero.
        proptest::collection::vec(
            any_lbaf().prop_filter("format in use", |f| f.lbads != 0),
            1..=MAX_LBAF,
        ),
    )
        .prop_map(
            |(q, b, w, nvmcap, anagrpid, nguid, eui64, lbaf)| IdentifyNamespace {
                nsze: q[0],
                ncap: q[1],
                nuse: q[2],
                nsfeat: b[0],
                nlbaf: (lbaf.len() - 1) as u8,
                flbas: b[1],
                mc: b[2],
                dpc: b[3],
                dps: b[4],
                nmic: b[5],
                rescap: b[6],
                fpi: b[7],
                dlfeat: b[8],
                nawun: w[0],
                nawupf: w[1],
                nacwu: w[2],
                nabsn: w[3],
                nabo: w[4],
                nabspf: w[5],
                noiob: w[6],
                nvmcap,
                npwg: w[7],
                npwa: w[8],
                npdg: w[9],
                npda: w[10],
                nows: w[11],
                anagrpid,
                nsattr: b[9],
                nvmsetid: w[12],
                nguid,
                eui64,
                lbaf,
            },
        )
}

fn any_desc() -> impl Strategy<Value = NsDescriptor> {
    prop_oneof![
        any::<[u8; 8]>().prop_map(NsDescriptor::Eui64),
        any::<[u8; 16]>().prop_map(NsDescriptor::Nguid),
        any::<[u8; 16]>().prop_map(NsDescriptor::Uuid),
        any::<u8>().prop_map(NsDescriptor::Csi),
    ]
}

proptest! {
    #[test]
    fn controller_round_trip(c in any_ctrl()) {
        prop_assert_eq!(IdentifyController::decode(&c.to_bytes()[..]), Ok(c));
    }

    #[test]
    fn namespace_round_trip(ns in any_ns()) {
        prop_assert_eq!(IdentifyNamespace::decode(&ns.to_bytes()[..]), Ok(ns));
    }

    #[test]
    fn ns_list_round_trip(set in proptest::collection::btree_set(1u32.., 0..=NS_LIST_MAX)) {
        let nsids: Vec<u32> = set.into_iter().collect();
        let mut b = [0u8; IDENTIFY_LEN];
        encode_ns_list(&nsids, &mut b);
        prop_assert_eq!(decode_ns_list(&b), Ok(nsids));
    }

    #[test]
    fn ns_descriptors_round_trip(descs in proptest::collection::vec(any_desc(), 0..40)) {
        let mut b = [0u8; IDENTIFY_LEN];
        encode_ns_descriptors(&descs, &mut b);
        prop_assert_eq!(decode_ns_descriptors(&b), Ok(descs));
    }

    #[test]
    fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..=IDENTIFY_LEN + 8)) {
        if let Ok(c) = IdentifyController::decode(&bytes) {
            prop_assert_eq!(IdentifyController::decode(&c.to_bytes()[..]), Ok(c));
        }
        if let Ok(ns) = IdentifyNamespace::decode(&bytes) {
            let _ = ns.lba_size();
            prop_assert_eq!(IdentifyNamespace::decode(&ns.to_bytes()[..]).map(|n| n.nsze), Ok(ns.nsze));
        }
        let _ = decode_ns_list(&bytes);
        if let Ok(d) = decode_ns_descriptors(&bytes) {
            let mut b = [0u8; IDENTIFY_LEN];
            encode_ns_descriptors(&d, &mut b);
            prop_assert_eq!(decode_ns_descriptors(&b), Ok(d));
        }
    }

    #[test]
    fn sparse_descriptor_lists_never_panic(entries in proptest::collection::vec((0u8..6, 0u8..20, any::<u8>()), 0..300)) {
        // Mostly well-formed headers, to reach the deeper checks.
        let mut b = vec![0u8; IDENTIFY_LEN];
        let mut off = 0;
        for (t, l, fill) in entries {
            if off + 4 + l as usize > IDENTIFY_LEN {
                break;
            }
            b[off] = t;
            b[off + 1] = l;
            b[off + 4..off + 4 + l as usize].fill(fill);
            off += 4 + l as usize;
        }
        let _ = decode_ns_descriptors(&b);
    }
}

#[test]
fn controller_offsets() {
    let c = IdentifyController {
        vid: 0x1b36,
        serial: "SN1".into(),
        model: "fabrik".into(),
        firmware: "0.1".into(),
        cntlid: 0x1234,
        ver: 0x0001_0400,
        cntrltype: 1,
        kas: 10,
        sqes: 0x66,
        cqes: 0x44,
        maxcmd: 128,
        nn: 32,
        sgls: 0x0010_0001,
        subnqn: "nqn.2024-01.io.fabrik:jbof".into(),
        ioccsz: 260,
        iorcsz: 1,
        msdbd: 1,
        dctype: dctype::CDC,
        ps0_max_power_cw: 2500,
        ..Default::default()
    };
    let b = c.to_bytes();
    assert_eq!(&b[0..2], &[0x36, 0x1b]);
    assert_eq!(&b[4..24], b"SN1                 ");
    assert_eq!(&b[24..30], b"fabrik");
    assert_eq!(b[30], b' ');
    assert_eq!(b[63], b' ');
    assert_eq!(&b[64..72], b"0.1     ");
    assert_eq!(&b[78..80], &[0x34, 0x12]);
    assert_eq!(&b[80..84], &[0x00, 0x04, 0x01, 0x00]);
    assert_eq!(b[111], 1);
    assert_eq!(&b[320..322], &[10, 0]);
    assert_eq!((b[512], b[513]), (0x66, 0x44));
    assert_eq!(&b[514..516], &[128, 0]);
    assert_eq!(&b[516..520], &[32, 0, 0, 0]);
    assert_eq!(&b[536..540], &[0x01, 0x00, 0x10, 0x00]);
    assert_eq!(&b[768..794], b"nqn.2024-01.io.fabrik:jbof");
    assert!(b[794..1024].iter().all(|&x| x == 0));
    assert_eq!(&b[1792..1796], &260u32.to_le_bytes());
    assert_eq!(&b[1796..1800], &1u32.to_le_bytes());
    assert_eq!(b[1803], 1);
    assert_eq!((b[1805], b[1806], b[1807]), (0, 2, 0));
    assert_eq!(&b[2048..2050], &2500u16.to_le_bytes());
    assert_eq!(IdentifyController::decode(&b[..]), Ok(c));
}

#[test]
fn controller_decode_errors() {
    assert!(matches!(
        IdentifyController::decode(&[0u8; 4095]),
        Err(DecodeError::Short { .. })
    ));
    let mut b = IdentifyController::default().to_bytes();
    b[24] = 0xff;
    assert_eq!(IdentifyController::decode(&b[..]).unwrap_err().offset(), 24);
    let mut b = IdentifyController::default().to_bytes();
    b[4] = b'\n';
    assert_eq!(IdentifyController::decode(&b[..]).unwrap_err().offset(), 4);
    let mut b = IdentifyController::default().to_bytes();
    b[768] = 0xc3;
    assert_eq!(
        IdentifyController::decode(&b[..]).unwrap_err().offset(),
        768
    );
    // Unnamed fields (e.g. byte 1200) are accepted.
    let mut b = IdentifyController::default().to_bytes();
    b[1200] = 1;
    assert_eq!(
        IdentifyController::decode(&b[..]),
        Ok(IdentifyController::default())
    );
    // UTF-8 in SUBNQN is fine; NUL padding and a full 256-byte field both decode.
    let c = IdentifyController {
        subnqn: "nqn.2024-01.io.fabrik:gr\u{fc}n".into(),
        ..Default::default()
    };
    assert_eq!(IdentifyController::decode(&c.to_bytes()[..]), Ok(c));
    let mut b = IdentifyController::default().to_bytes();
    b[768..1024].fill(b'a');
    assert_eq!(
        IdentifyController::decode(&b[..]).unwrap().subnqn.len(),
        256
    );
}

#[test]
fn namespace_offsets() {
    let ns = IdentifyNamespace {
        nsze: 0x1000,
        ncap: 0x1000,
        nuse: 0x800,
        nlbaf: 1,
        flbas: 1,
        nmic: 1,
        nawupf: 7,
        noiob: 0x100,
        npwg: 3,
        nows: 5,
        anagrpid: 9,
        nsattr: 1,
        nguid: [0xaa; 16],
        eui64: [0xbb; 8],
        lbaf: vec![
            LbaFormat {
                ms: 0,
                lbads: 9,
                rp: 0,
            },
            LbaFormat {
                ms: 8,
                lbads: 12,
                rp: 2,
            },
        ],
        ..Default::default()
    };
    let b = ns.to_bytes();
    assert_eq!(&b[0..8], &0x1000u64.to_le_bytes());
    assert_eq!(&b[8..16], &0x1000u64.to_le_bytes());
    assert_eq!(&b[16..24], &0x800u64.to_le_bytes());
    assert_eq!((b[25], b[26], b[30]), (1, 1, 1));
    assert_eq!(&b[36..38], &[7, 0]);
    assert_eq!(&b[46..48], &[0, 1]);
    assert_eq!(&b[64..66], &[3, 0]);
    assert_eq!(&b[72..74], &[5, 0]);
    assert_eq!(&b[92..96], &[9, 0, 0, 0]);
    assert_eq!(b[99], 1);
    assert_eq!(&b[104..120], &[0xaa; 16]);
    assert_eq!(&b[120..128], &[0xbb; 8]);
    assert_eq!(&b[128..132], &[0, 0, 9, 0]);
    assert_eq!(&b[132..136], &[8, 0, 12, 2]);
    let d = IdentifyNamespace::decode(&b[..]).unwrap();
    assert_eq!(d.lba_size(), Some(4096));
    assert_eq!(d, ns);
}

#[test]
fn namespace_lbaf_edge_cases() {
    // Inactive NSID: all zero, both ways.
    let zero = [0u8; IDENTIFY_LEN];
    assert_eq!(
        IdentifyNamespace::decode(&zero),
        Ok(IdentifyNamespace::default())
    );
    assert_eq!(&IdentifyNamespace::default().to_bytes()[..], &zero[..]);
    assert_eq!(IdentifyNamespace::default().lba_size(), None);
    // NLBAF 63 reads 64 formats; 64 is an error at byte 25.
    let mut b = [0u8; IDENTIFY_LEN];
    b[25] = 63;
    assert_eq!(IdentifyNamespace::decode(&b).unwrap().lbaf.len(), 64);
    b[25] = 64;
    assert_eq!(IdentifyNamespace::decode(&b).unwrap_err().offset(), 25);
    // More than 64 formats: only 64 written.
    let ns = IdentifyNamespace {
        lbaf: vec![
            LbaFormat {
                ms: 0,
                lbads: 9,
                rp: 0
            };
            70
        ],
        ..Default::default()
    };
    let b = ns.to_bytes();
    assert_eq!(b[25], 63);
    assert_eq!(IdentifyNamespace::decode(&b[..]).unwrap().lbaf.len(), 64);
    // lba_size: FLBAS 3:0 picks the format; LBADS must be 9..=16.
    let mut ns = IdentifyNamespace {
        lbaf: vec![
            LbaFormat {
                lbads: 9,
                ..Default::default()
            },
            LbaFormat {
                lbads: 8,
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    assert_eq!(ns.lba_size(), Some(512));
    ns.flbas = 0x11; // bit 4 (metadata at end) is not part of the index
    assert_eq!(ns.lba_size(), None);
    ns.flbas = 2;
    assert_eq!(ns.lba_size(), None);
    ns.lbaf[0].lbads = 16;
    ns.flbas = 0x10;
    assert_eq!(ns.lba_size(), Some(65536));
    ns.lbaf[0].lbads = 17;
    assert_eq!(ns.lba_size(), None);
}

#[test]
fn ns_list_bytes() {
    let mut b = [0u8; IDENTIFY_LEN];
    encode_ns_list(&[1, 2, 7], &mut b);
    assert_eq!(&b[..16], &[1, 0, 0, 0, 2, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0]);
    // Only 1024 fit; a full page has no terminator.
    let many: Vec<u32> = (1..=2000).collect();
    encode_ns_list(&many, &mut b);
    assert_eq!(decode_ns_list(&b).unwrap(), (1..=1024).collect::<Vec<_>>());
    // Not ascending: error at the offending entry.
    encode_ns_list(&[1, 5, 5], &mut b);
    assert_eq!(decode_ns_list(&b).unwrap_err().offset(), 8);
    encode_ns_list(&[3, 2], &mut b);
    assert_eq!(decode_ns_list(&b).unwrap_err().offset(), 4);
    // Entries after the terminator are ignored.
    encode_ns_list(&[1, 0, 9], &mut b);
    assert_eq!(decode_ns_list(&b), Ok(vec![1]));
    assert!(matches!(
        decode_ns_list(&b[..100]),
        Err(DecodeError::Short { .. })
    ));
}

#[test]
fn ns_descriptor_bytes() {
    let descs = [
        NsDescriptor::Nguid([0x11; 16]),
        NsDescriptor::Csi(0),
        NsDescriptor::Eui64([0x22; 8]),
    ];
    let mut b = [0u8; IDENTIFY_LEN];
    encode_ns_descriptors(&descs, &mut b);
    assert_eq!(&b[0..4], &[2, 16, 0, 0]);
    assert_eq!(&b[4..20], &[0x11; 16]);
    assert_eq!(&b[20..25], &[4, 1, 0, 0, 0]);
    assert_eq!(&b[25..29], &[1, 8, 0, 0]);
    assert_eq!(&b[29..37], &[0x22; 8]);
    assert!(b[37..].iter().all(|&x| x == 0));
    assert_eq!(decode_ns_descriptors(&b), Ok(descs.to_vec()));

    // Wrong NIDL for a known type: error at the NIDL byte.
    let mut bad = b;
    bad[21] = 4;
    assert_eq!(decode_ns_descriptors(&bad).unwrap_err().offset(), 21);
    let mut bad = b;
    bad[1] = 0;
    assert_eq!(decode_ns_descriptors(&bad).unwrap_err().offset(), 1);
    // Unknown NIDT: error at the NIDT byte.
    let mut bad = b;
    bad[25] = 9;
    assert_eq!(decode_ns_descriptors(&bad).unwrap_err().offset(), 25);
    // A descriptor that runs past the 4 KiB.
    let mut bad = [0u8; IDENTIFY_LEN];
    encode_ns_descriptors(&vec![NsDescriptor::Uuid([1; 16]); 204], &mut bad);
    assert_eq!(decode_ns_descriptors(&bad).unwrap().len(), 204);
    bad[4080] = nidt::UUID;
    bad[4081] = 16;
    assert_eq!(decode_ns_descriptors(&bad).unwrap_err().offset(), 4080);
    // Entries that do not fit are not encoded; a full page needs no terminator.
    let full = vec![NsDescriptor::Uuid([1; 16]); 300];
    encode_ns_descriptors(&full, &mut b);
    assert_eq!(decode_ns_descriptors(&b).unwrap().len(), IDENTIFY_LEN / 20);
}
