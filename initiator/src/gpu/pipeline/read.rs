//! Staged reads: a worker's concurrent reads are received into the slots of the active segment
//! of the arena; once every slot of a segment is filled, the segment goes to the GPU in one copy
//! while reads fill the other. A slot's data lands at the same place in the device region. A
//! reader that needs its data in the GPU now (to check it) seals the segment: it is copied as
//! soon as the reads in it are done.

use std::sync::{Arc, Mutex};

use super::{Changes, Mirror, Shape, StagingStats, State, Toward, Wait};
use crate::gpu::driver::{DevicePtr, GpuDriver, GpuError};
use crate::transport::target::{RawMemory, RecvTarget};

#[derive(Default)]
struct Segment {
    /// Slots handed out, received into, and given back since the segment was last reset.
    assigned: usize,
    received: usize,
    released: usize,
    /// No more slots from this segment: copy it once what was handed out is received.
    sealed: bool,
    /// The segment's copy is queued (the event says when it is done).
    copying: bool,
}

impl Segment {
    fn ready_to_copy(&self, per_segment: usize) -> bool {
        !self.copying
            && self.assigned > 0
            && self.received == self.assigned
            && (self.sealed || self.assigned == per_segment)
    }
}

/// A worker's staged reads into a device region of `region_len()` bytes at `device`.
pub struct ReadPipeline {
    mirror: Mirror,
    state: Mutex<State<Segment>>,
    changes: Changes,
}

/// One slot of the arena, handed to one read. Dropping it gives the slot back (a read that
/// failed counts as received: its segment is copied anyway, with whatever the slot held).
pub struct Slot {
    pipeline: Arc<ReadPipeline>,
    segment: usize,
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
        (self.segment * self.pipeline.mirror.shape.per_segment + self.index)
            * self.pipeline.mirror.shape.unit
    }

    /// The read is in the slot: the segment may go to the GPU.
    pub fn received(&mut self) -> Result<(), GpuError> {
        if !self.received {
            self.received = true;
            self.pipeline.on_received(self.segment)?;
        }
        Ok(())
    }

    /// Waits until the slot's data is in the GPU (sealing its segment so it goes now).
    pub async fn landed(&mut self) -> Result<(), GpuError> {
        self.received()?;
        self.pipeline.seal_and_wait(self.segment).await
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.pipeline.on_released(self.segment, self.received);
    }
}

impl ReadPipeline {
    /// A pipeline for reads of `shape.unit` bytes into the device region at `device`
    /// (`shape.region_len()` bytes).
    pub fn new(
        driver: Arc<dyn GpuDriver>,
        device: DevicePtr,
        shape: Shape,
    ) -> Result<Arc<ReadPipeline>, GpuError> {
        Ok(Arc::new(ReadPipeline {
            mirror: Mirror::new(driver, device, shape)?,
            state: Mutex::new(State::new(shape.segments)),
            changes: Changes::default(),
        }))
    }

    /// The next slot, once one is free.
    pub async fn slot(self: &Arc<Self>) -> Result<Slot, GpuError> {
        let mut waited = false;
        loop {
            match self.take_slot()? {
                Ok(slot) => return Ok(slot),
                Err(wait) => {
                    wait.for_slot(&self.mirror, &self.changes, &mut waited)
                        .await?;
                }
            }
        }
    }

    /// The next slot if one is free now (None: `slot` would wait).
    pub fn try_slot(self: &Arc<Self>) -> Result<Option<Slot>, GpuError> {
        Ok(self.take_slot()?.ok())
    }

