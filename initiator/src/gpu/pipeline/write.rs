//! Staged writes: a segment of the device region comes to the arena in one device-to-host copy;
//! each write then sends its slot straight from the arena, with no copy of its own. The segment
//! after the active one is fetched ahead while writes use the active one (once its last slot is
//! sent: the transport lets go of the data), so writers seldom wait for a copy, and data is sent
//! soon after it arrived.

use std::sync::{Arc, Mutex};

use super::{Changes, Mirror, PinnedArena, Shape, StagingStats, State, Toward, Wait};
use crate::gpu::driver::{DevicePtr, GpuDriver, GpuError};
use crate::gpu::staged::wait_for;
use crate::transport::target::RawMemory;
use bytes::Bytes;

#[derive(Default, Clone, Copy, PartialEq, Eq)]
enum Fetch {
    /// The arena segment does not hold the device's data.
    #[default]
    Stale,
    /// Its copy is queued (the segment's event says when it is done).
    Fetching,
    Ready,
}

#[derive(Default)]
struct Segment {
    /// Slots handed out, and given back (their data sent), since the segment was fetched.
    assigned: usize,
    released: usize,
    fetch: Fetch,
    /// Every slot of the fetched data was handed out: fetch again before the next use.
    consumed: bool,
}

/// A worker's staged writes from a device region of `region_len` bytes at `device`.
pub struct WritePipeline {
    mirror: Mirror,
    state: Mutex<State<Segment>>,
    changes: Changes,
}

/// One slot, holding the device's data of `device_offset()`. `into_bytes` gives it as a write
/// sends it; the slot goes back when the last reference to those bytes goes.
pub struct WriteSlot {
    pipeline: Arc<WritePipeline>,
    segment: usize,
    index: usize,
    /// Gives the slot back when dropped (moved into the bytes by `into_bytes`).
    release: Option<Release>,
}

struct Release {
    pipeline: Arc<WritePipeline>,
    segment: usize,
}

impl Drop for Release {
    fn drop(&mut self) {
        self.pipeline.on_released(self.segment);
    }
}

/// The bytes of a slot, owned by the `Bytes` a write sends.
struct SlotBytes {
    arena: Arc<PinnedArena>,
    offset: usize,
    len: usize,
    _release: Release,
}

impl AsRef<[u8]> for SlotBytes {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: in the arena; the segment is not fetched again (written) until this slot is
        // released, which happens when this value drops.
        unsafe { std::slice::from_raw_parts(self.arena.ptr().add(self.offset), self.len) }
    }
}

impl WriteSlot {
    /// Where the slot's data comes from in the device region, from its start.
    pub fn device_offset(&self) -> usize {
        (self.segment * self.pipeline.mirror.shape.per_segment + self.index)
            * self.pipeline.mirror.shape.unit
    }

    /// Copies the slot's part of the device region again (the caller changed it since the
    /// segment was fetched) and waits for it.
    pub async fn refresh(&mut self) -> Result<(), GpuError> {
        let p = &self.pipeline;
        let offset = self.device_offset();
        let event = p.mirror.driver.new_event()?;
        // SAFETY: the slot is ours (not sent yet); the copy is waited for below.
        let queued = unsafe { p.mirror.copy(offset, p.mirror.shape.unit, Toward::Host) }
            .and_then(|_| p.mirror.driver.record(event, p.mirror.stream));
        let done = match queued {
            Ok(()) => wait_for(&p.mirror.driver, event).await.map(|_| ()),
            Err(e) => Err(e),
        };
        // SAFETY: waited for (or nothing recorded).
        unsafe { p.mirror.driver.destroy_event(event) };
        done
    }

    /// The slot's data, as a write sends it.
    pub fn into_bytes(mut self) -> Bytes {
        let owner = SlotBytes {
            arena: self.pipeline.mirror.arena.clone(),
            offset: self.device_offset(),
            len: self.pipeline.mirror.shape.unit,
            _release: self.release.take().expect("released once"),
        };
        Bytes::from_owner(owner)
    }
}

impl WritePipeline {
    /// A pipeline for writes of `shape.unit` bytes from the device region at `device`
    /// (`shape.region_len()` bytes).
    pub fn new(
        driver: Arc<dyn GpuDriver>,
        device: DevicePtr,
        shape: Shape,
    ) -> Result<Arc<WritePipeline>, GpuError> {
        Ok(Arc::new(WritePipeline {
            mirror: Mirror::new(driver, device, shape)?,
            state: Mutex::new(State::new(shape.segments)),
            changes: Changes::default(),
        }))
    }

