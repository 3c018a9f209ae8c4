//! NVMe over Fabrics: the fabrics command set (Connect, Property Get/Set, Disconnect),
//! the controller properties, NQNs, the discovery log page, the Discovery Information Management
//! data (TP8010) and the transports.

pub mod connect;
pub mod dim;
pub mod discovery;
pub mod nqn;
pub mod property;
pub mod transport;

pub use connect::{ConnectData, CONNECT_DATA_LEN};
pub use transport::Transport;

/// Fabrics command types (SQE byte 4 when the opcode is 0x7F).
pub mod fctype {
    pub const PROPERTY_SET: u8 = 0x00;
    pub const CONNECT: u8 = 0x01;
    pub const PROPERTY_GET: u8 = 0x04;
    pub const AUTH_SEND: u8 = 0x05;
    pub const AUTH_RECEIVE: u8 = 0x06;
    pub const DISCONNECT: u8 = 0x08;
}

use crate::nvme::admin::{check_flags, only};
use crate::nvme::admin_opcode::FABRICS;
use crate::nvme::sqe::{Sqe, FLAGS_PSDT_SGL};
use crate::nvme::status::Status;

/// A fabrics command (opcode 0x7F).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FabricsCommand {
    /// ATTRIB byte 40 (bits 2:0: 0 = 4 bytes, 1 = 8 bytes), OFFSET 44..48, VALUE 48..56.
    PropertySet {
        size8: bool,
        offset: u32,
        value: u64,
    },
    /// RECFMT 40..42, QID 42..44, SQSIZE 44..46 (0's based), CATTR 46, KATO 48..52 (ms).
    Connect {
        recfmt: u16,
        qid: u16,
        sqsize: u16,
        cattr: u8,
        kato: u32,
    },
    PropertyGet {
        size8: bool,
        offset: u32,
    },
    /// RECFMT 40..42.
    Disconnect {
        recfmt: u16,
    },
    /// Authentication Send: SPSP0 41, SPSP1 42, SECP 43, TL 44..48 (bytes the host sends).
    AuthSend {
        secp: u8,
        spsp: [u8; 2],
        len: u32,
    },
    /// Authentication Receive: the same, AL 44..48 (bytes the host's buffer holds).
    AuthReceive {
        secp: u8,
        spsp: [u8; 2],
        len: u32,
    },
}

