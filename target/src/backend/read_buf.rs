//! Memory a read lands in when the caller has it ready: an NVMe/RDMA queue's registered buffer,
//! so that the bytes the drive reads are the bytes the RDMA WRITE sends, with no copy between
//! (`Drive::read_into`). The memory is lent: a `Lender` owns it, and has it back when the read
//! fails or when the last reference to the data it became drops.

use std::ptr::NonNull;
use std::sync::Arc;

use bytes::Bytes;

/// Who owns the memory of `ReadBuf`s: it names each piece it lends by a number of its own.
pub trait Lender: Send + Sync + 'static {
    /// The first `len` bytes of `piece`, filled, as `Bytes` that give the piece back when their
    /// last reference drops.
    fn lend(self: Arc<Self>, piece: u64, len: usize) -> Bytes;
    /// `piece` was not used after all.
    fn give_back(&self, piece: u64);
}

/// `len` writable bytes lent by a `Lender`, for one read to fill.
pub struct ReadBuf {
    ptr: NonNull<u8>,
    len: usize,
    piece: u64,
    /// None once the buffer became `Bytes`.
    lender: Option<Arc<dyn Lender>>,
}

// SAFETY: the buffer is the only user of its memory until it becomes `Bytes` (see `new`), so
// it may move to the thread that fills it.
unsafe impl Send for ReadBuf {}

impl ReadBuf {
    /// # Safety
    /// `ptr` points to `len` bytes of `lender`'s `piece` that stay allocated until the piece is
    /// given back, and that nothing else reads or writes until then, or until `filled` turns
    /// them into `Bytes`.
    pub unsafe fn new(ptr: NonNull<u8>, len: usize, lender: Arc<dyn Lender>, piece: u64) -> Self {
        ReadBuf {
            ptr,
            len,
            piece,
            lender: Some(lender),
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: as below, read only.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the memory is this buffer's alone and stays allocated (contract of `new`).
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Whether the memory starts at a multiple of `align` (O_DIRECT needs the block size).
    pub fn is_aligned_to(&self, align: usize) -> bool {
        (self.ptr.as_ptr() as usize).is_multiple_of(align)
    }

    /// The read filled the buffer: its bytes, still in the lender's memory.
    pub fn filled(mut self) -> Bytes {
        let lender = self.lender.take().expect("a buffer becomes Bytes once");
        lender.lend(self.piece, self.len)
    }
}

impl Drop for ReadBuf {
    fn drop(&mut self) {
        if let Some(lender) = &self.lender {
            lender.give_back(self.piece);
        }
    }
}

impl std::fmt::Debug for ReadBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadBuf")
            .field("len", &self.len)
            .field("piece", &self.piece)
            .finish()
    }
}

/// Test lender: pieces of a plain allocation, with a count of pieces out.
#[cfg(test)]
pub(crate) mod test_lender {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    use super::*;

    pub struct VecLender {
        memory: Mutex<Vec<(Box<[u8]>, usize)>>,
        pub out: AtomicUsize,
    }

    struct Piece(Arc<VecLender>, u64, usize);

    impl AsRef<[u8]> for Piece {
        fn as_ref(&self) -> &[u8] {
            let memory = self.0.memory.lock().unwrap();
            let (b, skip) = &memory[self.1 as usize];
            let p = &b[*skip..*skip + self.2];
            // SAFETY: the boxes never move or drop while the lender lives (this piece holds it).
            unsafe { std::slice::from_raw_parts(p.as_ptr(), p.len()) }
        }
    }

    impl Drop for Piece {
        fn drop(&mut self) {
            self.0.give_back(self.1);
        }
    }

    impl Lender for VecLender {
        fn lend(self: Arc<Self>, piece: u64, len: usize) -> Bytes {
            Bytes::from_owner(Piece(self, piece, len))
        }
        fn give_back(&self, _piece: u64) {
            self.out.fetch_sub(1, Ordering::SeqCst);
        }
    }

    impl VecLender {
        pub fn new() -> Arc<VecLender> {
            Arc::new(VecLender {
                memory: Mutex::new(Vec::new()),
                out: AtomicUsize::new(0),
            })
        }

        /// A new 4096-aligned piece of `len` bytes, filled with `fill`.
        pub fn buf(self: &Arc<Self>, len: usize, fill: u8) -> ReadBuf {
            let mut memory = self.memory.lock().unwrap();
            // Over-allocated to start on a page.
            let mut b = vec![fill; len + 4096].into_boxed_slice();
            let skip = b.as_ptr().align_offset(4096);
            let ptr = NonNull::new(b[skip..].as_mut_ptr()).unwrap();
            memory.push((b, skip));
            let piece = memory.len() as u64 - 1;
            drop(memory);
            self.out.fetch_add(1, Ordering::SeqCst);
            // SAFETY: the box stays in `memory` for the lender's life; the piece is only this.
            unsafe { ReadBuf::new(ptr, len, self.clone(), piece) }
        }
    }
}
