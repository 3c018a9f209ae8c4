//! The 64-byte submission queue entry, as carried in fabrics command capsules.

use crate::error::{need, DecodeError};
use crate::le::*;
use crate::nvme::sgl::SglDescriptor;

pub const SQE_LEN: usize = 64;

/// A submission queue entry with every dword kept; command-specific meaning is given by the
/// parsers in `admin`, `io` and `fabrics`. Byte layout: opcode 0, flags 1 (FUSE 1:0, PSDT 7:6),
/// CID 2..4, NSID 4..8, CDW2 8..12, CDW3 12..16, MPTR 16..24, DPTR 24..40, CDW10..15 40..64.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Sqe {
    pub opcode: u8,
    pub flags: u8,
    pub cid: u16,
    pub nsid: u32,
    pub cdw2: u32,
    pub cdw3: u32,
    pub mptr: u64,
    pub dptr: [u8; 16],
    pub cdw10: u32,
    pub cdw11: u32,
    pub cdw12: u32,
    pub cdw13: u32,
    pub cdw14: u32,
    pub cdw15: u32,
}

/// PSDT = 01b: SGLs for data, metadata pointer is a contiguous buffer. Every fabrics command uses it.
pub const FLAGS_PSDT_SGL: u8 = 0x40;

impl Sqe {
    pub fn decode(buf: &[u8]) -> Result<Sqe, DecodeError> {
        need("SQE", buf, SQE_LEN)?;
        Ok(Sqe {
            opcode: buf[0],
            flags: buf[1],
            cid: u16_at(buf, 2),
            nsid: u32_at(buf, 4),
            cdw2: u32_at(buf, 8),
            cdw3: u32_at(buf, 12),
            mptr: u64_at(buf, 16),
            dptr: buf[24..40].try_into().unwrap(),
            cdw10: u32_at(buf, 40),
            cdw11: u32_at(buf, 44),
            cdw12: u32_at(buf, 48),
            cdw13: u32_at(buf, 52),
            cdw14: u32_at(buf, 56),
            cdw15: u32_at(buf, 60),
        })
    }

    pub fn encode(&self, buf: &mut [u8]) {
        buf[0] = self.opcode;
        buf[1] = self.flags;
        put_u16(buf, 2, self.cid);
        put_u32(buf, 4, self.nsid);
        put_u32(buf, 8, self.cdw2);
        put_u32(buf, 12, self.cdw3);
        put_u64(buf, 16, self.mptr);
        buf[24..40].copy_from_slice(&self.dptr);
        put_u32(buf, 40, self.cdw10);
        put_u32(buf, 44, self.cdw11);
        put_u32(buf, 48, self.cdw12);
        put_u32(buf, 52, self.cdw13);
        put_u32(buf, 56, self.cdw14);
        put_u32(buf, 60, self.cdw15);
    }

    pub fn to_bytes(&self) -> [u8; SQE_LEN] {
        let mut b = [0u8; SQE_LEN];
        self.encode(&mut b);
        b
    }

    /// Fused operation bits (FUSE); fabrics targets here support none.
    pub fn fuse(&self) -> u8 {
        self.flags & 0x3
    }

    /// PRP or SGL data transfer (PSDT).
    pub fn psdt(&self) -> u8 {
        self.flags >> 6
    }

    /// The data pointer as SGL Descriptor 1.
    pub fn sgl(&self) -> Result<SglDescriptor, DecodeError> {
        SglDescriptor::decode(&self.dptr)
    }

    pub fn set_sgl(&mut self, sgl: &SglDescriptor) {
        self.dptr = sgl.encode();
        self.flags = (self.flags & 0x3f) | FLAGS_PSDT_SGL;
    }

    /// Fabrics command type (byte 4), meaningful only when `opcode` is 0x7F.
    pub fn fctype(&self) -> u8 {
        self.nsid as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip(bytes in proptest::collection::vec(any::<u8>(), 64)) {
            let sqe = Sqe::decode(&bytes).unwrap();
            prop_assert_eq!(&sqe.to_bytes()[..], &bytes[..]);
        }
    }

    #[test]
    fn short_input_is_an_error() {
        assert!(matches!(
            Sqe::decode(&[0u8; 63]),
            Err(DecodeError::Short { .. })
        ));
    }
}
