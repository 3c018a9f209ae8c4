//! Admin commands: typed views of an SQE, with the field checks a controller must make.
//!
//! `parse` answers the NVMe status a controller returns for a malformed command, so the caller
//! can complete it directly; `to_sqe` builds the SQE a host sends.

use crate::nvme::admin_opcode as op;
use crate::nvme::sqe::{Sqe, FLAGS_PSDT_SGL};
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

/// Command Set Identifiers (Identify CDW11 CSI).
pub mod csi {
    /// The NVM command set.
    pub const NVM: u8 = 0x00;
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AdminCommand {
    /// CDW10: CNS 7:0, CNTID 31:16; CDW11: CSI 31:24.
    Identify {
        nsid: u32,
        cns: u8,
        cntid: u16,
        csi: u8,
    },
    /// CDW10: LID 7:0, LSP 14:8, RAE 15, NUMDL 31:16; CDW11: NUMDU 15:0; CDW12/13: LPO; CDW14 CSI 31:24.
    /// `numd` is the 0's based dword count put back together (bytes = (numd + 1) * 4).
    GetLogPage {
        nsid: u32,
        lid: u8,
        lsp: u8,
        rae: bool,
        numd: u32,
        lpo: u64,
        csi: u8,
    },
    /// CDW10: FID 7:0, SEL 10:8; CDW11: feature specific.
    GetFeatures {
        nsid: u32,
        fid: u8,
        sel: u8,
        cdw11: u32,
    },
    /// CDW10: FID 7:0, SV 31; CDW11..CDW14 feature specific.
    SetFeatures {
        nsid: u32,
        fid: u8,
        save: bool,
        cdw11: u32,
        cdw12: u32,
        cdw13: u32,
        cdw14: u32,
    },
    /// CDW10: SQID 15:0, CID 31:16.
    Abort {
        sqid: u16,
        cid: u16,
    },
    AsyncEventRequest,
    KeepAlive,
    /// Discovery Information Management (TP8010), to a Central Discovery Controller. CDW10: TAS
    /// 3:0 (`fabrics::dim::tas`); the data (host to controller) is `fabrics::dim::DimData`.
    /// `tas` is returned as sent, reserved values (3..=15) included: answering those (Invalid
    /// Field) is the controller's job, like every other value it judges.
    DiscoveryInfoManagement {
        tas: u8,
    },
}

/// SQE flags bits 5:2 are reserved in every command; bits 1:0 are FUSE, bits 7:6 PSDT.
const FLAGS_RESERVED: u8 = 0x3c;

/// Checks the SQE flags byte the same way for admin, I/O and fabrics commands: no fused
/// operations, reserved bits clear. PSDT is not judged here: the Linux host sets 0x40 (SGL) on
/// every command and whether the data pointer is usable is the transport's business.
pub(crate) fn check_flags(sqe: &Sqe) -> Result<(), Status> {
    if sqe.fuse() != 0 || sqe.flags & FLAGS_RESERVED != 0 {
        return Err(Status::INVALID_FIELD);
    }
    Ok(())
}

/// `Ok` if every bit of `value` outside `allowed` is clear, else Invalid Field.
pub(crate) fn only(value: u32, allowed: u32) -> Result<(), Status> {
    if value & !allowed == 0 {
        Ok(())
    } else {
        Err(Status::INVALID_FIELD)
    }
}

/// CDW14 bits 6:0, the UUID Index of Identify, Get Log Page, Get/Set Features. Ignored: we
/// report no UUID list, and the spec lets a controller without UUID selection ignore it.
const CDW14_UUID_INDEX: u32 = 0x7f;

impl AdminCommand {
    /// Typed view of an admin SQE (opcode 0x7F is handled by `fabrics`, not here).
    /// Unknown or unsupported opcodes: Invalid Command Opcode. Bad fields: Invalid Field.
    ///
    /// Checked: FUSE and reserved flag bits, CDW2/CDW3/MPTR (reserved for every admin command
    /// here; the Linux host clears the whole SQE before filling it) and the reserved bits of
    /// CDW10..CDW15. Not checked: the CID (the Linux host keeps a generation counter in its top
    /// bits), PSDT, NSID of commands that do not use it, and the UUID index.
    pub fn parse(sqe: &Sqe) -> Result<AdminCommand, Status> {
        check_flags(sqe)?;
        let known = matches!(
            sqe.opcode,
            op::IDENTIFY
                | op::GET_LOG_PAGE
                | op::GET_FEATURES
                | op::SET_FEATURES
                | op::ABORT
                | op::ASYNC_EVENT_REQUEST
                | op::KEEP_ALIVE
                | op::DISCOVERY_INFO_MGMT
        );
        if !known {
            return Err(Status::INVALID_OPCODE);
        }
        if sqe.cdw2 != 0 || sqe.cdw3 != 0 || sqe.mptr != 0 {
            return Err(Status::INVALID_FIELD);
        }
        match sqe.opcode {
            op::IDENTIFY => {
                // CDW10: CNS 7:0, reserved 15:8, CNTID 31:16.
                only(sqe.cdw10, 0xffff_00ff)?;
                // CDW11: CNS specific identifier 15:0 (ignored: no CNS we serve uses it),
                // reserved 23:16, CSI 31:24 (the Linux host sets it for CNS 05h/06h).
                only(sqe.cdw11, 0xff00_ffff)?;
                only(sqe.cdw12 | sqe.cdw13 | sqe.cdw15, 0)?;
                only(sqe.cdw14, CDW14_UUID_INDEX)?;
                // Every CNS value is accepted here: which ones are served is the controller's call.
                Ok(AdminCommand::Identify {
                    nsid: sqe.nsid,
                    cns: sqe.cdw10 as u8,
                    cntid: (sqe.cdw10 >> 16) as u16,
                    csi: (sqe.cdw11 >> 24) as u8,
                })
            }
            op::GET_LOG_PAGE => {
                // CDW10: LID 7:0, LSP 14:8, RAE 15, NUMDL 31:16 (all bits defined).
                // CDW11: NUMDU 15:0, LSI 31:16 (ignored: none of the logs served uses it).
                // CDW12/13: LPO. CDW14: UUID index 6:0, reserved 22:7, OT 23, CSI 31:24.
                // OT = 1 (offset is an index) is not supported: Invalid Field.
                only(sqe.cdw14, 0xff00_0000 | CDW14_UUID_INDEX)?;
                only(sqe.cdw15, 0)?;
                let lpo = sqe.cdw12 as u64 | (sqe.cdw13 as u64) << 32;
                if lpo & 3 != 0 {
                    return Err(Status::INVALID_FIELD);
                }
                Ok(AdminCommand::GetLogPage {
                    nsid: sqe.nsid,
                    lid: sqe.cdw10 as u8,
                    lsp: ((sqe.cdw10 >> 8) & 0x7f) as u8,
                    rae: sqe.cdw10 & (1 << 15) != 0,
                    numd: (sqe.cdw10 >> 16) | (sqe.cdw11 & 0xffff) << 16,
                    lpo,
                    csi: (sqe.cdw14 >> 24) as u8,
                })
            }
            op::GET_FEATURES => {
                // CDW10: FID 7:0, SEL 10:8, reserved 31:11. CDW11 feature specific.
                only(sqe.cdw10, 0x7ff)?;
                only(sqe.cdw12 | sqe.cdw13 | sqe.cdw15, 0)?;
                only(sqe.cdw14, CDW14_UUID_INDEX)?;
                Ok(AdminCommand::GetFeatures {
                    nsid: sqe.nsid,
                    fid: sqe.cdw10 as u8,
                    sel: ((sqe.cdw10 >> 8) & 0x7) as u8,
                    cdw11: sqe.cdw11,
                })
            }
            op::SET_FEATURES => {
                // CDW10: FID 7:0, reserved 30:8, SV 31. CDW11..CDW14 feature specific (the
                // UUID index shares CDW14 and is kept as part of it); no feature uses CDW15.
                only(sqe.cdw10, 0x8000_00ff)?;
                only(sqe.cdw15, 0)?;
                Ok(AdminCommand::SetFeatures {
                    nsid: sqe.nsid,
                    fid: sqe.cdw10 as u8,
                    save: sqe.cdw10 & (1 << 31) != 0,
                    cdw11: sqe.cdw11,
                    cdw12: sqe.cdw12,
                    cdw13: sqe.cdw13,
                    cdw14: sqe.cdw14,
                })
            }
            op::ABORT => {
                only(sqe.cdw11 | sqe.cdw12 | sqe.cdw13 | sqe.cdw14 | sqe.cdw15, 0)?;
                Ok(AdminCommand::Abort {
                    sqid: sqe.cdw10 as u16,
                    cid: (sqe.cdw10 >> 16) as u16,
                })
            }
            op::ASYNC_EVENT_REQUEST | op::KEEP_ALIVE => {
                only(
                    sqe.cdw10 | sqe.cdw11 | sqe.cdw12 | sqe.cdw13 | sqe.cdw14 | sqe.cdw15,
                    0,
                )?;
                Ok(if sqe.opcode == op::KEEP_ALIVE {
                    AdminCommand::KeepAlive
                } else {
                    AdminCommand::AsyncEventRequest
                })
            }
            op::DISCOVERY_INFO_MGMT => {
                // CDW10: TAS 3:0, reserved 31:4. CDW11..CDW15 reserved (libnvme sets only CDW10).
                only(sqe.cdw10, 0xf)?;
                only(sqe.cdw11 | sqe.cdw12 | sqe.cdw13 | sqe.cdw14 | sqe.cdw15, 0)?;
                Ok(AdminCommand::DiscoveryInfoManagement {
                    tas: sqe.cdw10 as u8,
                })
            }
            _ => Err(Status::INVALID_OPCODE),
        }
    }

