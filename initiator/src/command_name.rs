//! Commands named in NVMe terms for errors and logs ("Read (NSID 1, SLBA 8)"), from their
//! submission entry alone, so that every layer that reports a command names it the same way.

use fabrik_proto::fabrics::fctype;
use fabrik_proto::nvme::{admin_opcode, io_opcode};
use fabrik_proto::Sqe;

/// The spec's name of a command, with the field that says what it did (CNS, LID, FID...).
pub fn command_name(qid: u16, sqe: &Sqe) -> String {
    let low_byte = sqe.cdw10 & 0xff;
    if sqe.opcode == admin_opcode::FABRICS {
        return match sqe.fctype() {
            fctype::PROPERTY_SET => format!("Property Set (offset {:#x})", sqe.cdw11),
            fctype::CONNECT => format!("Connect (qid {})", sqe.cdw10 >> 16),
            fctype::PROPERTY_GET => format!("Property Get (offset {:#x})", sqe.cdw11),
            fctype::AUTH_SEND => "Authentication Send".into(),
            fctype::AUTH_RECEIVE => "Authentication Receive".into(),
            fctype::DISCONNECT => "Disconnect".into(),
            other => format!("Fabrics command (FCTYPE {other:#04x})"),
        };
    }
    if qid == 0 {
        match sqe.opcode {
            admin_opcode::GET_LOG_PAGE => format!("Get Log Page (LID {low_byte:02x}h)"),
            admin_opcode::IDENTIFY => format!("Identify (CNS {low_byte:02x}h, NSID {})", sqe.nsid),
            admin_opcode::ABORT => "Abort".into(),
            admin_opcode::SET_FEATURES => format!("Set Features (FID {low_byte:02x}h)"),
            admin_opcode::GET_FEATURES => format!("Get Features (FID {low_byte:02x}h)"),
            admin_opcode::ASYNC_EVENT_REQUEST => "Asynchronous Event Request".into(),
            admin_opcode::KEEP_ALIVE => "Keep Alive".into(),
            admin_opcode::DISCOVERY_INFO_MGMT => {
                format!("Discovery Information Management (TAS {})", sqe.cdw10 & 0xf)
            }
            other => format!("Admin command (opcode {other:02x}h)"),
        }
    } else {
        match sqe.opcode {
            io_opcode::FLUSH => format!("Flush (NSID {})", sqe.nsid),
            io_opcode::WRITE => format!("Write (NSID {}, SLBA {})", sqe.nsid, slba(sqe)),
            io_opcode::READ => format!("Read (NSID {}, SLBA {})", sqe.nsid, slba(sqe)),
            io_opcode::WRITE_ZEROES => {
                format!("Write Zeroes (NSID {}, SLBA {})", sqe.nsid, slba(sqe))
            }
            io_opcode::DATASET_MANAGEMENT => format!("Dataset Management (NSID {})", sqe.nsid),
            other => format!("I/O command (opcode {other:02x}h, NSID {})", sqe.nsid),
        }
    }
}

fn slba(sqe: &Sqe) -> u64 {
    (sqe.cdw11 as u64) << 32 | sqe.cdw10 as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_say_what_the_command_did() {
        let identify = Sqe {
            opcode: admin_opcode::IDENTIFY,
            cdw10: 1,
            ..Sqe::default()
        };
        assert_eq!(command_name(0, &identify), "Identify (CNS 01h, NSID 0)");
        let read = Sqe {
            opcode: io_opcode::READ,
            nsid: 1,
            cdw10: 8,
            ..Sqe::default()
        };
        assert_eq!(command_name(1, &read), "Read (NSID 1, SLBA 8)");
        let connect = Sqe {
            opcode: admin_opcode::FABRICS,
            nsid: fctype::CONNECT as u32,
            cdw10: 3 << 16,
            ..Sqe::default()
        };
        assert_eq!(command_name(3, &connect), "Connect (qid 3)");
        let dim = Sqe {
            opcode: admin_opcode::DISCOVERY_INFO_MGMT,
            cdw10: 1,
            ..Sqe::default()
        };
        assert_eq!(
            command_name(0, &dim),
            "Discovery Information Management (TAS 1)"
        );
    }
}
