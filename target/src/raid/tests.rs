//! Volumes against the drive conformance suite (healthy and degraded, every level), members
//! failing under I/O, and the write hole.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::layout::{Layout, Level};
use super::meta::DATA_OFFSET;
use super::volume::{MemberSpec, MemberState, Volume};
use crate::backend::file::FileDrive;
use crate::backend::ram::RamDrive;
use crate::backend::testkit::{conformance, pattern, Rng};
use crate::backend::{BoxFuture, Drive, DriveError, DriveInfo};

const MIB: u64 = 1 << 20;
const STRIP: u64 = 64 << 10;

type Failures = Arc<Mutex<Vec<(usize, String)>>>;

fn recorder() -> (Failures, super::volume::OnMemberFailed) {
    let seen: Failures = Arc::default();
    let s = seen.clone();
    (
        seen,
        Box::new(move |i, why, _| {
            s.lock().unwrap().push((i, why.to_string()));
            false
        }),
    )
}

fn ram_members(n: usize, bytes: u64) -> Vec<Arc<dyn Drive>> {
    (0..n)
        .map(|_| Arc::new(RamDrive::new(bytes, 4096).unwrap()) as Arc<dyn Drive>)
        .collect()
}

fn specs(drives: &[Arc<dyn Drive>], failed: &[usize]) -> Vec<MemberSpec> {
    drives
        .iter()
        .enumerate()
        .map(|(i, d)| MemberSpec {
            id: format!("{i:02}"),
            drive: d.clone(),
            state: if failed.contains(&i) {
                MemberState::Failed
            } else {
                MemberState::Active
            },
        })
        .collect()
}

async fn create(level: Level, drives: &[Arc<dyn Drive>]) -> Volume {
    let bytes = drives[0].info().capacity;
    let layout = Layout::new(level, drives.len(), STRIP, bytes, DATA_OFFSET).unwrap();
    let (_, on) = recorder();
    Volume::create("v", "uuid-1", layout, specs(drives, &[]), on)
        .await
        .unwrap()
}

/// Every level passes the suite every drive passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_level_is_a_conforming_drive() {
    for (level, n, bytes) in [
        (Level::Raid0, 3, 16 * MIB),
        (Level::Raid1, 2, 20 * MIB),
        (Level::Raid10, 4, 20 * MIB),
        (Level::Raid5, 5, 16 * MIB),
        (Level::Raid6, 6, 16 * MIB),
    ] {
        let v = create(level, &ram_members(n, bytes)).await;
        conformance(Arc::new(v)).await;
    }
}

/// Degraded as far as each level goes, still every read returns what was written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn degraded_volumes_are_conforming_drives() {
    for (level, n, bytes, failed) in [
        (Level::Raid1, 3, 20 * MIB, vec![0, 2]),
        (Level::Raid10, 4, 20 * MIB, vec![1, 2]),
        (Level::Raid5, 5, 16 * MIB, vec![2]),
        (Level::Raid6, 6, 16 * MIB, vec![0, 3]),
        (Level::Raid6, 6, 16 * MIB, vec![4]),
    ] {
        let v = create(level, &ram_members(n, bytes)).await;
        for &f in &failed {
            v.fail(f, "test");
        }
        assert!(!v.is_failed() && v.is_degraded());
        conformance(Arc::new(v)).await;
    }
}

/// A drive that fails every operation once told to (a pulled drive, a dead controller).
struct Failing {
    inner: Arc<dyn Drive>,
    dead: AtomicBool,
    ops: AtomicU32,
    /// Dies after this many operations.
    after: u32,
}

impl Failing {
    fn new(inner: Arc<dyn Drive>, after: u32) -> Failing {
        Failing {
            inner,
            dead: AtomicBool::new(false),
            ops: AtomicU32::new(0),
            after,
        }
    }

    fn check(&self, offset: u64) -> Result<(), DriveError> {
        if self.ops.fetch_add(1, Ordering::Relaxed) >= self.after {
            self.dead.store(true, Ordering::Relaxed);
        }
        if self.dead.load(Ordering::Relaxed) {
            return Err(DriveError::io(
                offset,
                0,
                std::io::Error::from_raw_os_error(libc::EIO),
            ));
        }
        Ok(())
    }
}