    /// Byte length of a Get Log Page's data; 0 for other commands.
    pub fn log_len(&self) -> usize {
        match *self {
            AdminCommand::GetLogPage { numd, .. } => ((numd as u64 + 1) * 4) as usize,
            _ => 0,
        }
    }

    /// The opcode this command is sent with.
    pub fn opcode(&self) -> u8 {
        match self {
            AdminCommand::Identify { .. } => op::IDENTIFY,
            AdminCommand::GetLogPage { .. } => op::GET_LOG_PAGE,
            AdminCommand::GetFeatures { .. } => op::GET_FEATURES,
            AdminCommand::SetFeatures { .. } => op::SET_FEATURES,
            AdminCommand::Abort { .. } => op::ABORT,
            AdminCommand::AsyncEventRequest => op::ASYNC_EVENT_REQUEST,
            AdminCommand::KeepAlive => op::KEEP_ALIVE,
            AdminCommand::DiscoveryInfoManagement { .. } => op::DISCOVERY_INFO_MGMT,
        }
    }

    /// The SQE a host sends: PSDT = SGL, data pointer left zero for the transport to fill.
    /// Values wider than their field (LSP, SEL, TAS) are cut to the field. A Get Log Page `lpo`
    /// must be dword aligned for `parse` to accept it back.
    pub fn to_sqe(&self, cid: u16) -> Sqe {
        let mut sqe = Sqe {
            opcode: self.opcode(),
            flags: FLAGS_PSDT_SGL,
            cid,
            ..Sqe::default()
        };
        match *self {
            AdminCommand::Identify {
                nsid,
                cns,
                cntid,
                csi,
            } => {
                sqe.nsid = nsid;
                sqe.cdw10 = cns as u32 | (cntid as u32) << 16;
                sqe.cdw11 = (csi as u32) << 24;
            }
            AdminCommand::GetLogPage {
                nsid,
                lid,
                lsp,
                rae,
                numd,
                lpo,
                csi,
            } => {
                sqe.nsid = nsid;
                sqe.cdw10 = lid as u32
                    | ((lsp & 0x7f) as u32) << 8
                    | (rae as u32) << 15
                    | (numd & 0xffff) << 16;
                sqe.cdw11 = numd >> 16;
                sqe.cdw12 = lpo as u32;
                sqe.cdw13 = (lpo >> 32) as u32;
                sqe.cdw14 = (csi as u32) << 24;
            }
            AdminCommand::GetFeatures {
                nsid,
                fid,
                sel,
                cdw11,
            } => {
                sqe.nsid = nsid;
                sqe.cdw10 = fid as u32 | ((sel & 0x7) as u32) << 8;
                sqe.cdw11 = cdw11;
            }
            AdminCommand::SetFeatures {
                nsid,
                fid,
                save,
                cdw11,
                cdw12,
                cdw13,
                cdw14,
            } => {
                sqe.nsid = nsid;
                sqe.cdw10 = fid as u32 | (save as u32) << 31;
                sqe.cdw11 = cdw11;
                sqe.cdw12 = cdw12;
                sqe.cdw13 = cdw13;
                sqe.cdw14 = cdw14;
            }
            AdminCommand::Abort { sqid, cid } => {
                sqe.cdw10 = sqid as u32 | (cid as u32) << 16;
            }
            AdminCommand::AsyncEventRequest | AdminCommand::KeepAlive => {}
            AdminCommand::DiscoveryInfoManagement { tas } => sqe.cdw10 = (tas & 0xf) as u32,
        }
        sqe
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn any_admin() -> impl Strategy<Value = AdminCommand> {
        prop_oneof![
            (any::<u32>(), any::<u8>(), any::<u16>(), any::<u8>()).prop_map(
                |(nsid, cns, cntid, csi)| AdminCommand::Identify {
                    nsid,
                    cns,
                    cntid,
                    csi
                }
            ),
            (
                any::<u32>(),
                any::<u8>(),
                0u8..0x80,
                any::<bool>(),
                any::<u32>(),
                any::<u64>(),
                any::<u8>()
            )
                .prop_map(|(nsid, lid, lsp, rae, numd, lpo, csi)| {
                    AdminCommand::GetLogPage {
                        nsid,
                        lid,
                        lsp,
                        rae,
                        numd,
                        lpo: lpo & !3,
                        csi,
                    }
                }),
            (any::<u32>(), any::<u8>(), 0u8..8, any::<u32>()).prop_map(
                |(nsid, fid, sel, cdw11)| AdminCommand::GetFeatures {
                    nsid,
                    fid,
                    sel,
                    cdw11
                }
            ),
            (any::<u32>(), any::<u8>(), any::<bool>(), any::<[u32; 4]>()).prop_map(
                |(nsid, fid, save, d)| {
                    AdminCommand::SetFeatures {
                        nsid,
                        fid,
                        save,
                        cdw11: d[0],
                        cdw12: d[1],
                        cdw13: d[2],
                        cdw14: d[3],
                    }
                }
            ),
            (any::<u16>(), any::<u16>()).prop_map(|(sqid, cid)| AdminCommand::Abort { sqid, cid }),
            Just(AdminCommand::AsyncEventRequest),
            Just(AdminCommand::KeepAlive),
            (0u8..16).prop_map(|tas| AdminCommand::DiscoveryInfoManagement { tas }),
        ]
    }

    proptest! {
        #[test]
        fn round_trip(cmd in any_admin(), cid: u16) {
            let sqe = cmd.to_sqe(cid);
            prop_assert_eq!(sqe.cid, cid);
            prop_assert_eq!(sqe.flags, FLAGS_PSDT_SGL);
            prop_assert_eq!(sqe.dptr, [0u8; 16]);
            prop_assert_eq!(AdminCommand::parse(&sqe), Ok(cmd));
            // And through the wire bytes.
            prop_assert_eq!(AdminCommand::parse(&Sqe::decode(&sqe.to_bytes()).unwrap()), Ok(cmd));
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 64), opcode in prop_oneof![
            Just(op::IDENTIFY), Just(op::GET_LOG_PAGE), Just(op::GET_FEATURES), Just(op::SET_FEATURES),
            Just(op::ABORT), Just(op::ASYNC_EVENT_REQUEST), Just(op::KEEP_ALIVE),
            Just(op::DISCOVERY_INFO_MGMT), any::<u8>()]) {
            let mut sqe = Sqe::decode(&bytes).unwrap();
            sqe.opcode = opcode;
            if let Ok(cmd) = AdminCommand::parse(&sqe) {
                prop_assert_eq!(AdminCommand::parse(&cmd.to_sqe(sqe.cid)), Ok(cmd));
                let _ = cmd.log_len();
            }
        }

        #[test]
        fn only_known_opcodes(opcode: u8) {
            let sqe = Sqe { opcode, flags: FLAGS_PSDT_SGL, ..Sqe::default() };
            let known = [op::IDENTIFY, op::GET_LOG_PAGE, op::GET_FEATURES, op::SET_FEATURES, op::ABORT,
                op::ASYNC_EVENT_REQUEST, op::KEEP_ALIVE, op::DISCOVERY_INFO_MGMT];
            match AdminCommand::parse(&sqe) {
                Ok(_) => prop_assert!(known.contains(&opcode)),
                Err(s) => {
                    prop_assert!(!known.contains(&opcode));
                    prop_assert_eq!(s, Status::INVALID_OPCODE);
                }
            }
        }
    }

