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
//! Degraded, that is not enough: a stripe's lost data lives only in its parity, and a crash
//! between a write's data and parity makes it garbage, though no host wrote it. So a write to a
//! stripe with a data member lost (or being rebuilt) first puts a record on every member
//! left: the lost strips' new rows (`Record`, in `LOG_SLOTS` slots after the bitmap). At
//! assembly the records of the current generation (the state file's count of member changes)
//! make the parity of their rows again from the data there and the lost rows they carry. A slot
//! is reused only once its write is durable and the bitmap says the records before it are done
//! (`tail`), so every record a crash can need is still there.
//!
//! Member layout: superblock at 0 (one 4 KiB block, JSON), bitmap at 4 KiB (one block), the log
//! of degraded writes from `LOG_OFFSET`, data from `DATA_OFFSET`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::layout::{Layout, Level};

pub const SUPER_OFFSET: u64 = 0;
pub const BITMAP_OFFSET: u64 = 4096;
pub const META_BLOCK: usize = 4096;
/// Where data starts on a member.
pub const DATA_OFFSET: u64 = 4 << 20;
/// The log of degraded writes: `LOG_SLOTS` slots of `LOG_SLOT` bytes from here.
pub const LOG_OFFSET: u64 = 64 << 10;
/// Rows one record carries at most: a degraded write of more is done in windows of this.
pub const LOG_WINDOW: u64 = 64 << 10;
/// A record: a header block, and the rows of at most two lost strips.
pub const LOG_SLOT: u64 = META_BLOCK as u64 + 2 * LOG_WINDOW;
pub const LOG_SLOTS: usize = ((DATA_OFFSET - LOG_OFFSET) / LOG_SLOT) as usize;

const SUPER_MAGIC: &str = "fabrik-volume-1";
const BITMAP_MAGIC: u64 = 0x7061_6d74_6962_6b66; // "fkbitmap", little-endian
const BITMAP_HEADER: usize = 32;
const RECORD_MAGIC: u64 = 0x6365_7267_6f6c_6b66; // "fklogrec", little-endian
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

/// The bitmap as one block, with the log's tail: records of a lower sequence number are done.
pub fn encode_bitmap(region_stripes: u64, bits: &[u64], tail: u64) -> Bytes {
    let mut block = vec![0u8; META_BLOCK];
    block[0..8].copy_from_slice(&BITMAP_MAGIC.to_le_bytes());
    block[8..16].copy_from_slice(&region_stripes.to_le_bytes());
    block[16..24].copy_from_slice(&(bits.len() as u64 * 64).to_le_bytes());
    block[24..32].copy_from_slice(&tail.to_le_bytes());
    for (i, w) in bits.iter().enumerate() {
        block[BITMAP_HEADER + i * 8..][..8].copy_from_slice(&w.to_le_bytes());
    }
    Bytes::from(block)
}

/// The dirty bits of a bitmap block made for `region_stripes`, and the log's tail; None if it
/// holds no bitmap (or one of another geometry).
pub fn decode_bitmap(block: &[u8], region_stripes: u64, words: usize) -> Option<(Vec<u64>, u64)> {
    let word = |i: usize| u64::from_le_bytes(block[i..i + 8].try_into().unwrap());
    if block.len() < META_BLOCK || word(0) != BITMAP_MAGIC || word(8) != region_stripes {
        return None;
    }
    let bits = (0..words).map(|i| word(BITMAP_HEADER + i * 8)).collect();
    Some((bits, word(24)))
}

/// A log record: the rows `r0..r0 + rows` of the lost data strips `lost` of `stripe`, as a
/// degraded write made them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub generation: u64,
    pub seq: u64,
    pub stripe: u64,
    pub r0: u64,
    pub rows: u64,
    pub lost: Vec<usize>,
    /// `lost.len()` runs of `rows` bytes.
    pub data: Vec<u8>,
}

/// Where log slot `slot` lies on a member.
pub fn slot_offset(slot: usize) -> u64 {
    LOG_OFFSET + slot as u64 * LOG_SLOT
}

