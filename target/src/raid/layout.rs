//! Where a volume's bytes lie on its members.
//!
//! A volume is cut into stripes; a stripe holds `data_strips()` strips of data, each `strip`
//! bytes at the same offset (`data_offset + stripe * strip`) on its member, plus the parity or
//! mirror copies. RAID 5 and 6 rotate parity as Linux md's default (left-symmetric) does: P on
//! member `n - 1 - stripe % n`, RAID 6's Q on the member after it, data on the members after
//! those in turn. RAID 10 is md's "near 2": members 2i and 2i+1 are mirrors, and data strips
//! go round the pairs.

use std::fmt;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Raid0,
    Raid1,
    Raid10,
    Raid5,
    Raid6,
}

impl Level {
    pub const ALL: [Level; 5] = [
        Level::Raid0,
        Level::Raid1,
        Level::Raid10,
        Level::Raid5,
        Level::Raid6,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Level::Raid0 => "raid0",
            Level::Raid1 => "raid1",
            Level::Raid10 => "raid10",
            Level::Raid5 => "raid5",
            Level::Raid6 => "raid6",
        }
    }

    /// Parity strips per stripe.
    pub fn parity(self) -> usize {
        match self {
            Level::Raid5 => 1,
            Level::Raid6 => 2,
            _ => 0,
        }
    }

    /// Whether data has copies on other members (RAID 1 and 10).
    pub fn mirrored(self) -> bool {
        matches!(self, Level::Raid1 | Level::Raid10)
    }

    /// Whether a lost member can be made up for (every level but RAID 0).
    pub fn redundant(self) -> bool {
        self != Level::Raid0
    }

    /// Checks a member count for the level.
    pub fn check_members(self, n: usize) -> Result<(), String> {
        let min = match self {
            // RAID 0 of one drive: a drive served as a volume (a capacity of its own, erased
            // when made), which is what the CSI driver hands out by default.
            Level::Raid0 => 1,
            Level::Raid1 => 2,
            Level::Raid10 | Level::Raid6 => 4,
            Level::Raid5 => 3,
        };
        if n < min {
            return Err(format!(
                "{} needs at least {min} drives, not {n}",
                self.name()
            ));
        }
        if n > MAX_MEMBERS {
            return Err(format!(
                "a volume has at most {MAX_MEMBERS} drives, not {n}"
            ));
        }
        if self == Level::Raid10 && !n.is_multiple_of(2) {
            return Err(format!("raid10 mirrors drives in pairs: {n} is odd"));
        }
        Ok(())
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Level {
    type Err = String;
    fn from_str(s: &str) -> Result<Level, String> {
        Level::ALL
            .into_iter()
            .find(|l| l.name() == s)
            .ok_or_else(|| format!("unknown level {s:?}: raid0, raid1, raid10, raid5 or raid6"))
    }
}

pub const MAX_MEMBERS: usize = 32;
/// Strip sizes allowed, in bytes (powers of two).
pub const MIN_STRIP: u64 = 4 << 10;
pub const MAX_STRIP: u64 = 16 << 20;

/// One data strip's part of a transfer: `len` bytes at `within` of data strip `strip` of
/// stripe `stripe`, and where they sit in the transfer's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    pub stripe: u64,
    pub strip: usize,
    pub within: u64,
    pub len: u64,
    pub buf_off: usize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub level: Level,
    pub members: usize,
    /// Bytes of one strip.
    pub strip: u64,
    /// Where the data area starts on every member (the metadata is before it).
    pub data_offset: u64,
    /// Stripes in the volume.
    pub stripes: u64,
}

impl Layout {
    /// The layout over `members` drives whose smallest has `member_bytes` bytes.
    pub fn new(
        level: Level,
        members: usize,
        strip: u64,
        member_bytes: u64,
        data_offset: u64,
    ) -> Result<Layout, String> {
        level.check_members(members)?;
        if !strip.is_power_of_two() || !(MIN_STRIP..=MAX_STRIP).contains(&strip) {
            return Err(format!(
                "strip size {} KiB is not a power of two from {} KiB to {} MiB",
                strip >> 10,
                MIN_STRIP >> 10,
                MAX_STRIP >> 20
            ));
        }
        let stripes = member_bytes.saturating_sub(data_offset) / strip;
        if stripes == 0 {
            return Err(format!(
                "the drives are too small: {member_bytes} bytes hold no {} KiB strip after {} KiB of metadata",
                strip >> 10,
                data_offset >> 10
            ));
        }
        Ok(Layout {
            level,
            members,
            strip,
            data_offset,
            stripes,
        })
    }