    fn sqe(opcode: u8) -> Sqe {
        // What the Linux host sends: PSDT = SGL, generation counter in the CID's top bits.
        Sqe {
            opcode,
            flags: 0x40,
            cid: 0xb005,
            ..Sqe::default()
        }
    }

    #[test]
    fn linux_identify_commands() {
        let mut s = sqe(op::IDENTIFY);
        s.cdw10 = cns::CONTROLLER as u32;
        assert_eq!(
            AdminCommand::parse(&s),
            Ok(AdminCommand::Identify {
                nsid: 0,
                cns: 1,
                cntid: 0,
                csi: 0
            })
        );
        // CNS 06h with CSI in CDW11 31:24.
        s.cdw10 = cns::CSI_CONTROLLER as u32;
        s.cdw11 = 2 << 24;
        assert_eq!(
            AdminCommand::parse(&s),
            Ok(AdminCommand::Identify {
                nsid: 0,
                cns: 6,
                cntid: 0,
                csi: 2
            })
        );
        // Unknown CNS values still parse.
        s.cdw10 = 0x1f;
        s.nsid = 7;
        assert_eq!(
            AdminCommand::parse(&s),
            Ok(AdminCommand::Identify {
                nsid: 7,
                cns: 0x1f,
                cntid: 0,
                csi: 2
            })
        );
        // CNTID in CDW10 31:16.
        s.cdw10 = 0x0012_0001;
        assert!(matches!(
            AdminCommand::parse(&s),
            Ok(AdminCommand::Identify { cntid: 0x12, .. })
        ));
        // Reserved CDW10 15:8.
        s.cdw10 = 0x0000_0101;
        assert_eq!(AdminCommand::parse(&s), Err(Status::INVALID_FIELD));
        // CNS specific identifier and UUID index are ignored.
        let mut s = sqe(op::IDENTIFY);
        s.cdw11 = 0x1234;
        s.cdw14 = 0x05;
        assert!(AdminCommand::parse(&s).is_ok());
        s.cdw14 = 0x80;
        assert_eq!(AdminCommand::parse(&s), Err(Status::INVALID_FIELD));
        let mut s = sqe(op::IDENTIFY);
        s.cdw11 = 0x0001_0000;
        assert_eq!(AdminCommand::parse(&s), Err(Status::INVALID_FIELD));
    }

