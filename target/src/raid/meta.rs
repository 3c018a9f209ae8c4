//! What a volume keeps on its members, before the data area: a superblock that names the
//! volume and the member's place in it (so a drive swapped or re-cabled is not taken for a
//! member), and the write-intent bitmap that closes the write hole.
//!
//! The write hole: a write to a parity stripe changes data and parity on several members; a
//! crash between them leaves parity that disagrees with the data, and a later reconstruction
//! from it returns garbage for blocks no host touched. Every write first marks its region of
//! stripes dirty in the bitmap, on every member, durably (FUA) — once per region, not per write,
//! since a region stays marked while written to. A region is cleaned only after its writes
//! ended and the members were flushed. At assembly, every dirty region's parity (or mirror
//! copy) is made again from the data before the volume serves, so a crash leaves no stripe
//! whose parity disagrees. Where the volume comes up degraded with dirty regions, those stripes
//! cannot be checked: the volume says so (`unsynced_regions`), not silently.
//!
//! Member layout: superblock at 0 (one 4 KiB block, JSON), bitmap at 4 KiB (one block),
//! data from `DATA_OFFSET`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::layout::{Layout, Level};

pub const SUPER_OFFSET: u64 = 0;
pub const BITMAP_OFFSET: u64 = 4096;
pub const META_BLOCK: usize = 4096;
/// Where data starts on a member; what lies between the bitmap and it is kept for the
/// metadata to come (a log of degraded writes).
pub const DATA_OFFSET: u64 = 4 << 20;

const SUPER_MAGIC: &str = "fabrik-volume-1";
const BITMAP_MAGIC: u64 = 0x7061_6d74_6962_6b66; // "fkbitmap", little-endian
const BITMAP_HEADER: usize = 24;
/// Regions a bitmap block holds.
pub const MAX_REGIONS: u64 = ((META_BLOCK - BITMAP_HEADER) * 8) as u64;

/// A member's superblock.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Superblock {
    pub magic: String,
    pub volume: String,
    /// Random per volume: a volume deleted and made again under the same name is another.
    pub uuid: String,
    pub level: Level,
    pub members: usize,
    pub strip: u64,
    /// This member's place.
    pub index: usize,
    /// The drive it was made on, for the log.
    pub drive: String,
}

impl Superblock {
    pub fn new(volume: &str, uuid: &str, layout: &Layout, index: usize, drive: &str) -> Self {
        Superblock {
            magic: SUPER_MAGIC.into(),
            volume: volume.into(),
            uuid: uuid.into(),
            level: layout.level,
            members: layout.members,
            strip: layout.strip,
            index,
            drive: drive.into(),
        }
    }

    pub fn encode(&self) -> Bytes {
        let mut block = serde_json::to_vec(self).expect("a superblock encodes");
        assert!(block.len() < META_BLOCK, "superblock over one block");
        block.resize(META_BLOCK, 0);
        Bytes::from(block)
    }

    /// The superblock in `block`, if it holds one.
    pub fn decode(block: &[u8]) -> Option<Superblock> {
        let end = block.iter().position(|&b| b == 0).unwrap_or(block.len());
        let sb: Superblock = serde_json::from_slice(&block[..end]).ok()?;
        (sb.magic == SUPER_MAGIC).then_some(sb)
    }

    /// Why this superblock is not member `index` of the volume `expected` describes.
    pub fn mismatch(&self, expected: &Superblock) -> Option<String> {
        if self.volume != expected.volume || self.uuid != expected.uuid {
            return Some(format!(
                "it belongs to volume {:?} ({})",
                self.volume, self.uuid
            ));
        }
        if self.index != expected.index {
            return Some(format!("it is member {} of the volume", self.index));
        }
        if (self.level, self.members, self.strip)
            != (expected.level, expected.members, expected.strip)
        {
            return Some("its layout differs".into());
        }
        None
    }
}

/// Stripes per bitmap region for `layout`: regions of whole stripes, at most `MAX_REGIONS`.
pub fn region_stripes(layout: &Layout) -> u64 {
    layout.stripes.div_ceil(MAX_REGIONS).max(1)
}

