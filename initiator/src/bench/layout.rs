//! Where each I/O of a run goes: the drives' regions concatenated block-size unit by unit
//! (RAID-0 with a stripe unit of one I/O), so consecutive I/Os of a sequential run hit the
//! drives in turn.

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

    /// The units of worker `worker` of `workers` for a sequential pass: contiguous slices, the
    /// first ones one unit longer when the count does not divide evenly.
    pub fn slice(&self, worker: usize, workers: usize) -> std::ops::Range<u64> {
        let (units, workers, worker) = (self.units(), workers as u64, worker as u64);
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
    fn slices_cover_every_unit_once() {
        let layout = Layout {
            drives: 2,
            units_per_drive: 5,
            bs: 512,
        };
        let slices: Vec<_> = (0..3).map(|w| layout.slice(w, 3)).collect();
        assert_eq!(slices, [0..4, 4..7, 7..10]);
    }
}