    #[test]
    fn get_log_page_fields() {
        // SMART, 512 bytes, NSID 0xFFFFFFFF: NUMDL = 127.
        let mut s = sqe(op::GET_LOG_PAGE);
        s.nsid = 0xffff_ffff;
        s.cdw10 = 0x02 | 127 << 16;
        let cmd = AdminCommand::parse(&s).unwrap();
        assert_eq!(
            cmd,
            AdminCommand::GetLogPage {
                nsid: 0xffff_ffff,
                lid: 2,
                lsp: 0,
                rae: false,
                numd: 127,
                lpo: 0,
                csi: 0
            }
        );
        assert_eq!(cmd.log_len(), 512);
        // Discovery log, RAE set, 4096 bytes at LPO 8192 (libnvme's chunking).
        let mut s = sqe(op::GET_LOG_PAGE);
        s.cdw10 = 0x70 | 1 << 15 | 1023 << 16;
        s.cdw12 = 8192;
        let cmd = AdminCommand::parse(&s).unwrap();
        assert_eq!(
            cmd,
            AdminCommand::GetLogPage {
                nsid: 0,
                lid: 0x70,
                lsp: 0,
                rae: true,
                numd: 1023,
                lpo: 8192,
                csi: 0
            }
        );
        assert_eq!(cmd.log_len(), 4096);
        // NUMDU supplies the upper half of NUMD; LPOU the upper half of LPO.
        s.cdw10 = 0x70 | 0xffff << 16;
        s.cdw11 = 0x0001;
        s.cdw13 = 1;
        let cmd = AdminCommand::parse(&s).unwrap();
        assert!(matches!(
            cmd,
            AdminCommand::GetLogPage {
                numd: 0x1ffff,
                lpo: 0x1_0000_2000,
                ..
            }
        ));
        assert_eq!(cmd.log_len(), 0x20000 * 4);
        // Largest NUMD.
        let max = AdminCommand::GetLogPage {
            nsid: 0,
            lid: 1,
            lsp: 0,
            rae: false,
            numd: u32::MAX,
            lpo: 0,
            csi: 0,
        };
        assert_eq!(max.log_len(), 1 << 34);
        // LSP 14:8 and CSI in CDW14 31:24.
        let mut s = sqe(op::GET_LOG_PAGE);
        s.cdw10 = 0x0c | 0x7f << 8;
        s.cdw14 = 0x02 << 24;
        assert!(matches!(
            AdminCommand::parse(&s),
            Ok(AdminCommand::GetLogPage {
                lid: 0x0c,
                lsp: 0x7f,
                csi: 2,
                ..
            })
        ));
        // Unaligned LPO.
        let mut s = sqe(op::GET_LOG_PAGE);
        s.cdw12 = 2;
        assert_eq!(AdminCommand::parse(&s), Err(Status::INVALID_FIELD));
        // Offset type (index) is not supported; reserved CDW14 bits; CDW15.
        for (cdw14, cdw15) in [(1 << 23, 0), (1 << 7, 0), (0, 1)] {
            let mut s = sqe(op::GET_LOG_PAGE);
            s.cdw14 = cdw14;
            s.cdw15 = cdw15;
            assert_eq!(
                AdminCommand::parse(&s),
                Err(Status::INVALID_FIELD),
                "{cdw14:#x} {cdw15:#x}"
            );
        }
        assert_eq!(AdminCommand::KeepAlive.log_len(), 0);
    }

