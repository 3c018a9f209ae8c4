//! Connect command data (1024 bytes) and the Connect response fields.

use crate::error::{need, DecodeError};
use crate::fabrics::nqn::Nqn;
use crate::le::*;

pub const CONNECT_DATA_LEN: usize = 1024;

/// HOSTID 0..16, CNTLID 16..18, SUBNQN 256..512, HOSTNQN 512..768 (NUL terminated).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ConnectData {
    pub host_id: [u8; 16],
    pub cntlid: u16,
    pub subnqn: Nqn,
    /// None when the host left the field empty: SPDK's host does by default, and Linux nvmet
    /// lets such a host in wherever any host may connect.
    pub hostnqn: Option<Nqn>,
}

/// Offsets in the connect data, for Connect Invalid Parameters (IATTR = 1, IPO).
pub const OFFSET_CNTLID: u16 = 16;
pub const OFFSET_SUBNQN: u16 = 256;
pub const OFFSET_HOSTNQN: u16 = 512;

/// Offsets in the SQE, for Connect Invalid Parameters (IATTR = 0, IPO).
pub const SQE_OFFSET_QID: u16 = 42;
pub const SQE_OFFSET_SQSIZE: u16 = 44;

const WHAT: &str = "Connect data";

/// Width of the SUBNQN and HOSTNQN fields.
pub const NQN_FIELD_LEN: usize = 256;

/// The CNTLID of an admin queue Connect: the controller picks one (dynamic controller model).
pub const CNTLID_DYNAMIC: u16 = 0xffff;

/// A NUL-terminated NQN in a 256-byte field at `off` (None if empty); every failure names `off`.
fn nqn_at(buf: &[u8], off: usize) -> Result<Option<Nqn>, DecodeError> {
    let field = &buf[off..off + NQN_FIELD_LEN];
    let end = field
        .iter()
        .position(|&c| c == 0)
        .ok_or(DecodeError::field(WHAT, off, "NQN not NUL terminated"))?;
    let text = std::str::from_utf8(&field[..end])
        .map_err(|_| DecodeError::field(WHAT, off, "NQN is not UTF-8"))?;
    if text.is_empty() {
        return Ok(None);
    }
    Nqn::new(text)
        .map(Some)
        .map_err(|_| DecodeError::field(WHAT, off, "invalid NQN"))
}

impl ConnectData {
    /// Decodes the 1024-byte data. A SUBNQN or HOSTNQN that is not NUL terminated within its
    /// 256 bytes, not UTF-8, or not a valid NQN is an error naming that field's offset; so is
    /// an empty SUBNQN. An empty HOSTNQN is None.
    ///
    /// The reserved areas (18..256, 768..1024) and the bytes after each NQN's terminating NUL
    /// are not checked: the Linux host leaves them zero, but nothing is gained by refusing a
    /// host that does not.
    pub fn decode(buf: &[u8]) -> Result<ConnectData, DecodeError> {
        need(WHAT, buf, CONNECT_DATA_LEN)?;
        Ok(ConnectData {
            host_id: buf[0..16].try_into().unwrap(),
            cntlid: u16_at(buf, OFFSET_CNTLID as usize),
            subnqn: nqn_at(buf, OFFSET_SUBNQN as usize)?.ok_or(DecodeError::field(
                WHAT,
                OFFSET_SUBNQN as usize,
                "subsystem NQN is empty",
            ))?,
            hostnqn: nqn_at(buf, OFFSET_HOSTNQN as usize)?,
        })
    }
    /// Writes all 1024 bytes: reserved areas zero, NQNs NUL padded.
    pub fn encode(&self, buf: &mut [u8; CONNECT_DATA_LEN]) {
        buf.fill(0);
        buf[0..16].copy_from_slice(&self.host_id);
        put_u16(buf, OFFSET_CNTLID as usize, self.cntlid);
        // An Nqn is at most 223 bytes, so the NUL terminator always fits.
        put_ascii(
            buf,
            OFFSET_SUBNQN as usize,
            NQN_FIELD_LEN,
            self.subnqn.as_str(),
            0,
        );
        put_ascii(
            buf,
            OFFSET_HOSTNQN as usize,
            NQN_FIELD_LEN,
            self.hostnqn.as_ref().map_or("", Nqn::as_str),
            0,
        );
    }
    pub fn to_bytes(&self) -> Box<[u8; CONNECT_DATA_LEN]> {
        let mut b = Box::new([0u8; CONNECT_DATA_LEN]);
        self.encode(&mut b);
        b
    }
}

