//! The REST resources, as the API answers and accepts them (JSON). Field names are the wire
//! names; every type documents itself in the OpenAPI document.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A drive: the storage behind a namespace.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct Drive {
    /// Drive ID, e.g. "07".
    pub id: String,
    /// Slot number in the box (position in the drive list, from 0).
    pub slot: u32,
    pub serial: String,
    pub model: String,
    /// Backend: file, block, ram or null. ram and null keep no data across a restart
    /// (benchmarks only): their namespaces get a new NGUID/UUID at every start, so no host
    /// takes them for the ones it wrote to.
    pub backend: String,
    /// Backing file or block device, if any.
    pub path: Option<String>,
    pub capacity_bytes: u64,
    pub block_size: u32,
    pub health: DriveHealth,
    /// NQNs of the subsystems exporting this drive.
    pub subsystems: Vec<String>,
    /// Host NQNs that may reach this drive; absent when any host may.
    pub hosts: Option<Vec<String>>,
    /// Host NQNs this drive is composed to.
    pub composed_to: Vec<String>,
    /// Its I/O limits, whoever the host (null: none).
    #[serde(default)]
    pub qos: Option<QosLimits>,
    /// The volume it is a member or spare of (then no subsystem exports it alone).
    #[serde(default)]
    pub volume: Option<String>,
}

/// Drive health: from the device's SMART log for NVMe drives (`source` "smart"), else what
/// fabrikd tracks (`source` "fabrikd"; no sensor on file, RAM or null drives: those fields are
/// null). Command and byte counters are fabrikd's, since it started.
#[derive(Clone, Debug, Default, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct DriveHealth {
    /// "ok", "warning" (SMART critical warning bits set), "read_only" (it lost a write: see
    /// `fault`), or "not_ready" while the drive cannot serve I/O.
    pub state: String,
    /// Why the drive refuses writes: a Flush or FUA write failed, so data hosts were told was
    /// written may be lost. Every write, Flush, Write Zeroes and deallocate fails (Write Fault)
    /// until an operator clears it (`POST /drives/{id}/clear-fault`).
    pub fault: Option<String>,
    /// "smart" or "fabrikd".
    pub source: String,
    /// Why SMART data could not be read, when the drive has it but reading failed.
    pub source_error: Option<String>,
    pub temperature_celsius: Option<i32>,
    pub percentage_used: Option<u8>,
    pub media_errors: u64,
    /// NVMe SMART Critical Warning bits (0: none).
    pub critical_warnings: u8,
    pub power_on_hours: u64,
    pub read_commands: u64,
    pub write_commands: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
}

/// An NVM subsystem: what a host connects to by NQN.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct Subsystem {
    pub nqn: String,
    pub serial: String,
    pub model: String,
    /// True when any host may connect (then `hosts` is empty).
    pub allow_any_host: bool,
    /// Host NQNs that may connect, in effect now (compositions included).
    pub hosts: Vec<String>,
    /// Only hosts with DH-HMAC-CHAP keys may connect, and they authenticate.
    #[serde(default)]
    pub require_auth: bool,
    pub namespaces: Vec<Namespace>,
    /// IDs of the ports it is reachable on (every port).
    pub ports: Vec<u16>,
    /// Live controllers.
    pub controllers: u32,
}

/// A namespace: a drive inside a subsystem.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct Namespace {
    pub nsid: u32,
    pub drive: String,
    /// 32 hex digits.
    pub nguid: String,
    /// 8-4-4-4-12 form.
    pub uuid: String,
    pub capacity_bytes: u64,
    pub block_size: u32,
}

/// A host known to this box.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct Host {
    pub nqn: String,
    /// How the metrics name this host (their `host` label): never by NQN, which lets whoever
    /// knows it connect as the host until DH-HMAC-CHAP is required.
    pub alias: String,
    /// A name for people, e.g. "gpu-node-3".
    pub name: Option<String>,
    /// Subsystems this host may connect to (by composition or allow list; not "any host" ones).
    pub subsystems: Vec<String>,
    /// Live controllers of this host.
    pub controllers: u32,
    /// The host has a DH-HMAC-CHAP secret: it must authenticate on every subsystem it reaches.
    /// (Secrets are write-only: no answer ever holds one.)
    #[serde(default)]
    pub dhchap: bool,
    /// The box has a controller secret for it too (bidirectional authentication).
    #[serde(default)]
    pub dhchap_ctrl: bool,
    /// The one hash function it must use ("sha256", "sha384", "sha512"); null: the strongest
    /// it offers.
    #[serde(default)]
    pub dhchap_hash: Option<String>,
    /// The one DH group it must use ("null", "ffdhe2048" .. "ffdhe8192"); null: ffdhe2048 if
    /// offered, then the larger groups, then none.
    #[serde(default)]
    pub dhchap_dhgroup: Option<String>,
    /// Its I/O limits on this box (null: none).
    #[serde(default)]
    pub qos: Option<QosLimits>,
}

