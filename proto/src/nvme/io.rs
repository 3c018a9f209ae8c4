//! NVM command set I/O commands.

use crate::error::{need, DecodeError};
use crate::le::*;
use crate::nvme::admin::{check_flags, only};
use crate::nvme::io_opcode as op;
use crate::nvme::sqe::{Sqe, FLAGS_PSDT_SGL};
use crate::nvme::status::Status;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum IoCommand {
    /// CDW10/11 SLBA, CDW12 NLB 15:0 (0's based), FUA bit 30. `nlb` here is the block COUNT (1-based).
    Read {
        nsid: u32,
        slba: u64,
        nlb: u32,
        fua: bool,
    },
    Write {
        nsid: u32,
        slba: u64,
        nlb: u32,
        fua: bool,
    },
    Flush {
        nsid: u32,
    },
    /// CDW12: NLB 15:0, DEAC bit 25, FUA bit 30.
    WriteZeroes {
        nsid: u32,
        slba: u64,
        nlb: u32,
        fua: bool,
        deallocate: bool,
    },
    /// CDW10: NR 7:0 (0's based) -> `ranges` is the count (1..=256); CDW11: IDR 0, IDW 1, AD 2.
    DatasetManagement {
        nsid: u32,
        ranges: u32,
        deallocate: bool,
    },
}

/// CDW12 of Read / Write / Write Zeroes.
mod cdw12 {
    pub const NLB: u32 = 0xffff;
    /// Storage Tag Check (protection information; ignored, we advertise DPS 0).
    pub const STC: u32 = 1 << 24;
    pub const DEAC: u32 = 1 << 25;
    /// Protection information action/check (ignored, we advertise DPS 0).
    pub const PRINFO: u32 = 0xf << 26;
    pub const FUA: u32 = 1 << 30;
    /// Limited Retry: the Linux host sets it on fail-fast requests; a hint, ignored.
    pub const LR: u32 = 1 << 31;
}

/// DSM CDW11 attributes.
mod dsm {
    pub const IDR: u32 = 1 << 0;
    pub const IDW: u32 = 1 << 1;
    pub const AD: u32 = 1 << 2;
}

impl IoCommand {
    /// Unknown opcode: Invalid Command Opcode; fused or reserved bits: Invalid Field.
    ///
    /// Not checked (left to the controller): NSID validity, SLBA + NLB against the namespace
    /// size and u64 overflow (LBA Out of Range). Ignored because we advertise no protection
    /// information or metadata: PRINFO, STC, CDW2/CDW3/CDW14/CDW15 (storage/reference tags) and
    /// MPTR of Read/Write/Write Zeroes. Ignored hints: LR (set by the Linux host on fail-fast
    /// requests), the CDW13 dataset management hints (the Linux host sets them on readahead),
    /// DSM IDR/IDW.
    pub fn parse(sqe: &Sqe) -> Result<IoCommand, Status> {
        check_flags(sqe)?;
        let nsid = sqe.nsid;
        let slba = sqe.cdw10 as u64 | (sqe.cdw11 as u64) << 32;
        let nlb = (sqe.cdw12 & cdw12::NLB) + 1;
        let fua = sqe.cdw12 & cdw12::FUA != 0;
        let ignored = cdw12::STC | cdw12::PRINFO | cdw12::LR;
        match sqe.opcode {
            op::READ | op::WRITE => {
                // CDW12 19:16 and 25 reserved; 23:20 DTYPE on Write (no directive is enabled,
                // so a non-zero type is invalid), reserved on Read.
                only(sqe.cdw12, cdw12::NLB | cdw12::FUA | ignored)?;
                // CDW13: DSM hints 7:0 (ignored), reserved 15:8, DSPEC 31:16 (Write; meaningless
                // without a directive type, ignored) / reserved (Read).
                let dspec = if sqe.opcode == op::WRITE {
                    0xffff_0000
                } else {
                    0
                };
                only(sqe.cdw13, 0xff | dspec)?;
                Ok(if sqe.opcode == op::READ {
                    IoCommand::Read {
                        nsid,
                        slba,
                        nlb,
                        fua,
                    }
                } else {
                    IoCommand::Write {
                        nsid,
                        slba,
                        nlb,
                        fua,
                    }
                })
            }
            op::WRITE_ZEROES => {
                // CDW12 23:16 reserved; CDW13 reserved.
                only(sqe.cdw12, cdw12::NLB | cdw12::DEAC | cdw12::FUA | ignored)?;
                only(sqe.cdw13, 0)?;
                Ok(IoCommand::WriteZeroes {
                    nsid,
                    slba,
                    nlb,
                    fua,
                    deallocate: sqe.cdw12 & cdw12::DEAC != 0,
                })
            }
            op::FLUSH => {
                only(sqe.cdw2 | sqe.cdw3, 0)?;
                if sqe.mptr != 0 {
                    return Err(Status::INVALID_FIELD);
                }
                only(
                    sqe.cdw10 | sqe.cdw11 | sqe.cdw12 | sqe.cdw13 | sqe.cdw14 | sqe.cdw15,
                    0,
                )?;
                Ok(IoCommand::Flush { nsid })
            }
            op::DATASET_MANAGEMENT => {
                only(sqe.cdw2 | sqe.cdw3, 0)?;
                if sqe.mptr != 0 {
                    return Err(Status::INVALID_FIELD);
                }
                // CDW10: NR 7:0, reserved 31:8. CDW11: IDR 0, IDW 1, AD 2, reserved 31:3.
                only(sqe.cdw10, 0xff)?;
                only(sqe.cdw11, dsm::IDR | dsm::IDW | dsm::AD)?;
                only(sqe.cdw12 | sqe.cdw13 | sqe.cdw14 | sqe.cdw15, 0)?;
                Ok(IoCommand::DatasetManagement {
                    nsid,
                    ranges: (sqe.cdw10 & 0xff) + 1,
                    deallocate: sqe.cdw11 & dsm::AD != 0,
                })
            }
            _ => Err(Status::INVALID_OPCODE),
        }
    }

