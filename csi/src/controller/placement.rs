//! Where a new volume goes: which box (topology first, then the one with the most free drives)
//! and which of its free drives (the smallest that hold it). Pure: the controller feeds it what
//! the boxes said.

/// What every member of a volume keeps before its data: the box's superblock, bitmap and log
/// (fabrikd's `raid::meta::DATA_OFFSET`; a box that kept more would refuse a volume placed
/// too tightly, with a clear error, not make a wrong one).
pub const MEMBER_METADATA: u64 = 4 << 20;
pub const DEFAULT_STRIP: u64 = 64 << 10;

/// A volume's shape, from the StorageClass parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shape {
    pub level: String,
    pub members: usize,
    /// Strip size in bytes.
    pub strip: u64,
}

impl Shape {
    /// From the parameters `level` (default raid0), `drives` (default: the fewest the level
    /// takes) and `stripKiB` (default 64); `box` is the controller's (see `pinned_box`). Kubernetes' own `csi.storage.k8s.io/` keys are not
    /// ours and are let through; any other key is an error (a misspelt parameter would
    /// otherwise give a volume not asked for).
    pub fn from_parameters(p: &std::collections::HashMap<String, String>) -> Result<Shape, String> {
        for k in p.keys() {
            let known = ["level", "drives", "stripKiB", "box"].contains(&k.as_str())
                || k.starts_with("csi.storage.k8s.io/");
            if !known {
                return Err(format!(
                    "unknown parameter {k:?}: level, drives, stripKiB and box are this driver's"
                ));
            }
        }
        let level = p.get("level").map_or("raid0", String::as_str).to_string();
        let min = match level.as_str() {
            "raid0" => 1,
            "raid1" => 2,
            "raid5" => 3,
            "raid6" | "raid10" => 4,
            other => {
                return Err(format!(
                    "unknown level {other:?}: raid0, raid1, raid5, raid6 or raid10"
                ))
            }
        };
        let members = match p.get("drives") {
            None => min,
            Some(d) => d
                .parse::<usize>()
                .map_err(|_| format!("drives {d:?} is not a number"))?,
        };
        if members < min || members > 32 {
            return Err(format!("{level} takes {min} to 32 drives, not {members}"));
        }
        if level == "raid10" && members % 2 == 1 {
            return Err(format!("raid10 mirrors drives in pairs: {members} is odd"));
        }
        let strip = match p.get("stripKiB") {
            None => DEFAULT_STRIP,
            Some(s) => {
                let kib: u64 = s
                    .parse()
                    .map_err(|_| format!("stripKiB {s:?} is not a number"))?;
                if !kib.is_power_of_two() || !(4..=16384).contains(&kib) {
                    return Err(format!(
                        "stripKiB {kib} is not a power of two from 4 to 16384"
                    ));
                }
                kib << 10
            }
        };
        Ok(Shape {
            level,
            members,
            strip,
        })
    }

    /// Whether `v` (a volume a box has) is of this shape.
    pub fn matches(&self, v: &fabrik_api::models::Volume) -> bool {
        v.level == self.level && v.members.len() == self.members && v.strip_kib << 10 == self.strip
    }

    /// Strips of data in a stripe.
    pub fn data_strips(&self) -> u64 {
        let n = self.members as u64;
        match self.level.as_str() {
            "raid1" => 1,
            "raid10" => n / 2,
            "raid5" => n - 1,
            "raid6" => n - 2,
            _ => n,
        }
    }

    pub fn stripe_bytes(&self) -> u64 {
        self.data_strips() * self.strip
    }

    /// What a volume asked for `bytes` serves: whole stripes.
    pub fn rounded(&self, bytes: u64) -> u64 {
        bytes.div_ceil(self.stripe_bytes()) * self.stripe_bytes()
    }

    /// The most a volume on members of `smallest` bytes serves.
    pub fn capacity_on(&self, smallest: u64) -> u64 {
        smallest.saturating_sub(MEMBER_METADATA) / self.strip * self.stripe_bytes()
    }

    /// Bytes each member needs for a volume serving `bytes`.
    fn member_bytes(&self, bytes: u64) -> u64 {
        bytes.div_ceil(self.stripe_bytes()) * self.strip + MEMBER_METADATA
    }
}

