//! A streaming NVMe/TCP PDU decoder: feed it whatever the socket gave, take PDUs out.
//!
//! It never waits for more than one PDU's bytes and rejects a PDU by its common header before the
//! body arrives (bad type for the role, wrong hlen/pdo, plen out of bounds), so a peer cannot
//! make it buffer unbounded data. Payloads are zero-copy slices of the input buffer.

use bytes::{Buf, Bytes, BytesMut};

use crate::le::{all_zero, u16_at, u32_at};
use crate::nvme::cqe::{Cqe, CQE_LEN};
use crate::nvme::sqe::{Sqe, SQE_LEN};
use crate::tcp::pdu::*;

/// Which end of the connection decodes: a controller accepts host-to-controller PDUs
/// (ICReq, H2CTermReq, CapsuleCmd, H2CData), a host the controller-to-host ones.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Role {
    Controller,
    Host,
}

#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
pub enum PduError {
    /// The connection must end with a termination request carrying `fes` and `fei` (the byte
    /// offset of the bad field in the PDU header) and a copy of the offending header.
    #[error("fatal PDU error (FES {fes:#x}, field at byte {fei}): {reason}")]
    Fatal {
        fes: u16,
        fei: u32,
        header: Bytes,
        reason: &'static str,
    },
    /// A PDU whose data digest did not match; it was consumed, the connection may continue and
    /// the command `cccid` fails with a transient transport error.
    #[error("data digest mismatch in PDU type {pdu_type:#x} for command {cccid:#x}")]
    DataDigest { pdu_type: u8, cccid: u16 },
}

impl PduError {
    /// The termination request to send for a fatal error (none for a data digest error).
    pub fn term_req(&self) -> Option<TermReq> {
        match self {
            PduError::Fatal {
                fes, fei, header, ..
            } => Some(TermReq {
                fes: *fes,
                fei: *fei,
                header: header.slice(..header.len().min(TERM_MAX_DATA)),
            }),
            PduError::DataDigest { .. } => None,
        }
    }
}

/// The header of a data PDU (C2HData, H2CData), taken off the stream before its payload:
/// see [`Decoder::decode_data_head`].
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct DataHead {
    /// The PDU, its payload still empty.
    pub pdu: Pdu,
    /// Payload bytes that follow on the stream.
    pub data_len: usize,
    /// Whether a data digest (CRC32C of the payload, little-endian) follows the payload.
    pub ddgst: bool,
}

pub struct Decoder {
    role: Role,
    digests: Digests,
    max_data: u32,
}

impl Decoder {
    /// `max_data`: the largest payload accepted in one PDU (in-capsule data or H2C/C2H data).
    /// Digests start off; ICReq/ICResp are never digested.
    pub fn new(role: Role, max_data: u32) -> Decoder {
        Decoder {
            role,
            digests: Digests::default(),
            max_data,
        }
    }

    /// Switch digests on/off as negotiated, after the IC exchange.
    pub fn set_digests(&mut self, digests: Digests) {
        self.digests = digests;
    }

    pub fn digests(&self) -> Digests {
        self.digests
    }

    pub fn set_max_data(&mut self, max_data: u32) {
        self.max_data = max_data;
    }

