//! The persistent state: the whole configuration of the box (drives, subsystems, namespaces,
//! hosts, ports, compositions) in one JSON file, `state.json` in the data directory.
//!
//! Written atomically on every change (temp file, fsync, rename, fsync of the directory), so a
//! crash leaves either the old or the new file, never a torn one. A file that cannot be read or
//! parsed stops fabrikd: it is never replaced silently.
//!
//! How the config file and flags meet an existing state: the first start (no state file) seeds
//! the state from them. Afterwards the state is the configuration, except that an explicit
//! `--listen` (or `listen` in the config file) replaces the ports and an explicit
//! `--host`/`--allow-any-host` (or `hosts`) replaces every subsystem's allow list; explicit
//! drive settings (`--drives`, `--drive-size`, `--backend`, `--block-size`, `--box-name`,
//! drives in the config file) must describe the drives the state holds, or fabrikd refuses to
//! start and says which file to remove to start over.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use crate::backend::BackendKind;
use crate::config::{parse_backend, Config, DriveSpec};
use crate::model::reservation::Reservations;
use crate::model::{self, TlsMode, Transport};
use crate::secrets::SecretText;
use volumes::check_name;

mod hosts;
mod volumes;
pub use hosts::{check_qos, HostKeys, HostState};
pub use volumes::{
    check_name as check_volume_name, volume_id, volume_nqn, volume_subsystem, VolumeState,
};

/// Bounds on what the management API may add (`State::check_limits`).
pub mod limits {
    pub const SUBSYSTEMS: usize = 1024;
    pub const HOSTS: usize = 4096;
    pub const COMPOSITIONS: usize = 4096;
    /// Host NQNs on allow lists, over every subsystem (an NQN is up to 223 bytes).
    pub const ALLOWED_HOSTS: usize = 16384;
    /// Identify's Model Number field (nvmet allows as much).
    pub const MODEL_LEN: usize = 40;
    pub const HOST_NAME_LEN: usize = 64;
}

pub const STATE_FILE: &str = "state.json";
pub const TOKEN_FILE: &str = "api-token";
const VERSION: u32 = 1;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct State {
    pub version: u32,
    pub box_name: String,
    pub drives: Vec<DriveState>,
    pub subsystems: Vec<SubsystemState>,
    pub hosts: Vec<HostState>,
    pub ports: Vec<PortState>,
    pub compositions: Vec<CompositionState>,
    /// Next composition number (IDs are never reused).
    pub next_composition: u64,
    /// Key of the host aliases (`host_alias`), made once per box: metrics name hosts by alias,
    /// and without the key nobody can tell which NQN an alias stands for.
    #[serde(default = "new_alias_key")]
    pub alias_key: String,
    /// Drives that lost a write and refuse changes until an operator clears them (by ID).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub drive_faults: BTreeMap<String, DriveFault>,
    /// ANA group states an operator set, by group ID (a group not here is in the module's
    /// default state: see `Manager::ana_setting`): a path taken out of service stays out after
    /// a restart until it is put back.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ana_groups: BTreeMap<u32, AnaSetting>,
    /// This I/O module is in maintenance: every group inaccessible through its ports.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub maintenance: bool,
    /// Changes made to the configuration the two I/O modules share (`Shared`): both count
    /// the same while in step.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub config_generation: u64,
    /// This module changed the shared configuration while the other could not be reached; it
    /// hands the changes over when it can (see `management::sync`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub peer_behind: bool,
    /// Persistent reservations, by drive (a drive with none has no entry).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub reservations: BTreeMap<String, Reservations>,
    /// I/O limits of drives (each drive's namespace, whoever the host), by drive.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub drive_qos: BTreeMap<String, fabrik_api::models::QosLimits>,
    /// Protected volumes over the drives (`raid`). Not shared with the other I/O module: a
    /// volume is served by one module alone (a box with two refuses them for now).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<VolumeState>,
}

