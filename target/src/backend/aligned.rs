//! Page-aligned I/O buffers for O_DIRECT, and a fixed pool of them that can be registered with
//! io_uring (IORING_REGISTER_BUFFERS) so the kernel pins their pages once instead of per I/O.

use std::alloc::{self, Layout};
use std::io;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

/// O_DIRECT transfers DMA straight to/from user memory, so the kernel requires the buffer
/// address to be aligned to the device's DMA alignment (at most the logical block size).
/// The page size covers every logical block size we accept (512..=4096) and lets the kernel
/// pin whole pages.
pub(crate) const ALIGN: usize = 4096;

/// A zero-initialised, `ALIGN`-aligned buffer with a length (`len <= capacity`).
pub(crate) struct AlignedBuf {
    ptr: NonNull<u8>,
    cap: usize,
    len: usize,
    owner: Owner,
}

enum Owner {
    /// Allocated for this buffer alone; freed on drop.
    Heap,
    /// A slot of a `BufPool`; returned to the pool on drop.
    Pool { pool: Arc<BufPool>, index: u16 },
}

// SAFETY: the buffer exclusively owns its memory (heap) or its pool slot (the pool hands a
// slot to one buffer at a time), so moving it across threads or sharing `&` is sound.
unsafe impl Send for AlignedBuf {}
unsafe impl Sync for AlignedBuf {}

fn layout(size: usize) -> io::Result<Layout> {
    let size = size.max(1).div_ceil(ALIGN) * ALIGN;
    Layout::from_size_align(size, ALIGN).map_err(|_| io::Error::from(io::ErrorKind::OutOfMemory))
}

/// Zeroed allocation; zeroing keeps every byte initialised, and for large sizes the allocator
/// gets fresh (already zero) pages from the kernel, so it costs little.
fn alloc_zeroed(layout: Layout) -> io::Result<NonNull<u8>> {
    // SAFETY: `layout` has a non-zero size.
    NonNull::new(unsafe { alloc::alloc_zeroed(layout) })
        .ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))
}

impl AlignedBuf {
    /// A heap buffer of `len` zero bytes.
    pub(crate) fn new(len: usize) -> io::Result<Self> {
        let layout = layout(len)?;
        let ptr = alloc_zeroed(layout)?;
        Ok(AlignedBuf {
            ptr,
            cap: layout.size(),
            len,
            owner: Owner::Heap,
        })
    }

