//! Staged transfers with few, large copies. The copy engine pays a fixed cost per copy
//! (measured on an H200: about 110,000 copies/s whatever their size, so 128 KiB copies top out
//! near 14 GB/s, 2-4 MiB ones near 28-35), which one copy per I/O cannot hide. So a worker's
//! I/Os use the slots of one pinned arena cut into segments (`Shape`), mirrored by a device
//! region of the same layout, and data crosses between host and GPU a whole segment at a time:
//! `read` (received into slots, then one host-to-device copy per segment) and `write` (one
//! device-to-host copy per segment, then each slot is sent from the arena).

pub mod read;
pub mod write;

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use serde::Serialize;
use tokio::sync::futures::Notified;
use tokio::sync::Notify;

use crate::gpu::driver::{DevicePtr, Event, GpuDriver, GpuError, Stream};
use crate::gpu::staged::wait_for;
use crate::transport::target::RawMemory;

pub use read::ReadPipeline;
pub use write::WritePipeline;

const PAGE: usize = 4096;
const HUGE_PAGE: usize = 2 << 20;

/// Page-aligned host memory, pinned for the life of the value (the transport may hold it a
/// little longer than the pipeline: it unpins itself when the last holder lets go).
pub(crate) struct PinnedArena {
    driver: Arc<dyn GpuDriver>,
    ptr: *mut u8,
    len: usize,
}

// SAFETY: plain memory; who writes which part is the pipeline's bookkeeping.
unsafe impl Send for PinnedArena {}
// SAFETY: as above.
unsafe impl Sync for PinnedArena {}

impl PinnedArena {
    pub(crate) fn new(driver: Arc<dyn GpuDriver>, len: usize) -> Result<PinnedArena, GpuError> {
        let len = len.max(1).next_multiple_of(PAGE);
        let layout = Self::layout(len)?;
        // SAFETY: non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(GpuError(format!(
                "out of memory for a {len}-byte staging arena"
            )));
        }
        // Huge pages where the system allows: fewer TLB misses as the network writes the arena
        // and fewer pages for the GPU to map. Only advice; no error matters.
        // SAFETY: our allocation.
        unsafe { libc::madvise(ptr.cast(), len, libc::MADV_HUGEPAGE) };
        // SAFETY: our allocation, alive until Drop (which unpins first).
        if let Err(e) = unsafe { driver.pin(ptr, len) } {
            // SAFETY: just allocated with this layout.
            unsafe { std::alloc::dealloc(ptr, layout) };
            return Err(e);
        }
        Ok(PinnedArena { driver, ptr, len })
    }

    /// Page-aligned; 2 MiB-aligned from 2 MiB (a huge page).
    fn layout(len: usize) -> Result<std::alloc::Layout, GpuError> {
        let align = if len >= HUGE_PAGE { HUGE_PAGE } else { PAGE };
        std::alloc::Layout::from_size_align(len, align)
            .map_err(|e| GpuError(format!("staging arena of {len} bytes: {e}")))
    }
}

impl Drop for PinnedArena {
    fn drop(&mut self) {
        // SAFETY: the last holder: no copy or receive uses the memory (the pipeline waits for
        // its copies before letting go).
        unsafe {
            self.driver.unpin(self.ptr);
            std::alloc::dealloc(
                self.ptr,
                Self::layout(self.len).expect("the layout `new` used"),
            );
        }
    }
}

// SAFETY: ptr..ptr+len is our live allocation.
unsafe impl RawMemory for PinnedArena {
    fn ptr(&self) -> *mut u8 {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
}

/// How a pipeline's arena (and device region) is cut: `segments` segments of `per_segment`
/// slots of `unit` bytes. Data crosses between host and GPU a segment at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub unit: usize,
    pub per_segment: usize,
    pub segments: usize,
}

impl Shape {
    /// Segments of about `copy_bytes` (at least one slot), and enough of them for `in_flight`
    /// I/Os spread over the active segments plus two being copied or waiting: I/Os rarely wait
    /// for a copy.
    pub fn new(unit: usize, in_flight: usize, copy_bytes: usize) -> Shape {
        let unit = unit.max(1);
        let per_segment = (copy_bytes / unit).max(1);
        let segments = in_flight.max(1).div_ceil(per_segment) + 2;
        Shape {
            unit,
            per_segment,
            segments,
        }
    }

    /// Bytes of the arena and of the device region.
    pub fn region_len(&self) -> usize {
        self.segments * self.per_segment * self.unit
    }
}

