//! Discovery Information Management (TP8010, admin opcode 21h): the data a host or a DDC sends a
//! Central Discovery Controller to register, deregister or update itself. A 1024-byte header
//! then NUMENT Discovery Information Entries (DIEs); see CDC facts §1.
//!
//! Two entry formats exist. Basic (ENTFMT 1): each DIE is a plain 1024-byte discovery log entry.
//! Extended (ENTFMT 2, what libnvme sends): the same 1024 bytes with EFLAGS reserved, then TEL,
//! NUMEXAT and extended attributes, so each DIE has its own length. Encoding always writes the
//! extended format; decoding takes both.

use thiserror::Error;

use crate::error::DecodeError;
use crate::fabrics::discovery::{DiscoveryLogEntry, Tsas, DISCOVERY_ENTRY_LEN};
use crate::le::*;
use crate::nvme::identify::{ascii_field, utf8_field};

/// The DIM data header (before the first entry).
pub const DIM_HEADER_LEN: usize = 1024;
/// The shortest extended entry: the 1024-byte entry part, TEL, NUMEXAT, 2 reserved bytes.
pub const DIM_EXT_ENTRY_MIN_LEN: usize = 1032;
/// A sanity bound on NUMENT: a registration carries one entry (libnvme) or a few (a DDC's
/// ports); more than this is not data we will allocate for.
pub const DIM_MAX_ENTRIES: usize = 1024;
/// Largest EXATLEN: a multiple of 4 that fits in 16 bits. Longer values are cut to it.
pub const MAX_EXATLEN: usize = 0xfffc;
/// Entry Key Type: libnvme always writes 5Fh ("must be 0x5F per specs").
pub const EKTYPE: u16 = 0x5F;

/// Task (CDW10 bits 3:0).
pub mod tas {
    pub const REGISTER: u8 = 0;
    pub const DEREGISTER: u8 = 1;
    pub const UPDATE: u8 = 2;
}
/// Entity Type (ETYPE): who is registering.
pub mod etype {
    pub const HOST: u16 = 1;
    pub const DDC: u16 = 2;
    pub const CDC: u16 = 3;
}
/// Entry Format (ENTFMT).
pub mod entfmt {
    pub const BASIC: u16 = 1;
    pub const EXTENDED: u16 = 2;
}
/// Extended attribute types (EXATTYPE); libnvme defines no others.
pub mod exattype {
    /// The 16 raw bytes of the host identifier.
    pub const HOSTID: u16 = 1;
    /// The host's symbolic name: ASCII, space padded.
    pub const SYMNAME: u16 = 2;
}

/// Field offsets. Header fields from the start of the data; TEL, NUMEXAT and EXAT from the start
/// of an extended entry (its first 1024 bytes are a discovery log entry's, see
/// `discovery::entry_offset`, with EFLAGS reserved); EXATTYPE, EXATLEN and EXATVAL from the start
/// of an attribute.
pub mod offset {
    pub const TDL: usize = 0;
    pub const NUMENT: usize = 8;
    pub const ENTFMT: usize = 16;
    pub const ETYPE: usize = 18;
    pub const PORTLCL: usize = 20;
    pub const EKTYPE: usize = 22;
    pub const EID: usize = 24;
    pub const ENAME: usize = 280;
    pub const EVER: usize = 536;
    pub const TEL: usize = 1024;
    pub const NUMEXAT: usize = 1028;
    pub const EXAT: usize = 1032;
    pub const EXATTYPE: usize = 0;
    pub const EXATLEN: usize = 2;
    pub const EXATVAL: usize = 4;
}
use offset as off;

const EID_LEN: usize = 256;
const ENAME_LEN: usize = 256;
const EVER_LEN: usize = 64;

/// One extended attribute (EXAT): EXATTYPE, EXATLEN, then the value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtAttr {
    /// EXATTYPE (`exattype`); unknown types are kept as sent.
    pub kind: u16,
    /// The value as received, with its padding to a multiple of 4 (EXATLEN rounded up: libnvme
    /// sends the padded length, others may send the bare one and pad).
    pub value: Vec<u8>,
}

impl ExtAttr {
    /// A HOSTID attribute.
    pub fn hostid(id: [u8; 16]) -> ExtAttr {
        ExtAttr {
            kind: exattype::HOSTID,
            value: id.to_vec(),
        }
    }
    /// A SYMNAME attribute (the encoder pads it with spaces).
    pub fn symname(name: &str) -> ExtAttr {
        ExtAttr {
            kind: exattype::SYMNAME,
            value: name.as_bytes().to_vec(),
        }
    }
}

/// One Discovery Information Entry. Same fields as a discovery log entry, less EFLAGS (reserved
/// in a DIE), plus the extended attributes (none in the basic format).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DimEntry {
    pub trtype: u8,
    pub adrfam: u8,
    pub subtype: u8,
    pub treq: u8,
    pub portid: u16,
    pub cntlid: u16,
    pub asqsz: u16,
    /// ASCII, at most 32 bytes.
    pub trsvcid: String,
    /// The host NQN when ETYPE is host; ASCII, at most 256 bytes.
    pub nqn: String,
    /// ASCII, at most 256 bytes. Empty (libnvme) asks the DC to use the connection's source
    /// address.
    pub traddr: String,
    pub tsas: Tsas,
    pub exats: Vec<ExtAttr>,
}