    /// The SQE a host sends: PSDT = SGL, data pointer left zero for the transport to fill.
    /// `nlb` must be 1..=65536 and `ranges` 1..=256 (they are cut to the field otherwise).
    pub fn to_sqe(&self, cid: u16) -> Sqe {
        let mut sqe = Sqe {
            flags: FLAGS_PSDT_SGL,
            cid,
            nsid: self.nsid(),
            ..Sqe::default()
        };
        let rw = |sqe: &mut Sqe, opcode: u8, slba: u64, nlb: u32, extra: u32| {
            sqe.opcode = opcode;
            sqe.cdw10 = slba as u32;
            sqe.cdw11 = (slba >> 32) as u32;
            sqe.cdw12 = (nlb.wrapping_sub(1) & cdw12::NLB) | extra;
        };
        let fua_bit = |fua: bool| if fua { cdw12::FUA } else { 0 };
        match *self {
            IoCommand::Read { slba, nlb, fua, .. } => {
                rw(&mut sqe, op::READ, slba, nlb, fua_bit(fua))
            }
            IoCommand::Write { slba, nlb, fua, .. } => {
                rw(&mut sqe, op::WRITE, slba, nlb, fua_bit(fua))
            }
            IoCommand::WriteZeroes {
                slba,
                nlb,
                fua,
                deallocate,
                ..
            } => {
                let deac = if deallocate { cdw12::DEAC } else { 0 };
                rw(&mut sqe, op::WRITE_ZEROES, slba, nlb, fua_bit(fua) | deac)
            }
            IoCommand::Flush { .. } => sqe.opcode = op::FLUSH,
            IoCommand::DatasetManagement {
                ranges, deallocate, ..
            } => {
                sqe.opcode = op::DATASET_MANAGEMENT;
                sqe.cdw10 = ranges.wrapping_sub(1) & 0xff;
                sqe.cdw11 = if deallocate { dsm::AD } else { 0 };
            }
        }
        sqe
    }

    pub fn nsid(&self) -> u32 {
        match *self {
            IoCommand::Read { nsid, .. }
            | IoCommand::Write { nsid, .. }
            | IoCommand::Flush { nsid }
            | IoCommand::WriteZeroes { nsid, .. }
            | IoCommand::DatasetManagement { nsid, .. } => nsid,
        }
    }

