//! Peer memory: caller memory that an NVMe/RDMA command's keyed SGL names directly, so the
//! target's RDMA WRITE (reads) lands in it and its RDMA READ (writes) takes from it, with no
//! copy through the queue's own buffer (GPUDirect RDMA when the memory is a GPU's).
//!
//! Queues register such memory on their protection domain once per allocation
//! (`RdmaQueue::register`): by dma-buf when the memory exports one, else by pointer.

use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::HostError;

/// Memory an RDMA NIC can reach directly: a GPU allocation (exported as a dma-buf, or
/// registrable by pointer where nvidia-peermem is loaded), or host memory.
pub trait PeerMemory: Send + Sync {
    /// Unique per allocation for the life of the process (registrations are cached by it).
    /// `unique_id` hands out such ids.
    fn id(&self) -> u64;
    /// The allocation's base address, as SGLs name it (the device virtual address).
    fn addr(&self) -> u64;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Exports the whole allocation as a dma-buf file descriptor (None: this memory has no
    /// dma-buf export; Some(Err(why)) export failed).
    fn export_dmabuf(&self) -> Option<Result<std::os::fd::OwnedFd, String>>;
    /// Whether `ibv_reg_mr` on `addr()` may work (host memory; GPU memory with nvidia-peermem
    /// loaded).
    fn pointer_registrable(&self) -> bool;
}

/// How a registration was made (reported to users: which path ran and why).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Registration {
    DmaBuf,
    Pointer,
}

impl std::fmt::Display for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Registration::DmaBuf => "dma-buf",
            Registration::Pointer => "pointer",
        })
    }
}

/// A fresh `PeerMemory::id`, never handed out before in this process.
pub fn unique_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Checks that `len` bytes at `offset` lie inside `mem` (and that there are some), at
/// addresses that exist.
pub fn check_range(mem: &dyn PeerMemory, offset: usize, len: usize) -> Result<(), HostError> {
    if len == 0 {
        return Err(HostError::Invalid(
            "a peer-memory transfer of 0 bytes".into(),
        ));
    }
    let end = offset.checked_add(len).filter(|&end| end <= mem.len());
    let Some(end) = end else {
        return Err(HostError::Invalid(format!(
            "{len} bytes at offset {offset} do not fit in the {}-byte peer-memory allocation",
            mem.len()
        )));
    };
    if mem.addr().checked_add(end as u64).is_none() {
        return Err(HostError::Invalid(format!(
            "peer memory at {:#x} of {} bytes runs past the end of the address space",
            mem.addr(),
            mem.len()
        )));
    }
    Ok(())
}

/// Page-aligned, zeroed host memory as peer memory (registered by pointer): for tests, and for
/// running the zero-copy path on NICs without a GPU beside them (Soft-RoCE).
pub struct HostMemory {
    ptr: NonNull<u8>,
    layout: Layout,
    len: usize,
    id: u64,
}

// SAFETY: the allocation is owned by this value and only touched through raw copies
// (`read_at`, `write_at`) or by the NIC; no references into it are handed out.
unsafe impl Send for HostMemory {}
// SAFETY: as above.
unsafe impl Sync for HostMemory {}

impl HostMemory {
    /// Allocates `len` zeroed bytes, page-aligned.
    pub fn new(len: usize) -> Result<HostMemory, HostError> {
        let layout = Layout::from_size_align(len.max(1), 4096)
            .map_err(|e| HostError::Invalid(format!("host memory of {len} bytes: {e}")))?;
        // SAFETY: the layout's size is not zero.
        let ptr = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) }).ok_or_else(|| {
            HostError::Invalid(format!("host memory of {len} bytes: out of memory"))
        })?;
        Ok(HostMemory {
            ptr,
            layout,
            len,
            id: unique_id(),
        })
    }

    /// Copies `buf.len()` bytes at `offset` out. The bytes of a range a transfer is writing are
    /// unspecified until its command completes.
    pub fn read_at(&self, offset: usize, buf: &mut [u8]) -> Result<(), HostError> {
        self.check(offset, buf.len())?;
        // SAFETY: in bounds (checked); raw copy, no reference into the allocation.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.ptr.as_ptr().add(offset),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        Ok(())
    }

    /// Copies `data` in at `offset`.
    pub fn write_at(&self, offset: usize, data: &[u8]) -> Result<(), HostError> {
        self.check(offset, data.len())?;
        // SAFETY: in bounds (checked); raw copy, no reference into the allocation.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(offset), data.len())
        };
        Ok(())
    }

    fn check(&self, offset: usize, len: usize) -> Result<(), HostError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(HostError::Invalid(format!(
                "{len} bytes at offset {offset} do not fit in {} bytes of host memory",
                self.len
            ))),
        }
    }
}

impl PeerMemory for HostMemory {
    fn id(&self) -> u64 {
        self.id
    }
    fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }
    fn len(&self) -> usize {
        self.len
    }
    fn export_dmabuf(&self) -> Option<Result<std::os::fd::OwnedFd, String>> {
        None
    }
    fn pointer_registrable(&self) -> bool {
        true
    }
}

impl Drop for HostMemory {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout. Queues holding a registration keep the
        // memory alive (an Arc) while any command uses it.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_outside_the_allocation_are_refused() {
        let mem = HostMemory::new(8192).unwrap();
        assert!(check_range(&mem, 0, 8192).is_ok());
        assert!(check_range(&mem, 4096, 4096).is_ok());
        for (offset, len) in [(4096, 4097), (8192, 1), (0, 0), (usize::MAX, 2)] {
            let err = check_range(&mem, offset, len).unwrap_err();
            assert!(
                matches!(err, HostError::Invalid(_)),
                "{offset}+{len}: {err}"
            );
        }
    }

    #[test]
    fn ranges_past_the_end_of_the_address_space_are_refused() {
        struct AtTheTop;
        impl PeerMemory for AtTheTop {
            fn id(&self) -> u64 {
                1
            }
            fn addr(&self) -> u64 {
                u64::MAX - 4095
            }
            fn len(&self) -> usize {
                8192
            }
            fn export_dmabuf(&self) -> Option<Result<std::os::fd::OwnedFd, String>> {
                None
            }
            fn pointer_registrable(&self) -> bool {
                true
            }
        }
        assert!(check_range(&AtTheTop, 0, 4095).is_ok());
        let err = check_range(&AtTheTop, 0, 4096).unwrap_err();
        assert!(err.to_string().contains("address space"), "{err}");
    }

    #[test]
    fn host_memory_round_trips_and_checks_bounds() {
        let a = HostMemory::new(4096).unwrap();
        let b = HostMemory::new(0).unwrap();
        assert_ne!(a.id(), b.id());
        assert_eq!(a.addr() % 4096, 0);
        assert!(a.pointer_registrable() && a.export_dmabuf().is_none());
        a.write_at(100, b"peer").unwrap();
        let mut got = [0u8; 6];
        a.read_at(99, &mut got).unwrap();
        assert_eq!(&got, b"\0peer\0");
        assert!(a.write_at(4093, b"peer").is_err());
        assert!(a.read_at(usize::MAX, &mut got).is_err());
        assert!(b.read_at(0, &mut [0u8; 1]).is_err());
        assert!(HostMemory::new(usize::MAX).is_err());
    }

    #[test]
    fn registration_names_the_path() {
        assert_eq!(Registration::DmaBuf.to_string(), "dma-buf");
        assert_eq!(Registration::Pointer.to_string(), "pointer");
    }
}
