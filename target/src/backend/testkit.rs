//! Tests every storing backend must pass (file, block, ram), against an in-memory model.

use std::sync::Arc;

use bytes::Bytes;

use super::{BackendKind, Drive, DriveError};

const KIB: usize = 1 << 10;
const MIB: u64 = 1 << 20;

/// Whether this kernel (and sandbox) lets us create an io_uring.
pub(crate) fn uring_works() -> bool {
    io_uring::IoUring::new(4).is_ok()
}

/// Whether `IoMode::Auto` should pick io_uring here.
pub(crate) fn auto_uses_uring() -> bool {
    uring_works() && !matches!(std::env::var_os("FABRIK_NO_URING"), Some(v) if v != "0")
}

/// xorshift64*: reproducible test data and offsets without a dependency.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// `len` pseudo-random bytes determined by `seed`.
pub(crate) fn pattern(seed: u64, len: usize) -> Bytes {
    let mut rng = Rng::new(seed);
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        v.extend_from_slice(&rng.next().to_le_bytes());
    }
    v.truncate(len);
    Bytes::from(v)
}

pub(crate) fn is_zero(b: &[u8]) -> bool {
    b.iter().all(|&x| x == 0)
}

/// Runs every shared check on a fresh drive of 16..=64 MiB.
pub(crate) async fn conformance<D: Drive>(drive: Arc<D>) {
    let cap = drive.info().capacity;
    assert!(
        (16 * MIB..=64 * MIB).contains(&cap),
        "conformance wants 16..=64 MiB"
    );
    let mut model = vec![0u8; cap as usize];
    random_roundtrips(&*drive, &mut model).await;
    range_errors(&*drive).await;
    zeroing(&*drive, &mut model).await;
    fua_and_flush(&*drive, &mut model).await;
    verify_all(&*drive, &model).await;
    reads_into_lent_memory(&*drive, &model).await;
    concurrent(drive).await;
}

/// `read_into` fills the lent buffer with what `read` returns, leaves the data where the buffer
/// lies, and gives the buffer back once the data goes (or at once, for a read that fails).
async fn reads_into_lent_memory<D: Drive>(drive: &D, model: &[u8]) {
    use super::read_buf::test_lender::VecLender;
    use std::sync::atomic::Ordering;
    let lender = VecLender::new();
    let bs = drive.info().block_size as usize;
    let mut rng = Rng::new(7);
    for len in [bs, 2 * bs, 64 << 10, MIB as usize] {
        for _ in 0..4 {
            let at = rng.below(((model.len() - len) / bs) as u64) as usize * bs;
            // Garbage where the data goes: whatever the memory last carried must not show.
            let buf = lender.buf(len, 0xa5);
            let start = buf.as_slice().as_ptr() as usize;
            let got = drive.read_into(at as u64, buf).await.unwrap();
            assert_eq!(
                got.as_ptr() as usize,
                start,
                "the data is where the lent buffer lies"
            );
            assert!(got[..] == model[at..at + len], "read_into of {len} at {at}");
        }
    }
    assert_eq!(
        lender.out.load(Ordering::SeqCst),
        0,
        "every buffer came back"
    );
    let cap = drive.info().capacity;
    let e = drive.read_into(cap, lender.buf(bs, 0)).await.unwrap_err();
    assert!(matches!(e, DriveError::OutOfRange { .. }), "{e}");
    assert_eq!(
        lender.out.load(Ordering::SeqCst),
        0,
        "a failed read gives it back"
    );
}

async fn verify_all<D: Drive>(drive: &D, model: &[u8]) {
    for (i, want) in model.chunks(MIB as usize).enumerate() {
        let got = drive.read(i as u64 * MIB, want.len()).await.unwrap();
        assert!(got[..] == *want, "drive differs from model in MiB {i}");
    }
}

/// Writes random data at random aligned offsets, sizes from one block to 1 MiB, reading
/// each write back and random spans (crossing write boundaries) against the model.
async fn random_roundtrips<D: Drive>(drive: &D, model: &mut [u8]) {
    verify_all(drive, model).await; // never-written: all zeros
    let bs = drive.info().block_size as usize;
    let blocks = model.len() / bs;
    let mut rng = Rng::new(42);
    let sizes = [
        bs,
        4 * KIB,
        8 * KIB,
        12 * KIB,
        64 * KIB,
        128 * KIB,
        256 * KIB,
        1024 * KIB,
    ];
    for i in 0..60 {
        let len = sizes[rng.below(sizes.len() as u64) as usize];
        let off = rng.below((blocks - len / bs + 1) as u64) as usize * bs;
        let data = pattern(i, len);
        drive.write(off as u64, data.clone(), false).await.unwrap();
        model[off..off + len].copy_from_slice(&data);
        assert_eq!(
            drive.read(off as u64, len).await.unwrap(),
            data,
            "write {i}"
        );

        let span = (1 + rng.below(4 * MIB / bs as u64) as usize).min(blocks) * bs;
        let at = rng.below((blocks - span / bs + 1) as u64) as usize * bs;
        let got = drive.read(at as u64, span).await.unwrap();
        assert!(got[..] == model[at..at + span], "span {at}+{span}");
    }
}

fn expect_unaligned(res: Result<impl std::fmt::Debug, DriveError>, what: &str) {
    assert!(
        matches!(res, Err(DriveError::Unaligned { .. })),
        "{what}: {res:?}"
    );
}

fn expect_out_of_range(res: Result<impl std::fmt::Debug, DriveError>, what: &str) {
    assert!(
        matches!(res, Err(DriveError::OutOfRange { .. })),
        "{what}: {res:?}"
    );
}

