//! The staged path: a ring of pinned host buffers between the network and the GPU. A read is
//! received into one buffer, then copied to the device asynchronously on the ring's stream
//! while the next read is received into the next buffer; a buffer is reused only once the
//! event recorded after its copy says the copy is done. Writes run the other way: device to
//! buffer, wait, send.
//!
//! The buffers are `BytesMut` so the transports receive straight into them (NVMe/TCP reads
//! land in the caller's buffer with no copy). Each starts on a page boundary and is pinned
//! once; a buffer that comes back from the transport as a different allocation (a retry on
//! another path reads into a fresh one) is copied into a new pinned buffer, and counted.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use super::driver::{DevicePtr, Event, GpuDriver, GpuError, Stream};

const PAGE: usize = 4096;

/// One buffer of the ring.
struct Slot {
    /// None while the transport has it.
    buf: Option<BytesMut>,
    /// A write's data, back from the transport, which may still hold a reference for a moment
    /// (its sender drops it after the completion can arrive).
    sent: Option<Bytes>,
    /// Where the pinned memory starts, and how much.
    pinned: (usize, usize),
    /// Recorded after the last copy from or to this buffer.
    event: Event,
    copying: bool,
}

pub struct StagingRing {
    driver: Arc<dyn GpuDriver>,
    stream: Stream,
    slots: Vec<Slot>,
    next: usize,
    chunk: usize,
    /// Buffers the transport gave back as other allocations (copied into pinned memory).
    restaged: u64,
}

// SAFETY: the raw handles are driver objects usable from any thread; the BytesMut are owned.
unsafe impl Send for StagingRing {}

/// A zeroed buffer of `len` bytes' capacity whose data starts on a page boundary.
fn page_aligned(len: usize) -> BytesMut {
    let cap = len.max(1).next_multiple_of(PAGE);
    let mut whole = BytesMut::zeroed(cap + PAGE);
    let skip = whole.as_ptr().align_offset(PAGE);
    let mut buf = whole.split_off(skip);
    drop(whole);
    buf.clear();
    buf
}

/// Waits for `event` without blocking the runtime: a copy is usually done by the time its
/// buffer comes round again, so look a few times, then wait on a blocking thread (true: it
/// took one).
pub(crate) async fn wait_for(driver: &Arc<dyn GpuDriver>, event: Event) -> Result<bool, GpuError> {
    for _ in 0..16 {
        if driver.is_done(event)? {
            return Ok(false);
        }
        tokio::task::yield_now().await;
    }
    let d = driver.clone();
    tokio::task::spawn_blocking(move || d.wait(event))
        .await
        .map_err(|e| GpuError(format!("waiting for a copy: {e}")))??;
    Ok(true)
}

impl StagingRing {
    /// A ring of `slots` (at least 2: double buffering) pinned buffers of `chunk` bytes.
    pub fn new(
        driver: Arc<dyn GpuDriver>,
        slots: usize,
        chunk: usize,
    ) -> Result<StagingRing, GpuError> {
        let stream = driver.new_stream()?;
        let mut ring = StagingRing {
            driver,
            stream,
            slots: Vec::new(),
            next: 0,
            chunk,
            restaged: 0,
        };
        for _ in 0..slots.max(2) {
            let slot = ring.new_slot(page_aligned(chunk))?;
            ring.slots.push(slot);
        }
        Ok(ring)
    }

    fn new_slot(&self, mut buf: BytesMut) -> Result<Slot, GpuError> {
        buf.clear();
        // Whole pages: the buffer starts on one (`page_aligned`), and no other buffer shares them.
        let pinned = (buf.as_ptr() as usize, buf.capacity() / PAGE * PAGE);
        // SAFETY: the buffer's memory lives in the slot until it is unpinned (Drop, or
        // replaced in `put_back` after unpinning).
        unsafe { self.driver.pin(buf.as_mut_ptr(), pinned.1)? };
        let event = match self.driver.new_event() {
            Ok(e) => e,
            Err(e) => {
                // SAFETY: just pinned, unused.
                unsafe { self.driver.unpin(pinned.0 as *mut u8) };
                return Err(e);
            }
        };
        Ok(Slot {
            buf: Some(buf),
            sent: None,
            pinned,
            event,
            copying: false,
        })
    }

    /// Largest piece one buffer carries.
    pub fn chunk(&self) -> usize {
        self.chunk
    }

    pub fn restaged(&self) -> u64 {
        self.restaged
    }

