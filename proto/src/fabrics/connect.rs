//! Connect command data (1024 bytes) and the Connect response fields.

use crate::error::DecodeError;
use crate::fabrics::nqn::Nqn;

pub const CONNECT_DATA_LEN: usize = 1024;

/// HOSTID 0..16, CNTLID 16..18, SUBNQN 256..512, HOSTNQN 512..768 (NUL terminated).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ConnectData {
    pub host_id: [u8; 16],
    pub cntlid: u16,
    pub subnqn: Nqn,
    pub hostnqn: Nqn,
}

/// Offsets in the connect data, for Connect Invalid Parameters (IATTR = 1, IPO).
pub const OFFSET_CNTLID: u16 = 16;
pub const OFFSET_SUBNQN: u16 = 256;
pub const OFFSET_HOSTNQN: u16 = 512;

/// Offsets in the SQE, for Connect Invalid Parameters (IATTR = 0, IPO).
pub const SQE_OFFSET_QID: u16 = 42;
pub const SQE_OFFSET_SQSIZE: u16 = 44;

impl ConnectData {
    /// Decodes the 1024-byte data. A SUBNQN or HOSTNQN that is not NUL terminated within its
    /// 256 bytes, not UTF-8, or not a valid NQN is an error naming that field's offset.
    pub fn decode(buf: &[u8]) -> Result<ConnectData, DecodeError> {
        todo!()
    }
    pub fn encode(&self, buf: &mut [u8; CONNECT_DATA_LEN]) {
        todo!()
    }
    pub fn to_bytes(&self) -> Box<[u8; CONNECT_DATA_LEN]> {
        let mut b = Box::new([0u8; CONNECT_DATA_LEN]);
        self.encode(&mut b);
        b
    }
}

/// Completion DW0 of a failed Connect with Connect Invalid Parameters: IATTR bit 16 (1 = offset is
/// in the connect data), IPO 15:0.
pub const fn invalid_parameter_result(in_data: bool, offset: u16) -> u32 {
    (in_data as u32) << 16 | offset as u32
}