    /// Takes one complete PDU off the front of `buf`, or returns Ok(None) if more bytes are
    /// needed (then `buf` is untouched; `buf.reserve` is the caller's business).
    ///
    /// A fatal error leaves `buf` as it was (the connection is over anyway); a data digest
    /// error consumes the PDU, so decoding can go on with the next one.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Pdu>, PduError> {
        if buf.len() < COMMON_HEADER_LEN {
            return Ok(None);
        }
        let ch = CommonHeader::parse(buf);
        // Judge the common header first, so a bogus plen never makes the caller buffer it.
        let layout = self
            .check_common(&ch)
            .map_err(|bad| bad.into_error(buf, ch.hlen as usize))?;
        if buf.len() < layout.plen {
            return Ok(None);
        }
        let mut pdu = parse_head(buf, &ch, &layout)?;
        if layout.data_len == 0 {
            // Nothing to hand on (a read's command capsule, most PDUs): no shared view of the
            // buffer to count references to and drop again.
            buf.advance(layout.plen);
            return Ok(Some(pdu));
        }
        let bytes = buf.split_to(layout.plen).freeze();
        let data_end = layout.data_off + layout.data_len;
        let payload = bytes.slice(layout.data_off..data_end);
        if layout.ddgst && u32_at(&bytes, data_end) != digest(&payload) {
            return Err(PduError::DataDigest {
                pdu_type: ch.pdu_type,
                cccid: cccid_of(&pdu),
            });
        }
        attach_payload(&mut pdu, payload);
        Ok(Some(pdu))
    }

    /// Takes the header of the data PDU at the front of `buf` off it as soon as the header (and
    /// its digest) has arrived, checked as [`Decoder::decode`] checks it, so that the receiver
    /// can put the payload straight where it belongs (no staging, no reassembly). The caller
    /// must then take `data_len` payload bytes, and the data digest if `ddgst`, off the stream
    /// before anything else is decoded.
    ///
    /// Ok(None) if the front of `buf` is not a data PDU, or its header is not all there yet
    /// (`buf` is then untouched). Errors are those of `decode`, and leave `buf` as it was.
    pub fn decode_data_head(&mut self, buf: &mut BytesMut) -> Result<Option<DataHead>, PduError> {
        if buf.len() < COMMON_HEADER_LEN {
            return Ok(None);
        }
        let ch = CommonHeader::parse(buf);
        if !matches!(ch.pdu_type, pdu_type::C2H_DATA | pdu_type::H2C_DATA) {
            return Ok(None);
        }
        let layout = self
            .check_common(&ch)
            .map_err(|bad| bad.into_error(buf, ch.hlen as usize))?;
        if buf.len() < layout.data_off {
            return Ok(None);
        }
        let pdu = parse_head(buf, &ch, &layout)?;
        buf.advance(layout.data_off);
        Ok(Some(DataHead {
            pdu,
            data_len: layout.data_len,
            ddgst: layout.ddgst,
        }))
    }

    /// The PDU types this end may receive.
    fn accepts(&self, ty: u8) -> bool {
        use pdu_type::*;
        match self.role {
            Role::Controller => matches!(ty, ICREQ | H2C_TERM_REQ | CAPSULE_CMD | H2C_DATA),
            Role::Host => matches!(ty, ICRESP | C2H_TERM_REQ | CAPSULE_RESP | C2H_DATA | R2T),
        }
    }

    /// Validates the common header alone and works out where everything lies in the PDU.
    fn check_common(&self, ch: &CommonHeader) -> Result<Layout, Bad> {
        let ty = ch.pdu_type;
        let hlen = match header_len(ty) {
            Some(hlen) if self.accepts(ty) => hlen,
            _ => return Err(Bad::field(0, "PDU type not valid for this role")),
        };
        if ch.hlen as usize != hlen {
            return Err(Bad::field(2, "wrong header length for the PDU type"));
        }
        self.check_flags(ch)?;

        let hdgst = ch.flags & flags::HDGSTF != 0;
        let head_len = hlen + if hdgst { DIGEST_LEN } else { 0 };
        let plen = ch.plen as usize;
        check_plen(ty, plen, head_len)?;
        let rest = plen - head_len;

        let ddgst = self.check_data_digest_flag(ty, ch.flags, rest)?;
        let ddgst_len = if ddgst { DIGEST_LEN } else { 0 };
        if rest != 0 && rest <= ddgst_len {
            return Err(Bad::field(
                4,
                "PDU length leaves no data before the data digest",
            ));
        }
        let data_len = rest - ddgst_len;
        check_pdo(ty, ch.pdo as usize, rest, head_len)?;
        self.check_data_limit(ty, data_len)?;
        Ok(Layout {
            hlen,
            hdgst,
            ddgst,
            data_off: head_len,
            data_len,
            plen,
        })
    }

    /// Flag checks that do not depend on plen.
    fn check_flags(&self, ch: &CommonHeader) -> Result<(), Bad> {
        let (ty, f) = (ch.pdu_type, ch.flags);
        let want_hdgst = self.digests.header && header_digestible(ty);
        if (f & flags::HDGSTF != 0) != want_hdgst {
            return Err(Bad::field(
                1,
                "header digest flag does not match the negotiated digests",
            ));
        }
        if f & flags::DDGSTF != 0 && !(self.digests.data && data_digestible(ty)) {
            return Err(Bad::field(
                1,
                "data digest flag set but no data digest applies",
            ));
        }
        let is_data = matches!(ty, pdu_type::H2C_DATA | pdu_type::C2H_DATA);
        if f & flags::LAST_PDU != 0 && !is_data {
            return Err(Bad::field(
                1,
                "LAST_PDU flag on a PDU that is not a data PDU",
            ));
        }
        if f & flags::SUCCESS != 0 && (ty != pdu_type::C2H_DATA || f & flags::LAST_PDU == 0) {
            return Err(Bad::field(1, "SUCCESS flag without LAST_PDU on C2HData"));
        }
        Ok(())
    }

    /// Returns whether a data digest trails the PDU. DDGSTF must be set exactly when data
    /// digests were negotiated and the PDU carries data; only a CapsuleCmd without in-capsule
    /// data may set it anyway (hosts differ there, and it changes nothing on the wire).
    fn check_data_digest_flag(&self, ty: u8, f: u8, rest: usize) -> Result<bool, Bad> {
        let flag = f & flags::DDGSTF != 0;
        if rest == 0 {
            let lenient = ty == pdu_type::CAPSULE_CMD && self.digests.data;
            if flag && !lenient {
                return Err(Bad::field(1, "data digest flag set on a PDU without data"));
            }
            return Ok(false);
        }
        let want = self.digests.data && data_digestible(ty);
        if flag != want {
            return Err(Bad::field(
                1,
                "data digest flag does not match the negotiated digests",
            ));
        }
        Ok(flag)
    }

    /// Payloads beyond `max_data` are refused before they are buffered. TermReq payloads are
    /// bounded by their plen check already.
    fn check_data_limit(&self, ty: u8, data_len: usize) -> Result<(), Bad> {
        if data_len as u64 <= self.max_data as u64 {
            return Ok(());
        }
        match ty {
            pdu_type::H2C_DATA | pdu_type::C2H_DATA => Err(Bad::new(
                fes::DATA_LIMIT_EXCEEDED,
                4,
                "data PDU longer than the negotiated maximum",
            )),
            pdu_type::H2C_TERM_REQ | pdu_type::C2H_TERM_REQ => Ok(()),
            _ => Err(Bad::field(4, "in-capsule data longer than the maximum")),
        }
    }
}