    /// Data strips per stripe.
    pub fn data_strips(&self) -> usize {
        match self.level {
            Level::Raid0 => self.members,
            Level::Raid1 => 1,
            Level::Raid10 => self.members / 2,
            Level::Raid5 => self.members - 1,
            Level::Raid6 => self.members - 2,
        }
    }

    pub fn stripe_bytes(&self) -> u64 {
        self.data_strips() as u64 * self.strip
    }

    pub fn capacity(&self) -> u64 {
        self.stripes * self.stripe_bytes()
    }

    /// Member of P (RAID 5 and 6) in `stripe`.
    fn p_member(&self, stripe: u64) -> usize {
        let n = self.members as u64;
        (n - 1 - stripe % n) as usize
    }

    /// Members holding P and Q of `stripe`.
    pub fn parity_members(&self, stripe: u64) -> (Option<usize>, Option<usize>) {
        match self.level {
            Level::Raid5 => (Some(self.p_member(stripe)), None),
            Level::Raid6 => {
                let p = self.p_member(stripe);
                (Some(p), Some((p + 1) % self.members))
            }
            _ => (None, None),
        }
    }

    /// Members holding data strip `i` of `stripe`: one, or the mirrors.
    pub fn copies(&self, stripe: u64, i: usize) -> impl Iterator<Item = usize> {
        let n = self.members;
        let (first, count) = match self.level {
            Level::Raid0 => (i, 1),
            Level::Raid1 => (0, n),
            Level::Raid10 => (2 * i, 2),
            Level::Raid5 => ((self.p_member(stripe) + 1 + i) % n, 1),
            Level::Raid6 => ((self.p_member(stripe) + 2 + i) % n, 1),
        };
        (first..first + count).map(move |m| m % n)
    }

    /// The one member of data strip `i` (levels without mirrors).
    pub fn member_of(&self, stripe: u64, i: usize) -> usize {
        self.copies(stripe, i).next().unwrap_or(0)
    }

    /// Byte offset on a member of `within` bytes into `stripe`'s strip.
    pub fn member_offset(&self, stripe: u64, within: u64) -> u64 {
        self.data_offset + stripe * self.strip + within
    }

