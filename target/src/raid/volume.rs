//! A volume: one `Drive` over its members, served as a namespace like any drive.
//!
//! Reads go to the member holding the data (mirrors take turns by stripe); one that fails is
//! failed for good and the data is read from a mirror or rebuilt from the rest of the stripe.
//! Writes to a parity stripe hold the stripe's lock: whole stripes are written with parity
//! made from the new data alone; parts of stripes read the old data and parity and write the
//! change (read-modify-write), or, where a member of the stripe is lost, read what the stripe
//! still has, rebuild the rest and write parity made from all of it. A write that a member
//! fails still succeeds while the volume has redundancy left: the member is failed and the
//! data lives on in the others. See `meta` for the write hole.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures_util::future::join_all;

use super::gf;
use super::layout::{Layout, Level, Piece};
use super::meta::{self, Intent, Superblock};
use crate::backend::{check_range, BoxFuture, Drive, DriveError, DriveInfo};

/// A member drive and whether it is failed.
pub struct Member {
    pub id: String,
    pub drive: Arc<dyn Drive>,
    failed: AtomicBool,
}

impl Member {
    pub fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }
}

/// Told when a member fails (fabrikd records it in the state).
pub type OnMemberFailed = Box<dyn Fn(usize, &str) + Send + Sync>;

/// Counters of a volume, for its view and metrics.
#[derive(Default)]
pub struct VolumeStats {
    /// Strip pieces read by rebuilding them from the rest of their stripe.
    pub reconstructed_reads: AtomicU64,
    /// Stripes written by read-modify-write.
    pub rmw_stripes: AtomicU64,
    /// Whole stripes written.
    pub full_stripes: AtomicU64,
}

pub struct Volume {
    pub name: String,
    pub layout: Layout,
    info: DriveInfo,
    members: Vec<Member>,
    /// Stripe locks, by stripe modulo their count (taken in ascending order).
    locks: Box<[tokio::sync::Mutex<()>]>,
    pub(super) intent: Intent,
    /// Dirty regions that could not be resynced at assembly (the volume was degraded).
    pub unsynced_regions: AtomicU64,
    on_failed: OnMemberFailed,
    pub stats: VolumeStats,
}

const LOCKS: usize = 1024;

/// What a member drive is given as: its ID, the drive, and whether it is failed already.
pub struct MemberSpec {
    pub id: String,
    pub drive: Arc<dyn Drive>,
    pub failed: bool,
}

fn lost_data(offset: u64, len: u64) -> DriveError {
    DriveError::io(
        offset,
        len,
        std::io::Error::other("too many members of the volume are lost to read or write it"),
    )
}

impl Volume {
    fn build(
        name: &str,
        layout: Layout,
        members: Vec<MemberSpec>,
        dirty: Vec<u64>,
        on_failed: OnMemberFailed,
    ) -> Result<Volume, String> {
        let first = members
            .first()
            .ok_or("a volume needs members")?
            .drive
            .info()
            .clone();
        if let Some(m) = members
            .iter()
            .find(|m| m.drive.info().block_size != first.block_size)
        {
            return Err(format!(
                "drive {} has {}-byte blocks where the others have {}",
                m.id,
                m.drive.info().block_size,
                first.block_size
            ));
        }
        let info = DriveInfo {
            kind: first.kind,
            capacity: layout.capacity(),
            block_size: first.block_size,
            volatile_write_cache: members.iter().any(|m| m.drive.info().volatile_write_cache),
            path: None,
        };
        let intent = Intent::new(&layout, dirty);
        Ok(Volume {
            name: name.to_string(),
            info,
            members: members
                .into_iter()
                .map(|m| Member {
                    id: m.id,
                    drive: m.drive,
                    failed: AtomicBool::new(m.failed),
                })
                .collect(),
            locks: (0..LOCKS).map(|_| tokio::sync::Mutex::new(())).collect(),
            intent,
            unsynced_regions: AtomicU64::new(0),
            on_failed,
            stats: VolumeStats::default(),
            layout,
        })
    }

