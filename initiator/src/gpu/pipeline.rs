//! Staged reads with few, large copies: a worker's concurrent reads are received into the slots
//! of one pinned arena, and the GPU gets them one half of the arena at a time, in one copy.
//!
//! The copy engine pays a fixed cost per copy (measured on an H200: about 110,000 copies/s
//! whatever their size, so 128 KiB copies top out near 14 GB/s, 2 MiB ones near 28), which a
//! copy per read cannot hide. Here the arena has two halves of `per_half` slots, mirrored by a
//! device region of the same layout: reads take slots of the active half in turn; once every
//! slot of a half is filled, that half goes to the GPU in one copy while reads fill the other.
//! A slot's data lands at the same place in the device region. A reader that needs its data in
//! the GPU now (to check it) seals the half: it is copied as soon as the reads in it are done.

use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use super::driver::{DevicePtr, Event, GpuDriver, GpuError, Stream};
use super::staged::wait_for;
use crate::transport::target::{RawMemory, RecvTarget};

const PAGE: usize = 4096;

/// Page-aligned host memory, pinned for the life of the value (the transport may hold it a
/// little longer than the pipeline: it unpins itself when the last holder lets go).
struct PinnedArena {
    driver: Arc<dyn GpuDriver>,
    ptr: *mut u8,
    len: usize,
}

// SAFETY: plain memory; who writes which part is the pipeline's bookkeeping.
unsafe impl Send for PinnedArena {}
// SAFETY: as above.
unsafe impl Sync for PinnedArena {}

impl PinnedArena {
    fn new(driver: Arc<dyn GpuDriver>, len: usize) -> Result<PinnedArena, GpuError> {
        let len = len.max(1).next_multiple_of(PAGE);
        let layout = std::alloc::Layout::from_size_align(len, PAGE)
            .map_err(|e| GpuError(format!("staging arena of {len} bytes: {e}")))?;
        // SAFETY: non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(GpuError(format!(
                "out of memory for a {len}-byte staging arena"
            )));
        }
        // SAFETY: our allocation, alive until Drop (which unpins first).
        if let Err(e) = unsafe { driver.pin(ptr, len) } {
            // SAFETY: just allocated with this layout.
            unsafe { std::alloc::dealloc(ptr, layout) };
            return Err(e);
        }
        Ok(PinnedArena { driver, ptr, len })
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
                std::alloc::Layout::from_size_align(self.len, PAGE).expect("layout of new"),
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

#[derive(Default)]
struct Half {
    /// Slots handed out, received into, and given back since the half was last reset.
    assigned: usize,
    received: usize,
    released: usize,
    /// No more slots from this half: copy it once what was handed out is received.
    sealed: bool,
    /// The half's copy is queued (the event says when it is done).
    copying: bool,
}

impl Half {
    fn ready_to_copy(&self, per_half: usize) -> bool {
        !self.copying
            && self.assigned > 0
            && self.received == self.assigned
            && (self.sealed || self.assigned == per_half)
    }
}

struct State {
    halves: [Half; 2],
    active: usize,
    /// A copy failed: every later call fails with this.
    failed: Option<GpuError>,
}

/// A worker's staged reads into a device region of `region_len()` bytes at `device`.
pub struct ReadPipeline {
    driver: Arc<dyn GpuDriver>,
    arena: Arc<PinnedArena>,
    stream: Stream,
    events: [Event; 2],
    device: DevicePtr,
    unit: usize,
    per_half: usize,
    state: Mutex<State>,
    changed: Notify,
}

/// One slot of the arena, handed to one read. Dropping it gives the slot back (a read that
/// failed counts as received: its half is copied anyway, with whatever the slot held).
pub struct Slot {
    pipeline: Arc<ReadPipeline>,
    half: usize,
    index: usize,
    target: RecvTarget,
    received: bool,
}

impl Slot {
    /// Where the read's data is received.
    pub fn target(&self) -> &RecvTarget {
        &self.target
    }

    /// Where the data lands in the device region, from its start.
    pub fn device_offset(&self) -> usize {
        (self.half * self.pipeline.per_half + self.index) * self.pipeline.unit
    }

    /// The read is in the slot: the half may go to the GPU.
    pub fn received(&mut self) -> Result<(), GpuError> {
        if !self.received {
            self.received = true;
            self.pipeline.on_received(self.half)?;
        }
        Ok(())
    }

    /// Waits until the slot's data is in the GPU (sealing its half so it goes now).
    pub async fn landed(&mut self) -> Result<(), GpuError> {
        self.received()?;
        self.pipeline.seal_and_wait(self.half).await
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let _ = self.received();
        self.pipeline.on_released(self.half);
    }
}

impl ReadPipeline {
    /// A pipeline for reads of `unit` bytes, `per_half` slots per half (at least the reads in
    /// flight, so the active half fills while the other is copied), landing in the device
    /// region at `device` (`region_len(unit, per_half)` bytes).
    pub fn new(
        driver: Arc<dyn GpuDriver>,
        device: DevicePtr,
        unit: usize,
        per_half: usize,
    ) -> Result<Arc<ReadPipeline>, GpuError> {
        let per_half = per_half.max(1);
        let arena = Arc::new(PinnedArena::new(
            driver.clone(),
            Self::region_len(unit, per_half),
        )?);
        let stream = driver.new_stream()?;
        let events = [driver.new_event()?, driver.new_event()?];
        Ok(Arc::new(ReadPipeline {
            driver,
            arena,
            stream,
            events,
            device,
            unit,
            per_half,
            state: Mutex::new(State {
                halves: Default::default(),
                active: 0,
                failed: None,
            }),
            changed: Notify::new(),
        }))
    }

