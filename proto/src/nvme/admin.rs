//! Admin commands: typed views of an SQE, with the field checks a controller must make.
//!
//! `parse` answers the NVMe status a controller returns for a malformed command, so the caller
//! can complete it directly; `to_sqe` builds the SQE a host sends.

use crate::nvme::admin_opcode as op;
use crate::nvme::sqe::Sqe;
use crate::nvme::status::Status;

/// Identify CNS values.
pub mod cns {
    pub const NAMESPACE: u8 = 0x00;
    pub const CONTROLLER: u8 = 0x01;
    pub const ACTIVE_NS_LIST: u8 = 0x02;
    pub const NS_ID_DESCRIPTORS: u8 = 0x03;
    pub const CSI_NAMESPACE: u8 = 0x05;
    pub const CSI_CONTROLLER: u8 = 0x06;
    pub const CSI_ACTIVE_NS_LIST: u8 = 0x07;
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AdminCommand {
    /// CDW10: CNS 7:0, CNTID 31:16; CDW11: CSI 31:24.
    Identify { nsid: u32, cns: u8, cntid: u16, csi: u8 },
    /// CDW10: LID 7:0, LSP 14:8, RAE 15, NUMDL 31:16; CDW11: NUMDU 15:0; CDW12/13: LPO; CDW14 CSI 31:24.
    /// `numd` is the 0's based dword count put back together (bytes = (numd + 1) * 4).
    GetLogPage { nsid: u32, lid: u8, lsp: u8, rae: bool, numd: u32, lpo: u64, csi: u8 },
    /// CDW10: FID 7:0, SEL 10:8; CDW11: feature specific.
    GetFeatures { nsid: u32, fid: u8, sel: u8, cdw11: u32 },
    /// CDW10: FID 7:0, SV 31; CDW11..CDW14 feature specific.
    SetFeatures { nsid: u32, fid: u8, save: bool, cdw11: u32, cdw12: u32, cdw13: u32, cdw14: u32 },
    /// CDW10: SQID 15:0, CID 31:16.
    Abort { sqid: u16, cid: u16 },
    AsyncEventRequest,
    KeepAlive,
}

impl AdminCommand {
    /// Typed view of an admin SQE (opcode 0x7F is handled by `fabrics`, not here).
    /// Unknown or unsupported opcodes: Invalid Command Opcode. Bad fields: Invalid Field.
    pub fn parse(sqe: &Sqe) -> Result<AdminCommand, Status> {
        todo!()
    }

    /// Byte length of a Get Log Page's data; 0 for other commands.
    pub fn log_len(&self) -> usize {
        todo!()
    }

    pub fn to_sqe(&self, cid: u16) -> Sqe {
        todo!()
    }
}
