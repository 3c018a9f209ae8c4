//! Memory a read is received into in place that is not a `BytesMut` of its own: one slot of a
//! larger pinned staging arena (the GPU staged path copies many slots to the GPU in one go, so
//! the slots must be contiguous). The transport writes the data straight there.

use std::sync::Arc;

/// A block of memory that reads may be received into.
///
/// # Safety
/// `ptr()..ptr() + len()` is valid for reads and writes for as long as the value lives.
pub unsafe trait RawMemory: Send + Sync {
    fn ptr(&self) -> *mut u8;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `len` bytes at `offset` of `memory`: where one read's data lands. The `Arc` keeps the memory
/// alive while a command may still write it (a caller that stops waiting does not free it).
#[derive(Clone)]
pub struct RecvTarget {
    memory: Arc<dyn RawMemory>,
    offset: usize,
    len: usize,
}

impl RecvTarget {
    /// # Safety
    /// Nothing else reads or writes the range while a command receives into it, and the range
    /// lies within `memory` (checked: out of range panics).
    pub unsafe fn new(memory: Arc<dyn RawMemory>, offset: usize, len: usize) -> RecvTarget {
        assert!(
            offset
                .checked_add(len)
                .is_some_and(|end| end <= memory.len()),
            "receive target out of its memory"
        );
        RecvTarget {
            memory,
            offset,
            len,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The part `at..at + len` of this target (a command of a split transfer).
    pub fn part(&self, at: usize, len: usize) -> RecvTarget {
        assert!(at + len <= self.len, "part out of its receive target");
        RecvTarget {
            memory: self.memory.clone(),
            offset: self.offset + at,
            len,
        }
    }

    /// Start of the range.
    pub(crate) fn ptr(&self) -> *mut u8 {
        // SAFETY: within the memory (checked in `new`/`part`).
        unsafe { self.memory.ptr().add(self.offset) }
    }

    /// Copies `data` into the target at `at`.
    pub(crate) fn write_at(&self, at: usize, data: &[u8]) {
        assert!(at + data.len() <= self.len, "write past the receive target");
        // SAFETY: in range; the constructor's caller promised nobody else uses the range.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr().add(at), data.len()) };
    }

    /// The first `len` bytes (received so far).
    pub(crate) fn filled(&self, len: usize) -> &[u8] {
        assert!(len <= self.len);
        // SAFETY: in range; the data was written by this command's receive.
        unsafe { std::slice::from_raw_parts(self.ptr(), len) }
    }
}
