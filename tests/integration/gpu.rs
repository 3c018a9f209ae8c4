//! The GPU data paths against an in-process fabrikd, on an emulated GPU (host memory behind the
//! `GpuDriver` trait, copies on a thread per stream, so they are really asynchronous): data read
//! into GPU memory equals what was written, writes from GPU memory land on the drive, the path
//! is chosen and reported (NVMe/TCP: staged, with the reason), the staging ring pins its
//! buffers once and gives them back, and a slow copy engine cannot make a buffer be reused
//! before its copy is done.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use fabrik_initiator::gpu::emulated::EmulatedGpu;
use fabrik_initiator::gpu::mover::{DataPath, GpuMover, Staging};
use fabrik_initiator::gpu::{cuda, Gpu};
use fabrik_initiator::host::session::{RecoveryPolicy, Session};
use fabrik_initiator::{Controller, HostError};
use fabrik_target::backend::BackendKind;
use fabrik_target::Target;

const MIB: u64 = 1 << 20;

async fn lba_size(s: &Arc<Session>) -> usize {
    s.with_path(|c| async move { c.lba_size(1).await })
        .await
        .expect("lba size") as usize
}

async fn session(target: &Target, index: usize) -> Arc<Session> {
    let mut opts = options(addr(target), &nqns(target)[index]);
    opts.io_queues = 2;
    let ctrl = Controller::connect(opts.clone()).await.expect("connect");
    Session::from_controllers(vec![(opts, Some(ctrl))], RecoveryPolicy::default())
        .await
        .expect("session")
}

/// An emulated GPU whose every copy takes `delay`: a ring that reused a buffer before its copy
/// was done would send or land the wrong data.
fn slow_gpu(delay: Duration) -> (Arc<EmulatedGpu>, Gpu) {
    let driver = Arc::new(EmulatedGpu::new(delay));
    (driver.clone(), Gpu::with_driver(driver))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_land_in_gpu_memory_through_the_staging_ring() {
    let dir = tempfile::tempdir().unwrap();
    let target = start(config(dir.path(), BackendKind::Ram, 1, 64 * MIB)).await;
    let s = session(&target, 0).await;
    let data = random_data(3 * MIB as usize + 8192, 7);
    s.write(0, 1, 100, data.clone(), false)
        .await
        .expect("write");

    let (driver, gpu) = slow_gpu(Duration::from_millis(3));
    let buffer = gpu.alloc(data.len() + 4096).expect("alloc");
    let staging = Staging {
        buffers: 2,
        chunk: 256 << 10,
    };
    let mut mover = GpuMover::new(s.clone(), 0, buffer.clone(), staging)
        .await
        .expect("mover");
    let DataPath::Staged { reason } = mover.path() else {
        panic!("NVMe/TCP must be staged: {}", mover.path());
    };
    assert!(
        reason.contains("NVMe/TCP"),
        "the reason names the transport: {reason}"
    );
    assert!(mover.path().to_string().starts_with("staged: "));
    let pinned = driver.pinned_bytes();
    assert!(
        (2 * (256 << 10)..=2 * ((256 << 10) + 4096)).contains(&pinned),
        "two pinned buffers of 256 KiB (whole pages): {pinned}"
    );

    // 3 MiB + 8 KiB in 256 KiB pieces: 13 pieces through 2 buffers, at offset 4096.
    let nlb = (data.len() / lba_size(&s).await) as u32;
    mover.read(1, 100, nlb, 4096).await.expect("read into GPU");
    mover.finish().await.expect("copies done");
    assert_eq!(driver.copies(), 13, "one host-to-device copy per piece");
    assert_eq!(
        mover.restaged(),
        0,
        "reads land in the pinned buffers themselves"
    );

    let mut back = vec![0u8; data.len()];
    buffer.copy_to_host(4096, &mut back).expect("copy back");
    assert_same_data(&back, &data, "GPU memory after the read");

    drop(mover);
    assert_eq!(driver.pinned_bytes(), 0, "the ring unpins its buffers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_take_their_data_from_gpu_memory() {
    let dir = tempfile::tempdir().unwrap();
    let target = start(config(dir.path(), BackendKind::Ram, 1, 64 * MIB)).await;
    let s = session(&target, 0).await;
    let (_driver, gpu) = slow_gpu(Duration::from_millis(2));
    let data = random_data(MIB as usize + 4096, 11);
    let buffer = gpu.alloc(data.len()).expect("alloc");
    buffer.copy_from_host(0, &data).expect("upload");
    let staging = Staging {
        buffers: 3,
        chunk: 128 << 10,
    };
    let mut mover = GpuMover::new(s.clone(), 1, buffer.clone(), staging)
        .await
        .expect("mover");
    let nlb = (data.len() / lba_size(&s).await) as u32;
    mover
        .write(1, 2048, nlb, 0, false)
        .await
        .expect("write from GPU");
    assert_eq!(
        mover.restaged(),
        0,
        "the sent buffers come back to the ring"
    );
    let on_drive = s.read(0, 1, 2048, nlb).await.expect("read back");
    assert_same_data(&on_drive, &data, "drive after the write from GPU memory");

    // And back again, into another place of the GPU buffer, by the same mover.
    let other = gpu.alloc(data.len()).expect("alloc");
    let mut into_other = GpuMover::new(s.clone(), 0, other.clone(), staging)
        .await
        .expect("mover");
    into_other.read(1, 2048, nlb, 0).await.expect("read");
    into_other.finish().await.expect("finish");
    let mut back = vec![0u8; data.len()];
    other.copy_to_host(0, &mut back).expect("copy back");
    assert_same_data(&back, &data, "GPU round trip");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_outside_the_gpu_buffer_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let target = start(config(dir.path(), BackendKind::Ram, 1, 16 * MIB)).await;
    let s = session(&target, 0).await;
    let gpu = Gpu::emulated();
    let buffer = gpu.alloc(64 << 10).expect("alloc");
    let mut mover = GpuMover::new(s.clone(), 0, buffer, Staging::default())
        .await
        .expect("mover");
    let blocks = (64 << 10) / lba_size(&s).await as u32;
    let err = mover
        .read(1, 0, blocks + 1, 0)
        .await
        .expect_err("one block more than 64 KiB");
    assert!(
        matches!(&err, HostError::Gpu(m) if m.contains("do not fit")),
        "{err}"
    );
    let err = mover
        .write(1, 0, 1, 64 << 10, false)
        .await
        .expect_err("offset at the end");
    assert!(matches!(err, HostError::Gpu(_)), "{err}");
    let err = mover.read(1, 0, 0, 0).await.expect_err("0 blocks");
    assert!(matches!(err, HostError::Invalid(_)), "{err}");
    // The mover still works after refusing.
    mover.read(1, 0, blocks, 0).await.expect("a read that fits");
}

#[test]
fn no_driver_is_an_error_not_a_panic() {
    // This machine has no NVIDIA driver (CI); where one is, GPU 4096 does not exist.
    let err = Gpu::open(4096).err().expect("no GPU 4096");
    if !cuda::driver_present() {
        assert_eq!(err.0, cuda::NO_DRIVER);
    } else {
        assert!(err.0.contains("no GPU 4096"), "{err}");
    }
}