    #[test]
    fn features_and_abort() {
        // Set Features Number of Queues as the Linux host sends it.
        let mut s = sqe(op::SET_FEATURES);
        s.cdw10 = 0x07;
        s.cdw11 = 0x0003_0003;
        assert_eq!(
            AdminCommand::parse(&s),
            Ok(AdminCommand::SetFeatures {
                nsid: 0,
                fid: 7,
                save: false,
                cdw11: 0x0003_0003,
                cdw12: 0,
                cdw13: 0,
                cdw14: 0
            })
        );
        s.cdw10 = 0x8000_000b;
        assert!(matches!(
            AdminCommand::parse(&s),
            Ok(AdminCommand::SetFeatures {
                fid: 0x0b,
                save: true,
                ..
            })
        ));
        s.cdw10 = 0x0000_010b;
        assert_eq!(AdminCommand::parse(&s), Err(Status::INVALID_FIELD));
        let mut s = sqe(op::GET_FEATURES);
        s.cdw10 = 0x0f | 3 << 8;
        assert_eq!(
            AdminCommand::parse(&s),
            Ok(AdminCommand::GetFeatures {
                nsid: 0,
                fid: 0x0f,
                sel: 3,
                cdw11: 0
            })
        );
        s.cdw10 = 0x0f | 1 << 11;
        assert_eq!(AdminCommand::parse(&s), Err(Status::INVALID_FIELD));
        let mut s = sqe(op::ABORT);
        s.cdw10 = 0x1234_0002;
        assert_eq!(
            AdminCommand::parse(&s),
            Ok(AdminCommand::Abort {
                sqid: 2,
                cid: 0x1234
            })
        );
        s.cdw11 = 1;
        assert_eq!(AdminCommand::parse(&s), Err(Status::INVALID_FIELD));
        // AER as Linux sends it (CID 31, no generation bits).
        let mut s = sqe(op::ASYNC_EVENT_REQUEST);
        s.cid = 31;
        assert_eq!(AdminCommand::parse(&s), Ok(AdminCommand::AsyncEventRequest));
        s.cdw10 = 1;
        assert_eq!(AdminCommand::parse(&s), Err(Status::INVALID_FIELD));
        assert_eq!(
            AdminCommand::parse(&sqe(op::KEEP_ALIVE)),
            Ok(AdminCommand::KeepAlive)
        );
    }

