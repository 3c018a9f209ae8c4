//! What the GPU data paths need from a GPU driver, as one trait: device allocations, page-locked
//! host memory, streams of asynchronous copies, events, and the dma-buf export of an
//! allocation. `cuda` implements it over the CUDA driver API; `emulated` over host memory and a
//! copy thread per stream (tests, and machines without a GPU).
//!
//! Handles are plain integers (a CUDA stream or event pointer, a device address) so that
//! callers can keep them in `Send` structures and drivers stay object-safe.

use std::os::fd::OwnedFd;

/// A device address (CUdeviceptr).
pub type DevicePtr = u64;

/// A stream: copies on one stream run in order, streams run independently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stream(pub u64);

/// A marker recorded on a stream: done once every copy queued before it is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event(pub u64);

/// Which GPU this is, as the system and the placement topology name it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GpuIdentity {
    /// The driver's device index (CUDA ordinal).
    pub index: usize,
    pub name: String,
    /// PCI address, lower case ("0000:18:00.0"); empty when the driver gives none.
    pub pci_addr: String,
    /// NUMA node of the PCI device, when the system says.
    pub numa_node: Option<u32>,
    pub memory_bytes: u64,
}

impl std::fmt::Display for GpuIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GPU {} ({}", self.index, self.name)?;
        if !self.pci_addr.is_empty() {
            write!(f, ", {}", self.pci_addr)?;
        }
        if let Some(node) = self.numa_node {
            write!(f, ", NUMA {node}")?;
        }
        write!(f, ")")
    }
}

/// Why a GPU operation failed, in the driver's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct GpuError(pub String);

/// A GPU driver. Copies are asynchronous: `copy_*` queue work on a stream and return; an event
/// recorded after them says when they are done. Every method may be called from any thread.
pub trait GpuDriver: Send + Sync + 'static {
    fn identity(&self) -> &GpuIdentity;
    /// Allocates `len` bytes of device memory.
    fn alloc(&self, len: usize) -> Result<DevicePtr, GpuError>;
    /// # Safety
    /// `ptr` came from `alloc` and no copy or remote access uses it any more.
    unsafe fn free(&self, ptr: DevicePtr);
    /// Page-locks `len` bytes of host memory at `ptr`, so copies from and to it run
    /// asynchronously at full speed.
    /// # Safety
    /// The memory stays allocated until `unpin`.
    unsafe fn pin(&self, ptr: *mut u8, len: usize) -> Result<(), GpuError>;
    /// # Safety
    /// `ptr` was pinned, and no copy uses it.
    unsafe fn unpin(&self, ptr: *mut u8);
    fn new_stream(&self) -> Result<Stream, GpuError>;
    /// # Safety
    /// The stream has no work left (see `sync`).
    unsafe fn destroy_stream(&self, stream: Stream);
    /// Queues a copy of `len` bytes from host `src` to device `dst`.
    /// # Safety
    /// `src` stays valid and unchanged, `dst..dst+len` allocated, until the copy is done.
    unsafe fn copy_to_device(
        &self,
        stream: Stream,
        dst: DevicePtr,
        src: *const u8,
        len: usize,
    ) -> Result<(), GpuError>;
    /// Queues a copy of `len` bytes from device `src` to host `dst`.
    /// # Safety
    /// `dst` stays valid and untouched, `src..src+len` allocated, until the copy is done.
    unsafe fn copy_to_host(
        &self,
        stream: Stream,
        dst: *mut u8,
        src: DevicePtr,
        len: usize,
    ) -> Result<(), GpuError>;
    fn new_event(&self) -> Result<Event, GpuError>;
    /// # Safety
    /// Nobody waits on the event any more.
    unsafe fn destroy_event(&self, event: Event);
    /// Marks the current end of `stream`'s queued work with `event` (re-recording moves it).
    fn record(&self, event: Event, stream: Stream) -> Result<(), GpuError>;
    /// Whether the work before the event's last recording is done.
    fn is_done(&self, event: Event) -> Result<bool, GpuError>;
    /// Blocks until the event is done.
    fn wait(&self, event: Event) -> Result<(), GpuError>;
    /// Blocks until the stream's queued work is done.
    fn sync(&self, stream: Stream) -> Result<(), GpuError>;
    /// Exports `len` bytes of device memory at `ptr` (an allocation's start) as a dma-buf, for
    /// `ibv_reg_dmabuf_mr`. None: this driver has no such export.
    fn export_dmabuf(&self, ptr: DevicePtr, len: usize) -> Option<Result<OwnedFd, GpuError>>;
    /// Whether an RDMA NIC can register device memory by its address (`ibv_reg_mr`): so for
    /// NVIDIA GPUs where the nvidia-peermem module is loaded, and for host memory.
    fn pointer_registrable(&self) -> bool;
    /// What copies between this device and the host are called in reports ("CUDA", ...).
    fn kind(&self) -> &'static str;
}
