//! `fabrik bench --gpu N`: the drives `fabrik place` plans for GPU N, reached through the NIC
//! ports and source addresses it plans, with that GPU's memory.

use anyhow::{anyhow, bail, Result};
use clap::{ArgGroup, Args};
use fabrik_initiator::bench::Memory;
use fabrik_initiator::gpu::{cuda, Gpu};
use fabrik_initiator::placement::GpuPlan;
use fabrik_initiator::topology::PciAddr;

use super::place::PlanArgs;

#[derive(Args, Clone)]
// The plan's inputs mean nothing without --gpu: say so rather than ignore them. (--api is left
// out: FABRIK_API in the environment sets it for every bench.)
#[command(group(
    ArgGroup::new("plan_inputs")
        .multiple(true)
        .requires("gpu")
        .args([
            "sysfs_root",
            "box_file",
            "discover",
            "discover_port",
            "drives_per_gpu",
            "goal",
            "subnet_bits",
            "drive_gbps",
        ])
))]
pub struct PlacedArgs {
    /// Run on the drives `fabrik place` plans for GPU N (its index in PCI order, as place
    /// numbers GPUs), each connected from the NIC port and source address the plan gives, with
    /// GPU N's memory unless --mem says otherwise. Takes the place of -a/-n/--all.
    #[arg(long, value_name = "N")]
    pub gpu: Option<usize>,
    #[command(flatten)]
    pub plan: PlanArgs,
}

impl PlacedArgs {
    /// GPU N's part of a plan made for every GPU, so that the drives are dealt out as
    /// `fabrik place` deals them; None without --gpu. `hostnqn`: who discovery asks as.
    pub async fn gpu_plan(&self, hostnqn: Option<&str>) -> Result<Option<GpuPlan>> {
        let Some(n) = self.gpu else {
            return Ok(None);
        };
        let topo = super::topo::read(&self.plan.sysfs_root)?;
        let plan = self.plan.plan(&topo, None, hostnqn).await?;
        let Some(gpu) = plan.gpus.iter().find(|g| g.gpu == n) else {
            if plan.gpus.is_empty() {
                bail!(
                    "--gpu {n}: no GPU found under {}",
                    self.plan.sysfs_root.display()
                );
            }
            let gpus: Vec<String> = plan
                .gpus
                .iter()
                .map(|g| format!("GPU{} {}", g.gpu, g.pci))
                .collect();
            bail!(
                "--gpu {n}: this machine has {} GPU(s): {}",
                gpus.len(),
                gpus.join(", ")
            );
        };
        if gpu.connections.is_empty() {
            let mut why: Vec<String> = gpu
                .warnings
                .iter()
                .chain(&plan.warnings)
                .map(|w| w.message.clone())
                .collect();
            let drives = plan.gpus.iter().map(|g| g.connections.len()).sum::<usize>()
                + plan.unassigned_drives.len();
            if drives == 0 {
                why.push(
                    "the box lists no drives (give --box FILE, --api URL or --discover ADDR)"
                        .into(),
                );
            } else if !gpu.ports.is_empty() {
                // With a port, every drive dealt to a GPU gets a connection: none came here.
                why.push(format!(
                    "the box's {drives} drive(s) are dealt to the other GPUs"
                ));
            }
            bail!(
                "the plan gives GPU{n} ({}) no drive: {}",
                gpu.pci,
                why.join("; ")
            );
        }
        Ok(Some(gpu.clone()))
    }
}

/// The memory a job uses: --mem as given; without it, the placed GPU's (with --gpu), else host
/// memory.
pub fn memory(mem: Option<&str>, placed: Option<&GpuPlan>) -> Result<Memory> {
    match (mem, placed) {
        (Some(text), _) => Memory::parse(text).map_err(anyhow::Error::msg),
        (None, Some(plan)) => Ok(Memory::Gpu(gpu_at(plan.pci)?)),
        (None, None) => Ok(Memory::Host),
    }
}

/// The CUDA device at PCI address `pci`. CUDA numbers devices its own way (fastest first by
/// default, and as CUDA_VISIBLE_DEVICES says), so the placement's index cannot be used as is.
fn gpu_at(pci: PciAddr) -> Result<Gpu> {
    let memory_of = format!("memory of the placed GPU {pci}");
    let count = cuda::device_count().map_err(|e| anyhow!("{memory_of}: {e}"))?;
    let mut seen = Vec::new();
    for index in 0..count {
        let gpu = Gpu::open(index).map_err(|e| anyhow!("{memory_of}: CUDA device {index}: {e}"))?;
        let addr = &gpu.identity().pci_addr;
        if addr.parse::<PciAddr>().ok() == Some(pci) {
            return Ok(gpu);
        }
        seen.push(if addr.is_empty() {
            "?".into()
        } else {
            addr.clone()
        });
    }
    bail!(
        "{memory_of}: no CUDA device there (the NVIDIA driver sees {count}: {}); --mem chooses \
         other memory",
        if seen.is_empty() {
            "none".into()
        } else {
            seen.join(", ")
        }
    )
}
