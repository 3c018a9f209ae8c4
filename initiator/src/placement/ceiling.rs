//! The bandwidth a GPU can expect and what limits it.
//!
//! A simple, explainable model, not a simulation: a GPU reads at most
//! - its own PCIe link (maximum speed at the current width),
//! - the sum of its NIC ports' rates (a shared port split evenly between its GPUs, a card's
//!   ports together at most the card's PCIe link),
//! - what the switch uplinks on the way let through (when the ports' traffic over an uplink is
//!   more than the uplink carries, every flow over it is scaled down alike),
//! - the sum of its drives' read rates, when the box says them.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use crate::topology::distance::switch_uplinks_between;
use crate::topology::{PciAddr, Topology};

use super::ports::{Assignment, NicPort};
use super::Drive;

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Bottleneck {
    GpuLink,
    NicPorts,
    /// The upstream link of the PCIe switch named by its upstream port.
    SwitchUplink {
        switch: PciAddr,
    },
    Drives,
    NoNicPort,
}

impl fmt::Display for Bottleneck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Bottleneck::GpuLink => f.write_str("GPU PCIe link"),
            Bottleneck::NicPorts => f.write_str("NIC ports"),
            Bottleneck::SwitchUplink { switch } => write!(f, "switch uplink {switch}"),
            Bottleneck::Drives => f.write_str("drives"),
            Bottleneck::NoNicPort => f.write_str("no NIC port"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Term {
    pub bottleneck: Bottleneck,
    pub gbytes_per_sec: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ceiling {
    /// GB/s.
    pub gbytes_per_sec: f64,
    pub bottleneck: Bottleneck,
    /// Every limit considered, in the order GPU link, NIC ports or switch uplink, drives.
    pub terms: Vec<Term>,
}

pub(super) fn compute(
    topo: &Topology,
    gpus: &[PciAddr],
    ports: &[NicPort],
    a: &Assignment,
    drives: &[Vec<Drive>],
) -> Vec<Ceiling> {
    // Each (GPU, port) flow at its nominal share, and the switch uplinks it crosses.
    struct Flow {
        gpu: usize,
        nominal: f64,
        uplinks: Vec<PciAddr>,
    }
    let mut flows = Vec::new();
    for (g, uses) in a.per_gpu.iter().enumerate() {
        let gpu = topo.device(gpus[g]);
        for u in uses {
            let port = &ports[u.port];
            let uplinks = match (gpu, topo.device(port.pci)) {
                (Some(gd), Some(nd)) => switch_uplinks_between(topo, gd, nd),
                _ => Vec::new(),
            };
            flows.push(Flow {
                gpu: g,
                nominal: port.gbytes_per_sec / a.users[u.port].len() as f64,
                uplinks,
            });
        }
    }
    let mut demand: BTreeMap<PciAddr, f64> = BTreeMap::new();
    for f in &flows {
        for l in &f.uplinks {
            *demand.entry(*l).or_default() += f.nominal;
        }
    }
    let scale = |l: &PciAddr| -> f64 {
        let cap = topo.device(*l).and_then(|d| d.link.gbytes_per_sec());
        match (cap, demand.get(l)) {
            (Some(cap), Some(&d)) if d > cap => cap / d,
            _ => 1.0,
        }
    };

    (0..gpus.len())
        .map(|g| {
            let mut terms = Vec::new();
            if let Some(link) = topo.device(gpus[g]).and_then(|d| d.link.gbytes_per_sec()) {
                terms.push(Term {
                    bottleneck: Bottleneck::GpuLink,
                    gbytes_per_sec: link,
                });
            }
            let mine: Vec<&Flow> = flows.iter().filter(|f| f.gpu == g).collect();
            if mine.is_empty() {
                terms.push(Term {
                    bottleneck: Bottleneck::NoNicPort,
                    gbytes_per_sec: 0.0,
                });
            } else {
                let nominal: f64 = mine.iter().map(|f| f.nominal).sum();
                let mut worst: Option<(f64, PciAddr)> = None;
                let mut effective = 0.0;
                for f in &mine {
                    let mut s = 1.0;
                    for l in &f.uplinks {
                        let ls = scale(l);
                        if ls < s {
                            s = ls;
                        }
                        if ls < 1.0 && worst.is_none_or(|(w, _)| ls < w) {
                            worst = Some((ls, *l));
                        }
                    }
                    effective += f.nominal * s;
                }
                terms.push(match worst {
                    Some((_, switch)) => Term {
                        bottleneck: Bottleneck::SwitchUplink { switch },
                        gbytes_per_sec: effective,
                    },
                    None => Term {
                        bottleneck: Bottleneck::NicPorts,
                        gbytes_per_sec: nominal,
                    },
                });
            }
            let rates: Option<Vec<f64>> = drives[g].iter().map(|d| d.gbytes_per_sec).collect();
            if let Some(rates) = rates.filter(|r| !r.is_empty()) {
                terms.push(Term {
                    bottleneck: Bottleneck::Drives,
                    gbytes_per_sec: rates.iter().sum(),
                });
            }
            let min = terms
                .iter()
                .min_by(|x, y| x.gbytes_per_sec.total_cmp(&y.gbytes_per_sec))
                .cloned()
                .expect("the NIC term is always there");
            Ceiling {
                gbytes_per_sec: min.gbytes_per_sec,
                bottleneck: min.bottleneck,
                terms,
            }
        })
        .collect()
}