/// What both pipelines are built on: the pinned arena, the stream their copies run on, an
/// event per segment, and the device region the arena mirrors.
pub(crate) struct Mirror {
    pub(crate) driver: Arc<dyn GpuDriver>,
    pub(crate) arena: Arc<PinnedArena>,
    pub(crate) stream: Stream,
    pub(crate) events: Vec<Event>,
    pub(crate) device: DevicePtr,
    pub(crate) shape: Shape,
    /// Per segment: a task waits on the driver for its copy (the others are told by `Changes`).
    watched: Vec<AtomicBool>,
    copies: AtomicU64,
    waits: AtomicU64,
    blocked: AtomicU64,
}

/// What a pipeline's staging cost: how often data crossed, and how often I/Os waited for it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StagingStats {
    /// Segment copies between host and GPU.
    pub copies: u64,
    /// I/Os that waited for a slot (a copy not done, or the slots of the next segment still out).
    pub waits: u64,
    /// Of those waits for a copy, the ones that took a blocking thread (the copy was not done
    /// after a few looks).
    pub blocked: u64,
}

impl std::ops::AddAssign for StagingStats {
    fn add_assign(&mut self, other: StagingStats) {
        self.copies += other.copies;
        self.waits += other.waits;
        self.blocked += other.blocked;
    }
}

impl Mirror {
    fn new(
        driver: Arc<dyn GpuDriver>,
        device: DevicePtr,
        shape: Shape,
    ) -> Result<Mirror, GpuError> {
        let arena = Arc::new(PinnedArena::new(driver.clone(), shape.region_len())?);
        let stream = driver.new_stream()?;
        let mut mirror = Mirror {
            driver,
            arena,
            stream,
            events: Vec::new(),
            device,
            shape,
            watched: (0..shape.segments)
                .map(|_| AtomicBool::new(false))
                .collect(),
            copies: AtomicU64::new(0),
            waits: AtomicU64::new(0),
            blocked: AtomicU64::new(0),
        };
        for _ in 0..shape.segments {
            let event = mirror.driver.new_event()?;
            mirror.events.push(event);
        }
        Ok(mirror)
    }

    /// Queues a copy of `len` bytes at `offset` (from the start of both) between the arena and
    /// the device region.
    /// # Safety
    /// Nobody touches either side's range until an event recorded after this says it is done.
    pub(crate) unsafe fn copy(
        &self,
        offset: usize,
        len: usize,
        toward: Toward,
    ) -> Result<(), GpuError> {
        let host = self.arena.ptr().add(offset);
        let device = self.device + offset as u64;
        match toward {
            Toward::Device => self.driver.copy_to_device(self.stream, device, host, len),
            Toward::Host => self.driver.copy_to_host(self.stream, host, device, len),
        }
    }

    /// Queues the copy of segment `h`'s first `len` bytes, and its event after it.
    /// # Safety
    /// As `copy`, until the segment's event says the copy is done.
    pub(crate) unsafe fn copy_segment(
        &self,
        h: usize,
        len: usize,
        toward: Toward,
    ) -> Result<(), GpuError> {
        let start = h * self.shape.per_segment * self.shape.unit;
        self.copy(start, len, toward)?;
        self.driver.record(self.events[h], self.stream)?;
        self.copies.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    pub(crate) fn stats(&self) -> StagingStats {
        StagingStats {
            copies: self.copies.load(Ordering::Relaxed),
            waits: self.waits.load(Ordering::Relaxed),
            blocked: self.blocked.load(Ordering::Relaxed),
        }
    }

    /// Waits until segment `h`'s copy is done (true), or, when another task already waits for
    /// it, until the pipeline next changes (false: look again). One waiter per copy: many I/Os
    /// may want the same segment, and a waiter on the driver costs a thread.
    pub(crate) async fn wait_copy(&self, h: usize, changes: &Changes) -> Result<bool, GpuError> {
        // Listen before looking, so that the waiter's news after this cannot be missed.
        let listening = changes.listen();
        if self.watched[h].swap(true, Ordering::SeqCst) {
            listening.changed().await;
            return Ok(false);
        }
        drop(listening);
        /// Hands the watch on (and wakes the others) however the wait ends, cancelled included.
        struct Watch<'a>(&'a AtomicBool, &'a Changes);
        impl Drop for Watch<'_> {
            fn drop(&mut self) {
                self.0.store(false, Ordering::SeqCst);
                self.1.tell();
            }
        }
        let _watch = Watch(&self.watched[h], changes);
        if wait_for(&self.driver, self.events[h]).await? {
            self.blocked.fetch_add(1, Ordering::Relaxed);
        }
        Ok(true)
    }
}