/// I/O limits (`PUT /hosts/{nqn}/qos`): each optional, null lifts it, at most 2^50. `iops` and
/// `bytes_per_sec` count reads and writes together; the `read_`/`write_` ones each kind alone;
/// every limit that applies holds. Commands past a limit wait (they are not failed).
#[derive(Clone, Debug, Default, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct QosLimits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 1125899906842624_f64)]
    pub iops: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 1125899906842624_f64)]
    pub bytes_per_sec: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 1125899906842624_f64)]
    pub read_iops: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 1125899906842624_f64)]
    pub read_bytes_per_sec: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 1125899906842624_f64)]
    pub write_iops: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 1125899906842624_f64)]
    pub write_bytes_per_sec: Option<u64>,
    /// How far ahead of its rate a host may run after being idle, in ms of each limit
    /// (default 50, at most 10000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 10000)]
    pub burst_ms: Option<u32>,
}

impl QosLimits {
    /// No limit set.
    pub fn is_empty(&self) -> bool {
        self.iops.is_none()
            && self.bytes_per_sec.is_none()
            && self.read_iops.is_none()
            && self.read_bytes_per_sec.is_none()
            && self.write_iops.is_none()
            && self.write_bytes_per_sec.is_none()
    }
}

/// A transport listener.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct Port {
    pub id: u16,
    /// "tcp" or "rdma".
    pub transport: String,
    pub address: String,
    pub service_id: u16,
    /// "listening".
    pub state: String,
    /// TLS 1.3 with configured PSKs (NVMe/TCP): "none", "allowed" (TLS or clear text, as the
    /// host begins) or "required".
    #[serde(default = "no_tls")]
    pub tls: String,
    /// Live controllers that came in through this port.
    pub controllers: u32,
}

fn no_tls() -> String {
    "none".into()
}

/// Adds a listener.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PortRequest {
    /// "tcp" (the default).
    #[serde(default)]
    pub transport: Option<String>,
    /// IP address to listen on.
    pub address: String,
    pub service_id: u16,
    /// TLS on an NVMe/TCP port: "none" (the default), "allowed" or "required"; needs fabrikd
    /// started with PSKs (`--tls-psk`).
    #[serde(default)]
    pub tls: Option<String>,
}

/// A live controller: one host association.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct Controller {
    /// Unique while fabrikd runs; use it to disconnect.
    pub id: u64,
    pub cntlid: u16,
    pub subsystem: String,
    /// True for a discovery controller.
    pub discovery: bool,
    /// Null for a host that sent no host NQN in its Connect (SPDK's host by default): such a
    /// host is let in only where any host may connect.
    pub host_nqn: Option<String>,
    /// How the metrics name the host ("(anonymous)" without a host NQN).
    pub host_alias: String,
    /// The host's address.
    pub address: String,
    pub port_id: u16,
    pub io_queues: u32,
    pub keep_alive_ms: u32,
    /// Seconds since the association was made.
    pub connected_seconds: u64,
}

/// Makes drives reachable by a host.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CompositionRequest {
    pub host_nqn: String,
    /// Drive IDs.
    pub drives: Vec<String>,
    /// Port IDs to answer connect commands for (default: every port).
    #[serde(default)]
    pub ports: Option<Vec<u16>>,
    /// Let other hosts be composed to these drives too (every composition of a shared drive must
    /// say so).
    #[serde(default)]
    pub shared: bool,
}

/// Drives composed to a host, with how to connect to them.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct Composition {
    pub id: String,
    pub host_nqn: String,
    pub drives: Vec<String>,
    pub shared: bool,
    /// Subsystems the host may now connect to.
    pub subsystems: Vec<String>,
    pub ports: Vec<u16>,
    pub connect: Vec<ConnectCommand>,
}