/// A host of the config file (checked when the file was read).
fn config_host(e: &fabrik_api::config::HostEntry) -> Option<HostState> {
    HostState::from_entry(e)
        .inspect_err(|err| tracing::error!(host = %e.nqn, "[[host]] skipped: {err:#}"))
        .ok()
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What the two I/O modules of a box keep the same: whom the drives are exported to and how,
/// and who reserved them.
/// Each has its own ports, ANA settings, maintenance and drive faults.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Shared {
    pub subsystems: Vec<SubsystemState>,
    pub hosts: Vec<HostState>,
    pub compositions: Vec<CompositionState>,
    pub next_composition: u64,
    pub alias_key: String,
    #[serde(default)]
    pub reservations: BTreeMap<String, Reservations>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub drive_qos: BTreeMap<String, fabrik_api::models::QosLimits>,
}

impl State {
    pub fn shared(&self) -> Shared {
        Shared {
            subsystems: self.subsystems.clone(),
            hosts: self.hosts.clone(),
            compositions: self.compositions.clone(),
            next_composition: self.next_composition,
            alias_key: self.alias_key.clone(),
            reservations: self.reservations.clone(),
            drive_qos: self.drive_qos.clone(),
        }
    }

    /// The shared configuration as the API shows it: each secret replaced by its fingerprint.
    pub fn shared_redacted(&self) -> Shared {
        let mut shared = self.shared();
        for t in shared
            .hosts
            .iter_mut()
            .flat_map(|h| h.dhchap.iter_mut())
            .flat_map(|k| k.secrets_mut())
        {
            *t = SecretText::new(t.fingerprint());
        }
        shared
    }

    pub fn set_shared(&mut self, shared: Shared) {
        self.subsystems = shared.subsystems;
        self.hosts = shared.hosts;
        self.compositions = shared.compositions;
        self.next_composition = shared.next_composition;
        self.alias_key = shared.alias_key;
        self.reservations = shared.reservations;
        self.drive_qos = shared.drive_qos;
    }
}

/// An ANA group state, as Linux nvmet's configfs names them.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum AnaSetting {
    Optimized,
    NonOptimized,
    Inaccessible,
    PersistentLoss,
    Change,
}

impl AnaSetting {
    /// The state's code in the ANA log (`ana_state`).
    pub fn code(self) -> u8 {
        use fabrik_proto::nvme::log::ana_state;
        match self {
            AnaSetting::Optimized => ana_state::OPTIMIZED,
            AnaSetting::NonOptimized => ana_state::NON_OPTIMIZED,
            AnaSetting::Inaccessible => ana_state::INACCESSIBLE,
            AnaSetting::PersistentLoss => ana_state::PERSISTENT_LOSS,
            AnaSetting::Change => ana_state::CHANGE,
        }
    }
}

/// A drive's lost write, as recorded (see `backend::guard`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DriveFault {
    /// Seconds since the Unix epoch.
    pub since: u64,
    pub cause: String,
}

fn new_alias_key() -> String {
    random_hex(16).unwrap_or_else(|e| {
        // Without urandom no token could be made either; the box still serves.
        tracing::warn!("reading /dev/urandom for the host alias key: {e}");
        String::from("no-urandom")
    })
}

/// `bytes` random bytes from /dev/urandom, as hex.
pub(crate) fn random_hex(bytes: usize) -> std::io::Result<String> {
    let mut raw = vec![0u8; bytes];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut raw)?;
    Ok(raw.iter().map(|b| format!("{b:02x}")).collect())
}