/// A volume's tag on its records (FNV-1a of its UUID): another volume's are not taken.
pub fn uuid_tag(uuid: &str) -> u64 {
    uuid.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

impl Record {
    /// The header block and the rows, padded to whole blocks.
    pub fn encode(&self, tag: u64) -> Bytes {
        assert!(self.lost.len() <= 2 && self.data.len() as u64 <= 2 * LOG_WINDOW);
        let payload = self.data.len().next_multiple_of(META_BLOCK);
        let mut out = vec![0u8; META_BLOCK + payload];
        let lost = |i: usize| self.lost.get(i).map_or(u64::MAX, |&l| l as u64);
        let fields = [
            RECORD_MAGIC,
            tag,
            self.generation,
            self.seq,
            self.stripe,
            self.r0,
            self.rows,
            self.lost.len() as u64,
            lost(0),
            lost(1),
            u64::from(crc32c::crc32c(&self.data)),
        ];
        for (i, f) in fields.iter().enumerate() {
            out[i * 8..i * 8 + 8].copy_from_slice(&f.to_le_bytes());
        }
        let crc = crc32c::crc32c(&out[..fields.len() * 8]);
        out[fields.len() * 8..fields.len() * 8 + 4].copy_from_slice(&crc.to_le_bytes());
        out[META_BLOCK..META_BLOCK + self.data.len()].copy_from_slice(&self.data);
        Bytes::from(out)
    }

    /// The record in a slot, if it holds a whole one of volume `tag`.
    pub fn decode(slot: &[u8], tag: u64) -> Option<Record> {
        if slot.len() < META_BLOCK {
            return None;
        }
        let word = |i: usize| u64::from_le_bytes(slot[i * 8..i * 8 + 8].try_into().unwrap());
        if word(0) != RECORD_MAGIC || word(1) != tag {
            return None;
        }
        let crc = u32::from_le_bytes(slot[88..92].try_into().unwrap());
        if crc32c::crc32c(&slot[..88]) != crc {
            return None;
        }
        let (rows, nlost) = (word(6), word(7) as usize);
        let len = (rows as usize).checked_mul(nlost)?;
        if nlost > 2 || rows > LOG_WINDOW || slot.len() < META_BLOCK + len {
            return None;
        }
        let data = slot[META_BLOCK..META_BLOCK + len].to_vec();
        if u64::from(crc32c::crc32c(&data)) != word(10) {
            return None;
        }
        Some(Record {
            generation: word(2),
            seq: word(3),
            stripe: word(4),
            r0: word(5),
            rows,
            lost: (0..nlost).map(|i| word(8 + i) as usize).collect(),
            data,
        })
    }
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
    pub fn new(layout: &Layout) -> Intent {
        let region_stripes = region_stripes(layout);
        let regions = layout.stripes.div_ceil(region_stripes) as usize;
        let words = regions.div_ceil(64);
        Intent {
            region_stripes,
            regions,
            bits: Mutex::new(Bits {
                wanted: vec![0; words],
                on_disk: vec![0; words],
                inflight: vec![0; regions],
                begun: vec![0; regions],
            }),
            persist: tokio::sync::Mutex::new(()),
            writes: AtomicU64::new(0),
        }
    }

    /// Takes the bits a member's bitmap block holds (at assembly: they are set there).
    pub fn restore(&self, dirty: &[u64]) {
        let mut b = self.bits.lock().unwrap();
        let Bits {
            wanted, on_disk, ..
        } = &mut *b;
        for ((w, o), d) in wanted.iter_mut().zip(on_disk.iter_mut()).zip(dirty) {
            *w |= d;
            *o |= d;
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
        let block = encode_bitmap(3, &bits, 77);
        assert_eq!(decode_bitmap(&block, 3, 2), Some((bits, 77)));
        assert_eq!(decode_bitmap(&block, 4, 2), None, "another geometry");
        let r = Record {
            generation: 3,
            seq: 9,
            stripe: 12,
            r0: 4096,
            rows: 8192,
            lost: vec![1, 3],
            data: (0..16384).map(|i| i as u8).collect(),
        };
        let mut slot = r.encode(uuid_tag("u")).to_vec();
        assert!(slot.len() as u64 <= LOG_SLOT);
        assert_eq!(Record::decode(&slot, uuid_tag("u")), Some(r.clone()));
        assert_eq!(
            Record::decode(&slot, uuid_tag("v")),
            None,
            "another volume's"
        );
        slot[META_BLOCK + 5] ^= 1;
        assert_eq!(Record::decode(&slot, uuid_tag("u")), None, "torn payload");
        assert!(LOG_SLOTS >= 16 && slot_offset(LOG_SLOTS) <= DATA_OFFSET);
    }

    #[test]
    fn a_region_is_cleaned_only_when_no_write_came_since_the_flush() {
        let l = layout();
        let intent = Intent::new(&l);
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