/// Checks the header digest and parses the PDU-specific header, all of which is in `buf`, into a
/// PDU whose payload is still empty.
fn parse_head(buf: &[u8], ch: &CommonHeader, layout: &Layout) -> Result<Pdu, PduError> {
    let head = &buf[..layout.hlen];
    if layout.hdgst && u32_at(buf, layout.hlen) != digest(head) {
        let bad = Bad::new(
            fes::HEADER_DIGEST_ERROR,
            layout.hlen,
            "header digest mismatch",
        );
        return Err(bad.into_error(buf, layout.hlen));
    }
    parse_specific(ch.pdu_type, ch.flags, head, layout.data_len)
        .map_err(|bad| bad.into_error(buf, layout.hlen))
}

/// Where the parts of a PDU lie, from its validated common header.
struct Layout {
    hlen: usize,
    hdgst: bool,
    ddgst: bool,
    data_off: usize,
    data_len: usize,
    plen: usize,
}

/// A fatal error before it is given the offending header bytes.
struct Bad {
    fes: u16,
    fei: usize,
    reason: &'static str,
}

impl Bad {
    fn new(fes: u16, fei: usize, reason: &'static str) -> Bad {
        Bad { fes, fei, reason }
    }

    fn field(fei: usize, reason: &'static str) -> Bad {
        Bad::new(fes::INVALID_HEADER_FIELD, fei, reason)
    }