/// How metrics and logs name a host: "h-" and 12 hex digits of SHA-256 over the box's alias
/// key and the NQN. Stable for the box; no use to whoever scrapes the metrics, who cannot
/// connect as that host without its NQN (until DH-HMAC-CHAP, an NQN is the host's credential).
pub fn host_alias(key: &str, nqn: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::new()
        .chain_update(key.as_bytes())
        .chain_update(b"/")
        .chain_update(nqn.as_bytes())
        .finalize();
    let hex: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
    format!("h-{hex}")
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DriveState {
    pub id: String,
    pub backend: String,
    pub path: Option<PathBuf>,
    pub size: u64,
    pub block_size: u32,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SubsystemState {
    pub nqn: String,
    pub serial: String,
    pub model: String,
    /// Any host may connect (unless a composition restricts it).
    pub allow_any_host: bool,
    /// Hosts allowed when `allow_any_host` is false.
    pub hosts: Vec<String>,
    pub namespaces: Vec<NamespaceState>,
    /// Only hosts with DH-HMAC-CHAP keys may connect (and then authenticate).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub require_auth: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NamespaceState {
    pub nsid: u32,
    pub drive: String,
}

impl NamespaceState {
    /// One namespace per drive, numbered from NSID 1 in the order given.
    pub fn numbered(drives: &[String]) -> Vec<NamespaceState> {
        drives
            .iter()
            .enumerate()
            .map(|(i, d)| NamespaceState {
                nsid: i as u32 + 1,
                drive: d.clone(),
            })
            .collect()
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PortState {
    pub id: u16,
    /// By its lowercase name ("tcp", "rdma").
    pub transport: Transport,
    pub address: SocketAddr,
    /// TLS on an NVMe/TCP port (absent: none).
    #[serde(default, skip_serializing_if = "TlsMode::is_none")]
    pub tls: TlsMode,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CompositionState {
    pub id: String,
    pub host_nqn: String,
    pub drives: Vec<String>,
    pub shared: bool,
    /// Ports the connect commands name (None: every port).
    pub ports: Option<Vec<u16>>,
}

impl DriveState {
    pub fn spec(&self) -> anyhow::Result<DriveSpec> {
        Ok(DriveSpec {
            id: self.id.clone(),
            backend: parse_backend(&self.backend)?,
            path: self.path.clone(),
            size: self.size,
            block_size: self.block_size,
        })
    }

    fn from_spec(d: &DriveSpec) -> DriveState {
        DriveState {
            id: d.id.clone(),
            backend: d.backend.name().to_string(),
            path: d.path.clone(),
            size: d.size,
            block_size: d.block_size,
        }
    }
}

impl SubsystemState {
    /// Who may connect with no composition in play: None means any host.
    pub fn configured_hosts(&self) -> Option<Vec<String>> {
        if self.allow_any_host {
            None
        } else {
            Some(self.hosts.clone())
        }
    }

    pub fn drives(&self) -> impl Iterator<Item = &str> {
        self.namespaces.iter().map(|n| n.drive.as_str())
    }
}

impl State {
    /// The first state, from the configuration (the embedded default, config file and flags).
    pub fn seed(config: &Config) -> State {
        let drives = config.drive_list();
        let subsystems = config
            .subsystem_list()
            .iter()
            .map(|sub| {
                let first = drives.iter().find(|d| d.id == sub.drives[0]);
                let serial_key = if sub.drives.len() == 1 {
                    sub.drives[0].clone()
                } else {
                    let h = model::stable_id(&sub.nqn, b"serial");
                    format!("S{:02X}{:02X}{:02X}", h[0], h[1], h[2])
                };
                let hosts = config.allowed_hosts_for(sub);
                SubsystemState {
                    nqn: sub.nqn.clone(),
                    serial: serial_number(&config.box_name, &serial_key),
                    model: sub.model.clone().unwrap_or_else(|| {
                        format!(
                            "fabrik {} drive",
                            first.map_or(BackendKind::File, |d| d.backend).name()
                        )
                    }),
                    allow_any_host: hosts.is_none(),
                    hosts: hosts.unwrap_or_default(),
                    namespaces: NamespaceState::numbered(&sub.drives),
                    require_auth: false,
                }
            })
            .collect();
        State {
            version: VERSION,
            box_name: config.box_name.clone(),
            drives: drives.iter().map(DriveState::from_spec).collect(),
            subsystems,
            hosts: config.hosts.iter().filter_map(config_host).collect(),
            ports: seed_ports(config),
            compositions: Vec::new(),
            next_composition: 1,
            alias_key: new_alias_key(),
            drive_faults: BTreeMap::new(),
            ana_groups: BTreeMap::new(),
            maintenance: false,
            config_generation: 0,
            peer_behind: false,
            reservations: BTreeMap::new(),
            drive_qos: BTreeMap::new(),
            volumes: Vec::new(),
        }
    }

    /// Applies what the command line and config file say explicitly on top of a restored
    /// state (see the module comment); errors when they contradict the state's drives.
    pub fn reconcile(&mut self, config: &Config, path: &Path) -> anyhow::Result<()> {
        if config.explicit.drives {
            let seeded = State::seed(config);
            if seeded.drives != self.drives || seeded.box_name != self.box_name {
                bail!(
                    "the drive settings given ({} drive(s), box {:?}) differ from the state in {} ({} drive(s), box {:?}); \
                     drop those settings to keep the state, or remove the file to start over from them",
                    seeded.drives.len(),
                    seeded.box_name,
                    path.display(),
                    self.drives.len(),
                    self.box_name
                );
            }
        }
        if config.explicit.listen {
            self.ports = seed_ports(config);
            for c in &mut self.compositions {
                c.ports = None;
            }
        }
        for h in config.hosts.iter().filter_map(config_host) {
            match self.hosts.iter_mut().find(|x| x.nqn == h.nqn) {
                Some(x) => *x = h,
                None => self.hosts.push(h),
            }
        }
        if config.explicit.hosts {
            // A volume made closed stays closed: the configured hosts are for drives and
            // volumes served as drives are, not for one handed to a single host at a time.
            let closed: Vec<String> = self
                .volumes
                .iter()
                .filter(|v| v.closed)
                .map(|v| volume_nqn(&self.box_name, &v.name))
                .collect();
            for sub in self
                .subsystems
                .iter_mut()
                .filter(|s| !closed.contains(&s.nqn))
            {
                sub.allow_any_host = config.allowed_hosts.is_none();
                sub.hosts = config.allowed_hosts.clone().unwrap_or_default();
            }
        }
        Ok(())
    }

    /// The limits a change from `before` must keep (the API answers 422 past them): fields as
    /// the Linux target bounds them, and counts that keep the state file, so the cost of every
    /// change (a rewrite and fsync of the whole file) and of every listing, to a few MB. Only
    /// what the change adds is checked: a state from before the limits still takes changes.
    pub fn check_limits(&self, before: &State) -> Result<(), String> {
        let count = |what: &str, n: usize, was: usize, max: usize| match n > max && n > was {
            true => Err(format!("at most {max} {what} (this change would make {n})")),
            false => Ok(()),
        };
        let (b, a) = (before, self);
        count(
            "subsystems",
            a.subsystems.len(),
            b.subsystems.len(),
            limits::SUBSYSTEMS,
        )?;
        count(
            "registered hosts",
            a.hosts.len(),
            b.hosts.len(),
            limits::HOSTS,
        )?;
        count(
            "compositions",
            a.compositions.len(),
            b.compositions.len(),
            limits::COMPOSITIONS,
        )?;
        let allowed = |st: &State| st.subsystems.iter().map(|s| s.hosts.len()).sum();
        count(
            "allow-list entries over all subsystems",
            allowed(a),
            allowed(b),
            limits::ALLOWED_HOSTS,
        )?;
        for s in a.subsystems.iter().filter(|s| !b.subsystems.contains(s)) {
            let printable = s.model.bytes().all(|c| (0x20..0x7f).contains(&c));
            if s.model.len() > limits::MODEL_LEN || !printable {
                return Err(format!(
                    "model {:?}: at most {} printable ASCII characters (Identify's MN field)",
                    s.model,
                    limits::MODEL_LEN
                ));
            }
        }
        for h in a.hosts.iter().filter(|h| !b.hosts.contains(h)) {
            let name = h.name.as_deref().unwrap_or("");
            if name.chars().count() > limits::HOST_NAME_LEN || name.chars().any(char::is_control) {
                return Err(format!(
                    "host name {name:?}: at most {} characters, none of them control characters",
                    limits::HOST_NAME_LEN
                ));
            }
        }
        Ok(())
    }

    /// Checks what the API and a hand-edited file could get wrong.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.version != VERSION {
            bail!(
                "state version {} is not supported (this fabrikd reads {VERSION})",
                self.version
            );
        }
        let mut ids = BTreeSet::new();
        for d in &self.drives {
            d.spec()?;
            if !ids.insert(d.id.as_str()) {
                bail!("drive {:?} appears twice", d.id);
            }
        }
        let mut in_volume = BTreeSet::new();
        let mut volume_ids = Vec::new();
        for v in &self.volumes {
            check_name(&v.name).map_err(anyhow::Error::msg)?;
            for d in v.all_drives() {
                if !ids.contains(d) {
                    bail!("volume {}: unknown drive {d:?}", v.name);
                }
                if !in_volume.insert(d) {
                    bail!("drive {d:?} is in two volumes (or twice in one)");
                }
            }
            if let Some(f) = v.failed.iter().find(|f| !v.drives.contains(f)) {
                bail!("volume {}: failed drive {f:?} is no member", v.name);
            }
            volume_ids.push(v.id());
        }
        for id in &volume_ids {
            if !ids.insert(id.as_str()) {
                bail!("volume ID {id:?} is taken (a drive or another volume)");
            }
        }
        let mut exported = BTreeSet::new();
        let mut nqns = BTreeSet::new();
        for s in &self.subsystems {
            fabrik_proto::fabrics::nqn::Nqn::new(&s.nqn)
                .with_context(|| format!("subsystem NQN {:?}", s.nqn))?;
            if !nqns.insert(s.nqn.as_str()) {
                bail!("subsystem {} appears twice", s.nqn);
            }
            let mut nsids = BTreeSet::new();
            for ns in &s.namespaces {
                if ns.nsid == 0 || ns.nsid > crate::controller::limits::MAX_NAMESPACES {
                    bail!("subsystem {}: NSID {} is out of range", s.nqn, ns.nsid);
                }
                if !nsids.insert(ns.nsid) {
                    bail!("subsystem {}: NSID {} appears twice", s.nqn, ns.nsid);
                }
                if !ids.contains(ns.drive.as_str()) {
                    bail!("subsystem {}: unknown drive {:?}", s.nqn, ns.drive);
                }
                if !exported.insert(ns.drive.as_str()) {
                    bail!("drive {:?} is exported by two subsystems", ns.drive);
                }
                if in_volume.contains(ns.drive.as_str()) {
                    bail!(
                        "drive {:?} is in a volume and exported by {}",
                        ns.drive,
                        s.nqn
                    );
                }
            }
        }
        if self.ports.is_empty() {
            bail!("no ports");
        }
        for h in &self.hosts {
            if let Some(k) = &h.dhchap {
                k.live().with_context(|| format!("host {}", h.nqn))?;
            }
            if let Some(q) = &h.qos {
                check_qos(q).with_context(|| format!("host {}", h.nqn))?;
            }
        }
        for (drive, q) in &self.drive_qos {
            if !ids.contains(drive.as_str()) {
                bail!("I/O limits for unknown drive {drive:?}");
            }
            check_qos(q).with_context(|| format!("drive {drive}"))?;
        }
        for c in &self.compositions {
            for d in &c.drives {
                if !exported.contains(d.as_str()) {
                    bail!("composition {}: drive {d:?} is not exported", c.id);
                }
            }
        }
        Ok(())
    }

    /// Hosts that may connect to `sub` now: its composed hosts while any of its drives is
    /// composed, else its configured access. None means any host.
    pub fn effective_hosts(&self, sub: &SubsystemState) -> Option<Vec<String>> {
        self.access().hosts(sub)
    }

    /// Who may reach each subsystem, worked out once in time linear in the state: listings and
    /// changes use it rather than asking `effective_hosts` subsystem by subsystem.
    pub fn access(&self) -> Access<'_> {
        let mut sub_of_drive = HashMap::new();
        for s in &self.subsystems {
            for d in s.drives() {
                sub_of_drive.entry(d).or_insert(s.nqn.as_str());
            }
        }
        let mut composed: HashMap<&str, Vec<&str>> = HashMap::new();
        for c in &self.compositions {
            for d in &c.drives {
                if let Some(&s) = sub_of_drive.get(d.as_str()) {
                    let hosts = composed.entry(s).or_default();
                    if !hosts.contains(&c.host_nqn.as_str()) {
                        hosts.push(&c.host_nqn);
                    }
                }
            }
        }
        Access {
            sub_of_drive,
            composed,
        }
    }

    pub fn subsystem_of_drive(&self, drive: &str) -> Option<&SubsystemState> {
        self.subsystems
            .iter()
            .find(|s| s.drives().any(|d| d == drive))
    }
}

/// See `State::access`.
pub struct Access<'a> {
    sub_of_drive: HashMap<&'a str, &'a str>,
    /// Hosts of the compositions of each subsystem's drives, in composition order.
    composed: HashMap<&'a str, Vec<&'a str>>,
}

impl Access<'_> {
    /// Hosts that may connect to `sub` (None: any host): those of its compositions if it has
    /// any, else its allow list.
    pub fn hosts(&self, sub: &SubsystemState) -> Option<Vec<String>> {
        match self.composed.get(sub.nqn.as_str()) {
            Some(hosts) => Some(hosts.iter().map(|h| h.to_string()).collect()),
            None => sub.configured_hosts(),
        }
    }

    /// The NQN of the subsystem exporting `drive`.
    pub fn subsystem_of_drive(&self, drive: &str) -> Option<&str> {
        self.sub_of_drive.get(drive).copied()
    }
}