/// Misaligned and out-of-range requests fail with the right error; the edges still work.
pub(crate) async fn range_errors<D: Drive>(drive: &D) {
    let (cap, bs) = (drive.info().capacity, drive.info().block_size as u64);
    let block = pattern(9, bs as usize);
    let top = u64::MAX - (u64::MAX % bs); // aligned, and overflows when added to
    for (off, len) in [(bs / 2, bs), (0, bs + 1), (0, bs / 2)] {
        expect_unaligned(drive.read(off, len as usize).await, "read");
        expect_unaligned(
            drive.write(off, pattern(1, len as usize), false).await,
            "write",
        );
        expect_unaligned(drive.write_zeroes(off, len).await, "write_zeroes");
        expect_unaligned(drive.deallocate(off, len).await, "deallocate");
    }
    for (off, len) in [(cap, bs), (cap - bs, 2 * bs), (0, cap + bs), (top, bs)] {
        expect_out_of_range(drive.read(off, len as usize).await, "read");
        expect_out_of_range(
            drive.write(off, pattern(1, len as usize), false).await,
            "write",
        );
        expect_out_of_range(drive.write_zeroes(off, len).await, "write_zeroes");
        expect_out_of_range(drive.deallocate(off, len).await, "deallocate");
    }
    // The last block is in range, and so are empty requests at the very end.
    let last = cap - bs;
    let old = drive.read(last, bs as usize).await.unwrap();
    drive.write(last, block.clone(), false).await.unwrap();
    if drive.info().kind != BackendKind::Null {
        assert_eq!(drive.read(last, bs as usize).await.unwrap(), block);
    }
    drive.write(last, old, false).await.unwrap();
    assert!(drive.read(cap, 0).await.unwrap().is_empty());
    drive.deallocate(cap, 0).await.unwrap();
}

/// Deallocate and write-zeroes zero exactly their range (whole 1 MiB stretches and partial
/// ones), leave the neighbours alone, and the range can be written again.
async fn zeroing<D: Drive>(drive: &D, model: &mut [u8]) {
    let bs = drive.info().block_size as u64;
    let base = 4 * MIB;
    let data = pattern(77, 6 * MIB as usize);
    drive.write(base, data.clone(), false).await.unwrap();
    model[base as usize..][..data.len()].copy_from_slice(&data);

    let ranges = [
        (base + MIB / 2 + bs, 2 * MIB + 3 * bs), // partial, whole, partial
        (base + 4 * MIB - bs, MIB + 2 * bs),
        (base + 5 * MIB + 8 * bs, bs),
    ];
    for (i, &(off, len)) in ranges.iter().enumerate() {
        if i % 2 == 0 {
            drive.deallocate(off, len).await.unwrap();
        } else {
            drive.write_zeroes(off, len).await.unwrap();
        }
        model[off as usize..(off + len) as usize].fill(0);
        let got = drive.read(off - bs, (len + 2 * bs) as usize).await.unwrap();
        assert!(
            got[..] == model[(off - bs) as usize..(off + len + bs) as usize],
            "range {i}"
        );
        assert!(is_zero(&got[bs as usize..][..len as usize]));
    }
    // Zeroing twice (the second time, space already freed) works too.
    drive.deallocate(12 * MIB, 2 * MIB).await.unwrap();
    drive.write_zeroes(12 * MIB, MIB).await.unwrap();
    drive.deallocate(12 * MIB, 2 * MIB).await.unwrap();
    model[12 * MIB as usize..14 * MIB as usize].fill(0);
    // Refill part of a deallocated range.
    let refill = pattern(78, 64 * KIB);
    let at = ranges[0].0 + MIB;
    drive.write(at, refill.clone(), false).await.unwrap();
    model[at as usize..][..refill.len()].copy_from_slice(&refill);
    verify_all(drive, model).await;
}

async fn fua_and_flush<D: Drive>(drive: &D, model: &mut [u8]) {
    let data = pattern(5, 128 * KIB);
    drive.write(MIB, data.clone(), true).await.unwrap();
    model[MIB as usize..][..data.len()].copy_from_slice(&data);
    assert_eq!(drive.read(MIB, data.len()).await.unwrap(), data);
    drive.flush().await.unwrap();
}

/// 64 tasks, each writing and verifying its own stretch over and over, plus flushers.
async fn concurrent<D: Drive>(drive: Arc<D>) {
    let bs = drive.info().block_size as u64;
    let region = drive.info().capacity / 64 / bs * bs;
    let mut tasks = Vec::new();
    for t in 0..64u64 {
        let drive = drive.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng::new(1000 + t);
            for round in 0..8 {
                let len = (1 + rng.below(region / bs)) * bs;
                let off = t * region + rng.below(region / bs - len / bs + 1) * bs;
                let data = pattern(t * 100 + round, len as usize);
                drive
                    .write(off, data.clone(), round % 4 == 3)
                    .await
                    .unwrap();
                assert_eq!(
                    drive.read(off, len as usize).await.unwrap(),
                    data,
                    "task {t}"
                );
                if round == 5 {
                    drive.deallocate(off, bs).await.unwrap();
                    assert!(is_zero(&drive.read(off, bs as usize).await.unwrap()));
                }
            }
        }));
    }
    for _ in 0..4 {
        let drive = drive.clone();
        tasks.push(tokio::spawn(async move { drive.flush().await.unwrap() }));
    }
    for task in tasks {
        task.await.unwrap();
    }
}
