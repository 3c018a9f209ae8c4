//! Verify-mode block contents: every logical block carries a header naming the drive, its LBA
//! and the run's seed, then bytes derived from all three. A block read back is checked against
//! what that LBA must hold, so a stale, misplaced (wrong LBA or drive) or corrupted block is
//! caught and named.

/// First bytes of every verify-mode block.
pub const MAGIC: [u8; 8] = *b"FABRIKv1";
/// Magic, seed, drive tag, LBA.
const HEADER_LEN: usize = 8 + 8 + 4 + 8;

/// A short fingerprint of a drive (its subsystem NQN and NSID), stored in each block so a block
/// written to the wrong drive is caught.
pub fn drive_tag(subnqn: &str, nsid: u32) -> u32 {
    // FNV-1a: stable across builds and machines, which a std hasher is not.
    let mut hash: u32 = 0x811c_9dc5;
    for byte in subnqn.bytes().chain(nsid.to_le_bytes()) {
        hash ^= byte as u32;
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

/// Fills `buf` (a whole number of `lba_size` blocks starting at `slba`) with the pattern.
pub fn fill(buf: &mut [u8], lba_size: usize, slba: u64, tag: u32, seed: u64) {
    for (i, block) in buf.chunks_mut(lba_size).enumerate() {
        let lba = slba + i as u64;
        block[0..8].copy_from_slice(&MAGIC);
        block[8..16].copy_from_slice(&seed.to_le_bytes());
        block[16..20].copy_from_slice(&tag.to_le_bytes());
        block[20..28].copy_from_slice(&lba.to_le_bytes());
        fill_payload(&mut block[HEADER_LEN..], payload_seed(seed, tag, lba));
    }
}

/// What is wrong with one block read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch {
    /// No verify header: never written by a verify run, or overwritten by something else.
    NoHeader,
    /// Written by a run with another seed.
    Seed { found: u64 },
    /// Written for another drive.
    Drive { found: u32 },
    /// Written for another LBA (a misdirected write or read).
    Lba { found: u64 },
    /// The header is right but the data after it differs from byte `offset` of the block on.
    Payload { offset: usize },
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mismatch::NoHeader => write!(f, "no verify header (never written by a verify run?)"),
            Mismatch::Seed { found } => write!(f, "written with seed {found:#x}, not this run's"),
            Mismatch::Drive { found } => {
                write!(f, "holds a block of another drive (tag {found:#010x})")
            }
            Mismatch::Lba { found } => write!(f, "holds the block of LBA {found}"),
            Mismatch::Payload { offset } => {
                write!(f, "data differs from byte {offset} of the block on")
            }
        }
    }
}

/// Checks the blocks in `buf` (read from `slba`); returns each bad block's LBA and what is wrong.
pub fn check(buf: &[u8], lba_size: usize, slba: u64, tag: u32, seed: u64) -> Vec<(u64, Mismatch)> {
    let mut bad = Vec::new();
    let mut expected = vec![0u8; lba_size.saturating_sub(HEADER_LEN)];
    for (i, block) in buf.chunks(lba_size).enumerate() {
        let lba = slba + i as u64;
        if let Some(mismatch) = check_block(block, lba, tag, seed, &mut expected) {
            bad.push((lba, mismatch));
        }
    }
    bad
}

fn check_block(
    block: &[u8],
    lba: u64,
    tag: u32,
    seed: u64,
    expected: &mut [u8],
) -> Option<Mismatch> {
    let u64_at = |at: usize| u64::from_le_bytes(block[at..at + 8].try_into().unwrap());
    if block.len() < HEADER_LEN || block[0..8] != MAGIC {
        return Some(Mismatch::NoHeader);
    }
    let found_seed = u64_at(8);
    if found_seed != seed {
        return Some(Mismatch::Seed { found: found_seed });
    }
    let found_tag = u32::from_le_bytes(block[16..20].try_into().unwrap());
    if found_tag != tag {
        return Some(Mismatch::Drive { found: found_tag });
    }
    let found_lba = u64_at(20);
    if found_lba != lba {
        return Some(Mismatch::Lba { found: found_lba });
    }
    let payload = &block[HEADER_LEN..];
    let expected = &mut expected[..payload.len()];
    fill_payload(expected, payload_seed(seed, tag, lba));
    payload
        .iter()
        .zip(expected.iter())
        .position(|(a, b)| a != b)
        .map(|i| Mismatch::Payload {
            offset: HEADER_LEN + i,
        })
}

fn payload_seed(seed: u64, tag: u32, lba: u64) -> u64 {
    seed ^ (tag as u64).rotate_left(32) ^ lba.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// xorshift64* bytes.
fn fill_payload(out: &mut [u8], seed: u64) {
    let mut state = seed | 1;
    for chunk in out.chunks_mut(8) {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        let word = state.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
        chunk.copy_from_slice(&word[..chunk.len()]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_blocks_check_clean_and_damage_is_named() {
        let tag = drive_tag("nqn.2024-01.io.fabrik:box:drive-00", 1);
        let mut buf = vec![0u8; 4 * 512];
        fill(&mut buf, 512, 100, tag, 7);
        assert!(check(&buf, 512, 100, tag, 7).is_empty());

        assert_eq!(
            check(&buf, 512, 100, tag, 8)[0],
            (100, Mismatch::Seed { found: 7 })
        );
        assert_eq!(
            check(&buf, 512, 101, tag, 7)[0],
            (101, Mismatch::Lba { found: 100 })
        );
        assert_eq!(check(&buf, 512, 100, tag ^ 1, 7).len(), 4);

        let mut damaged = buf.clone();
        damaged[2 * 512 + 300] ^= 0x40;
        assert_eq!(
            check(&damaged, 512, 100, tag, 7),
            vec![(102, Mismatch::Payload { offset: 300 })]
        );
        assert_eq!(
            check(&[0u8; 512], 512, 0, tag, 7),
            vec![(0, Mismatch::NoHeader)]
        );
    }

    #[test]
    fn tags_differ_per_drive() {
        assert_ne!(drive_tag("a", 1), drive_tag("a", 2));
        assert_ne!(drive_tag("a", 1), drive_tag("b", 1));
    }
}
