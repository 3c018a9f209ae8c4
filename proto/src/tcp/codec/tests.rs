use super::*;
use crate::nvme::status::Status;
use proptest::prelude::*;

const MAX_DATA: u32 = 8192;
const ALL_DIGESTS: [Digests; 4] = [
    Digests {
        header: false,
        data: false,
    },
    Digests {
        header: true,
        data: false,
    },
    Digests {
        header: false,
        data: true,
    },
    Digests {
        header: true,
        data: true,
    },
];

fn decoder(role: Role, digests: Digests) -> Decoder {
    let mut d = Decoder::new(role, MAX_DATA);
    d.set_digests(digests);
    d
}

fn encoded(pdu: &Pdu, digests: Digests) -> BytesMut {
    let mut out = BytesMut::new();
    pdu.encode(digests, &mut out);
    out
}

/// Decodes `bytes` as one whole buffer and expects a fatal error.
fn fatal(role: Role, digests: Digests, bytes: &[u8]) -> (u16, u32, Bytes) {
    let mut buf = BytesMut::from(bytes);
    match decoder(role, digests).decode(&mut buf) {
        Err(PduError::Fatal {
            fes, fei, header, ..
        }) => {
            assert_eq!(&buf[..], bytes, "a fatal error leaves the buffer alone");
            (fes, fei, header)
        }
        other => panic!("expected a fatal error, got {other:?}"),
    }
}

fn h2c_data(len: usize) -> Pdu {
    Pdu::H2CData(H2CData {
        cccid: 0x2001,
        ttag: 3,
        datao: 0,
        last: true,
        data: Bytes::from((0..len).map(|i| i as u8).collect::<Vec<_>>()),
    })
}

fn connect_capsule() -> Pdu {
    let mut sqe = Sqe {
        opcode: 0x7f,
        flags: 0x40,
        cid: 0x1005,
        nsid: 1,
        ..Sqe::default()
    };
    sqe.dptr[8..12].copy_from_slice(&1024u32.to_le_bytes());
    sqe.dptr[15] = 0x01;
    Pdu::CapsuleCmd(CapsuleCmd {
        sqe,
        data: Bytes::from(vec![0xab; 1024]),
    })
}

// ---- strategies ----

fn any_digests() -> impl Strategy<Value = Digests> {
    (0u8..4).prop_map(Digests::from_bits)
}

fn any_data(max: usize) -> impl Strategy<Value = Bytes> {
    proptest::collection::vec(any::<u8>(), 0..max).prop_map(Bytes::from)
}

fn any_sqe() -> impl Strategy<Value = Sqe> {
    proptest::collection::vec(any::<u8>(), SQE_LEN).prop_map(|b| Sqe::decode(&b).unwrap())
}

fn any_term_req() -> impl Strategy<Value = TermReq> {
    (any::<u16>(), any::<u32>(), any_data(TERM_MAX_DATA + 1))
        .prop_map(|(fes, fei, header)| TermReq { fes, fei, header })
}

/// PDUs a controller receives.
fn any_h2c_pdu() -> impl Strategy<Value = Pdu> {
    prop_oneof![
        (0u8..32, any_digests(), any::<u32>()).prop_map(|(hpda, digests, maxr2t)| {
            Pdu::IcReq(IcReq {
                pfv: 0,
                hpda,
                digests,
                maxr2t,
            })
        }),
        any_term_req().prop_map(Pdu::H2CTermReq),
        (any_sqe(), any_data(600))
            .prop_map(|(sqe, data)| Pdu::CapsuleCmd(CapsuleCmd { sqe, data })),
        (
            any::<u16>(),
            any::<u16>(),
            any::<u32>(),
            any::<bool>(),
            any_data(600)
        )
            .prop_map(|(cccid, ttag, datao, last, data)| {
                Pdu::H2CData(H2CData {
                    cccid,
                    ttag,
                    datao,
                    last,
                    data,
                })
            }),
    ]
}

