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
use fabrik_initiator::bench::{self, Drive, Memory, Progress, Rw, Spec, VerifySpec};
use fabrik_initiator::gpu::emulated::EmulatedGpu;
use fabrik_initiator::gpu::mover::{DataPath, GpuMover, Staging};
use fabrik_initiator::gpu::pipeline::{self, ReadPipeline, WritePipeline};
use fabrik_initiator::gpu::{cuda, DevicePtr, Gpu, GpuBuffer, GpuDriver, GpuError};
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

/// A pipeline (`ReadPipeline::new` or `WritePipeline::new`) of `segments` segments of
/// `per_segment` slots of `unit` bytes, over a `slow_gpu(delay)`, with its device region.
fn staged_pipeline<P>(
    delay: Duration,
    unit: usize,
    per_segment: usize,
    segments: usize,
    new: impl Fn(Arc<dyn GpuDriver>, DevicePtr, pipeline::Shape) -> Result<Arc<P>, GpuError>,
) -> (Arc<EmulatedGpu>, Arc<GpuBuffer>, Arc<P>) {
    let (driver, gpu) = slow_gpu(delay);
    let shape = pipeline::Shape {
        unit,
        per_segment,
        segments,
    };
    let buffer = gpu.alloc(shape.region_len()).expect("alloc");
    let pipeline = new(driver.clone(), buffer.ptr(), shape).expect("new");
    (driver, buffer, pipeline)
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
    let mut mover = GpuMover::new(buffer.clone(), staging);
    let path = mover.path(&s, 0).await.expect("path");
    let DataPath::Staged { reason } = &path else {
        panic!("NVMe/TCP must be staged: {path}");
    };
    assert!(
        reason.contains("NVMe/TCP"),
        "the reason names the transport: {reason}"
    );
    assert!(path.to_string().starts_with("staged: "));
    assert_eq!(mover.paths().count(), 1);

    // 3 MiB + 8 KiB in 256 KiB pieces: 13 pieces through 2 buffers, at offset 4096.
    let nlb = (data.len() / lba_size(&s).await) as u32;
    mover
        .read(&s, 0, 1, 100, nlb, 4096)
        .await
        .expect("read into GPU");
    let pinned = driver.pinned_bytes();
    assert!(
        (2 * (256 << 10)..=2 * ((256 << 10) + 4096)).contains(&pinned),
        "two pinned buffers of 256 KiB (whole pages): {pinned}"
    );
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
    let mut mover = GpuMover::new(buffer.clone(), staging);
    let nlb = (data.len() / lba_size(&s).await) as u32;
    mover
        .write(&s, 1, 1, 2048, nlb, 0, false)
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
    let mut into_other = GpuMover::new(other.clone(), staging);
    into_other.read(&s, 0, 1, 2048, nlb, 0).await.expect("read");
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
    let mut mover = GpuMover::new(buffer, Staging::default());
    let blocks = (64 << 10) / lba_size(&s).await as u32;
    let err = mover
        .read(&s, 0, 1, 0, blocks + 1, 0)
        .await
        .expect_err("one block more than 64 KiB");
    assert!(
        matches!(&err, HostError::Gpu(m) if m.contains("do not fit")),
        "{err}"
    );
    let err = mover
        .write(&s, 0, 1, 0, 1, 64 << 10, false)
        .await
        .expect_err("offset at the end");
    assert!(matches!(err, HostError::Gpu(_)), "{err}");
    let err = mover.read(&s, 0, 1, 0, 0, 0).await.expect_err("0 blocks");
    assert!(matches!(err, HostError::Invalid(_)), "{err}");
    // The mover still works after refusing.
    mover
        .read(&s, 0, 1, 0, blocks, 0)
        .await
        .expect("a read that fits");
    mover.finish().await.expect("finish");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_read_pipeline_copies_whole_segments_and_reuses_them() {
    let dir = tempfile::tempdir().unwrap();
    let target = start(config(dir.path(), BackendKind::Ram, 1, 64 * MIB)).await;
    let s = session(&target, 0).await;
    let lba = lba_size(&s).await;
    let unit = 16 * lba;
    // 60 distinct units on the drive, each its own random data.
    let data = random_data(60 * unit, 21);
    s.write(0, 1, 0, data.clone(), false).await.expect("write");

    let (driver, buffer, pipeline) =
        staged_pipeline(Duration::from_millis(1), unit, 3, 3, ReadPipeline::new);
    let copies_before = driver.copies();
    // Three readers, 20 units each: the 9 slots are reused 6 times over.
    let order = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for reader in 0..3usize {
        let (s, pipeline, order) = (s.clone(), pipeline.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let mut landed = Vec::new();
            for i in 0..20 {
                let unit_index = reader * 20 + i;
                let mut slot = pipeline.slot().await.expect("slot");
                let seq = order.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let slba = (unit_index * unit / lba) as u64;
                s.read_to(reader, 1, slba, (unit / lba) as u32, slot.target())
                    .await
                    .expect("read");
                slot.received().expect("received");
                landed.push((slot.device_offset(), seq, unit_index));
            }
            landed
        }));
    }
    let mut last = std::collections::HashMap::new();
    for t in tasks {
        for (offset, seq, unit_index) in t.await.unwrap() {
            let e = last.entry(offset).or_insert((seq, unit_index));
            if seq > e.0 {
                *e = (seq, unit_index);
            }
        }
    }
    pipeline.finish().await.expect("finish");
    assert_eq!(last.len(), 9, "every slot used");
    // Whole segments go over: 60 reads in 3-slot segments are 20 copies (not 60).
    assert_eq!(driver.copies() - copies_before, 20);
    for (offset, (_, unit_index)) in last {
        let mut got = vec![0u8; unit];
        buffer.copy_to_host(offset, &mut got).expect("copy back");
        let want = &data[unit_index * unit..(unit_index + 1) * unit];
        assert_same_data(&got, want, &format!("slot at {offset}, unit {unit_index}"));
    }
    drop(pipeline);
    assert_eq!(driver.pinned_bytes(), 0, "the arena is unpinned");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_slow_read_does_not_hold_up_the_others() {
    let (_driver, _buffer, pipeline) =
        staged_pipeline(Duration::from_micros(100), 4096, 2, 3, ReadPipeline::new);
    // Segment 0: one read stays out, the other comes back.
    let slow = pipeline.slot().await.expect("slot");
    drop(pipeline.slot().await.expect("slot"));
    // Segments 1 and 2: four reads come back, and both segments go to the GPU.
    for _ in 0..4 {
        drop(pipeline.slot().await.expect("slot"));
    }
    // Next in ring order is segment 0, still waiting for its slow read; segment 1 is free
    // once its copy is done, and reads go on there.
    let next = tokio::time::timeout(Duration::from_secs(5), pipeline.slot())
        .await
        .expect("held up by one slow read")
        .expect("slot");
    assert_eq!(next.device_offset(), 2 * 4096, "segment 1");
    drop((slow, next));
    pipeline.finish().await.expect("finish");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_write_pipeline_sends_each_slot_from_the_device_region() {
    let dir = tempfile::tempdir().unwrap();
    let target = start(config(dir.path(), BackendKind::Ram, 1, 64 * MIB)).await;
    let s = session(&target, 0).await;
    let lba = lba_size(&s).await;
    let unit = 8 * lba;
    let (driver, buffer, pipeline) =
        staged_pipeline(Duration::from_millis(1), unit, 3, 3, WritePipeline::new);
    let len = buffer.len();
    let device_data = random_data(len, 5);
    buffer.copy_from_host(0, &device_data).expect("upload");
    let copies_before = driver.copies();
    // Three writers, 10 writes each, to units 0..30: the 9 slots are used 3-4 times over.
    let mut tasks = Vec::new();
    for writer in 0..3usize {
        let (s, pipeline) = (s.clone(), pipeline.clone());
        tasks.push(tokio::spawn(async move {
            let mut sent = Vec::new();
            for i in 0..10 {
                let unit_index = writer * 10 + i;
                let slot = pipeline.slot().await.expect("slot");
                let offset = slot.device_offset();
                let slba = (unit_index * unit / lba) as u64;
                s.write(writer, 1, slba, slot.into_bytes(), false)
                    .await
                    .expect("write");
                sent.push((unit_index, offset));
            }
            sent
        }));
    }
    for t in tasks {
        for (unit_index, offset) in t.await.unwrap() {
            let slba = (unit_index * unit / lba) as u64;
            let on_drive = s.read(0, 1, slba, (unit / lba) as u32).await.unwrap();
            let want = &device_data[offset..offset + unit];
            assert_same_data(
                &on_drive,
                want,
                &format!("unit {unit_index} from slot at {offset}"),
            );
        }
    }
    // 30 writes through segments of 3: 10 fetches, one per segment used (not one per write),
    // and at most the next segment fetched ahead and not used.
    let fetches = driver.copies() - copies_before;
    assert!(
        (10..=11).contains(&fetches),
        "{fetches} device-to-host copies"
    );
    drop(pipeline);
    assert_eq!(driver.pinned_bytes(), 0, "the arena is unpinned");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_used_segment_is_fetched_again_only_when_writes_come_to_it_next() {
    // Fetched too early, a segment's data would wait in the arena (and leave the CPU caches)
    // until writes come round to it: only the segment after the active one is fetched ahead.
    let (driver, _buffer, pipeline) =
        staged_pipeline(Duration::from_micros(100), 4096, 2, 3, WritePipeline::new);
    let before = driver.copies();
    let fetches = || driver.copies() - before;
    let two_slots = || async {
        let a = pipeline.slot().await.expect("slot");
        let b = pipeline.slot().await.expect("slot");
        (a.device_offset(), b.device_offset())
    };
    assert_eq!(two_slots().await, (0, 4096), "segment 0");
    assert_eq!(fetches(), 1);
    // Segment 0 is used up and sent; writes go on with segment 1, and segment 2 is next.
    assert_eq!(two_slots().await, (8192, 12288), "segment 1");
    assert_eq!(fetches(), 2, "segment 0 is not fetched again yet");
    // On to segment 2: segment 0 comes next, so it is fetched now, while 2 is used.
    assert_eq!(two_slots().await, (16384, 20480), "segment 2");
    assert_eq!(fetches(), 4, "segments 2 and 0");
    assert_eq!(two_slots().await, (0, 4096), "segment 0 again");
    assert_eq!(fetches(), 5, "and segment 1, next");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn io_waiting_for_one_copy_spend_one_thread_on_it() {
    // Eight writes want slots of the same segment while its copy runs: one of them waits on
    // the driver (a blocking thread), the others are told when it is done.
    let (driver, buffer, pipeline) =
        staged_pipeline(Duration::from_millis(50), 4096, 8, 2, WritePipeline::new);
    let device_data = random_data(buffer.len(), 9);
    buffer.copy_from_host(0, &device_data).expect("upload");
    let waits_before = driver.waits();
    let all_in = Arc::new(tokio::sync::Barrier::new(8));
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (pipeline, all_in) = (pipeline.clone(), all_in.clone());
            tokio::spawn(async move {
                let slot = pipeline.slot().await.expect("slot");
                let offset = slot.device_offset();
                let bytes = slot.into_bytes();
                all_in.wait().await;
                (offset, bytes)
            })
        })
        .collect();
    let mut offsets = Vec::new();
    for t in tasks {
        let (offset, bytes) = t.await.unwrap();
        assert_same_data(&bytes, &device_data[offset..offset + 4096], "slot data");
        offsets.push(offset);
    }
    offsets.sort();
    assert_eq!(offsets, (0..8).map(|i| i * 4096).collect::<Vec<_>>());
    let waits = driver.waits() - waits_before;
    assert_eq!(waits, 1, "blocking waits for the one copy");
    let stats = pipeline.stats();
    assert_eq!(
        (stats.copies, stats.waits, stats.blocked),
        (1, 8, 1),
        "one copy, eight I/Os waited for it, one of them on a thread"
    );
}

async fn bench(drives: &[Drive], spec: Spec) -> bench::Report {
    bench::run(drives.to_vec(), spec, Arc::new(Progress::default()))
        .await
        .expect("bench run")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_verifies_what_landed_in_gpu_memory() {
    let dir = tempfile::tempdir().unwrap();
    let target = start(config(dir.path(), BackendKind::Ram, 2, 64 * MIB)).await;
    let mut drives = Vec::new();
    for i in 0..2 {
        drives.push(Drive::open(session(&target, i).await, 1).await.expect("ns"));
    }
    let (driver, gpu) = slow_gpu(Duration::from_micros(300));
    let verify = |prefill| {
        Some(VerifySpec {
            seed: 0x6a1,
            prefill,
        })
    };
    // Writes from GPU memory (the pattern uploaded first), read back into it and checked.
    let write = Spec {
        rw: Rw::Write,
        bs: 64 << 10,
        iodepth: 4,
        threads: 2,
        size: Some(8 * MIB),
        verify: verify(true),
        memory: Memory::Gpu(gpu.clone()),
        ..Spec::default()
    };
    let report = bench(&drives, write).await;
    let v = report.verify.as_ref().expect("verify results");
    assert_eq!(v.errors, 0, "{:?}", v.first_errors);
    assert_eq!(v.blocks_checked, 2048, "every block written is read back");
    let m = report.memory.as_ref().expect("memory reported");
    assert_eq!(m.path, "staged");
    assert_eq!(m.gpu.name, "emulated GPU (host memory)");
    assert!(
        m.paths.iter().all(|p| p.contains("NVMe/TCP")),
        "{:?}",
        m.paths
    );
    assert!(
        report.to_text().contains("path staged"),
        "{}",
        report.to_text()
    );
    assert!(driver.copies() > 0);
    let staging = m.staging.expect("staging reported");
    assert!(
        staging.copies >= 2 && staging.copies <= driver.copies(),
        "{staging:?}: a worker's 4 MiB is at least a segment each"
    );
    assert!(
        report.to_text().contains(" copies; "),
        "{}",
        report.to_text()
    );

    // A random read run into the GPU finds the region clean...
    let read = Spec {
        rw: Rw::RandRead,
        bs: 64 << 10,
        iodepth: 4,
        threads: 2,
        size: Some(8 * MIB),
        verify: verify(false),
        memory: Memory::Gpu(gpu.clone()),
        ..Spec::default()
    };
    let clean = bench(&drives, read.clone()).await;
    assert_eq!(clean.verify.as_ref().unwrap().errors, 0);
    // ...and one overwritten block on the drive is caught in what reached the GPU.
    let lba = lba_size(&drives[1].session).await;
    drives[1]
        .session
        .write(0, 1, 3, random_data(lba, 3), false)
        .await
        .unwrap();
    let sequential = Spec {
        rw: Rw::Read,
        ..read
    };
    let caught = bench(&drives, sequential).await;
    let v = caught.verify.expect("verify");
    assert_eq!(v.errors, 1, "{:?}", v.first_errors);
    assert!(
        v.first_errors[0].contains("drive 1"),
        "{:?}",
        v.first_errors
    );
    assert_eq!(driver.pinned_bytes(), 0, "every staging buffer unpinned");
}

#[test]
fn no_driver_is_an_error_not_a_panic() {
    // This machine has no NVIDIA driver (CI); where one is, GPU 4096 does not exist.
    let err = Gpu::open(4096).expect_err("no GPU 4096");
    if !cuda::driver_present() {
        assert_eq!(err.0, cuda::NO_DRIVER);
        let err = Memory::parse("gpu").expect_err("no GPU here");
        assert_eq!(err, format!("--mem gpu: {}", cuda::NO_DRIVER));
    } else {
        assert!(err.0.contains("no GPU 4096"), "{err}");
    }
    assert!(matches!(Memory::parse("host"), Ok(Memory::Host)));
    assert!(matches!(Memory::parse("emulated-gpu"), Ok(Memory::Gpu(_))));
    let err = Memory::parse("gpu:x").expect_err("bad index");
    assert!(err.contains("gpu:N"), "{err}");
}

/// Reads started on a completion queue (`Session::start_read_to`) into slots taken without
/// waiting (`ReadPipeline::try_slot`), as the bench's workers start them: every slot is handed
/// out before `try_slot` says none is free, and each read's data lands at its slot's place in
/// GPU memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_started_on_a_completion_queue_land_in_their_staging_slots() {
    use fabrik_initiator::transport::{CompletionQueue, Tagged};
    let dir = tempfile::tempdir().unwrap();
    let target = start(config(dir.path(), BackendKind::Ram, 1, 64 * MIB)).await;
    let s = session(&target, 0).await;
    let lba = lba_size(&s).await;
    let unit = 4 * lba;
    let data = random_data(9 * unit, 33);
    s.write(0, 1, 0, data.clone(), false).await.expect("write");

    let (driver, buffer, pipeline) =
        staged_pipeline(Duration::from_millis(1), unit, 3, 3, ReadPipeline::new);
    let mut slots = Vec::new();
    while let Some(slot) = pipeline.try_slot().expect("try_slot") {
        slots.push(slot);
    }
    assert_eq!(slots.len(), 9, "every slot of the 3 segments, then none");
    let answers = CompletionQueue::new();
    for (i, slot) in slots.iter().enumerate() {
        let slba = (i * unit / lba) as u64;
        let nlb = (unit / lba) as u32;
        assert!(s.start_read_to(0, 1, slba, nlb, slot.target(), answers.to(i as u64)));
    }
    let mut got: Vec<Tagged> = Vec::new();
    while got.len() < slots.len() {
        answers.take(&mut got).await;
    }
    for t in &got {
        assert!(t.result.is_ok(), "read {}: {:?}", t.tag, t.result);
    }
    let offsets: Vec<usize> = slots.iter().map(|s| s.device_offset()).collect();
    drop(slots);
    pipeline.finish().await.expect("finish");
    for (i, offset) in offsets.into_iter().enumerate() {
        let mut landed = vec![0u8; unit];
        buffer.copy_to_host(offset, &mut landed).expect("copy back");
        assert_same_data(
            &landed,
            &data[i * unit..(i + 1) * unit],
            &format!("unit {i}"),
        );
    }
    drop(pipeline);
    assert_eq!(driver.pinned_bytes(), 0, "the arena is unpinned");
}

/// The bench's workers run staged GPU reads and writes through their completion queues
/// (no --verify): every unit of a sequential pass once, slots waited for on a slow copy
/// engine, the path reported, every staging buffer given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_workers_stage_gpu_transfers_through_their_completion_queues() {
    let dir = tempfile::tempdir().unwrap();
    let target = start(config(dir.path(), BackendKind::Ram, 2, 64 * MIB)).await;
    let mut drives = Vec::new();
    for i in 0..2 {
        drives.push(Drive::open(session(&target, i).await, 1).await.expect("ns"));
    }
    let (driver, gpu) = slow_gpu(Duration::from_micros(500));
    for rw in [Rw::Write, Rw::Read] {
        let spec = Spec {
            rw,
            bs: 16 << 10,
            iodepth: 16,
            threads: 2,
            size: Some(8 * MIB),
            memory: Memory::Gpu(gpu.clone()),
            ..Spec::default()
        };
        let report = bench(&drives, spec).await;
        assert_eq!(report.ios, 8 * MIB / (16 << 10), "{rw:?}: every unit once");
        let m = report.memory.as_ref().expect("memory reported");
        assert_eq!(m.path, "staged", "{rw:?}");
        let staging = m.staging.expect("staging reported");
        assert!(staging.copies > 0, "{rw:?}: {staging:?}");
    }
    assert_eq!(driver.pinned_bytes(), 0, "every staging buffer unpinned");
}
