//! A queue's data buffers: fixed-size chunks of its registered memory, taken as contiguous runs,
//! so that one transfer is one piece of memory (one SGE, one RDMA READ or WRITE) and the data
//! an RDMA READ brought in can go to the drive as it lies (`Bytes` over the run, no copy).
//!
//! The queue's task takes runs; they come back from wherever their last reference drops (a
//! write's data may be dropped on a drive's I/O thread), so the map of free chunks is a few
//! atomic words: no lock, nothing allocated per command.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use fabrik_rdma::Memory;

use crate::backend::{Lender, ReadBuf};

/// Chunks of one run are found within one word of the map.
const WORD: u32 = 64;

/// Contiguous chunks `first..first + n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    pub first: u32,
    pub n: u32,
}

pub struct Pool {
    /// One bit per chunk, set while taken; the bits past the last chunk are set for ever.
    taken: Box<[AtomicU64]>,
    /// The chunks lie here (registered by the queue pair's region).
    memory: Arc<Memory>,
    chunk: usize,
    /// Where chunk 0 starts in the memory.
    base: usize,
}

impl Pool {
    /// `chunks` chunks of `chunk` bytes of `memory`, from `base` on.
    pub fn new(memory: Arc<Memory>, chunks: u32, chunk: usize, base: usize) -> Pool {
        assert!(
            base + chunks as usize * chunk <= memory.len(),
            "the pool fits its memory"
        );
        let words = chunks.div_ceil(WORD);
        let taken = (0..words)
            .map(|w| {
                let in_word = (chunks - w * WORD).min(WORD);
                AtomicU64::new(if in_word == WORD { 0 } else { !0 << in_word })
            })
            .collect();
        Pool {
            taken,
            memory,
            chunk,
            base,
        }
    }

    /// Chunks a transfer of `len` bytes needs.
    pub fn chunks_for(&self, len: usize) -> u32 {
        len.div_ceil(self.chunk) as u32
    }

    /// Where `run` starts in the memory.
    pub fn offset(&self, run: Run) -> usize {
        self.base + run.first as usize * self.chunk
    }

    /// The first `len` bytes of `run`, to fill.
    ///
    /// # Safety
    /// The run is the caller's (taken, not given back) and no work request uses it yet.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice_mut(&self, run: Run, len: usize) -> &mut [u8] {
        assert!(len <= run.n as usize * self.chunk);
        self.memory.slice_mut(self.offset(run), len)
    }

    /// Takes `n` contiguous chunks (1..=64), or None while no such run is free.
    pub fn take(&self, n: u32) -> Option<Run> {
        assert!((1..=WORD).contains(&n), "a run is 1 to 64 chunks");
        for (w, word) in self.taken.iter().enumerate() {
            let mut cur = word.load(Ordering::Acquire);
            loop {
                // Bit s of `starts`: chunks s..s+n of this word are all free.
                let free = !cur;
                let mut starts = free;
                for i in 1..n {
                    starts &= free >> i;
                }
                if starts == 0 {
                    break;
                }
                let shift = starts.trailing_zeros();
                let bits = mask(n) << shift;
                match word.compare_exchange_weak(
                    cur,
                    cur | bits,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => {
                        return Some(Run {
                            first: w as u32 * WORD + shift,
                            n,
                        })
                    }
                    // A run came back meanwhile: look again.
                    Err(now) => cur = now,
                }
            }
        }
        None
    }

    /// Gives `run` back.
    pub fn give(&self, run: Run) {
        let (w, shift) = (run.first / WORD, run.first % WORD);
        let bits = mask(run.n) << shift;
        let was = self.taken[w as usize].fetch_and(!bits, Ordering::AcqRel);
        debug_assert_eq!(was & bits, bits, "{run:?} given back twice");
    }

    /// Chunks free now.
    #[cfg(test)]
    fn free(&self) -> u32 {
        self.taken
            .iter()
            .map(|w| w.load(Ordering::Acquire).count_zeros())
            .sum()
    }
}

fn mask(n: u32) -> u64 {
    if n >= WORD {
        !0
    } else {
        (1 << n) - 1
    }
}

impl Run {
    fn piece(self) -> u64 {
        u64::from(self.first) << 32 | u64::from(self.n)
    }

    fn of_piece(piece: u64) -> Run {
        Run {
            first: (piece >> 32) as u32,
            n: piece as u32,
        }
    }
}

impl Pool {
    /// `run`, lent for a drive to read `len` bytes into (`Drive::read_into`): the data stays
    /// where it lies, and the run comes back when the data goes.
    ///
    /// # Safety
    /// `run` was taken from this pool and no work request uses it until it comes back.
    pub unsafe fn lend_for_read(self: &Arc<Pool>, run: Run, len: usize) -> ReadBuf {
        assert!(len <= run.n as usize * self.chunk);
        let ptr = self.memory.ptr(self.offset(run));
        // SAFETY: the run is the caller's alone (above) and the memory lives as long as the
        // pool, which the buffer holds; the run comes back through `Lender`.
        unsafe { ReadBuf::new(ptr, len, self.clone(), run.piece()) }
    }

    /// Where `data` lies in this pool's memory, if it is a lease of it.
    pub fn offset_of(&self, data: &[u8]) -> Option<usize> {
        self.memory
            .offset_of(data.as_ptr())
            .filter(|&off| off >= self.base)
    }
}

impl Lender for Pool {
    fn lend(self: Arc<Self>, piece: u64, len: usize) -> Bytes {
        // SAFETY: the piece is a run of this pool that a read filled; nothing writes it now.
        unsafe { Lease::into_bytes(self, Run::of_piece(piece), len) }
    }

    fn give_back(&self, piece: u64) {
        self.give(Run::of_piece(piece));
    }
}