    /// Copies what is available of the offending header (at least the common header, at most
    /// hlen and 128 bytes) for the termination request.
    fn into_error(self, buf: &[u8], hlen: usize) -> PduError {
        let n = hlen.clamp(COMMON_HEADER_LEN, TERM_MAX_DATA).min(buf.len());
        PduError::Fatal {
            fes: self.fes,
            fei: self.fei as u32,
            header: Bytes::copy_from_slice(&buf[..n]),
            reason: self.reason,
        }
    }
}

/// plen bounds per type: IC PDUs are exactly 128 bytes, TermReqs 24..=152, PDUs without data
/// exactly their header (+digest), the rest at least that.
fn check_plen(ty: u8, plen: usize, head_len: usize) -> Result<(), Bad> {
    let ok = match ty {
        pdu_type::ICREQ | pdu_type::ICRESP => plen == IC_HLEN,
        pdu_type::H2C_TERM_REQ | pdu_type::C2H_TERM_REQ => {
            (TERM_HLEN..=TERM_HLEN + TERM_MAX_DATA).contains(&plen)
        }
        pdu_type::CAPSULE_RESP | pdu_type::R2T => plen == head_len,
        _ => plen >= head_len,
    };
    if ok {
        Ok(())
    } else {
        Err(Bad::field(4, "PDU length out of bounds for the PDU type"))
    }
}

/// PDO is 0 without data, else the data follows the header and header digest directly (we
/// and Linux use no padding: HPDA/CPDA 0). A TermReq is accepted with either value, since
/// the peer is closing anyway and its report is worth reading.
fn check_pdo(ty: u8, pdo: usize, rest: usize, head_len: usize) -> Result<(), Bad> {
    let want = if rest == 0 { 0 } else { head_len };
    let is_term = matches!(ty, pdu_type::H2C_TERM_REQ | pdu_type::C2H_TERM_REQ);
    if pdo == want || (is_term && pdo == 0) {
        Ok(())
    } else {
        Err(Bad::field(
            3,
            "PDU data offset is not right after the header",
        ))
    }
}

/// Parses the PDU-specific header (`h` is exactly hlen bytes, digest already checked) into a
/// PDU whose payload is still empty.
fn parse_specific(ty: u8, f: u8, h: &[u8], data_len: usize) -> Result<Pdu, Bad> {
    let last = f & flags::LAST_PDU != 0;
    Ok(match ty {
        pdu_type::ICREQ => {
            let (pfv, hpda, digests, maxr2t) = parse_ic(h)?;
            Pdu::IcReq(IcReq {
                pfv,
                hpda,
                digests,
                maxr2t,
            })
        }
        pdu_type::ICRESP => {
            let (pfv, cpda, digests, maxh2cdata) = parse_ic(h)?;
            // TP 8000: a multiple of 4 and at least 4096; the Linux host refuses others.
            if maxh2cdata % 4 != 0 || maxh2cdata < 4096 {
                return Err(Bad::field(
                    12,
                    "MAXH2CDATA not a multiple of 4 of at least 4096",
                ));
            }
            Pdu::IcResp(IcResp {
                pfv,
                cpda,
                digests,
                maxh2cdata,
            })
        }
        pdu_type::H2C_TERM_REQ | pdu_type::C2H_TERM_REQ => {
            // Reserved bytes are not checked: refusing a peer's error report would only hide it.
            let t = TermReq {
                fes: u16_at(h, 8),
                fei: u32_at(h, 10),
                header: Bytes::new(),
            };
            if ty == pdu_type::H2C_TERM_REQ {
                Pdu::H2CTermReq(t)
            } else {
                Pdu::C2HTermReq(t)
            }
        }
        pdu_type::CAPSULE_CMD => {
            let sqe = Sqe::decode(&h[8..8 + SQE_LEN]).map_err(|_| Bad::field(8, "short SQE"))?;
            Pdu::CapsuleCmd(CapsuleCmd {
                sqe,
                data: Bytes::new(),
            })
        }
        pdu_type::CAPSULE_RESP => {
            let cqe = Cqe::decode(&h[8..8 + CQE_LEN]).map_err(|_| Bad::field(8, "short CQE"))?;
            Pdu::CapsuleResp(CapsuleResp { cqe })
        }
        pdu_type::H2C_DATA => {
            check_data_header(h, data_len)?;
            Pdu::H2CData(H2CData {
                cccid: u16_at(h, 8),
                ttag: u16_at(h, 10),
                datao: u32_at(h, 12),
                last,
                data: Bytes::new(),
            })
        }
        pdu_type::C2H_DATA => {
            check_data_header(h, data_len)?;
            if u16_at(h, 10) != 0 {
                return Err(Bad::field(10, "reserved TTAG of C2HData not zero"));
            }
            Pdu::C2HData(C2HData {
                cccid: u16_at(h, 8),
                datao: u32_at(h, 12),
                last,
                success: f & flags::SUCCESS != 0,
                data: Bytes::new(),
            })
        }
        pdu_type::R2T => {
            let r2tl = u32_at(h, 16);
            if r2tl == 0 {
                return Err(Bad::field(16, "R2T length is zero"));
            }
            check_reserved(h, 20..R2T_HLEN)?;
            Pdu::R2T(R2T {
                cccid: u16_at(h, 8),
                ttag: u16_at(h, 10),
                r2to: u32_at(h, 12),
                r2tl,
            })
        }
        // check_common only lets known types through.
        _ => return Err(Bad::field(0, "unknown PDU type")),
    })
}