    /// A buffer of `len` bytes, from `pool` when it has a free slot big enough.
    pub(crate) fn alloc(pool: Option<&Arc<BufPool>>, len: usize) -> io::Result<Self> {
        match pool.and_then(|p| p.take(len)) {
            Some(buf) => Ok(buf),
            None => Self::new(len),
        }
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` is valid for `cap >= len` initialised bytes, owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// The index of this buffer in `pool`'s registration, if it is one of `pool`'s slots.
    pub(crate) fn fixed_index(&self, pool: &Arc<BufPool>) -> Option<u16> {
        match &self.owner {
            Owner::Pool { pool: p, index } if Arc::ptr_eq(p, pool) => Some(*index),
            _ => None,
        }
    }
}

impl AsRef<[u8]> for AlignedBuf {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        match &self.owner {
            Owner::Heap => {
                if let Ok(layout) = layout(self.cap) {
                    // SAFETY: allocated in `new` with this very layout.
                    unsafe { alloc::dealloc(self.ptr.as_ptr(), layout) }
                }
            }
            Owner::Pool { pool, index } => pool.put(*index),
        }
    }
}

/// `count` buffers of `buf_size` bytes carved from one aligned allocation. Its memory lives
/// as long as the pool, which the io_uring thread keeps alive until the ring is gone, so the
/// kernel's registration never outlives it.
pub(crate) struct BufPool {
    base: NonNull<u8>,
    layout: Layout,
    buf_size: usize,
    free: Mutex<Vec<u16>>,
}

// SAFETY: the memory is only reached through `AlignedBuf`s, one per slot at a time.
unsafe impl Send for BufPool {}
unsafe impl Sync for BufPool {}

impl BufPool {
    pub(crate) fn new(count: u16, buf_size: usize) -> io::Result<Arc<Self>> {
        let buf_size = buf_size.div_ceil(ALIGN) * ALIGN;
        let total = buf_size
            .checked_mul(count as usize)
            .ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))?;
        let layout = layout(total)?;
        let base = alloc_zeroed(layout)?;
        let free = Mutex::new((0..count).rev().collect());
        Ok(Arc::new(BufPool {
            base,
            layout,
            buf_size,
            free,
        }))
    }

    /// One iovec per slot, in index order, for IORING_REGISTER_BUFFERS.
    pub(crate) fn iovecs(&self) -> Vec<libc::iovec> {
        let count = self.layout.size() / self.buf_size;
        (0..count)
            .map(|i| libc::iovec {
                // SAFETY: `i * buf_size` stays inside the allocation.
                iov_base: unsafe { self.base.as_ptr().add(i * self.buf_size) }.cast(),
                iov_len: self.buf_size,
            })
            .collect()
    }

    /// A free slot sized `len`, or `None` if `len` is too big or every slot is in use.
    pub(crate) fn take(self: &Arc<Self>, len: usize) -> Option<AlignedBuf> {
        if len > self.buf_size {
            return None;
        }
        let index = self.free.lock().unwrap_or_else(|e| e.into_inner()).pop()?;
        // SAFETY: slot `index` is inside the allocation and now owned by the new buffer.
        let ptr = unsafe { self.base.add(index as usize * self.buf_size) };
        let owner = Owner::Pool {
            pool: self.clone(),
            index,
        };
        Some(AlignedBuf {
            ptr,
            cap: self.buf_size,
            len,
            owner,
        })
    }

    fn put(&self, index: u16) {
        self.free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(index);
    }

    #[cfg(test)]
    pub(crate) fn free_count(&self) -> usize {
        self.free.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl Drop for BufPool {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with `self.layout`; no buffer is outstanding, since each
        // holds an `Arc` to the pool.
        unsafe { alloc::dealloc(self.base.as_ptr(), self.layout) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_and_zeroed() {
        for len in [0, 1, 512, 4096, 5000, 1 << 20] {
            let buf = AlignedBuf::new(len).unwrap();
            assert_eq!(buf.as_slice().as_ptr() as usize % ALIGN, 0);
            assert_eq!(buf.as_slice().len(), len);
            assert!(buf.as_slice().iter().all(|&b| b == 0));
        }
    }

    #[test]
    fn pool_hands_out_and_takes_back_slots() {
        let pool = BufPool::new(2, 8192).unwrap();
        let a = pool.take(4096).unwrap();
        let b = pool.take(8192).unwrap();
        assert!(pool.take(512).is_none(), "pool is empty");
        assert_eq!(pool.free_count(), 0);
        assert_ne!(a.as_slice().as_ptr(), b.as_slice().as_ptr());
        assert_eq!(a.as_slice().as_ptr() as usize % ALIGN, 0);
        assert!(a.fixed_index(&pool).is_some());
        let other = BufPool::new(1, 4096).unwrap();
        assert_eq!(
            a.fixed_index(&other),
            None,
            "index only valid for its own pool"
        );
        drop(a);
        assert_eq!(pool.free_count(), 1);
        // Falls back to the heap when the pool is empty or the I/O is too large.
        let c = AlignedBuf::alloc(Some(&pool), 4096).unwrap();
        let d = AlignedBuf::alloc(Some(&pool), 4096).unwrap();
        assert!(c.fixed_index(&pool).is_some());
        assert!(d.fixed_index(&pool).is_none());
        assert!(AlignedBuf::alloc(Some(&pool), 1 << 20)
            .unwrap()
            .fixed_index(&pool)
            .is_none());
        drop((b, c, d));
        assert_eq!(pool.free_count(), 2);
        assert_eq!(pool.iovecs().len(), 2);
    }
}