impl Drive for Failing {
    fn info(&self) -> &DriveInfo {
        self.inner.info()
    }
    fn read(&self, offset: u64, len: usize) -> BoxFuture<'_, Result<Bytes, DriveError>> {
        Box::pin(async move {
            self.check(offset)?;
            self.inner.read(offset, len).await
        })
    }
    fn write(&self, offset: u64, data: Bytes, fua: bool) -> BoxFuture<'_, Result<(), DriveError>> {
        Box::pin(async move {
            self.check(offset)?;
            self.inner.write(offset, data, fua).await
        })
    }
    fn flush(&self) -> BoxFuture<'_, Result<(), DriveError>> {
        Box::pin(async move {
            self.check(0)?;
            self.inner.flush().await
        })
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, Result<(), DriveError>> {
        Box::pin(async move {
            self.check(offset)?;
            self.inner.write_zeroes(offset, len).await
        })
    }
    fn deallocate(&self, offset: u64, len: u64) -> BoxFuture<'_, Result<(), DriveError>> {
        Box::pin(async move {
            self.check(offset)?;
            self.inner.deallocate(offset, len).await
        })
    }
}

/// Members die in the middle of random I/O (one for RAID 5 and 10, two for RAID 6): no write
/// fails, every read returns the data, the dead are failed and reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_failing_under_io_lose_nothing() {
    for (level, n, dying) in [
        (Level::Raid5, 4, vec![(1, 300)]),
        (Level::Raid6, 5, vec![(0, 200), (3, 500)]),
        (Level::Raid10, 4, vec![(2, 250)]),
        (Level::Raid1, 2, vec![(0, 100)]),
    ] {
        let drives: Vec<Arc<dyn Drive>> = ram_members(n, 16 * MIB)
            .into_iter()
            .enumerate()
            .map(|(i, d)| {
                let after = dying.iter().find(|x| x.0 == i).map_or(u32::MAX, |x| x.1);
                Arc::new(Failing::new(d, after)) as Arc<dyn Drive>
            })
            .collect();
        let layout = Layout::new(level, n, STRIP, 16 * MIB, DATA_OFFSET).unwrap();
        let (seen, on) = recorder();
        let v = Volume::create("v", "u", layout, specs(&drives, &[]), on)
            .await
            .unwrap();
        let cap = v.info().capacity;
        let mut model = vec![0u8; cap as usize];
        let mut rng = Rng::new(n as u64);
        for i in 0..400u64 {
            let len = [4096u64, 8192, 60 << 10, STRIP, 3 * STRIP + 4096][rng.below(5) as usize];
            let at = rng.below((cap - len) / 4096) * 4096;
            if rng.below(3) == 0 {
                let got = v.read(at, len as usize).await.unwrap();
                assert!(
                    got[..] == model[at as usize..][..len as usize],
                    "{level} read {i}"
                );
            } else {
                let data = pattern(i, len as usize);
                v.write(at, data.clone(), i % 7 == 0).await.unwrap();
                model[at as usize..][..len as usize].copy_from_slice(&data);
            }
        }
        v.flush().await.unwrap();
        for (i, want) in model.chunks(MIB as usize).enumerate() {
            let got = v.read(i as u64 * MIB, want.len()).await.unwrap();
            assert!(got[..] == *want, "{level}: MiB {i}");
        }
        let failed: Vec<usize> = seen.lock().unwrap().iter().map(|f| f.0).collect();
        let mut want: Vec<usize> = dying.iter().map(|d| d.0).collect();
        want.sort();
        let mut got = failed.clone();
        got.sort();
        assert_eq!(got, want, "{level}: failed members");
        assert!(v.is_degraded() && !v.is_failed());
    }
}

