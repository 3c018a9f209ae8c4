//! Log pages: error information, SMART / health, firmware slot, changed namespace list,
//! asymmetric namespace access, and the asynchronous event completion value. The discovery log lives in `fabrics::discovery`.

use crate::error::{need, DecodeError};
use crate::le::*;
use crate::nvme::identify::ascii_field;

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
    pub error_count: u64, // 0
    pub sqid: u16,        // 8
    pub cid: u16,         // 10
    /// Status field as in the CQE bytes 14..16 (phase bit included, 0).
    pub status_field: u16, // 12
    pub param_error_location: u16, // 14
    pub lba: u64,         // 16
    pub nsid: u32,        // 24
    pub vs: u8,           // 28
    /// TRTYPE (`Transport::trtype`).
    pub trtype: u8, // 29
    pub csi: u8,          // 30 (spec 2.0: reserved in 1.4)
    pub cs: u64,          // 32
    pub trtype_specific: u16, // 40
}

impl ErrorLogEntry {
    /// Writes 64 bytes at the start of `buf` (reserved bytes zero); `buf` must hold them.
    pub fn encode(&self, buf: &mut [u8]) {
        let b = &mut buf[..ERROR_LOG_ENTRY_LEN];
        b.fill(0);
        put_u64(b, 0, self.error_count);
        put_u16(b, 8, self.sqid);
        put_u16(b, 10, self.cid);
        put_u16(b, 12, self.status_field);
        put_u16(b, 14, self.param_error_location);
        put_u64(b, 16, self.lba);
        put_u32(b, 24, self.nsid);
        b[28] = self.vs;
        b[29] = self.trtype;
        b[30] = self.csi;
        put_u64(b, 32, self.cs);
        put_u16(b, 40, self.trtype_specific);
    }
    /// Reserved bytes are not checked (receivers ignore them; spec 2.0 added the log page
    /// version at byte 63).
    pub fn decode(buf: &[u8]) -> Result<ErrorLogEntry, DecodeError> {
        need("error log entry", buf, ERROR_LOG_ENTRY_LEN)?;
        Ok(ErrorLogEntry {
            error_count: u64_at(buf, 0),
            sqid: u16_at(buf, 8),
            cid: u16_at(buf, 10),
            status_field: u16_at(buf, 12),
            param_error_location: u16_at(buf, 14),
            lba: u64_at(buf, 16),
            nsid: u32_at(buf, 24),
            vs: buf[28],
            trtype: buf[29],
            csi: buf[30],
            cs: u64_at(buf, 32),
            trtype_specific: u16_at(buf, 40),
        })
    }
}

/// SMART Critical Warning bits (byte 0 of the SMART log).
pub mod critical {
    /// NVM subsystem reliability has been degraded (media errors, ...).
    pub const DEGRADED: u8 = 1 << 2;
    /// The media has been placed in read-only mode.
    pub const READ_ONLY: u8 = 1 << 3;
}

/// SMART / Health Information (512 bytes). Counters are 128-bit as in the spec.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct SmartLog {
    pub critical_warning: u8,          // 0
    pub temperature_k: u16,            // 1
    pub available_spare: u8,           // 3
    pub available_spare_threshold: u8, // 4
    pub percentage_used: u8,           // 5
    pub endurance_group_critical: u8,  // 6
    pub data_units_read: u128,         // 32  (thousands of 512-byte units)
    pub data_units_written: u128,      // 48
    pub host_read_commands: u128,      // 64
    pub host_write_commands: u128,     // 80
    pub controller_busy_time: u128,    // 96 (minutes)
    pub power_cycles: u128,            // 112
    pub power_on_hours: u128,          // 128
    pub unsafe_shutdowns: u128,        // 144
    pub media_errors: u128,            // 160
    pub error_log_entries: u128,       // 176
    pub warning_temp_time: u32,        // 192 (minutes)
    pub critical_temp_time: u32,       // 196
    pub temp_sensors: [u16; 8],        // 200
}