/// The bitmap as one block.
pub fn encode_bitmap(region_stripes: u64, bits: &[u64]) -> Bytes {
    let mut block = vec![0u8; META_BLOCK];
    block[0..8].copy_from_slice(&BITMAP_MAGIC.to_le_bytes());
    block[8..16].copy_from_slice(&region_stripes.to_le_bytes());
    block[16..24].copy_from_slice(&(bits.len() as u64 * 64).to_le_bytes());
    for (i, w) in bits.iter().enumerate() {
        block[BITMAP_HEADER + i * 8..][..8].copy_from_slice(&w.to_le_bytes());
    }
    Bytes::from(block)
}

/// The dirty bits of a bitmap block made for `region_stripes`; None if it holds no bitmap (or
/// one of another geometry).
pub fn decode_bitmap(block: &[u8], region_stripes: u64, words: usize) -> Option<Vec<u64>> {
    let word = |i: usize| u64::from_le_bytes(block[i..i + 8].try_into().unwrap());
    if block.len() < META_BLOCK || word(0) != BITMAP_MAGIC || word(8) != region_stripes {
        return None;
    }
    Some((0..words).map(|i| word(BITMAP_HEADER + i * 8)).collect())
}

/// The in-memory side of the write-intent bitmap.
pub struct Intent {
    pub region_stripes: u64,
    regions: usize,
    bits: Mutex<Bits>,
    /// Held while a bitmap is written: one write at a time, and the cleaner's clearing and
    /// writing are one step for the markers.
    pub persist: tokio::sync::Mutex<()>,
    /// Bitmap writes so far (tests and metrics).
    pub writes: AtomicU64,
}

struct Bits {
    /// Regions written to or being written to.
    wanted: Vec<u64>,
    /// Regions whose bit is set on the members for sure.
    on_disk: Vec<u64>,
    /// Writes in flight, per region.
    inflight: Vec<u32>,
    /// Writes begun, per region (the cleaner sees whether one came while it flushed).
    begun: Vec<u32>,
}

fn has(bits: &[u64], r: usize) -> bool {
    bits[r / 64] & (1 << (r % 64)) != 0
}

fn set(bits: &mut [u64], r: usize) {
    bits[r / 64] |= 1 << (r % 64);
}

fn clear(bits: &mut [u64], r: usize) {
    bits[r / 64] &= !(1 << (r % 64));
}

impl Intent {
    /// `dirty`: the bits read at assembly (still set on the members).
    pub fn new(layout: &Layout, dirty: Vec<u64>) -> Intent {
        let region_stripes = region_stripes(layout);
        let regions = layout.stripes.div_ceil(region_stripes) as usize;
        let words = regions.div_ceil(64);
        let mut dirty = dirty;
        dirty.resize(words, 0);
        Intent {
            region_stripes,
            regions,
            bits: Mutex::new(Bits {
                wanted: dirty.clone(),
                on_disk: dirty,
                inflight: vec![0; regions],
                begun: vec![0; regions],
            }),
            persist: tokio::sync::Mutex::new(()),
            writes: AtomicU64::new(0),
        }
    }

    pub fn words(&self) -> usize {
        self.regions.div_ceil(64)
    }

    pub fn region_of(&self, stripe: u64) -> usize {
        (stripe / self.region_stripes) as usize
    }

    /// Stripes of region `r`.
    pub fn stripes_of(&self, r: usize, layout: &Layout) -> std::ops::Range<u64> {
        let first = r as u64 * self.region_stripes;
        first..(first + self.region_stripes).min(layout.stripes)
    }

    /// Begins writes to `regions`; true when each is marked on the members already, else
    /// the caller persists (`snapshot`, then `persisted`) before writing.
    pub fn begin(&self, regions: &[usize]) -> bool {
        let mut b = self.bits.lock().unwrap();
        let mut marked = true;
        for &r in regions {
            b.inflight[r] += 1;
            b.begun[r] = b.begun[r].wrapping_add(1);
            set(&mut b.wanted, r);
            marked &= has(&b.on_disk, r);
        }
        marked
    }