/// PDUs a host receives.
fn any_c2h_pdu() -> impl Strategy<Value = Pdu> {
    prop_oneof![
        (0u8..32, any_digests(), 1024u32..0x4000_0000).prop_map(|(cpda, digests, n)| {
            Pdu::IcResp(IcResp {
                pfv: 0,
                cpda,
                digests,
                maxh2cdata: n * 4,
            })
        }),
        any_term_req().prop_map(Pdu::C2HTermReq),
        (
            any::<u64>(),
            any::<u16>(),
            any::<u16>(),
            any::<u16>(),
            0u16..0x8000
        )
            .prop_map(|(result, sqhd, sqid, cid, raw)| {
                let cqe = Cqe {
                    result,
                    sqhd,
                    sqid,
                    cid,
                    status: Status::from_raw(raw),
                };
                Pdu::CapsuleResp(CapsuleResp { cqe })
            }),
        (
            any::<u16>(),
            any::<u32>(),
            any::<bool>(),
            any::<bool>(),
            any_data(600)
        )
            .prop_map(|(cccid, datao, last, success, data)| {
                let success = success && last;
                Pdu::C2HData(C2HData {
                    cccid,
                    datao,
                    last,
                    success,
                    data,
                })
            }),
        (any::<u16>(), any::<u16>(), any::<u32>(), 1u32..).prop_map(|(cccid, ttag, r2to, r2tl)| {
            Pdu::R2T(R2T {
                cccid,
                ttag,
                r2to,
                r2tl,
            })
        }),
    ]
}

fn any_role_and_pdus() -> impl Strategy<Value = (Role, Vec<Pdu>)> {
    prop_oneof![
        proptest::collection::vec(any_h2c_pdu(), 1..6).prop_map(|p| (Role::Controller, p)),
        proptest::collection::vec(any_c2h_pdu(), 1..6).prop_map(|p| (Role::Host, p)),
    ]
}

/// Decodes everything in `buf`, expecting only whole PDUs.
fn drain(dec: &mut Decoder, buf: &mut BytesMut, out: &mut Vec<Pdu>) {
    while let Some(pdu) = dec.decode(buf).expect("valid stream") {
        out.push(pdu);
    }
}