    /// Makes a new volume on `members` (none failed): zeroes their data areas (a new volume
    /// reads zeros, and zeros are consistent parity), writes each its superblock and a clean
    /// bitmap, and flushes.
    pub async fn create(
        name: &str,
        uuid: &str,
        layout: Layout,
        members: Vec<MemberSpec>,
        on_failed: OnMemberFailed,
    ) -> Result<Volume, String> {
        let v = Volume::build(name, layout, members, Vec::new(), on_failed)?;
        let area = v.layout.stripes * v.layout.strip;
        let bitmap = meta::encode_bitmap(v.intent.region_stripes, &vec![0; v.intent.words()]);
        let each = v.members.iter().enumerate().map(|(i, m)| {
            let sb = Superblock::new(name, uuid, &v.layout, i, &m.id).encode();
            let bitmap = bitmap.clone();
            async move {
                let d = &m.drive;
                d.write_zeroes(v.layout.data_offset, area).await?;
                d.write(meta::SUPER_OFFSET, sb, false).await?;
                d.write(meta::BITMAP_OFFSET, bitmap, false).await?;
                d.flush().await
            }
        });
        for (m, r) in v.members.iter().zip(join_all(each).await) {
            r.map_err(|e| format!("drive {}: {e}", m.id))?;
        }
        Ok(v)
    }

    /// Assembles a volume made before: checks each member's superblock (a member that is not
    /// what it should be is failed), reads the write-intent bitmaps and resyncs the dirty
    /// regions before it serves. Drives that keep nothing across a restart (ram, null) come
    /// back zeroed, which is a consistent volume: they get their superblocks again.
    pub async fn assemble(
        name: &str,
        uuid: &str,
        layout: Layout,
        members: Vec<MemberSpec>,
        on_failed: OnMemberFailed,
    ) -> Result<Volume, String> {
        let v = Volume::build(name, layout, members, Vec::new(), Box::new(|_, _| {}))?;
        let volatile = matches!(
            v.info.kind,
            crate::backend::BackendKind::Ram | crate::backend::BackendKind::Null
        );
        let mut dirty = vec![0u64; v.intent.words()];
        let mut failed = Vec::new();
        for (i, m) in v.members.iter().enumerate() {
            if m.is_failed() {
                continue;
            }
            let expected = Superblock::new(name, uuid, &v.layout, i, &m.id);
            if volatile {
                let _ = m
                    .drive
                    .write(meta::SUPER_OFFSET, expected.encode(), false)
                    .await;
                continue;
            }
            let block = match m.drive.read(meta::SUPER_OFFSET, meta::META_BLOCK).await {
                Ok(b) => b,
                Err(e) => {
                    failed.push((
                        i,
                        format!("drive {}: its superblock cannot be read: {e}", m.id),
                    ));
                    continue;
                }
            };
            let why = match Superblock::decode(&block) {
                None => Some("it has no volume superblock".to_string()),
                Some(sb) => sb.mismatch(&expected),
            };
            if let Some(why) = why {
                failed.push((
                    i,
                    format!("drive {} is not member {i} of volume {name}: {why}", m.id),
                ));
                continue;
            }
            if let Ok(b) = m.drive.read(meta::BITMAP_OFFSET, meta::META_BLOCK).await {
                if let Some(bits) =
                    meta::decode_bitmap(&b, v.intent.region_stripes, v.intent.words())
                {
                    for (d, b) in dirty.iter_mut().zip(bits) {
                        *d |= b;
                    }
                }
            }
        }
        let Volume {
            layout, members, ..
        } = v;
        let specs = members
            .into_iter()
            .map(|m| MemberSpec {
                failed: m.is_failed(),
                id: m.id,
                drive: m.drive,
            })
            .collect();
        let v = Volume::build(name, layout, specs, dirty, on_failed)?;
        for (i, why) in failed {
            v.fail(i, &why);
        }
        v.resync_dirty().await;
        Ok(v)
    }

    pub fn members(&self) -> &[Member] {
        &self.members
    }

    fn lost(&self) -> Vec<bool> {
        self.members.iter().map(Member::is_failed).collect()
    }

    /// Whether the volume has lost more than it can make up for.
    pub fn is_failed(&self) -> bool {
        !self.layout.survives(&self.lost())
    }

    pub fn is_degraded(&self) -> bool {
        self.members.iter().any(Member::is_failed)
    }

    /// Fails member `i` (fault injection, or an error it returned).
    pub fn fail(&self, i: usize, cause: &str) {
        let Some(m) = self.members.get(i) else { return };
        if !m.failed.swap(true, Ordering::AcqRel) {
            tracing::error!(volume = %self.name, drive = %m.id, "member failed: {cause}");
            (self.on_failed)(i, cause);
        }
    }

