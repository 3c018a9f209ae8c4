//! Memory regions over memory someone else owns: a GPU allocation exported as a dma-buf, or
//! any memory the NIC can pin by pointer (host memory; GPU memory with nvidia-peermem). The
//! peer RDMA-READs and RDMA-WRITEs it directly (GPUDirect RDMA): no copy through our buffers.

use std::io;
use std::os::fd::RawFd;

use rdma_mummy_sys as sys;

use crate::util::os_err;

/// An `ibv_mr` over memory this value does not own, open to the peer's RDMA READ and WRITE.
/// Dropping it deregisters the memory region (do it before the protection domain goes).
pub struct ForeignRegion {
    mr: *mut sys::ibv_mr,
}

// SAFETY: an ibv_mr is a thread-safe verbs object; this value only reads its keys and
// deregisters it once, on drop.
unsafe impl Send for ForeignRegion {}
// SAFETY: as above.
unsafe impl Sync for ForeignRegion {}

/// The access a peer-memory region gives: local writes (required with remote write) and the
/// target's RDMA READ (host writes) and RDMA WRITE (host reads).
fn access() -> i32 {
    (sys::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE
        | sys::ibv_access_flags::IBV_ACCESS_REMOTE_READ
        | sys::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE)
        .0 as i32
}

impl ForeignRegion {
    /// Registers `len` bytes at `offset` in the dma-buf `fd`, named `iova` in work requests
    /// and SGLs (`ibv_reg_dmabuf_mr`, rdma-core 34 and later). The fd may be closed afterwards:
    /// the region holds its own reference to the dma-buf.
    /// # Safety
    /// `pd` is a valid protection domain that outlives the region.
    pub unsafe fn register_dmabuf(
        pd: *mut sys::ibv_pd,
        fd: RawFd,
        offset: u64,
        len: usize,
        iova: u64,
    ) -> io::Result<ForeignRegion> {
        // A libibverbs without the symbol makes the raw layer fail with EOPNOTSUPP.
        let mr = sys::ibv_reg_dmabuf_mr(pd, offset, len, iova, fd, access());
        if mr.is_null() {
            return Err(os_err("ibv_reg_dmabuf_mr"));
        }
        Ok(ForeignRegion { mr })
    }

    /// Registers `len` bytes at virtual address `addr` (`ibv_reg_mr`; the kernel pins the
    /// pages, or nvidia-peermem does for GPU memory).
    /// # Safety
    /// `pd` is a valid protection domain that outlives the region, and the memory stays
    /// allocated while a peer may access it through the region.
    pub unsafe fn register_pointer(
        pd: *mut sys::ibv_pd,
        addr: u64,
        len: usize,
    ) -> io::Result<ForeignRegion> {
        let mr = sys::ibv_reg_mr(pd, addr as *mut libc::c_void, len, access());
        if mr.is_null() {
            return Err(os_err("ibv_reg_mr"));
        }
        Ok(ForeignRegion { mr })
    }

    pub fn lkey(&self) -> u32 {
        // SAFETY: mr is valid while self lives.
        unsafe { (*self.mr).lkey }
    }

    pub fn rkey(&self) -> u32 {
        // SAFETY: mr is valid while self lives.
        unsafe { (*self.mr).rkey }
    }
}

impl Drop for ForeignRegion {
    fn drop(&mut self) {
        // SAFETY: the MR is ours and deregistered once; its PD still exists (see the type).
        unsafe { sys::ibv_dereg_mr(self.mr) };
    }
}