    /// The pieces of the transfer of `len` bytes at volume offset `offset`, in order.
    pub fn pieces(&self, offset: u64, len: u64) -> impl Iterator<Item = Piece> + '_ {
        let end = offset + len;
        let mut at = offset;
        std::iter::from_fn(move || {
            if at >= end {
                return None;
            }
            let stripe = at / self.stripe_bytes();
            let in_stripe = at % self.stripe_bytes();
            let strip = (in_stripe / self.strip) as usize;
            let within = in_stripe % self.strip;
            let len = (self.strip - within).min(end - at);
            let piece = Piece {
                stripe,
                strip,
                within,
                len,
                buf_off: (at - offset) as usize,
            };
            at += len;
            Some(piece)
        })
    }

    /// Whether data survives with the members marked in `lost`: each data strip keeps a copy
    /// (mirrors), or at most `parity()` members are lost.
    pub fn survives(&self, lost: &[bool]) -> bool {
        match self.level {
            Level::Raid0 => !lost.iter().any(|&l| l),
            Level::Raid1 => lost.iter().any(|&l| !l),
            Level::Raid10 => lost.chunks(2).all(|pair| pair.iter().any(|&l| !l)),
            Level::Raid5 | Level::Raid6 => {
                lost.iter().filter(|&&l| l).count() <= self.level.parity()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(level: Level, n: usize) -> Layout {
        Layout::new(level, n, 64 << 10, 64 << 20, 4 << 20).unwrap()
    }

    #[test]
    fn every_member_of_a_stripe_has_one_role() {
        for (level, n) in [
            (Level::Raid0, 3),
            (Level::Raid5, 3),
            (Level::Raid5, 5),
            (Level::Raid6, 4),
            (Level::Raid6, 7),
            (Level::Raid10, 6),
            (Level::Raid1, 3),
        ] {
            let l = layout(level, n);
            for s in 0..3 * n as u64 {
                let mut used = vec![0; n];
                for i in 0..l.data_strips() {
                    for m in l.copies(s, i) {
                        used[m] += 1;
                    }
                }
                let (p, q) = l.parity_members(s);
                for m in p.into_iter().chain(q) {
                    used[m] += 1;
                }
                assert!(used.iter().all(|&u| u == 1), "{level} stripe {s}: {used:?}");
            }
        }
    }

    #[test]
    fn parity_rotates_as_md_left_symmetric() {
        let l = layout(Level::Raid5, 4);
        // Stripe 0: P on 3, data 0,1,2; stripe 1: P on 2, data on 3,0,1.
        assert_eq!(l.parity_members(0), (Some(3), None));
        assert_eq!(
            (0..3).map(|i| l.member_of(0, i)).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        assert_eq!(l.parity_members(1), (Some(2), None));
        assert_eq!(
            (0..3).map(|i| l.member_of(1, i)).collect::<Vec<_>>(),
            [3, 0, 1]
        );
        let l6 = layout(Level::Raid6, 5);
        assert_eq!(l6.parity_members(0), (Some(4), Some(0)));
        assert_eq!(
            (0..3).map(|i| l6.member_of(0, i)).collect::<Vec<_>>(),
            [1, 2, 3]
        );
    }

    #[test]
    fn pieces_cover_a_transfer_in_order() {
        let l = layout(Level::Raid5, 5);
        let strip = l.strip;
        let pieces: Vec<Piece> = l.pieces(strip - 4096, 2 * strip + 8192).collect();
        assert_eq!(pieces.len(), 4);
        assert_eq!(
            pieces[0],
            Piece {
                stripe: 0,
                strip: 0,
                within: strip - 4096,
                len: 4096,
                buf_off: 0
            }
        );
        assert_eq!(pieces[1].strip, 1);
        assert_eq!(
            pieces[3],
            Piece {
                stripe: 0,
                strip: 3,
                within: 0,
                len: 4096,
                buf_off: (2 * strip + 4096) as usize
            }
        );
        let total: u64 = pieces.iter().map(|p| p.len).sum();
        assert_eq!(total, 2 * strip + 8192);
        // Across a stripe boundary.
        let p: Vec<Piece> = l.pieces(l.stripe_bytes() - 4096, 8192).collect();
        assert_eq!(
            (p[0].stripe, p[0].strip, p[1].stripe, p[1].strip),
            (0, 3, 1, 0)
        );
    }

    #[test]
    fn which_losses_each_level_survives() {
        assert!(!layout(Level::Raid0, 2).survives(&[false, true]));
        assert!(layout(Level::Raid1, 3).survives(&[true, true, false]));
        let r10 = layout(Level::Raid10, 4);
        assert!(r10.survives(&[true, false, false, true]));
        assert!(!r10.survives(&[true, true, false, false]));
        assert!(layout(Level::Raid5, 4).survives(&[false, true, false, false]));
        assert!(!layout(Level::Raid5, 4).survives(&[true, true, false, false]));
        assert!(layout(Level::Raid6, 4).survives(&[true, true, false, false]));
        assert!(!layout(Level::Raid6, 5).survives(&[true, true, true, false, false]));
    }

    #[test]
    fn bad_geometry_is_refused() {
        assert!(Layout::new(Level::Raid5, 2, 64 << 10, 1 << 30, 0)
            .unwrap_err()
            .contains("at least 3"));
        assert!(Layout::new(Level::Raid10, 5, 64 << 10, 1 << 30, 0)
            .unwrap_err()
            .contains("odd"));
        assert!(Layout::new(Level::Raid0, 2, 3000, 1 << 30, 0)
            .unwrap_err()
            .contains("power of two"));
        assert!(Layout::new(Level::Raid0, 2, 64 << 10, 1 << 20, 1 << 20)
            .unwrap_err()
            .contains("too small"));
        assert_eq!("raid6".parse::<Level>(), Ok(Level::Raid6));
        assert!("raid4".parse::<Level>().is_err());
    }
}
