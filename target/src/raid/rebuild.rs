//! Work a volume does besides serving I/O: rebuilding a spare in a failed member's place, and
//! scrubbing (checking that parity, or the mirror copies, agree with the data, and repairing
//! where they do not).
//!
//! Both go through the stripes in order, a batch at a time under the batch's stripe locks, so
//! hosts' I/O goes on between batches. A rebuilding member holds the stripes below its mark
//! (`Member::rebuilt`): reads and writes use it there and treat it as lost above.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use futures_util::future::join_all;

use super::gf;
use super::meta::{self, Record, Superblock};
use super::volume::{lost_data, MemberState, Slot, Volume, REBUILDING};
use crate::backend::{Drive, DriveError};

/// Stripes per batch: each takes their locks at once.
const BATCH: u64 = 16;

/// A rebuild under way.
#[derive(Clone, Debug)]
pub struct RebuildProgress {
    pub member: usize,
    pub drive: String,
    pub started: Instant,
    /// Stripes done when it started (0: from the start).
    pub total_stripes: u64,
}

/// What a scrub found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScrubReport {
    pub running: bool,
    pub checked_stripes: u64,
    pub total_stripes: u64,
    /// Stripes whose parity or mirror copies disagreed with the data.
    pub mismatches: u64,
    pub repaired: u64,
    /// Seconds since the epoch.
    pub started: u64,
    pub finished: Option<u64>,
    /// Why it stopped early.
    pub error: Option<String>,
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Volume {
    /// Puts `drive` in failed member `i`'s place, to be rebuilt: it gets the member's
    /// superblock and the bitmap, and holds nothing yet.
    pub async fn begin_rebuild(
        &self,
        i: usize,
        id: &str,
        drive: std::sync::Arc<dyn Drive>,
    ) -> Result<(), String> {
        let m = &self.members()[i];
        if m.state() != MemberState::Failed {
            return Err(format!("member {i} is not failed"));
        }
        if drive.info().block_size != self.info().block_size
            || drive.info().capacity < self.layout.member_offset(self.layout.stripes, 0)
        {
            return Err(format!(
                "drive {id} is smaller than the members or has another block size"
            ));
        }
        let sb = Superblock::new(&self.name, &self.uuid, &self.layout, i, id).encode();
        let bitmap = meta::encode_bitmap(
            self.intent.region_stripes,
            &self.intent.snapshot(),
            self.log_tail(),
        );
        async {
            drive.write(meta::SUPER_OFFSET, sb, false).await?;
            drive.write(meta::BITMAP_OFFSET, bitmap, false).await?;
            drive.flush().await
        }
        .await
        .map_err(|e: DriveError| format!("drive {id}: {e}"))?;
        *m.slot.write().unwrap() = Slot {
            id: id.to_string(),
            drive,
        };
        m.rebuilt.store(0, Ordering::Release);
        m.state.store(REBUILDING, Ordering::Release);
        *self.rebuild.lock().unwrap() = Some(RebuildProgress {
            member: i,
            drive: id.to_string(),
            started: Instant::now(),
            total_stripes: self.layout.stripes,
        });
        Ok(())
    }

    /// The rebuild under way, if any.
    pub fn rebuild_progress(&self) -> Option<RebuildProgress> {
        self.rebuild.lock().unwrap().clone()
    }

    /// Rebuilds member `i` (see `begin_rebuild`; after a restart, a member recorded as
    /// rebuilding), at most `rebuild_limit` bytes per second. The member is active when it
    /// returns Ok, with the generation that makes: writes that meet no lost member write no log
    /// record from then on, so they are acknowledged once that is on record
    /// (`change_recorded`).
    pub async fn rebuild(&self, i: usize) -> Result<u64, String> {
        let l = self.layout.clone();
        let m = &self.members()[i];
        if m.state() != MemberState::Rebuilding {
            return Err(format!("member {i} is not being rebuilt"));
        }
        if !l.level.redundant() {
            return Err("raid0 has nothing to rebuild from".into());
        }
        {
            let mut p = self.rebuild.lock().unwrap();
            if p.is_none() {
                *p = Some(RebuildProgress {
                    member: i,
                    drive: m.id(),
                    started: Instant::now(),
                    total_stripes: l.stripes,
                });
            }
        }
        let started = Instant::now();
        let mut written = 0u64;
        let mut s = m.rebuilt_stripes();
        let outcome = loop {
            if s >= l.stripes {
                break Ok(());
            }
            if self.stopped() {
                break Err("the volume stopped".to_string());
            }
            let end = (s + BATCH).min(l.stripes);
            // Paced before the batch, not after: what is rebuilt never runs ahead of the limit
            // (a batch written first and waited for afterwards showed 1.5x the limit meanwhile).
            let limit = self.rebuild_limit.load(Ordering::Relaxed);
            if limit > 0 {
                let next = written + (end - s) * l.strip;
                let due = started + Duration::from_secs_f64(next as f64 / limit as f64);
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    crate::timer::sleep(wait).await;
                }
            }
            let stripes: Vec<u64> = (s..end).collect();
            let done = {
                let _locks = self.lock_stripes(&stripes).await;
                let parts = join_all(stripes.iter().map(|&st| self.member_part(i, st))).await;
                let mut ok = true;
                for (&st, part) in stripes.iter().zip(parts) {
                    let Ok(part) = part else {
                        ok = false;
                        break;
                    };
                    written += part.len() as u64;
                    let offset = l.member_offset(st, 0);
                    if !self.member_write_any(i, offset, part, false).await {
                        ok = false;
                        break;
                    }
                }
                if ok {
                    m.rebuilt.store(end, Ordering::Release);
                }
                ok
            };
            if !done {
                break Err(if m.is_failed() {
                    format!("the drive being rebuilt, {}, failed", m.id())
                } else {
                    "the members left cannot make up the lost one".to_string()
                });
            }
            s = end;
            if self.rebuild_limit.load(Ordering::Relaxed) == 0 {
                tokio::task::yield_now().await;
            }
        };
        *self.rebuild.lock().unwrap() = None;
        outcome?;
        if let Err(e) = m.drive().flush().await {
            self.fail(i, &format!("flush after the rebuild failed: {e}"));
            return Err(format!("flush after the rebuild failed: {e}"));
        }
        let _ = m.state.compare_exchange(
            REBUILDING,
            super::volume::ACTIVE,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        let generation = self.next_generation();
        tracing::info!(volume = %self.name, drive = %m.id(), secs = started.elapsed().as_secs(), "rebuild done");
        Ok(generation)
    }

    /// What member `i` holds of `stripe`, made from the other members (its lock held).
    async fn member_part(&self, i: usize, stripe: u64) -> Result<Bytes, DriveError> {
        let l = &self.layout;
        let len = l.strip as usize;
        let offset = l.member_offset(stripe, 0);
        if l.level.mirrored() {
            for j in 0..l.data_strips() {
                let copies: Vec<usize> = l.copies(stripe, j).collect();
                if !copies.contains(&i) {
                    continue;
                }
                for &c in copies.iter().filter(|&&c| c != i) {
                    if let Some(b) = self.member_read(c, stripe, offset, len).await {
                        return Ok(b);
                    }
                }
            }
            return Err(self.lost_data(offset, len as u64));
        }
        let mut rows = self.gather(stripe, 0, len).await?;
        // Only what the member holds: its data strip, or the one parity it carries.
        if let Some(j) = (0..l.data_strips()).find(|&j| l.member_of(stripe, j) == i) {
            return Ok(Bytes::from(std::mem::take(&mut rows.data[j])));
        }
        let refs: Vec<&[u8]> = rows.data.iter().map(|d| &d[..]).collect();
        let b = match l.parity_members(stripe) {
            // P in a new buffer, never zeroed first.
            (Some(p), _) if p == i => gf::parity(&refs, false).0,
            _ => {
                let some: Vec<Option<&[u8]>> = refs.iter().map(|d| Some(*d)).collect();
                let mut q = vec![0u8; len];
                gf::gen_q(&some, &mut q);
                q
            }
        };
        Ok(Bytes::from(b))
    }

    /// The last scrub's report (or the one running).
    pub fn scrub_report(&self) -> Option<ScrubReport> {
        self.scrub.lock().unwrap().clone()
    }

    /// Marks a scrub as begun; false when one runs already.
    pub fn begin_scrub(&self) -> bool {
        let mut s = self.scrub.lock().unwrap();
        if s.as_ref().is_some_and(|r| r.running) {
            return false;
        }
        *s = Some(ScrubReport {
            running: true,
            total_stripes: self.layout.stripes,
            started: now(),
            ..Default::default()
        });
        true
    }

    /// Checks every stripe: parity made again from the data (or the first mirror copy) must
    /// equal what the members hold; where it does not, it is written again. Needs every member
    /// (a degraded volume has nothing to check parity against for sure). See `begin_scrub`.
    pub async fn scrub(&self) {
        let l = self.layout.clone();
        let update = |f: &dyn Fn(&mut ScrubReport)| {
            if let Some(r) = self.scrub.lock().unwrap().as_mut() {
                f(r);
            }
        };
        let mut s = 0;
        let error = loop {
            if s >= l.stripes {
                break None;
            }
            if self.stopped() {
                break Some("the volume stopped".to_string());
            }
            if self.is_degraded() {
                break Some("a member is lost: a degraded volume cannot be scrubbed".to_string());
            }
            let end = (s + BATCH).min(l.stripes);
            let stripes: Vec<u64> = (s..end).collect();
            let found = {
                let _locks = self.lock_stripes(&stripes).await;
                join_all(stripes.iter().map(|&st| self.scrub_stripe(st))).await
            };
            let mut err = None;
            for f in found {
                match f {
                    Ok(None) => {}
                    Ok(Some(repaired)) => update(&|r| {
                        r.mismatches += 1;
                        r.repaired += u64::from(repaired);
                    }),
                    Err(e) => err = Some(e.to_string()),
                }
            }
            if err.is_some() {
                break err;
            }
            update(&|r| r.checked_stripes = end);
            s = end;
            tokio::task::yield_now().await;
        };
        update(&|r| {
            r.running = false;
            r.finished = Some(now());
            r.error = error.clone();
        });
        match &error {
            None => tracing::info!(volume = %self.name, "scrub done"),
            Some(e) => tracing::warn!(volume = %self.name, "scrub stopped: {e}"),
        }
    }

    /// Checks one stripe (its lock held): None if it agrees, else whether it was repaired.
    async fn scrub_stripe(&self, stripe: u64) -> Result<Option<bool>, DriveError> {
        let l = &self.layout;
        let len = l.strip as usize;
        let offset = l.member_offset(stripe, 0);
        let mut fixes: Vec<(usize, Bytes)> = Vec::new();
        if l.level.mirrored() {
            for j in 0..l.data_strips() {
                let copies: Vec<usize> = l.copies(stripe, j).collect();
                let got = join_all(
                    copies
                        .iter()
                        .map(|&c| self.member_read(c, stripe, offset, len)),
                )
                .await;
                let Some(first) = got[0].clone() else {
                    return Err(self.lost_data(offset, len as u64));
                };
                for (c, b) in copies.iter().zip(&got).skip(1) {
                    match b {
                        Some(b) if *b == first => {}
                        Some(_) => fixes.push((*c, first.clone())),
                        None => return Err(self.lost_data(offset, len as u64)),
                    }
                }
            }
        } else if l.level.parity() > 0 {
            let rows = self.gather(stripe, 0, len).await?;
            let refs: Vec<&[u8]> = rows.data.iter().map(|d| &d[..]).collect();
            let want = self.parity_of(stripe, &refs);
            for (m, w) in want {
                match self.member_read(m, stripe, offset, len).await {
                    Some(b) if b[..] == w[..] => {}
                    Some(_) => fixes.push((m, w)),
                    None => return Err(self.lost_data(offset, len as u64)),
                }
            }
        }
        if fixes.is_empty() {
            return Ok(None);
        }
        tracing::warn!(volume = %self.name, stripe, "scrub: parity or a mirror copy disagreed with the data; repaired");
        let fixed = join_all(
            fixes
                .into_iter()
                .map(|(m, b)| self.member_write(m, stripe, offset, b, false)),
        )
        .await;
        Ok(Some(fixed.iter().all(|&f| f)))
    }

    /// Makes parity (or the mirror copies) of every stripe of the dirty regions agree with the
    /// data, then cleans the bitmap. Where a data member was lost before the stop, the log's
    /// `records` (of the current generation) give the lost rows of every write made since, and
    /// replace the parity of those rows; stripes that lost only parity are made from their data.
    /// Members found lost only now (`found_failed`) leave a parity volume unable to tell which
    /// member is right: the regions stay marked and are counted in `unsynced_regions`.
    pub(super) async fn resync_dirty(&self, found_failed: bool, records: &[Record]) {
        let dirty = self.intent.dirty_regions();
        if dirty.is_empty() {
            return;
        }
        let parity = self.layout.level.parity() > 0;
        if self.is_failed() || (parity && found_failed) {
            tracing::error!(
                volume = %self.name,
                regions = dirty.len(),
                "the volume was not shut down cleanly and lost members only now: the parity of \
                 {} regions written at the time cannot be checked; data there may be wrong",
                dirty.len()
            );
            self.unsynced_regions
                .store(dirty.len() as u64, Ordering::Relaxed);
            return;
        }
        tracing::warn!(volume = %self.name, regions = dirty.len(), records = records.len(), "resyncing the regions written when fabrikd stopped");
        let unsynced = |e: DriveError, stripe: u64| {
            tracing::error!(volume = %self.name, stripe, "resync failed: {e}");
            self.unsynced_regions.fetch_add(1, Ordering::Relaxed);
        };
        let mut replayed = 0;
        for r in records {
            if !dirty.contains(&self.intent.region_of(r.stripe)) {
                continue;
            }
            match self.replay(r).await {
                Ok(done) => replayed += usize::from(done),
                Err(e) => return unsynced(e, r.stripe),
            }
        }
        if replayed > 0 {
            tracing::warn!(volume = %self.name, replayed, "degraded writes replayed from the log");
        }
        for r in &dirty {
            for s in self.intent.stripes_of(*r, &self.layout) {
                // A stripe with lost data: the log did what there was to do.
                if parity && !self.unsure_data(s).is_empty() {
                    continue;
                }
                if let Err(e) = self.resync_stripe(s).await {
                    return unsynced(e, s);
                }
            }
        }
        let _ = self.clean_intent().await;
    }

    /// Writes parity (or the mirrors) of `stripe` again from its data.
    pub async fn resync_stripe(&self, stripe: u64) -> Result<(), DriveError> {
        let l = &self.layout;
        let _lock = self.lock_stripes(&[stripe]).await;
        let len = l.strip as usize;
        let offset = l.member_offset(stripe, 0);
        if l.level.mirrored() {
            let mut writes = Vec::new();
            for i in 0..l.data_strips() {
                let copies: Vec<usize> = l.copies(stripe, i).collect();
                let Some(src) = copies.iter().find(|&&m| self.members[m].holds(stripe)) else {
                    return Err(lost_data(offset, len as u64));
                };
                let Some(b) = self.member_read(*src, stripe, offset, len).await else {
                    return Err(lost_data(offset, len as u64));
                };
                writes.extend(copies.iter().filter(|&m| m != src).map(|&m| (m, b.clone())));
            }
            return self.write_members(stripe, offset, writes, false).await;
        }
        if l.level.parity() == 0 {
            return Ok(());
        }
        let rows = self.gather(stripe, 0, len).await?;
        let refs: Vec<&[u8]> = rows.data.iter().map(|d| &d[..]).collect();
        let writes = self.parity_of(stripe, &refs);
        self.write_members(stripe, offset, writes, false).await
    }

    /// Cleans the regions no write touched since the last look: flushes the members (the
    /// data and parity written there are durable), then clears their bits on the members.
    pub async fn clean_intent(&self) -> Result<(), DriveError> {
        let idle = self.intent.idle();
        if idle.is_empty() {
            return Ok(());
        }
        let _persist = self.intent.persist.lock().await;
        self.flush_members().await?;
        if let Some(bits) = self.intent.clean(&idle) {
            self.write_bitmap(&bits).await?;
            self.intent.persisted(bits);
        }
        Ok(())
    }

    /// Erases every member's superblock (the volume is deleted: its drives are plain drives
    /// again, not to be taken for members).
    pub async fn wipe_superblocks(&self) {
        let wipes = self.members().iter().map(|m| {
            let d = m.drive();
            async move {
                let zeros = crate::backend::zeroed_bytes(meta::META_BLOCK);
                d.write(meta::SUPER_OFFSET, zeros, true).await
            }
        });
        for e in join_all(wipes).await.into_iter().filter_map(Result::err) {
            tracing::warn!(volume = %self.name, "wiping a member's superblock: {e}");
        }
    }
}