/// One more loss than the level takes: I/O fails with an error, nothing panics.
#[tokio::test]
async fn a_volume_past_its_redundancy_fails_io() {
    let v = create(Level::Raid5, &ram_members(3, 16 * MIB)).await;
    v.fail(0, "test");
    v.fail(1, "test");
    assert!(v.is_failed());
    assert!(v.read(0, 4096).await.is_err());
    assert!(v.write(0, pattern(1, 4096), false).await.is_err());
    assert!(v.flush().await.is_err());
}

fn file_members(dir: &std::path::Path, n: usize) -> Vec<Arc<dyn Drive>> {
    (0..n)
        .map(|i| {
            let d = FileDrive::open(&dir.join(format!("{i}.img")), 16 * MIB, 4096).unwrap();
            Arc::new(d) as Arc<dyn Drive>
        })
        .collect()
}

async fn assemble(level: Level, drives: &[Arc<dyn Drive>]) -> (Volume, Failures) {
    let layout = Layout::new(level, drives.len(), STRIP, 16 * MIB, DATA_OFFSET).unwrap();
    let (seen, on) = recorder();
    let v = Volume::assemble("v", "uuid-1", layout, specs(drives, &[]), 0, on)
        .await
        .unwrap();
    (v, seen)
}

/// The write hole: a crash after a stripe's data was written and before its parity was. The
/// bitmap still marks the region, so assembly makes parity again: a member lost afterwards is
/// rebuilt right. Without the resync the rebuilt data is garbage (checked too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_data_and_parity_is_resynced_at_assembly() {
    for level in [Level::Raid5, Level::Raid6, Level::Raid1] {
        let dir = tempfile::tempdir().unwrap();
        let drives = file_members(dir.path(), 4);
        let v = create(level, &drives).await;
        let data = pattern(3, 4 * STRIP as usize);
        v.write(0, data.clone(), false).await.unwrap();
        v.flush().await.unwrap();
        assert!(v.dirty_regions() > 0, "{level}: written regions are marked");
        // The crash: stripe 0's data strip 0 changes on its member, its parity does not.
        let l = v.layout.clone();
        let victim = l.member_of(0, 0);
        let torn = pattern(4, STRIP as usize);
        drives[victim]
            .write(l.member_offset(0, 0), torn.clone(), true)
            .await
            .unwrap();
        drop(v);

        // Assembled again: resynced from the data as it is on the members.
        let (v, seen) = assemble(level, &drives).await;
        assert!(seen.lock().unwrap().is_empty());
        assert_eq!(v.dirty_regions(), 0, "{level}: cleaned after the resync");
        // Lose the member: what it held is rebuilt from the resynced parity.
        v.fail(victim, "test");
        let mut want = data.to_vec();
        want[..STRIP as usize].copy_from_slice(&torn);
        if level == Level::Raid1 {
            // The mirrors were made equal to the first copy read; either is what the host may see.
            let got = v.read(0, STRIP as usize).await.unwrap();
            assert!(
                got[..] == torn[..] || got[..] == data[..STRIP as usize],
                "{level}"
            );
            continue;
        }
        let got = v.read(0, 4 * STRIP as usize).await.unwrap();
        assert!(
            got[STRIP as usize..] == want[STRIP as usize..],
            "{level}: data no host touched"
        );
        assert!(
            got[..STRIP as usize] == torn[..],
            "{level}: the torn strip, rebuilt"
        );
    }
}

/// The same crash without the bitmap's mark (as if the write hole were open): the rebuilt strip
/// is wrong. Shows the test above can fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_mark_the_hole_shows() {
    let dir = tempfile::tempdir().unwrap();
    let drives = file_members(dir.path(), 4);
    let v = create(Level::Raid5, &drives).await;
    let data = pattern(3, 3 * STRIP as usize);
    v.write(0, data.clone(), false).await.unwrap();
    v.clean_intent().await.unwrap();
    assert_eq!(v.dirty_regions(), 0);
    let l = v.layout.clone();
    let victim = l.member_of(0, 0);
    drives[victim]
        .write(l.member_offset(0, 0), pattern(4, STRIP as usize), true)
        .await
        .unwrap();
    drop(v);
    let (v, _) = assemble(Level::Raid5, &drives).await;
    v.fail(l.member_of(0, 1), "test");
    let got = v.read(STRIP, STRIP as usize).await.unwrap();
    assert!(
        got[..] != data[STRIP as usize..2 * STRIP as usize],
        "parity disagreed, silently"
    );
}

