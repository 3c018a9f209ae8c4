//! NVMe/TCP PDUs. Every PDU starts with the 8-byte common header
//! (type 0, flags 1, hlen 2, pdo 3, plen 4..8); layouts in NVMEOF-FACTS 1.1-1.3.

use bytes::{Bytes, BytesMut};

use crate::nvme::cqe::Cqe;
use crate::nvme::sqe::Sqe;

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
        Digests { header: b & 1 != 0, data: b & 2 != 0 }
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
        todo!()
    }

    /// The payload the PDU carries after its header (in-capsule data, H2C/C2H data, the copied
    /// header of a TermReq); empty for the others.
    pub fn payload(&self) -> &[u8] {
        todo!()
    }

    /// Appends the whole PDU (header, header digest, payload, data digest) to `out`.
    /// ICReq/ICResp/TermReq are never digested; the data digest is present only when the PDU
    /// carries a non-empty payload and data digests were negotiated.
    pub fn encode(&self, digests: Digests, out: &mut BytesMut) {
        todo!()
    }

    /// Appends only the header and header digest. The caller then sends `payload()` as it is
    /// (no copy) followed by the returned data digest, if any, as 4 little-endian bytes.
    pub fn encode_head(&self, digests: Digests, out: &mut BytesMut) -> Option<u32> {
        todo!()
    }
}

/// CRC32C as NVMe/TCP uses it for header and data digests (stored little-endian).
pub fn digest(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}
