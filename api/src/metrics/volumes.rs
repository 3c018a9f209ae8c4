//! Volume metrics: state (one sample per state, 1 for the one it is in, as ANA groups),
//! members, I/O, the RAID work (reconstructed reads, read-modify-write), rebuild and scrub.

use prometheus_client::registry::Unit;

use super::{Labels, Out, SnapshotCollector};

/// One volume.
#[derive(Clone, Debug, Default)]
pub struct VolumeMetrics {
    pub volume: String,
    pub level: String,
    /// optimal, degraded, rebuilding or failed.
    pub state: String,
    pub capacity_bytes: u64,
    /// (drive, state: active, failed or rebuilding).
    pub members: Vec<(String, String)>,
    pub read_ops: u64,
    pub write_ops: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub reconstructed_reads: u64,
    pub rmw_stripes: u64,
    pub full_stripes: u64,
    pub dirty_regions: u64,
    pub unsynced_regions: u64,
    /// 0 to 1, while a rebuild runs.
    pub rebuild_progress: Option<f64>,
    pub rebuild_eta_seconds: Option<u64>,
    /// Mismatches the last scrub found.
    pub scrub_mismatches: Option<u64>,
}

const STATES: [&str; 5] = ["making", "optimal", "degraded", "rebuilding", "failed"];
const MEMBER_STATES: [&str; 3] = ["active", "rebuilding", "failed"];

impl SnapshotCollector {
    pub(super) fn encode_volumes(&self, out: &mut Out<'_, '_>) -> Result<(), std::fmt::Error> {
        let vols = &self.0.volumes;
        fn by(v: &VolumeMetrics) -> Labels<'_> {
            vec![("volume", v.volume.as_str())]
        }
        out.gauges(
            "fabrik_volume_info",
            "A volume and its RAID level (always 1).",
            None,
            vols.iter().map(|v| {
                let l: Labels = vec![("volume", v.volume.as_str()), ("level", v.level.as_str())];
                (l, 1u64)
            }),
        )?;
        out.gauges(
            "fabrik_volume_state",
            "1 for the state the volume is in (optimal, degraded, rebuilding, failed), 0 for the others.",
            None,
            vols.iter().flat_map(|v| {
                STATES.iter().map(move |&s| {
                    let l: Labels = vec![("volume", v.volume.as_str()), ("state", s)];
                    (l, (v.state == s) as u64)
                })
            }),
        )?;
        out.gauges(
            "fabrik_volume_member_state",
            "1 for the state a member is in (active, rebuilding, failed), 0 for the others.",
            None,
            vols.iter().flat_map(|v| {
                v.members.iter().flat_map(move |(d, st)| {
                    MEMBER_STATES.iter().map(move |&s| {
                        let l: Labels = vec![
                            ("volume", v.volume.as_str()),
                            ("drive", d.as_str()),
                            ("state", s),
                        ];
                        (l, (st == s) as u64)
                    })
                })
            }),
        )?;
        out.gauges(
            "fabrik_volume_capacity",
            "Bytes the volume holds.",
            Some(Unit::Bytes),
            vols.iter().map(|v| (by(v), v.capacity_bytes)),
        )?;
        let per = |f: fn(&VolumeMetrics) -> u64| vols.iter().map(move |v| (by(v), f(v)));
        out.counters(
            "fabrik_volume_read_ops",
            "Reads hosts made of the volume.",
            None,
            per(|v| v.read_ops),
        )?;
        out.counters(
            "fabrik_volume_write_ops",
            "Writes hosts made to the volume.",
            None,
            per(|v| v.write_ops),
        )?;
        out.counters(
            "fabrik_volume_read",
            "Bytes hosts read from the volume.",
            Some(Unit::Bytes),
            per(|v| v.read_bytes),
        )?;
        out.counters(
            "fabrik_volume_write",
            "Bytes hosts wrote to the volume.",
            Some(Unit::Bytes),
            per(|v| v.write_bytes),
        )?;
        out.counters(
            "fabrik_volume_reconstructed_reads",
            "Strip pieces read by rebuilding them from the rest of their stripe (a member lost).",
            None,
            per(|v| v.reconstructed_reads),
        )?;
        out.counters(
            "fabrik_volume_rmw_stripes",
            "Stripes written in part (read-modify-write, or rebuilt rows where a member is lost).",
            None,
            per(|v| v.rmw_stripes),
        )?;
        out.counters(
            "fabrik_volume_full_stripes",
            "Whole stripes written (parity from the new data alone).",
            None,
            per(|v| v.full_stripes),
        )?;
        out.gauges(
            "fabrik_volume_dirty_regions",
            "Regions marked in the write-intent bitmap (written lately).",
            None,
            per(|v| v.dirty_regions),
        )?;
        out.gauges(
            "fabrik_volume_unsynced_regions",
            "Regions written at a crash that could not be resynced (the volume came up degraded): their data may be wrong.",
            None,
            per(|v| v.unsynced_regions),
        )?;
        out.gauges(
            "fabrik_volume_rebuild_progress",
            "How far the rebuild under way is, 0 to 1.",
            None,
            vols.iter()
                .filter_map(|v| Some((by(v), v.rebuild_progress?))),
        )?;
        out.gauges(
            "fabrik_volume_rebuild_eta",
            "Time the rebuild under way still needs at its speed so far.",
            Some(Unit::Seconds),
            vols.iter()
                .filter_map(|v| Some((by(v), v.rebuild_eta_seconds?))),
        )?;
        out.gauges(
            "fabrik_volume_scrub_mismatches",
            "Stripes the last scrub found out of step with their data (and repaired).",
            None,
            vols.iter()
                .filter_map(|v| Some((by(v), v.scrub_mismatches?))),
        )
    }
}
