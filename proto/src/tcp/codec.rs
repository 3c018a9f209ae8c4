//! A streaming NVMe/TCP PDU decoder: feed it whatever the socket gave, take PDUs out.
//!
//! It never waits for more than one PDU's bytes and rejects a PDU by its common header before the
//! body arrives (bad type for the role, wrong hlen/pdo, plen out of bounds), so a peer cannot
//! make it buffer unbounded data. Payloads are zero-copy slices of the input buffer.

use bytes::{Bytes, BytesMut};

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
    Fatal { fes: u16, fei: u32, header: Bytes, reason: &'static str },
    /// A PDU whose data digest did not match; it was consumed, the connection may continue and
    /// the command `cccid` fails with a transient transport error.
    #[error("data digest mismatch in PDU type {pdu_type:#x} for command {cccid:#x}")]
    DataDigest { pdu_type: u8, cccid: u16 },
}

impl PduError {
    /// The termination request to send for a fatal error (none for a data digest error).
    pub fn term_req(&self) -> Option<TermReq> {
        todo!()
    }
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
        Decoder { role, digests: Digests::default(), max_data }
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
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Pdu>, PduError> {
        todo!()
    }
}
