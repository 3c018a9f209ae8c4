//! `GpuDriver` over the CUDA driver API (libcuda, loaded at run time through cudarc: nothing of
//! CUDA is needed to build, and a machine without the driver gets an error, not a panic).
//!
//! One primary context per device, made current on whichever thread calls (tokio moves tasks
//! between threads; making a context current is a cheap thread-local store).

use std::ffi::{c_void, CStr};
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::OnceLock;

use cudarc::driver::sys;

use super::driver::{DevicePtr, Event, GpuDriver, GpuError, GpuIdentity, Stream};

/// The message for a machine without the NVIDIA driver (the words, so users can grep).
pub const NO_DRIVER: &str = "no NVIDIA driver found: GPU memory unavailable";

/// Whether libcuda can be loaded. cudarc panics on the first call without it, so every entry
/// point checks this first.
pub fn driver_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: only tries to dlopen the library.
    *PRESENT.get_or_init(|| unsafe { sys::is_culib_present() })
}

/// Whether libcuda exports `symbol` (older drivers lack newer calls; cudarc panics on those).
fn has_symbol(symbol: &str) -> bool {
    // SAFETY: culib() is loaded (driver_present was checked by `open`); get only looks up.
    unsafe { sys::culib().get::<*const c_void>(symbol.as_bytes()).is_ok() }
}

fn check(result: sys::CUresult, what: &str) -> Result<(), GpuError> {
    if result == sys::CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    let mut name: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: cuGetErrorName writes a pointer to a static string (or leaves null).
    unsafe { sys::cuGetErrorName(result, &mut name) };
    let name = if name.is_null() {
        format!("{result:?}")
    } else {
        // SAFETY: a NUL-terminated static string from the driver.
        unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned()
    };
    Err(GpuError(format!("{what}: {name}")))
}

/// Number of CUDA devices (0 without the driver).
pub fn device_count() -> Result<usize, GpuError> {
    if !driver_present() {
        return Err(GpuError(NO_DRIVER.into()));
    }
    let mut n = 0;
    // SAFETY: plain driver calls with out-parameters we own.
    unsafe {
        check(sys::cuInit(0), "cuInit")?;
        check(sys::cuDeviceGetCount(&mut n), "cuDeviceGetCount")?;
    }
    Ok(n.max(0) as usize)
}

/// One CUDA device and its primary context.
pub struct CudaDriver {
    device: sys::CUdevice,
    context: sys::CUcontext,
    identity: GpuIdentity,
    dmabuf: bool,
}

// SAFETY: CUDA contexts may be used from any thread (made current per call).
unsafe impl Send for CudaDriver {}
// SAFETY: as above; the driver API is thread-safe.
unsafe impl Sync for CudaDriver {}

impl CudaDriver {
    /// Opens CUDA device `index`.
    pub fn open(index: usize) -> Result<CudaDriver, GpuError> {
        let count = device_count()?;
        if index >= count {
            return Err(GpuError(format!(
                "no GPU {index}: the NVIDIA driver sees {count} GPU(s)"
            )));
        }
        let mut device = 0;
        let mut context = std::ptr::null_mut();
        let mut name = [0 as std::ffi::c_char; 128];
        let mut bus = [0 as std::ffi::c_char; 32];
        let mut memory = 0usize;
        let mut dmabuf = 0;
        // SAFETY: out-parameters we own, sized as the calls are told.
        unsafe {
            check(sys::cuDeviceGet(&mut device, index as i32), "cuDeviceGet")?;
            // A thread waiting for a copy gives its core away between looks instead of spinning
            // on it (the default with fewer contexts than cores): the network needs the cores.
            // Not blocking-sync, which wakes the waiter by interrupt: copies are seldom waited
            // for (the pipelines look first, and one task per copy waits), and then briefly.
            // A context someone already made keeps its flags; that is only slower.
            let _ = sys::cuDevicePrimaryCtxSetFlags_v2(
                device,
                sys::CUctx_flags::CU_CTX_SCHED_YIELD as u32,
            );
            check(
                sys::cuDevicePrimaryCtxRetain(&mut context, device),
                "cuDevicePrimaryCtxRetain",
            )?;
            check(sys::cuCtxSetCurrent(context), "cuCtxSetCurrent")?;
            check(
                sys::cuDeviceGetName(name.as_mut_ptr(), name.len() as i32, device),
                "cuDeviceGetName",
            )?;
            // A device with no PCI address (none known) keeps an empty one.
            let _ = sys::cuDeviceGetPCIBusId(bus.as_mut_ptr(), bus.len() as i32, device);
            check(
                sys::cuDeviceTotalMem_v2(&mut memory, device),
                "cuDeviceTotalMem",
            )?;
            let _ = sys::cuDeviceGetAttribute(
                &mut dmabuf,
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED,
                device,
            );
        }
        // SAFETY: the driver NUL-terminates both strings within their buffers.
        let text = |b: &[std::ffi::c_char]| {
            unsafe { CStr::from_ptr(b.as_ptr()) }
                .to_string_lossy()
                .into_owned()
        };
        let pci_addr = text(&bus).to_ascii_lowercase();
        let numa_node = numa_node_of(&pci_addr);
        Ok(CudaDriver {
            device,
            context,
            identity: GpuIdentity {
                index,
                name: text(&name),
                pci_addr,
                numa_node,
                memory_bytes: memory as u64,
            },
            dmabuf: dmabuf != 0,
        })
    }

