//! Where each I/O of a run goes: the drives' regions concatenated block-size unit by unit
//! (RAID-0 with a stripe unit of one I/O), so consecutive I/Os of a sequential run hit the
//! drives in turn. Each worker sees the part of it on its drives (`View`).

/// The striped address space of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub drives: usize,
    /// I/O units of `bs` bytes in each drive's region (the region starts at LBA 0).
    pub units_per_drive: u64,
    pub bs: u64,
}

impl Layout {
    pub fn units(&self) -> u64 {
        self.drives as u64 * self.units_per_drive
    }

    /// The drive (index) and the unit within that drive's region of striped unit `unit`.
    pub fn locate(&self, unit: u64) -> (usize, u64) {
        let drives = self.drives as u64;
        ((unit % drives) as usize, unit / drives)
    }

    /// What worker `worker` of `workers` sends to, as `sharing` says.
    pub fn view(&self, worker: usize, workers: usize, sharing: WorkerDrives) -> View {
        let all = self.drives;
        let (first, stride, drives, sharers, index) = match sharing {
            WorkerDrives::All => (0, 1, all, workers, worker),
            // Drive d goes to worker d mod workers...
            WorkerDrives::Own if all >= workers => {
                (worker, workers, (all - worker).div_ceil(workers), 1, 0)
            }
            // ...and with fewer drives than workers, worker w to drive w mod drives, which it
            // shares with the other workers there.
            WorkerDrives::Own => {
                let first = worker % all;
                (first, 1, 1, (workers - first).div_ceil(all), worker / all)
            }
        };
        View {
            first,
            stride,
            drives,
            units_per_drive: self.units_per_drive,
            sharers,
            index,
        }
    }
}

/// The workers that send to drive `drive` of `drives` (ascending), as `Layout::view` assigns
/// them: the queues a run needs on that drive's controller.
pub fn workers_of(
    drive: usize,
    drives: usize,
    workers: usize,
    sharing: WorkerDrives,
) -> Vec<usize> {
    match sharing {
        WorkerDrives::All => (0..workers).collect(),
        WorkerDrives::Own if drives >= workers => vec![drive % workers],
        WorkerDrives::Own => (drive..workers).step_by(drives).collect(),
    }
}

/// How a run's workers share the drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum WorkerDrives {
    /// Each worker sends to drives of its own, as spdk_nvme_perf gives namespaces to cores:
    /// drive d to worker d mod threads; with fewer drives than workers, worker w to drive
    /// w mod drives. A queue then carries all its worker's commands to that drive, so a
    /// system call moves more of them, but a worker has one connection per drive to keep
    /// busy.
    Own,
    /// Every worker sends to every drive, on its own queue of each.
    #[default]
    All,
}

/// The part of the striped space one worker sends to: its drives (`first`, then every
/// `stride`-th), striped among themselves; `sharers` workers share them, this one `index`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct View {
    first: usize,
    stride: usize,
    drives: usize,
    units_per_drive: u64,
    sharers: usize,
    index: usize,
}

impl View {
    pub fn units(&self) -> u64 {
        self.drives as u64 * self.units_per_drive
    }

    /// The drive (index among all) and the unit within that drive's region of this view's
    /// unit `unit`.
    pub fn locate(&self, unit: u64) -> (usize, u64) {
        let drives = self.drives as u64;
        (
            self.first + (unit % drives) as usize * self.stride,
            unit / drives,
        )
    }

    /// This worker's units for a sequential pass: the view cut into contiguous slices among
    /// the workers sharing it, the first ones one unit longer when the count does not divide
    /// evenly.
    pub fn slice(&self) -> std::ops::Range<u64> {
        let (units, workers, worker) = (self.units(), self.sharers as u64, self.index as u64);
        let (base, extra) = (units / workers, units % workers);
        let start = worker * base + worker.min(extra);
        let len = base + u64::from(worker < extra);
        start..start + len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_stripe_over_the_drives() {
        let layout = Layout {
            drives: 3,
            units_per_drive: 4,
            bs: 4096,
        };
        assert_eq!(layout.units(), 12);
        let located: Vec<_> = (0..6).map(|u| layout.locate(u)).collect();
        assert_eq!(located, [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1)]);
        assert_eq!(layout.locate(11), (2, 3));
    }

    #[test]
    fn shared_slices_cover_every_unit_once() {
        let layout = Layout {
            drives: 2,
            units_per_drive: 5,
            bs: 512,
        };
        let slices: Vec<_> = (0..3)
            .map(|w| layout.view(w, 3, WorkerDrives::All).slice())
            .collect();
        assert_eq!(slices, [0..4, 4..7, 7..10]);
    }

    /// Every (drive, unit) a sequential pass of all workers reaches, in order of worker.
    fn pass(layout: &Layout, workers: usize, sharing: WorkerDrives) -> Vec<(usize, u64)> {
        (0..workers)
            .flat_map(|w| {
                let view = layout.view(w, workers, sharing);
                view.slice().map(move |u| view.locate(u))
            })
            .collect()
    }

    #[test]
    fn own_drives_go_to_workers_as_perf_gives_namespaces_to_cores() {
        let layout = Layout {
            drives: 5,
            units_per_drive: 3,
            bs: 4096,
        };
        let drives_of = |w, workers| {
            let view = layout.view(w, workers, WorkerDrives::Own);
            let mut d: Vec<_> = (0..view.units()).map(|u| view.locate(u).0).collect();
            d.sort();
            d.dedup();
            d
        };
        assert_eq!(drives_of(0, 2), [0, 2, 4]);
        assert_eq!(drives_of(1, 2), [1, 3]);
        assert_eq!(drives_of(4, 5), [4]);
        // More workers than drives: worker w on drive w mod 5.
        assert_eq!(drives_of(7, 8), [2]);
        for workers in 1..=12 {
            for sharing in [WorkerDrives::Own, WorkerDrives::All] {
                // A drive's workers are exactly those whose view reaches it.
                for d in 0..5 {
                    let reaching: Vec<usize> = (0..workers)
                        .filter(|&w| {
                            let view = layout.view(w, workers, sharing);
                            (0..view.units()).any(|u| view.locate(u).0 == d)
                        })
                        .collect();
                    assert_eq!(workers_of(d, 5, workers, sharing), reaching);
                }
                let mut reached = pass(&layout, workers, sharing);
                assert_eq!(reached.len(), 15, "{workers} workers, {sharing:?}");
                reached.sort();
                reached.dedup();
                assert_eq!(
                    reached.len(),
                    15,
                    "{workers} workers, {sharing:?}: a unit twice"
                );
            }
        }
    }
}