impl SmartLog {
    /// Writes the whole 512 bytes; fields not named (thermal management, ...) are zero.
    pub fn encode(&self, buf: &mut [u8; SMART_LOG_LEN]) {
        buf.fill(0);
        buf[0] = self.critical_warning;
        put_u16(buf, 1, self.temperature_k);
        buf[3] = self.available_spare;
        buf[4] = self.available_spare_threshold;
        buf[5] = self.percentage_used;
        buf[6] = self.endurance_group_critical;
        for (i, v) in self.counters().into_iter().enumerate() {
            put_u128(buf, 32 + 16 * i, v);
        }
        put_u32(buf, 192, self.warning_temp_time);
        put_u32(buf, 196, self.critical_temp_time);
        for (i, &t) in self.temp_sensors.iter().enumerate() {
            put_u16(buf, 200 + 2 * i, t);
        }
    }
    /// Unnamed and reserved bytes are not checked (newer revisions fill some of them).
    pub fn decode(buf: &[u8]) -> Result<SmartLog, DecodeError> {
        need("SMART log", buf, SMART_LOG_LEN)?;
        let c = |i: usize| u128_at(buf, 32 + 16 * i);
        Ok(SmartLog {
            critical_warning: buf[0],
            temperature_k: u16_at(buf, 1),
            available_spare: buf[3],
            available_spare_threshold: buf[4],
            percentage_used: buf[5],
            endurance_group_critical: buf[6],
            data_units_read: c(0),
            data_units_written: c(1),
            host_read_commands: c(2),
            host_write_commands: c(3),
            controller_busy_time: c(4),
            power_cycles: c(5),
            power_on_hours: c(6),
            unsafe_shutdowns: c(7),
            media_errors: c(8),
            error_log_entries: c(9),
            warning_temp_time: u32_at(buf, 192),
            critical_temp_time: u32_at(buf, 196),
            temp_sensors: std::array::from_fn(|i| u16_at(buf, 200 + 2 * i)),
        })
    }

    /// The ten 128-bit counters in wire order (bytes 32..192).
    fn counters(&self) -> [u128; 10] {
        [
            self.data_units_read,
            self.data_units_written,
            self.host_read_commands,
            self.host_write_commands,
            self.controller_busy_time,
            self.power_cycles,
            self.power_on_hours,
            self.unsafe_shutdowns,
            self.media_errors,
            self.error_log_entries,
        ]
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
    /// Revisions are ASCII, space padded like Identify FR; an empty slot is all zero.
    pub fn encode(&self, buf: &mut [u8; FIRMWARE_SLOT_LOG_LEN]) {
        buf.fill(0);
        buf[0] = self.afi;
        for (i, rev) in self.slots.iter().enumerate() {
            if !rev.is_empty() {
                put_ascii(buf, 8 + 8 * i, 8, rev, b' ');
            }
        }
    }
    /// Revisions must be printable ASCII (an error names the slot's offset).
    pub fn decode(buf: &[u8]) -> Result<FirmwareSlotLog, DecodeError> {
        const WHAT: &str = "firmware slot log";
        need(WHAT, buf, FIRMWARE_SLOT_LOG_LEN)?;
        let mut slots: [String; 7] = Default::default();
        for (i, slot) in slots.iter_mut().enumerate() {
            *slot = ascii_field(WHAT, buf, 8 + 8 * i, 8)?;
        }
        Ok(FirmwareSlotLog { afi: buf[0], slots })
    }
}

/// Changed Namespace List (4096 bytes): up to 1024 NSIDs; if more changed, the first entry is
/// 0xFFFFFFFF and the rest zero.
pub fn encode_changed_ns_list(nsids: &[u32], buf: &mut [u8; CHANGED_NS_LIST_LEN]) {
    buf.fill(0);
    if nsids.len() > CHANGED_NS_LIST_MAX {
        put_u32(buf, 0, CHANGED_NS_OVERFLOW);
        return;
    }
    for (i, &nsid) in nsids.iter().enumerate() {
        put_u32(buf, 4 * i, nsid);
    }
}
/// The NSIDs up to the first zero entry (`[CHANGED_NS_OVERFLOW]` when more than 1024 changed).
pub fn decode_changed_ns_list(buf: &[u8]) -> Result<Vec<u32>, DecodeError> {
    need("changed namespace list", buf, CHANGED_NS_LIST_LEN)?;
    Ok((0..CHANGED_NS_LIST_MAX)
        .map(|i| u32_at(buf, 4 * i))
        .take_while(|&nsid| nsid != 0)
        .collect())
}

/// Most NSIDs the changed namespace list holds.
pub const CHANGED_NS_LIST_MAX: usize = CHANGED_NS_LIST_LEN / 4;
/// First (and only) entry of a changed namespace list when more than 1024 namespaces changed.
pub const CHANGED_NS_OVERFLOW: u32 = 0xffff_ffff;

/// ANA states (a group descriptor's state, bits 3:0).
pub mod ana_state {
    pub const OPTIMIZED: u8 = 0x01;
    pub const NON_OPTIMIZED: u8 = 0x02;
    pub const INACCESSIBLE: u8 = 0x03;
    pub const PERSISTENT_LOSS: u8 = 0x04;
    pub const CHANGE: u8 = 0x0F;
}

/// One ANA group descriptor: the group's state as seen through the controller the log is read
/// from, and its namespaces (ascending: the Linux host walks them in step with its own list).
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct AnaGroup {
    pub grpid: u32,
    pub chgcnt: u64,
    pub state: u8,
    pub nsids: Vec<u32>,
}

/// The Asymmetric Namespace Access log page (LID 0Ch): a 16-byte header (change count, number
/// of groups), then each group's 32-byte descriptor and its NSIDs, back to back.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct AnaLog {
    pub chgcnt: u64,
    pub groups: Vec<AnaGroup>,
}