    fn current(&self) -> Result<(), GpuError> {
        // SAFETY: the context is retained until Drop.
        check(
            unsafe { sys::cuCtxSetCurrent(self.context) },
            "cuCtxSetCurrent",
        )
    }
}

impl Drop for CudaDriver {
    fn drop(&mut self) {
        // SAFETY: we retained it in `open`.
        unsafe { sys::cuDevicePrimaryCtxRelease_v2(self.device) };
    }
}

/// The NUMA node sysfs gives the PCI device (-1, absent or unreadable: none).
fn numa_node_of(pci_addr: &str) -> Option<u32> {
    let text =
        std::fs::read_to_string(format!("/sys/bus/pci/devices/{pci_addr}/numa_node")).ok()?;
    text.trim()
        .parse::<i64>()
        .ok()
        .and_then(|n| u32::try_from(n).ok())
}

/// Whether the nvidia-peermem module (or the older nv_peer_mem) is loaded: then `ibv_reg_mr`
/// takes GPU addresses.
fn peermem_loaded() -> bool {
    ["/sys/module/nvidia_peermem", "/sys/module/nv_peer_mem"]
        .iter()
        .any(|p| std::path::Path::new(p).exists())
}

impl GpuDriver for CudaDriver {
    fn identity(&self) -> &GpuIdentity {
        &self.identity
    }

    fn alloc(&self, len: usize) -> Result<DevicePtr, GpuError> {
        self.current()?;
        let mut ptr = 0;
        // SAFETY: out-parameter we own.
        check(
            unsafe { sys::cuMemAlloc_v2(&mut ptr, len.max(1)) },
            "cuMemAlloc",
        )?;
        // GPUDirect RDMA: make CUDA copies on this memory synchronize with the NIC's accesses
        // (NVIDIA's GPUDirect RDMA guide asks for this on memory a NIC reads or writes).
        let mut on: u32 = 1;
        // SAFETY: a valid allocation; the attribute value is a u32.
        let _ = unsafe {
            sys::cuPointerSetAttribute(
                (&mut on as *mut u32).cast(),
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
                ptr,
            )
        };
        Ok(ptr)
    }

    unsafe fn free(&self, ptr: DevicePtr) {
        if self.current().is_ok() {
            sys::cuMemFree_v2(ptr);
        }
    }

    unsafe fn pin(&self, ptr: *mut u8, len: usize) -> Result<(), GpuError> {
        self.current()?;
        check(
            sys::cuMemHostRegister_v2(ptr.cast(), len, 0),
            "cuMemHostRegister (pinning staging memory)",
        )
    }

    unsafe fn unpin(&self, ptr: *mut u8) {
        if self.current().is_ok() {
            sys::cuMemHostUnregister(ptr.cast());
        }
    }

    fn new_stream(&self) -> Result<Stream, GpuError> {
        self.current()?;
        let mut stream = std::ptr::null_mut();
        // SAFETY: out-parameter we own.
        check(
            unsafe {
                sys::cuStreamCreate(
                    &mut stream,
                    sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
                )
            },
            "cuStreamCreate",
        )?;
        Ok(Stream(stream as u64))
    }