/// A drive in another member's place, or one that was never a member, is failed at assembly,
/// and the volume serves degraded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn assembly_fails_a_drive_that_is_not_the_member() {
    let dir = tempfile::tempdir().unwrap();
    let drives = file_members(dir.path(), 4);
    let v = create(Level::Raid5, &drives).await;
    let data = pattern(8, 3 * STRIP as usize);
    v.write(0, data.clone(), true).await.unwrap();
    drop(v);
    let stranger = FileDrive::open(&dir.path().join("x.img"), 16 * MIB, 4096).unwrap();
    let mut swapped = drives.clone();
    swapped[2] = Arc::new(stranger);
    let (v, seen) = assemble(Level::Raid5, &swapped).await;
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].0, 2);
    assert!(seen[0].1.contains("no volume superblock"), "{}", seen[0].1);
    assert_eq!(v.read(0, data.len()).await.unwrap(), data);
    drop(v);
    let mut crossed = drives.clone();
    crossed.swap(0, 1);
    let (_, seen) = assemble(Level::Raid5, &crossed).await;
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(seen[0].1.contains("is member 1"), "{}", seen[0].1);
}

/// A spare rebuilt into a failed member's place while writes go on: every level with
/// redundancy, then the others lost in turn (as far as the level allows), the data whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spare_is_rebuilt_while_hosts_write() {
    for (level, n) in [
        (Level::Raid5, 4),
        (Level::Raid6, 5),
        (Level::Raid10, 4),
        (Level::Raid1, 2),
    ] {
        let drives = ram_members(n, 16 * MIB);
        let v = Arc::new(create(level, &drives).await);
        let cap = v.info().capacity;
        let model = Arc::new(tokio::sync::Mutex::new(vec![0u8; cap as usize]));
        let mut rng = Rng::new(11);
        for i in 0..100u64 {
            let len = [4096u64, 16384, STRIP, 2 * STRIP][rng.below(4) as usize];
            let at = rng.below((cap - len) / 4096) * 4096;
            let data = pattern(i, len as usize);
            v.write(at, data.clone(), false).await.unwrap();
            model.lock().await[at as usize..][..len as usize].copy_from_slice(&data);
        }
        v.fail(1, "test");
        let spare: Arc<dyn Drive> = Arc::new(RamDrive::new(16 * MIB, 4096).unwrap());
        v.begin_rebuild(1, "spare", spare.clone()).await.unwrap();
        // A slow rebuild, so writes land on both sides of its mark.
        v.rebuild_limit.store(4 * MIB, Ordering::Relaxed);
        let writer = {
            let (v, model) = (v.clone(), model.clone());
            tokio::spawn(async move {
                let mut rng = Rng::new(12);
                for i in 0..150u64 {
                    let len = [4096u64, 8192, STRIP][rng.below(3) as usize];
                    let at = rng.below((cap - len) / 4096) * 4096;
                    let data = pattern(1000 + i, len as usize);
                    let mut m = model.lock().await;
                    v.write(at, data.clone(), false).await.unwrap();
                    m[at as usize..][..len as usize].copy_from_slice(&data);
                    drop(m);
                    crate::timer::sleep(std::time::Duration::from_millis(3)).await;
                }
            })
        };
        v.rebuild(1).await.unwrap();
        writer.await.unwrap();
        assert!(!v.is_degraded(), "{level}: the spare is a member");
        assert_eq!(v.members()[1].id(), "spare");
        // Lose everything the level can lose except the spare: the spare carries its part.
        let others: Vec<usize> = match level {
            Level::Raid5 => vec![0],
            Level::Raid6 => vec![0, 2],
            Level::Raid10 => vec![0],
            _ => vec![0],
        };
        for o in others {
            v.fail(o, "test");
        }
        let model = model.lock().await;
        for (i, want) in model.chunks(MIB as usize).enumerate() {
            let got = v.read(i as u64 * MIB, want.len()).await.unwrap();
            assert!(got[..] == *want, "{level}: MiB {i} after the rebuild");
        }
    }
}

