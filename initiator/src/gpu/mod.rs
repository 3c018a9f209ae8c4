//! GPU memory as a place for NVMe data: reads land in it, writes take from it.
//!
//! Two paths, chosen per queue and reported (`DataPath`):
//! - **peer-to-peer** (GPUDirect RDMA): the GPU allocation is registered on the protection
//!   domain of the NVMe/RDMA queue's NIC (exported as a dma-buf, or by address where
//!   nvidia-peermem is loaded), and each command's keyed SGL names GPU memory: the target's
//!   RDMA WRITE lands in the GPU, its RDMA READ takes from it. No copy.
//! - **staged**: NVMe/TCP, or a NIC that cannot register GPU memory. Data goes through pinned
//!   host memory with asynchronous copies: `GpuMover` per transfer (a ring of pinned buffers,
//!   `staged`), or for many concurrent I/Os of one worker the `pipeline`s, which cross between
//!   host and GPU a multi-megabyte segment at a time.
//!
//! The GPU itself is behind `GpuDriver`: CUDA (`cuda`, loaded at run time) or an emulated GPU
//! over host memory (`emulated`, for tests and machines without a GPU). `extent` reads a file
//! striped over several drives into one buffer.

pub mod cuda;
pub mod driver;
pub mod emulated;
pub mod extent;
pub mod mover;
pub mod pipeline;
pub mod staged;

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use driver::{DevicePtr, GpuDriver, GpuError, GpuIdentity};
pub use mover::{DataPath, GpuMover};

use crate::transport::peer::PeerMemory;

/// Device allocations are rounded up to this: dma-buf export wants whole pages, and GPU pages
/// are 2 MiB.
const ALLOC_GRANULE: usize = 2 << 20;

/// An opened GPU.
#[derive(Clone)]
pub struct Gpu {
    driver: Arc<dyn GpuDriver>,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.identity())
    }
}

impl Gpu {
    /// Opens CUDA device `index`. Without the NVIDIA driver: `cuda::NO_DRIVER`.
    pub fn open(index: usize) -> Result<Gpu, GpuError> {
        Ok(Gpu::with_driver(Arc::new(cuda::CudaDriver::open(index)?)))
    }

    /// An emulated GPU over host memory (see `emulated`).
    pub fn emulated() -> Gpu {
        Gpu::with_driver(Arc::new(emulated::EmulatedGpu::default()))
    }

    pub fn with_driver(driver: Arc<dyn GpuDriver>) -> Gpu {
        Gpu { driver }
    }

    pub fn identity(&self) -> &GpuIdentity {
        self.driver.identity()
    }

    pub fn driver(&self) -> &Arc<dyn GpuDriver> {
        &self.driver
    }

    /// Allocates `len` bytes of device memory.
    pub fn alloc(&self, len: usize) -> Result<Arc<GpuBuffer>, GpuError> {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let allocated = len.max(1).next_multiple_of(ALLOC_GRANULE);
        let ptr = self.driver.alloc(allocated)?;
        Ok(Arc::new(GpuBuffer {
            driver: self.driver.clone(),
            ptr,
            len,
            allocated,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        }))
    }
}

/// Device memory: `len` bytes at `ptr` on one GPU. Freed when the last `Arc` goes.
pub struct GpuBuffer {
    driver: Arc<dyn GpuDriver>,
    ptr: DevicePtr,
    len: usize,
    allocated: usize,
    id: u64,
}

impl GpuBuffer {
    pub fn ptr(&self) -> DevicePtr {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn identity(&self) -> &GpuIdentity {
        self.driver.identity()
    }

    pub fn driver(&self) -> &Arc<dyn GpuDriver> {
        &self.driver
    }

    fn check_range(&self, offset: usize, len: usize) -> Result<(), GpuError> {
        if offset.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(GpuError(format!(
                "{len} bytes at offset {offset} do not fit in the {}-byte GPU buffer",
                self.len
            )));
        }
        Ok(())
    }

    /// Copies `data` into the buffer at `offset` and waits for it (setup and checks, not the
    /// data path).
    pub fn copy_from_host(&self, offset: usize, data: &[u8]) -> Result<(), GpuError> {
        self.check_range(offset, data.len())?;
        self.blocking_copy(|d, stream| {
            // SAFETY: `data` outlives the copy (we wait below); range checked.
            unsafe { d.copy_to_device(stream, self.ptr + offset as u64, data.as_ptr(), data.len()) }
        })
    }

    /// Copies `out.len()` bytes at `offset` out of the buffer and waits for it.
    pub fn copy_to_host(&self, offset: usize, out: &mut [u8]) -> Result<(), GpuError> {
        self.check_range(offset, out.len())?;
        let len = out.len();
        let dst = out.as_mut_ptr();
        self.blocking_copy(|d, stream| {
            // SAFETY: `out` outlives the copy (we wait below); range checked.
            unsafe { d.copy_to_host(stream, dst, self.ptr + offset as u64, len) }
        })
    }

    fn blocking_copy(
        &self,
        copy: impl FnOnce(&dyn GpuDriver, driver::Stream) -> Result<(), GpuError>,
    ) -> Result<(), GpuError> {
        let d = &*self.driver;
        let stream = d.new_stream()?;
        let result = copy(d, stream).and_then(|_| d.sync(stream));
        // SAFETY: synchronized (or nothing was queued).
        unsafe { d.destroy_stream(stream) };
        result
    }
}

impl Drop for GpuBuffer {
    fn drop(&mut self) {
        // SAFETY: the last reference: no mover or copy uses it, and only movers (which hold
        // the Arc) send commands naming it. A NIC registration left behind is dropped with its
        // queue or at that queue's next registration.
        unsafe { self.driver.free(self.ptr) };
    }
}

impl PeerMemory for GpuBuffer {
    fn id(&self) -> u64 {
        self.id
    }
    fn addr(&self) -> u64 {
        self.ptr
    }
    // A NIC registers the whole allocation (whole GPU pages), not only the `len` asked for.
    #[allow(clippy::misnamed_getters)]
    fn len(&self) -> usize {
        self.allocated
    }
    fn export_dmabuf(&self) -> Option<Result<OwnedFd, String>> {
        self.driver
            .export_dmabuf(self.ptr, self.allocated)
            .map(|r| r.map_err(|e| e.0))
    }
    fn pointer_registrable(&self) -> bool {
        self.driver.pointer_registrable()
    }
}