    unsafe fn destroy_stream(&self, stream: Stream) {
        if self.current().is_ok() {
            sys::cuStreamDestroy_v2(stream.0 as sys::CUstream);
        }
    }

    unsafe fn copy_to_device(
        &self,
        stream: Stream,
        dst: DevicePtr,
        src: *const u8,
        len: usize,
    ) -> Result<(), GpuError> {
        self.current()?;
        check(
            sys::cuMemcpyHtoDAsync_v2(dst, src.cast(), len, stream.0 as sys::CUstream),
            "cuMemcpyHtoDAsync",
        )
    }

    unsafe fn copy_to_host(
        &self,
        stream: Stream,
        dst: *mut u8,
        src: DevicePtr,
        len: usize,
    ) -> Result<(), GpuError> {
        self.current()?;
        check(
            sys::cuMemcpyDtoHAsync_v2(dst.cast(), src, len, stream.0 as sys::CUstream),
            "cuMemcpyDtoHAsync",
        )
    }

    fn new_event(&self) -> Result<Event, GpuError> {
        self.current()?;
        let mut event = std::ptr::null_mut();
        // SAFETY: out-parameter we own.
        check(
            unsafe {
                sys::cuEventCreate(
                    &mut event,
                    // Not blocking-sync (see `open`).
                    sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32,
                )
            },
            "cuEventCreate",
        )?;
        Ok(Event(event as u64))
    }

    unsafe fn destroy_event(&self, event: Event) {
        if self.current().is_ok() {
            sys::cuEventDestroy_v2(event.0 as sys::CUevent);
        }
    }

    fn record(&self, event: Event, stream: Stream) -> Result<(), GpuError> {
        self.current()?;
        // SAFETY: both handles were created by this driver and are alive.
        check(
            unsafe { sys::cuEventRecord(event.0 as sys::CUevent, stream.0 as sys::CUstream) },
            "cuEventRecord",
        )
    }

    fn is_done(&self, event: Event) -> Result<bool, GpuError> {
        self.current()?;
        // SAFETY: a live event.
        match unsafe { sys::cuEventQuery(event.0 as sys::CUevent) } {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            other => check(other, "cuEventQuery").map(|_| false),
        }
    }

    fn wait(&self, event: Event) -> Result<(), GpuError> {
        self.current()?;
        // SAFETY: a live event.
        check(
            unsafe { sys::cuEventSynchronize(event.0 as sys::CUevent) },
            "cuEventSynchronize",
        )
    }

    fn sync(&self, stream: Stream) -> Result<(), GpuError> {
        self.current()?;
        // SAFETY: a live stream.
        check(
            unsafe { sys::cuStreamSynchronize(stream.0 as sys::CUstream) },
            "cuStreamSynchronize",
        )
    }

    fn export_dmabuf(&self, ptr: DevicePtr, len: usize) -> Option<Result<OwnedFd, GpuError>> {
        if !self.dmabuf {
            return Some(Err(GpuError(format!(
                "{} does not support dma-buf export (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0: needs the open kernel modules and Linux 5.12+)",
                self.identity.name
            ))));
        }
        if !has_symbol("cuMemGetHandleForAddressRange") {
            return Some(Err(GpuError(
                "the NVIDIA driver has no cuMemGetHandleForAddressRange (CUDA 11.7+)".into(),
            )));
        }
        if let Err(e) = self.current() {
            return Some(Err(e));
        }
        let mut fd: i32 = -1;
        // SAFETY: the handle out-parameter of the DMA_BUF_FD type is an int.
        let result = unsafe {
            sys::cuMemGetHandleForAddressRange(
                (&mut fd as *mut i32).cast(),
                ptr,
                len,
                sys::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                0,
            )
        };
        Some(
            check(result, "cuMemGetHandleForAddressRange (dma-buf)").and_then(|_| {
                if fd < 0 {
                    return Err(GpuError("dma-buf export gave no file descriptor".into()));
                }
                // SAFETY: the driver gave us a new descriptor, now ours to close.
                Ok(unsafe { OwnedFd::from_raw_fd(fd) })
            }),
        )
    }

    fn pointer_registrable(&self) -> bool {
        peermem_loaded()
    }

    fn kind(&self) -> &'static str {
        "CUDA"
    }
}
