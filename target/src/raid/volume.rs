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

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use bytes::{Bytes, BytesMut};
use futures_util::future::join_all;

use super::gf;
use super::layout::{Layout, Piece};
use super::log::Log;
use super::meta::{self, Intent, Superblock};
use crate::backend::{check_range, BoxFuture, Drive, DriveError, DriveInfo};

/// A member's place in the volume: the drive in it and its state. A spare takes a failed
/// member's place and is rebuilt there.
pub struct Member {
    pub(super) slot: RwLock<Slot>,
    pub(super) state: AtomicU8,
    /// While rebuilding: the stripes below this hold the member's part.
    pub(super) rebuilt: AtomicU64,
}

/// The drive in a member's place.
#[derive(Clone)]
pub struct Slot {
    pub id: String,
    pub drive: Arc<dyn Drive>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberState {
    Active,
    /// Never read or written again (a spare may take its place).
    Failed,
    /// A spare being rebuilt: it holds the stripes below `Member::rebuilt`.
    Rebuilding,
}

pub(super) const ACTIVE: u8 = 0;
const FAILED: u8 = 1;
pub(super) const REBUILDING: u8 = 2;

impl Member {
    fn new(id: String, drive: Arc<dyn Drive>, state: MemberState) -> Member {
        let state = match state {
            MemberState::Active => ACTIVE,
            MemberState::Failed => FAILED,
            MemberState::Rebuilding => REBUILDING,
        };
        Member {
            slot: RwLock::new(Slot { id, drive }),
            state: AtomicU8::new(state),
            rebuilt: AtomicU64::new(0),
        }
    }

    pub fn id(&self) -> String {
        self.slot.read().unwrap().id.clone()
    }

    pub fn drive(&self) -> Arc<dyn Drive> {
        self.slot.read().unwrap().drive.clone()
    }

    pub fn state(&self) -> MemberState {
        match self.state.load(Ordering::Acquire) {
            ACTIVE => MemberState::Active,
            REBUILDING => MemberState::Rebuilding,
            _ => MemberState::Failed,
        }
    }

    pub fn is_failed(&self) -> bool {
        self.state() == MemberState::Failed
    }

    /// Stripes rebuilt so far (while rebuilding).
    pub fn rebuilt_stripes(&self) -> u64 {
        self.rebuilt.load(Ordering::Acquire)
    }

    /// Whether it holds its part of `stripe`: active, or rebuilt that far.
    pub(super) fn holds(&self, stripe: u64) -> bool {
        match self.state.load(Ordering::Acquire) {
            ACTIVE => true,
            REBUILDING => stripe < self.rebuilt.load(Ordering::Acquire),
            _ => false,
        }
    }
}

/// Told when member `.0` fails, why, and the volume's generation that makes (see
/// `Volume::generation`). Returns true when it records the failure and says so later
/// (`change_recorded`): writes are then acknowledged only once it has (a failed member left out
/// of a write holds old data; were the failure not on record when fabrikd stops, the next start
/// would read that member again). False: nothing to wait for (tests).
pub type OnMemberFailed = Box<dyn Fn(usize, &str, u64) -> bool + Send + Sync>;

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
    /// On every member's superblock.
    pub uuid: String,
    pub layout: Layout,
    info: DriveInfo,
    pub(super) members: Vec<Member>,
    /// Stripe locks, by stripe modulo their count (taken in ascending order).
    pub(super) locks: Box<[tokio::sync::Mutex<()>]>,
    pub(super) intent: Intent,
    /// Dirty regions that could not be resynced at assembly (the volume was degraded).
    pub unsynced_regions: AtomicU64,
    on_failed: OnMemberFailed,
    /// Changes of the members (a failure, a rebuild done), counted from the volume's making:
    /// its generation. What the state file holds of it is `recorded` (see `OnMemberFailed`);
    /// the log of degraded writes is stamped with it.
    generation: AtomicU64,
    recorded: tokio::sync::watch::Sender<u64>,
    pub stats: VolumeStats,
    /// Deleted: background work ends.
    stopped: AtomicBool,
    pub(super) rebuild: Mutex<Option<super::rebuild::RebuildProgress>>,
    /// Bytes per second a rebuild may write (0: no limit).
    pub rebuild_limit: AtomicU64,
    pub(super) scrub: Mutex<Option<super::rebuild::ScrubReport>>,
    /// The log of degraded writes.
    pub(super) log: Mutex<Log>,
    pub(super) log_freed: tokio::sync::Notify,
}