fn seed_ports(config: &Config) -> Vec<PortState> {
    let tcp = config.listen.iter().map(|a| (Transport::Tcp, a));
    let rdma = config.rdma_listen.iter().map(|a| (Transport::Rdma, a));
    tcp.chain(rdma)
        .enumerate()
        .map(|(i, (transport, a))| PortState {
            id: i as u16 + 1,
            transport,
            address: *a,
            tls: match transport {
                Transport::Tcp => config.listen_tls(),
                Transport::Rdma => TlsMode::None,
            },
        })
        .collect()
}

/// A 20-character serial number, stable for a box and drive.
pub fn serial_number(box_name: &str, drive_id: &str) -> String {
    let h = model::stable_id(box_name, b"serial");
    let mut s = format!(
        "FBK{:02X}{:02X}{:02X}{:02X}-{}",
        h[0],
        h[1],
        h[2],
        h[3],
        drive_id.to_ascii_uppercase()
    );
    s.truncate(20);
    s
}

/// Reads the state file: Ok(None) when there is none; an error (naming the file) when it
/// cannot be read, parsed or is inconsistent.
pub fn load(path: &Path) -> anyhow::Result<Option<State>> {
    let text = match std::fs::read(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => bail!("cannot read the state file {}: {e}", path.display()),
    };
    let state: State = serde_json::from_slice(&text).with_context(|| {
        format!(
            "the state file {} is corrupt; fabrikd will not replace it: restore it from a backup, \
             or move it away to start over from the configuration",
            path.display()
        )
    })?;
    let mut state = state;
    hosts::unseal(&mut state.hosts, path)?;
    state
        .validate()
        .with_context(|| format!("the state file {} is inconsistent", path.display()))?;
    Ok(Some(state))
}