/// A discovery log entry as a DIE without extended attributes (EFLAGS dropped).
impl From<DiscoveryLogEntry> for DimEntry {
    fn from(e: DiscoveryLogEntry) -> DimEntry {
        DimEntry {
            trtype: e.trtype,
            adrfam: e.adrfam,
            subtype: e.subtype,
            treq: e.treq,
            portid: e.portid,
            cntlid: e.cntlid,
            asqsz: e.asqsz,
            trsvcid: e.trsvcid,
            nqn: e.subnqn,
            traddr: e.traddr,
            tsas: e.tsas,
            exats: Vec::new(),
        }
    }
}

/// The DIM command's data. ENTFMT and the lengths (TDL, TEL, NUMENT, NUMEXAT, EXATLEN) are not
/// kept: they follow from the entries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DimData {
    /// ETYPE (`etype`), returned as sent: whether it is one the CDC accepts is its call.
    pub etype: u16,
    pub portlcl: u8,
    /// EKTYPE, returned as sent (see [`EKTYPE`]).
    pub ektype: u16,
    /// Entity ID (the host NQN for a host); UTF-8, at most 256 bytes.
    pub eid: String,
    /// Entity name (libnvme: the host name); ASCII, at most 256 bytes.
    pub ename: String,
    /// Entity version (libnvme: "sysname release PRETTY_NAME"); ASCII, at most 64 bytes.
    pub ever: String,
    pub entries: Vec<DimEntry>,
}

/// Why DIM data is malformed. Every variant names a byte offset in the data (`offset`), for
/// logs and for the controller's error log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum DimError {
    #[error("DIM data: need {need} bytes, have {have}")]
    Short { need: usize, have: usize },
    #[error("DIM data: TDL {tdl} is below the 1024-byte header or above the {have} bytes sent")]
    Tdl { tdl: u32, have: usize },
    #[error("DIM data: unknown ENTFMT {0}")]
    Entfmt(u16),
    #[error("DIM data: NUMENT {nument} entries do not fit in TDL {tdl} (or exceed 1024)")]
    Nument { nument: u64, tdl: u32 },
    #[error("DIM data: invalid field at byte {offset}: {reason}")]
    Field { offset: usize, reason: &'static str },
    #[error("DIM data: entry {index}: invalid field at byte {offset}: {reason}")]
    Entry {
        index: usize,
        offset: usize,
        reason: &'static str,
    },
}

impl DimError {
    /// Byte offset of the offending field in the data (the length boundary for short input).
    pub fn offset(&self) -> usize {
        match *self {
            DimError::Short { have, .. } => have,
            DimError::Tdl { .. } => off::TDL,
            DimError::Entfmt(_) => off::ENTFMT,
            DimError::Nument { .. } => off::NUMENT,
            DimError::Field { offset, .. } | DimError::Entry { offset, .. } => offset,
        }
    }

    /// An error of a field decoder, moved to `base` in the data.
    fn at(index: Option<usize>, base: usize, e: DecodeError) -> DimError {
        let (offset, reason) = match e {
            DecodeError::Field { offset, reason, .. } => (base + offset, reason),
            // Never: every length is checked before a field is read.
            DecodeError::Short { have, .. } => (base + have, "field runs past the data"),
        };
        match index {
            Some(index) => DimError::Entry {
                index,
                offset,
                reason,
            },
            None => DimError::Field { offset, reason },
        }
    }
}

/// `n` rounded up to a multiple of 4 (EXATLEN, TEL).
fn round_up4(n: usize) -> usize {
    n.next_multiple_of(4)
}

/// Writes UTF-8 text NUL padded, cut to the field at a character boundary (so the field always
/// decodes back).
fn put_text(b: &mut [u8], at: usize, len: usize, s: &str) {
    let mut n = s.len().min(len);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    put_ascii(b, at, len, &s[..n], 0);
}

impl DimEntry {
    /// The SYMNAME attribute's text, trailing spaces and NULs (padding) removed; bytes that are
    /// not UTF-8 are replaced. None without a SYMNAME attribute.
    pub fn symname(&self) -> Option<String> {
        let a = self.exats.iter().find(|a| a.kind == exattype::SYMNAME)?;
        let text = String::from_utf8_lossy(&a.value);
        Some(text.trim_end_matches([' ', '\0']).to_string())
    }

    /// The HOSTID attribute's 16 bytes. None without one, or when its value is not 16 bytes.
    pub fn hostid(&self) -> Option<[u8; 16]> {
        let a = self.exats.iter().find(|a| a.kind == exattype::HOSTID)?;
        a.value.as_slice().try_into().ok()
    }