    /// The next slot, once one is free and holds the device's data.
    pub async fn slot(self: &Arc<Self>) -> Result<WriteSlot, GpuError> {
        let mut waited = false;
        loop {
            match self.take_slot()? {
                Ok(slot) => return Ok(slot),
                // Then looked at again: a done copy makes its segment ready.
                Err(wait) => {
                    wait.for_slot(&self.mirror, &self.changes, &mut waited)
                        .await?;
                }
            }
        }
    }

    /// The next slot if one is free and holds the device's data now (None: `slot` would wait).
    pub fn try_slot(self: &Arc<Self>) -> Result<Option<WriteSlot>, GpuError> {
        Ok(self.take_slot()?.ok())
    }

    /// The next slot if one is ready now, else what to wait for.
    fn take_slot(self: &Arc<Self>) -> Result<Result<WriteSlot, Wait<'_>>, GpuError> {
        loop {
            let mut state = self.state.lock().unwrap();
            state.check()?;
            let h = state.active;
            let wait = if state.segments[h].assigned < self.mirror.shape.per_segment {
                match state.segments[h].fetch {
                    Fetch::Ready => {
                        let segment = &mut state.segments[h];
                        let index = segment.assigned;
                        segment.assigned += 1;
                        segment.consumed = segment.assigned == self.mirror.shape.per_segment;
                        return Ok(Ok(WriteSlot {
                            pipeline: self.clone(),
                            segment: h,
                            index,
                            release: Some(Release {
                                pipeline: self.clone(),
                                segment: h,
                            }),
                        }));
                    }
                    Fetch::Fetching => {
                        if self.mirror.driver.is_done(self.mirror.events[h])? {
                            state.segments[h].fetch = Fetch::Ready;
                            continue;
                        }
                        Wait::Copy(h)
                    }
                    Fetch::Stale => {
                        self.fetch(&mut state, h)?;
                        Wait::Copy(h)
                    }
                }
            } else {
                // The active segment is used up: go on with the other once its slots are all
                // sent (usually it is being fetched again by then, see `on_released`).
                let other = self.next(h);
                let o = &state.segments[other];
                if o.released == o.assigned {
                    state.active = other;
                    self.refetch_if_done(&mut state, other)?;
                    let o = &mut state.segments[other];
                    o.assigned = 0;
                    o.released = 0;
                    self.refetch_if_done(&mut state, self.next(other))?;
                    continue;
                }
                // Writes of the next segment are still out: wait for one to be sent.
                Wait::Change(self.changes.listen())
            };
            return Ok(Err(wait));
        }
    }

    /// What staging cost so far.
    pub fn stats(&self) -> StagingStats {
        self.mirror.stats()
    }

    /// Queues the copy of segment `h` of the device region into the arena.
    fn fetch(&self, state: &mut State<Segment>, h: usize) -> Result<(), GpuError> {
        let len = self.mirror.shape.per_segment * self.mirror.shape.unit;
        // SAFETY: no slot of the segment is handed out or referenced (all sent and released), and
        // nobody reads it before the segment's event says the copy is done.
        unsafe { self.mirror.copy_segment(h, len, Toward::Host) }
            .map_err(|e| state.fail(e, &self.changes))?;
        state.segments[h].fetch = Fetch::Fetching;
        state.segments[h].consumed = false;
        Ok(())
    }

    /// The segment writes go on with after `h`.
    fn next(&self, h: usize) -> usize {
        (h + 1) % self.mirror.events.len()
    }

    /// Fetches segment `h` again if its data was all handed out and sent. Only the segment
    /// after the active one is fetched ahead (when writes move to a segment, or as its last
    /// slot is sent): fetched earlier, its data would wait in the arena while the CPU caches
    /// fill with other traffic, and sending it would read it from memory rather than cache.
    fn refetch_if_done(&self, state: &mut State<Segment>, h: usize) -> Result<(), GpuError> {
        let segment = &state.segments[h];
        if segment.consumed
            && segment.released == segment.assigned
            && segment.fetch != Fetch::Fetching
        {
            self.fetch(state, h)?;
        }
        Ok(())
    }

    fn on_released(&self, h: usize) {
        let mut state = self.state.lock().unwrap();
        state.segments[h].released += 1;
        // Used up and all sent, and writes go on with it next: fetch it again now.
        if h == self.next(state.active) {
            let _ = self.refetch_if_done(&mut state, h);
        }
        drop(state);
        self.changes.tell();
    }
}

impl Drop for WriteSlot {
    fn drop(&mut self) {
        // Not sent: `release` (still here) gives the slot back as it drops.
        self.release.take();
    }
}