    /// Whether every one of `regions` is marked on the members (after waiting for a write).
    pub fn marked(&self, regions: &[usize]) -> bool {
        let b = self.bits.lock().unwrap();
        regions.iter().all(|&r| has(&b.on_disk, r))
    }

    /// The bits to write now.
    pub fn snapshot(&self) -> Vec<u64> {
        self.bits.lock().unwrap().wanted.clone()
    }

    /// `bits` are on the members (the caller holds `persist`).
    pub fn persisted(&self, bits: Vec<u64>) {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.bits.lock().unwrap().on_disk = bits;
    }

    pub fn end(&self, regions: &[usize]) {
        let mut b = self.bits.lock().unwrap();
        for &r in regions {
            b.inflight[r] -= 1;
        }
    }

    /// Regions that may be cleaned: marked, no write in flight; with the count of writes
    /// begun, to compare after the flush.
    pub fn idle(&self) -> Vec<(usize, u32)> {
        let b = self.bits.lock().unwrap();
        (0..self.regions)
            .filter(|&r| has(&b.wanted, r) && b.inflight[r] == 0)
            .map(|r| (r, b.begun[r]))
            .collect()
    }

    /// Clears the regions that stayed idle since `idle` (the caller holds `persist` and has
    /// flushed the members); the bits to write, if any changed.
    pub fn clean(&self, idle: &[(usize, u32)]) -> Option<Vec<u64>> {
        let mut b = self.bits.lock().unwrap();
        let mut changed = false;
        for &(r, begun) in idle {
            if b.inflight[r] == 0 && b.begun[r] == begun {
                clear(&mut b.wanted, r);
                // Not on the members for sure from now on: a marker waits for the write.
                clear(&mut b.on_disk, r);
                changed = true;
            }
        }
        changed.then(|| b.wanted.clone())
    }

    /// Regions marked now.
    pub fn dirty_regions(&self) -> Vec<usize> {
        let b = self.bits.lock().unwrap();
        (0..self.regions).filter(|&r| has(&b.wanted, r)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        Layout::new(Level::Raid5, 4, 64 << 10, 1 << 30, DATA_OFFSET).unwrap()
    }

    #[test]
    fn superblocks_and_bitmaps_round_trip() {
        let l = layout();
        let sb = Superblock::new("r5", "u1", &l, 2, "03");
        let back = Superblock::decode(&sb.encode()).unwrap();
        assert_eq!(back, sb);
        assert!(back.mismatch(&sb).is_none());
        let other = Superblock::new("r5", "u1", &l, 1, "03");
        assert!(back.mismatch(&other).unwrap().contains("member 2"));
        assert!(Superblock::decode(&[0u8; 4096]).is_none());
        let bits = vec![5u64, 1 << 63];
        let block = encode_bitmap(3, &bits);
        assert_eq!(decode_bitmap(&block, 3, 2), Some(bits));
        assert_eq!(decode_bitmap(&block, 4, 2), None, "another geometry");
    }

    #[test]
    fn a_region_is_cleaned_only_when_no_write_came_since_the_flush() {
        let l = layout();
        let intent = Intent::new(&l, Vec::new());
        assert!(!intent.begin(&[0, 1]), "first write: must persist");
        intent.persisted(intent.snapshot());
        assert!(intent.begin(&[1]), "marked already");
        intent.end(&[0, 1]);
        let idle = intent.idle();
        assert_eq!(
            idle.iter().map(|i| i.0).collect::<Vec<_>>(),
            [0],
            "1 has a write in flight"
        );
        // A write to 0 begins and ends while the members flush: 0 stays dirty.
        assert!(intent.begin(&[0]));
        intent.end(&[0]);
        assert_eq!(intent.clean(&idle), None);
        let idle = intent.idle();
        intent.end(&[1]);
        let bits = intent.clean(&idle).unwrap();
        assert_eq!(bits[0], 0b10);
        assert!(
            !intent.begin(&[0]),
            "cleared: the next write persists again"
        );
    }
}