impl FabricsCommand {
    /// Typed view of an SQE with opcode 0x7F. Unknown FCTYPE: Invalid Command Opcode. Bad
    /// ATTRIB: Invalid Field.
    ///
    /// Checked: opcode (else Invalid Command Opcode), FUSE and reserved flag bits (the Linux host
    /// puts PSDT = 01b, 0x40, in byte 1: accepted), reserved bytes 5..24 and the reserved parts
    /// of bytes 40..64. RECFMT, QID, SQSIZE, CATTR and KATO are returned as sent: judging them
    /// (Connect Incompatible Format, Connect Invalid Parameters) is the controller's job.
    pub fn parse(sqe: &Sqe) -> Result<FabricsCommand, Status> {
        if sqe.opcode != FABRICS {
            return Err(Status::INVALID_OPCODE);
        }
        check_flags(sqe)?;
        let fctype = sqe.fctype();
        if !matches!(
            fctype,
            fctype::PROPERTY_SET
                | fctype::CONNECT
                | fctype::PROPERTY_GET
                | fctype::DISCONNECT
                | fctype::AUTH_SEND
                | fctype::AUTH_RECEIVE
        ) {
            return Err(Status::INVALID_OPCODE);
        }
        // Bytes 5..24 are reserved in every fabrics command.
        if sqe.nsid >> 8 != 0 || sqe.cdw2 != 0 || sqe.cdw3 != 0 || sqe.mptr != 0 {
            return Err(Status::INVALID_FIELD);
        }
        match fctype {
            fctype::PROPERTY_SET | fctype::PROPERTY_GET => {
                // ATTRIB byte 40: size 2:0 (0 = 4 bytes, 1 = 8 bytes), 7:3 reserved;
                // bytes 41..44 reserved.
                let size8 = match sqe.cdw10 {
                    0 => false,
                    1 => true,
                    _ => return Err(Status::INVALID_FIELD),
                };
                let offset = sqe.cdw11;
                if fctype == fctype::PROPERTY_GET {
                    // Bytes 48..64 reserved.
                    only(sqe.cdw12 | sqe.cdw13 | sqe.cdw14 | sqe.cdw15, 0)?;
                    return Ok(FabricsCommand::PropertyGet { size8, offset });
                }
                // VALUE 48..56; for a 4-byte property its upper half is reserved. 56..64 reserved.
                only(sqe.cdw14 | sqe.cdw15, 0)?;
                if !size8 {
                    only(sqe.cdw13, 0)?;
                }
                Ok(FabricsCommand::PropertySet {
                    size8,
                    offset,
                    value: sqe.cdw12 as u64 | (sqe.cdw13 as u64) << 32,
                })
            }
            fctype::CONNECT => {
                // Byte 47 and bytes 52..64 reserved.
                only(sqe.cdw11, 0x00ff_ffff)?;
                only(sqe.cdw13 | sqe.cdw14 | sqe.cdw15, 0)?;
                Ok(FabricsCommand::Connect {
                    recfmt: sqe.cdw10 as u16,
                    qid: (sqe.cdw10 >> 16) as u16,
                    sqsize: sqe.cdw11 as u16,
                    cattr: (sqe.cdw11 >> 16) as u8,
                    kato: sqe.cdw12,
                })
            }
            fctype::AUTH_SEND | fctype::AUTH_RECEIVE => {
                // Byte 40 and bytes 48..64 reserved. SECP/SPSP values are the controller's to
                // judge (Invalid Field when it does not speak that protocol).
                only(sqe.cdw10, 0xffff_ff00)?;
                only(sqe.cdw12 | sqe.cdw13 | sqe.cdw14 | sqe.cdw15, 0)?;
                let [_, spsp0, spsp1, secp] = sqe.cdw10.to_le_bytes();
                let (spsp, len) = ([spsp0, spsp1], sqe.cdw11);
                Ok(if fctype == fctype::AUTH_SEND {
                    FabricsCommand::AuthSend { secp, spsp, len }
                } else {
                    FabricsCommand::AuthReceive { secp, spsp, len }
                })
            }
            _ => {
                // Disconnect: bytes 42..64 reserved.
                only(sqe.cdw10, 0xffff)?;
                only(sqe.cdw11 | sqe.cdw12 | sqe.cdw13 | sqe.cdw14 | sqe.cdw15, 0)?;
                Ok(FabricsCommand::Disconnect {
                    recfmt: sqe.cdw10 as u16,
                })
            }
        }
    }

    /// FCTYPE of this command.
    pub fn fctype(&self) -> u8 {
        match self {
            FabricsCommand::PropertySet { .. } => fctype::PROPERTY_SET,
            FabricsCommand::Connect { .. } => fctype::CONNECT,
            FabricsCommand::PropertyGet { .. } => fctype::PROPERTY_GET,
            FabricsCommand::Disconnect { .. } => fctype::DISCONNECT,
            FabricsCommand::AuthSend { .. } => fctype::AUTH_SEND,
            FabricsCommand::AuthReceive { .. } => fctype::AUTH_RECEIVE,
        }
    }