    /// The next slot if one is free now, else what to wait for.
    fn take_slot(self: &Arc<Self>) -> Result<Result<Slot, Wait<'_>>, GpuError> {
        loop {
            let mut state = self.state.lock().unwrap();
            state.check()?;
            let h = state.active;
            let segment = &mut state.segments[h];
            if !segment.sealed && segment.assigned < self.mirror.shape.per_segment {
                let index = segment.assigned;
                segment.assigned += 1;
                return Ok(Ok(self.make_slot(h, index)));
            }
            // The active segment is full or sealed: switch to the next free one, in ring
            // order. Not only the next: one slow read would hold up every other.
            let n = self.mirror.events.len();
            let (mut free, mut copying) = (None, None);
            for other in (1..n).map(|i| (h + i) % n) {
                let o = &state.segments[other];
                let all_back = o.copying && o.released == o.assigned;
                if o.assigned == 0
                    || (all_back && self.mirror.driver.is_done(self.mirror.events[other])?)
                {
                    free = Some(other);
                    break;
                }
                if all_back {
                    copying = copying.or(Some(other));
                }
            }
            let wait = match (free, copying) {
                (Some(other), _) => {
                    state.segments[other] = Segment::default();
                    state.active = other;
                    continue;
                }
                (None, Some(other)) => Wait::Copy(other),
                // Reads of every other segment are still out: wait for one to come back.
                (None, None) => Wait::Change(self.changes.listen()),
            };
            return Ok(Err(wait));
        }
    }

    /// What staging cost so far.
    pub fn stats(&self) -> StagingStats {
        self.mirror.stats()
    }

    fn make_slot(self: &Arc<Self>, segment: usize, index: usize) -> Slot {
        let offset = (segment * self.mirror.shape.per_segment + index) * self.mirror.shape.unit;
        let memory: Arc<dyn RawMemory> = self.mirror.arena.clone();
        // SAFETY: the slot's range belongs to this Slot alone until it is released, and the
        // segment is not copied before every slot of it is received.
        let target = unsafe { RecvTarget::new(memory, offset, self.mirror.shape.unit) };
        Slot {
            pipeline: self.clone(),
            segment,
            index,
            target,
            received: false,
        }
    }

    fn on_received(&self, h: usize) -> Result<(), GpuError> {
        let mut state = self.state.lock().unwrap();
        state.segments[h].received += 1;
        self.copy_if_ready(&mut state, h)
    }

    /// A slot goes back (received first, if it was not: one lock for both).
    fn on_released(&self, h: usize, received: bool) {
        let mut state = self.state.lock().unwrap();
        if !received {
            state.segments[h].received += 1;
            let _ = self.copy_if_ready(&mut state, h);
        }
        state.segments[h].released += 1;
        drop(state);
        self.changes.tell();
    }

    /// Queues the segment's copy to the device once all its slots are received.
    fn copy_if_ready(&self, state: &mut State<Segment>, h: usize) -> Result<(), GpuError> {
        if !state.segments[h].ready_to_copy(self.mirror.shape.per_segment) {
            return Ok(());
        }
        let len = state.segments[h].assigned * self.mirror.shape.unit;
        // SAFETY: every slot of the range is received (its read is done) and is not handed out
        // again before the segment's event says the copy is done.
        unsafe { self.mirror.copy_segment(h, len, Toward::Device) }
            .map_err(|e| state.fail(e, &self.changes))?;
        state.segments[h].copying = true;
        self.changes.tell();
        Ok(())
    }

    /// Seals segment `h` (no more slots from it) and waits until its copy is done.
    async fn seal_and_wait(&self, h: usize) -> Result<(), GpuError> {
        loop {
            let wait = {
                let mut state = self.state.lock().unwrap();
                state.check()?;
                state.segments[h].sealed = true;
                if !state.segments[h].copying {
                    self.copy_if_ready(&mut state, h)?;
                }
                match state.segments[h].copying {
                    true => Wait::Copy(h),
                    // Reads of the segment are still out.
                    false => Wait::Change(self.changes.listen()),
                }
            };
            if wait.until(&self.mirror, &self.changes).await? {
                return Ok(());
            }
        }
    }

    /// Copies what is received and not yet copied, and waits for every copy: the data of all
    /// reads so far is in the GPU. Slots still handed out must be received or dropped first.
    pub async fn finish(&self) -> Result<(), GpuError> {
        for h in 0..self.mirror.events.len() {
            let pending = {
                let state = self.state.lock().unwrap();
                let segment = &state.segments[h];
                segment.assigned > 0 && (segment.copying || segment.received == segment.assigned)
            };
            if pending {
                self.seal_and_wait(h).await?;
            }
        }
        Ok(())
    }
}
