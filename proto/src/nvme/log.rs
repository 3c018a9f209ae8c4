//! Log pages: error information, SMART / health, firmware slot, changed namespace list,
//! and the asynchronous event completion value. The discovery log lives in `fabrics::discovery`.

use crate::error::DecodeError;

/// Log page identifiers.
pub mod lid {
    pub const ERROR_INFO: u8 = 0x01;
    pub const SMART: u8 = 0x02;
    pub const FIRMWARE_SLOT: u8 = 0x03;
    pub const CHANGED_NS_LIST: u8 = 0x04;
    pub const COMMANDS_EFFECTS: u8 = 0x05;
    pub const ANA: u8 = 0x0C;
    pub const DISCOVERY: u8 = 0x70;
}

pub const ERROR_LOG_ENTRY_LEN: usize = 64;
pub const SMART_LOG_LEN: usize = 512;
pub const FIRMWARE_SLOT_LOG_LEN: usize = 512;
pub const CHANGED_NS_LIST_LEN: usize = 4096;

/// One Error Information log entry (64 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct ErrorLogEntry {
    pub error_count: u64,  // 0
    pub sqid: u16,         // 8
    pub cid: u16,          // 10
    /// Status field as in the CQE bytes 14..16 (phase bit included, 0).
    pub status_field: u16, // 12
    pub param_error_location: u16, // 14
    pub lba: u64,          // 16
    pub nsid: u32,         // 24
    pub vs: u8,            // 28
    pub trtype: u8,        // 29
    pub csi: u8,           // 30 (spec 2.0: reserved in 1.4)
    pub cs: u64,           // 32
    pub trtype_specific: u16, // 40
}

impl ErrorLogEntry {
    pub fn encode(&self, buf: &mut [u8]) {
        todo!()
    }
    pub fn decode(buf: &[u8]) -> Result<ErrorLogEntry, DecodeError> {
        todo!()
    }
}

/// SMART / Health Information (512 bytes). Counters are 128-bit as in the spec.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct SmartLog {
    pub critical_warning: u8,     // 0
    pub temperature_k: u16,       // 1
    pub available_spare: u8,      // 3
    pub available_spare_threshold: u8, // 4
    pub percentage_used: u8,      // 5
    pub endurance_group_critical: u8, // 6
    pub data_units_read: u128,    // 32  (thousands of 512-byte units)
    pub data_units_written: u128, // 48
    pub host_read_commands: u128, // 64
    pub host_write_commands: u128, // 80
    pub controller_busy_time: u128, // 96 (minutes)
    pub power_cycles: u128,       // 112
    pub power_on_hours: u128,     // 128
    pub unsafe_shutdowns: u128,   // 144
    pub media_errors: u128,       // 160
    pub error_log_entries: u128,  // 176
    pub warning_temp_time: u32,   // 192 (minutes)
    pub critical_temp_time: u32,  // 196
    pub temp_sensors: [u16; 8],   // 200
}

impl SmartLog {
    pub fn encode(&self, buf: &mut [u8; SMART_LOG_LEN]) {
        todo!()
    }
    pub fn decode(buf: &[u8]) -> Result<SmartLog, DecodeError> {
        todo!()
    }
}

/// Firmware Slot Information (512 bytes): AFI at 0, firmware revision of slot n at 8 + 8*(n-1).
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct FirmwareSlotLog {
    pub afi: u8,
    /// Revisions for slots 1..=7 (empty string = slot empty).
    pub slots: [String; 7],
}

impl FirmwareSlotLog {
    pub fn encode(&self, buf: &mut [u8; FIRMWARE_SLOT_LOG_LEN]) {
        todo!()
    }
    pub fn decode(buf: &[u8]) -> Result<FirmwareSlotLog, DecodeError> {
        todo!()
    }
}

/// Changed Namespace List (4096 bytes): up to 1024 NSIDs; if more changed, the first entry is
/// 0xFFFFFFFF and the rest zero.
pub fn encode_changed_ns_list(nsids: &[u32], buf: &mut [u8; CHANGED_NS_LIST_LEN]) {
    todo!()
}
pub fn decode_changed_ns_list(buf: &[u8]) -> Result<Vec<u32>, DecodeError> {
    todo!()
}

/// Asynchronous event types and infos (completion DW0: type 2:0, info 15:8, log page 23:16).
pub mod aen {
    pub const TYPE_ERROR: u8 = 0;
    pub const TYPE_SMART: u8 = 1;
    pub const TYPE_NOTICE: u8 = 2;
    pub const NOTICE_NS_ATTR_CHANGED: u8 = 0x00;
    pub const NOTICE_FW_ACTIVATION: u8 = 0x01;
    pub const NOTICE_ANA_CHANGE: u8 = 0x03;
    pub const NOTICE_DISCOVERY_LOG_CHANGED: u8 = 0xF0;

    /// Completion dword 0 of an Asynchronous Event Request.
    pub const fn result(event_type: u8, info: u8, log_page: u8) -> u32 {
        (event_type as u32 & 0x7) | (info as u32) << 8 | (log_page as u32) << 16
    }
}