    /// The SQE a host sends: opcode 0x7F, PSDT = SGL (as the Linux host), FCTYPE at byte 4,
    /// data pointer left zero for the transport to fill.
    pub fn to_sqe(&self, cid: u16) -> Sqe {
        let mut sqe = Sqe {
            opcode: FABRICS,
            flags: FLAGS_PSDT_SGL,
            cid,
            nsid: self.fctype() as u32,
            ..Sqe::default()
        };
        match *self {
            FabricsCommand::PropertySet {
                size8,
                offset,
                value,
            } => {
                sqe.cdw10 = size8 as u32;
                sqe.cdw11 = offset;
                sqe.cdw12 = value as u32;
                sqe.cdw13 = (value >> 32) as u32;
            }
            FabricsCommand::Connect {
                recfmt,
                qid,
                sqsize,
                cattr,
                kato,
            } => {
                sqe.cdw10 = recfmt as u32 | (qid as u32) << 16;
                sqe.cdw11 = sqsize as u32 | (cattr as u32) << 16;
                sqe.cdw12 = kato;
            }
            FabricsCommand::PropertyGet { size8, offset } => {
                sqe.cdw10 = size8 as u32;
                sqe.cdw11 = offset;
            }
            FabricsCommand::Disconnect { recfmt } => sqe.cdw10 = recfmt as u32,
            FabricsCommand::AuthSend { secp, spsp, len }
            | FabricsCommand::AuthReceive { secp, spsp, len } => {
                sqe.cdw10 = u32::from_le_bytes([0, spsp[0], spsp[1], secp]);
                sqe.cdw11 = len;
            }
        }
        sqe
    }
}

