//! NVMe/TCP PDUs. Every PDU starts with the 8-byte common header
//! (type 0, flags 1, hlen 2, pdo 3, plen 4..8); layouts in NVMEOF-FACTS 1.1-1.3.

use bytes::{Bytes, BytesMut};

use crate::le::{put_u16, put_u32, u32_at};
use crate::nvme::cqe::{Cqe, CQE_LEN};
use crate::nvme::sqe::{Sqe, SQE_LEN};

pub const COMMON_HEADER_LEN: usize = 8;
pub const DIGEST_LEN: usize = 4;
/// Header lengths (hlen) per PDU type.
pub const IC_HLEN: usize = 128;
pub const TERM_HLEN: usize = 24;
pub const CAPSULE_CMD_HLEN: usize = 72;
pub const CAPSULE_RESP_HLEN: usize = 24;
pub const DATA_HLEN: usize = 24;
pub const R2T_HLEN: usize = 24;
/// A C2HTermReq / H2CTermReq carries at most this many bytes of the offending PDU header.
pub const TERM_MAX_DATA: usize = 128;

pub mod pdu_type {
    pub const ICREQ: u8 = 0x00;
    pub const ICRESP: u8 = 0x01;
    pub const H2C_TERM_REQ: u8 = 0x02;
    pub const C2H_TERM_REQ: u8 = 0x03;
    pub const CAPSULE_CMD: u8 = 0x04;
    pub const CAPSULE_RESP: u8 = 0x05;
    pub const H2C_DATA: u8 = 0x06;
    pub const C2H_DATA: u8 = 0x07;
    pub const R2T: u8 = 0x09;
}

pub mod flags {
    pub const HDGSTF: u8 = 1 << 0;
    pub const DDGSTF: u8 = 1 << 1;
    pub const LAST_PDU: u8 = 1 << 2;
    pub const SUCCESS: u8 = 1 << 3;
}

/// Fatal error status values of a termination request.
pub mod fes {
    pub const INVALID_HEADER_FIELD: u16 = 0x01;
    pub const PDU_SEQUENCE_ERROR: u16 = 0x02;
    pub const HEADER_DIGEST_ERROR: u16 = 0x03;
    pub const DATA_OUT_OF_RANGE: u16 = 0x04;
    pub const DATA_LIMIT_EXCEEDED: u16 = 0x05;
    pub const UNSUPPORTED_PARAMETER: u16 = 0x06;
}

/// Which digests were negotiated by ICReq/ICResp (DGST bit 0 header, bit 1 data).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Digests {
    pub header: bool,
    pub data: bool,
}

