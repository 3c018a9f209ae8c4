//! The 16-byte completion queue entry.

use crate::error::{need, DecodeError};
use crate::le::*;
use crate::nvme::status::Status;

pub const CQE_LEN: usize = 16;

/// DW0 result 0..4, DW1 4..8 (upper half of an 8-byte Property Get), SQHD 8..10, SQID 10..12,
/// CID 12..14, status and phase 14..16. Fabrics hosts ignore the phase tag; we send 0.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Cqe {
    pub result: u64,
    pub sqhd: u16,
    pub sqid: u16,
    pub cid: u16,
    pub status: Status,
}

impl Cqe {
    pub fn new(cid: u16, status: Status) -> Cqe {
        Cqe {
            cid,
            status,
            ..Cqe::default()
        }
    }

    pub fn decode(buf: &[u8]) -> Result<Cqe, DecodeError> {
        need("CQE", buf, CQE_LEN)?;
        Ok(Cqe {
            result: u64_at(buf, 0),
            sqhd: u16_at(buf, 8),
            sqid: u16_at(buf, 10),
            cid: u16_at(buf, 12),
            status: Status::from_wire(u16_at(buf, 14)),
        })
    }

    pub fn encode(&self, buf: &mut [u8]) {
        put_u64(buf, 0, self.result);
        put_u16(buf, 8, self.sqhd);
        put_u16(buf, 10, self.sqid);
        put_u16(buf, 12, self.cid);
        put_u16(buf, 14, self.status.to_wire(false));
    }

    pub fn to_bytes(&self) -> [u8; CQE_LEN] {
        let mut b = [0u8; CQE_LEN];
        self.encode(&mut b);
        b
    }

    /// Command-specific result, dword 0.
    pub fn dw0(&self) -> u32 {
        self.result as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip(result: u64, sqhd: u16, sqid: u16, cid: u16, raw in 0u16..0x8000) {
            let cqe = Cqe { result, sqhd, sqid, cid, status: Status::from_raw(raw) };
            prop_assert_eq!(Cqe::decode(&cqe.to_bytes()).unwrap(), cqe);
        }
    }
}
