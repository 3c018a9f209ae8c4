//! An emulated GPU: `GpuDriver` over host memory, with one copy thread per stream, so copies
//! really are asynchronous and events really say when they are done. It drives the GPU data
//! paths (staging ring, event waits, peer registration by pointer) where no GPU is: in tests,
//! and with `fabrik bench --mem emulated-gpu` over NVMe/RDMA on Soft-RoCE. Its "device memory"
//! is page-aligned host memory, which a NIC registers by address.

use std::alloc::Layout;
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::Duration;

use super::driver::{DevicePtr, Event, GpuDriver, GpuError, GpuIdentity, Stream};

const PAGE: usize = 4096;

pub struct EmulatedGpu {
    identity: GpuIdentity,
    /// Each copy takes at least this long (tests make copies slow to expose missing waits).
    copy_delay: Duration,
    allocations: Mutex<HashMap<DevicePtr, Layout>>,
    streams: Mutex<HashMap<u64, mpsc::Sender<Job>>>,
    events: Mutex<HashMap<u64, Arc<EventState>>>,
    next_handle: AtomicU64,
    /// Host bytes pinned now (tests check the staging ring pins once and unpins all).
    pinned: Mutex<HashMap<usize, usize>>,
    copies: AtomicU64,
    /// Blocking waits for events (what a thread is spent on).
    waits: AtomicU64,
}

enum Job {
    Copy { dst: usize, src: usize, len: usize },
    Mark(Arc<EventState>, u64),
}

#[derive(Default)]
struct EventState {
    /// (times recorded, latest recording done)
    progress: Mutex<(u64, u64)>,
    done: Condvar,
}

impl Default for EmulatedGpu {
    fn default() -> EmulatedGpu {
        EmulatedGpu::new(Duration::ZERO)
    }
}

impl EmulatedGpu {
    pub fn new(copy_delay: Duration) -> EmulatedGpu {
        EmulatedGpu {
            identity: GpuIdentity {
                index: 0,
                name: "emulated GPU (host memory)".into(),
                pci_addr: String::new(),
                numa_node: None,
                memory_bytes: 0,
            },
            copy_delay,
            allocations: Mutex::default(),
            streams: Mutex::default(),
            events: Mutex::default(),
            next_handle: AtomicU64::new(1),
            pinned: Mutex::default(),
            copies: AtomicU64::new(0),
            waits: AtomicU64::new(0),
        }
    }

    /// Host bytes pinned now.
    pub fn pinned_bytes(&self) -> usize {
        self.pinned.lock().unwrap().values().sum()
    }

    /// Copies queued so far.
    pub fn copies(&self) -> u64 {
        self.copies.load(Ordering::Relaxed)
    }

    /// Blocking waits for events so far (`sync` waits too).
    pub fn waits(&self) -> u64 {
        self.waits.load(Ordering::Relaxed)
    }

    fn event(&self, event: Event) -> Result<Arc<EventState>, GpuError> {
        self.events
            .lock()
            .unwrap()
            .get(&event.0)
            .cloned()
            .ok_or_else(|| GpuError(format!("no event {}", event.0)))
    }

    /// Both directions are host memory here: one copy job.
    fn queue_copy(
        &self,
        stream: Stream,
        dst: usize,
        src: usize,
        len: usize,
    ) -> Result<(), GpuError> {
        self.copies.fetch_add(1, Ordering::Relaxed);
        self.queue(stream, Job::Copy { dst, src, len })
    }

    fn queue(&self, stream: Stream, job: Job) -> Result<(), GpuError> {
        let streams = self.streams.lock().unwrap();
        let tx = streams
            .get(&stream.0)
            .ok_or_else(|| GpuError(format!("no stream {}", stream.0)))?;
        tx.send(job)
            .map_err(|_| GpuError("the stream's copy thread is gone".into()))
    }
}

/// The copy thread of one stream: runs its jobs in order.
fn run_stream(jobs: mpsc::Receiver<Job>, delay: Duration) {
    for job in jobs {
        match job {
            Job::Copy { dst, src, len } => {
                if !delay.is_zero() {
                    std::thread::sleep(delay);
                }
                // SAFETY: the caller of copy_to_* promised both ranges stay valid until done.
                unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) };
            }
            Job::Mark(event, generation) => {
                let mut progress = event.progress.lock().unwrap();
                progress.1 = progress.1.max(generation);
                event.done.notify_all();
            }
        }
    }
}