const LOCKS: usize = 1024;

/// What a member drive is given as: its ID, the drive, and its state (a member recorded as
/// rebuilding is rebuilt from its start).
pub struct MemberSpec {
    pub id: String,
    pub drive: Arc<dyn Drive>,
    pub state: MemberState,
}

pub(super) fn lost_data(offset: u64, len: u64) -> DriveError {
    DriveError::io(
        offset,
        len,
        std::io::Error::other("too many members of the volume are lost to read or write it"),
    )
}

impl Volume {
    fn build(
        name: &str,
        uuid: &str,
        layout: Layout,
        members: Vec<MemberSpec>,
        generation: u64,
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
        let intent = Intent::new(&layout);
        Ok(Volume {
            name: name.to_string(),
            uuid: uuid.to_string(),
            info,
            members: members
                .into_iter()
                .map(|m| Member::new(m.id, m.drive, m.state))
                .collect(),
            locks: (0..LOCKS).map(|_| tokio::sync::Mutex::new(())).collect(),
            intent,
            unsynced_regions: AtomicU64::new(0),
            on_failed,
            generation: AtomicU64::new(generation),
            recorded: tokio::sync::watch::Sender::new(generation),
            stats: VolumeStats::default(),
            layout,
            stopped: AtomicBool::new(false),
            rebuild: Mutex::new(None),
            rebuild_limit: AtomicU64::new(0),
            scrub: Mutex::new(None),
            log: Mutex::new(Log::new(0)),
            log_freed: tokio::sync::Notify::new(),
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
        let v = Volume::build(name, uuid, layout, members, 0, on_failed)?;
        let area = v.layout.stripes * v.layout.strip;
        let bitmap = meta::encode_bitmap(v.intent.region_stripes, &vec![0; v.intent.words()], 0);
        let each = v.members.iter().enumerate().map(|(i, m)| {
            let sb = Superblock::new(name, uuid, &v.layout, i, &m.id()).encode();
            let bitmap = bitmap.clone();
            let d = m.drive();
            async move {
                d.write_zeroes(v.layout.data_offset, area).await?;
                d.write(meta::SUPER_OFFSET, sb, false).await?;
                d.write(meta::BITMAP_OFFSET, bitmap, false).await?;
                d.flush().await
            }
        });
        for (m, r) in v.members.iter().zip(join_all(each).await) {
            r.map_err(|e| format!("drive {}: {e}", m.id()))?;
        }
        Ok(v)
    }

    /// Assembles a volume made before: checks each member's superblock (a member that is not
    /// what it should be is failed), reads the write-intent bitmaps and resyncs the dirty
    /// regions before it serves. Drives that keep nothing across a restart (ram, null) come
    /// back zeroed, which is a consistent volume: they get their superblocks again.
    /// `generation`: the volume's, as the state file holds it.
    pub async fn assemble(
        name: &str,
        uuid: &str,
        layout: Layout,
        members: Vec<MemberSpec>,
        generation: u64,
        on_failed: OnMemberFailed,
    ) -> Result<Volume, String> {
        let v = Volume::build(name, uuid, layout, members, generation, on_failed)?;
        let volatile = matches!(
            v.info.kind,
            crate::backend::BackendKind::Ram | crate::backend::BackendKind::Null
        );
        let mut tail = 0;
        let mut failed = Vec::new();
        for (i, m) in v.members.iter().enumerate() {
            if m.state() != MemberState::Active {
                // A rebuilding member is rebuilt again, superblock and all.
                continue;
            }
            let Slot { id, drive } = m.slot.read().unwrap().clone();
            let expected = Superblock::new(name, uuid, &v.layout, i, &id);
            if volatile {
                let _ = drive
                    .write(meta::SUPER_OFFSET, expected.encode(), false)
                    .await;
                continue;
            }
            let block = match drive.read(meta::SUPER_OFFSET, meta::META_BLOCK).await {
                Ok(b) => b,
                Err(e) => {
                    failed.push((i, format!("drive {id}: its superblock cannot be read: {e}")));
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
                    format!("drive {id} is not member {i} of volume {name}: {why}"),
                ));
                continue;
            }
            if let Ok(b) = drive.read(meta::BITMAP_OFFSET, meta::META_BLOCK).await {
                if let Some((bits, t)) =
                    meta::decode_bitmap(&b, v.intent.region_stripes, v.intent.words())
                {
                    v.intent.restore(&bits);
                    tail = tail.max(t);
                }
            }
        }
        let (records, last_seq) = v.read_log(tail, generation).await;
        *v.log.lock().unwrap() = Log::new(last_seq);
        let found_failed = !failed.is_empty();
        for (i, why) in failed {
            v.fail(i, &why);
        }
        v.resync_dirty(found_failed, &records).await;
        Ok(v)
    }

    /// Ends the volume's background work (it is deleted).
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
    }

