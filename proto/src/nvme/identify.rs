//! Identify data structures (4096 bytes each): controller, namespace, active namespace ID list,
//! namespace identification descriptors.

use crate::error::DecodeError;

pub const IDENTIFY_LEN: usize = 4096;

/// Identify Controller (CNS 01h). Offsets per NVMe base spec 2.0 (see NVMEOF-FACTS 4.2).
/// Only fields a fabrics controller fills are named; the rest encode as zero.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct IdentifyController {
    pub vid: u16,             // 0
    pub ssvid: u16,           // 2
    pub serial: String,       // 4..24, space padded
    pub model: String,        // 24..64, space padded
    pub firmware: String,     // 64..72, space padded
    pub rab: u8,              // 72
    pub ieee: [u8; 3],        // 73
    pub cmic: u8,             // 76
    pub mdts: u8,             // 77
    pub cntlid: u16,          // 78
    pub ver: u32,             // 80
    pub rtd3r: u32,           // 84
    pub rtd3e: u32,           // 88
    pub oaes: u32,            // 92
    pub ctratt: u32,          // 96
    pub cntrltype: u8,        // 111
    pub fguid: [u8; 16],      // 112
    pub oacs: u16,            // 256
    pub acl: u8,              // 258
    pub aerl: u8,             // 259
    pub frmw: u8,             // 260
    pub lpa: u8,              // 261
    pub elpe: u8,             // 262
    pub npss: u8,             // 263
    pub avscc: u8,            // 264
    pub apsta: u8,            // 265
    pub wctemp: u16,          // 266
    pub cctemp: u16,          // 268
    pub kas: u16,             // 320
    pub sqes: u8,             // 512
    pub cqes: u8,             // 513
    pub maxcmd: u16,          // 514
    pub nn: u32,              // 516
    pub oncs: u16,            // 520
    pub fuses: u16,           // 522
    pub fna: u8,              // 524
    pub vwc: u8,              // 525
    pub awun: u16,            // 526
    pub awupf: u16,           // 528
    pub sgls: u32,            // 536
    pub mnan: u32,            // 540
    pub subnqn: String,       // 768..1024, NUL padded
    pub ioccsz: u32,          // 1792
    pub iorcsz: u32,          // 1796
    pub icdoff: u16,          // 1800
    pub fcatt: u8,            // 1802
    pub msdbd: u8,            // 1803
    pub ofcs: u16,            // 1804
    /// Power state 0 descriptor (2048..2080): max power in centiwatts.
    pub ps0_max_power_cw: u16,
}

impl IdentifyController {
    pub fn encode(&self, buf: &mut [u8; IDENTIFY_LEN]) {
        todo!()
    }
    pub fn to_bytes(&self) -> Box<[u8; IDENTIFY_LEN]> {
        let mut b = Box::new([0u8; IDENTIFY_LEN]);
        self.encode(&mut b);
        b
    }
    pub fn decode(buf: &[u8]) -> Result<IdentifyController, DecodeError> {
        todo!()
    }
}

/// One LBA format (4 bytes at 128 + 4*n): metadata size 15:0, LBADS 23:16 (log2 of the LBA size),
/// relative performance 25:24.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct LbaFormat {
    pub ms: u16,
    pub lbads: u8,
    pub rp: u8,
}

/// Identify Namespace (CNS 00h). An all-default value (NCAP 0) is what inactive NSIDs return.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct IdentifyNamespace {
    pub nsze: u64,   // 0
    pub ncap: u64,   // 8
    pub nuse: u64,   // 16
    pub nsfeat: u8,  // 24
    pub nlbaf: u8,   // 25 (0's based count of formats)
    pub flbas: u8,   // 26
    pub mc: u8,      // 27
    pub dpc: u8,     // 28
    pub dps: u8,     // 29
    pub nmic: u8,    // 30
    pub rescap: u8,  // 31
    pub fpi: u8,     // 32
    pub dlfeat: u8,  // 33
    pub nawun: u16,  // 34
    pub nawupf: u16, // 36
    pub nacwu: u16,  // 38
    pub nabsn: u16,  // 40
    pub nabo: u16,   // 42
    pub nabspf: u16, // 44
    pub noiob: u16,  // 46
    pub nvmcap: u128, // 48
    pub npwg: u16,   // 64
    pub npwa: u16,   // 66
    pub npdg: u16,   // 68
    pub npda: u16,   // 70
    pub nows: u16,   // 72
    pub anagrpid: u32, // 92
    pub nsattr: u8,  // 99
    pub nvmsetid: u16, // 100
    pub nguid: [u8; 16], // 104
    pub eui64: [u8; 8],  // 120
    /// LBA formats 0..=nlbaf (at most 64), at 128.
    pub lbaf: Vec<LbaFormat>,
}

impl IdentifyNamespace {
    pub fn encode(&self, buf: &mut [u8; IDENTIFY_LEN]) {
        todo!()
    }
    pub fn to_bytes(&self) -> Box<[u8; IDENTIFY_LEN]> {
        let mut b = Box::new([0u8; IDENTIFY_LEN]);
        self.encode(&mut b);
        b
    }
    pub fn decode(buf: &[u8]) -> Result<IdentifyNamespace, DecodeError> {
        todo!()
    }
    /// LBA size in bytes of the formatted LBA format (FLBAS 3:0), or None if out of range.
    pub fn lba_size(&self) -> Option<u32> {
        todo!()
    }
}

/// Active namespace ID list (CNS 02h): up to 1024 ascending NSIDs, zero-terminated.
pub fn encode_ns_list(nsids: &[u32], buf: &mut [u8; IDENTIFY_LEN]) {
    todo!()
}

/// Decodes an NSID list; errors if the list is not strictly ascending.
pub fn decode_ns_list(buf: &[u8]) -> Result<Vec<u32>, DecodeError> {
    todo!()
}

/// Namespace identification descriptor (CNS 03h): NIDT 0, NIDL 1, reserved 2..4, then NIDL bytes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum NsDescriptor {
    Eui64([u8; 8]),
    Nguid([u8; 16]),
    Uuid([u8; 16]),
    Csi(u8),
}

/// Encodes the list, terminated by a zero NIDT/NIDL (the rest of the 4 KiB buffer zeroed).
pub fn encode_ns_descriptors(descs: &[NsDescriptor], buf: &mut [u8; IDENTIFY_LEN]) {
    todo!()
}

/// Decodes until a zero-length descriptor; wrong NIDL for a known NIDT or an unknown NIDT is an error.
pub fn decode_ns_descriptors(buf: &[u8]) -> Result<Vec<NsDescriptor>, DecodeError> {
    todo!()
}