    /// Attribute values as encoded: cut to [`MAX_EXATLEN`], at most 65535 of them.
    fn encoded_exats(&self) -> impl Iterator<Item = (&ExtAttr, &[u8])> {
        self.exats
            .iter()
            .take(u16::MAX as usize)
            .map(|a| (a, &a.value[..a.value.len().min(MAX_EXATLEN)]))
    }

    /// TEL: this entry's length in the extended format.
    pub fn encoded_len(&self) -> usize {
        DIM_EXT_ENTRY_MIN_LEN
            + self
                .encoded_exats()
                .map(|(_, v)| 4 + round_up4(v.len()))
                .sum::<usize>()
    }

    /// Its first 1024 bytes as a discovery log entry (the same layout; EFLAGS is reserved in a
    /// DIE).
    pub fn log_entry(&self) -> DiscoveryLogEntry {
        DiscoveryLogEntry {
            trtype: self.trtype,
            adrfam: self.adrfam,
            subtype: self.subtype,
            treq: self.treq,
            portid: self.portid,
            cntlid: self.cntlid,
            asqsz: self.asqsz,
            eflags: 0,
            trsvcid: self.trsvcid.clone(),
            subnqn: self.nqn.clone(),
            traddr: self.traddr.clone(),
            tsas: self.tsas,
        }
    }

    /// Writes the extended entry into `b`, which holds exactly `encoded_len()` zeroed bytes.
    fn encode(&self, b: &mut [u8]) {
        self.log_entry().encode(b);
        put_u32(b, off::TEL, b.len() as u32);
        put_u16(b, off::NUMEXAT, self.encoded_exats().count() as u16);
        let mut at = off::EXAT;
        for (a, value) in self.encoded_exats() {
            let padded = round_up4(value.len());
            put_u16(b, at + off::EXATTYPE, a.kind);
            put_u16(b, at + off::EXATLEN, padded as u16);
            let v = &mut b[at + off::EXATVAL..at + off::EXATVAL + padded];
            // "Per Base specs, ASCII strings must be padded with spaces" (libnvme).
            v.fill(if a.kind == exattype::SYMNAME { b' ' } else { 0 });
            v[..value.len()].copy_from_slice(value);
            at += off::EXATVAL + padded;
        }
    }

    /// The 1024-byte entry part, read as a discovery log entry (same layout, same text rules;
    /// EFLAGS ignored). `at` is where the entry starts in the data, for error offsets.
    fn decode_base(b: &[u8], index: usize, at: usize) -> Result<DimEntry, DimError> {
        DiscoveryLogEntry::decode(&b[..DISCOVERY_ENTRY_LEN])
            .map(DimEntry::from)
            .map_err(|e| DimError::at(Some(index), at, e))
    }

    /// An extended entry starting at `at` in `data` (which ends at TDL); returns it and TEL.
    fn decode_extended(
        data: &[u8],
        index: usize,
        at: usize,
    ) -> Result<(DimEntry, usize), DimError> {
        let bad = |offset, reason| DimError::Entry {
            index,
            offset,
            reason,
        };
        if data.len() - at < DIM_EXT_ENTRY_MIN_LEN {
            return Err(bad(at, "entry runs past TDL"));
        }
        let tel = u32_at(data, at + off::TEL) as usize;
        if tel < DIM_EXT_ENTRY_MIN_LEN {
            return Err(bad(at + off::TEL, "TEL below 1032"));
        }
        if !tel.is_multiple_of(4) {
            return Err(bad(at + off::TEL, "TEL not a multiple of 4"));
        }
        if tel > data.len() - at {
            return Err(bad(at + off::TEL, "TEL runs past TDL"));
        }
        let b = &data[at..at + tel];
        let mut entry = DimEntry::decode_base(b, index, at)?;
        let numexat = u16_at(b, off::NUMEXAT) as usize;
        let mut p = off::EXAT;
        for _ in 0..numexat {
            if tel - p < off::EXATVAL {
                return Err(bad(at + off::NUMEXAT, "NUMEXAT attributes run past TEL"));
            }
            let len = u16_at(b, p + off::EXATLEN) as usize;
            // libnvme puts the padded length in EXATLEN; a sender that puts the unpadded one
            // still pads the value, so the next attribute starts at the next multiple of 4.
            let padded = round_up4(len);
            // Past MAX_EXATLEN (65533..65535 rounded up) the value could not be encoded back.
            if padded > MAX_EXATLEN {
                return Err(bad(at + p + off::EXATLEN, "EXATLEN past 65532"));
            }
            if padded > tel - p - off::EXATVAL {
                return Err(bad(at + p + off::EXATLEN, "EXATLEN runs past TEL"));
            }
            let value = p + off::EXATVAL;
            entry.exats.push(ExtAttr {
                kind: u16_at(b, p + off::EXATTYPE),
                // With its padding: what the attribute occupies, so it encodes back the same.
                value: b[value..value + padded].to_vec(),
            });
            p = value + padded;
        }
        Ok((entry, tel))
    }
}