    /// Bytes of data this command moves (for DSM: 16 bytes per range), given the LBA size.
    pub fn data_len(&self, lba_size: u32) -> u64 {
        match *self {
            IoCommand::Read { nlb, .. } | IoCommand::Write { nlb, .. } => {
                nlb as u64 * lba_size as u64
            }
            IoCommand::DatasetManagement { ranges, .. } => ranges as u64 * DSM_RANGE_LEN as u64,
            IoCommand::Flush { .. } | IoCommand::WriteZeroes { .. } => 0,
        }
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
    /// Every bit of a range is defined (context attributes are hints), so only the length is
    /// checked. A zero `nlb` is legal on the wire and left to the controller.
    pub fn decode(buf: &[u8]) -> Result<DsmRange, DecodeError> {
        need("DSM range", buf, DSM_RANGE_LEN)?;
        Ok(DsmRange {
            attributes: u32_at(buf, 0),
            nlb: u32_at(buf, 4),
            slba: u64_at(buf, 8),
        })
    }
    pub fn encode(&self, buf: &mut [u8]) {
        put_u32(buf, 0, self.attributes);
        put_u32(buf, 4, self.nlb);
        put_u64(buf, 8, self.slba);
    }
    /// Decodes `count` ranges from `buf` (which must hold exactly count*16 bytes or more).
    pub fn decode_list(buf: &[u8], count: usize) -> Result<Vec<DsmRange>, DecodeError> {
        let len = count.checked_mul(DSM_RANGE_LEN).ok_or(DecodeError::short(
            "DSM range list",
            usize::MAX,
            buf.len(),
        ))?;
        need("DSM range list", buf, len)?;
        buf[..len]
            .chunks_exact(DSM_RANGE_LEN)
            .map(DsmRange::decode)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn any_io() -> impl Strategy<Value = IoCommand> {
        let rw = (any::<u32>(), any::<u64>(), 1u32..=65536, any::<bool>());
        prop_oneof![
            rw.clone()
                .prop_map(|(nsid, slba, nlb, fua)| IoCommand::Read {
                    nsid,
                    slba,
                    nlb,
                    fua
                }),
            rw.prop_map(|(nsid, slba, nlb, fua)| IoCommand::Write {
                nsid,
                slba,
                nlb,
                fua
            }),
            any::<u32>().prop_map(|nsid| IoCommand::Flush { nsid }),
            (
                any::<u32>(),
                any::<u64>(),
                1u32..=65536,
                any::<bool>(),
                any::<bool>()
            )
                .prop_map(|(nsid, slba, nlb, fua, deallocate)| {
                    IoCommand::WriteZeroes {
                        nsid,
                        slba,
                        nlb,
                        fua,
                        deallocate,
                    }
                }),
            (any::<u32>(), 1u32..=256, any::<bool>()).prop_map(|(nsid, ranges, deallocate)| {
                IoCommand::DatasetManagement {
                    nsid,
                    ranges,
                    deallocate,
                }
            }),
        ]
    }

    fn any_range() -> impl Strategy<Value = DsmRange> {
        (any::<u32>(), any::<u32>(), any::<u64>()).prop_map(|(attributes, nlb, slba)| DsmRange {
            attributes,
            nlb,
            slba,
        })
    }

    proptest! {
        #[test]
        fn round_trip(cmd in any_io(), cid: u16) {
            let sqe = cmd.to_sqe(cid);
            prop_assert_eq!((sqe.cid, sqe.flags, sqe.dptr), (cid, FLAGS_PSDT_SGL, [0u8; 16]));
            prop_assert_eq!(IoCommand::parse(&sqe), Ok(cmd));
            prop_assert_eq!(IoCommand::parse(&Sqe::decode(&sqe.to_bytes()).unwrap()), Ok(cmd));
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 64), opcode in 0u8..12) {
            let mut sqe = Sqe::decode(&bytes).unwrap();
            sqe.opcode = opcode;
            if let Ok(cmd) = IoCommand::parse(&sqe) {
                prop_assert_eq!(IoCommand::parse(&cmd.to_sqe(0)), Ok(cmd));
                let _ = cmd.data_len(4096);
            }
        }

        #[test]
        fn dsm_range_round_trip(r in any_range()) {
            let mut b = [0u8; DSM_RANGE_LEN];
            r.encode(&mut b);
            prop_assert_eq!(DsmRange::decode(&b), Ok(r));
        }

        #[test]
        fn dsm_list_round_trip(rs in proptest::collection::vec(any_range(), 0..=256), extra in 0usize..20) {
            let mut b = vec![0u8; rs.len() * DSM_RANGE_LEN + extra];
            for (i, r) in rs.iter().enumerate() {
                r.encode(&mut b[i * DSM_RANGE_LEN..]);
            }
            prop_assert_eq!(DsmRange::decode_list(&b, rs.len()), Ok(rs.clone()));
            if !rs.is_empty() {
                let short = &b[..rs.len() * DSM_RANGE_LEN - 1];
                let short_err = matches!(DsmRange::decode_list(short, rs.len()), Err(DecodeError::Short { .. }));
                prop_assert!(short_err);
            }
        }
    }

    fn sqe(opcode: u8) -> Sqe {
        Sqe {
            opcode,
            flags: 0x40,
            cid: 0x7001,
            nsid: 1,
            ..Sqe::default()
        }
    }

    #[test]
    fn read_write_fields() {
        let mut s = sqe(op::READ);
        s.cdw10 = 0x89ab_cdef;
        s.cdw11 = 0x0123_4567;
        s.cdw12 = 7;
        assert_eq!(
            IoCommand::parse(&s),
            Ok(IoCommand::Read {
                nsid: 1,
                slba: 0x0123_4567_89ab_cdef,
                nlb: 8,
                fua: false
            })
        );
        // 0's based NLB: 0xFFFF = 65536 blocks. FUA bit 30.
        s.opcode = op::WRITE;
        s.cdw12 = 0xffff | 1 << 30;
        let cmd = IoCommand::parse(&s).unwrap();
        assert_eq!(
            cmd,
            IoCommand::Write {
                nsid: 1,
                slba: 0x0123_4567_89ab_cdef,
                nlb: 65536,
                fua: true
            }
        );
        assert_eq!(cmd.data_len(4096), 65536 * 4096);
        assert_eq!(cmd.nsid(), 1);
        // SLBA + NLB overflowing u64 is the controller's LBA Out of Range, not a parse error.
        s.cdw10 = u32::MAX;
        s.cdw11 = u32::MAX;
        assert!(IoCommand::parse(&s).is_ok());
        // Ignored: PRINFO, STC, LR, DSM hints, PI tags, MPTR, DSPEC on writes.
        let mut s = sqe(op::READ);
        s.cdw12 = 0xf << 26 | 1 << 24 | 1 << 31;
        s.cdw13 = 0x07;
        s.cdw2 = 1;
        s.cdw3 = 2;
        s.cdw14 = 3;
        s.cdw15 = 4;
        s.mptr = 5;
        assert_eq!(
            IoCommand::parse(&s),
            Ok(IoCommand::Read {
                nsid: 1,
                slba: 0,
                nlb: 1,
                fua: false
            })
        );
        let mut s = sqe(op::WRITE);
        s.cdw13 = 0xabcd_0000;
        assert!(IoCommand::parse(&s).is_ok());
        // Reserved: CDW12 19:16, 23:20 (Write: directive type not enabled), 25; CDW13 15:8;
        // CDW13 31:16 on reads.
        for (opcode, cdw12, cdw13) in [
            (op::READ, 1 << 16, 0),
            (op::READ, 1 << 20, 0),
            (op::WRITE, 1 << 20, 0),
            (op::WRITE, 1 << 25, 0),
            (op::READ, 1 << 25, 0),
            (op::WRITE, 0, 1 << 8),
            (op::READ, 0, 1 << 16),
        ] {
            let mut s = sqe(opcode);
            s.cdw12 = cdw12;
            s.cdw13 = cdw13;
            assert_eq!(
                IoCommand::parse(&s),
                Err(Status::INVALID_FIELD),
                "{opcode} {cdw12:#x} {cdw13:#x}"
            );
        }
    }

    #[test]
    fn write_zeroes_flush_dsm() {
        let mut s = sqe(op::WRITE_ZEROES);
        s.cdw10 = 100;
        s.cdw12 = 15 | 1 << 25 | 1 << 30;
        let cmd = IoCommand::parse(&s).unwrap();
        assert_eq!(
            cmd,
            IoCommand::WriteZeroes {
                nsid: 1,
                slba: 100,
                nlb: 16,
                fua: true,
                deallocate: true
            }
        );
        assert_eq!(cmd.data_len(512), 0);
        s.cdw12 = 1 << 16;
        assert_eq!(IoCommand::parse(&s), Err(Status::INVALID_FIELD));
        s.cdw12 = 0;
        s.cdw13 = 1;
        assert_eq!(IoCommand::parse(&s), Err(Status::INVALID_FIELD));

        assert_eq!(
            IoCommand::parse(&sqe(op::FLUSH)),
            Ok(IoCommand::Flush { nsid: 1 })
        );
        let mut s = sqe(op::FLUSH);
        s.nsid = 0xffff_ffff;
        assert_eq!(
            IoCommand::parse(&s),
            Ok(IoCommand::Flush { nsid: 0xffff_ffff })
        );
        s.cdw10 = 1;
        assert_eq!(IoCommand::parse(&s), Err(Status::INVALID_FIELD));

        // Linux discard: NR = segments - 1, AD.
        let mut s = sqe(op::DATASET_MANAGEMENT);
        s.cdw10 = 255;
        s.cdw11 = 1 << 2;
        let cmd = IoCommand::parse(&s).unwrap();
        assert_eq!(
            cmd,
            IoCommand::DatasetManagement {
                nsid: 1,
                ranges: 256,
                deallocate: true
            }
        );
        assert_eq!(cmd.data_len(4096), 4096);
        s.cdw11 = 0x3;
        assert_eq!(
            IoCommand::parse(&s),
            Ok(IoCommand::DatasetManagement {
                nsid: 1,
                ranges: 256,
                deallocate: false
            })
        );
        for (cdw10, cdw11, cdw12) in [(0x100, 0, 0), (0, 1 << 3, 0), (0, 0, 1)] {
            let mut s = sqe(op::DATASET_MANAGEMENT);
            (s.cdw10, s.cdw11, s.cdw12) = (cdw10, cdw11, cdw12);
            assert_eq!(IoCommand::parse(&s), Err(Status::INVALID_FIELD));
        }
    }

    #[test]
    fn rejected_commands() {
        for opcode in [
            0x03,
            0x04,
            0x05,
            0x0a,
            0x0c,
            0x0d,
            0x11,
            0x15,
            op::FABRICS,
            0x80,
            0xff,
        ] {
            assert_eq!(
                IoCommand::parse(&sqe(opcode)),
                Err(Status::INVALID_OPCODE),
                "{opcode:#x}"
            );
        }
        for flags in [0x01, 0x02, 0x41, 0x42, 0x48] {
            let mut s = sqe(op::READ);
            s.flags = flags;
            assert_eq!(IoCommand::parse(&s), Err(Status::INVALID_FIELD));
        }
        // CID generation bits are not judged.
        let mut s = sqe(op::READ);
        s.cid = 0xffff;
        assert!(IoCommand::parse(&s).is_ok());
    }

    #[test]
    fn sqe_bytes() {
        let b = IoCommand::Write {
            nsid: 5,
            slba: 0x1_0000_0002,
            nlb: 8,
            fua: true,
        }
        .to_sqe(9)
        .to_bytes();
        assert_eq!((b[0], b[1]), (0x01, 0x40));
        assert_eq!(&b[4..8], &5u32.to_le_bytes());
        assert_eq!(&b[40..48], &0x1_0000_0002u64.to_le_bytes());
        assert_eq!(&b[48..52], &(7u32 | 1 << 30).to_le_bytes());
        let b = IoCommand::DatasetManagement {
            nsid: 1,
            ranges: 3,
            deallocate: true,
        }
        .to_sqe(0)
        .to_bytes();
        assert_eq!((b[0], b[40], b[44]), (0x09, 2, 4));
    }

    #[test]
    fn dsm_range_bytes() {
        let mut b = [0u8; 16];
        DsmRange {
            attributes: 0x11,
            nlb: 8,
            slba: 0x200,
        }
        .encode(&mut b);
        assert_eq!(b, [0x11, 0, 0, 0, 8, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0]);
        assert!(matches!(
            DsmRange::decode(&b[..15]),
            Err(DecodeError::Short { .. })
        ));
        assert_eq!(DsmRange::decode_list(&b, 0), Ok(vec![]));
        assert!(DsmRange::decode_list(&b, usize::MAX).is_err());
    }
}
