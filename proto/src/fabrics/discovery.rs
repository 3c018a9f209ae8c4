//! The discovery log page (LID 70h): a 1024-byte header then 1024-byte entries.

use crate::error::DecodeError;

pub const DISCOVERY_HEADER_LEN: usize = 1024;
pub const DISCOVERY_ENTRY_LEN: usize = 1024;

pub mod trtype {
    pub const RDMA: u8 = 1;
    pub const FC: u8 = 2;
    pub const TCP: u8 = 3;
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
    Rdma { qptype: u8, prtype: u8, cms: u8, pkey: u16 },
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

impl DiscoveryLogHeader {
    pub fn encode(&self, buf: &mut [u8]) {
        todo!()
    }
    pub fn decode(buf: &[u8]) -> Result<DiscoveryLogHeader, DecodeError> {
        todo!()
    }
}

impl DiscoveryLogEntry {
    pub fn encode(&self, buf: &mut [u8]) {
        todo!()
    }
    /// Text fields are read up to the first NUL with trailing spaces removed; they must be ASCII.
    pub fn decode(buf: &[u8]) -> Result<DiscoveryLogEntry, DecodeError> {
        todo!()
    }
}

/// The whole log page: header followed by the entries.
pub fn encode_discovery_log(genctr: u64, entries: &[DiscoveryLogEntry]) -> Vec<u8> {
    todo!()
}

/// Decodes a whole page; fails if fewer entries are present than NUMREC says.
pub fn decode_discovery_log(buf: &[u8]) -> Result<(DiscoveryLogHeader, Vec<DiscoveryLogEntry>), DecodeError> {
    todo!()
}
