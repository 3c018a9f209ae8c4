//! The block backend (O_DIRECT through io_uring, registered buffers) behind the full target:
//! concurrent large and small transfers verify, on a regular file standing in for a device.

mod common;

use std::sync::Arc;

use common::*;
use fabrik_initiator::Controller;
use fabrik_target::backend::BackendKind;
use fabrik_target::config::DriveSpec;
use tokio::task::JoinSet;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_transfers_on_the_block_backend() {
    // O_DIRECT needs a filesystem that supports it (tmpfs may not): use the build folder.
    let base = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let dir = tempfile::tempdir_in(base).unwrap();
    // FABRIK_TEST_BLOCK_DEVICE=/dev/loopN runs the same on a real block device.
    let path = match std::env::var_os("FABRIK_TEST_BLOCK_DEVICE") {
        Some(dev) => std::path::PathBuf::from(dev),
        None => {
            let path = dir.path().join("device.img");
            std::fs::File::create(&path)
                .unwrap()
                .set_len(256 << 20)
                .unwrap();
            path
        }
    };
    let mut cfg = config(dir.path(), BackendKind::Block, 1, 256 << 20);
    cfg.drive_specs = vec![DriveSpec {
        id: "00".into(),
        backend: BackendKind::Block,
        path: Some(path),
        size: 256 << 20,
        block_size: 4096,
    }];
    let target = start(cfg).await;
    let mut opts = options(addr(&target), &nqns(&target)[0]);
    opts.io_queues = 2;
    let ctrl = Arc::new(Controller::connect(opts).await.unwrap());
    // A regular file's block size is the filesystem's O_DIRECT alignment (often 512).
    let lba = ctrl.lba_size(1).await.unwrap() as u64;
    let mut workers = JoinSet::new();
    for w in 0..16u64 {
        let ctrl = ctrl.clone();
        workers.spawn(async move {
            for round in 0..16u64 {
                let bytes = [4096u64, 128 << 10, 256 << 10, 1 << 20][(round % 4) as usize];
                let (slba, nlb) = (
                    (w * (16 << 20) + round * (1 << 20)) / lba,
                    (bytes / lba) as u32,
                );
                let data = random_data(bytes as usize, w << 16 | round);
                ctrl.write(1, slba, data.clone(), false).await.unwrap();
                let read = ctrl.read(1, slba, nlb).await.unwrap();
                assert_same_data(
                    &read,
                    &data,
                    &format!("worker {w} round {round} ({bytes} bytes)"),
                );
            }
        });
    }
    while let Some(r) = workers.join_next().await {
        r.unwrap();
    }
    Arc::into_inner(ctrl).unwrap().shutdown().await.unwrap();
    target.shutdown().await;
}