/// Completion DW0 of a failed Connect with Connect Invalid Parameters: IATTR bit 16 (1 = offset is
/// in the connect data), IPO 15:0.
pub const fn invalid_parameter_result(in_data: bool, offset: u16) -> u32 {
    (in_data as u32) << 16 | offset as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn any_nqn() -> impl Strategy<Value = Nqn> {
        prop_oneof![
            "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
                .prop_map(|u| Nqn::new(&format!("nqn.2014-08.org.nvmexpress:uuid:{u}")).unwrap()),
            ("[0-9]{4}", 1u32..=12, "[a-z0-9.-]{1,30}", "[ -~]{0,150}")
                .prop_map(|(y, m, d, u)| Nqn::new(&format!("nqn.{y}-{m:02}.{d}:{u}")).unwrap()),
            Just(Nqn::discovery()),
        ]
    }

    fn any_data() -> impl Strategy<Value = ConnectData> {
        (
            any::<[u8; 16]>(),
            any::<u16>(),
            any_nqn(),
            proptest::option::of(any_nqn()),
        )
            .prop_map(|(host_id, cntlid, subnqn, hostnqn)| ConnectData {
                host_id,
                cntlid,
                subnqn,
                hostnqn,
            })
    }

    proptest! {
        #[test]
        fn round_trip(d in any_data()) {
            prop_assert_eq!(ConnectData::decode(&d.to_bytes()[..]), Ok(d));
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..1100)) {
            if let Ok(d) = ConnectData::decode(&bytes) {
                prop_assert_eq!(ConnectData::decode(&d.to_bytes()[..]), Ok(d));
            }
        }

        #[test]
        fn nqn_errors_name_the_field(d in any_data(), garbage in any::<u8>(), hostnqn: bool) {
            let mut b = d.to_bytes();
            let off = if hostnqn { 512 } else { 256 };
            b[off] = garbage;
            match ConnectData::decode(&b[..]) {
                Ok(x) if hostnqn && garbage == 0 => prop_assert_eq!(x.hostnqn, None),
                Ok(x) => prop_assert_eq!(x, d), // the same character
                Err(e) => prop_assert_eq!(e.offset(), off),
            }
        }
    }

    fn linux_admin_connect() -> ConnectData {
        ConnectData {
            host_id: *b"\x4c\x4c\x45\x44\x00\x35\x48\x10\x80\x51\xb4\xc0\x4f\x4a\x37\x32",
            cntlid: CNTLID_DYNAMIC,
            subnqn: Nqn::new("nqn.2024-01.io.fabrik:jbof:drive-07").unwrap(),
            hostnqn: Some(
                Nqn::new("nqn.2014-08.org.nvmexpress:uuid:4c4c4544-0035-4810-8051-b4c04f4a3732")
                    .unwrap(),
            ),
        }
    }

    #[test]
    fn offsets() {
        let d = linux_admin_connect();
        let b = d.to_bytes();
        assert_eq!(&b[0..16], &d.host_id);
        assert_eq!(&b[16..18], &[0xff, 0xff]);
        assert!(b[18..256].iter().all(|&x| x == 0));
        assert_eq!(&b[256..291], b"nqn.2024-01.io.fabrik:jbof:drive-07");
        assert!(b[291..512].iter().all(|&x| x == 0));
        assert_eq!(&b[512..544], b"nqn.2014-08.org.nvmexpress:uuid:");
        assert_eq!(&b[544..580], b"4c4c4544-0035-4810-8051-b4c04f4a3732");
        assert!(b[580..].iter().all(|&x| x == 0));
        assert_eq!(ConnectData::decode(&b[..]), Ok(d));
    }

    #[test]
    fn errors() {
        assert!(matches!(
            ConnectData::decode(&[0u8; 1023]),
            Err(DecodeError::Short { .. })
        ));
        let good = *linux_admin_connect().to_bytes();
        // An empty subsystem NQN is an error; an empty host NQN is none (SPDK's default).
        let mut b = good;
        b[256..512].fill(0);
        assert_eq!(ConnectData::decode(&b[..]).unwrap_err().offset(), 256);
        let mut b = good;
        b[512..768].fill(0);
        let anonymous = ConnectData::decode(&b[..]).unwrap();
        assert_eq!(anonymous.hostnqn, None);
        assert_eq!(anonymous.to_bytes()[..], b[..]);
        // Not NUL terminated within the field.
        let mut b = good;
        b[256..512].fill(b'a');
        assert_eq!(ConnectData::decode(&b[..]).unwrap_err().offset(), 256);
        // Not UTF-8.
        let mut b = good;
        b[530] = 0xff;
        assert_eq!(ConnectData::decode(&b[..]).unwrap_err().offset(), 512);
        // Not a valid NQN.
        let mut b = good;
        b[256..260].copy_from_slice(b"iqn.");
        assert_eq!(ConnectData::decode(&b[..]).unwrap_err().offset(), 256);
        // Reserved areas and bytes after the NUL are ignored.
        let mut b = good;
        b[100] = 1;
        b[300] = b'x';
        b[1000] = 7;
        assert_eq!(ConnectData::decode(&b[..]), Ok(linux_admin_connect()));
    }

    #[test]
    fn invalid_parameter_results() {
        assert_eq!(invalid_parameter_result(true, OFFSET_CNTLID), 0x0001_0010);
        assert_eq!(invalid_parameter_result(true, OFFSET_SUBNQN), 0x0001_0100);
        assert_eq!(invalid_parameter_result(true, OFFSET_HOSTNQN), 0x0001_0200);
        assert_eq!(invalid_parameter_result(false, SQE_OFFSET_QID), 0x0000_002a);
        assert_eq!(
            invalid_parameter_result(false, SQE_OFFSET_SQSIZE),
            0x0000_002c
        );
    }
}