    /// Bytes of the device region (and of the arena).
    pub fn region_len(unit: usize, per_half: usize) -> usize {
        2 * per_half.max(1) * unit
    }

    /// Slots per half that make copies of about `copy_bytes` with `in_flight` reads at once.
    pub fn slots_per_half(unit: usize, in_flight: usize, copy_bytes: usize) -> usize {
        in_flight.max(copy_bytes.div_ceil(unit.max(1))).max(1)
    }

    /// The next slot, once one is free.
    pub async fn slot(self: &Arc<Self>) -> Result<Slot, GpuError> {
        loop {
            // Listening before looking: a change after the look is not missed.
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let wait_copy = {
                let mut state = self.state.lock().unwrap();
                if let Some(e) = &state.failed {
                    return Err(e.clone());
                }
                let h = state.active;
                let half = &mut state.halves[h];
                if !half.sealed && half.assigned < self.per_half {
                    let index = half.assigned;
                    half.assigned += 1;
                    return Ok(self.make_slot(h, index));
                }
                // The active half is full or sealed: switch to the other once it is free.
                let other = 1 - h;
                let o = &state.halves[other];
                if o.assigned == 0 || (o.copying && o.released == o.assigned) {
                    if o.copying && !self.driver.is_done(self.events[other])? {
                        Some(self.events[other])
                    } else {
                        state.halves[other] = Half::default();
                        state.active = other;
                        continue;
                    }
                } else {
                    None
                }
            };
            match wait_copy {
                Some(event) => wait_for(&self.driver, event).await?,
                // Reads of the other half are still out: wait for one to come back.
                None => changed.await,
            }
        }
    }

    fn make_slot(self: &Arc<Self>, half: usize, index: usize) -> Slot {
        let offset = (half * self.per_half + index) * self.unit;
        let memory: Arc<dyn RawMemory> = self.arena.clone();
        // SAFETY: the slot's range belongs to this Slot alone until it is released, and the
        // half is not copied before every slot of it is received.
        let target = unsafe { RecvTarget::new(memory, offset, self.unit) };
        Slot {
            pipeline: self.clone(),
            half,
            index,
            target,
            received: false,
        }
    }

    fn on_received(&self, h: usize) -> Result<(), GpuError> {
        let mut state = self.state.lock().unwrap();
        state.halves[h].received += 1;
        self.copy_if_ready(&mut state, h)
    }

    fn on_released(&self, h: usize) {
        self.state.lock().unwrap().halves[h].released += 1;
        self.changed.notify_waiters();
    }

    /// Queues the half's copy to the device once all its slots are received.
    fn copy_if_ready(&self, state: &mut State, h: usize) -> Result<(), GpuError> {
        if !state.halves[h].ready_to_copy(self.per_half) {
            return Ok(());
        }
        let start = h * self.per_half * self.unit;
        let len = state.halves[h].assigned * self.unit;
        // SAFETY: every slot of the range is received (its read is done) and is not handed out
        // again before the event below says the copy is done; the device region is the
        // caller's live allocation of region_len bytes.
        let queued = unsafe {
            self.driver.copy_to_device(
                self.stream,
                self.device + start as u64,
                self.arena.ptr.add(start),
                len,
            )
        }
        .and_then(|_| self.driver.record(self.events[h], self.stream));
        if let Err(e) = queued {
            state.failed = Some(e.clone());
            self.changed.notify_waiters();
            return Err(e);
        }
        state.halves[h].copying = true;
        self.changed.notify_waiters();
        Ok(())
    }

    /// Seals half `h` (no more slots from it) and waits until its copy is done.
    async fn seal_and_wait(&self, h: usize) -> Result<(), GpuError> {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let event = {
                let mut state = self.state.lock().unwrap();
                if let Some(e) = &state.failed {
                    return Err(e.clone());
                }
                let half = &mut state.halves[h];
                half.sealed = true;
                if half.copying {
                    Some(self.events[h])
                } else {
                    self.copy_if_ready(&mut state, h)?;
                    state.halves[h].copying.then_some(self.events[h])
                }
            };
            match event {
                Some(event) => return wait_for(&self.driver, event).await,
                None => changed.await,
            }
        }
    }

    /// Copies what is received and not yet copied, and waits for every copy: the data of all
    /// reads so far is in the GPU. Slots still handed out must be received or dropped first.
    pub async fn finish(&self) -> Result<(), GpuError> {
        for h in 0..2 {
            let pending = {
                let state = self.state.lock().unwrap();
                let half = &state.halves[h];
                half.assigned > 0 && (half.copying || half.received == half.assigned)
            };
            if pending {
                self.seal_and_wait(h).await?;
            }
        }
        Ok(())
    }
}

impl Drop for ReadPipeline {
    fn drop(&mut self) {
        // Copies out of the arena must be done before it can go.
        let _ = self.driver.sync(self.stream);
        // SAFETY: synchronized; nobody waits on these any more (slots hold the pipeline).
        unsafe {
            for e in self.events {
                self.driver.destroy_event(e);
            }
            self.driver.destroy_stream(self.stream);
        }
    }
}