/// A scrub finds parity that disagrees with the data, writes it again, and the next finds
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrub_finds_and_repairs_bad_parity() {
    for level in [Level::Raid5, Level::Raid6, Level::Raid1] {
        let drives = ram_members(4, 16 * MIB);
        let v = create(level, &drives).await;
        v.write(0, pattern(1, 8 << 20), false).await.unwrap();
        assert!(v.begin_scrub());
        v.scrub().await;
        let r = v.scrub_report().unwrap();
        assert_eq!((r.mismatches, r.error.as_deref()), (0, None), "{level}");
        assert_eq!(r.checked_stripes, v.layout.stripes);
        // Rot on the parity (or a mirror copy) of stripes 0 and 5.
        let l = v.layout.clone();
        for s in [0u64, 5] {
            let m = match l.parity_members(s) {
                (Some(p), _) => p,
                _ => l.copies(s, 0).nth(1).unwrap(),
            };
            drives[m]
                .write(l.member_offset(s, 4096), pattern(9, 4096), false)
                .await
                .unwrap();
        }
        assert!(v.begin_scrub());
        assert!(!v.begin_scrub(), "one at a time");
        v.scrub().await;
        let r = v.scrub_report().unwrap();
        assert_eq!((r.mismatches, r.repaired), (2, 2), "{level}");
        assert!(v.begin_scrub());
        v.scrub().await;
        assert_eq!(v.scrub_report().unwrap().mismatches, 0, "{level}: repaired");
    }
}

/// A write that a member failure leaves out of that member is acknowledged only once the
/// failure is on record: else a stop before the record would bring the member back, stale.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_waits_until_the_failure_is_on_record() {
    let failing = Arc::new(Failing::new(
        Arc::new(RamDrive::new(16 * MIB, 4096).unwrap()),
        u32::MAX,
    ));
    let mut drives = ram_members(4, 16 * MIB);
    drives[1] = failing.clone();
    let layout = Layout::new(Level::Raid5, 4, STRIP, 16 * MIB, DATA_OFFSET).unwrap();
    let (tx, mut told) = tokio::sync::mpsc::unbounded_channel();
    let on: super::volume::OnMemberFailed = Box::new(move |i, _, n| tx.send((i, n)).is_ok());
    let v = Arc::new(
        Volume::create("v", "u", layout, specs(&drives, &[]), on)
            .await
            .unwrap(),
    );
    failing.dead.store(true, Ordering::Relaxed);
    // A whole stripe: member 1 holds a strip of it.
    let data = pattern(5, 3 * STRIP as usize);
    let write = tokio::spawn({
        let (v, data) = (v.clone(), data.clone());
        async move { v.write(0, data, false).await }
    });
    let (member, n) = told.recv().await.unwrap();
    assert_eq!(member, 1);
    crate::timer::sleep(std::time::Duration::from_millis(200)).await;
    assert!(
        !write.is_finished(),
        "acknowledged before the failure was on record"
    );
    v.change_recorded(n);
    write.await.unwrap().unwrap();
    assert_eq!(v.read(0, data.len()).await.unwrap(), data);
    // On record: the next writes go at once.
    v.write(STRIP * 3, pattern(6, 4096), false).await.unwrap();
}

/// A drive whose writes vanish once told to (what a crash leaves of writes not yet on media).
struct Vanishing {
    inner: Arc<dyn Drive>,
    vanish: AtomicBool,
}

impl Drive for Vanishing {
    fn info(&self) -> &DriveInfo {
        self.inner.info()
    }
    fn read(&self, offset: u64, len: usize) -> BoxFuture<'_, Result<Bytes, DriveError>> {
        self.inner.read(offset, len)
    }
    fn write(&self, offset: u64, data: Bytes, fua: bool) -> BoxFuture<'_, Result<(), DriveError>> {
        if self.vanish.load(Ordering::Relaxed) {
            return Box::pin(async { Ok(()) });
        }
        self.inner.write(offset, data, fua)
    }
    fn flush(&self) -> BoxFuture<'_, Result<(), DriveError>> {
        self.inner.flush()
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, Result<(), DriveError>> {
        self.inner.write_zeroes(offset, len)
    }
    fn deallocate(&self, offset: u64, len: u64) -> BoxFuture<'_, Result<(), DriveError>> {
        self.inner.deallocate(offset, len)
    }
}

