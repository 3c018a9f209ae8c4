//! Controller properties as fabrics expose them (Property Get / Set): CAP, VS, CC, CSTS.

/// Property offsets.
pub mod offset {
    pub const CAP: u32 = 0x00;
    pub const VS: u32 = 0x08;
    pub const CC: u32 = 0x14;
    pub const CSTS: u32 = 0x1C;
    pub const NSSR: u32 = 0x20;
}

/// Controller Capabilities (8 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Cap {
    /// Maximum queue entries supported, 0's based (15:0).
    pub mqes: u16,
    /// Contiguous queues required (16).
    pub cqr: bool,
    /// Timeout to ready, 500 ms units (31:24).
    pub to: u8,
    /// NVM command set supported (bit 37).
    pub css_nvm: bool,
    /// Memory page size minimum/maximum, 2^(12+n) (51:48, 55:52).
    pub mpsmin: u8,
    pub mpsmax: u8,
}

impl Cap {
    pub fn to_u64(self) -> u64 {
        todo!()
    }
    pub fn from_u64(v: u64) -> Cap {
        todo!()
    }
}

/// Controller Configuration (4 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Cc {
    pub en: bool,      // 0
    pub css: u8,       // 6:4
    pub mps: u8,       // 10:7
    pub ams: u8,       // 13:11
    pub shn: u8,       // 15:14
    pub iosqes: u8,    // 19:16
    pub iocqes: u8,    // 23:20
    pub crime: bool,   // 24
}

impl Cc {
    pub fn to_u32(self) -> u32 {
        todo!()
    }
    /// Reserved bits (3:1, 31:25) are dropped; the caller may compare to reject them.
    pub fn from_u32(v: u32) -> Cc {
        todo!()
    }
}

/// Controller Status (4 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Csts {
    pub rdy: bool,   // 0
    pub cfs: bool,   // 1
    pub shst: u8,    // 3:2 (0 normal, 1 occurring, 2 complete)
    pub nssro: bool, // 4
    pub pp: bool,    // 5
}

pub const SHST_NORMAL: u8 = 0;
pub const SHST_OCCURRING: u8 = 1;
pub const SHST_COMPLETE: u8 = 2;

impl Csts {
    pub fn to_u32(self) -> u32 {
        todo!()
    }
    pub fn from_u32(v: u32) -> Csts {
        todo!()
    }
}

/// Version as VS encodes it: major 31:16, minor 15:8, tertiary 7:0.
pub const fn version(major: u16, minor: u8, tertiary: u8) -> u32 {
    (major as u32) << 16 | (minor as u32) << 8 | tertiary as u32
}
