//! The one error type of every decoder in this crate.

use thiserror::Error;

/// Why a byte string is not a valid structure. `offset` is the byte offset of the offending field
/// inside the structure being decoded, so callers can report it (e.g. as a C2HTermReq FEI).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum DecodeError {
    #[error("{what}: need {need} bytes, have {have}")]
    Short {
        what: &'static str,
        need: usize,
        have: usize,
    },
    #[error("{what}: invalid field at byte {offset}: {reason}")]
    Field {
        what: &'static str,
        offset: usize,
        reason: &'static str,
    },
}

impl DecodeError {
    pub(crate) fn short(what: &'static str, need: usize, have: usize) -> Self {
        DecodeError::Short { what, need, have }
    }

    pub(crate) fn field(what: &'static str, offset: usize, reason: &'static str) -> Self {
        DecodeError::Field {
            what,
            offset,
            reason,
        }
    }

    /// Byte offset of the offending field (the length boundary for short input).
    pub fn offset(&self) -> usize {
        match *self {
            DecodeError::Short { have, .. } => have,
            DecodeError::Field { offset, .. } => offset,
        }
    }
}

/// Checks that `buf` holds at least `need` bytes.
pub(crate) fn need(what: &'static str, buf: &[u8], need: usize) -> Result<(), DecodeError> {
    if buf.len() < need {
        Err(DecodeError::short(what, need, buf.len()))
    } else {
        Ok(())
    }
}
