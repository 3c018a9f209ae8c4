//! NVMe over Fabrics: the fabrics command set (Connect, Property Get/Set, Disconnect),
//! the controller properties, NQNs and the discovery log page.

pub mod connect;
pub mod discovery;
pub mod nqn;
pub mod property;

pub use connect::{ConnectData, CONNECT_DATA_LEN};

/// Fabrics command types (SQE byte 4 when the opcode is 0x7F).
pub mod fctype {
    pub const PROPERTY_SET: u8 = 0x00;
    pub const CONNECT: u8 = 0x01;
    pub const PROPERTY_GET: u8 = 0x04;
    pub const AUTH_SEND: u8 = 0x05;
    pub const AUTH_RECEIVE: u8 = 0x06;
    pub const DISCONNECT: u8 = 0x08;
}

use crate::nvme::sqe::Sqe;
use crate::nvme::status::Status;

/// A fabrics command (opcode 0x7F).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FabricsCommand {
    /// ATTRIB byte 40 (bits 2:0: 0 = 4 bytes, 1 = 8 bytes), OFFSET 44..48, VALUE 48..56.
    PropertySet { size8: bool, offset: u32, value: u64 },
    /// RECFMT 40..42, QID 42..44, SQSIZE 44..46 (0's based), CATTR 46, KATO 48..52 (ms).
    Connect { recfmt: u16, qid: u16, sqsize: u16, cattr: u8, kato: u32 },
    PropertyGet { size8: bool, offset: u32 },
    /// RECFMT 40..42.
    Disconnect { recfmt: u16 },
}

impl FabricsCommand {
    /// Typed view of an SQE with opcode 0x7F. Unknown FCTYPE (including authentication, which
    /// this target does not offer): Invalid Command Opcode. Bad ATTRIB: Invalid Field.
    pub fn parse(sqe: &Sqe) -> Result<FabricsCommand, Status> {
        todo!()
    }

    pub fn to_sqe(&self, cid: u16) -> Sqe {
        todo!()
    }
}

/// Connect CATTR bit 2: the host asks to disable SQ flow control.
pub const CATTR_DISABLE_SQ_FLOW: u8 = 1 << 2;