    pub fn stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    pub(super) fn lost_data(&self, offset: u64, len: u64) -> DriveError {
        lost_data(offset, len)
    }

    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// Members that do not carry their part of every stripe (failed, or being rebuilt).
    pub(super) fn lost(&self) -> Vec<bool> {
        self.members
            .iter()
            .map(|m| m.state() != MemberState::Active)
            .collect()
    }

    /// Whether the volume has lost more than it can make up for.
    pub fn is_failed(&self) -> bool {
        !self.layout.survives(&self.lost())
    }

    pub fn is_degraded(&self) -> bool {
        self.lost().iter().any(|&l| l)
    }

    /// Fails member `i` (fault injection, or an error it returned).
    pub fn fail(&self, i: usize, cause: &str) {
        let Some(m) = self.members.get(i) else { return };
        if m.state.swap(FAILED, Ordering::AcqRel) != FAILED {
            tracing::error!(volume = %self.name, drive = %m.id(), "member failed: {cause}");
            let n = self.next_generation();
            if !(self.on_failed)(i, cause, n) {
                self.change_recorded(n);
            }
        }
    }

    /// A change of the members: the new generation.
    pub(super) fn next_generation(&self) -> u64 {
        self.generation.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Changes up to generation `n` are on record (in the state file).
    pub fn change_recorded(&self, n: u64) {
        self.recorded.send_if_modified(|r| {
            let newer = n > *r;
            if newer {
                *r = n;
            }
            newer
        });
    }

    /// The generation now (every change on record once `change_recorded` was told this).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Waits until every change of the members so far is on record: what a write left out of
    /// a failed member (or wrote without a log record, a rebuild being done) may be
    /// acknowledged then. At once when there is none to wait for.
    pub(super) async fn changes_on_record(&self) {
        let n = self.generation.load(Ordering::Acquire);
        if *self.recorded.borrow() >= n {
            return;
        }
        let mut rx = self.recorded.subscribe();
        let _ = rx.wait_for(|r| *r >= n).await;
    }

    /// Reads member `i`'s part of `stripe`, if it holds it; an error fails the member.
    pub(super) async fn member_read(
        &self,
        i: usize,
        stripe: u64,
        offset: u64,
        len: usize,
    ) -> Option<Bytes> {
        let m = &self.members[i];
        if !m.holds(stripe) {
            return None;
        }
        match m.drive().read(offset, len).await {
            Ok(b) => Some(b),
            Err(e) => {
                self.fail(i, &format!("read error: {e}"));
                None
            }
        }
    }

    /// Writes member `i`'s part of `stripe`, if it holds it (a member being rebuilt gets the
    /// stripes below the rebuild's mark; the rebuild writes the rest); an error fails it.
    pub(super) async fn member_write(
        &self,
        i: usize,
        stripe: u64,
        offset: u64,
        data: Bytes,
        fua: bool,
    ) -> bool {
        let m = &self.members[i];
        if !m.holds(stripe) {
            return false;
        }
        self.member_write_any(i, offset, data, fua).await
    }

    /// Writes to any member that is not failed (metadata, rebuild).
    pub(super) async fn member_write_any(
        &self,
        i: usize,
        offset: u64,
        data: Bytes,
        fua: bool,
    ) -> bool {
        let m = &self.members[i];
        if m.is_failed() {
            return false;
        }
        match m.drive().write(offset, data, fua).await {
            Ok(()) => true,
            Err(e) => {
                self.fail(i, &format!("write error: {e}"));
                false
            }
        }
    }

    pub(super) fn check_alive(&self, offset: u64, len: u64) -> Result<(), DriveError> {
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
        // The pieces come in order and cover the range: laid end to end, no zeroing first.
        let mut out = BytesMut::with_capacity(len);
        for data in got {
            out.extend_from_slice(&data?);
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
            if let Some(b) = self.member_read(m, p.stripe, offset, p.len as usize).await {
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
    pub(super) async fn gather(
        &self,
        stripe: u64,
        within: u64,
        len: usize,
    ) -> Result<Rows, DriveError> {
        let l = &self.layout;
        let k = l.data_strips();
        let offset = l.member_offset(stripe, within);
        let (pm, qm) = l.parity_members(stripe);
        // Tried again when a member fails while it is read.
        for _ in 0..=self.members.len() {
            let data_members: Vec<usize> = (0..k).map(|i| l.member_of(stripe, i)).collect();
            let need_parity = data_members.iter().any(|&m| !self.members[m].holds(stripe));
            let reads = data_members
                .iter()
                .copied()
                .chain(pm.filter(|_| need_parity))
                .chain(qm.filter(|_| need_parity))
                .map(|m| self.member_read(m, stripe, offset, len));
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

    /// The parity of `stripe` made from its data strips `data` (whole rows): each parity
    /// member with what it holds, ready to write.
    pub(super) fn parity_of(&self, stripe: u64, data: &[&[u8]]) -> Vec<(usize, Bytes)> {
        let (pm, qm) = self.layout.parity_members(stripe);
        let (p, q) = gf::parity(data, qm.is_some());
        let p = pm.map(|m| (m, Bytes::from(p)));
        p.into_iter().chain(qm.zip(q.map(Bytes::from))).collect()
    }

    pub(super) async fn lock_stripes(
        &self,
        stripes: &[u64],
    ) -> Vec<tokio::sync::MutexGuard<'_, ()>> {
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

    // ---- the rest ----

    pub(super) async fn flush_members(&self) -> Result<(), DriveError> {
        let flushes = self.members.iter().enumerate().map(|(i, m)| async move {
            if m.is_failed() {
                return;
            }
            if let Err(e) = m.drive().flush().await {
                self.fail(i, &format!("flush failed: {e}"));
            }
        });
        join_all(flushes).await;
        self.check_alive(0, self.info.capacity)?;
        self.changes_on_record().await;
        Ok(())
    }

    /// Regions marked dirty now.
    pub fn dirty_regions(&self) -> usize {
        self.intent.dirty_regions().len()
    }
}

/// Rows of one stripe's data strips.
pub(super) struct Rows {
    pub(super) data: Vec<Vec<u8>>,
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
            if v.stopped() {
                break;
            }
            if let Err(e) = v.clean_intent().await {
                tracing::warn!(volume = %v.name, "cleaning the write-intent bitmap: {e}");
            }
        }
    });
}