/// A box as placement sees it: its rack and its free drives (ID, bytes).
#[derive(Clone, Debug)]
pub struct Candidate {
    pub url: String,
    pub rack: Option<String>,
    pub free: Vec<(String, u64)>,
}

/// CSI's accessibility requirement, as racks: `requisite` (empty: anywhere) and `preferred`
/// in order. A box with no rack is reachable from every node, so it meets any requisite.
#[derive(Clone, Debug, Default)]
pub struct Racks {
    pub requisite: Vec<String>,
    pub preferred: Vec<String>,
}

impl Racks {
    pub fn allows(&self, rack: Option<&str>) -> bool {
        match rack {
            None => true,
            Some(r) => self.requisite.is_empty() || self.requisite.iter().any(|q| q == r),
        }
    }

    fn rank(&self, rack: Option<&str>) -> usize {
        rack.and_then(|r| self.preferred.iter().position(|p| p == r))
            .unwrap_or(self.preferred.len())
    }
}

/// The box (index into `boxes`) and drives for a volume of `shape` serving `bytes` (None: all
/// its drives hold). Among boxes the racks allow: the preferred rack first, then the box with
/// the most free drives. On that box, the smallest free drives that hold it.
pub fn place(
    shape: &Shape,
    bytes: Option<u64>,
    boxes: &[Candidate],
    racks: &Racks,
) -> Result<(usize, Vec<String>), String> {
    let need = bytes.map_or(MEMBER_METADATA + shape.strip, |b| shape.member_bytes(b));
    let mut order: Vec<usize> = (0..boxes.len())
        .filter(|&i| racks.allows(boxes[i].rack.as_deref()))
        .collect();
    if order.is_empty() {
        return Err(format!(
            "no box is in the racks the volume must be reachable from ({})",
            racks.requisite.join(", ")
        ));
    }
    order.sort_by_key(|&i| {
        let c = &boxes[i];
        (
            racks.rank(c.rack.as_deref()),
            std::cmp::Reverse(c.free.len()),
            i,
        )
    });
    let mut short = Vec::new();
    for i in order {
        let mut fits: Vec<&(String, u64)> = boxes[i].free.iter().filter(|d| d.1 >= need).collect();
        if fits.len() >= shape.members {
            fits.sort_by_key(|d| (d.1, d.0.clone()));
            let drives = fits[..shape.members].iter().map(|d| d.0.clone()).collect();
            return Ok((i, drives));
        }
        short.push(format!("{}: {}", boxes[i].url, fits.len()));
    }
    Err(format!(
        "no box has {} free drives of at least {need} bytes for {} ({})",
        shape.members,
        shape.level,
        short.join(", ")
    ))
}