/// Writes the state atomically: a temp file next to it, fsync, rename over, fsync the directory.
pub fn save(path: &Path, state: &State) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().unwrap_or(Path::new("."));
    crate::files::create_private_dir(dir)?;
    let tmp = path.with_extension("json.tmp");
    let mut text = match hosts::sealed(&state.hosts, dir)? {
        Some(hosts) => serde_json::to_vec_pretty(&State {
            hosts,
            ..state.clone()
        }),
        None => serde_json::to_vec_pretty(state),
    }
    .map_err(std::io::Error::other)?;
    text.push(b'\n');
    {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(crate::files::FILE_MODE)
            .open(&tmp)?;
        f.write_all(&text)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    crate::files::sync_parent(path)
}

/// The API token: `configured` if given, else the token file in `dir`, created (mode 0600,
/// 32 random bytes as hex) when missing.
pub fn api_token(dir: &Path, configured: Option<&str>) -> anyhow::Result<String> {
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(t) = configured {
        return Ok(t.to_string());
    }
    let path = dir.join(TOKEN_FILE);
    match std::fs::read_to_string(&path) {
        Ok(t) if !t.trim().is_empty() => return Ok(t.trim().to_string()),
        Ok(_) => bail!("the API token file {} is empty", path.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => bail!("cannot read the API token file {}: {e}", path.display()),
    }
    let token = random_hex(32).context("reading /dev/urandom for the API token")?;
    crate::files::create_private_dir(dir)?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(crate::files::FILE_MODE)
        .open(&path)
        .with_context(|| format!("creating the API token file {}", path.display()))?;
    f.write_all(format!("{token}\n").as_bytes())?;
    f.sync_all()?;
    crate::files::sync_parent(&path)?;
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: &Path) -> Config {
        let mut c = Config::default_jbof(dir.to_path_buf());
        c.box_name = "b".into();
        c.drives = 3;
        c.backend = BackendKind::Ram;
        c.drive_size = 1 << 20;
        c
    }

    #[test]
    fn changes_past_the_limits_are_refused_and_old_excess_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let base = State::seed(&config(dir.path()));
        let host = |i: usize| HostState {
            nqn: format!("nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-{i:012}"),
            name: None,
            dhchap: None,
            qos: None,
        };
        let mut full = base.clone();
        full.hosts = (0..limits::HOSTS).map(host).collect();
        full.check_limits(&base).unwrap();
        let mut over = full.clone();
        over.hosts.push(host(limits::HOSTS));
        assert!(over
            .check_limits(&full)
            .unwrap_err()
            .contains("at most 4096"));
        // A state already past a limit takes changes that do not add to it.
        let mut fewer = over.clone();
        fewer.hosts.pop();
        fewer.hosts.pop();
        fewer.check_limits(&over).unwrap();

        let mut model = base.clone();
        model.subsystems[0].model = "m".repeat(41);
        assert!(model
            .check_limits(&base)
            .unwrap_err()
            .contains("40 printable"));
        model.subsystems[0].model = "bad\nmodel".into();
        assert!(model.check_limits(&base).is_err());
        model.subsystems[0].model = "m".repeat(40);
        model.check_limits(&base).unwrap();
        let mut named = base.clone();
        named.hosts.push(HostState {
            name: Some("n".repeat(65)),
            ..host(1)
        });
        assert!(named
            .check_limits(&base)
            .unwrap_err()
            .contains("64 characters"));
        let mut allowed = base.clone();
        allowed.subsystems[0].hosts = (0..=limits::ALLOWED_HOSTS).map(|i| host(i).nqn).collect();
        assert!(allowed
            .check_limits(&base)
            .unwrap_err()
            .contains("allow-list"));
    }

    #[test]
    fn seed_save_load_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let s = State::seed(&config(dir.path()));
        s.validate().unwrap();
        assert_eq!(s.subsystems.len(), 3);
        assert!(s.subsystems[0].allow_any_host);
        let path = dir.path().join(STATE_FILE);
        assert!(load(&path).unwrap().is_none());
        save(&path, &s).unwrap();
        assert_eq!(load(&path).unwrap(), Some(s));
        assert!(!path.with_extension("json.tmp").exists());
    }

    #[test]
    fn corrupt_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(STATE_FILE);
        std::fs::write(&path, b"{\"version\": 1, \"box_na").unwrap();
        let err = format!("{:#}", load(&path).unwrap_err());
        assert!(err.contains("corrupt") && err.contains(STATE_FILE), "{err}");
        // Still there, untouched.
        assert_eq!(std::fs::read(&path).unwrap(), b"{\"version\": 1, \"box_na");
    }

    #[test]
    fn explicit_flags_reconcile() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(STATE_FILE);
        let mut s = State::seed(&config(dir.path()));
        let mut c = config(dir.path());
        c.explicit.hosts = true;
        c.allowed_hosts = Some(vec!["nqn.2014-08.org.example:h1".into()]);
        c.explicit.listen = true;
        c.listen = vec!["127.0.0.1:4499".parse().unwrap()];
        s.reconcile(&c, &path).unwrap();
        assert!(!s.subsystems[1].allow_any_host);
        assert_eq!(s.subsystems[1].hosts, c.allowed_hosts.clone().unwrap());
        assert_eq!(s.ports[0].address, c.listen[0]);
        c.explicit.drives = true;
        c.drives = 5;
        let err = s.reconcile(&c, &path).unwrap_err().to_string();
        assert!(err.contains("differ") && err.contains(STATE_FILE), "{err}");
    }

    #[test]
    fn listeners_take_the_tls_of_the_flags() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = config(dir.path());
        c.rdma_listen = vec!["10.0.0.1:4420".parse().unwrap()];
        assert_eq!(State::seed(&c).ports[0].tls, TlsMode::None);
        c.tls_psk = Some("/etc/fabrik/tls.psk".into());
        c.set_tls("allowed").unwrap();
        let s = State::seed(&c);
        // NVMe/TCP only; RDMA ports have none.
        assert_eq!(
            s.ports.iter().map(|p| p.tls).collect::<Vec<_>>(),
            [TlsMode::Allowed, TlsMode::None]
        );
        // Kept in the state file only where there is TLS.
        let text = serde_json::to_string(&s.ports).unwrap();
        assert_eq!(text.matches("\"tls\"").count(), 1, "{text}");
    }

    #[test]
    fn token_file_is_private_and_stable() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let t = api_token(dir.path(), None).unwrap();
        assert_eq!(t.len(), 64);
        let mode = std::fs::metadata(dir.path().join(TOKEN_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(api_token(dir.path(), None).unwrap(), t);
        assert_eq!(api_token(dir.path(), Some("x")).unwrap(), "x");
    }

    /// `[[host]]` entries: keys checked at load (the error names the entry, never the
    /// secret), seeded into a new state and replacing a restored state's keys.
    #[test]
    fn config_hosts_carry_keys() {
        let nqn = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000aa";
        let key = fabrik_proto::auth::Secret::new(1, &[9; 32])
            .unwrap()
            .to_text()
            .to_string();
        let file = |k: &str| {
            fabrik_api::config::ConfigFile::parse(&format!(
                "[[host]]\nnqn = \"{nqn}\"\ndhchap_secret = \"{k}\"\ndhchap_dhgroup = \"ffdhe3072\"\n[host.qos]\niops = 5000\nwrite_bytes_per_sec = 1000000"
            ))
            .unwrap()
        };
        let mut c = Config::default_jbof("/tmp/x".into());
        c.apply_file(&file(&key)).unwrap();
        let seeded = State::seed(&c);
        let live = seeded.hosts[0].dhchap.as_ref().unwrap().live().unwrap();
        assert_eq!(
            live.policy.dhgroups,
            vec![fabrik_proto::auth::DhGroup::Ffdhe3072]
        );
        let qos = seeded.hosts[0].qos.as_ref().unwrap();
        assert_eq!(
            (qos.iops, qos.write_bytes_per_sec),
            (Some(5000), Some(1_000_000))
        );

        let mut restored = seeded.clone();
        restored.hosts[0].dhchap = None;
        restored
            .reconcile(&c, Path::new("/tmp/x/state.json"))
            .unwrap();
        assert_eq!(restored.hosts, seeded.hosts);

        let bad = key.replace("DHHC-1:01", "DHHC-1:09");
        let e = format!(
            "{:#}",
            Config::default_jbof("/tmp/x".into())
                .apply_file(&file(&bad))
                .unwrap_err()
        );
        assert!(e.contains("[[host]]") && e.contains("transform"), "{e}");
        assert!(!e.contains(&key[10..30]), "the secret is not repeated: {e}");
    }
}