/// The write hole while degraded: a member is lost, a write to its stripe reaches the data
/// member and not the parity before the crash. The lost member's data lives only in that
/// parity: the log's record of its rows makes the parity again at assembly, so it reads back.
/// (The torn parity is checked to be wrong first, so without the log the read would be.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_during_a_degraded_write_is_replayed_from_the_log() {
    for level in [Level::Raid5, Level::Raid6] {
        let dir = tempfile::tempdir().unwrap();
        let files = file_members(dir.path(), 5);
        let l = Layout::new(level, 5, STRIP, 16 * MIB, DATA_OFFSET).unwrap();
        let p_member = l.parity_members(0).0.unwrap();
        let q_member = l.parity_members(0).1;
        let vanishing: Vec<Arc<Vanishing>> = files
            .iter()
            .map(|d| {
                Arc::new(Vanishing {
                    inner: d.clone(),
                    vanish: AtomicBool::new(false),
                })
            })
            .collect();
        let drives: Vec<Arc<dyn Drive>> = vanishing
            .iter()
            .map(|v| v.clone() as Arc<dyn Drive>)
            .collect();
        let v = create(level, &drives).await;
        let base = pattern(1, v.layout.stripe_bytes() as usize * 2);
        v.write(0, base.clone(), false).await.unwrap();
        v.flush().await.unwrap();
        // Data strip 1 of stripe 0 is lost; a write to data strip 0 tears: data lands, parity not.
        let lost = l.member_of(0, 1);
        v.fail(lost, "test");
        for m in [Some(p_member), q_member].into_iter().flatten() {
            vanishing[m].vanish.store(true, Ordering::Relaxed);
        }
        v.write(0, pattern(2, 4096), false).await.unwrap();
        let generation = v.generation();
        drop(v);
        // The parity on the members now disagrees: rebuilding strip 1 from it gives garbage.
        let row = |m: usize, at: u64| {
            let (d, offset) = (files[m].clone(), l.member_offset(0, at));
            async move { d.read(offset, 4096).await.unwrap() }
        };
        let mut rebuilt = row(p_member, 0).await.to_vec();
        for j in (0..l.data_strips()).filter(|&j| j != 1) {
            crate::raid::gf::xor_into(&mut rebuilt, &row(l.member_of(0, j), 0).await);
        }
        let want = &base[STRIP as usize..STRIP as usize + 4096];
        assert!(rebuilt[..] != want[..], "{level}: the parity tore");
        // Assembled again with the member lost, at the generation the state file holds.
        let layout = Layout::new(level, 5, STRIP, 16 * MIB, DATA_OFFSET).unwrap();
        let (seen, on) = recorder();
        let v = Volume::assemble(
            "v",
            "uuid-1",
            layout,
            specs(&files, &[lost]),
            generation,
            on,
        )
        .await
        .unwrap();
        assert!(seen.lock().unwrap().is_empty());
        assert_eq!(v.unsynced_regions.load(Ordering::Relaxed), 0, "{level}");
        assert_eq!(v.dirty_regions(), 0, "{level}: cleaned after the replay");
        let got = v.read(STRIP, 4096).await.unwrap();
        assert!(
            got[..] == want[..],
            "{level}: the lost member's rows, rebuilt from replayed parity"
        );
        assert_eq!(
            v.read(0, 4096).await.unwrap(),
            pattern(2, 4096),
            "{level}: the write itself"
        );
        let rest = v.read(4096, base.len() - 4096).await.unwrap();
        assert!(
            rest[STRIP as usize..] == base[STRIP as usize + 4096..],
            "{level}: the rest"
        );
    }
}
