//! NVM command set I/O commands.

use crate::error::DecodeError;
use crate::nvme::sqe::Sqe;
use crate::nvme::status::Status;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum IoCommand {
    /// CDW10/11 SLBA, CDW12 NLB 15:0 (0's based), FUA bit 30. `nlb` here is the block COUNT (1-based).
    Read { nsid: u32, slba: u64, nlb: u32, fua: bool },
    Write { nsid: u32, slba: u64, nlb: u32, fua: bool },
    Flush { nsid: u32 },
    /// CDW12: NLB 15:0, DEAC bit 25, FUA bit 30.
    WriteZeroes { nsid: u32, slba: u64, nlb: u32, fua: bool, deallocate: bool },
    /// CDW10: NR 7:0 (0's based) -> `ranges` is the count (1..=256); CDW11: IDR 0, IDW 1, AD 2.
    DatasetManagement { nsid: u32, ranges: u32, deallocate: bool },
}

impl IoCommand {
    /// Unknown opcode: Invalid Command Opcode; fused or reserved bits: Invalid Field.
    pub fn parse(sqe: &Sqe) -> Result<IoCommand, Status> {
        todo!()
    }

    pub fn to_sqe(&self, cid: u16) -> Sqe {
        todo!()
    }

    pub fn nsid(&self) -> u32 {
        todo!()
    }

    /// Bytes of data this command moves (for DSM: 16 bytes per range), given the LBA size.
    pub fn data_len(&self, lba_size: u32) -> u64 {
        todo!()
    }
}

/// One Dataset Management range (16 bytes): context attributes 0..4, length in blocks 4..8
/// (1-based here, as the spec), starting LBA 8..16.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct DsmRange {
    pub attributes: u32,
    pub nlb: u32,
    pub slba: u64,
}

pub const DSM_RANGE_LEN: usize = 16;

impl DsmRange {
    pub fn decode(buf: &[u8]) -> Result<DsmRange, DecodeError> {
        todo!()
    }
    pub fn encode(&self, buf: &mut [u8]) {
        todo!()
    }
    /// Decodes `count` ranges from `buf` (which must hold exactly count*16 bytes or more).
    pub fn decode_list(buf: &[u8], count: usize) -> Result<Vec<DsmRange>, DecodeError> {
        todo!()
    }
}