/// Get Log Page LSP bit of the ANA log: return groups only (every NNSIDS zero, no NSIDs).
pub const ANA_LSP_GROUPS_ONLY: u8 = 1 << 0;
pub const ANA_LOG_HEADER_LEN: usize = 16;
pub const ANA_GROUP_DESCRIPTOR_LEN: usize = 32;

impl AnaLog {
    /// The page's bytes; `groups_only` leaves the NSID lists out (LSP bit 0).
    pub fn encode(&self, groups_only: bool) -> Vec<u8> {
        let nsids = |g: &AnaGroup| if groups_only { 0 } else { g.nsids.len() };
        let len = ANA_LOG_HEADER_LEN
            + (self.groups.iter())
                .map(|g| ANA_GROUP_DESCRIPTOR_LEN + 4 * nsids(g))
                .sum::<usize>();
        let mut b = vec![0u8; len];
        put_u64(&mut b, 0, self.chgcnt);
        put_u16(&mut b, 8, self.groups.len() as u16);
        let mut at = ANA_LOG_HEADER_LEN;
        for g in &self.groups {
            put_u32(&mut b, at, g.grpid);
            put_u32(&mut b, at + 4, nsids(g) as u32);
            put_u64(&mut b, at + 8, g.chgcnt);
            b[at + 16] = g.state & 0x0F;
            at += ANA_GROUP_DESCRIPTOR_LEN;
            for &nsid in &g.nsids[..nsids(g)] {
                put_u32(&mut b, at, nsid);
                at += 4;
            }
        }
        b
    }