/// GetCapacity's answer for the boxes in `boxes` the racks allow: the bytes volumes of `shape`
/// could still serve in all (free drives at the shape's efficiency), and the largest one volume
/// could be.
pub fn capacity(shape: &Shape, boxes: &[Candidate], racks: &Racks) -> (u64, u64) {
    let mut total = 0u64;
    let mut largest = 0u64;
    for c in boxes.iter().filter(|c| racks.allows(c.rack.as_deref())) {
        let mut sizes: Vec<u64> = c.free.iter().map(|d| d.1).collect();
        sizes.sort_unstable_by(|a, b| b.cmp(a));
        if sizes.len() >= shape.members {
            largest = largest.max(shape.capacity_on(sizes[shape.members - 1]));
        }
        // Whole volumes of the shape, biggest drives together.
        for group in sizes.chunks_exact(shape.members) {
            total += shape.capacity_on(*group.last().unwrap());
        }
    }
    (total, largest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    const GIB: u64 = 1 << 30;

    fn params(kv: &[(&str, &str)]) -> HashMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn cand(rack: Option<&str>, sizes: &[u64]) -> Candidate {
        Candidate {
            url: format!("http://box-{}", rack.unwrap_or("any")),
            rack: rack.map(String::from),
            free: sizes
                .iter()
                .enumerate()
                .map(|(i, s)| (format!("{i:02}"), *s))
                .collect(),
        }
    }

    #[test]
    fn parameters_give_a_shape_or_a_reason() {
        let s = Shape::from_parameters(&params(&[])).unwrap();
        assert_eq!(
            (s.level.as_str(), s.members, s.strip),
            ("raid0", 1, 64 << 10)
        );
        let s = Shape::from_parameters(&params(&[
            ("level", "raid5"),
            ("drives", "4"),
            ("stripKiB", "128"),
            ("csi.storage.k8s.io/pvc/name", "data"),
        ]))
        .unwrap();
        assert_eq!(s.data_strips(), 3);
        assert_eq!(s.stripe_bytes(), 3 * (128 << 10));
        for (kv, why) in [
            (&[("level", "raid4")][..], "unknown level"),
            (&[("level", "raid5"), ("drives", "2")][..], "3 to 32"),
            (&[("level", "raid10"), ("drives", "5")][..], "odd"),
            (&[("stripKiB", "48")][..], "power of two"),
            (&[("size", "1")][..], "unknown parameter"),
        ] {
            let e = Shape::from_parameters(&params(kv)).unwrap_err();
            assert!(e.contains(why), "{kv:?}: {e}");
        }
    }

    #[test]
    fn the_smallest_drives_that_hold_it_on_the_preferred_rack() {
        let shape = Shape::from_parameters(&params(&[("level", "raid1")])).unwrap();
        let boxes = [
            cand(Some("r1"), &[8 * GIB, 2 * GIB, 4 * GIB, 4 * GIB]),
            cand(Some("r2"), &[4 * GIB, 4 * GIB, 4 * GIB, 4 * GIB, 4 * GIB]),
        ];
        // Anywhere: the box with more free drives.
        let (b, d) = place(&shape, Some(3 * GIB), &boxes, &Racks::default()).unwrap();
        assert_eq!((b, d.len()), (1, 2));
        // r1 preferred: its two 4 GiB drives, not the 8 GiB one, not the too small 2 GiB one.
        let racks = Racks {
            requisite: vec![],
            preferred: vec!["r1".into()],
        };
        let (b, d) = place(&shape, Some(3 * GIB), &boxes, &racks).unwrap();
        assert_eq!((b, d), (0, vec!["02".to_string(), "03".to_string()]));
        // 5 GiB: only one drive on r1 holds it, so r2 would not either: exhausted.
        let e = place(&shape, Some(5 * GIB), &boxes, &racks).unwrap_err();
        assert!(e.contains("no box has 2 free drives"), "{e}");
        // Only r3 allowed: no box there.
        let r3 = Racks {
            requisite: vec!["r3".into()],
            preferred: vec![],
        };
        assert!(place(&shape, Some(GIB), &boxes, &r3)
            .unwrap_err()
            .contains("no box is in the racks"));
        // A box with no rack is reachable from r3 too.
        let with_rackless = [boxes[0].clone(), cand(None, &[GIB * 2, GIB * 2])];
        assert_eq!(place(&shape, Some(GIB), &with_rackless, &r3).unwrap().0, 1);
    }

    #[test]
    fn sizes_round_to_stripes_and_capacity_counts_whole_volumes() {
        let shape =
            Shape::from_parameters(&params(&[("level", "raid5"), ("drives", "3")])).unwrap();
        assert_eq!(shape.rounded(1), 128 << 10);
        assert_eq!(shape.rounded(GIB), GIB);
        let boxes = [cand(
            None,
            &[10 * GIB, 10 * GIB, 10 * GIB, 20 * GIB, 20 * GIB],
        )];
        let (total, largest) = capacity(&shape, &boxes, &Racks::default());
        // One volume of three (20, 20, 10): 2 x (10 GiB - metadata), the two left over make none.
        let one = shape.capacity_on(10 * GIB);
        assert_eq!(one, 2 * (10 * GIB - MEMBER_METADATA));
        assert_eq!((total, largest), (one, one));
        // The largest fits: placing it succeeds; a byte more does not.
        assert!(place(&shape, Some(largest), &boxes, &Racks::default()).is_ok());
        assert!(place(&shape, Some(largest + 1), &boxes, &Racks::default()).is_err());
    }
}
