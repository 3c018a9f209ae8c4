//! I/O modules: a box has two (A and B), each a fabrikd process with its own ports, serving
//! the same subsystems and namespaces from the same (dual-ported) drives, so that a host
//! connected through both goes on through one when the other fails.
//!
//! What the two must agree on is derived here from the module's name alone, so that neither
//! needs the other to start:
//! - controller IDs: disjoint halves of the dynamic range (the Linux host refuses a second
//!   controller of a subsystem whose CNTLID a live one already has);
//! - ANA groups: one per module; each namespace belongs to one (by its drive ID, see
//!   `ana_group_of`), and a module reports its own group optimized and the other's
//!   non-optimized, so each serves half of the drives by preference and either serves all.
//!
//! A fabrikd without `--module` is a box of one module: every controller ID, one ANA group.

use std::fmt;
use std::ops::RangeInclusive;
use std::str::FromStr;

/// Highest dynamic controller ID (0xFFF0..0xFFFF are reserved).
const MAX_CNTLID: u16 = 0xFFEF;
/// Where module B's controller IDs start.
const B_FIRST_CNTLID: u16 = 0x8000;

/// One of the box's two I/O modules.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ModuleId {
    A,
    B,
}

impl ModuleId {
    pub fn name(self) -> &'static str {
        match self {
            ModuleId::A => "a",
            ModuleId::B => "b",
        }
    }

    /// The ANA group this module serves optimized.
    pub fn own_group(self) -> u32 {
        match self {
            ModuleId::A => 1,
            ModuleId::B => 2,
        }
    }
}

impl fmt::Display for ModuleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ModuleId {
    type Err = String;
    fn from_str(s: &str) -> Result<ModuleId, String> {
        match s {
            "a" | "A" => Ok(ModuleId::A),
            "b" | "B" => Ok(ModuleId::B),
            _ => Err(format!("unknown module {s:?}: a box has modules a and b")),
        }
    }
}

/// Controller IDs a target hands out: all of them alone, a disjoint half as a module.
pub fn cntlids(module: Option<ModuleId>) -> RangeInclusive<u16> {
    match module {
        None => 1..=MAX_CNTLID,
        Some(ModuleId::A) => 1..=B_FIRST_CNTLID - 1,
        Some(ModuleId::B) => B_FIRST_CNTLID..=MAX_CNTLID,
    }
}

/// ANA groups a target reports: 1 alone, one per module in a pair.
pub fn ana_groups(module: Option<ModuleId>) -> u32 {
    match module {
        None => 1,
        Some(_) => 2,
    }
}

/// The ANA group of the namespace that exports drive `drive_id`: the same on both modules,
/// whatever else they know. Drives named by number (the generated 00, 01, ...) alternate, so
/// each module prefers half of a box's drives; other names are spread by a hash of the name.
pub fn ana_group_of(module: Option<ModuleId>, drive_id: &str) -> u32 {
    let groups = ana_groups(module);
    let n = match drive_id.parse::<u64>() {
        Ok(n) => n,
        // FNV-1a: stable across builds and platforms, unlike std's hasher.
        Err(_) => drive_id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        }),
    };
    1 + (n % u64::from(groups)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_modules_hand_out_disjoint_controller_ids() {
        let (a, b) = (cntlids(Some(ModuleId::A)), cntlids(Some(ModuleId::B)));
        assert!(a.end() < b.start());
        assert_eq!(*a.start(), 1);
        assert_eq!(*b.end(), MAX_CNTLID);
        assert_eq!(cntlids(None), 1..=MAX_CNTLID);
    }

    #[test]
    fn drives_alternate_between_the_groups_of_a_pair() {
        let a = Some(ModuleId::A);
        let groups: Vec<u32> = ["00", "01", "02", "03"]
            .iter()
            .map(|d| ana_group_of(a, d))
            .collect();
        assert_eq!(groups, [1, 2, 1, 2]);
        // The same on either module, and stable for names that are not numbers.
        assert_eq!(
            ana_group_of(a, "scratch"),
            ana_group_of(Some(ModuleId::B), "scratch")
        );
        let named: Vec<u32> = ["n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7"]
            .iter()
            .map(|d| ana_group_of(a, d))
            .collect();
        assert!(named.contains(&1) && named.contains(&2), "{named:?}");
        // Alone, every namespace is in group 1.
        assert_eq!(ana_group_of(None, "01"), 1);
    }

    #[test]
    fn module_names_parse() {
        assert_eq!("a".parse(), Ok(ModuleId::A));
        assert_eq!("B".parse(), Ok(ModuleId::B));
        assert!("c"
            .parse::<ModuleId>()
            .unwrap_err()
            .contains("modules a and b"));
        assert_eq!(ModuleId::B.own_group(), 2);
    }
}
