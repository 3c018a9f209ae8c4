//! NVMe base and NVM command set structures used over fabrics.

pub mod admin;
pub mod cqe;
pub mod features;
pub mod identify;
pub mod io;
pub mod log;
pub mod reservation;
pub mod sgl;
pub mod sqe;
pub mod status;

/// NSID that names every namespace of the controller (Flush, SMART, Changed NS List).
pub const NSID_BROADCAST: u32 = 0xffff_ffff;

/// Admin command opcodes.
pub mod admin_opcode {
    pub const DELETE_IO_SQ: u8 = 0x00;
    pub const CREATE_IO_SQ: u8 = 0x01;
    pub const GET_LOG_PAGE: u8 = 0x02;
    pub const DELETE_IO_CQ: u8 = 0x04;
    pub const CREATE_IO_CQ: u8 = 0x05;
    pub const IDENTIFY: u8 = 0x06;
    pub const ABORT: u8 = 0x08;
    pub const SET_FEATURES: u8 = 0x09;
    pub const GET_FEATURES: u8 = 0x0A;
    pub const ASYNC_EVENT_REQUEST: u8 = 0x0C;
    pub const KEEP_ALIVE: u8 = 0x18;
    /// Discovery Information Management (TP8010): a host or DDC registers with a CDC.
    pub const DISCOVERY_INFO_MGMT: u8 = 0x21;
    pub const FABRICS: u8 = 0x7F;
}

/// NVM command set I/O opcodes.
pub mod io_opcode {
    pub const FLUSH: u8 = 0x00;
    pub const WRITE: u8 = 0x01;
    pub const READ: u8 = 0x02;
    pub const WRITE_ZEROES: u8 = 0x08;
    pub const DATASET_MANAGEMENT: u8 = 0x09;
    pub const FABRICS: u8 = 0x7F;
}

/// Which way a command's data moves, from the controller's point of view.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum DataDirection {
    None,
    /// Host to controller (writes, Set Features with data, Connect).
    ToController,
    /// Controller to host (reads, Identify, Get Log Page).
    ToHost,
}

/// Data direction from the opcode's low two bits, as the base spec defines for every command
/// set (01b host to controller, 10b controller to host). Fabrics commands use FCTYPE bit 0.
pub fn data_direction(opcode: u8, fctype: u8) -> DataDirection {
    if opcode == admin_opcode::FABRICS {
        return match fctype {
            f if f & 1 == 1 => DataDirection::ToController,
            0x06 => DataDirection::ToHost, // Authentication Receive
            _ => DataDirection::None,
        };
    }
    match opcode & 0x3 {
        1 => DataDirection::ToController,
        2 => DataDirection::ToHost,
        _ => DataDirection::None,
    }
}
