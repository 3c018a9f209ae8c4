//! The log of degraded writes (see `meta`): slots claimed by writes to stripes with a lost
//! data member, their records written to every member left before the stripe, freed once the
//! write is durable and the bitmap's tail has moved past them; and the replay at assembly.

use std::collections::BTreeMap;

use bytes::Bytes;
use futures_util::future::join_all;

use super::meta::{self, Record, LOG_SLOTS};
use super::volume::{lost_data, MemberState, Volume};
use crate::backend::DriveError;

/// A claimed slot: its record's sequence number, and whether the write it logs is done.
#[derive(Clone, Copy)]
struct Slot {
    seq: u64,
    done: bool,
}

/// The slots (None: free).
pub(super) struct Log {
    slots: Vec<Option<Slot>>,
    next_seq: u64,
}

impl Log {
    /// `last_seq`: the highest sequence number the members hold (new ones go above).
    pub(super) fn new(last_seq: u64) -> Log {
        Log {
            slots: vec![None; LOG_SLOTS],
            next_seq: last_seq + 1,
        }
    }

    /// Records below this are done: the lowest in a slot (but those in `freeing`), or the next
    /// to come.
    fn tail(&self, freeing: &[usize]) -> u64 {
        self.slots
            .iter()
            .enumerate()
            .filter(|(i, _)| !freeing.contains(i))
            .filter_map(|(_, s)| s.map(|s| s.seq))
            .min()
            .unwrap_or(self.next_seq)
    }
}

impl Volume {
    /// The data strips of `stripe` whose member does not carry them for sure (failed, or being
    /// rebuilt): what a write there must log.
    pub(super) fn unsure_data(&self, stripe: u64) -> Vec<usize> {
        (0..self.layout.data_strips())
            .filter(|&j| {
                let m = self.layout.member_of(stripe, j);
                self.members[m].state() != MemberState::Active
            })
            .collect()
    }

    pub(super) fn log_tail(&self) -> u64 {
        self.log.lock().unwrap().tail(&[])
    }

    /// Puts `record` (its sequence number and generation filled in here) in a free slot on every
    /// member left, durably; the slot, to free with `record_done` once the write is.
    pub(super) async fn write_record(&self, mut record: Record) -> Result<usize, DriveError> {
        let (slot, seq) = self.claim_slot().await?;
        record.seq = seq;
        record.generation = self.generation();
        let block = record.encode(meta::uuid_tag(&self.uuid));
        let offset = meta::slot_offset(slot);
        let written = join_all(
            (0..self.members.len()).map(|i| self.member_write_any(i, offset, block.clone(), true)),
        )
        .await;
        if !written.iter().any(|&w| w) {
            self.record_done(slot);
            return Err(lost_data(offset, block.len() as u64));
        }
        Ok(slot)
    }

    /// The write of the record in `slot` is done (its slot is freed once durable).
    pub(super) fn record_done(&self, slot: usize) {
        if let Some(s) = &mut self.log.lock().unwrap().slots[slot] {
            s.done = true;
        }
        self.log_freed.notify_waiters();
    }

    async fn claim_slot(&self) -> Result<(usize, u64), DriveError> {
        loop {
            let wait = {
                let mut log = self.log.lock().unwrap();
                if let Some(i) = log.slots.iter().position(Option::is_none) {
                    let seq = log.next_seq;
                    log.next_seq += 1;
                    log.slots[i] = Some(Slot { seq, done: false });
                    return Ok((i, seq));
                }
                if log.slots.iter().flatten().any(|s| s.done) {
                    None
                } else {
                    Some(self.log_freed.notified())
                }
            };
            match wait {
                Some(freed) => freed.await,
                None => self.free_done_slots().await?,
            }
        }
    }

    /// Frees the slots whose writes are done: the members are flushed (the writes durable),
    /// the bitmap's tail moved past them, then they are free.
    async fn free_done_slots(&self) -> Result<(), DriveError> {
        let _persist = self.intent.persist.lock().await;
        let batch: Vec<usize> = {
            let log = self.log.lock().unwrap();
            (0..LOG_SLOTS)
                .filter(|&i| log.slots[i].is_some_and(|s| s.done))
                .collect()
        };
        if batch.is_empty() {
            return Ok(());
        }
        self.flush_members().await?;
        let tail = self.log.lock().unwrap().tail(&batch);
        self.write_bitmap_tail(&self.intent.snapshot(), tail)
            .await?;
        let mut log = self.log.lock().unwrap();
        for i in batch {
            log.slots[i] = None;
        }
        drop(log);
        self.log_freed.notify_waiters();
        Ok(())
    }

    /// The records of generation `generation` the members hold, from `tail` on, by sequence
    /// number; and the highest sequence number seen.
    pub(super) async fn read_log(&self, tail: u64, generation: u64) -> (Vec<Record>, u64) {
        let tag = meta::uuid_tag(&self.uuid);
        let len = (meta::DATA_OFFSET - meta::LOG_OFFSET) as usize;
        let mut found: BTreeMap<u64, Record> = BTreeMap::new();
        let mut last = 0;
        let areas = join_all(
            self.members
                .iter()
                .filter(|m| m.state() == MemberState::Active)
                .map(|m| async move { m.drive().read(meta::LOG_OFFSET, len).await }),
        )
        .await;
        for area in areas.into_iter().flatten() {
            for slot in 0..LOG_SLOTS {
                let at = (meta::slot_offset(slot) - meta::LOG_OFFSET) as usize;
                let Some(r) = Record::decode(&area[at..at + meta::LOG_SLOT as usize], tag) else {
                    continue;
                };
                last = last.max(r.seq);
                if r.generation == generation && r.seq >= tail {
                    found.entry(r.seq).or_insert(r);
                }
            }
        }
        (found.into_values().collect(), last)
    }

    /// Makes the parity of a record's rows again from the data members hold there and the lost
    /// rows it carries, if its lost members are still the ones lost.
    pub(super) async fn replay(&self, r: &Record) -> Result<bool, DriveError> {
        let l = &self.layout;
        if r.stripe >= l.stripes || r.r0 + r.rows > l.strip || r.lost != self.unsure_data(r.stripe)
        {
            return Ok(false);
        }
        let _lock = self.lock_stripes(&[r.stripe]).await;
        let offset = l.member_offset(r.stripe, r.r0);
        let rows = r.rows as usize;
        let strips = (0..l.data_strips()).map(|j| async move {
            match r.lost.iter().position(|&x| x == j) {
                Some(k) => Some(Bytes::copy_from_slice(&r.data[k * rows..(k + 1) * rows])),
                None => {
                    let m = l.member_of(r.stripe, j);
                    self.member_read(m, r.stripe, offset, rows).await
                }
            }
        });
        let data: Vec<Bytes> = join_all(strips)
            .await
            .into_iter()
            .collect::<Option<_>>()
            .ok_or_else(|| lost_data(offset, rows as u64))?;
        let refs: Vec<&[u8]> = data.iter().map(|d| &d[..]).collect();
        let writes = self.parity_of(r.stripe, &refs);
        self.write_members(r.stripe, offset, writes, false).await?;
        Ok(true)
    }
}
