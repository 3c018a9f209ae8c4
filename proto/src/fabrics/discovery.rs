//! The discovery log page (LID 70h): a 1024-byte header then 1024-byte entries.

use crate::error::{need, DecodeError};
use crate::fabrics::Transport;
use crate::le::*;
use crate::nvme::identify::ascii_field;

pub const DISCOVERY_HEADER_LEN: usize = 1024;
pub const DISCOVERY_ENTRY_LEN: usize = 1024;

/// TRTYPE codes of transports fabrik does not speak; its own are `Transport::trtype`.
pub mod trtype {
    pub const FC: u8 = 2;
    pub const LOOP: u8 = 254;
}
pub mod adrfam {
    pub const IPV4: u8 = 1;
    pub const IPV6: u8 = 2;
    pub const IB: u8 = 3;
    pub const FC: u8 = 4;
}
pub mod subtype {
    pub const REFERRAL: u8 = 1;
    pub const NVM: u8 = 2;
    pub const CURRENT_DISCOVERY: u8 = 3;
}
/// TREQ bits 1:0, the secure channel an entry's port asks for.
pub mod treq {
    pub const NOT_SPECIFIED: u8 = 0;
    pub const REQUIRED: u8 = 1;
    pub const NOT_REQUIRED: u8 = 2;
    pub const SECURE_CHANNEL_MASK: u8 = 3;
}

/// GENCTR 0..8, NUMREC 8..16, RECFMT 16..18.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct DiscoveryLogHeader {
    pub genctr: u64,
    pub numrec: u64,
    pub recfmt: u16,
}

/// Transport specific address subtype (TSAS, 256 bytes at 768).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Tsas {
    /// SECTYPE byte 0 (0 = none).
    Tcp { sectype: u8 },
    /// QPTYPE 0 (1 connected), PRTYPE 1 (4 RoCEv2 ...), CMS 2 (1 RDMA_CM), PKEY 8..10.
    Rdma {
        qptype: u8,
        prtype: u8,
        cms: u8,
        pkey: u16,
    },
    /// Anything else: the raw first 16 bytes.
    Other([u8; 16]),
}

/// One discovery log entry (1024 bytes). Offsets in NVMEOF-FACTS 5.2.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct DiscoveryLogEntry {
    pub trtype: u8,
    pub adrfam: u8,
    pub subtype: u8,
    pub treq: u8,
    pub portid: u16,
    pub cntlid: u16,
    pub asqsz: u16,
    pub eflags: u16,
    /// ASCII, at most 32 bytes.
    pub trsvcid: String,
    /// At most 223 bytes (kept as text: a referral's NQN is validated by whoever follows it).
    pub subnqn: String,
    /// ASCII, at most 256 bytes.
    pub traddr: String,
    pub tsas: Tsas,
}

/// Field offsets in a discovery log entry.
pub mod entry_offset {
    pub const TRTYPE: usize = 0;
    pub const ADRFAM: usize = 1;
    pub const SUBTYPE: usize = 2;
    pub const TREQ: usize = 3;
    pub const PORTID: usize = 4;
    pub const CNTLID: usize = 6;
    pub const ASQSZ: usize = 8;
    pub const EFLAGS: usize = 10;
    pub const TRSVCID: usize = 32;
    pub const SUBNQN: usize = 256;
    pub const TRADDR: usize = 512;
    pub const TSAS: usize = 768;
}
use entry_offset as off;

const TRSVCID_LEN: usize = 32;
const SUBNQN_LEN: usize = 256;
const TRADDR_LEN: usize = 256;

impl DiscoveryLogHeader {
    /// Writes the 1024-byte header (reserved bytes zero); `buf` must hold them.
    pub fn encode(&self, buf: &mut [u8]) {
        let b = &mut buf[..DISCOVERY_HEADER_LEN];
        b.fill(0);
        put_u64(b, 0, self.genctr);
        put_u64(b, 8, self.numrec);
        put_u16(b, 16, self.recfmt);
    }
    /// RECFMT is returned as sent (0 today); reserved bytes are not checked.
    pub fn decode(buf: &[u8]) -> Result<DiscoveryLogHeader, DecodeError> {
        need("discovery log header", buf, DISCOVERY_HEADER_LEN)?;
        Ok(DiscoveryLogHeader {
            genctr: u64_at(buf, 0),
            numrec: u64_at(buf, 8),
            recfmt: u16_at(buf, 16),
        })
    }
}