    #[test]
    fn discovery_info_management() {
        // What libnvme's nvme_dim_send builds: CDW10 = TAS, nothing else; data host to controller.
        assert_eq!(
            crate::nvme::data_direction(op::DISCOVERY_INFO_MGMT, 0),
            crate::nvme::DataDirection::ToController
        );
        for tas in [0, 1, 2] {
            let mut s = sqe(op::DISCOVERY_INFO_MGMT);
            s.cdw10 = tas as u32;
            let cmd = AdminCommand::parse(&s).unwrap();
            assert_eq!(cmd, AdminCommand::DiscoveryInfoManagement { tas });
            assert_eq!(cmd.log_len(), 0);
            let again = cmd.to_sqe(s.cid);
            assert_eq!((again.opcode, again.cdw10), (0x21, tas as u32));
            assert_eq!(AdminCommand::parse(&again), Ok(cmd));
        }
        // Reserved TAS values parse: the controller answers them.
        let mut s = sqe(op::DISCOVERY_INFO_MGMT);
        s.cdw10 = 0xf;
        assert_eq!(
            AdminCommand::parse(&s),
            Ok(AdminCommand::DiscoveryInfoManagement { tas: 0xf })
        );
        // The NSID is not used and not judged.
        s.nsid = 0xffff_ffff;
        assert!(AdminCommand::parse(&s).is_ok());
        // Reserved CDW10 31:4, CDW11..CDW15.
        for bit in [4, 8, 16, 31] {
            let mut s = sqe(op::DISCOVERY_INFO_MGMT);
            s.cdw10 = 1 << bit;
            assert_eq!(AdminCommand::parse(&s), Err(Status::INVALID_FIELD), "{bit}");
        }
        for dw in 11..=15 {
            let mut s = sqe(op::DISCOVERY_INFO_MGMT);
            match dw {
                11 => s.cdw11 = 1,
                12 => s.cdw12 = 1,
                13 => s.cdw13 = 1,
                14 => s.cdw14 = 1,
                _ => s.cdw15 = 1 << 31,
            }
            assert_eq!(
                AdminCommand::parse(&s),
                Err(Status::INVALID_FIELD),
                "CDW{dw}"
            );
        }
        for (cdw2, cdw3, mptr) in [(1, 0, 0), (0, 1, 0), (0, 0, 1)] {
            let mut s = sqe(op::DISCOVERY_INFO_MGMT);
            (s.cdw2, s.cdw3, s.mptr) = (cdw2, cdw3, mptr);
            assert_eq!(AdminCommand::parse(&s), Err(Status::INVALID_FIELD));
        }
        // TAS is cut to its 4 bits on the way out.
        let b = AdminCommand::DiscoveryInfoManagement { tas: 0x12 }
            .to_sqe(7)
            .to_bytes();
        assert_eq!((b[0], b[1], &b[40..44]), (0x21, 0x40, &[2u8, 0, 0, 0][..]));
        assert!(b[44..64].iter().all(|&x| x == 0));
    }

