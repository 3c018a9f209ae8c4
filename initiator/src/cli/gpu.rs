//! `fabrik gpu`: the GPUs as the NVIDIA driver sees them, matched to the PCI topology that
//! placement uses, and which data path each can take: whether its memory exports as a dma-buf
//! (GPUDirect RDMA through `ibv_reg_dmabuf_mr`), whether nvidia-peermem is loaded, and which
//! RDMA NICs there are. Without the driver it says so plainly and fails.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use fabrik_initiator::gpu::{cuda, Gpu};
use fabrik_initiator::topology::Topology;
use serde::Serialize;

#[derive(Args)]
pub struct GpuArgs {
    /// Read the PCI topology from this sysfs tree.
    #[arg(long, default_value = "/sys")]
    sysfs_root: PathBuf,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Also measure the staging ring alone on GPU 0: host-to-device copies from pinned buffers
    /// through `take`/`to_device`, for these sizes (e.g. 4k,128k,1m), from --copy-threads
    /// threads at once, each with its own ring.
    #[arg(long, value_delimiter = ',', value_parser = fabrik_initiator::bench::parse_size)]
    copy_bench: Vec<u64>,
    #[arg(long, default_value_t = 4)]
    copy_threads: usize,
}

#[derive(Serialize)]
struct GpuStatus {
    #[serde(flatten)]
    identity: fabrik_initiator::gpu::GpuIdentity,
    /// Its index among the topology's GPUs (PCI order, as `fabrik place` numbers them).
    placement_index: Option<usize>,
    /// The PCIe switch above it, when there is one.
    switch: Option<String>,
    dmabuf_export: Result<(), String>,
    nvidia_peermem: bool,
}

#[derive(Serialize)]
struct Report {
    gpus: Vec<GpuStatus>,
    rdma_nics: Vec<String>,
    /// What the P2P path can do here, in a sentence.
    p2p: String,
}

pub async fn run(args: GpuArgs) -> Result<()> {
    let count = cuda::device_count().map_err(|e| anyhow::anyhow!("{e}"))?;
    let topo = Topology::read(&args.sysfs_root).ok();
    let topo_gpus: Vec<_> = topo.iter().flat_map(|t| t.gpus()).collect();
    let mut gpus = Vec::new();
    for index in 0..count {
        let gpu = Gpu::open(index).map_err(|e| anyhow::anyhow!("GPU {index}: {e}"))?;
        let identity = gpu.identity().clone();
        let in_topo = topo_gpus
            .iter()
            .position(|d| d.addr.to_string() == identity.pci_addr);
        let switch = in_topo.and_then(|i| {
            let t = topo.as_ref()?;
            t.switch_of(topo_gpus[i]).map(|s| s.to_string())
        });
        gpus.push(GpuStatus {
            dmabuf_export: dmabuf_export(&gpu),
            nvidia_peermem: gpu.driver().pointer_registrable(),
            placement_index: in_topo,
            switch,
            identity,
        });
    }
    let rdma_nics: Vec<String> = topo
        .iter()
        .flat_map(|t| t.rdma.iter().map(|d| d.name.clone()))
        .collect();
    let exports = gpus.iter().any(|g| g.dmabuf_export.is_ok());
    let p2p = match (rdma_nics.is_empty(), exports) {
        (true, _) => "no RDMA NIC on this machine: GPU transfers go staged through pinned host memory (NVMe/TCP)".to_string(),
        (false, true) => format!(
            "RDMA NICs {}: NVMe/RDMA queues register GPU memory as dma-bufs (peer-to-peer)",
            rdma_nics.join(", ")
        ),
        (false, false) if gpus.iter().any(|g| g.nvidia_peermem) => format!(
            "RDMA NICs {}: no dma-buf export, nvidia-peermem registers GPU memory by address (peer-to-peer)",
            rdma_nics.join(", ")
        ),
        (false, false) => format!(
            "RDMA NICs {}, but GPU memory can be registered neither as a dma-buf nor through nvidia-peermem: transfers are staged",
            rdma_nics.join(", ")
        ),
    };
    let report = Report {
        gpus,
        rdma_nics,
        p2p,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render(&report));
    }
    if report.gpus.is_empty() {
        bail!("the NVIDIA driver sees no GPU");
    }
    for &size in &args.copy_bench {
        copy_bench(size as usize, args.copy_threads).await?;
    }
    Ok(())
}