impl DimData {
    /// TDL: the header and every entry in the extended format.
    pub fn encoded_len(&self) -> usize {
        DIM_HEADER_LEN
            + self
                .entries
                .iter()
                .map(DimEntry::encoded_len)
                .sum::<usize>()
    }

    /// The data in the extended format (ENTFMT 2), as libnvme builds it. Text is NUL padded and
    /// cut to its field, attribute values are padded to a multiple of 4 (SYMNAME with spaces,
    /// others with zeros) with EXATLEN the padded length, reserved bytes are zero. NUMENT is not
    /// bounded here: more than [`DIM_MAX_ENTRIES`] does not decode.
    pub fn encode(&self) -> Vec<u8> {
        let tdl = self.encoded_len();
        let mut b = vec![0u8; tdl];
        put_u32(&mut b, off::TDL, u32::try_from(tdl).unwrap_or(u32::MAX));
        put_u64(&mut b, off::NUMENT, self.entries.len() as u64);
        put_u16(&mut b, off::ENTFMT, entfmt::EXTENDED);
        put_u16(&mut b, off::ETYPE, self.etype);
        b[off::PORTLCL] = self.portlcl;
        put_u16(&mut b, off::EKTYPE, self.ektype);
        put_text(&mut b, off::EID, EID_LEN, &self.eid);
        put_text(&mut b, off::ENAME, ENAME_LEN, &self.ename);
        put_text(&mut b, off::EVER, EVER_LEN, &self.ever);
        let mut at = DIM_HEADER_LEN;
        for e in &self.entries {
            let tel = e.encoded_len();
            e.encode(&mut b[at..at + tel]);
            at += tel;
        }
        b
    }