    #[test]
    fn rejected_commands() {
        // Queue management does not exist over fabrics; fabrics commands go elsewhere.
        for opcode in [
            op::DELETE_IO_SQ,
            op::CREATE_IO_SQ,
            op::DELETE_IO_CQ,
            op::CREATE_IO_CQ,
            op::FABRICS,
            0x10,
            0x80,
            0xc0,
            0xff,
        ] {
            assert_eq!(
                AdminCommand::parse(&sqe(opcode)),
                Err(Status::INVALID_OPCODE),
                "{opcode:#x}"
            );
        }
        // Fused, reserved flag bits, reserved dwords.
        for flags in [0x41, 0x42, 0x43, 0x44, 0x60] {
            let mut s = sqe(op::KEEP_ALIVE);
            s.flags = flags;
            assert_eq!(
                AdminCommand::parse(&s),
                Err(Status::INVALID_FIELD),
                "{flags:#x}"
            );
        }
        for (cdw2, cdw3, mptr) in [(1, 0, 0), (0, 1, 0), (0, 0, 1)] {
            let mut s = sqe(op::IDENTIFY);
            (s.cdw2, s.cdw3, s.mptr) = (cdw2, cdw3, mptr);
            assert_eq!(AdminCommand::parse(&s), Err(Status::INVALID_FIELD));
        }
        // PSDT values are not judged here.
        for flags in [0x00, 0x80, 0xc0] {
            let mut s = sqe(op::KEEP_ALIVE);
            s.flags = flags;
            assert_eq!(AdminCommand::parse(&s), Ok(AdminCommand::KeepAlive));
        }
    }

    #[test]
    fn sqe_bytes() {
        let cmd = AdminCommand::GetLogPage {
            nsid: 0xffff_ffff,
            lid: 0x70,
            lsp: 1,
            rae: true,
            numd: 0x12345,
            lpo: 4096,
            csi: 0,
        };
        let b = cmd.to_sqe(0x4321).to_bytes();
        assert_eq!(b[0], op::GET_LOG_PAGE);
        assert_eq!(b[1], 0x40);
        assert_eq!(&b[2..4], &[0x21, 0x43]);
        assert_eq!(&b[4..8], &[0xff; 4]);
        assert_eq!(b[40], 0x70);
        assert_eq!(b[41], 0x81);
        assert_eq!(&b[42..44], &[0x45, 0x23]);
        assert_eq!(&b[44..46], &[0x01, 0x00]);
        assert_eq!(&b[48..56], &4096u64.to_le_bytes());
        let b = AdminCommand::Identify {
            nsid: 1,
            cns: 3,
            cntid: 0,
            csi: 0,
        }
        .to_sqe(0)
        .to_bytes();
        assert_eq!((b[0], b[40]), (0x06, 0x03));
    }
}