/// How to reach one subsystem through one port.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct ConnectCommand {
    pub subsystem: String,
    pub port_id: u16,
    pub transport: String,
    pub address: String,
    pub service_id: u16,
    /// nvme-cli (Linux kernel host).
    pub nvme_cli: String,
    /// The fabrik CLI (userspace host).
    pub fabrik: String,
}

/// Creates a subsystem.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SubsystemRequest {
    /// Full NQN; or give `name` for `nqn.2024-01.io.fabrik:<box>:<name>`.
    #[serde(default)]
    pub nqn: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    /// Drives to export, namespace 1 first.
    #[serde(default)]
    pub drives: Vec<String>,
    /// Hosts that may connect; empty or absent with `allow_any_host` false: none until added.
    #[serde(default)]
    pub hosts: Vec<String>,
    #[serde(default)]
    pub allow_any_host: bool,
    /// Identify's model number: at most 40 printable ASCII characters.
    #[serde(default)]
    #[schema(max_length = 40, pattern = "^[ -~]*$")]
    pub model: Option<String>,
}

/// Adds a drive to a subsystem as a namespace.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NamespaceRequest {
    pub drive: String,
    /// Default: the lowest free NSID.
    #[serde(default)]
    pub nsid: Option<u32>,
}

/// Registers a host, or allows a host on a subsystem.
#[derive(Clone, Debug, Default, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HostRequest {
    pub nqn: String,
    /// A name for people: at most 64 characters, no control characters.
    #[serde(default)]
    #[schema(max_length = 64)]
    pub name: Option<String>,
    /// DH-HMAC-CHAP secret (`DHHC-1:..`, as `nvme gen-dhchap-key` makes): the host must then
    /// authenticate. Only on `POST /hosts`. Write-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhchap_secret: Option<String>,
    /// The controller's secret, for bidirectional authentication (needs `dhchap_secret`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhchap_ctrl_secret: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhchap_hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhchap_dhgroup: Option<String>,
}

/// A host's DH-HMAC-CHAP keys, replaced whole (`PUT /hosts/{nqn}/keys`): absent or null
/// fields are lifted. Live connections stay; the next authentication (a new queue, or the
/// host's re-authentication) uses the new keys.
#[derive(Clone, Debug, Default, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HostKeysRequest {
    /// Null: the host no longer needs to authenticate.
    #[serde(default)]
    pub dhchap_secret: Option<String>,
    #[serde(default)]
    pub dhchap_ctrl_secret: Option<String>,
    #[serde(default)]
    pub dhchap_hash: Option<String>,
    #[serde(default)]
    pub dhchap_dhgroup: Option<String>,
}

/// Sets whether a subsystem admits only hosts with DH-HMAC-CHAP keys
/// (`PUT /subsystems/{nqn}/authentication`).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AuthenticationRequest {
    pub required: bool,
}

/// Sets whether any host may connect to a subsystem.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AccessRequest {
    pub allow_any_host: bool,
}

/// An ANA group's state, as NVMe names them (Linux nvmet's spellings).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum AnaState {
    Optimized,
    NonOptimized,
    /// I/O on this path fails with Asymmetric Access Inaccessible (no DNR): multipath hosts
    /// go on through another path and come back when it is accessible again.
    Inaccessible,
    PersistentLoss,
    /// In transition (I/O gets Asymmetric Access Transition); hosts reset the controller if
    /// it lasts past twice ANATT.
    Change,
}

impl AnaState {
    pub const ALL: [AnaState; 5] = [
        AnaState::Optimized,
        AnaState::NonOptimized,
        AnaState::Inaccessible,
        AnaState::PersistentLoss,
        AnaState::Change,
    ];

    /// The state's name, as the JSON spells it.
    pub fn name(self) -> &'static str {
        match self {
            AnaState::Optimized => "optimized",
            AnaState::NonOptimized => "non-optimized",
            AnaState::Inaccessible => "inaccessible",
            AnaState::PersistentLoss => "persistent-loss",
            AnaState::Change => "change",
        }
    }
}

/// An entity registered with this central discovery controller (`fabrikd --role cdc`) through
/// Discovery Information Management: a box's discovery controller, or a host (`nvme dim`).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct CdcRegistration {
    /// Its NQN (EID): `nqn.2024-01.io.fabrik:<box>` for a fabrik box.
    pub nqn: String,
    /// Its name (ENAME): a box's name, a host's host name.
    pub name: String,
    /// "box" (a discovery controller) or "host".
    pub entity: String,
    /// Where a box's discovery controller answers; the CDC reads hosts' logs from there.
    pub addresses: Vec<CdcAddress>,
}

