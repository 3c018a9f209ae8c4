//! Feature identifiers and the encodings of the features a fabrics controller supports.

/// Feature identifiers.
pub mod fid {
    pub const ARBITRATION: u8 = 0x01;
    pub const POWER_MANAGEMENT: u8 = 0x02;
    pub const TEMPERATURE_THRESHOLD: u8 = 0x04;
    pub const ERROR_RECOVERY: u8 = 0x05;
    pub const VOLATILE_WRITE_CACHE: u8 = 0x06;
    pub const NUMBER_OF_QUEUES: u8 = 0x07;
    pub const INTERRUPT_COALESCING: u8 = 0x08;
    pub const WRITE_ATOMICITY: u8 = 0x0A;
    pub const ASYNC_EVENT_CONFIG: u8 = 0x0B;
    pub const AUTONOMOUS_POWER_STATE: u8 = 0x0C;
    pub const TIMESTAMP: u8 = 0x0E;
    pub const KEEP_ALIVE_TIMER: u8 = 0x0F;
    pub const HOST_BEHAVIOR: u8 = 0x16;
    pub const HOST_IDENTIFIER: u8 = 0x81;
    /// Per namespace: which reservation notices this controller is not told (`RESV_MASK_*`).
    pub const RESERVATION_NOTIFICATION_MASK: u8 = 0x82;
    /// Per namespace: PTPL, bit 0.
    pub const RESERVATION_PERSISTENCE: u8 = 0x83;
}

/// Get Features select values (CDW10 10:8).
pub mod sel {
    pub const CURRENT: u8 = 0;
    pub const DEFAULT: u8 = 1;
    pub const SAVED: u8 = 2;
    pub const SUPPORTED_CAPABILITIES: u8 = 3;
}

/// Number of Queues: both the request (CDW11) and the result (DW0) are NSQ 15:0 | NCQ 31:16,
/// 0's based.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct NumberOfQueues {
    /// I/O submission queues (1-based count).
    pub submission: u32,
    /// I/O completion queues (1-based count).
    pub completion: u32,
}

impl NumberOfQueues {
    /// From CDW11 / DW0. A 0's based value of 0xFFFF is invalid (the caller answers Invalid Field).
    pub fn from_dword(dw: u32) -> NumberOfQueues {
        NumberOfQueues {
            submission: (dw & 0xffff) + 1,
            completion: (dw >> 16) + 1,
        }
    }
    pub fn to_dword(self) -> u32 {
        (self.submission.saturating_sub(1) & 0xffff)
            | (self.completion.saturating_sub(1) & 0xffff) << 16
    }
}

/// Asynchronous Event Configuration bits this project knows (CDW11 / OAES share the notice bits).
pub mod aec {
    pub const SMART_MASK: u32 = 0xff;
    pub const NS_ATTR_NOTICES: u32 = 1 << 8;
    pub const FW_ACTIVATION_NOTICES: u32 = 1 << 9;
    pub const ANA_CHANGE_NOTICES: u32 = 1 << 11;
    pub const DISCOVERY_LOG_CHANGE_NOTICES: u32 = 1 << 31;
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn number_of_queues_round_trip(dw: u32) {
            prop_assert_eq!(NumberOfQueues::from_dword(dw).to_dword(), dw);
        }
    }
}
