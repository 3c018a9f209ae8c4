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
    /// Fields wider than their bits are cut (MPSMIN/MPSMAX to 4 bits).
    pub fn to_u64(self) -> u64 {
        self.mqes as u64
            | (self.cqr as u64) << 16
            | (self.to as u64) << 24
            | (self.css_nvm as u64) << 37
            | ((self.mpsmin & 0xf) as u64) << 48
            | ((self.mpsmax & 0xf) as u64) << 52
    }
    /// Bits this struct does not name (AMS, DSTRD, NSSRS, other CSS bits, BPS, CRMS, ...) are
    /// dropped.
    pub fn from_u64(v: u64) -> Cap {
        Cap {
            mqes: v as u16,
            cqr: v & 1 << 16 != 0,
            to: (v >> 24) as u8,
            css_nvm: v & 1 << 37 != 0,
            mpsmin: ((v >> 48) & 0xf) as u8,
            mpsmax: ((v >> 52) & 0xf) as u8,
        }
    }
}

/// CC.SHN values.
pub const SHN_NONE: u8 = 0;
pub const SHN_NORMAL: u8 = 1;
pub const SHN_ABRUPT: u8 = 2;

/// Controller Configuration (4 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Cc {
    pub en: bool,    // 0
    pub css: u8,     // 6:4
    pub mps: u8,     // 10:7
    pub ams: u8,     // 13:11
    pub shn: u8,     // 15:14
    pub iosqes: u8,  // 19:16
    pub iocqes: u8,  // 23:20
    pub crime: bool, // 24
}

impl Cc {
    /// Fields wider than their bits are cut.
    pub fn to_u32(self) -> u32 {
        self.en as u32
            | ((self.css & 0x7) as u32) << 4
            | ((self.mps & 0xf) as u32) << 7
            | ((self.ams & 0x7) as u32) << 11
            | ((self.shn & 0x3) as u32) << 14
            | ((self.iosqes & 0xf) as u32) << 16
            | ((self.iocqes & 0xf) as u32) << 20
            | (self.crime as u32) << 24
    }
    /// Reserved bits (3:1, 31:25) are dropped; the caller may compare to reject them.
    pub fn from_u32(v: u32) -> Cc {
        Cc {
            en: v & 1 != 0,
            css: ((v >> 4) & 0x7) as u8,
            mps: ((v >> 7) & 0xf) as u8,
            ams: ((v >> 11) & 0x7) as u8,
            shn: ((v >> 14) & 0x3) as u8,
            iosqes: ((v >> 16) & 0xf) as u8,
            iocqes: ((v >> 20) & 0xf) as u8,
            crime: v & 1 << 24 != 0,
        }
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
    /// SHST is cut to its 2 bits.
    pub fn to_u32(self) -> u32 {
        self.rdy as u32
            | (self.cfs as u32) << 1
            | ((self.shst & 0x3) as u32) << 2
            | (self.nssro as u32) << 4
            | (self.pp as u32) << 5
    }
    /// Reserved bits (31:6) are dropped.
    pub fn from_u32(v: u32) -> Csts {
        Csts {
            rdy: v & 1 != 0,
            cfs: v & 1 << 1 != 0,
            shst: ((v >> 2) & 0x3) as u8,
            nssro: v & 1 << 4 != 0,
            pp: v & 1 << 5 != 0,
        }
    }
}

/// Version as VS encodes it: major 31:16, minor 15:8, tertiary 7:0.
pub const fn version(major: u16, minor: u8, tertiary: u8) -> u32 {
    (major as u32) << 16 | (minor as u32) << 8 | tertiary as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn cap_round_trip(mqes: u16, cqr: bool, to: u8, css_nvm: bool, mpsmin in 0u8..16, mpsmax in 0u8..16) {
            let cap = Cap { mqes, cqr, to, css_nvm, mpsmin, mpsmax };
            prop_assert_eq!(Cap::from_u64(cap.to_u64()), cap);
        }

        #[test]
        fn cap_from_any(v: u64) {
            // Only the named bits survive.
            let mask = 0xffff | 1 << 16 | 0xff << 24 | 1 << 37 | 0xff << 48;
            prop_assert_eq!(Cap::from_u64(v).to_u64(), v & mask);
        }

        #[test]
        fn cc_round_trip(v: u32) {
            let mask = 0x01ff_fff1;
            prop_assert_eq!(Cc::from_u32(v).to_u32(), v & mask);
            let cc = Cc::from_u32(v);
            prop_assert_eq!(Cc::from_u32(cc.to_u32()), cc);
        }

        #[test]
        fn csts_round_trip(v: u32) {
            prop_assert_eq!(Csts::from_u32(v).to_u32(), v & 0x3f);
            let csts = Csts::from_u32(v);
            prop_assert_eq!(Csts::from_u32(csts.to_u32()), csts);
        }
    }