impl GpuDriver for EmulatedGpu {
    fn identity(&self) -> &GpuIdentity {
        &self.identity
    }

    fn alloc(&self, len: usize) -> Result<DevicePtr, GpuError> {
        let layout = Layout::from_size_align(len.max(1), PAGE)
            .map_err(|e| GpuError(format!("allocating {len} bytes: {e}")))?;
        // SAFETY: a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(GpuError(format!("out of memory allocating {len} bytes")));
        }
        self.allocations
            .lock()
            .unwrap()
            .insert(ptr as DevicePtr, layout);
        Ok(ptr as DevicePtr)
    }

    unsafe fn free(&self, ptr: DevicePtr) {
        if let Some(layout) = self.allocations.lock().unwrap().remove(&ptr) {
            std::alloc::dealloc(ptr as *mut u8, layout);
        }
    }

    unsafe fn pin(&self, ptr: *mut u8, len: usize) -> Result<(), GpuError> {
        let mut pinned = self.pinned.lock().unwrap();
        if pinned.insert(ptr as usize, len).is_some() {
            return Err(GpuError(format!("{ptr:p} is already pinned")));
        }
        Ok(())
    }

    unsafe fn unpin(&self, ptr: *mut u8) {
        self.pinned.lock().unwrap().remove(&(ptr as usize));
    }

    fn new_stream(&self) -> Result<Stream, GpuError> {
        let id = self.next_handle.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel();
        let delay = self.copy_delay;
        std::thread::Builder::new()
            .name(format!("emulated-gpu-stream-{id}"))
            .spawn(move || run_stream(rx, delay))
            .map_err(|e| GpuError(format!("starting a copy thread: {e}")))?;
        self.streams.lock().unwrap().insert(id, tx);
        Ok(Stream(id))
    }

    unsafe fn destroy_stream(&self, stream: Stream) {
        // Dropping the sender ends the thread once its queue is empty.
        self.streams.lock().unwrap().remove(&stream.0);
    }

    unsafe fn copy_to_device(
        &self,
        stream: Stream,
        dst: DevicePtr,
        src: *const u8,
        len: usize,
    ) -> Result<(), GpuError> {
        self.queue_copy(stream, dst as usize, src as usize, len)
    }

    unsafe fn copy_to_host(
        &self,
        stream: Stream,
        dst: *mut u8,
        src: DevicePtr,
        len: usize,
    ) -> Result<(), GpuError> {
        self.queue_copy(stream, dst as usize, src as usize, len)
    }

    fn new_event(&self) -> Result<Event, GpuError> {
        let id = self.next_handle.fetch_add(1, Ordering::Relaxed);
        self.events.lock().unwrap().insert(id, Arc::default());
        Ok(Event(id))
    }

    unsafe fn destroy_event(&self, event: Event) {
        self.events.lock().unwrap().remove(&event.0);
    }

    fn record(&self, event: Event, stream: Stream) -> Result<(), GpuError> {
        let state = self.event(event)?;
        let generation = {
            let mut progress = state.progress.lock().unwrap();
            progress.0 += 1;
            progress.0
        };
        self.queue(stream, Job::Mark(state, generation))
    }

    fn is_done(&self, event: Event) -> Result<bool, GpuError> {
        let state = self.event(event)?;
        let progress = state.progress.lock().unwrap();
        Ok(progress.1 >= progress.0)
    }

    fn wait(&self, event: Event) -> Result<(), GpuError> {
        self.waits.fetch_add(1, Ordering::Relaxed);
        let state = self.event(event)?;
        let mut progress = state.progress.lock().unwrap();
        let target = progress.0;
        while progress.1 < target {
            progress = state.done.wait(progress).unwrap();
        }
        Ok(())
    }

    fn sync(&self, stream: Stream) -> Result<(), GpuError> {
        let event = self.new_event()?;
        let result = self.record(event, stream).and_then(|_| self.wait(event));
        // SAFETY: nobody else knows this event.
        unsafe { self.destroy_event(event) };
        result
    }

    fn export_dmabuf(&self, _ptr: DevicePtr, _len: usize) -> Option<Result<OwnedFd, GpuError>> {
        None
    }

    fn pointer_registrable(&self) -> bool {
        true
    }

    fn kind(&self) -> &'static str {
        "emulated"
    }
}
