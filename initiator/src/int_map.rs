//! Maps keyed by the small integers of the per-command path (command IDs, namespace IDs), hashed
//! with one multiplication. SipHash, std's default, resists keys chosen to collide; that buys
//! nothing here (the host picks the command IDs it inserts, and a target's answers only look
//! them up) and it took about 90 instructions of each command's 8,700 (callgrind, `fabrik
//! bench` 4K reads at QD32).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Fibonacci hashing's multiplier (2^64 / the golden ratio, odd): spreads consecutive keys over
/// the high bits, which hashbrown's control bytes use.
const K: u64 = 0x9E37_79B9_7F4A_7C15;

pub type IntMap<Key, Value> = HashMap<Key, Value, BuildHasherDefault<IntHasher>>;

#[derive(Default, Clone, Copy)]
pub struct IntHasher(u64);

impl Hasher for IntHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(K);
        }
    }

    fn write_u16(&mut self, n: u16) {
        self.write_u64(n.into());
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(n.into());
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(K);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_map_and_spread() {
        let mut map: IntMap<u16, u16> = IntMap::default();
        for cid in 0..=u16::MAX {
            map.insert(cid, cid.wrapping_mul(3));
        }
        assert_eq!(map.len(), 65536);
        assert!((0..=u16::MAX).all(|cid| map.get(&cid) == Some(&cid.wrapping_mul(3))));
        // Consecutive keys land far apart in the high bits (hashbrown's control byte).
        let high = |n: u16| {
            let mut h = IntHasher::default();
            h.write_u16(n);
            h.finish() >> 57
        };
        let distinct: std::collections::HashSet<u64> = (0..128).map(high).collect();
        assert!(distinct.len() > 64, "{} of 128", distinct.len());
    }
}