proptest! {
    #[test]
    fn round_trip_controller(pdu in any_h2c_pdu(), digests in any_digests()) {
        let mut buf = encoded(&pdu, digests);
        let got = decoder(Role::Controller, digests).decode(&mut buf).unwrap();
        prop_assert_eq!(got, Some(pdu));
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn round_trip_host(pdu in any_c2h_pdu(), digests in any_digests()) {
        let mut buf = encoded(&pdu, digests);
        let got = decoder(Role::Host, digests).decode(&mut buf).unwrap();
        prop_assert_eq!(got, Some(pdu));
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn encode_head_plus_payload_equals_encode(pdu in any_c2h_pdu(), digests in any_digests()) {
        let mut split = BytesMut::new();
        let ddgst = pdu.encode_head(digests, &mut split);
        split.extend_from_slice(pdu.payload());
        if let Some(d) = ddgst {
            split.extend_from_slice(&d.to_le_bytes());
        }
        prop_assert_eq!(split, encoded(&pdu, digests));
    }

    #[test]
    fn streaming_in_random_chunks(
        (role, pdus) in any_role_and_pdus(),
        digests in any_digests(),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..12),
    ) {
        let mut stream = BytesMut::new();
        for pdu in &pdus {
            pdu.encode(digests, &mut stream);
        }
        let mut cuts: Vec<usize> = cuts.iter().map(|i| i.index(stream.len() + 1)).collect();
        cuts.push(stream.len());
        cuts.sort_unstable();

        let mut dec = decoder(role, digests);
        let (mut buf, mut got, mut from) = (BytesMut::new(), Vec::new(), 0);
        for to in cuts {
            buf.extend_from_slice(&stream[from..to]);
            from = to;
            drain(&mut dec, &mut buf, &mut got);
        }
        prop_assert!(buf.is_empty());
        prop_assert_eq!(got, pdus);
    }

    /// Header first, payload and digest taken by the caller: the same PDU as `decode` gives,
    /// and the same digest verdict; other PDUs are left to `decode`.
    #[test]
    fn data_head_then_payload_equals_decode(
        (role, pdus) in any_role_and_pdus(),
        digests in any_digests(),
        corrupt in any::<bool>(),
    ) {
        for pdu in pdus {
            let mut buf = encoded(&pdu, digests);
            let ddgst_at = buf.len() - 4;
            let is_data = matches!(pdu, Pdu::C2HData(_) | Pdu::H2CData(_));
            let corrupted = corrupt && is_data && digests.data && !pdu.payload().is_empty();
            if corrupted {
                buf[ddgst_at] ^= 1;
            }
            let mut whole = buf.clone();
            let want = decoder(role, digests).decode(&mut whole);
            let mut dec = decoder(role, digests);
            let Some(head) = dec.decode_data_head(&mut buf).unwrap() else {
                prop_assert!(!is_data);
                prop_assert_eq!(buf.len(), encoded(&pdu, digests).len());
                continue;
            };
            prop_assert_eq!(head.data_len, pdu.payload().len());
            prop_assert_eq!(head.ddgst, digests.data && head.data_len > 0);
            let payload = buf.split_to(head.data_len).freeze();
            let digest_ok = !head.ddgst || buf.split_to(4)[..] == digest(&payload).to_le_bytes();
            prop_assert!(buf.is_empty());
            prop_assert_eq!(digest_ok, !corrupted);
            if digest_ok {
                let mut got = head.pdu;
                match &mut got {
                    Pdu::C2HData(d) => d.data = payload,
                    Pdu::H2CData(d) => d.data = payload,
                    _ => unreachable!(),
                }
                prop_assert_eq!(Ok(Some(got)), want);
            } else {
                prop_assert!(matches!(want, Err(PduError::DataDigest { .. })), "{:?}", want);
            }
        }
    }

    /// A data PDU's header is only taken once all of it (with its digest) is there; a bad
    /// header is refused as `decode` refuses it.
    #[test]
    fn data_head_waits_for_the_whole_header(pdu in any_c2h_pdu(), digests in any_digests()) {
        let whole = encoded(&pdu, digests);
        let head_len = match &pdu {
            Pdu::C2HData(_) => DATA_HLEN + if digests.header { 4 } else { 0 },
            _ => return Ok(()),
        };
        let mut dec = decoder(Role::Host, digests);
        for n in 0..head_len {
            let mut buf = BytesMut::from(&whole[..n]);
            prop_assert_eq!(dec.decode_data_head(&mut buf), Ok(None));
            prop_assert_eq!(buf.len(), n);
        }
        if digests.header {
            let mut bad = BytesMut::from(&whole[..head_len]);
            bad[DATA_HLEN] ^= 0xff;
            let err = dec.decode_data_head(&mut bad).unwrap_err();
            prop_assert_eq!(err.term_req().unwrap().fes, fes::HEADER_DIGEST_ERROR);
        }
    }

    #[test]
    fn every_prefix_waits_and_leaves_the_buffer(pdu in any_h2c_pdu(), digests in any_digests()) {
        let whole = encoded(&pdu, digests);
        let mut dec = decoder(Role::Controller, digests);
        for n in 0..whole.len() {
            let mut buf = BytesMut::from(&whole[..n]);
            prop_assert_eq!(dec.decode(&mut buf), Ok(None));
            prop_assert_eq!(&buf[..], &whole[..n]);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..400),
        host in any::<bool>(),
        digests in any_digests(),
        max_data in 0u32..1024,
    ) {
        let role = if host { Role::Host } else { Role::Controller };
        let mut dec = Decoder::new(role, max_data);
        dec.set_digests(digests);
        let mut buf = BytesMut::from(&bytes[..]);
        loop {
            let before = buf.len();
            match dec.decode(&mut buf) {
                Ok(Some(pdu)) => {
                    prop_assert!(buf.len() < before);
                    // What was accepted must encode back to something that decodes the same.
                    let mut again = encoded(&pdu, digests);
                    prop_assert_eq!(dec.decode(&mut again), Ok(Some(pdu)));
                }
                Ok(None) => break,
                Err(PduError::DataDigest { .. }) => prop_assert!(buf.len() < before),
                Err(e @ PduError::Fatal { .. }) => {
                    prop_assert_eq!(buf.len(), before);
                    prop_assert!(e.term_req().unwrap().header.len() <= TERM_MAX_DATA);
                    break;
                }
            }
        }
    }

    /// Random single-byte corruption of a valid PDU is rejected or decodes to something
    /// well-formed, but never panics.
    #[test]
    fn corrupted_pdus_never_panic(
        pdu in any_h2c_pdu(),
        digests in any_digests(),
        at in any::<prop::sample::Index>(),
        xor in 1u8..,
    ) {
        let mut buf = encoded(&pdu, digests);
        let i = at.index(buf.len());
        buf[i] ^= xor;
        let _ = decoder(Role::Controller, digests).decode(&mut buf);
    }
}

// ---- known-good layouts ----

/// Every digest combination explicitly (the proptests pick them at random).
#[test]
fn linux_like_pdus_in_every_digest_setting() {
    let icresp = IcResp {
        pfv: 0,
        cpda: 0,
        digests: Digests::default(),
        maxh2cdata: 0x40_0000,
    };
    let c2h = C2HData {
        cccid: 9,
        datao: 0,
        last: true,
        success: true,
        data: h2c_data(64).payload().to_vec().into(),
    };
    let host = [
        Pdu::IcResp(icresp),
        Pdu::CapsuleResp(CapsuleResp {
            cqe: Cqe::new(0x4001, Status::SUCCESS),
        }),
        Pdu::R2T(R2T {
            cccid: 0x2001,
            ttag: 3,
            r2to: 0,
            r2tl: 4096,
        }),
        Pdu::C2HData(c2h),
    ];
    let ctrl = [connect_capsule(), h2c_data(0), h2c_data(100)];
    for digests in ALL_DIGESTS {
        for (role, pdus) in [(Role::Host, &host[..]), (Role::Controller, &ctrl[..])] {
            let mut dec = decoder(role, digests);
            for pdu in pdus {
                let mut buf = encoded(pdu, digests);
                assert_eq!(dec.decode(&mut buf), Ok(Some(pdu.clone())), "{digests:?}");
                assert!(buf.is_empty());
            }
        }
    }
}

#[test]
fn linux_icreq_with_digests() {
    let mut b = [0u8; 128];
    b[..8].copy_from_slice(&[0x00, 0, 128, 0, 128, 0, 0, 0]);
    b[11] = 0x03;
    let mut buf = BytesMut::from(&b[..]);
    // Digests are negotiated by this very PDU, so the decoder still has them off.
    let got = Decoder::new(Role::Controller, MAX_DATA)
        .decode(&mut buf)
        .unwrap();
    let digests = Digests {
        header: true,
        data: true,
    };
    assert_eq!(
        got,
        Some(Pdu::IcReq(IcReq {
            pfv: 0,
            hpda: 0,
            digests,
            maxr2t: 0
        }))
    );
}

#[test]
fn connect_capsule_payload_is_zero_copy() {
    let both = Digests {
        header: true,
        data: true,
    };
    let mut buf = encoded(&connect_capsule(), both);
    let start = buf.as_ptr() as usize;
    let Some(Pdu::CapsuleCmd(c)) = decoder(Role::Controller, both).decode(&mut buf).unwrap() else {
        panic!("expected a capsule");
    };
    assert_eq!(c.data.len(), 1024);
    assert_eq!(c.data.as_ptr() as usize, start + 72 + 4);
}

#[test]
fn capsule_without_data_may_set_ddgstf() {
    let both = Digests {
        header: true,
        data: true,
    };
    let pdu = Pdu::CapsuleCmd(CapsuleCmd {
        sqe: Sqe::default(),
        data: Bytes::new(),
    });
    let mut buf = encoded(&pdu, both);
    buf[1] |= flags::DDGSTF;
    let hdgst = digest(&buf[..72]).to_le_bytes();
    buf[72..76].copy_from_slice(&hdgst);
    assert_eq!(
        decoder(Role::Controller, both).decode(&mut buf),
        Ok(Some(pdu))
    );
}

#[test]
fn term_req_pdo_zero_is_accepted() {
    let t = TermReq {
        fes: fes::PDU_SEQUENCE_ERROR,
        fei: 0,
        header: Bytes::from_static(b"hdr"),
    };
    let mut buf = encoded(&Pdu::C2HTermReq(t.clone()), Digests::default());
    buf[3] = 0;
    assert_eq!(
        decoder(Role::Host, Digests::default()).decode(&mut buf),
        Ok(Some(Pdu::C2HTermReq(t)))
    );
}

// ---- errors ----

#[test]
fn corrupted_header_digest() {
    let both = Digests {
        header: true,
        data: true,
    };
    let mut bytes = encoded(&connect_capsule(), both);
    bytes[72] ^= 1;
    let (fes, fei, header) = fatal(Role::Controller, both, &bytes);
    assert_eq!((fes, fei), (fes::HEADER_DIGEST_ERROR, 72));
    assert_eq!(&header[..], &bytes[..72]);
}

#[test]
fn corrupted_data_digest_consumes_the_pdu() {
    let both = Digests {
        header: true,
        data: true,
    };
    let mut buf = encoded(&h2c_data(100), both);
    let n = buf.len();
    buf[n - 1] ^= 0x80;
    h2c_data(5).encode(both, &mut buf);
    let mut dec = decoder(Role::Controller, both);
    assert_eq!(
        dec.decode(&mut buf),
        Err(PduError::DataDigest {
            pdu_type: 0x06,
            cccid: 0x2001
        })
    );
    assert_eq!(dec.decode(&mut buf), Ok(Some(h2c_data(5))));
    assert!(buf.is_empty());

    let mut capsule = encoded(&connect_capsule(), both);
    capsule[100] ^= 1;
    let err = decoder(Role::Controller, both)
        .decode(&mut capsule)
        .unwrap_err();
    assert_eq!(
        err,
        PduError::DataDigest {
            pdu_type: 0x04,
            cccid: 0x1005
        }
    );
    assert_eq!(err.term_req(), None);
    assert!(capsule.is_empty());
}

#[test]
fn bad_hlen() {
    let mut bytes = encoded(&connect_capsule(), Digests::default());
    bytes[2] = 24;
    let (fes, fei, _) = fatal(Role::Controller, Digests::default(), &bytes[..8]);
    assert_eq!((fes, fei), (fes::INVALID_HEADER_FIELD, 2));
}

#[test]
fn bad_type_for_role() {
    let resp = Pdu::CapsuleResp(CapsuleResp {
        cqe: Cqe::new(1, Status::SUCCESS),
    });
    let bytes = encoded(&resp, Digests::default());
    let (fes, fei, header) = fatal(Role::Controller, Digests::default(), &bytes);
    assert_eq!((fes, fei), (fes::INVALID_HEADER_FIELD, 0));
    assert_eq!(&header[..], &bytes[..]);

    let bytes = encoded(&h2c_data(4), Digests::default());
    assert_eq!(fatal(Role::Host, Digests::default(), &bytes).1, 0);
    let unknown = [0x08, 0, 24, 0, 24, 0, 0, 0];
    assert_eq!(fatal(Role::Host, Digests::default(), &unknown).1, 0);
}

#[test]
fn oversized_plen_is_refused_from_the_common_header() {
    // An H2CData announcing more than max_data: refused with just 8 bytes in hand.
    let mut head = [0x06, flags::LAST_PDU, 24, 24, 0, 0, 0, 0];
    head[4..8].copy_from_slice(&(24 + MAX_DATA + 1).to_le_bytes());
    let (fes, fei, header) = fatal(Role::Controller, Digests::default(), &head);
    assert_eq!((fes, fei), (fes::DATA_LIMIT_EXCEEDED, 4));
    assert_eq!(header.len(), 8);

    let mut capsule = [0x04, 0, 72, 72, 0, 0, 0, 0];
    capsule[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
    let (fes, fei, _) = fatal(Role::Controller, Digests::default(), &capsule);
    assert_eq!((fes, fei), (fes::INVALID_HEADER_FIELD, 4));

    // PDUs without data must be exactly their header.
    let r2t = [0x09, 0, 24, 0, 25, 0, 0, 0];
    assert_eq!(fatal(Role::Host, Digests::default(), &r2t).1, 4);
    let ic = [0x01, 0, 128, 0, 129, 0, 0, 0];
    assert_eq!(fatal(Role::Host, Digests::default(), &ic).1, 4);
    let term = [0x03, 0, 24, 24, 153, 0, 0, 0];
    assert_eq!(fatal(Role::Host, Digests::default(), &term).1, 4);
}

#[test]
fn truncated_input_waits() {
    let both = Digests {
        header: true,
        data: true,
    };
    let whole = encoded(&connect_capsule(), both);
    let mut dec = decoder(Role::Controller, both);
    for n in [0, 1, 7, 8, 72, 76, 1100, whole.len() - 1] {
        let mut buf = BytesMut::from(&whole[..n]);
        assert_eq!(dec.decode(&mut buf), Ok(None), "{n} bytes");
        assert_eq!(buf.len(), n);
    }
}

#[test]
fn datal_mismatch() {
    let mut bytes = encoded(&h2c_data(16), Digests::default());
    bytes[16] = 15;
    let (fes, fei, header) = fatal(Role::Controller, Digests::default(), &bytes);
    assert_eq!((fes, fei), (fes::INVALID_HEADER_FIELD, 16));
    assert_eq!(header.len(), 24);
    let term = PduError::Fatal {
        fes,
        fei,
        header: header.clone(),
        reason: "",
    }
    .term_req();
    assert_eq!(term, Some(TermReq { fes, fei, header }));
}

#[test]
fn digest_flags_must_match_negotiation() {
    let both = Digests {
        header: true,
        data: true,
    };
    // Sent without digests to a decoder that negotiated them.
    let bytes = encoded(&h2c_data(16), Digests::default());
    assert_eq!(fatal(Role::Controller, both, &bytes).1, 1);
    // Data digest negotiated, header digest flag right, DDGSTF missing.
    let only_data = Digests {
        header: false,
        data: true,
    };
    let mut bytes = encoded(&h2c_data(16), only_data);
    bytes[1] &= !flags::DDGSTF;
    assert_eq!(fatal(Role::Controller, only_data, &bytes).1, 1);
    // ICReq with digest flags.
    let mut ic = [0u8; 128];
    ic[..8].copy_from_slice(&[0, flags::HDGSTF, 128, 0, 128, 0, 0, 0]);
    assert_eq!(fatal(Role::Controller, both, &ic).1, 1);
}

#[test]
fn bad_pdo() {
    let mut bytes = encoded(&h2c_data(16), Digests::default());
    bytes[3] = 32;
    assert_eq!(fatal(Role::Controller, Digests::default(), &bytes).1, 3);
    let mut resp = encoded(
        &Pdu::CapsuleResp(CapsuleResp {
            cqe: Cqe::default(),
        }),
        Digests::default(),
    );
    resp[3] = 24;
    assert_eq!(fatal(Role::Host, Digests::default(), &resp).1, 3);
}

#[test]
fn bad_flags() {
    let c2h = |last, success| {
        Pdu::C2HData(C2HData {
            cccid: 1,
            datao: 0,
            last,
            success,
            data: Bytes::from_static(b"ab"),
        })
    };
    let mut bytes = encoded(&c2h(true, true), Digests::default());
    bytes[1] &= !flags::LAST_PDU;
    assert_eq!(fatal(Role::Host, Digests::default(), &bytes).1, 1);
    let mut capsule = encoded(&connect_capsule(), Digests::default());
    capsule[1] |= flags::LAST_PDU;
    assert_eq!(fatal(Role::Controller, Digests::default(), &capsule).1, 1);
}

#[test]
fn bad_specific_fields() {
    let none = Digests::default();
    let code = |role, bytes: &[u8]| {
        let (fes, fei, _) = fatal(role, none, bytes);
        (fes, fei)
    };
    let icreq = encoded(
        &Pdu::IcReq(IcReq {
            pfv: 0,
            hpda: 0,
            digests: none,
            maxr2t: 0,
        }),
        none,
    );
    let mut b = icreq.clone();
    b[8] = 1;
    assert_eq!(code(Role::Controller, &b), (fes::UNSUPPORTED_PARAMETER, 8));
    let mut b = icreq.clone();
    b[10] = 32;
    assert_eq!(code(Role::Controller, &b), (fes::INVALID_HEADER_FIELD, 10));
    let mut b = icreq.clone();
    b[11] = 4;
    assert_eq!(code(Role::Controller, &b), (fes::INVALID_HEADER_FIELD, 11));
    let mut b = icreq;
    b[127] = 1;
    assert_eq!(code(Role::Controller, &b), (fes::INVALID_HEADER_FIELD, 16));

    let icresp = IcResp {
        pfv: 0,
        cpda: 0,
        digests: none,
        maxh2cdata: 4095,
    };
    let b = encoded(&Pdu::IcResp(icresp), none);
    assert_eq!(code(Role::Host, &b), (fes::INVALID_HEADER_FIELD, 12));

    let r2t = R2T {
        cccid: 1,
        ttag: 2,
        r2to: 0,
        r2tl: 0,
    };
    let b = encoded(&Pdu::R2T(r2t), none);
    assert_eq!(code(Role::Host, &b), (fes::INVALID_HEADER_FIELD, 16));
    let mut b = encoded(&Pdu::R2T(R2T { r2tl: 1, ..r2t }), none);
    b[23] = 1;
    assert_eq!(code(Role::Host, &b), (fes::INVALID_HEADER_FIELD, 20));

    let mut b = encoded(&h2c_data(4), none);
    b[20] = 1;
    assert_eq!(code(Role::Controller, &b), (fes::INVALID_HEADER_FIELD, 20));
    let c2h = C2HData {
        cccid: 1,
        datao: 0,
        last: true,
        success: false,
        data: Bytes::new(),
    };
    let mut b = encoded(&Pdu::C2HData(c2h), none);
    b[10] = 1;
    assert_eq!(code(Role::Host, &b), (fes::INVALID_HEADER_FIELD, 10));
}