/// The first `len` bytes of a run, handed on as `Bytes`: the run comes back to the pool when the
/// last reference drops, and the memory stays while any does.
pub struct Lease {
    pool: Arc<Pool>,
    run: Run,
    len: usize,
}

impl Lease {
    /// # Safety
    /// `run` was taken from `pool`, and its first `len` bytes hold data no work request writes
    /// any more (the RDMA READ completed): from here on they are only read, until the run comes
    /// back.
    pub unsafe fn into_bytes(pool: Arc<Pool>, run: Run, len: usize) -> Bytes {
        assert!(len <= run.n as usize * pool.chunk);
        Bytes::from_owner(Lease { pool, run, len })
    }
}

impl AsRef<[u8]> for Lease {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: the run is this lease's until it drops (see `into_bytes`), within the memory.
        unsafe { self.pool.memory.slice(self.pool.offset(self.run), self.len) }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.pool.give(self.run);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory(len: usize) -> Arc<Memory> {
        Arc::new(Memory::zeroed(len).unwrap())
    }

    #[test]
    #[should_panic(expected = "fits its memory")]
    fn a_pool_larger_than_its_memory_is_refused() {
        Pool::new(memory(4096), 2, 4096, 0);
    }

    #[test]
    fn runs_are_contiguous_disjoint_and_come_back() {
        let pool = Pool::new(memory(512 + 100 * 4096), 100, 4096, 512);
        assert_eq!(pool.free(), 100);
        let a = pool.take(32).unwrap();
        let b = pool.take(32).unwrap();
        assert_eq!((a.first, b.first), (0, 32));
        // 36 chunks in the second word: a run of 40 fits nowhere.
        assert_eq!(pool.take(40), None);
        let c = pool.take(36).unwrap();
        assert_eq!(c.first, 64);
        assert_eq!(pool.take(1), None, "all 100 taken");
        pool.give(a);
        assert_eq!(pool.take(33), None, "32 free, in one place");
        let d = pool.take(8).unwrap();
        assert_eq!(d.first, 0);
        assert_eq!(pool.offset(d), 512);
        assert_eq!(pool.offset(Run { first: 3, n: 1 }), 512 + 3 * 4096);
        for r in [b, c, d] {
            pool.give(r);
        }
        assert_eq!(pool.free(), 100);
        assert_eq!(pool.take(64).unwrap().first, 0);
        assert_eq!(pool.chunks_for(1), 1);
        assert_eq!(pool.chunks_for(4096), 1);
        assert_eq!(pool.chunks_for(4097), 2);
    }

    #[test]
    fn a_lease_is_the_run_in_place_and_gives_it_back_when_its_last_bytes_go() {
        let memory = memory(8192);
        let pool = Arc::new(Pool::new(memory.clone(), 4, 1024, 4096));
        let run = pool.take(2).unwrap();
        // SAFETY: the run is ours and nothing else uses the memory.
        unsafe { pool.slice_mut(run, 2048) }.fill(7);
        // SAFETY: as above; from here on only read.
        let bytes = unsafe { Lease::into_bytes(pool.clone(), run, 1500) };
        assert_eq!(bytes.len(), 1500);
        assert!(bytes.iter().all(|&b| b == 7));
        // SAFETY: only read.
        let start = unsafe { memory.slice(pool.offset(run), 1) }.as_ptr();
        assert_eq!(bytes.as_ptr(), start, "no copy");
        let part = bytes.slice(100..200);
        drop(bytes);
        assert_eq!(pool.free(), 2, "a part still holds the run");
        drop(part);
        assert_eq!(pool.free(), 4);
    }

    #[test]
    fn a_run_lent_for_a_read_is_the_data_in_place_and_comes_back() {
        let memory = memory(8192);
        let pool = Arc::new(Pool::new(memory.clone(), 4, 1024, 4096));
        let run = pool.take(3).unwrap();
        // SAFETY: just taken, used by nothing else.
        let mut buf = unsafe { pool.lend_for_read(run, 2500) };
        buf.as_mut_slice().fill(9);
        let data = buf.filled();
        assert_eq!(pool.offset_of(&data), Some(pool.offset(run)));
        assert_eq!(pool.offset_of(&data[100..]), Some(pool.offset(run) + 100));
        assert!(data.iter().all(|&b| b == 9) && data.len() == 2500);
        assert_eq!(pool.free(), 1);
        drop(data);
        assert_eq!(pool.free(), 4);
        // Memory elsewhere, or before the pool in the same region, is not the pool's.
        assert_eq!(pool.offset_of(&[0u8; 16]), None);
        // SAFETY: only read; nothing writes the region's first page.
        assert_eq!(pool.offset_of(unsafe { memory.slice(0, 8) }), None);
        // A buffer never filled gives its run back too.
        let run = pool.take(4).unwrap();
        // SAFETY: just taken.
        drop(unsafe { pool.lend_for_read(run, 4096) });
        assert_eq!(pool.free(), 4);
    }

    #[test]
    fn runs_given_back_from_other_threads_are_taken_again() {
        let pool = Arc::new(Pool::new(memory(128 * 64), 128, 64, 0));
        let (tx, rx) = std::sync::mpsc::channel::<Run>();
        let giver = {
            let pool = pool.clone();
            std::thread::spawn(move || {
                for run in rx {
                    pool.give(run);
                }
            })
        };
        let mut taken = 0u32;
        while taken < 20_000 {
            let n = taken % 7 + 1;
            if let Some(run) = pool.take(n) {
                assert!(run.first % WORD + n <= WORD, "within one word");
                tx.send(run).unwrap();
                taken += 1;
            }
        }
        drop(tx);
        giver.join().unwrap();
        assert_eq!(pool.free(), 128);
    }
}