    /// Decodes either entry format. Checked: TDL between 1024 and the bytes sent (bytes past TDL
    /// are not looked at), ENTFMT known, NUMENT at most 1024 and its entries within TDL, each
    /// extended entry's TEL (at least 1032, a multiple of 4, within TDL), its attributes within
    /// TEL, and the text: EID UTF-8 without control characters (an NQN), the others printable
    /// ASCII; each read up to its first NUL, trailing spaces dropped. Bytes after the last entry
    /// (up to TDL) and after the last attribute (up to TEL) are ignored, as are reserved bytes.
    /// ETYPE, PORTLCL, EKTYPE and attribute types are returned as sent: judging them is the
    /// controller's job (Invalid Discovery Information).
    pub fn decode(buf: &[u8]) -> Result<DimData, DimError> {
        const WHAT: &str = "DIM data";
        if buf.len() < DIM_HEADER_LEN {
            return Err(DimError::Short {
                need: DIM_HEADER_LEN,
                have: buf.len(),
            });
        }
        let tdl = u32_at(buf, off::TDL);
        let len = usize::try_from(tdl).unwrap_or(usize::MAX);
        if len < DIM_HEADER_LEN || len > buf.len() {
            return Err(DimError::Tdl {
                tdl,
                have: buf.len(),
            });
        }
        let data = &buf[..len];
        let format = u16_at(data, off::ENTFMT);
        let min_entry = match format {
            entfmt::BASIC => DISCOVERY_ENTRY_LEN,
            entfmt::EXTENDED => DIM_EXT_ENTRY_MIN_LEN,
            other => return Err(DimError::Entfmt(other)),
        };
        let nument = u64_at(data, off::NUMENT);
        if nument > DIM_MAX_ENTRIES as u64 || DIM_HEADER_LEN + nument as usize * min_entry > len {
            return Err(DimError::Nument { nument, tdl });
        }
        let text = |at, n| ascii_field(WHAT, data, at, n).map_err(|e| DimError::at(None, 0, e));
        let eid =
            utf8_field(WHAT, data, off::EID, EID_LEN).map_err(|e| DimError::at(None, 0, e))?;
        let ename = text(off::ENAME, ENAME_LEN)?;
        let ever = text(off::EVER, EVER_LEN)?;
        let mut entries = Vec::with_capacity(nument as usize);
        let mut at = DIM_HEADER_LEN;
        for index in 0..nument as usize {
            if format == entfmt::BASIC {
                // The NUMENT check above put every basic entry within TDL.
                entries.push(DimEntry::decode_base(&data[at..], index, at)?);
                at += DISCOVERY_ENTRY_LEN;
            } else {
                let (entry, tel) = DimEntry::decode_extended(data, index, at)?;
                entries.push(entry);
                at += tel;
            }
        }
        Ok(DimData {
            etype: u16_at(data, off::ETYPE),
            portlcl: data[off::PORTLCL],
            ektype: u16_at(data, off::EKTYPE),
            eid,
            ename,
            ever,
            entries,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabrics::discovery::{adrfam, sectype, subtype};
    use crate::fabrics::Transport;
    use crate::nvme::identify::tests::text;
    use proptest::prelude::*;

    const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:5b7c9a8e-3f5d-4e2a-9c1b-0d6e4f3a2b1c";
    const HOSTID: [u8; 16] = [
        0x5b, 0x7c, 0x9a, 0x8e, 0x3f, 0x5d, 0x4e, 0x2a, 0x9c, 0x1b, 0x0d, 0x6e, 0x4f, 0x3a, 0x2b,
        0x1c,
    ];

    fn host_entry() -> DimEntry {
        DimEntry {
            trtype: Transport::Tcp.trtype(),
            adrfam: adrfam::IPV4,
            subtype: 0,
            treq: 0,
            portid: 0,
            cntlid: 0,
            asqsz: 0,
            trsvcid: String::new(),
            nqn: HOSTNQN.into(),
            traddr: String::new(),
            tsas: Tsas::Tcp {
                sectype: sectype::NONE,
            },
            exats: vec![ExtAttr::hostid(HOSTID)],
        }
    }

    fn register() -> DimData {
        DimData {
            etype: etype::HOST,
            portlcl: 0,
            ektype: EKTYPE,
            eid: HOSTNQN.into(),
            ename: "gpu-node-07".into(),
            ever: "Linux 6.8.0-45-generic Ubuntu 24.04.1 LTS".into(),
            entries: vec![host_entry()],
        }
    }

    #[test]
    fn offsets() {
        let mut d = register();
        d.portlcl = 1;
        d.entries[0].traddr = "192.168.7.20".into();
        d.entries[0].exats.push(ExtAttr::symname("gpu07"));
        let b = d.encode();
        // TEL = 1032 + (4 + 16) + (4 + 8), TDL = 1024 + TEL.
        assert_eq!(b.len(), 2088);
        assert_eq!(&b[0..4], &2088u32.to_le_bytes());
        assert_eq!(&b[8..16], &1u64.to_le_bytes());
        assert_eq!(&b[16..18], &[2, 0]);
        assert_eq!(&b[18..20], &[1, 0]);
        assert_eq!((b[20], b[21]), (1, 0));
        assert_eq!(&b[22..24], &[0x5f, 0]);
        assert_eq!(&b[24..24 + HOSTNQN.len()], HOSTNQN.as_bytes());
        assert!(b[24 + HOSTNQN.len()..280].iter().all(|&x| x == 0));
        assert_eq!(&b[280..291], b"gpu-node-07");
        assert!(b[291..536].iter().all(|&x| x == 0));
        assert_eq!(&b[536..577], b"Linux 6.8.0-45-generic Ubuntu 24.04.1 LTS");
        assert!(b[577..1024].iter().all(|&x| x == 0));
        // The entry.
        let e = 1024;
        assert_eq!(&b[e..e + 4], &[3, 1, 0, 0]);
        assert_eq!(&b[e + 256..e + 256 + HOSTNQN.len()], HOSTNQN.as_bytes());
        assert_eq!(&b[e + 512..e + 525], b"192.168.7.20\0");
        assert!(b[e + 768..e + 1024].iter().all(|&x| x == 0));
        assert_eq!(&b[e + 1024..e + 1028], &1064u32.to_le_bytes());
        assert_eq!(&b[e + 1028..e + 1032], &[2, 0, 0, 0]);
        // HOSTID: type 1, EXATLEN 16, the 16 bytes.
        assert_eq!(&b[e + 1032..e + 1036], &[1, 0, 16, 0]);
        assert_eq!(&b[e + 1036..e + 1052], &HOSTID);
        // SYMNAME: type 2, EXATLEN 8 (5 rounded up), space padded.
        assert_eq!(&b[e + 1052..e + 1056], &[2, 0, 8, 0]);
        assert_eq!(&b[e + 1056..e + 1064], b"gpu07   ");
        assert_eq!(e + 1064, b.len());

        let back = DimData::decode(&b).unwrap();
        assert_eq!(back.entries[0].symname().as_deref(), Some("gpu07"));
        assert_eq!(back.entries[0].hostid(), Some(HOSTID));
        assert_eq!(back.entries[0].exats[1].value, b"gpu07   ");
        assert_eq!(back.entries[0].exats[0], ExtAttr::hostid(HOSTID));
        assert_eq!(
            DimData {
                entries: vec![],
                ..back
            },
            DimData {
                entries: vec![],
                ..d
            }
        );
    }

    /// The bytes libnvme's `nvmf_dim` builds for `nvme dim --task register`, written field by
    /// field from its code (not through `encode`): one extended host entry, HOSTID only.
    fn libnvme_register_image() -> Vec<u8> {
        let mut b = vec![0u8; 2076];
        b[0..4].copy_from_slice(&2076u32.to_le_bytes());
        b[8] = 1; // NUMENT
        b[16] = 2; // ENTFMT extended
        b[18] = 1; // ETYPE host
        b[22] = 0x5f; // EKTYPE
        b[24..24 + HOSTNQN.len()].copy_from_slice(HOSTNQN.as_bytes());
        b[280..291].copy_from_slice(b"gpu-node-07");
        let ever = b"Linux 6.8.0-45-generic Ubuntu 24.04.1 LTS";
        b[536..536 + ever.len()].copy_from_slice(ever);
        let e = 1024;
        b[e] = 3; // TCP
        b[e + 1] = 1; // IPv4
        b[e + 256..e + 256 + HOSTNQN.len()].copy_from_slice(HOSTNQN.as_bytes());
        // TRADDR empty, TSAS zero.
        b[e + 1024..e + 1028].copy_from_slice(&1052u32.to_le_bytes());
        b[e + 1028] = 1; // NUMEXAT
        b[e + 1032] = 1; // HOSTID
        b[e + 1034] = 16;
        b[e + 1036..e + 1052].copy_from_slice(&HOSTID);
        b
    }

    #[test]
    fn libnvme_register_decodes() {
        let image = libnvme_register_image();
        let d = DimData::decode(&image).unwrap();
        assert_eq!(d, register());
        assert_eq!(d.entries[0].hostid(), Some(HOSTID));
        assert_eq!(d.entries[0].symname(), None);
        assert_eq!(d.entries[0].encoded_len(), 1052);
        assert_eq!(d.encoded_len(), 2076);
        assert_eq!(d.encode(), image);
        // A transfer longer than TDL: the bytes past it are not read.
        let mut longer = image.clone();
        longer.extend_from_slice(&[0xff; 64]);
        assert_eq!(DimData::decode(&longer), Ok(register()));
    }

    #[test]
    fn basic_format() {
        // ENTFMT 1: 1024-byte discovery log entries; EFLAGS ignored, no attributes.
        let mut b = vec![0u8; 1024 + 2048];
        b[0..4].copy_from_slice(&3072u32.to_le_bytes());
        b[8] = 2;
        b[16] = 1;
        b[18] = etype::DDC as u8;
        b[24..31].copy_from_slice(b"nqn.ddc");
        for (i, port) in [(0usize, b"4420"), (1, b"8009")] {
            let e = 1024 + i * 1024;
            b[e] = 3;
            b[e + 1] = 1;
            b[e + 2] = subtype::NVM;
            b[e + 4] = i as u8 + 1;
            b[e + 10] = 0xff; // EFLAGS
            b[e + 32..e + 36].copy_from_slice(port);
            b[e + 256..e + 263].copy_from_slice(b"nqn.sub");
            b[e + 512..e + 520].copy_from_slice(b"10.0.0.1");
        }
        let d = DimData::decode(&b).unwrap();
        assert_eq!((d.etype, d.eid.as_str()), (etype::DDC, "nqn.ddc"));
        assert_eq!(d.entries.len(), 2);
        assert_eq!(d.entries[1].portid, 2);
        assert_eq!(d.entries[1].trsvcid, "8009");
        assert_eq!(d.entries[0].traddr, "10.0.0.1");
        assert!(d.entries.iter().all(|e| e.exats.is_empty()));
        // Re-encoded, it is extended.
        let again = d.encode();
        assert_eq!(&again[16..18], &[2, 0]);
        assert_eq!(again.len(), 1024 + 2 * 1032);
        assert_eq!(DimData::decode(&again), Ok(d));
        // NUMENT 3 does not fit in 3072 bytes of basic entries.
        b[8] = 3;
        assert!(matches!(
            DimData::decode(&b),
            Err(DimError::Nument { nument: 3, .. })
        ));
        // A bad entry's error names the entry and the absolute offset.
        b[8] = 2;
        b[2048 + 512] = 0x80;
        assert_eq!(
            DimData::decode(&b),
            Err(DimError::Entry {
                index: 1,
                offset: 2048 + 512,
                reason: "text is not printable ASCII"
            })
        );
    }

    #[test]
    fn header_rejected() {
        let good = libnvme_register_image();
        assert_eq!(
            DimData::decode(&good[..1023]),
            Err(DimError::Short {
                need: 1024,
                have: 1023
            })
        );
        for tdl in [0u32, 1023, 2077, u32::MAX] {
            let mut b = good.clone();
            b[0..4].copy_from_slice(&tdl.to_le_bytes());
            assert_eq!(DimData::decode(&b).unwrap_err().offset(), 0, "{tdl}");
        }
        for f in [0u16, 3, 0xffff] {
            let mut b = good.clone();
            b[16..18].copy_from_slice(&f.to_le_bytes());
            assert_eq!(DimData::decode(&b), Err(DimError::Entfmt(f)));
        }
        for n in [2u64, 1025, u64::MAX, 1 << 60] {
            let mut b = good.clone();
            b[8..16].copy_from_slice(&n.to_le_bytes());
            assert!(
                matches!(DimData::decode(&b), Err(DimError::Nument { nument, .. }) if nument == n)
            );
        }
        // NUMENT 0 with only a header is well formed (the controller judges it).
        let mut b = good[..1024].to_vec();
        b[0..4].copy_from_slice(&1024u32.to_le_bytes());
        b[8] = 0;
        assert_eq!(DimData::decode(&b).unwrap().entries, vec![]);
        // Text: EID must be UTF-8 without control characters, ENAME/EVER printable ASCII.
        for (at, field) in [(30, 24), (285, 280), (540, 536)] {
            let mut b = good.clone();
            b[at] = 0x07;
            assert_eq!(DimData::decode(&b).unwrap_err().offset(), field, "{at}");
        }
        let mut b = good.clone();
        b[24 + HOSTNQN.len()] = 0xff;
        assert_eq!(DimData::decode(&b).unwrap_err().offset(), 24);
        // Space padding (the base spec's rule for ASCII) is dropped like NULs.
        let mut b = good.clone();
        b[291..536].fill(b' ');
        b[577..600].fill(b' ');
        assert_eq!(DimData::decode(&b), Ok(register()));
    }

    #[test]
    fn entry_rejected() {
        let good = libnvme_register_image();
        let tel_at = 1024 + 1024;
        let entry = |b: &[u8]| DimData::decode(b).unwrap_err();
        // TEL below 1032, not a multiple of 4, past TDL.
        for (tel, reason) in [
            (0u32, "TEL below 1032"),
            (1028, "TEL below 1032"),
            (1054, "TEL not a multiple of 4"),
            (1056, "TEL runs past TDL"),
            (u32::MAX - 3, "TEL runs past TDL"),
        ] {
            let mut b = good.clone();
            b[tel_at..tel_at + 4].copy_from_slice(&tel.to_le_bytes());
            assert_eq!(
                entry(&b),
                DimError::Entry {
                    index: 0,
                    offset: tel_at,
                    reason
                },
                "{tel}"
            );
        }
        // NUMEXAT 2 with room for one.
        let mut b = good.clone();
        b[1024 + 1028] = 2;
        assert_eq!(
            entry(&b),
            DimError::Entry {
                index: 0,
                offset: 1024 + 1028,
                reason: "NUMEXAT attributes run past TEL"
            }
        );
        // EXATLEN 20 (or 17, padded to 20) in an attribute that has 16.
        for len in [17u8, 20, 0xff] {
            let mut b = good.clone();
            b[1024 + 1034] = len;
            assert_eq!(
                entry(&b),
                DimError::Entry {
                    index: 0,
                    offset: 1024 + 1034,
                    reason: "EXATLEN runs past TEL"
                },
                "{len}"
            );
        }
        let mut b = good.clone();
        b[1024 + 1035] = 0xff;
        assert_eq!(entry(&b).offset(), 1024 + 1034);
        // A second entry that does not fit after the first.
        let mut b = good.clone();
        b[8] = 2;
        b.extend_from_slice(&[0u8; 1032]);
        let tdl = b.len() as u32;
        b[0..4].copy_from_slice(&tdl.to_le_bytes());
        b[tel_at..tel_at + 4].copy_from_slice(&1056u32.to_le_bytes());
        assert_eq!(
            entry(&b),
            DimError::Entry {
                index: 1,
                offset: 1024 + 1056,
                reason: "entry runs past TDL"
            }
        );
        // Non-ASCII TRADDR in an extended entry: offset in the data.
        let mut b = good.clone();
        b[1024 + 512] = 0xc3;
        assert_eq!(entry(&b).offset(), 1024 + 512);
    }

    #[test]
    fn attributes_read_leniently() {
        // An unpadded EXATLEN with a padded value: the next attribute is at the next multiple of
        // 4, the value is what the attribute occupies (padding included, so it encodes back the
        // same). Unknown types are kept.
        let mut e = vec![0u8; 1032 + 12 + 8];
        e[1024..1028].copy_from_slice(&1052u32.to_le_bytes());
        e[1028] = 2;
        e[1032..1036].copy_from_slice(&[2, 0, 5, 0]);
        e[1036..1044].copy_from_slice(b"node7\0\0\0");
        e[1044..1048].copy_from_slice(&[9, 0, 4, 0]);
        e[1048..1052].copy_from_slice(&[1, 2, 3, 4]);
        let mut b = register().encode()[..1024].to_vec();
        b.extend_from_slice(&e);
        let tdl = b.len() as u32;
        b[0..4].copy_from_slice(&tdl.to_le_bytes());
        let d = DimData::decode(&b).unwrap();
        let entry = &d.entries[0];
        assert_eq!(entry.exats[0].value, b"node7\0\0\0");
        assert_eq!(
            entry.exats[1],
            ExtAttr {
                kind: 9,
                value: vec![1, 2, 3, 4]
            }
        );
        assert_eq!(entry.symname().as_deref(), Some("node7"));
        assert_eq!(entry.hostid(), None);
        // SYMNAME padded with NULs or spaces reads the same.
        let mut padded = entry.clone();
        padded.exats[0].value = b"node7 \0 ".to_vec();
        assert_eq!(padded.symname().as_deref(), Some("node7"));
        // A HOSTID that is not 16 bytes is no host ID.
        let mut short = entry.clone();
        short.exats.push(ExtAttr {
            kind: exattype::HOSTID,
            value: vec![1; 12],
        });
        assert_eq!(short.hostid(), None);
    }

    #[test]
    fn encode_cuts_to_fields() {
        let mut d = register();
        d.ever = "x".repeat(100);
        // A UTF-8 EID is cut at a character boundary, never inside one.
        d.eid = format!("{}\u{fc}", "a".repeat(255));
        d.entries[0].exats.push(ExtAttr {
            kind: 7,
            value: vec![0xaa; 70_000],
        });
        let b = d.encode();
        let back = DimData::decode(&b).unwrap();
        assert_eq!(back.ever.len(), 64);
        assert_eq!(back.eid, "a".repeat(255));
        assert_eq!(back.entries[0].exats[1].value.len(), MAX_EXATLEN);
        assert_eq!(b.len(), d.encoded_len());
    }

    #[test]
    fn every_truncation_is_handled() {
        let mut d = register();
        d.entries[0].exats.push(ExtAttr::symname("gpu07"));
        let mut second = host_entry();
        second.exats = vec![
            ExtAttr::symname("x"),
            ExtAttr {
                kind: 0x77,
                value: vec![],
            },
        ];
        d.entries.push(second);
        let full = d.encode();
        for len in 0..full.len() {
            // As sent: TDL names more bytes than there are.
            assert!(DimData::decode(&full[..len]).is_err(), "{len}");
            // TDL made to agree with the cut: the checks inside the entries refuse it (the last
            // entry's TEL runs to the end).
            if len >= 4 {
                let mut b = full[..len].to_vec();
                b[0..4].copy_from_slice(&(len as u32).to_le_bytes());
                assert!(DimData::decode(&b).is_err(), "{len}");
            }
        }
        // The whole: SYMNAME values come back with their padding, and encode to the same bytes.
        let back = DimData::decode(&full).unwrap();
        assert_eq!(back.entries[1].symname().as_deref(), Some("x"));
        assert_eq!(back.entries[1].exats[0].value, b"x   ");
        assert_eq!(back.encode(), full);
    }

    fn any_tsas() -> impl Strategy<Value = (u8, Tsas)> {
        prop_oneof![
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
        ]
    }

    /// Values a whole number of dwords long come back as they were (others gain the padding).
    fn any_exat() -> impl Strategy<Value = ExtAttr> {
        (any::<u16>(), proptest::collection::vec(any::<u8>(), 0..48)).prop_map(
            |(kind, mut value)| {
                value.truncate(value.len() / 4 * 4);
                ExtAttr { kind, value }
            },
        )
    }

    fn any_entry() -> impl Strategy<Value = DimEntry> {
        (
            any_tsas(),
            any::<[u8; 3]>(),
            any::<[u16; 3]>(),
            (text(32), text(256), text(256)),
            proptest::collection::vec(any_exat(), 0..5),
        )
            .prop_map(
                |((trtype, tsas), b, w, (trsvcid, nqn, traddr), exats)| DimEntry {
                    trtype,
                    adrfam: b[0],
                    subtype: b[1],
                    treq: b[2],
                    portid: w[0],
                    cntlid: w[1],
                    asqsz: w[2],
                    trsvcid,
                    nqn,
                    traddr,
                    tsas,
                    exats,
                },
            )
    }

    fn any_dim() -> impl Strategy<Value = DimData> {
        (
            any::<(u16, u8, u16)>(),
            (text(256), text(256), text(64)),
            proptest::collection::vec(any_entry(), 0..5),
        )
            .prop_map(
                |((etype, portlcl, ektype), (eid, ename, ever), entries)| DimData {
                    etype,
                    portlcl,
                    ektype,
                    eid,
                    ename,
                    ever,
                    entries,
                },
            )
    }

    proptest! {
        #[test]
        fn round_trip(d in any_dim()) {
            let b = d.encode();
            prop_assert_eq!(b.len(), d.encoded_len());
            prop_assert_eq!(&b[0..4], &(b.len() as u32).to_le_bytes());
            prop_assert_eq!(DimData::decode(&b), Ok(d));
        }

        #[test]
        fn decode_never_panics(
            bytes in proptest::collection::vec(any::<u8>(), 0..3300),
            format in 0u16..4,
            nument in 0u64..4,
            fix in any::<bool>(),
        ) {
            let mut bytes = bytes;
            if fix && bytes.len() >= DIM_HEADER_LEN {
                // A believable header, so the entry and attribute walks run on random data.
                let len = bytes.len() as u32;
                bytes[0..4].copy_from_slice(&len.to_le_bytes());
                bytes[8..16].copy_from_slice(&nument.to_le_bytes());
                bytes[16..18].copy_from_slice(&format.to_le_bytes());
                bytes[24..DIM_HEADER_LEN].fill(0);
                if bytes.len() >= 2056 {
                    // First entry: text fields blank, TEL up to TDL, attributes random.
                    bytes[1024 + 32..2048].fill(0);
                    bytes[2048..2052].copy_from_slice(&((len - 1024) & !3).to_le_bytes());
                    bytes[2052] &= 7;
                    bytes[2053] = 0;
                }
            }
            if let Ok(d) = DimData::decode(&bytes) {
                // Values are kept with their padding: the first pass already encodes back.
                prop_assert_eq!(DimData::decode(&d.encode()), Ok(d));
            }
        }
    }
}
