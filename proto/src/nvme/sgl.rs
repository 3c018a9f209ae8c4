//! SGL descriptors (16 bytes) as the fabrics bindings use them in SQE bytes 24..40.
//!
//! Byte 15 holds the type (bits 7:4) and subtype (bits 3:0). Keyed data blocks (RDMA) carry a
//! 3-byte length and a 4-byte key instead of a 4-byte length.

use crate::error::DecodeError;
use crate::le::*;

pub const SGL_LEN: usize = 16;

mod ty {
    pub const DATA_BLOCK: u8 = 0x0;
    pub const SEGMENT: u8 = 0x2;
    pub const LAST_SEGMENT: u8 = 0x3;
    pub const KEYED_DATA_BLOCK: u8 = 0x4;
    pub const TRANSPORT_DATA_BLOCK: u8 = 0x5;
}
mod subtype {
    pub const ADDRESS: u8 = 0x0;
    pub const OFFSET: u8 = 0x1;
    pub const INVALIDATE_KEY: u8 = 0xF;
    pub const TRANSPORT: u8 = 0xA;
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SglDescriptor {
    /// Data block, address subtype (0x00).
    DataBlock { address: u64, length: u32 },
    /// Data block, offset subtype (0x01): in-capsule data at `offset` from the capsule's data start.
    DataBlockOffset { offset: u64, length: u32 },
    /// Segment (0x20/0x21) or last segment (0x30/0x31) pointing at further descriptors.
    Segment {
        address: u64,
        length: u32,
        last: bool,
        offset: bool,
    },
    /// Keyed data block (0x40, or 0x4F when the host asks for remote invalidation); length is 24 bits.
    KeyedDataBlock {
        address: u64,
        length: u32,
        key: u32,
        invalidate: bool,
    },
    /// Transport SGL data block (0x5A): the transport moves the data (NVMe/TCP R2T, C2HData).
    TransportDataBlock { length: u32 },
}

impl SglDescriptor {
    pub fn decode(b: &[u8; SGL_LEN]) -> Result<SglDescriptor, DecodeError> {
        const WHAT: &str = "SGL descriptor";
        let id = b[15];
        let (t, st) = (id >> 4, id & 0xf);
        let address = u64_at(b, 0);
        let length = u32_at(b, 8);
        let reserved_ok = |range: std::ops::Range<usize>| all_zero(&b[range]);
        match (t, st) {
            (ty::DATA_BLOCK, subtype::ADDRESS) | (ty::DATA_BLOCK, subtype::OFFSET) => {
                if !reserved_ok(12..15) {
                    return Err(DecodeError::field(WHAT, 12, "reserved bytes not zero"));
                }
                Ok(if st == subtype::ADDRESS {
                    SglDescriptor::DataBlock { address, length }
                } else {
                    SglDescriptor::DataBlockOffset {
                        offset: address,
                        length,
                    }
                })
            }
            (ty::SEGMENT | ty::LAST_SEGMENT, subtype::ADDRESS | subtype::OFFSET) => {
                if !reserved_ok(12..15) {
                    return Err(DecodeError::field(WHAT, 12, "reserved bytes not zero"));
                }
                Ok(SglDescriptor::Segment {
                    address,
                    length,
                    last: t == ty::LAST_SEGMENT,
                    offset: st == subtype::OFFSET,
                })
            }
            (ty::KEYED_DATA_BLOCK, subtype::ADDRESS | subtype::INVALIDATE_KEY) => {
                Ok(SglDescriptor::KeyedDataBlock {
                    address,
                    length: u32::from_le_bytes([b[8], b[9], b[10], 0]),
                    key: u32_at(b, 11),
                    invalidate: st == subtype::INVALIDATE_KEY,
                })
            }
            (ty::TRANSPORT_DATA_BLOCK, subtype::TRANSPORT) => {
                if address != 0 || !reserved_ok(12..15) {
                    return Err(DecodeError::field(
                        WHAT,
                        if address != 0 { 0 } else { 12 },
                        "reserved bytes not zero",
                    ));
                }
                Ok(SglDescriptor::TransportDataBlock { length })
            }
            _ => Err(DecodeError::field(
                WHAT,
                15,
                "unsupported SGL descriptor type",
            )),
        }
    }