    #[test]
    fn bit_layouts() {
        // The Linux target's CAP less bit 43: MQES 1023, TO 15, CSS NVM.
        let cap = Cap {
            mqes: 1023,
            to: 15,
            css_nvm: true,
            ..Default::default()
        };
        assert_eq!(cap.to_u64(), 0x20_0f00_03ff);
        assert_eq!(Cap::from_u64(0x820_0f00_03ff), cap);
        assert_eq!(
            Cap {
                cqr: true,
                ..Default::default()
            }
            .to_u64(),
            1 << 16
        );
        assert_eq!(
            Cap {
                mpsmin: 1,
                mpsmax: 4,
                ..Default::default()
            }
            .to_u64(),
            0x0041_0000_0000_0000
        );
        assert_eq!(
            Cap {
                mpsmin: 0xff,
                ..Default::default()
            }
            .to_u64(),
            0x000f_0000_0000_0000
        );

        // The Linux host's enable: IOSQES 6, IOCQES 4, EN.
        let cc = Cc::from_u32(0x0046_0001);
        assert_eq!(
            cc,
            Cc {
                en: true,
                iosqes: 6,
                iocqes: 4,
                ..Default::default()
            }
        );
        assert_eq!(cc.to_u32(), 0x0046_0001);
        assert_eq!(
            Cc {
                css: 6,
                ..Default::default()
            }
            .to_u32(),
            0x60
        );
        assert_eq!(
            Cc {
                mps: 0xf,
                ..Default::default()
            }
            .to_u32(),
            0x780
        );
        assert_eq!(
            Cc {
                ams: 7,
                ..Default::default()
            }
            .to_u32(),
            0x3800
        );
        assert_eq!(
            Cc {
                shn: SHN_NORMAL,
                ..Default::default()
            }
            .to_u32(),
            0x4000
        );
        assert_eq!(
            Cc {
                shn: SHN_ABRUPT,
                ..Default::default()
            }
            .to_u32(),
            0x8000
        );
        assert_eq!(
            Cc {
                crime: true,
                ..Default::default()
            }
            .to_u32(),
            1 << 24
        );
        // Reserved bits are dropped.
        assert_eq!(Cc::from_u32(0xfe00_000e), Cc::default());

        assert_eq!(
            Csts {
                rdy: true,
                ..Default::default()
            }
            .to_u32(),
            1
        );
        assert_eq!(
            Csts {
                cfs: true,
                ..Default::default()
            }
            .to_u32(),
            2
        );
        assert_eq!(
            Csts {
                shst: SHST_COMPLETE,
                ..Default::default()
            }
            .to_u32(),
            0x8
        );
        assert_eq!(
            Csts {
                shst: SHST_OCCURRING,
                ..Default::default()
            }
            .to_u32(),
            0x4
        );
        assert_eq!(
            Csts {
                nssro: true,
                pp: true,
                ..Default::default()
            }
            .to_u32(),
            0x30
        );
        assert_eq!(
            Csts::from_u32(0x9),
            Csts {
                rdy: true,
                shst: SHST_COMPLETE,
                ..Default::default()
            }
        );

        assert_eq!(version(1, 3, 0), 0x0001_0300);
        assert_eq!(version(2, 0, 1), 0x0002_0001);
    }
}