    /// Reads a page (any zero padding after the last group is ignored).
    pub fn decode(buf: &[u8]) -> Result<AnaLog, DecodeError> {
        const WHAT: &str = "ANA log page";
        need(WHAT, buf, ANA_LOG_HEADER_LEN)?;
        let count = u16_at(buf, 8) as usize;
        let mut groups = Vec::with_capacity(count.min(buf.len() / ANA_GROUP_DESCRIPTOR_LEN));
        let mut at = ANA_LOG_HEADER_LEN;
        for _ in 0..count {
            need(WHAT, buf, at + ANA_GROUP_DESCRIPTOR_LEN)?;
            let n = u32_at(buf, at + 4) as usize;
            let end = n
                .checked_mul(4)
                .and_then(|l| l.checked_add(at + ANA_GROUP_DESCRIPTOR_LEN))
                .ok_or(DecodeError::field(WHAT, at + 4, "NNSIDS too large"))?;
            need(WHAT, buf, end)?;
            let list = at + ANA_GROUP_DESCRIPTOR_LEN;
            groups.push(AnaGroup {
                grpid: u32_at(buf, at),
                chgcnt: u64_at(buf, at + 8),
                state: buf[at + 16] & 0x0F,
                nsids: (0..n).map(|i| u32_at(buf, list + 4 * i)).collect(),
            });
            at = end;
        }
        Ok(AnaLog {
            chgcnt: u64_at(buf, 0),
            groups,
        })
    }
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
    /// I/O command set specific events; not governed by Asynchronous Event Configuration.
    pub const TYPE_IO_COMMAND_SET: u8 = 6;
    pub const IO_RESERVATION_LOG_AVAILABLE: u8 = 0x00;