impl Drop for Mirror {
    fn drop(&mut self) {
        // Copies from and to the arena must be done before it can go.
        let _ = self.driver.sync(self.stream);
        // SAFETY: synchronized; nobody waits on these any more (slots hold their pipeline).
        unsafe {
            for &e in &self.events {
                self.driver.destroy_event(e);
            }
            self.driver.destroy_stream(self.stream);
        }
    }
}

/// Which way a copy goes.
#[derive(Clone, Copy)]
pub(crate) enum Toward {
    Device,
    Host,
}

/// A pipeline's bookkeeping behind its lock: what it knows of each segment (`S`), the segment
/// slots come from, and the failure of a copy, which every later call gets.
pub(crate) struct State<S> {
    pub(crate) segments: Vec<S>,
    pub(crate) active: usize,
    failed: Option<GpuError>,
}

impl<S: Default> State<S> {
    fn new(segments: usize) -> State<S> {
        State {
            segments: (0..segments).map(|_| S::default()).collect(),
            active: 0,
            failed: None,
        }
    }
}

impl<S> State<S> {
    /// Fails if a copy did.
    pub(crate) fn check(&self) -> Result<(), GpuError> {
        self.failed.as_ref().map_or(Ok(()), |e| Err(e.clone()))
    }

    /// A copy could not be queued: it and every later call fail with `e` (those waiting now
    /// are told, and see it).
    pub(crate) fn fail(&mut self, e: GpuError, changes: &Changes) -> GpuError {
        self.failed = Some(e.clone());
        changes.tell();
        e
    }
}

/// Tells tasks waiting for a pipeline's state to change. Waiting is rare (a slot is usually
/// free), so telling costs nothing while nobody waits.
#[derive(Default)]
pub(crate) struct Changes {
    notify: Notify,
    waiting: AtomicUsize,
}

/// A task's wait for the next change, begun while it held the state's lock (so a change made
/// after it looked is not missed).
pub(crate) struct Listening<'a> {
    changes: &'a Changes,
    notified: Pin<Box<Notified<'a>>>,
}

impl Changes {
    /// Call with the state's lock held; await `changed` after letting it go.
    pub(crate) fn listen(&self) -> Listening<'_> {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let mut notified = Box::pin(self.notify.notified());
        notified.as_mut().enable();
        Listening {
            changes: self,
            notified,
        }
    }

    /// Call after changing the state (its lock let go).
    pub(crate) fn tell(&self) {
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.notify.notify_waiters();
        }
    }
}

/// What a task waits for before it looks at a pipeline's state again.
pub(crate) enum Wait<'a> {
    /// The copy of a segment.
    Copy(usize),
    Change(Listening<'a>),
}

impl Wait<'_> {
    /// As `until`, for an I/O waiting for a slot: counted in the stats once per slot asked for
    /// (`waited` says whether this one was already).
    pub(crate) async fn for_slot(
        self,
        mirror: &Mirror,
        changes: &Changes,
        waited: &mut bool,
    ) -> Result<bool, GpuError> {
        if !std::mem::replace(waited, true) {
            mirror.waits.fetch_add(1, Ordering::Relaxed);
        }
        self.until(mirror, changes).await
    }

    /// Waits as said; true when it was for a copy, and the copy is done.
    pub(crate) async fn until(self, mirror: &Mirror, changes: &Changes) -> Result<bool, GpuError> {
        match self {
            Wait::Copy(h) => mirror.wait_copy(h, changes).await,
            Wait::Change(listening) => {
                listening.changed().await;
                Ok(false)
            }
        }
    }
}

impl Listening<'_> {
    pub(crate) async fn changed(mut self) {
        self.notified.as_mut().await;
    }
}

impl Drop for Listening<'_> {
    fn drop(&mut self) {
        self.changes.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_hold_about_a_copy_and_cover_the_ios_in_flight() {
        // 128 KiB I/Os, 8 in flight, 4 MiB copies: one segment of 32 holds them all; two
        // more are being copied or wait.
        let s = Shape::new(128 << 10, 8, 4 << 20);
        assert_eq!((s.per_segment, s.segments), (32, 3));
        assert_eq!(s.region_len(), 3 * (4 << 20));
        // 1 MiB I/Os, 32 in flight: 8 segments of 4 in use, 2 more.
        let s = Shape::new(1 << 20, 32, 4 << 20);
        assert_eq!((s.per_segment, s.segments), (4, 10));
        // I/Os larger than a copy: one per segment.
        let s = Shape::new(8 << 20, 2, 4 << 20);
        assert_eq!((s.per_segment, s.segments), (1, 4));
        // Nothing zero, whatever is asked.
        let s = Shape::new(0, 0, 0);
        assert!(s.unit > 0 && s.per_segment > 0 && s.segments > 0);
    }
}