/// Connect CATTR bit 2: the host asks to disable SQ flow control.
pub const CATTR_DISABLE_SQ_FLOW: u8 = 1 << 2;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn any_fabrics() -> impl Strategy<Value = FabricsCommand> {
        prop_oneof![
            (any::<u32>(), any::<u64>()).prop_map(|(offset, value)| FabricsCommand::PropertySet {
                size8: true,
                offset,
                value
            }),
            (any::<u32>(), any::<u32>()).prop_map(|(offset, value)| FabricsCommand::PropertySet {
                size8: false,
                offset,
                value: value as u64
            }),
            (
                any::<u16>(),
                any::<u16>(),
                any::<u16>(),
                any::<u8>(),
                any::<u32>()
            )
                .prop_map(|(recfmt, qid, sqsize, cattr, kato)| {
                    FabricsCommand::Connect {
                        recfmt,
                        qid,
                        sqsize,
                        cattr,
                        kato,
                    }
                }),
            (any::<bool>(), any::<u32>())
                .prop_map(|(size8, offset)| FabricsCommand::PropertyGet { size8, offset }),
            any::<u16>().prop_map(|recfmt| FabricsCommand::Disconnect { recfmt }),
            (any::<u8>(), any::<[u8; 2]>(), any::<u32>())
                .prop_map(|(secp, spsp, len)| FabricsCommand::AuthSend { secp, spsp, len }),
            (any::<u8>(), any::<[u8; 2]>(), any::<u32>())
                .prop_map(|(secp, spsp, len)| FabricsCommand::AuthReceive { secp, spsp, len }),
        ]
    }

    proptest! {
        #[test]
        fn round_trip(cmd in any_fabrics(), cid: u16) {
            let sqe = cmd.to_sqe(cid);
            prop_assert_eq!((sqe.opcode, sqe.flags, sqe.cid, sqe.dptr), (0x7f, 0x40, cid, [0u8; 16]));
            prop_assert_eq!(FabricsCommand::parse(&sqe), Ok(cmd));
            prop_assert_eq!(FabricsCommand::parse(&Sqe::decode(&sqe.to_bytes()).unwrap()), Ok(cmd));
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 64), fct in 0u8..10, sparse: bool) {
            let mut sqe = Sqe::decode(&bytes).unwrap();
            sqe.opcode = 0x7f;
            sqe.nsid = fct as u32;
            if sparse {
                (sqe.cdw2, sqe.cdw3, sqe.mptr, sqe.cdw13, sqe.cdw14, sqe.cdw15) = (0, 0, 0, 0, 0, 0);
                sqe.flags &= 0xc0;
            }
            if let Ok(cmd) = FabricsCommand::parse(&sqe) {
                prop_assert_eq!(FabricsCommand::parse(&cmd.to_sqe(sqe.cid)), Ok(cmd));
            }
        }
    }

    fn sqe(fct: u8) -> Sqe {
        Sqe {
            opcode: 0x7f,
            flags: 0x40,
            cid: 0x2000,
            nsid: fct as u32,
            ..Sqe::default()
        }
    }

    #[test]
    fn linux_connect() {
        // Admin queue: QID 0, SQSIZE 31, KATO 5000 ms.
        let mut s = sqe(fctype::CONNECT);
        s.cdw10 = 0;
        s.cdw11 = 31;
        s.cdw12 = 5000;
        assert_eq!(
            FabricsCommand::parse(&s),
            Ok(FabricsCommand::Connect {
                recfmt: 0,
                qid: 0,
                sqsize: 31,
                cattr: 0,
                kato: 5000
            })
        );
        // I/O queue 3, SQSIZE 127, disable_sqflow; RECFMT passed through for the controller to judge.
        s.cdw10 = 3 << 16 | 1;
        s.cdw11 = 127 | (CATTR_DISABLE_SQ_FLOW as u32) << 16;
        s.cdw12 = 0;
        assert_eq!(
            FabricsCommand::parse(&s),
            Ok(FabricsCommand::Connect {
                recfmt: 1,
                qid: 3,
                sqsize: 127,
                cattr: 4,
                kato: 0
            })
        );
        let b = FabricsCommand::Connect {
            recfmt: 0,
            qid: 0x0102,
            sqsize: 0x0304,
            cattr: 0x05,
            kato: 0x0607_0809,
        }
        .to_sqe(0xabcd)
        .to_bytes();
        assert_eq!((b[0], b[1], b[4]), (0x7f, 0x40, 0x01));
        assert_eq!(&b[2..4], &[0xcd, 0xab]);
        assert_eq!(
            &b[40..52],
            &[0, 0, 0x02, 0x01, 0x04, 0x03, 0x05, 0, 0x09, 0x08, 0x07, 0x06]
        );
        // Reserved byte 47, bytes 52..64.
        let mut s = sqe(fctype::CONNECT);
        s.cdw11 = 1 << 24;
        assert_eq!(FabricsCommand::parse(&s), Err(Status::INVALID_FIELD));
        let mut s = sqe(fctype::CONNECT);
        s.cdw13 = 1;
        assert_eq!(FabricsCommand::parse(&s), Err(Status::INVALID_FIELD));
    }

    #[test]
    fn properties() {
        // Property Get CAP, 8 bytes.
        let mut s = sqe(fctype::PROPERTY_GET);
        s.cdw10 = 1;
        assert_eq!(
            FabricsCommand::parse(&s),
            Ok(FabricsCommand::PropertyGet {
                size8: true,
                offset: 0
            })
        );
        // Property Get CSTS, 4 bytes.
        s.cdw10 = 0;
        s.cdw11 = property::offset::CSTS;
        assert_eq!(
            FabricsCommand::parse(&s),
            Ok(FabricsCommand::PropertyGet {
                size8: false,
                offset: 0x1c
            })
        );
        // Property Set CC = 0x00460001.
        let mut s = sqe(fctype::PROPERTY_SET);
        s.cdw11 = property::offset::CC;
        s.cdw12 = 0x0046_0001;
        assert_eq!(
            FabricsCommand::parse(&s),
            Ok(FabricsCommand::PropertySet {
                size8: false,
                offset: 0x14,
                value: 0x0046_0001
            })
        );
        let b = FabricsCommand::PropertySet {
            size8: true,
            offset: 0x14,
            value: 0x1122_3344_5566_7788,
        }
        .to_sqe(1)
        .to_bytes();
        assert_eq!((b[4], b[40], b[44]), (0x00, 1, 0x14));
        assert_eq!(&b[48..56], &0x1122_3344_5566_7788u64.to_le_bytes());
        let b = FabricsCommand::PropertyGet {
            size8: false,
            offset: 8,
        }
        .to_sqe(1)
        .to_bytes();
        assert_eq!((b[4], b[40], b[44]), (0x04, 0, 8));
        // ATTRIB other than 0/1, reserved ATTRIB bits / bytes 41..44.
        for attrib in [2, 3, 7, 0x08, 0x80, 0x100, 0x0100_0000] {
            for fct in [fctype::PROPERTY_GET, fctype::PROPERTY_SET] {
                let mut s = sqe(fct);
                s.cdw10 = attrib;
                assert_eq!(
                    FabricsCommand::parse(&s),
                    Err(Status::INVALID_FIELD),
                    "{fct} {attrib:#x}"
                );
            }
        }
        // A 4-byte Property Set with an upper value half; reserved bytes 56..64 / 48..64.
        let mut s = sqe(fctype::PROPERTY_SET);
        s.cdw13 = 1;
        assert_eq!(FabricsCommand::parse(&s), Err(Status::INVALID_FIELD));
        s.cdw10 = 1;
        assert!(FabricsCommand::parse(&s).is_ok());
        s.cdw15 = 1;
        assert_eq!(FabricsCommand::parse(&s), Err(Status::INVALID_FIELD));
        let mut s = sqe(fctype::PROPERTY_GET);
        s.cdw12 = 1;
        assert_eq!(FabricsCommand::parse(&s), Err(Status::INVALID_FIELD));
    }

    /// The Linux host's Authentication Send of a 72-byte Negotiate and its 4096-byte Receive.
    #[test]
    fn linux_authentication_commands() {
        let mut s = sqe(fctype::AUTH_SEND);
        s.cdw10 = 0xe9_01_01_00;
        s.cdw11 = 72;
        assert_eq!(
            FabricsCommand::parse(&s),
            Ok(FabricsCommand::AuthSend {
                secp: 0xe9,
                spsp: [1, 1],
                len: 72
            })
        );
        let mut r = sqe(fctype::AUTH_RECEIVE);
        r.cdw10 = 0xe9_01_01_00;
        r.cdw11 = 4096;
        assert_eq!(
            FabricsCommand::parse(&r),
            Ok(FabricsCommand::AuthReceive {
                secp: 0xe9,
                spsp: [1, 1],
                len: 4096
            })
        );
        r.cdw10 |= 1; // reserved byte 40
        assert_eq!(FabricsCommand::parse(&r), Err(Status::INVALID_FIELD));
    }

    #[test]
    fn disconnect_and_rejections() {
        assert_eq!(
            FabricsCommand::parse(&sqe(fctype::DISCONNECT)),
            Ok(FabricsCommand::Disconnect { recfmt: 0 })
        );
        let mut s = sqe(fctype::DISCONNECT);
        s.cdw10 = 1 << 16;
        assert_eq!(FabricsCommand::parse(&s), Err(Status::INVALID_FIELD));
        for fct in [0x02, 0x03, 0x07, 0x09, 0x7f, 0xc0, 0xff] {
            assert_eq!(
                FabricsCommand::parse(&sqe(fct)),
                Err(Status::INVALID_OPCODE),
                "{fct:#x}"
            );
        }
        // Not a fabrics opcode.
        let mut s = sqe(fctype::CONNECT);
        s.opcode = 0x06;
        assert_eq!(FabricsCommand::parse(&s), Err(Status::INVALID_OPCODE));
        // Fused, reserved flags, reserved bytes 5..24.
        for flags in [0x41, 0x02, 0x44, 0x60] {
            let mut s = sqe(fctype::CONNECT);
            s.flags = flags;
            assert_eq!(
                FabricsCommand::parse(&s),
                Err(Status::INVALID_FIELD),
                "{flags:#x}"
            );
        }
        let mut s = sqe(fctype::CONNECT);
        s.nsid |= 0x100;
        assert_eq!(FabricsCommand::parse(&s), Err(Status::INVALID_FIELD));
        for (cdw2, cdw3, mptr) in [(1, 0, 0), (0, 1, 0), (0, 0, 1 << 63)] {
            let mut s = sqe(fctype::PROPERTY_GET);
            (s.cdw2, s.cdw3, s.mptr) = (cdw2, cdw3, mptr);
            assert_eq!(FabricsCommand::parse(&s), Err(Status::INVALID_FIELD));
        }
        // Flags byte 0 (no PSDT) is accepted too.
        let mut s = sqe(fctype::PROPERTY_GET);
        s.flags = 0;
        assert!(FabricsCommand::parse(&s).is_ok());
    }
}