    /// Completion dword 0 of an Asynchronous Event Request.
    pub const fn result(event_type: u8, info: u8, log_page: u8) -> u32 {
        (event_type as u32 & 0x7) | (info as u32) << 8 | (log_page as u32) << 16
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvme::identify::tests::text;
    use proptest::prelude::*;

    #[test]
    fn ana_log_layout_is_the_specs() {
        let log = AnaLog {
            chgcnt: 7,
            groups: vec![
                AnaGroup {
                    grpid: 1,
                    chgcnt: 7,
                    state: ana_state::OPTIMIZED,
                    nsids: vec![1, 2, 5],
                },
                AnaGroup {
                    grpid: 2,
                    chgcnt: 3,
                    state: ana_state::INACCESSIBLE,
                    nsids: vec![],
                },
            ],
        };
        let b = log.encode(false);
        assert_eq!(b.len(), 16 + 32 + 12 + 32);
        assert_eq!(u64_at(&b, 0), 7);
        assert_eq!(u16_at(&b, 8), 2);
        assert_eq!((u32_at(&b, 16), u32_at(&b, 20), u64_at(&b, 24)), (1, 3, 7));
        assert_eq!(b[32], 0x01);
        assert_eq!([u32_at(&b, 48), u32_at(&b, 52), u32_at(&b, 56)], [1, 2, 5]);
        assert_eq!((u32_at(&b, 60), u32_at(&b, 64), b[76]), (2, 0, 0x03));
        assert_eq!(AnaLog::decode(&b), Ok(log.clone()));
        // Groups only: the same descriptors, no NSIDs.
        let g = log.encode(true);
        assert_eq!(g.len(), 16 + 2 * 32);
        assert_eq!((u32_at(&g, 20), u32_at(&g, 48), g[64]), (0, 2, 0x03));
        // A count past the bytes is an error, not a panic.
        assert!(AnaLog::decode(&b[..60]).is_err());
    }

    proptest! {
        #[test]
        fn ana_log_round_trips(
            chgcnt: u64,
            groups in proptest::collection::vec(
                (1u32.., any::<u64>(), 0u8..16, proptest::collection::vec(1u32.., 0..8)),
                0..6,
            ),
        ) {
            let log = AnaLog {
                chgcnt,
                groups: groups
                    .into_iter()
                    .map(|(grpid, chgcnt, state, nsids)| AnaGroup { grpid, chgcnt, state, nsids })
                    .collect(),
            };
            let mut padded = log.encode(false);
            padded.resize(padded.len() + 64, 0);
            prop_assert_eq!(AnaLog::decode(&padded), Ok(log));
        }
    }

    fn any_error_entry() -> impl Strategy<Value = ErrorLogEntry> {
        (
            any::<[u64; 3]>(),
            any::<[u16; 5]>(),
            any::<u32>(),
            any::<[u8; 3]>(),
        )
            .prop_map(|(q, w, nsid, b)| ErrorLogEntry {
                error_count: q[0],
                sqid: w[0],
                cid: w[1],
                status_field: w[2],
                param_error_location: w[3],
                lba: q[1],
                nsid,
                vs: b[0],
                trtype: b[1],
                csi: b[2],
                cs: q[2],
                trtype_specific: w[4],
            })
    }

    fn any_smart() -> impl Strategy<Value = SmartLog> {
        (
            any::<[u8; 5]>(),
            any::<u16>(),
            any::<[u128; 10]>(),
            any::<[u32; 2]>(),
            any::<[u16; 8]>(),
        )
            .prop_map(|(b, temperature_k, c, t, temp_sensors)| SmartLog {
                critical_warning: b[0],
                temperature_k,
                available_spare: b[1],
                available_spare_threshold: b[2],
                percentage_used: b[3],
                endurance_group_critical: b[4],
                data_units_read: c[0],
                data_units_written: c[1],
                host_read_commands: c[2],
                host_write_commands: c[3],
                controller_busy_time: c[4],
                power_cycles: c[5],
                power_on_hours: c[6],
                unsafe_shutdowns: c[7],
                media_errors: c[8],
                error_log_entries: c[9],
                warning_temp_time: t[0],
                critical_temp_time: t[1],
                temp_sensors,
            })
    }

    fn any_fw() -> impl Strategy<Value = FirmwareSlotLog> {
        (any::<u8>(), proptest::array::uniform7(text(8)))
            .prop_map(|(afi, slots)| FirmwareSlotLog { afi, slots })
    }

    proptest! {
        #[test]
        fn error_entry_round_trip(e in any_error_entry()) {
            let mut b = [0xffu8; 70];
            e.encode(&mut b);
            prop_assert_eq!(&b[64..], &[0xff; 6]);
            prop_assert_eq!(ErrorLogEntry::decode(&b), Ok(e));
        }

        #[test]
        fn smart_round_trip(s in any_smart()) {
            let mut b = [0xffu8; SMART_LOG_LEN];
            s.encode(&mut b);
            prop_assert_eq!(SmartLog::decode(&b), Ok(s));
        }

        #[test]
        fn firmware_slot_round_trip(f in any_fw()) {
            let mut b = [0xffu8; FIRMWARE_SLOT_LOG_LEN];
            f.encode(&mut b);
            prop_assert_eq!(FirmwareSlotLog::decode(&b), Ok(f));
        }

        #[test]
        fn changed_ns_round_trip(nsids in proptest::collection::vec(1u32.., 0..=CHANGED_NS_LIST_MAX)) {
            let mut b = [0xffu8; CHANGED_NS_LIST_LEN];
            encode_changed_ns_list(&nsids, &mut b);
            prop_assert_eq!(decode_changed_ns_list(&b), Ok(nsids));
        }

        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..=CHANGED_NS_LIST_LEN + 4)) {
            let _ = ErrorLogEntry::decode(&bytes);
            let _ = SmartLog::decode(&bytes);
            if let Ok(f) = FirmwareSlotLog::decode(&bytes) {
                let mut b = [0u8; FIRMWARE_SLOT_LOG_LEN];
                f.encode(&mut b);
                prop_assert_eq!(FirmwareSlotLog::decode(&b), Ok(f));
            }
            let _ = decode_changed_ns_list(&bytes);
        }
    }

    #[test]
    fn error_entry_offsets() {
        let e = ErrorLogEntry {
            error_count: 3,
            sqid: 1,
            cid: 0x1234,
            status_field: Status::INVALID_FIELD.to_wire(false),
            param_error_location: 0x28,
            lba: 0x99,
            nsid: 5,
            trtype: crate::fabrics::Transport::Tcp.trtype(),
            cs: 0x77,
            trtype_specific: 0x55,
            ..Default::default()
        };
        let mut b = [0u8; ERROR_LOG_ENTRY_LEN];
        e.encode(&mut b);
        assert_eq!(b[0], 3);
        assert_eq!(&b[8..16], &[1, 0, 0x34, 0x12, 0x04, 0x80, 0x28, 0]);
        assert_eq!(b[16], 0x99);
        assert_eq!(b[24], 5);
        assert_eq!(b[29], 3);
        assert_eq!(b[32], 0x77);
        assert_eq!(b[40], 0x55);
        assert!(matches!(
            ErrorLogEntry::decode(&b[..63]),
            Err(DecodeError::Short { .. })
        ));
    }

    use crate::nvme::status::Status;

    #[test]
    fn smart_offsets() {
        let s = SmartLog {
            critical_warning: 0x04,
            temperature_k: 273 + 40,
            available_spare: 100,
            available_spare_threshold: 10,
            percentage_used: 7,
            data_units_read: 1,
            data_units_written: 2,
            host_read_commands: 3,
            host_write_commands: 4,
            power_on_hours: 1 << 100,
            error_log_entries: 9,
            warning_temp_time: 11,
            critical_temp_time: 12,
            temp_sensors: [300, 301, 0, 0, 0, 0, 0, 302],
            ..Default::default()
        };
        let mut b = [0u8; SMART_LOG_LEN];
        s.encode(&mut b);
        assert_eq!(&b[0..7], &[0x04, 0x39, 0x01, 100, 10, 7, 0]);
        assert_eq!((b[32], b[48], b[64], b[80]), (1, 2, 3, 4));
        assert_eq!(b[128 + 12], 0x10);
        assert_eq!(b[176], 9);
        assert_eq!((b[192], b[196]), (11, 12));
        assert_eq!(&b[200..204], &[0x2c, 0x01, 0x2d, 0x01]);
        assert_eq!(&b[214..216], &302u16.to_le_bytes());
        assert!(b[216..].iter().all(|&x| x == 0));
        assert_eq!(SmartLog::decode(&b), Ok(s));
        assert!(matches!(
            SmartLog::decode(&b[..511]),
            Err(DecodeError::Short { .. })
        ));
    }

    #[test]
    fn firmware_slot_offsets() {
        let f = FirmwareSlotLog {
            afi: 1,
            slots: [
                "1.0".into(),
                String::new(),
                "2.0-rc1".into(),
                "".into(),
                "".into(),
                "".into(),
                "abcdefgh".into(),
            ],
        };
        let mut b = [0u8; FIRMWARE_SLOT_LOG_LEN];
        f.encode(&mut b);
        assert_eq!(b[0], 1);
        assert_eq!(&b[8..16], b"1.0     ");
        assert_eq!(&b[16..24], &[0; 8]);
        assert_eq!(&b[24..32], b"2.0-rc1 ");
        assert_eq!(&b[56..64], b"abcdefgh");
        assert_eq!(FirmwareSlotLog::decode(&b), Ok(f));
        b[26] = 0x80;
        assert_eq!(FirmwareSlotLog::decode(&b).unwrap_err().offset(), 24);
    }

    #[test]
    fn changed_ns_list_bytes() {
        let mut b = [0u8; CHANGED_NS_LIST_LEN];
        encode_changed_ns_list(&[3, 1], &mut b);
        assert_eq!(&b[..12], &[3, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(decode_changed_ns_list(&b), Ok(vec![3, 1]));
        // Exactly 1024 fit, more overflow.
        let nsids: Vec<u32> = (1..=1024).collect();
        encode_changed_ns_list(&nsids, &mut b);
        assert_eq!(decode_changed_ns_list(&b), Ok(nsids));
        let nsids: Vec<u32> = (1..=1025).collect();
        encode_changed_ns_list(&nsids, &mut b);
        assert_eq!(&b[..8], &[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
        assert!(b[4..].iter().all(|&x| x == 0));
        assert_eq!(decode_changed_ns_list(&b), Ok(vec![CHANGED_NS_OVERFLOW]));
        assert!(matches!(
            decode_changed_ns_list(&b[..4095]),
            Err(DecodeError::Short { .. })
        ));
    }

    #[test]
    fn aen_result() {
        assert_eq!(
            aen::result(
                aen::TYPE_NOTICE,
                aen::NOTICE_NS_ATTR_CHANGED,
                lid::CHANGED_NS_LIST
            ),
            0x0004_0002
        );
        assert_eq!(
            aen::result(
                aen::TYPE_NOTICE,
                aen::NOTICE_DISCOVERY_LOG_CHANGED,
                lid::DISCOVERY
            ),
            0x0070_f002
        );
    }
}