impl Tsas {
    /// The TSAS layout for a transport type; `raw` holds at least the first 16 TSAS bytes.
    fn decode(trtype: u8, raw: &[u8]) -> Tsas {
        match Transport::from_trtype(trtype) {
            Some(Transport::Tcp) => Tsas::Tcp { sectype: raw[0] },
            Some(Transport::Rdma) => Tsas::Rdma {
                qptype: raw[0],
                prtype: raw[1],
                cms: raw[2],
                pkey: u16_at(raw, 8),
            },
            _ => Tsas::Other(raw[..16].try_into().unwrap()),
        }
    }
    /// Writes the first 16 TSAS bytes (the rest of the 256 stay zero).
    fn encode(&self, raw: &mut [u8]) {
        raw[..16].fill(0);
        match *self {
            Tsas::Tcp { sectype } => raw[0] = sectype,
            Tsas::Rdma {
                qptype,
                prtype,
                cms,
                pkey,
            } => {
                raw[0] = qptype;
                raw[1] = prtype;
                raw[2] = cms;
                put_u16(raw, 8, pkey);
            }
            Tsas::Other(bytes) => raw[..16].copy_from_slice(&bytes),
        }
    }
}

/// TCP TSAS security types.
pub mod sectype {
    pub const NONE: u8 = 0;
    pub const TLS12: u8 = 1;
    pub const TLS13: u8 = 2;
}
/// RDMA TSAS values (QPTYPE, PRTYPE, CMS).
pub mod rdma {
    pub const QPTYPE_CONNECTED: u8 = 1;
    pub const PRTYPE_NOT_SPECIFIED: u8 = 1;
    pub const PRTYPE_IB: u8 = 2;
    pub const PRTYPE_ROCE: u8 = 3;
    pub const PRTYPE_ROCEV2: u8 = 4;
    pub const PRTYPE_IWARP: u8 = 5;
    pub const CMS_RDMA_CM: u8 = 1;
}

impl DiscoveryLogEntry {
    /// Writes the 1024-byte entry; `buf` must hold them. Text is NUL padded (and cut to the
    /// field), reserved bytes are zero.
    pub fn encode(&self, buf: &mut [u8]) {
        let b = &mut buf[..DISCOVERY_ENTRY_LEN];
        b.fill(0);
        b[off::TRTYPE] = self.trtype;
        b[off::ADRFAM] = self.adrfam;
        b[off::SUBTYPE] = self.subtype;
        b[off::TREQ] = self.treq;
        put_u16(b, off::PORTID, self.portid);
        put_u16(b, off::CNTLID, self.cntlid);
        put_u16(b, off::ASQSZ, self.asqsz);
        put_u16(b, off::EFLAGS, self.eflags);
        put_ascii(b, off::TRSVCID, TRSVCID_LEN, &self.trsvcid, 0);
        put_ascii(b, off::SUBNQN, SUBNQN_LEN, &self.subnqn, 0);
        put_ascii(b, off::TRADDR, TRADDR_LEN, &self.traddr, 0);
        self.tsas.encode(&mut b[off::TSAS..]);
    }
    /// Text fields are read up to the first NUL with trailing spaces removed; they must be ASCII.
    /// TSAS is read according to TRTYPE (TCP, RDMA, else the raw first 16 bytes). Reserved
    /// bytes are not checked (newer revisions use some; the spec has receivers ignore them).
    pub fn decode(buf: &[u8]) -> Result<DiscoveryLogEntry, DecodeError> {
        const WHAT: &str = "discovery log entry";
        need(WHAT, buf, DISCOVERY_ENTRY_LEN)?;
        let trtype = buf[off::TRTYPE];
        Ok(DiscoveryLogEntry {
            trtype,
            adrfam: buf[off::ADRFAM],
            subtype: buf[off::SUBTYPE],
            treq: buf[off::TREQ],
            portid: u16_at(buf, off::PORTID),
            cntlid: u16_at(buf, off::CNTLID),
            asqsz: u16_at(buf, off::ASQSZ),
            eflags: u16_at(buf, off::EFLAGS),
            trsvcid: ascii_field(WHAT, buf, off::TRSVCID, TRSVCID_LEN)?,
            subnqn: ascii_field(WHAT, buf, off::SUBNQN, SUBNQN_LEN)?,
            traddr: ascii_field(WHAT, buf, off::TRADDR, TRADDR_LEN)?,
            tsas: Tsas::decode(trtype, &buf[off::TSAS..off::TSAS + 16]),
        })
    }
}