/// Host-to-device copies through staging rings, no network: what the staged path costs.
async fn copy_bench(size: usize, threads: usize) -> Result<()> {
    use fabrik_initiator::gpu::staged::StagingRing;
    let gpu = Gpu::open(0).map_err(|e| anyhow::anyhow!("{e}"))?;
    let per_thread = (1usize << 31) / threads.max(1);
    let count = (per_thread / size).max(64);
    let buffer = gpu
        .alloc(size * threads)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let started = std::time::Instant::now();
    let mut tasks = Vec::new();
    for t in 0..threads {
        let (driver, dst) = (gpu.driver().clone(), buffer.ptr() + (t * size) as u64);
        tasks.push(tokio::spawn(async move {
            let mut ring = StagingRing::new(driver, 2, size)?;
            let mut submit = std::time::Duration::ZERO;
            for _ in 0..count {
                let (index, mut buf) = ring.take().await?;
                buf.clear();
                buf.resize(size, 0x5a);
                let t0 = std::time::Instant::now();
                ring.to_device(index, buf, dst)?;
                submit += t0.elapsed();
            }
            ring.drain().await?;
            Ok::<_, fabrik_initiator::gpu::GpuError>(submit)
        }));
    }
    let mut submit = std::time::Duration::ZERO;
    for task in tasks {
        submit += task.await?.map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let secs = started.elapsed().as_secs_f64();
    let copies = count * threads;
    println!(
        "copy bench {}: {threads} threads x {count} copies, {:.2} GB/s, {:.0} copies/s, {:.1} us per copy+record call",
        fabrik_initiator::bench::report::human_bytes(size as f64),
        (copies * size) as f64 / secs / 1e9,
        copies as f64 / secs,
        submit.as_secs_f64() * 1e6 / copies as f64
    );
    Ok(())
}

/// Allocates 2 MiB and exports it as a dma-buf: what peer-to-peer registration will do.
fn dmabuf_export(gpu: &Gpu) -> Result<(), String> {
    let driver = gpu.driver();
    let len = 2 << 20;
    let ptr = driver.alloc(len).map_err(|e| e.to_string())?;
    let result = match driver.export_dmabuf(ptr, len) {
        Some(Ok(_fd)) => Ok(()),
        Some(Err(e)) => Err(e.to_string()),
        None => Err("this driver has no dma-buf export".into()),
    };
    // SAFETY: our allocation; the exported descriptor is already closed.
    unsafe { driver.free(ptr) };
    result
}

fn render(report: &Report) -> String {
    let mut out = String::new();
    for g in &report.gpus {
        out.push_str(&format!("{}\n", g.identity));
        out.push_str(&format!(
            "  memory {:.1} GiB; placement GPU {}{}\n",
            g.identity.memory_bytes as f64 / (1u64 << 30) as f64,
            g.placement_index
                .map_or("? (not in the PCI topology)".into(), |i| i.to_string()),
            g.switch
                .as_ref()
                .map_or(String::new(), |s| format!(", under PCIe switch {s}"))
        ));
        out.push_str(&format!(
            "  dma-buf export: {}\n",
            match &g.dmabuf_export {
                Ok(()) => "ok".to_string(),
                Err(e) => format!("failed: {e}"),
            }
        ));
        out.push_str(&format!(
            "  nvidia-peermem: {}\n",
            if g.nvidia_peermem {
                "loaded"
            } else {
                "not loaded"
            }
        ));
    }
    out.push_str(&format!("p2p: {}\n", report.p2p));
    out
}