/// A discovery controller's address, as registered.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct CdcAddress {
    /// "tcp" or "rdma" (or the TRTYPE number of another transport).
    pub transport: String,
    pub traddr: String,
    pub trsvcid: String,
}

/// An ANA (asymmetric namespace access) group: the namespaces in it and its state as this
/// target's ports report it (Identify ANAGRPID, the ANA log page).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct AnaGroup {
    /// ANAGRPID (from 1).
    pub id: u32,
    pub state: AnaState,
    /// The ANA log's change count: bumped by every change of state.
    pub change_count: u64,
}

/// This I/O module: which of the box's two it is, whether it is in maintenance, and its ANA
/// groups as its ports report them.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct Module {
    /// "a" or "b"; null for a box of one module.
    pub name: Option<String>,
    /// In maintenance: every group is inaccessible through this module's ports, so multipath
    /// hosts go on through the other module.
    pub maintenance: bool,
    /// In maintenance with no I/O command left in flight: this module may be stopped without
    /// a host noticing.
    pub drained: bool,
    /// I/O commands its hosts' queues have in flight.
    pub io_in_flight: u64,
    pub ana_groups: Vec<AnaGroup>,
    /// The other module's management API (null: none configured).
    pub peer: Option<String>,
    /// Whether the two modules' configurations are in step (null without a peer).
    pub config_sync: Option<ConfigSync>,
    /// Changes made to the configuration the modules share (both count the same).
    pub config_generation: u64,
}

/// Whether the configuration the two modules share (subsystems, hosts, compositions) is the
/// same on both.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ConfigSync {
    /// Every change was applied to both.
    InStep,
    /// Changed here while the other module could not be reached: it gets the changes when
    /// it is back.
    PeerBehind,
    /// Both were changed while apart: changes are refused on both until an operator keeps
    /// one side's (`POST /api/v1/module/config/push` on that module).
    Diverged,
}

/// The configuration the two modules share, as one module holds it: what the other asks for
/// to catch up or compare.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct ModuleConfig {
    pub module: Option<String>,
    pub generation: u64,
    /// This module has changes the other has not (see `ConfigSync::PeerBehind`).
    pub peer_behind: bool,
    /// Subsystems, hosts, compositions (fabrikd's own layout, as in its state file).
    #[schema(value_type = Object)]
    pub config: serde_json::Value,
}

/// The other module's change, to apply here: `config` at `generation`, made from `base`
/// (refused with 409 unless this module is at `base`, or `force`).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ModuleConfigPush {
    pub base: u64,
    pub generation: u64,
    /// Replace whatever is here (an operator resolving a divergence).
    #[serde(default)]
    pub force: bool,
    #[schema(value_type = Object)]
    pub config: serde_json::Value,
    /// Hosts the change's reservation commands affect: this module tells its controllers of
    /// them too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notices: Vec<ReservationNotice>,
}

/// A host told of a change of a drive's reservation (a Reservation Notification log page and
/// its event on each of its controllers that reaches the drive).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ReservationNotice {
    pub drive: String,
    /// The host's identifier (Connect HOSTID), 32 hex digits.
    #[schema(pattern = "^[0-9a-fA-F]{32}$")]
    pub host_id: String,
    pub kind: ReservationNoticeKind,
    /// Preempt and Abort: the host's commands in flight here finish before the change is
    /// acknowledged.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub abort: bool,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ReservationNoticeKind {
    RegistrationPreempted,
    ReservationReleased,
    ReservationPreempted,
}

/// Puts the module into maintenance (`true`) or back into service (`false`); kept across
/// restarts.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ModuleRequest {
    pub maintenance: bool,
}

/// Puts an ANA group in a state: the hosts are told (ANA change notice) and I/O follows it.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AnaGroupRequest {
    pub state: AnaState,
}

/// An RFC 9457 problem: every error answer (`application/problem+json`).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct Problem {
    /// A URI naming the problem type: `about:blank`, the status says it all.
    #[serde(rename = "type")]
    pub kind: String,
    pub title: String,
    pub status: u16,
    /// What exactly was wrong with this request.
    pub detail: String,
}

#[cfg(test)]
mod tests {
    use super::AnaState;