    pub fn encode(&self) -> [u8; SGL_LEN] {
        let mut b = [0u8; SGL_LEN];
        match *self {
            SglDescriptor::DataBlock { address, length } => {
                put_u64(&mut b, 0, address);
                put_u32(&mut b, 8, length);
                b[15] = ty::DATA_BLOCK << 4 | subtype::ADDRESS;
            }
            SglDescriptor::DataBlockOffset { offset, length } => {
                put_u64(&mut b, 0, offset);
                put_u32(&mut b, 8, length);
                b[15] = ty::DATA_BLOCK << 4 | subtype::OFFSET;
            }
            SglDescriptor::Segment {
                address,
                length,
                last,
                offset,
            } => {
                put_u64(&mut b, 0, address);
                put_u32(&mut b, 8, length);
                let t = if last { ty::LAST_SEGMENT } else { ty::SEGMENT };
                b[15] = t << 4
                    | if offset {
                        subtype::OFFSET
                    } else {
                        subtype::ADDRESS
                    };
            }
            SglDescriptor::KeyedDataBlock {
                address,
                length,
                key,
                invalidate,
            } => {
                put_u64(&mut b, 0, address);
                b[8..11].copy_from_slice(&length.to_le_bytes()[..3]);
                put_u32(&mut b, 11, key);
                b[15] = ty::KEYED_DATA_BLOCK << 4
                    | if invalidate {
                        subtype::INVALIDATE_KEY
                    } else {
                        subtype::ADDRESS
                    };
            }
            SglDescriptor::TransportDataBlock { length } => {
                put_u32(&mut b, 8, length);
                b[15] = ty::TRANSPORT_DATA_BLOCK << 4 | subtype::TRANSPORT;
            }
        }
        b
    }

    /// Bytes of data the descriptor describes (0 for segment descriptors' own data).
    pub fn data_len(&self) -> u32 {
        match *self {
            SglDescriptor::DataBlock { length, .. }
            | SglDescriptor::DataBlockOffset { length, .. }
            | SglDescriptor::KeyedDataBlock { length, .. }
            | SglDescriptor::TransportDataBlock { length } => length,
            SglDescriptor::Segment { .. } => 0,
        }
    }

    /// The descriptor a command with no data carries on NVMe/TCP.
    pub const NONE_TCP: SglDescriptor = SglDescriptor::TransportDataBlock { length: 0 };
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn any_sgl() -> impl Strategy<Value = SglDescriptor> {
        prop_oneof![
            (any::<u64>(), any::<u32>())
                .prop_map(|(address, length)| SglDescriptor::DataBlock { address, length }),
            (any::<u64>(), any::<u32>())
                .prop_map(|(offset, length)| SglDescriptor::DataBlockOffset { offset, length }),
            (any::<u64>(), any::<u32>(), any::<bool>(), any::<bool>()).prop_map(
                |(address, length, last, offset)| SglDescriptor::Segment {
                    address,
                    length,
                    last,
                    offset
                }
            ),
            (any::<u64>(), 0u32..1 << 24, any::<u32>(), any::<bool>()).prop_map(
                |(address, length, key, invalidate)| {
                    SglDescriptor::KeyedDataBlock {
                        address,
                        length,
                        key,
                        invalidate,
                    }
                }
            ),
            any::<u32>().prop_map(|length| SglDescriptor::TransportDataBlock { length }),
        ]
    }

    proptest! {
        #[test]
        fn round_trip(sgl in any_sgl()) {
            prop_assert_eq!(SglDescriptor::decode(&sgl.encode()).unwrap(), sgl);
        }

        #[test]
        fn decode_never_panics(bytes: [u8; 16]) {
            if let Ok(sgl) = SglDescriptor::decode(&bytes) {
                prop_assert_eq!(SglDescriptor::decode(&sgl.encode()).unwrap(), sgl);
            }
        }
    }

    #[test]
    fn linux_tcp_descriptors() {
        let mut b = [0u8; 16];
        b[8..12].copy_from_slice(&4096u32.to_le_bytes());
        b[15] = 0x5A;
        assert_eq!(
            SglDescriptor::decode(&b).unwrap(),
            SglDescriptor::TransportDataBlock { length: 4096 }
        );
        b[15] = 0x01;
        assert_eq!(
            SglDescriptor::decode(&b).unwrap(),
            SglDescriptor::DataBlockOffset {
                offset: 0,
                length: 4096
            }
        );
        b[15] = 0x77;
        assert!(SglDescriptor::decode(&b).is_err());
    }
}