impl Digests {
    pub fn from_bits(b: u8) -> Digests {
        Digests {
            header: b & 1 != 0,
            data: b & 2 != 0,
        }
    }
    pub fn bits(self) -> u8 {
        self.header as u8 | (self.data as u8) << 1
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct CommonHeader {
    pub pdu_type: u8,
    pub flags: u8,
    pub hlen: u8,
    pub pdo: u8,
    pub plen: u32,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct IcReq {
    pub pfv: u16,
    /// Host PDU data alignment, 0's based dwords.
    pub hpda: u8,
    pub digests: Digests,
    /// Outstanding R2Ts per command, 0's based.
    pub maxr2t: u32,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct IcResp {
    pub pfv: u16,
    pub cpda: u8,
    pub digests: Digests,
    pub maxh2cdata: u32,
}

/// A command capsule: the SQE and any in-capsule data.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct CapsuleCmd {
    pub sqe: Sqe,
    pub data: Bytes,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct CapsuleResp {
    pub cqe: Cqe,
}

#[derive(Clone, PartialEq, Eq, Debug)]
pub struct H2CData {
    pub cccid: u16,
    pub ttag: u16,
    pub datao: u32,
    pub last: bool,
    pub data: Bytes,
}

#[derive(Clone, PartialEq, Eq, Debug)]
pub struct C2HData {
    pub cccid: u16,
    pub datao: u32,
    pub last: bool,
    /// The command completed successfully; no CapsuleResp follows (only with `last`).
    pub success: bool,
    pub data: Bytes,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct R2T {
    pub cccid: u16,
    pub ttag: u16,
    pub r2to: u32,
    pub r2tl: u32,
}

/// H2CTermReq / C2HTermReq: FES 8..10, FEI 10..14, reserved 14..24, then up to 128 bytes of the
/// offending PDU header.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct TermReq {
    pub fes: u16,
    pub fei: u32,
    pub header: Bytes,
}

#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Pdu {
    IcReq(IcReq),
    IcResp(IcResp),
    H2CTermReq(TermReq),
    C2HTermReq(TermReq),
    CapsuleCmd(CapsuleCmd),
    CapsuleResp(CapsuleResp),
    H2CData(H2CData),
    C2HData(C2HData),
    R2T(R2T),
}

impl Pdu {
    pub fn pdu_type(&self) -> u8 {
        match self {
            Pdu::IcReq(_) => pdu_type::ICREQ,
            Pdu::IcResp(_) => pdu_type::ICRESP,
            Pdu::H2CTermReq(_) => pdu_type::H2C_TERM_REQ,
            Pdu::C2HTermReq(_) => pdu_type::C2H_TERM_REQ,
            Pdu::CapsuleCmd(_) => pdu_type::CAPSULE_CMD,
            Pdu::CapsuleResp(_) => pdu_type::CAPSULE_RESP,
            Pdu::H2CData(_) => pdu_type::H2C_DATA,
            Pdu::C2HData(_) => pdu_type::C2H_DATA,
            Pdu::R2T(_) => pdu_type::R2T,
        }
    }

    /// The payload the PDU carries after its header (in-capsule data, H2C/C2H data, the copied
    /// header of a TermReq); empty for the others.
    pub fn payload(&self) -> &[u8] {
        match self {
            // A TermReq may carry at most 128 header bytes; cut here so that `encode_head`'s
            // plen and what the caller sends after it always agree.
            Pdu::H2CTermReq(t) | Pdu::C2HTermReq(t) => {
                &t.header[..t.header.len().min(TERM_MAX_DATA)]
            }
            Pdu::CapsuleCmd(c) => &c.data,
            Pdu::H2CData(d) => &d.data,
            Pdu::C2HData(d) => &d.data,
            Pdu::IcReq(_) | Pdu::IcResp(_) | Pdu::CapsuleResp(_) | Pdu::R2T(_) => &[],
        }
    }

    /// Appends the whole PDU (header, header digest, payload, data digest) to `out`.
    /// ICReq/ICResp/TermReq are never digested; the data digest is present only when the PDU
    /// carries a non-empty payload and data digests were negotiated.
    pub fn encode(&self, digests: Digests, out: &mut BytesMut) {
        let ddgst = self.encode_head(digests, out);
        out.extend_from_slice(self.payload());
        if let Some(d) = ddgst {
            out.extend_from_slice(&d.to_le_bytes());
        }
    }

    /// Appends only the header and header digest. The caller then sends `payload()` as it is
    /// (no copy) followed by the returned data digest, if any, as 4 little-endian bytes.
    pub fn encode_head(&self, digests: Digests, out: &mut BytesMut) -> Option<u32> {
        let ty = self.pdu_type();
        let hlen = header_len(ty).expect("every Pdu variant has a header length");
        let payload = self.payload();
        let hdgst = digests.header && header_digestible(ty);
        let ddgst = digests.data && !payload.is_empty() && data_digestible(ty);
        let hdgst_len = if hdgst { DIGEST_LEN } else { 0 };
        let ddgst_len = if ddgst { DIGEST_LEN } else { 0 };
        // CPDA/HPDA are 0, so data starts right after the header (and its digest).
        let pdo = if payload.is_empty() {
            0
        } else {
            hlen + hdgst_len
        };
        let plen = hlen + hdgst_len + payload.len() + ddgst_len;

        let mut head = [0u8; IC_HLEN]; // the largest header of any PDU
        let h = &mut head[..hlen];
        self.encode_specific(h);
        let mut flags = self.data_flags();
        if hdgst {
            flags |= flags::HDGSTF;
        }
        if ddgst {
            flags |= flags::DDGSTF;
        }
        CommonHeader {
            pdu_type: ty,
            flags,
            hlen: hlen as u8,
            pdo: pdo as u8,
            plen: u32::try_from(plen).expect("PDU longer than 4 GiB"),
        }
        .encode(h);

        out.extend_from_slice(h);
        if hdgst {
            out.extend_from_slice(&digest(h).to_le_bytes());
        }
        ddgst.then(|| digest(payload))
    }

    /// LAST_PDU / SUCCESS, the only flags that come from the PDU's content.
    fn data_flags(&self) -> u8 {
        let last = |l: bool| if l { flags::LAST_PDU } else { 0 };
        match self {
            Pdu::H2CData(d) => last(d.last),
            Pdu::C2HData(d) => last(d.last) | if d.success { flags::SUCCESS } else { 0 },
            _ => 0,
        }
    }

    /// Writes the PDU-specific header fields (bytes 8..hlen) into `h`, which is zeroed and
    /// exactly hlen bytes long, so reserved bytes stay zero.
    fn encode_specific(&self, h: &mut [u8]) {
        match self {
            Pdu::IcReq(ic) => {
                put_u16(h, 8, ic.pfv);
                h[10] = ic.hpda;
                h[11] = ic.digests.bits();
                put_u32(h, 12, ic.maxr2t);
            }
            Pdu::IcResp(ic) => {
                put_u16(h, 8, ic.pfv);
                h[10] = ic.cpda;
                h[11] = ic.digests.bits();
                put_u32(h, 12, ic.maxh2cdata);
            }
            Pdu::H2CTermReq(t) | Pdu::C2HTermReq(t) => {
                put_u16(h, 8, t.fes);
                put_u32(h, 10, t.fei);
            }
            Pdu::CapsuleCmd(c) => c.sqe.encode(&mut h[8..8 + SQE_LEN]),
            Pdu::CapsuleResp(r) => r.cqe.encode(&mut h[8..8 + CQE_LEN]),
            Pdu::H2CData(d) => encode_data_header(h, d.cccid, d.ttag, d.datao, d.data.len()),
            Pdu::C2HData(d) => encode_data_header(h, d.cccid, 0, d.datao, d.data.len()),
            Pdu::R2T(r) => {
                put_u16(h, 8, r.cccid);
                put_u16(h, 10, r.ttag);
                put_u32(h, 12, r.r2to);
                put_u32(h, 16, r.r2tl);
            }
        }
    }
}

fn encode_data_header(h: &mut [u8], cccid: u16, ttag: u16, datao: u32, datal: usize) {
    put_u16(h, 8, cccid);
    put_u16(h, 10, ttag);
    put_u32(h, 12, datao);
    put_u32(
        h,
        16,
        u32::try_from(datal).expect("data PDU longer than 4 GiB"),
    );
}

impl CommonHeader {
    /// The common header at the front of `b`, once its 8 bytes are there (unchecked: the
    /// decoder judges it).
    pub fn peek(b: &[u8]) -> Option<CommonHeader> {
        (b.len() >= COMMON_HEADER_LEN).then(|| CommonHeader::parse(b))
    }

    /// Reads the 8-byte common header; `b` must hold at least 8 bytes.
    pub(crate) fn parse(b: &[u8]) -> CommonHeader {
        CommonHeader {
            pdu_type: b[0],
            flags: b[1],
            hlen: b[2],
            pdo: b[3],
            plen: u32_at(b, 4),
        }
    }

    fn encode(&self, b: &mut [u8]) {
        b[0] = self.pdu_type;
        b[1] = self.flags;
        b[2] = self.hlen;
        b[3] = self.pdo;
        put_u32(b, 4, self.plen);
    }
}

/// The fixed header length (hlen) of a PDU type; None for types this crate does not know.
pub(crate) fn header_len(ty: u8) -> Option<usize> {
    match ty {
        pdu_type::ICREQ | pdu_type::ICRESP => Some(IC_HLEN),
        pdu_type::H2C_TERM_REQ | pdu_type::C2H_TERM_REQ => Some(TERM_HLEN),
        pdu_type::CAPSULE_CMD => Some(CAPSULE_CMD_HLEN),
        pdu_type::CAPSULE_RESP => Some(CAPSULE_RESP_HLEN),
        pdu_type::H2C_DATA | pdu_type::C2H_DATA => Some(DATA_HLEN),
        pdu_type::R2T => Some(R2T_HLEN),
        _ => None,
    }
}

/// Whether a negotiated header digest applies: everything but the IC exchange (which happens
/// before digests exist) and TermReqs (sent when the stream may already be broken).
pub(crate) fn header_digestible(ty: u8) -> bool {
    matches!(
        ty,
        pdu_type::CAPSULE_CMD
            | pdu_type::CAPSULE_RESP
            | pdu_type::H2C_DATA
            | pdu_type::C2H_DATA
            | pdu_type::R2T
    )
}

/// Whether a negotiated data digest applies (to a non-empty payload of these types only).
pub(crate) fn data_digestible(ty: u8) -> bool {
    matches!(
        ty,
        pdu_type::CAPSULE_CMD | pdu_type::H2C_DATA | pdu_type::C2H_DATA
    )
}

/// CRC32C as NVMe/TCP uses it for header and data digests (stored little-endian).
pub fn digest(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_known_answer() {
        assert_eq!(digest(b"123456789"), 0xE306_9283);
    }

    /// A Linux-host-like H2CData with both digests, checked byte by byte.
    #[test]
    fn h2c_data_layout_with_digests() {
        let data = Bytes::from_static(b"abcdefgh");
        let pdu = Pdu::H2CData(H2CData {
            cccid: 0x1234,
            ttag: 7,
            datao: 4096,
            last: true,
            data: data.clone(),
        });
        let mut out = BytesMut::new();
        pdu.encode(
            Digests {
                header: true,
                data: true,
            },
            &mut out,
        );
        assert_eq!(out.len(), 24 + 4 + 8 + 4);
        assert_eq!(&out[..8], &[0x06, 0x07, 24, 28, 40, 0, 0, 0]);
        assert_eq!(
            &out[8..24],
            &[0x34, 0x12, 7, 0, 0, 0x10, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(out[24..28], digest(&out[..24]).to_le_bytes());
        assert_eq!(&out[28..36], &data[..]);
        assert_eq!(out[36..40], digest(&data).to_le_bytes());
    }

    #[test]
    fn encode_head_reports_data_digest_only_with_payload() {
        let both = Digests {
            header: true,
            data: true,
        };
        let mut out = BytesMut::new();
        let empty = Pdu::CapsuleCmd(CapsuleCmd {
            sqe: Sqe::default(),
            data: Bytes::new(),
        });
        assert_eq!(empty.encode_head(both, &mut out), None);
        assert_eq!(&out[..4], &[0x04, flags::HDGSTF, 72, 0]);
        assert_eq!(out.len(), 76);

        out.clear();
        let full = Pdu::CapsuleCmd(CapsuleCmd {
            sqe: Sqe::default(),
            data: Bytes::from_static(b"x"),
        });
        assert_eq!(full.encode_head(both, &mut out), Some(digest(b"x")));
        assert_eq!(
            &out[..8],
            &[0x04, flags::HDGSTF | flags::DDGSTF, 72, 76, 81, 0, 0, 0]
        );
    }

    #[test]
    fn ic_and_term_req_are_never_digested() {
        let both = Digests {
            header: true,
            data: true,
        };
        let mut out = BytesMut::new();
        let ic = IcReq {
            pfv: 0,
            hpda: 0,
            digests: both,
            maxr2t: 0,
        };
        Pdu::IcReq(ic).encode(both, &mut out);
        assert_eq!(out.len(), 128);
        assert_eq!(&out[..8], &[0, 0, 128, 0, 128, 0, 0, 0]);
        assert_eq!(out[11], 3);

        out.clear();
        let term = TermReq {
            fes: fes::HEADER_DIGEST_ERROR,
            fei: 0x0102_0304,
            header: Bytes::from(vec![9u8; 200]),
        };
        Pdu::C2HTermReq(term).encode(both, &mut out);
        assert_eq!(out.len(), 24 + 128, "the header copy is cut at 128 bytes");
        assert_eq!(&out[..8], &[0x03, 0, 24, 24, 152, 0, 0, 0]);
        assert_eq!(&out[8..14], &[3, 0, 4, 3, 2, 1]);
        assert!(out[14..24].iter().all(|&b| b == 0));
    }
}