    async fn member_read(&self, i: usize, offset: u64, len: usize) -> Option<Bytes> {
        let m = &self.members[i];
        if m.is_failed() {
            return None;
        }
        match m.drive.read(offset, len).await {
            Ok(b) => Some(b),
            Err(e) => {
                self.fail(i, &format!("read error: {e}"));
                None
            }
        }
    }

    async fn member_write(&self, i: usize, offset: u64, data: Bytes, fua: bool) -> bool {
        let m = &self.members[i];
        if m.is_failed() {
            return false;
        }
        match m.drive.write(offset, data, fua).await {
            Ok(()) => true,
            Err(e) => {
                self.fail(i, &format!("write error: {e}"));
                false
            }
        }
    }

    fn check_alive(&self, offset: u64, len: u64) -> Result<(), DriveError> {
        if self.is_failed() {
            return Err(lost_data(offset, len));
        }
        Ok(())
    }

    // ---- reads ----

    async fn read_volume(&self, offset: u64, len: usize) -> Result<Bytes, DriveError> {
        check_range(&self.info, offset, len as u64)?;
        self.check_alive(offset, len as u64)?;
        let pieces: Vec<Piece> = self.layout.pieces(offset, len as u64).collect();
        if let [one] = pieces[..] {
            return self.read_piece(one).await;
        }
        let got = join_all(pieces.iter().map(|p| self.read_piece(*p))).await;
        let mut out = BytesMut::zeroed(len);
        for (p, data) in pieces.iter().zip(got) {
            out[p.buf_off..p.buf_off + p.len as usize].copy_from_slice(&data?);
        }
        Ok(out.freeze())
    }

    async fn read_piece(&self, p: Piece) -> Result<Bytes, DriveError> {
        let copies: Vec<usize> = self.layout.copies(p.stripe, p.strip).collect();
        let offset = self.layout.member_offset(p.stripe, p.within);
        // Mirrors take turns by stripe.
        let first = p.stripe as usize % copies.len();
        for k in 0..copies.len() {
            let m = copies[(first + k) % copies.len()];
            if let Some(b) = self.member_read(m, offset, p.len as usize).await {
                return Ok(b);
            }
        }
        if self.layout.level.parity() == 0 {
            return Err(lost_data(offset, p.len));
        }
        let _lock = self.lock_stripes(&[p.stripe]).await;
        let mut rows = self.gather(p.stripe, p.within, p.len as usize).await?;
        self.stats
            .reconstructed_reads
            .fetch_add(1, Ordering::Relaxed);
        Ok(Bytes::from(std::mem::take(&mut rows.data[p.strip])))
    }

    /// Rows `within..within + len` of every data strip of `stripe`, rebuilding those on lost
    /// members from parity. The caller holds the stripe's lock.
    async fn gather(&self, stripe: u64, within: u64, len: usize) -> Result<Rows, DriveError> {
        let l = &self.layout;
        let k = l.data_strips();
        let offset = l.member_offset(stripe, within);
        let (pm, qm) = l.parity_members(stripe);
        // Tried again when a member fails while it is read.
        for _ in 0..=self.members.len() {
            let data_members: Vec<usize> = (0..k).map(|i| l.member_of(stripe, i)).collect();
            let need_parity = data_members.iter().any(|&m| self.members[m].is_failed());
            let reads = data_members
                .iter()
                .copied()
                .chain(pm.filter(|_| need_parity))
                .chain(qm.filter(|_| need_parity))
                .map(|m| self.member_read(m, offset, len));
            let mut got = join_all(reads).await.into_iter();
            let data: Vec<Option<Bytes>> = (0..k).map(|_| got.next().flatten()).collect();
            let p = if need_parity && pm.is_some() {
                got.next().flatten()
            } else {
                None
            };
            let q = if need_parity && qm.is_some() {
                got.next().flatten()
            } else {
                None
            };
            let lost: Vec<usize> = (0..k).filter(|&i| data[i].is_none()).collect();
            if lost.len() > usize::from(p.is_some()) + usize::from(q.is_some()) {
                if self.is_failed() {
                    return Err(lost_data(offset, len as u64));
                }
                // A member failed between the choice and the read; the next round sees it.
                continue;
            }
            let mut data: Vec<Vec<u8>> = data
                .into_iter()
                .map(|d| d.map_or_else(|| vec![0; len], |b| b.to_vec()))
                .collect();
            let (mut p, mut q) = (p.map(|b| b.to_vec()), q.map(|b| b.to_vec()));
            if !lost.is_empty() {
                let mut s = gf::Stripe {
                    data: data.iter_mut().map(|d| &mut d[..]).collect(),
                    p: p.as_deref_mut(),
                    q: q.as_deref_mut(),
                };
                gf::recover(&mut s, &lost, false, false);
            }
            return Ok(Rows { data });
        }
        Err(lost_data(offset, len as u64))
    }

