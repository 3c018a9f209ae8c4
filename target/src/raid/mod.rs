//! Protected volumes: RAID 0, 1, 10, 5 and 6 over the box's drives, each a `Drive` that a
//! namespace serves like any other.
//!
//! - `gf`: parity (P, Q over GF(2^8)) and recovery of one or two lost strips;
//! - `layout`: where a volume's bytes lie on its members;
//! - `meta`: the superblock, write-intent bitmap and log on each member (the write hole);
//! - `log`: the log of degraded writes and its replay;
//! - `volume`: members and their states, reads (degraded ones rebuilt from the stripe);
//! - `write`: full-stripe, read-modify-write and degraded writes, zeroing;
//! - `rebuild`: the background work: rebuilding a spare, scrubbing, resync after a crash.

pub mod gf;
pub mod layout;
mod log;
pub mod meta;
pub mod rebuild;
pub mod volume;
mod write;

pub use layout::{Layout, Level};
pub use volume::{MemberSpec, Volume};

#[cfg(test)]
mod tests;