/// The fields ICReq and ICResp share: PFV, HPDA/CPDA, DGST, MAXR2T/MAXH2CDATA.
fn parse_ic(h: &[u8]) -> Result<(u16, u8, Digests, u32), Bad> {
    let pfv = u16_at(h, 8);
    if pfv != 0 {
        return Err(Bad::new(
            fes::UNSUPPORTED_PARAMETER,
            8,
            "unsupported PDU format version",
        ));
    }
    // The alignment is a 0's based dword count of at most 32 dwords (128 bytes).
    let pda = h[10];
    if pda > 31 {
        return Err(Bad::field(10, "PDU data alignment above 31"));
    }
    let dgst = h[11];
    if dgst & !0x3 != 0 {
        return Err(Bad::field(11, "reserved DGST bits set"));
    }
    check_reserved(h, 16..IC_HLEN)?;
    Ok((pfv, pda, Digests::from_bits(dgst), u32_at(h, 12)))
}

/// H2CData / C2HData: DATAL must describe exactly the payload, reserved bytes zero.
fn check_data_header(h: &[u8], data_len: usize) -> Result<(), Bad> {
    if u32_at(h, 16) as u64 != data_len as u64 {
        return Err(Bad::field(16, "DATAL does not match the PDU length"));
    }
    check_reserved(h, 20..DATA_HLEN)
}

fn check_reserved(h: &[u8], range: std::ops::Range<usize>) -> Result<(), Bad> {
    if all_zero(&h[range.clone()]) {
        Ok(())
    } else {
        Err(Bad::field(range.start, "reserved bytes not zero"))
    }
}

/// The command a digested PDU belongs to, for the data digest error.
fn cccid_of(pdu: &Pdu) -> u16 {
    match pdu {
        Pdu::CapsuleCmd(c) => c.sqe.cid,
        Pdu::H2CData(d) => d.cccid,
        Pdu::C2HData(d) => d.cccid,
        Pdu::R2T(r) => r.cccid,
        Pdu::CapsuleResp(r) => r.cqe.cid,
        Pdu::IcReq(_) | Pdu::IcResp(_) | Pdu::H2CTermReq(_) | Pdu::C2HTermReq(_) => 0,
    }
}

fn attach_payload(pdu: &mut Pdu, payload: Bytes) {
    match pdu {
        Pdu::H2CTermReq(t) | Pdu::C2HTermReq(t) => t.header = payload,
        Pdu::CapsuleCmd(c) => c.data = payload,
        Pdu::H2CData(d) => d.data = payload,
        Pdu::C2HData(d) => d.data = payload,
        Pdu::IcReq(_) | Pdu::IcResp(_) | Pdu::CapsuleResp(_) | Pdu::R2T(_) => {}
    }
}

#[cfg(test)]
mod tests;