    async fn lock_stripes(&self, stripes: &[u64]) -> Vec<tokio::sync::MutexGuard<'_, ()>> {
        let mut slots: Vec<usize> = stripes
            .iter()
            .map(|s| (*s % LOCKS as u64) as usize)
            .collect();
        slots.sort_unstable();
        slots.dedup();
        let mut held = Vec::with_capacity(slots.len());
        for s in slots {
            held.push(self.locks[s].lock().await);
        }
        held
    }

    // ---- writes ----

    /// Marks the regions of `stripes` dirty on the members (once per region), then returns
    /// them for `Intent::end`.
    async fn begin_write(&self, stripes: &[u64]) -> Result<Vec<usize>, DriveError> {
        if !self.layout.level.redundant() {
            // Nothing to keep consistent.
            return Ok(Vec::new());
        }
        let mut regions: Vec<usize> = stripes.iter().map(|s| self.intent.region_of(*s)).collect();
        regions.dedup();
        if self.intent.begin(&regions) {
            return Ok(regions);
        }
        let persist = self.intent.persist.lock().await;
        if !self.intent.marked(&regions) {
            let bits = self.intent.snapshot();
            if let Err(e) = self.write_bitmap(&bits).await {
                drop(persist);
                self.intent.end(&regions);
                return Err(e);
            }
            self.intent.persisted(bits);
        }
        Ok(regions)
    }

    /// Writes the bitmap to every member left, durably.
    async fn write_bitmap(&self, bits: &[u64]) -> Result<(), DriveError> {
        let block = meta::encode_bitmap(self.intent.region_stripes, bits);
        let writes = (0..self.members.len())
            .map(|i| self.member_write(i, meta::BITMAP_OFFSET, block.clone(), true));
        join_all(writes).await;
        self.check_alive(meta::BITMAP_OFFSET, meta::META_BLOCK as u64)
    }

    async fn write_volume(&self, offset: u64, data: Bytes, fua: bool) -> Result<(), DriveError> {
        check_range(&self.info, offset, data.len() as u64)?;
        self.check_alive(offset, data.len() as u64)?;
        let pieces: Vec<Piece> = self.layout.pieces(offset, data.len() as u64).collect();
        let mut stripes: Vec<u64> = pieces.iter().map(|p| p.stripe).collect();
        stripes.dedup();
        let regions = self.begin_write(&stripes).await?;
        let res = async {
            let _locks = match self.layout.level {
                Level::Raid0 => Vec::new(),
                _ => self.lock_stripes(&stripes).await,
            };
            let each = stripes.iter().map(|&s| {
                let mine: Vec<Piece> = pieces.iter().copied().filter(|p| p.stripe == s).collect();
                self.write_stripe(s, mine, &data, fua)
            });
            join_all(each).await.into_iter().collect::<Result<(), _>>()
        }
        .await;
        self.intent.end(&regions);
        res
    }

    async fn write_stripe(
        &self,
        stripe: u64,
        pieces: Vec<Piece>,
        data: &Bytes,
        fua: bool,
    ) -> Result<(), DriveError> {
        if self.layout.level.parity() == 0 {
            let writes = pieces.iter().flat_map(|p| {
                let offset = self.layout.member_offset(p.stripe, p.within);
                let bytes = data.slice(p.buf_off..p.buf_off + p.len as usize);
                self.layout
                    .copies(p.stripe, p.strip)
                    .map(move |m| (m, offset, bytes.clone()))
            });
            let done = join_all(writes.map(|(m, o, b)| self.member_write(m, o, b, fua))).await;
            let offset = self.layout.member_offset(stripe, 0);
            if self.is_failed() || !done.iter().any(|&d| d) {
                return Err(lost_data(offset, self.layout.strip));
            }
            return Ok(());
        }
        let full = pieces.len() == self.layout.data_strips()
            && pieces
                .iter()
                .all(|p| p.within == 0 && p.len == self.layout.strip);
        if full {
            self.stats.full_stripes.fetch_add(1, Ordering::Relaxed);
            return self.write_full_stripe(stripe, &pieces, data, fua).await;
        }
        self.stats.rmw_stripes.fetch_add(1, Ordering::Relaxed);
        self.write_part_stripe(stripe, &pieces, data, fua).await
    }

    async fn write_full_stripe(
        &self,
        stripe: u64,
        pieces: &[Piece],
        data: &Bytes,
        fua: bool,
    ) -> Result<(), DriveError> {
        let l = &self.layout;
        let strips: Vec<Bytes> = pieces
            .iter()
            .map(|p| data.slice(p.buf_off..p.buf_off + p.len as usize))
            .collect();
        let len = l.strip as usize;
        let (pm, qm) = l.parity_members(stripe);
        let refs: Vec<&[u8]> = strips.iter().map(|s| &s[..]).collect();
        let mut p = vec![0u8; len];
        gf::gen_p(&refs, &mut p);
        let q = qm.map(|_| {
            let mut q = vec![0u8; len];
            let some: Vec<Option<&[u8]>> = refs.iter().map(|r| Some(*r)).collect();
            gf::gen_q(&some, &mut q);
            Bytes::from(q)
        });
        let offset = l.member_offset(stripe, 0);
        let mut writes: Vec<(usize, Bytes)> = strips
            .into_iter()
            .enumerate()
            .map(|(i, b)| (l.member_of(stripe, i), b))
            .collect();
        writes.extend(pm.map(|m| (m, Bytes::from(p))));
        writes.extend(qm.zip(q));
        self.write_members(offset, writes, fua).await
    }

    /// Writes each `(member, data)` at `offset`; fails only when the volume no longer holds the
    /// data (a member that fails is failed, and the others carry the stripe).
    async fn write_members(
        &self,
        offset: u64,
        writes: Vec<(usize, Bytes)>,
        fua: bool,
    ) -> Result<(), DriveError> {
        let len = writes.first().map_or(0, |w| w.1.len() as u64);
        join_all(
            writes
                .into_iter()
                .map(|(m, b)| self.member_write(m, offset, b, fua)),
        )
        .await;
        self.check_alive(offset, len)
    }

    async fn write_part_stripe(
        &self,
        stripe: u64,
        pieces: &[Piece],
        data: &Bytes,
        fua: bool,
    ) -> Result<(), DriveError> {
        let l = &self.layout;
        let k = l.data_strips();
        let (pm, qm) = l.parity_members(stripe);
        // Rows the write touches in any strip.
        let r0 = pieces.iter().map(|p| p.within).min().unwrap_or(0);
        let r1 = pieces.iter().map(|p| p.within + p.len).max().unwrap_or(0);
        let rows = (r1 - r0) as usize;
        let offset = l.member_offset(stripe, r0);
        let stripe_members: Vec<usize> = (0..k)
            .map(|i| l.member_of(stripe, i))
            .chain(pm)
            .chain(qm)
            .collect();
        let new_of = |p: &Piece| data.slice(p.buf_off..p.buf_off + p.len as usize);
        for _ in 0..=self.members.len() {
            let degraded = stripe_members.iter().any(|&m| self.members[m].is_failed());
            let (p_new, q_new) = if degraded {
                // Rebuild the rows, lay the new data over them, make parity from all of it.
                let mut full = self.gather(stripe, r0, rows).await?;
                for p in pieces {
                    let at = (p.within - r0) as usize;
                    full.data[p.strip][at..at + p.len as usize].copy_from_slice(&new_of(p));
                }
                let refs: Vec<&[u8]> = full.data.iter().map(|d| &d[..]).collect();
                let mut pv = vec![0u8; rows];
                gf::gen_p(&refs, &mut pv);
                let qv = qm.map(|_| {
                    let mut q = vec![0u8; rows];
                    let some: Vec<Option<&[u8]>> = refs.iter().map(|r| Some(*r)).collect();
                    gf::gen_q(&some, &mut q);
                    q
                });
                (pv, qv)
            } else {
                // Read-modify-write: the old data of the pieces, the old parity rows.
                let olds = pieces.iter().map(|p| {
                    self.member_read(
                        l.member_of(stripe, p.strip),
                        l.member_offset(stripe, p.within),
                        p.len as usize,
                    )
                });
                let parity_reads = pm
                    .into_iter()
                    .chain(qm)
                    .map(|m| self.member_read(m, offset, rows));
                let (olds, parity) = futures_util::join!(join_all(olds), join_all(parity_reads));
                if olds.iter().chain(&parity).any(Option::is_none) {
                    // A member failed: write as a degraded stripe.
                    continue;
                }
                let mut deltas: Vec<Option<Vec<u8>>> = vec![None; k];
                for (p, old) in pieces.iter().zip(&olds) {
                    let delta = deltas[p.strip].get_or_insert_with(|| vec![0u8; rows]);
                    let at = (p.within - r0) as usize;
                    let d = &mut delta[at..at + p.len as usize];
                    d.copy_from_slice(old.as_ref().unwrap());
                    gf::xor_into(d, &new_of(p));
                }
                let mut parity = parity.into_iter().map(|b| b.unwrap().to_vec());
                let mut pv = parity.next().unwrap_or_default();
                let mut qv = qm.map(|_| parity.next().unwrap_or_default());
                let refs: Vec<Option<&[u8]>> = deltas.iter().map(|d| d.as_deref()).collect();
                gf::apply_delta(&refs, Some(&mut pv), qv.as_deref_mut());
                (pv, qv)
            };
            let mut writes = join_all(pieces.iter().map(|p| {
                self.member_write(
                    l.member_of(stripe, p.strip),
                    l.member_offset(stripe, p.within),
                    new_of(p),
                    fua,
                )
            }));
            let parity_writes = pm
                .map(|m| (m, Bytes::from(p_new)))
                .into_iter()
                .chain(qm.zip(q_new.map(Bytes::from)));
            let parity_done =
                join_all(parity_writes.map(|(m, b)| self.member_write(m, offset, b, fua)));
            let _ = futures_util::join!(&mut writes, parity_done);
            return self.check_alive(offset, rows as u64);
        }
        Err(lost_data(offset, rows as u64))
    }

    // ---- the rest ----

    async fn flush_members(&self) -> Result<(), DriveError> {
        let flushes = self.members.iter().enumerate().map(|(i, m)| async move {
            if m.is_failed() {
                return;
            }
            if let Err(e) = m.drive.flush().await {
                self.fail(i, &format!("flush failed: {e}"));
            }
        });
        join_all(flushes).await;
        self.check_alive(0, self.info.capacity)
    }

    /// Zeroes a range: parts of stripes through the write path, whole stripes on every member
    /// at once (zeros are their own parity).
    async fn zero_volume(&self, offset: u64, len: u64) -> Result<(), DriveError> {
        check_range(&self.info, offset, len)?;
        self.check_alive(offset, len)?;
        let sb = self.layout.stripe_bytes();
        let first_full = offset.next_multiple_of(sb);
        let end = offset + len;
        let last_full = end - end % sb;
        if first_full >= last_full {
            return self.write_zeros_through(offset, len).await;
        }
        if offset < first_full {
            self.write_zeros_through(offset, first_full - offset)
                .await?;
        }
        let stripes: Vec<u64> = (first_full / sb..last_full / sb).collect();
        let regions = self.begin_write(&stripes).await?;
        let res = async {
            let _locks = self.lock_stripes(&stripes).await;
            let at = self.layout.member_offset(first_full / sb, 0);
            let bytes = stripes.len() as u64 * self.layout.strip;
            let zeroes = self.members.iter().enumerate().map(|(i, m)| async move {
                if m.is_failed() {
                    return;
                }
                if let Err(e) = m.drive.write_zeroes(at, bytes).await {
                    self.fail(i, &format!("write zeroes failed: {e}"));
                }
            });
            join_all(zeroes).await;
            self.check_alive(at, bytes)
        }
        .await;
        self.intent.end(&regions);
        res?;
        if last_full < end {
            self.write_zeros_through(last_full, end - last_full).await?;
        }
        Ok(())
    }

    async fn write_zeros_through(&self, offset: u64, len: u64) -> Result<(), DriveError> {
        let mut done = 0;
        while done < len {
            let n = (len - done).min(crate::backend::ZEROS_LEN as u64);
            self.write_volume(
                offset + done,
                crate::backend::zeroed_bytes(n as usize),
                false,
            )
            .await?;
            done += n;
        }
        Ok(())
    }

    /// Makes parity (or the mirror copies) of every stripe of the dirty regions agree with the
    /// data, then cleans the bitmap. Degraded, a parity volume cannot tell which member is
    /// right: the regions stay marked and are counted in `unsynced_regions`.
    pub async fn resync_dirty(&self) {
        let dirty = self.intent.dirty_regions();
        if dirty.is_empty() {
            return;
        }
        if self.is_failed() {
            self.unsynced_regions
                .store(dirty.len() as u64, Ordering::Relaxed);
            return;
        }
        if self.layout.level.parity() > 0 && self.is_degraded() {
            tracing::error!(
                volume = %self.name,
                regions = dirty.len(),
                "the volume was not shut down cleanly and is degraded: the parity of {} regions \
                 written at the time cannot be checked; data there may be wrong",
                dirty.len()
            );
            self.unsynced_regions
                .store(dirty.len() as u64, Ordering::Relaxed);
            return;
        }
        tracing::warn!(volume = %self.name, regions = dirty.len(), "resyncing the regions written when fabrikd stopped");
        for r in &dirty {
            for s in self.intent.stripes_of(*r, &self.layout) {
                if let Err(e) = self.resync_stripe(s).await {
                    tracing::error!(volume = %self.name, stripe = s, "resync failed: {e}");
                    self.unsynced_regions.fetch_add(1, Ordering::Relaxed);
                    return;
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
                let Some(src) = copies.iter().find(|&&m| !self.members[m].is_failed()) else {
                    return Err(lost_data(offset, len as u64));
                };
                let Some(b) = self.member_read(*src, offset, len).await else {
                    return Err(lost_data(offset, len as u64));
                };
                writes.extend(copies.iter().filter(|&m| m != src).map(|&m| (m, b.clone())));
            }
            return self.write_members(offset, writes, false).await;
        }
        if l.level.parity() == 0 {
            return Ok(());
        }
        let rows = self.gather(stripe, 0, len).await?;
        let refs: Vec<&[u8]> = rows.data.iter().map(|d| &d[..]).collect();
        let (pm, qm) = l.parity_members(stripe);
        let mut writes = Vec::new();
        if let Some(pm) = pm {
            let mut p = vec![0u8; len];
            gf::gen_p(&refs, &mut p);
            writes.push((pm, Bytes::from(p)));
        }
        if let Some(qm) = qm {
            let mut q = vec![0u8; len];
            let some: Vec<Option<&[u8]>> = refs.iter().map(|r| Some(*r)).collect();
            gf::gen_q(&some, &mut q);
            writes.push((qm, Bytes::from(q)));
        }
        self.write_members(offset, writes, false).await
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

    /// Regions marked dirty now.
    pub fn dirty_regions(&self) -> usize {
        self.intent.dirty_regions().len()
    }
}

/// Rows of one stripe's data strips.
struct Rows {
    data: Vec<Vec<u8>>,
}

impl Drive for Volume {
    fn info(&self) -> &DriveInfo {
        &self.info
    }

    fn read(&self, offset: u64, len: usize) -> BoxFuture<'_, Result<Bytes, DriveError>> {
        Box::pin(self.read_volume(offset, len))
    }

    fn write(&self, offset: u64, data: Bytes, fua: bool) -> BoxFuture<'_, Result<(), DriveError>> {
        Box::pin(self.write_volume(offset, data, fua))
    }

    fn flush(&self) -> BoxFuture<'_, Result<(), DriveError>> {
        Box::pin(self.flush_members())
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, Result<(), DriveError>> {
        Box::pin(self.zero_volume(offset, len))
    }

    /// Deallocated blocks read as zeros: the same as Write Zeroes here (and on whole stripes
    /// the members free the space).
    fn deallocate(&self, offset: u64, len: u64) -> BoxFuture<'_, Result<(), DriveError>> {
        Box::pin(self.zero_volume(offset, len))
    }
}

/// How often the bitmap's idle regions are cleaned: a region stays marked at least this long
/// after its last write (md's bitmap waits 5 s by default).
pub const CLEAN_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// Keeps the bitmap clean while the volume lives: every `every`, regions without writes are
/// flushed and cleared.
pub fn spawn_cleaner(volume: &Arc<Volume>, every: std::time::Duration) {
    let weak = Arc::downgrade(volume);
    tokio::spawn(async move {
        loop {
            crate::timer::sleep(every).await;
            let Some(v) = weak.upgrade() else { break };
            if let Err(e) = v.clean_intent().await {
                tracing::warn!(volume = %v.name, "cleaning the write-intent bitmap: {e}");
            }
        }
    });
}