/// The whole log page: header followed by the entries.
pub fn encode_discovery_log(genctr: u64, entries: &[DiscoveryLogEntry]) -> Vec<u8> {
    let mut page = vec![0u8; DISCOVERY_HEADER_LEN + entries.len() * DISCOVERY_ENTRY_LEN];
    DiscoveryLogHeader {
        genctr,
        numrec: entries.len() as u64,
        recfmt: 0,
    }
    .encode(&mut page);
    for (e, chunk) in entries
        .iter()
        .zip(page[DISCOVERY_HEADER_LEN..].chunks_exact_mut(DISCOVERY_ENTRY_LEN))
    {
        e.encode(chunk);
    }
    page
}

/// Decodes a whole page; fails if fewer entries are present than NUMREC says.
/// Bytes past the last entry are ignored. Errors in an entry name the offset in the page.
pub fn decode_discovery_log(
    buf: &[u8],
) -> Result<(DiscoveryLogHeader, Vec<DiscoveryLogEntry>), DecodeError> {
    const WHAT: &str = "discovery log page";
    let header = DiscoveryLogHeader::decode(buf)?;
    let len = usize::try_from(header.numrec)
        .ok()
        .and_then(|n| n.checked_mul(DISCOVERY_ENTRY_LEN))
        .and_then(|n| n.checked_add(DISCOVERY_HEADER_LEN))
        .ok_or(DecodeError::field(WHAT, 8, "NUMREC too large"))?;
    need(WHAT, buf, len)?;
    let entries = buf[DISCOVERY_HEADER_LEN..len]
        .chunks_exact(DISCOVERY_ENTRY_LEN)
        .enumerate()
        .map(|(i, chunk)| {
            DiscoveryLogEntry::decode(chunk).map_err(|e| match e {
                DecodeError::Field { offset, reason, .. } => DecodeError::field(
                    WHAT,
                    DISCOVERY_HEADER_LEN + i * DISCOVERY_ENTRY_LEN + offset,
                    reason,
                ),
                short => short, // cannot happen: the length was checked
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((header, entries))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvme::identify::tests::text;
    use proptest::prelude::*;

    fn any_entry() -> impl Strategy<Value = DiscoveryLogEntry> {
        let tsas = prop_oneof![
            any::<u8>().prop_map(|sectype| (Transport::Tcp.trtype(), Tsas::Tcp { sectype })),
            (any::<[u8; 3]>(), any::<u16>()).prop_map(|(b, pkey)| {
                (
                    Transport::Rdma.trtype(),
                    Tsas::Rdma {
                        qptype: b[0],
                        prtype: b[1],
                        cms: b[2],
                        pkey,
                    },
                )
            }),
            (
                any::<u8>().prop_filter("not TCP/RDMA", |t| Transport::from_trtype(*t).is_none()),
                any::<[u8; 16]>()
            )
                .prop_map(|(t, raw)| (t, Tsas::Other(raw))),
        ];
        (
            tsas,
            any::<[u8; 3]>(),
            any::<[u16; 4]>(),
            text(32),
            text(223),
            text(256),
        )
            .prop_map(|((trtype, tsas), b, w, trsvcid, subnqn, traddr)| {
                DiscoveryLogEntry {
                    trtype,
                    adrfam: b[0],
                    subtype: b[1],
                    treq: b[2],
                    portid: w[0],
                    cntlid: w[1],
                    asqsz: w[2],
                    eflags: w[3],
                    trsvcid,
                    subnqn,
                    traddr,
                    tsas,
                }
            })
    }

    proptest! {
        #[test]
        fn header_round_trip(genctr: u64, numrec: u64, recfmt: u16) {
            let h = DiscoveryLogHeader { genctr, numrec, recfmt };
            let mut b = [0xffu8; DISCOVERY_HEADER_LEN];
            h.encode(&mut b);
            prop_assert!(b[18..].iter().all(|&x| x == 0));
            prop_assert_eq!(DiscoveryLogHeader::decode(&b), Ok(h));
        }

        #[test]
        fn entry_round_trip(e in any_entry()) {
            let mut b = [0xffu8; DISCOVERY_ENTRY_LEN];
            e.encode(&mut b);
            prop_assert_eq!(DiscoveryLogEntry::decode(&b), Ok(e));
        }

        #[test]
        fn page_round_trip(genctr: u64, entries in proptest::collection::vec(any_entry(), 0..6)) {
            let page = encode_discovery_log(genctr, &entries);
            prop_assert_eq!(page.len(), 1024 * (entries.len() + 1));
            let (h, d) = decode_discovery_log(&page).unwrap();
            prop_assert_eq!(h, DiscoveryLogHeader { genctr, numrec: entries.len() as u64, recfmt: 0 });
            prop_assert_eq!(d, entries);
        }

        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..3100), numrec in 0u64..4) {
            let _ = DiscoveryLogHeader::decode(&bytes);
            if let Ok(e) = DiscoveryLogEntry::decode(&bytes) {
                let mut b = [0u8; DISCOVERY_ENTRY_LEN];
                e.encode(&mut b);
                prop_assert_eq!(DiscoveryLogEntry::decode(&b), Ok(e));
            }
            let _ = decode_discovery_log(&bytes);
            let mut bytes = bytes;
            if bytes.len() >= 16 {
                bytes[8..16].copy_from_slice(&numrec.to_le_bytes());
                let _ = decode_discovery_log(&bytes);
            }
        }
    }

    fn tcp_entry() -> DiscoveryLogEntry {
        DiscoveryLogEntry {
            trtype: Transport::Tcp.trtype(),
            adrfam: adrfam::IPV4,
            subtype: subtype::NVM,
            treq: 0,
            portid: 1,
            cntlid: 0xffff,
            asqsz: 32,
            eflags: 0,
            trsvcid: "4420".into(),
            subnqn: "nqn.2024-01.io.fabrik:jbof:drive-07".into(),
            traddr: "192.168.1.10".into(),
            tsas: Tsas::Tcp {
                sectype: sectype::NONE,
            },
        }
    }

    #[test]
    fn entry_offsets() {
        let mut e = tcp_entry();
        e.treq = 4;
        e.eflags = 3;
        let mut b = [0u8; DISCOVERY_ENTRY_LEN];
        e.encode(&mut b);
        assert_eq!(&b[0..12], &[3, 1, 2, 4, 1, 0, 0xff, 0xff, 32, 0, 3, 0]);
        assert_eq!(&b[32..37], b"4420\0");
        assert!(b[36..256].iter().all(|&x| x == 0));
        assert_eq!(&b[256..291], b"nqn.2024-01.io.fabrik:jbof:drive-07");
        assert_eq!(b[291], 0);
        assert_eq!(&b[512..525], b"192.168.1.10\0");
        assert!(b[768..].iter().all(|&x| x == 0));
        assert_eq!(DiscoveryLogEntry::decode(&b), Ok(e));

        let rdma = DiscoveryLogEntry {
            trtype: Transport::Rdma.trtype(),
            tsas: Tsas::Rdma {
                qptype: rdma::QPTYPE_CONNECTED,
                prtype: rdma::PRTYPE_ROCEV2,
                cms: rdma::CMS_RDMA_CM,
                pkey: 0xffff,
            },
            ..tcp_entry()
        };
        rdma.encode(&mut b);
        assert_eq!(&b[768..780], &[1, 4, 1, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0]);
        assert_eq!(DiscoveryLogEntry::decode(&b), Ok(rdma));

        // Other transports keep the raw bytes.
        let fc = DiscoveryLogEntry {
            trtype: trtype::FC,
            tsas: Tsas::Other([7; 16]),
            ..tcp_entry()
        };
        fc.encode(&mut b);
        assert_eq!(&b[768..784], &[7; 16]);
        assert_eq!(b[784], 0);
        assert_eq!(DiscoveryLogEntry::decode(&b), Ok(fc));
    }

    #[test]
    fn entry_text_decoding() {
        let mut b = [0u8; DISCOVERY_ENTRY_LEN];
        tcp_entry().encode(&mut b);
        // Space padding (older targets) is stripped like NUL padding.
        b[36..64].fill(b' ');
        b[524..768].fill(b' ');
        assert_eq!(DiscoveryLogEntry::decode(&b), Ok(tcp_entry()));
        // Text after the first NUL is ignored.
        b[40] = 0;
        b[41] = 0xff;
        assert_eq!(DiscoveryLogEntry::decode(&b), Ok(tcp_entry()));
        // Non-ASCII text: the error names the field.
        for (at, field) in [(33, 32), (270, 256), (515, 512)] {
            let mut bad = [0u8; DISCOVERY_ENTRY_LEN];
            tcp_entry().encode(&mut bad);
            bad[at] = 0xc3;
            assert_eq!(DiscoveryLogEntry::decode(&bad).unwrap_err().offset(), field);
        }
        // A TSAS inconsistent with TRTYPE is read by TRTYPE.
        let mut b = [0u8; DISCOVERY_ENTRY_LEN];
        DiscoveryLogEntry {
            tsas: Tsas::Rdma {
                qptype: 1,
                prtype: 2,
                cms: 3,
                pkey: 4,
            },
            ..tcp_entry()
        }
        .encode(&mut b);
        assert_eq!(
            DiscoveryLogEntry::decode(&b).unwrap().tsas,
            Tsas::Tcp { sectype: 1 }
        );
        assert!(matches!(
            DiscoveryLogEntry::decode(&b[..1023]),
            Err(DecodeError::Short { .. })
        ));
    }

    #[test]
    fn page_layout() {
        let e2 = DiscoveryLogEntry {
            subtype: subtype::REFERRAL,
            portid: 2,
            ..tcp_entry()
        };
        let page = encode_discovery_log(7, &[tcp_entry(), e2.clone()]);
        assert_eq!(page.len(), 3 * 1024);
        assert_eq!(
            &page[0..18],
            &[7, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(page[1024], Transport::Tcp.trtype());
        assert_eq!(page[2048 + 2], subtype::REFERRAL);
        assert_eq!(&page[2048 + 512..2048 + 524], b"192.168.1.10");
        let (h, entries) = decode_discovery_log(&page).unwrap();
        assert_eq!(h.numrec, 2);
        assert_eq!(entries, vec![tcp_entry(), e2]);

        // Header only (libnvme's first read) decodes when NUMREC is 0, else it is short.
        assert_eq!(
            decode_discovery_log(&page[..1024]).unwrap_err().offset(),
            1024
        );
        let empty = encode_discovery_log(1, &[]);
        assert_eq!(
            decode_discovery_log(&empty),
            Ok((
                DiscoveryLogHeader {
                    genctr: 1,
                    numrec: 0,
                    recfmt: 0
                },
                vec![]
            ))
        );
        // Fewer entries than NUMREC.
        assert!(matches!(
            decode_discovery_log(&page[..2048 + 1023]),
            Err(DecodeError::Short { .. })
        ));
        // Extra bytes after the last entry are ignored.
        let mut longer = page.clone();
        longer.extend_from_slice(&[0xff; 100]);
        assert_eq!(decode_discovery_log(&longer).unwrap().1.len(), 2);
        // Absurd NUMREC.
        let mut bad = page.clone();
        bad[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(decode_discovery_log(&bad).is_err());
        // An error in an entry names its offset in the page.
        let mut bad = page;
        bad[2048 + 520] = 0x80;
        assert_eq!(decode_discovery_log(&bad).unwrap_err().offset(), 2048 + 512);
    }
}
