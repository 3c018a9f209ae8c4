//! Reads a file-sized extent striped over several drives straight into one GPU buffer.
//!
//!     cargo run --release --example gpu_extent -- ADDR:PORT SIZE NQN... [--mem gpu|gpu:N|emulated-gpu]
//!
//! e.g. `gpu_extent 10.0.0.1:4420 8g nqn...:drive-00 nqn...:drive-01` reads 8 GiB striped in
//! 1 MiB units over the two drives (namespace 1 of each) into GPU 0, and says how fast and by
//! which path (peer-to-peer over NVMe/RDMA, or staged). `-t rdma` before the address uses
//! NVMe/RDMA.

use std::time::Instant;

use anyhow::{bail, Context, Result};
use fabrik_initiator::bench::{parse_size, Memory};
use fabrik_initiator::gpu::extent::{read_extent, Extent, StripeMember};
use fabrik_initiator::host::session::{RecoveryPolicy, Session};
use fabrik_initiator::{ConnectOptions, Transport};

const QUEUES: u16 = 4;

#[tokio::main]
async fn main() -> Result<()> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut take = |flag: &str| {
        let i = args.iter().position(|a| a == flag)?;
        args.remove(i);
        (i < args.len()).then(|| args.remove(i))
    };
    let mem = take("--mem").unwrap_or_else(|| "gpu".into());
    let transport = match take("-t") {
        None => Transport::Tcp,
        Some(name) => match name.parse() {
            Ok(t) => t,
            Err(_) => bail!("-t {name}: tcp or rdma"),
        },
    };
    let [addr, size, nqns @ ..] = &args[..] else {
        bail!(
            "usage: gpu_extent [-t tcp|rdma] ADDR:PORT SIZE NQN... [--mem gpu|gpu:N|emulated-gpu]"
        );
    };
    if nqns.is_empty() {
        bail!("name at least one drive (subsystem NQN)");
    }
    let addr = addr.parse().context("ADDR:PORT")?;
    let len = parse_size(size).map_err(anyhow::Error::msg)?;
    let Memory::Gpu(gpu) = Memory::parse(&mem).map_err(anyhow::Error::msg)? else {
        bail!("--mem host: this example reads into GPU memory");
    };

    let mut drives = Vec::new();
    for nqn in nqns {
        let mut opts = ConnectOptions::new(addr, nqn.as_str());
        opts.transport = transport;
        opts.io_queues = QUEUES;
        let session = Session::connect(vec![opts], RecoveryPolicy::default()).await?;
        let lba_size = session
            .with_path(|c| async move { c.lba_size(1).await })
            .await?;
        drives.push(StripeMember {
            session,
            nsid: 1,
            lba_size,
        });
    }
    let buffer = gpu.alloc(len as usize)?;
    let extent = Extent {
        start: 0,
        len,
        stripe: 1 << 20,
    };
    let t0 = Instant::now();
    let read = read_extent(&drives, extent, &buffer, QUEUES as usize).await?;
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "{} from {} drives into {}: {secs:.2} s, {:.2} GB/s",
        fabrik_initiator::bench::report::human_bytes(len as f64),
        drives.len(),
        gpu.identity(),
        len as f64 / secs / 1e9
    );
    let mut paths: Vec<String> = read.paths.iter().map(|(_, p)| p.to_string()).collect();
    paths.sort();
    paths.dedup();
    for p in paths {
        println!("  {p}");
    }
    for d in drives {
        d.session.shutdown().await;
    }
    Ok(())
}
