//! NVMe/TCP (TP 8000): PDU types and a streaming codec with header and data digests.

pub mod codec;
pub mod pdu;

pub use codec::{DataHead, Decoder, PduError, Role};
pub use pdu::*;