    #[test]
    fn ana_state_names_are_the_json_names() {
        for state in AnaState::ALL {
            let json = serde_json::to_value(state).unwrap();
            assert_eq!(json.as_str(), Some(state.name()));
            assert_eq!(serde_json::from_value::<AnaState>(json).unwrap(), state);
        }
    }
}

/// A protected volume: RAID over drives, served as namespace 1 of its own subsystem
/// (`nqn.2024-01.io.fabrik:<box>:vol-<name>`) and composed to hosts like a drive, by its ID
/// `vol-<name>`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct Volume {
    pub name: String,
    /// The ID compositions and metrics name it by: `vol-<name>`.
    pub id: String,
    pub nqn: String,
    /// raid0, raid1, raid10, raid5 or raid6.
    pub level: String,
    pub strip_kib: u64,
    pub capacity_bytes: u64,
    pub block_size: u32,
    /// making (its drives being erased; not served yet), optimal, degraded (a member lost,
    /// data whole), rebuilding, or failed (more lost than the level
    /// makes up for: I/O fails).
    pub state: String,
    /// In layout order.
    pub members: Vec<VolumeMember>,
    /// Drives kept to rebuild onto.
    pub spares: Vec<String>,
    /// Regions of stripes marked in the write-intent bitmap now.
    pub dirty_regions: u64,
    /// Regions that were being written when fabrikd stopped and could not be resynced because
    /// the volume came up degraded: their data may be wrong (0 is what you want).
    pub unsynced_regions: u64,
    /// Strip pieces read by rebuilding them from the rest of their stripe, since start.
    pub reconstructed_reads: u64,
    /// The rebuild under way (a spare in a failed member's place).
    pub rebuild: Option<VolumeRebuild>,
    /// How fast a rebuild may write, MiB/s (null: as fast as it can).
    pub rebuild_limit_mib_per_sec: Option<u64>,
    /// The last scrub (or the one running), since start.
    pub scrub: Option<VolumeScrub>,
}

/// A rebuild under way.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct VolumeRebuild {
    /// The drive being rebuilt (a spare, now a member).
    pub drive: String,
    /// 0 to 1.
    pub progress: f64,
    pub rebuilt_bytes: u64,
    pub total_bytes: u64,
    /// Since it started.
    pub mib_per_sec: f64,
    /// At that speed.
    pub eta_seconds: Option<u64>,
}

/// What a scrub found: stripes whose parity (or mirror copies) disagreed with the data, and
/// were written again.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct VolumeScrub {
    /// running, clean (done, nothing found), repaired (done, mismatches written again), or
    /// stopped (see `error`).
    pub state: String,
    pub checked_stripes: u64,
    pub total_stripes: u64,
    pub mismatches: u64,
    pub repaired: u64,
    /// Unix seconds.
    pub started: u64,
    pub finished: Option<u64>,
    pub error: Option<String>,
}

/// A drive to keep as a spare of a volume.
#[derive(Clone, Debug, Default, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SpareRequest {
    pub drive: String,
}

/// How fast a volume's rebuilds may write.
#[derive(Clone, Debug, Default, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RebuildLimit {
    /// MiB/s, at least 1 (null: no limit).
    #[schema(minimum = 1, maximum = 1048576)]
    pub mib_per_sec: Option<u64>,
}

/// A member of a volume.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct VolumeMember {
    pub drive: String,
    /// active or failed.
    pub state: String,
}

/// Makes a volume.
#[derive(Clone, Debug, Default, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct VolumeRequest {
    /// Letters, digits, '-' and '_', at most 32.
    #[schema(max_length = 32)]
    pub name: String,
    /// raid0, raid1, raid10, raid5 or raid6.
    pub level: String,
    /// Member drives, in layout order. Their data is erased: a new volume reads zeros.
    pub drives: Vec<String>,
    /// Strip size in KiB: a power of two from 4 to 16384 [default: 64].
    #[serde(default)]
    pub strip_kib: Option<u64>,
    /// Drives kept to rebuild onto.
    #[serde(default)]
    pub spares: Vec<String>,
    /// Serve only this much, rounded up to whole stripes (default: all the drives hold). Making
    /// the volume erases only that much, so a small volume on big drives is made quickly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub capacity_bytes: Option<u64>,
    /// Whether any host may connect to its subsystem [default: true, as a box serves its
    /// drives]; false: only the hosts it is composed to or allowed on, from the moment it is
    /// served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_any_host: Option<bool>,
}
