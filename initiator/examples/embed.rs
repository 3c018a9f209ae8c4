//! Embedding fabrik's host in an async application: the application keeps its own runtime for
//! its work and gives the NVMe-oF queues an I/O thread of their own, where it also runs the
//! tasks that issue I/O, so a command, its send and its answer never change threads.
//!
//!     cargo run --release --example embed -- ADDR:PORT NQN [BLOCKS]
//!
//! e.g. `embed 127.0.0.1:4420 nqn.2024-01.io.fabrik:box:drive-00` writes 64 blocks of
//! namespace 1 from 8 tasks at once, reads them back, checks them, and says how long each
//! half took. It overwrites those blocks.
//!
//! Then it reads them once more the way a data loader with many reads in flight would: one task
//! starts every read with a tag and takes the answers from a completion queue, many per wake-up,
//! instead of a future (and a task wake-up) per read. `fabrik bench` drives its I/O this way.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::{Bytes, BytesMut};
use fabrik_initiator::transport::{CompletionQueue, Tagged};
use fabrik_initiator::{ConnectOptions, Controller};

const NSID: u32 = 1;
const TASKS: u64 = 8;

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("embed: {e:#}");
        std::process::exit(1);
    }
}

async fn run() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (addr, nqn, blocks) = match &args[..] {
        [addr, nqn] => (addr, nqn, 64),
        [addr, nqn, n] => (addr, nqn, n.parse().context("BLOCKS: a number")?),
        _ => bail!("usage: embed ADDR:PORT NQN [BLOCKS]"),
    };

    // The I/O thread: a single-threaded runtime, kept alive until `stop` is sent.
    let io = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let io_handle = io.handle().clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let io_thread = std::thread::spawn(move || {
        io.block_on(async {
            let _ = stopped.await;
        })
    });

    let mut opts = ConnectOptions::new(addr.parse().context("ADDR:PORT")?, nqn.as_str());
    // Its I/O queue is set up on the I/O thread and runs there...
    opts.io_runtimes = vec![io_handle.clone()];
    // ... and looks for answers for up to 50 µs while commands are in flight before it sleeps.
    opts.poll_window = Duration::from_micros(50);
    let ctrl = Arc::new(Controller::connect(opts).await?);
    let lba_size = ctrl.lba_size(NSID).await?;

    // The tasks that issue I/O run on the I/O thread too: `spawn` there, await here.
    let started = Instant::now();
    let writers = (0..TASKS).map(|task| {
        let ctrl = ctrl.clone();
        io_handle.spawn(async move {
            for lba in (task..blocks).step_by(TASKS as usize) {
                let data = Bytes::from(block(lba, lba_size));
                ctrl.io_queue(0)?.write(NSID, lba, data, false).await?;
            }
            anyhow::Ok(())
        })
    });
    for writer in writers.collect::<Vec<_>>() {
        writer.await??;
    }
    let wrote = started.elapsed();

    let started = Instant::now();
    let readers = (0..TASKS).map(|task| {
        let ctrl = ctrl.clone();
        io_handle.spawn(async move {
            for lba in (task..blocks).step_by(TASKS as usize) {
                let data = ctrl.io_queue(0)?.read(NSID, lba, 1).await?;
                if data[..] != block(lba, lba_size)[..] {
                    bail!("LBA {lba}: read back other data than was written");
                }
            }
            anyhow::Ok(())
        })
    });
    for reader in readers.collect::<Vec<_>>() {
        reader.await??;
    }
    let read = started.elapsed();
    println!(
        "{blocks} blocks of {lba_size} bytes from {TASKS} tasks: written in {wrote:?}, read back and checked in {read:?}"
    );

    // One task, every read in flight at once (the queue holds those beyond its depth until
    // slots free), each tagged with its LBA; the answers come in batches.
    let started = Instant::now();
    let reader = {
        let ctrl = ctrl.clone();
        io_handle.spawn(async move {
            let answers = CompletionQueue::new();
            let queue = ctrl.io_queue(0)?;
            for lba in 0..blocks {
                let buf = BytesMut::with_capacity(lba_size as usize);
                if queue
                    .start_read_into(NSID, lba, 1, buf, answers.to(lba))
                    .is_err()
                {
                    bail!("this queue cannot start reads on a completion queue");
                }
            }
            let (mut batch, mut done, mut wakes) = (Vec::new(), 0, 0);
            while done < blocks {
                answers.take(&mut batch).await;
                wakes += 1;
                for Tagged { tag: lba, result } in batch.drain(..) {
                    if result?.data[..] != block(lba, lba_size)[..] {
                        bail!("LBA {lba}: read back other data than was written");
                    }
                    done += 1;
                }
            }
            anyhow::Ok(wakes)
        })
    };
    let wakes = reader.await??;
    println!(
        "{blocks} blocks read back and checked from one task in {:?}, in {wakes} batches of answers",
        started.elapsed()
    );

    match Arc::try_unwrap(ctrl) {
        Ok(ctrl) => ctrl.shutdown().await?,
        Err(_) => bail!("a task still holds the controller"),
    }
    let _ = stop.send(());
    io_thread.join().expect("the I/O thread panicked");
    Ok(())
}

/// The contents of block `lba`: its address, then a pattern.
fn block(lba: u64, size: u32) -> Vec<u8> {
    let mut data: Vec<u8> = (0..size).map(|i| (i as u8) ^ (lba as u8)).collect();
    data[..8].copy_from_slice(&lba.to_le_bytes());
    data
}