    /// Takes the next buffer, once the copy that last used it is done.
    pub async fn take(&mut self) -> Result<(usize, BytesMut), GpuError> {
        let index = self.next;
        self.next = (self.next + 1) % self.slots.len();
        let slot = &mut self.slots[index];
        if slot.copying {
            wait_for(&self.driver, slot.event).await?;
            slot.copying = false;
        }
        if let Some(mut sent) = slot.sent.take() {
            let mut tries = 0;
            let buf = loop {
                match sent.try_into_mut() {
                    Ok(buf) => break buf,
                    // Still shared after a while: the slot gets a new pinned buffer.
                    Err(_) if tries == 64 => break BytesMut::new(),
                    Err(shared) => sent = shared,
                }
                tries += 1;
                tokio::task::yield_now().await;
            };
            self.put_back(index, buf)?;
        }
        // A buffer lost with a failed transfer (or never given back) is replaced: the
        // transport fills a fresh one, which `put_back` copies into pinned memory.
        let buf = self.slots[index].buf.take().unwrap_or_default();
        Ok((index, buf))
    }

    /// Puts `buf` back in slot `index` as a pinned buffer: as is when it is the slot's own
    /// memory, else its data copied into the slot's memory (or a new pinned buffer).
    fn put_back(&mut self, index: usize, buf: BytesMut) -> Result<(), GpuError> {
        let slot = &mut self.slots[index];
        let (start, cap) = slot.pinned;
        if buf.as_ptr() as usize == start && buf.len() <= cap {
            slot.buf = Some(buf);
            return Ok(());
        }
        self.restaged += 1;
        let mut own = page_aligned(self.chunk.max(buf.len()));
        own.extend_from_slice(&buf);
        let fresh = self.new_slot(own)?;
        let old = std::mem::replace(&mut self.slots[index], fresh);
        // SAFETY: the old slot's copy is done (`take` waited) and nothing holds its memory.
        unsafe {
            self.driver.unpin(old.pinned.0 as *mut u8);
            self.driver.destroy_event(old.event);
        }
        Ok(())
    }

    /// Queues the copy of `buf` (taken from slot `index`, filled by a read) to device memory
    /// at `dst`; the buffer returns to its slot, reused once the copy is done.
    pub fn to_device(
        &mut self,
        index: usize,
        buf: BytesMut,
        dst: DevicePtr,
    ) -> Result<(), GpuError> {
        self.put_back(index, buf)?;
        let slot = &mut self.slots[index];
        let buf = slot.buf.as_ref().expect("just put back");
        // SAFETY: the buffer stays in the slot, untouched, until `take` has waited for the
        // event recorded below; `dst` is the caller's live allocation.
        unsafe {
            self.driver
                .copy_to_device(self.stream, dst, buf.as_ptr(), buf.len())?;
        }
        self.driver.record(slot.event, self.stream)?;
        slot.copying = true;
        Ok(())
    }

    /// Copies `len` bytes of device memory at `src` into `buf` (taken from slot `index`) and
    /// waits for the copy: the buffer, frozen, is what a write sends. Give it back with
    /// `sent` afterwards.
    pub async fn from_device(
        &mut self,
        index: usize,
        mut buf: BytesMut,
        src: DevicePtr,
        len: usize,
    ) -> Result<Bytes, GpuError> {
        buf.clear();
        if buf.capacity() < len {
            return Err(GpuError(format!(
                "a {len}-byte piece is larger than the {}-byte staging buffers",
                self.chunk
            )));
        }
        // SAFETY: capacity checked; the bytes are initialized (buffers are allocated zeroed
        // and only ever hold data), and the copy below overwrites them.
        unsafe { buf.set_len(len) };
        let slot = &mut self.slots[index];
        // SAFETY: the buffer is ours until the event below says the copy is done, which we
        // wait for before anyone reads it.
        unsafe {
            self.driver
                .copy_to_host(self.stream, buf.as_mut_ptr(), src, len)?;
        }
        self.driver.record(slot.event, self.stream)?;
        wait_for(&self.driver, slot.event).await?;
        Ok(buf.freeze())
    }

    /// Returns a buffer `from_device` gave out, once its command completed; `take` reclaims
    /// it (the transport may hold a reference a moment longer).
    pub fn sent(&mut self, index: usize, data: Bytes) {
        self.slots[index].sent = Some(data);
    }

    /// Waits until every queued copy is done (data read has landed in the GPU).
    pub async fn drain(&mut self) -> Result<(), GpuError> {
        for slot in &mut self.slots {
            if slot.copying {
                wait_for(&self.driver, slot.event).await?;
                slot.copying = false;
            }
        }
        Ok(())
    }
}

impl Drop for StagingRing {
    fn drop(&mut self) {
        // The copies must be done before their memory is unpinned and freed.
        let _ = self.driver.sync(self.stream);
        for slot in &self.slots {
            // SAFETY: the stream is idle; nothing uses the buffers or events.
            unsafe {
                self.driver.unpin(slot.pinned.0 as *mut u8);
                self.driver.destroy_event(slot.event);
            }
        }
        // SAFETY: synchronized above.
        unsafe { self.driver.destroy_stream(self.stream) };
    }
}
