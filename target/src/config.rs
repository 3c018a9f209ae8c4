//! `fabrikd`'s resolved configuration: the embedded default, overridden by the config file,
//! overridden by command-line flags.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use fabrik_api::config::{parse_size, ConfigFile};

use crate::backend::BackendKind;
use crate::model::{TlsMode, Transport};
use crate::module::ModuleId;

pub const DEFAULT_DRIVES: u32 = 24;
pub const DEFAULT_DRIVE_SIZE: u64 = 64 << 30;
pub const DEFAULT_BLOCK_SIZE: u32 = 4096;
pub const DEFAULT_LISTEN: &str = "127.0.0.1:4420";
/// The NQN prefix: our naming authority (date + reverse domain) per the NVMe naming rules.
pub const NQN_PREFIX: &str = "nqn.2024-01.io.fabrik";

/// One drive to open.
#[derive(Clone, Debug, PartialEq)]
pub struct DriveSpec {
    pub id: String,
    pub backend: BackendKind,
    /// Backing file or device (file and block backends).
    pub path: Option<PathBuf>,
    pub size: u64,
    pub block_size: u32,
}

/// One subsystem and the drives it exports, namespace 1 first.
#[derive(Clone, Debug, PartialEq)]
pub struct SubsystemSpec {
    pub nqn: String,
    pub drives: Vec<String>,
    /// This subsystem's own host list: None follows `Config::allowed_hosts` (so `--host`
    /// applies), an empty list allows any host. See `Config::allowed_hosts_for`.
    pub hosts: Option<Vec<String>>,
    pub model: Option<String>,
}

#[derive(Clone, Debug)]
pub struct Config {
    /// Names the box in NQNs and serial numbers.
    pub box_name: String,
    pub data_dir: PathBuf,
    /// NVMe/TCP listeners.
    pub listen: Vec<SocketAddr>,
    /// NVMe/RDMA listeners (`rdma:ADDR:PORT`).
    pub rdma_listen: Vec<SocketAddr>,
    /// Generated drives 00..drives-1 (unless `drive_specs` is non-empty).
    pub drives: u32,
    pub drive_size: u64,
    pub block_size: u32,
    pub backend: BackendKind,
    /// Explicit drives (from the config file); they replace the generated ones.
    pub drive_specs: Vec<DriveSpec>,
    /// None: any host. Some: only these host NQNs.
    pub allowed_hosts: Option<Vec<String>>,
    /// Explicit subsystems (from the config file); without them every drive is exported as
    /// its own subsystem.
    pub subsystem_specs: Vec<SubsystemSpec>,
    /// Keep the configuration in `<data_dir>/state.json` (see `state`): fabrikd does, in-process
    /// test targets need not.
    pub persist_state: bool,
    /// What the command line or config file set explicitly (how they meet an existing state).
    pub explicit: Explicit,
    /// The management API token; None: the `api-token` file in the data directory.
    pub api_token: Option<String>,
    /// The management API address from the config file (`--api` overrides it).
    pub api: Option<String>,
    /// HTTPS for the management API's TCP address (certificate chain and key, PEM): needed for
    /// any address beyond loopback.
    pub api_tls: Option<(PathBuf, PathBuf)>,
    /// The CA the other I/O module's API certificate is checked against (else the system's).
    pub peer_ca: Option<PathBuf>,
    /// Cores the reactors (I/O threads) are pinned to; empty: one unpinned reactor per core
    /// fabrikd may use.
    pub cores: Vec<usize>,
    /// When a reactor stops polling and sleeps.
    pub polling: crate::reactor::Polling,
    /// NVMe/TCP reads end with a SUCCESS-flagged C2HData for every host (see `TargetState`).
    pub c2h_success: bool,
    /// Which of the box's two I/O modules this fabrikd is (None: the box has one).
    pub module: Option<ModuleId>,
    /// Where generated file drives live (None: `<data_dir>/drives`): the two modules of a box
    /// have a data directory each and open the same drives.
    pub drive_dir: Option<PathBuf>,
    /// The other I/O module's management API (`http://ADDR:PORT`), which gets every change of
    /// the configuration the two share (`management::sync`).
    pub peer: Option<String>,
    /// This fabrikd is a central discovery controller (`--role cdc`): it serves no drives, and
    /// its discovery log is made from the boxes registered with it (`crate::cdc`).
    pub cdc_role: bool,
    /// A central discovery controller to register this box with (`--cdc`).
    pub cdc: Option<SocketAddr>,
    /// Announce the discovery controller over mDNS (`--mdns`).
    pub mdns: bool,
    /// The token for the other module's API (None: this module's own, as both are usually
    /// given the same `api_token`).
    pub peer_token: Option<String>,
    /// Hosts of the config file (`[[host]]`), with their keys: registered at every start.
    pub hosts: Vec<fabrik_api::config::HostEntry>,
    /// Management API clients with tokens of their own (`[[api_client]]`).
    pub api_clients: Vec<fabrik_api::access::ApiClient>,
    /// TLS 1.3 for NVMe/TCP: the file of configured PSKs (see `transport::tcp::tls`).
    pub tls_psk: Option<PathBuf>,
    /// TLS on the NVMe/TCP listeners given here (None: required with PSKs, else none).
    pub tls: Option<TlsMode>,
    /// How the PSKs' HKDF labels are laid out (the hosts' libnvme version decides).
    pub tls_label: fabrik_proto::tls::LabelEncoding,
}

/// Settings given explicitly rather than defaulted.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Explicit {
    /// Drives or box name (flags or config file).
    pub drives: bool,
    pub listen: bool,
    pub hosts: bool,
}

impl Config {
    /// The embedded default: a 24-drive JBOF of sparse 64 GiB files, NVMe/TCP on loopback.
    pub fn default_jbof(data_dir: PathBuf) -> Config {
        Config {
            box_name: default_box_name(),
            data_dir,
            listen: vec![DEFAULT_LISTEN.parse().unwrap()],
            rdma_listen: Vec::new(),
            drives: DEFAULT_DRIVES,
            drive_size: DEFAULT_DRIVE_SIZE,
            block_size: DEFAULT_BLOCK_SIZE,
            backend: BackendKind::File,
            drive_specs: Vec::new(),
            allowed_hosts: None,
            subsystem_specs: Vec::new(),
            persist_state: false,
            explicit: Explicit::default(),
            api_token: None,
            api: None,
            cores: Vec::new(),
            polling: Default::default(),
            c2h_success: false,
            module: None,
            drive_dir: None,
            peer: None,
            cdc_role: false,
            cdc: None,
            mdns: false,
            peer_token: None,
            hosts: Vec::new(),
            api_clients: Vec::new(),
            api_tls: None,
            peer_ca: None,
            tls_psk: None,
            tls: None,
            tls_label: Default::default(),
        }
    }

    /// TLS on the NVMe/TCP listeners of the command line and config file.
    pub fn listen_tls(&self) -> TlsMode {
        match (self.tls, &self.tls_psk) {
            (Some(mode), _) => mode,
            (None, Some(_)) => TlsMode::Required,
            (None, None) => TlsMode::None,
        }
    }

    /// Sets the TLS mode of the listeners by name.
    pub fn set_tls(&mut self, name: &str) -> anyhow::Result<()> {
        self.tls = Some(TlsMode::from_name(name).ok_or_else(|| {
            anyhow::anyhow!("TLS {name:?}: expected \"required\", \"allowed\" or \"none\"")
        })?);
        Ok(())
    }

    /// Sets the PSKs' HKDF label layout by name.
    pub fn set_tls_label(&mut self, name: &str) -> anyhow::Result<()> {
        self.tls_label = fabrik_proto::tls::LabelEncoding::from_name(name).ok_or_else(|| {
            anyhow::anyhow!(
                "TLS PSK label {name:?}: expected \"rfc8446\", \"compat\" or \"nolength\""
            )
        })?;
        Ok(())
    }

    /// Applies a config file on top of this configuration.
    pub fn apply_file(&mut self, file: &ConfigFile) -> anyhow::Result<()> {
        if let Some(name) = &file.box_name {
            self.box_name = sanitize_box_name(name)?;
            self.explicit.drives = true;
        }
        if file.api_token.is_some() {
            self.api_token = file.api_token.clone();
        }
        if let Some(cores) = &file.cores {
            self.cores = crate::reactor::parse_cores(cores)
                .map_err(|e| anyhow::anyhow!("cores = {cores:?}: {e}"))?;
        }
        if let Some(us) = file.poll_idle_us {
            self.polling.idle_after = std::time::Duration::from_micros(us);
        }
        if let Some(on) = file.c2h_success {
            self.c2h_success = on;
        }
        if let Some(m) = &file.module {
            self.module = Some(m.parse().map_err(anyhow::Error::msg)?);
        }
        if let Some(dir) = &file.drive_dir {
            self.drive_dir = Some(dir.clone());
        }
        if let Some(url) = &file.peer {
            self.peer = Some(url.clone());
        }
        if let Some(t) = &file.peer_token {
            self.peer_token = Some(t.clone());
        }
        if let Some(role) = &file.role {
            self.set_role(role)
                .map_err(|e| anyhow::anyhow!("role = {role:?}: {e}"))?;
        }
        if let Some(cdc) = &file.cdc {
            self.cdc = Some(
                cdc.parse()
                    .map_err(|_| anyhow::anyhow!("cdc = {cdc:?}: expected ADDR:PORT"))?,
            );
        }
        if let Some(on) = file.mdns {
            self.mdns = on;
        }
        if file.api.is_some() {
            self.api = file.api.clone();
        }
        match (&file.api_tls_cert, &file.api_tls_key) {
            (Some(c), Some(k)) => self.api_tls = Some((c.clone(), k.clone())),
            (None, None) => {}
            _ => bail!("api_tls_cert and api_tls_key go together"),
        }
        if let Some(ca) = &file.peer_ca {
            self.peer_ca = Some(ca.clone());
        }
        if let Some(psk) = &file.tls_psk {
            self.tls_psk = Some(psk.clone());
        }
        if let Some(mode) = &file.tls {
            self.set_tls(mode).context("tls")?;
        }
        if let Some(label) = &file.tls_psk_label {
            self.set_tls_label(label).context("tls_psk_label")?;
        }
        if let Some(dir) = &file.data_dir {
            self.data_dir = dir.clone();
        }
        if let Some(listen) = &file.listen {
            self.set_listeners(listen)?;
            self.explicit.listen = true;
        }
        if let Some(hosts) = &file.hosts {
            self.explicit.hosts = true;
            self.allowed_hosts = if hosts.is_empty() {
                None
            } else {
                Some(hosts.clone())
            };
        }
        for c in &file.api_client {
            self.api_clients.push(fabrik_api::access::ApiClient {
                name: c.name.clone(),
                token: c.token.clone(),
                scope: c.scope,
            });
        }
        for h in &file.host {
            check_host(h).with_context(|| format!("[[host]] {}", h.nqn))?;
            self.hosts.retain(|x| x.nqn != h.nqn);
            self.hosts.push(h.clone());
        }
        if file.drives.is_some() || !file.drive.is_empty() || !file.subsystem.is_empty() {
            self.explicit.drives = true;
        }
        if let Some(d) = &file.drives {
            if let Some(n) = d.count {
                self.drives = n;
            }
            if let Some(s) = &d.size {
                self.drive_size = parse_size(s).map_err(anyhow::Error::msg)?;
            }
            if let Some(b) = &d.backend {
                self.backend = parse_backend(b)?;
            }
            if let Some(bs) = d.block_size {
                self.block_size = bs;
            }
        }
        for d in &file.drive {
            let backend = match &d.backend {
                Some(b) => parse_backend(b)?,
                None => self.backend,
            };
            let size = match &d.size {
                Some(s) => parse_size(s).map_err(anyhow::Error::msg)?,
                None => self.drive_size,
            };
            if backend == BackendKind::Block && d.path.is_none() {
                bail!("drive {:?}: the block backend needs a path", d.id);
            }
            self.drive_specs.push(DriveSpec {
                id: d.id.clone(),
                backend,
                path: d.path.clone(),
                size,
                block_size: d.block_size.unwrap_or(self.block_size),
            });
        }
        for sub in &file.subsystem {
            let nqn = match (&sub.nqn, &sub.name) {
                (Some(nqn), None) => nqn.clone(),
                (None, Some(name)) => format!("{NQN_PREFIX}:{}:{name}", self.box_name),
                _ => bail!("a [[subsystem]] needs exactly one of `name` or `nqn`"),
            };
            self.subsystem_specs.push(SubsystemSpec {
                nqn,
                drives: sub.drives.clone(),
                hosts: sub.hosts.clone(),
                model: sub.model.clone(),
            });
        }
        Ok(())
    }

    /// The subsystems to export: the explicit ones, or one per drive named after it.
    pub fn subsystem_list(&self) -> Vec<SubsystemSpec> {
        if !self.subsystem_specs.is_empty() {
            return self.subsystem_specs.clone();
        }
        self.drive_list()
            .into_iter()
            .map(|d| SubsystemSpec {
                nqn: self.subsystem_nqn(&d.id),
                drives: vec![d.id],
                hosts: None,
                model: None,
            })
            .collect()
    }

    /// The hosts that may connect to `sub`: None means any host.
    pub fn allowed_hosts_for(&self, sub: &SubsystemSpec) -> Option<Vec<String>> {
        match &sub.hosts {
            None => self.allowed_hosts.clone(),
            Some(list) if list.is_empty() => None,
            Some(list) => Some(list.clone()),
        }
    }

    /// The drives to open: the explicit ones, or `drives` generated ones named 00, 01, ...
    pub fn drive_list(&self) -> Vec<DriveSpec> {
        if !self.drive_specs.is_empty() {
            return self.drive_specs.clone();
        }
        (0..self.drives)
            .map(|i| {
                let id = format!("{i:02}");
                DriveSpec {
                    path: match self.backend {
                        BackendKind::File => Some(
                            (self.drive_dir.clone())
                                .unwrap_or_else(|| self.data_dir.join("drives"))
                                .join(format!("drive-{id}.img")),
                        ),
                        _ => None,
                    },
                    id,
                    backend: self.backend,
                    size: self.drive_size,
                    block_size: self.block_size,
                }
            })
            .collect()
    }

    /// NQN of the subsystem that exports drive `id`.
    pub fn subsystem_nqn(&self, drive_id: &str) -> String {
        format!("{NQN_PREFIX}:{}:drive-{drive_id}", self.box_name)
    }

    /// Replaces every listener with `specs` (`ADDR:PORT`, `tcp:ADDR:PORT`, `rdma:ADDR:PORT`).
    pub fn set_listeners(&mut self, specs: &[String]) -> anyhow::Result<()> {
        self.listen.clear();
        self.rdma_listen.clear();
        for s in specs {
            let l = parse_listen(s)?;
            match l.transport {
                Transport::Tcp => self.listen.push(l.addr),
                Transport::Rdma => self.rdma_listen.push(l.addr),
            }
        }
        Ok(())
    }

    /// "box", or "cdc": a central discovery controller, which serves no drives.
    pub fn set_role(&mut self, role: &str) -> Result<(), String> {
        match role {
            "box" => self.cdc_role = false,
            "cdc" => {
                self.cdc_role = true;
                self.drives = 0;
            }
            _ => return Err("expected box or cdc".into()),
        }
        Ok(())
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        if self.listen.is_empty() && self.rdma_listen.is_empty() {
            bail!("no listener: give at least one --listen ADDR:PORT");
        }
        if !self.listen_tls().is_none() && self.tls_psk.is_none() {
            bail!(
                "TLS {} on the NVMe/TCP listeners needs PSKs: give --tls-psk FILE (tls_psk)",
                self.listen_tls().name()
            );
        }
        if self.cdc_role && (self.drives > 0 || self.cdc.is_some() || self.module.is_some()) {
            bail!(
                "a central discovery controller (--role cdc) serves no drives, registers with \
                 no other CDC and is no I/O module: leave out --drives, --cdc and --module"
            );
        }
        let allowed = crate::reactor::allowed_cores();
        if let Some(c) = self.cores.iter().find(|c| !allowed.contains(c)) {
            bail!("core {c} (--cores / cores) is not one fabrikd may run on: {allowed:?}");
        }
        if let Some(t) = &self.api_token {
            // An empty or guessable token would open every change to anyone who reaches the API.
            if t.trim().len() < 16 || t.chars().any(|c| c.is_whitespace() || c.is_control()) {
                bail!(
                    "api_token must be at least 16 characters without spaces (or leave it out: \
                     fabrikd then generates one into <data-dir>/api-token)"
                );
            }
        }
        let mut names = std::collections::BTreeSet::new();
        for c in &self.api_clients {
            let weak = c.token.trim().len() < 16
                || c.token.chars().any(|c| c.is_whitespace() || c.is_control());
            if weak {
                bail!(
                    "[[api_client]] {:?}: its token must be at least 16 characters without spaces",
                    c.name
                );
            }
            if c.name.is_empty() || c.name.len() > 64 || c.name.chars().any(char::is_control) {
                bail!("[[api_client]] names are 1 to 64 characters without control characters");
            }
            if !names.insert(c.name.as_str()) {
                bail!("[[api_client]] {:?} appears twice", c.name);
            }
            if self.api_token.as_deref() == Some(c.token.as_str())
                || self
                    .api_clients
                    .iter()
                    .filter(|o| o.token == c.token)
                    .count()
                    > 1
            {
                bail!("[[api_client]] {:?}: its token is another client's", c.name);
            }
        }
        if self.peer.is_some() && self.module.is_none() {
            bail!("a peer (--peer) is the other I/O module of a box: give this one's --module too");
        }
        if let Some(url) = &self.peer {
            if !url.starts_with("http://") && !url.starts_with("https://") {
                bail!("peer {url:?}: the other module's management API, as http://ADDR:PORT or https://ADDR:PORT");
            }
        }
        if self.module.is_some() {
            if let Some(d) = (self.drive_list().into_iter())
                .find(|d| matches!(d.backend, BackendKind::Ram | BackendKind::Null))
            {
                bail!(
                    "drive {}: the {} backend keeps its data in this process, and the two I/O \
                     modules of a box serve the same drives (use file or block drives)",
                    d.id,
                    d.backend.name()
                );
            }
        }
        if !matches!(self.block_size, 512 | 4096) {
            bail!(
                "block size {} is not supported (512 or 4096)",
                self.block_size
            );
        }
        for d in self.drive_list() {
            if d.backend != BackendKind::Block && (d.size == 0 || d.size % d.block_size as u64 != 0)
            {
                bail!(
                    "drive {}: size {} is not a positive multiple of the {}-byte block",
                    d.id,
                    d.size,
                    d.block_size
                );
            }
        }
        let drives = self.drive_list();
        let mut exported = std::collections::HashSet::new();
        let mut nqns = std::collections::HashSet::new();
        for sub in self.subsystem_list() {
            fabrik_proto::fabrics::nqn::Nqn::new(&sub.nqn)
                .with_context(|| format!("subsystem NQN {:?}", sub.nqn))?;
            if !nqns.insert(sub.nqn.clone()) {
                bail!("subsystem {} is configured twice", sub.nqn);
            }
            if sub.drives.is_empty() {
                bail!("subsystem {} has no drives", sub.nqn);
            }
            for id in &sub.drives {
                if !drives.iter().any(|d| &d.id == id) {
                    bail!(
                        "subsystem {} names drive {id:?}, which is not configured",
                        sub.nqn
                    );
                }
                if !exported.insert(id.clone()) {
                    bail!("drive {id:?} is exported by two subsystems; a namespace belongs to one");
                }
            }
            for h in self.allowed_hosts_for(&sub).iter().flatten() {
                fabrik_proto::fabrics::nqn::Nqn::new(h)
                    .with_context(|| format!("allowed host {h:?}"))?;
            }
        }
        Ok(())
    }
}

pub fn parse_backend(s: &str) -> anyhow::Result<BackendKind> {
    Ok(match s {
        "file" => BackendKind::File,
        "block" => BackendKind::Block,
        "ram" => BackendKind::Ram,
        "null" => BackendKind::Null,
        other => bail!("unknown backend {other:?} (file, block, ram or null)"),
    })
}

/// A listener given on the command line or in the config file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Listen {
    pub transport: Transport,
    pub addr: SocketAddr,
}

/// `ADDR:PORT` or `tcp:ADDR:PORT` (NVMe/TCP), `rdma:ADDR:PORT` (NVMe/RDMA).
pub fn parse_listen(s: &str) -> anyhow::Result<Listen> {
    let named = Transport::ALL.into_iter().find_map(|t| {
        let addr = s.strip_prefix(t.as_str())?.strip_prefix(':')?;
        Some((t, addr))
    });
    let (transport, addr) = named.unwrap_or((Transport::Tcp, s));
    let addr: SocketAddr = addr.parse().with_context(|| {
        format!("listener {s:?}: expected [tcp:|rdma:]ADDR:PORT, e.g. rdma:10.0.0.1:4420")
    })?;
    Ok(Listen { transport, addr })
}

/// A `[[host]]` entry that can be used: its NQN, secrets, hash and group names, limits (the
/// errors never repeat a secret).
fn check_host(h: &fabrik_api::config::HostEntry) -> anyhow::Result<()> {
    use fabrik_proto::auth::{DhGroup, HashId, Secret};
    fabrik_proto::fabrics::nqn::Nqn::new(&h.nqn).context("the host NQN")?;
    if h.dhchap_secret.is_none()
        && (h.dhchap_ctrl_secret.is_some() || h.dhchap_hash.is_some() || h.dhchap_dhgroup.is_some())
    {
        bail!("dhchap_ctrl_secret, dhchap_hash and dhchap_dhgroup need dhchap_secret");
    }
    for (what, s) in [
        ("DH-HMAC-CHAP secret", &h.dhchap_secret),
        ("controller's DH-HMAC-CHAP secret", &h.dhchap_ctrl_secret),
    ] {
        if let Some(s) = s {
            Secret::parse(s).with_context(|| format!("the {what}"))?;
        }
    }
    if let Some(n) = &h.dhchap_hash {
        HashId::from_name(n)
            .with_context(|| format!("hash {n:?}: one of sha256, sha384, sha512"))?;
    }
    if let Some(n) = &h.dhchap_dhgroup {
        DhGroup::from_name(n).with_context(|| {
            format!("DH group {n:?}: one of null, ffdhe2048, ffdhe3072, ffdhe4096, ffdhe6144, ffdhe8192")
        })?;
    }
    if let Some(q) = &h.qos {
        crate::qos::check(q).map_err(anyhow::Error::msg)?;
    }
    Ok(())
}

/// The machine's host name, cut down to what an NQN and a serial number can carry.
pub fn default_box_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates within it on success.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let name = if ok {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        String::new()
    };
    sanitize_box_name(&name).unwrap_or_else(|_| "jbof".to_string())
}

pub fn sanitize_box_name(name: &str) -> anyhow::Result<String> {
    let clean: String = name
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .take(64)
        .collect();
    if clean.trim_matches('-').is_empty() {
        bail!("box name {name:?} has no usable characters (letters, digits, '-', '.')");
    }
    Ok(clean)
}

/// Default data directory: $FABRIK_DATA_DIR, /var/lib/fabrik for root, else ~/.local/share/fabrik.
pub fn default_data_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("FABRIK_DATA_DIR") {
        return PathBuf::from(d);
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return PathBuf::from("/var/lib/fabrik");
    }
    match std::env::var_os("HOME") {
        Some(home) => Path::new(&home).join(".local/share/fabrik"),
        None => PathBuf::from("fabrik-data"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_a_24_drive_jbof() {
        let c = Config::default_jbof("/tmp/x".into());
        let drives = c.drive_list();
        assert_eq!(drives.len(), 24);
        assert_eq!(drives[7].id, "07");
        assert_eq!(
            drives[7].path.as_deref(),
            Some(Path::new("/tmp/x/drives/drive-07.img"))
        );
        assert!(c.subsystem_nqn("07").ends_with(":drive-07"));
        fabrik_proto::fabrics::nqn::Nqn::new(&c.subsystem_nqn("07")).unwrap();
        c.validate().unwrap();
    }

    #[test]
    fn an_empty_or_weak_api_token_is_refused() {
        let mut c = Config::default_jbof("/tmp/x".into());
        for bad in ["", "   ", "short", "sixteen chars ok"] {
            c.api_token = Some(bad.into());
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains("api_token"), "{bad:?}: {e}");
        }
        c.api_token = Some("0123456789abcdef".into());
        c.validate().unwrap();
    }

    #[test]
    fn file_overrides_defaults() {
        let mut c = Config::default_jbof("/tmp/x".into());
        let f = ConfigFile::parse("box_name = \"Box A\"\nlisten = [\"tcp:0.0.0.0:4421\"]\n[drives]\ncount = 3\nsize = \"1G\"\nbackend = \"ram\"").unwrap();
        c.apply_file(&f).unwrap();
        assert_eq!(c.box_name, "box-a");
        assert_eq!(c.listen, vec!["0.0.0.0:4421".parse().unwrap()]);
        assert_eq!(c.drive_list().len(), 3);
        assert_eq!(c.backend, BackendKind::Ram);
        assert!(c.drive_list()[0].path.is_none());
    }

    #[test]
    fn the_file_names_a_cdc_role_a_cdc_and_mdns() {
        let mut c = Config::default_jbof("/tmp/x".into());
        let f = ConfigFile::parse("cdc = \"10.0.0.9:8009\"\nmdns = true").unwrap();
        c.apply_file(&f).unwrap();
        assert_eq!(c.cdc, Some("10.0.0.9:8009".parse().unwrap()));
        assert!(c.mdns && !c.cdc_role);
        c.validate().unwrap();
        let mut c = Config::default_jbof("/tmp/x".into());
        c.apply_file(&ConfigFile::parse("role = \"cdc\"").unwrap())
            .unwrap();
        assert!(c.cdc_role);
        assert!(c.drive_list().is_empty(), "a CDC serves no drives");
        c.validate().unwrap();
        for (bad, why) in [("role = \"jbof\"", "role"), ("cdc = \"nowhere\"", "cdc")] {
            let e = Config::default_jbof("/tmp/x".into())
                .apply_file(&ConfigFile::parse(bad).unwrap())
                .unwrap_err()
                .to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn explicit_subsystems_group_drives() {
        let mut c = Config::default_jbof("/tmp/x".into());
        let f = ConfigFile::parse(
            "box_name = \"b\"\n[drives]\ncount = 4\n[[subsystem]]\nname = \"pair\"\ndrives = [\"01\", \"00\"]\n[[subsystem]]\nnqn = \"nqn.2024-01.com.example:solo\"\ndrives = [\"03\"]\nhosts = [\"nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001\"]",
        )
        .unwrap();
        c.apply_file(&f).unwrap();
        c.validate().unwrap();
        let subs = c.subsystem_list();
        assert_eq!(subs.len(), 2);
        assert_eq!(subs[0].nqn, "nqn.2024-01.io.fabrik:b:pair");
        assert_eq!(subs[0].drives, vec!["01", "00"]);
        assert_eq!(c.allowed_hosts_for(&subs[0]), None);
        assert_eq!(c.allowed_hosts_for(&subs[1]).unwrap().len(), 1);
        // A later --host applies to subsystems without their own list, not to the others.
        let only = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000002";
        c.allowed_hosts = Some(vec![only.to_string()]);
        assert_eq!(c.allowed_hosts_for(&subs[0]), Some(vec![only.to_string()]));
        assert_ne!(c.allowed_hosts_for(&subs[1]), Some(vec![only.to_string()]));

        for bad in [
            "[[subsystem]]\nname = \"x\"\ndrives = [\"99\"]",
            "[[subsystem]]\nname = \"x\"\ndrives = [\"00\"]\n[[subsystem]]\nname = \"y\"\ndrives = [\"00\"]",
            "[[subsystem]]\nname = \"x\"\ndrives = []",
            "[[subsystem]]\nnqn = \"bogus\"\ndrives = [\"00\"]",
        ] {
            let mut c = Config::default_jbof("/tmp/x".into());
            let f = ConfigFile::parse(bad).unwrap();
            assert!(c.apply_file(&f).is_err() || c.validate().is_err(), "{bad}");
        }
    }

    #[test]
    fn tls_of_the_listeners() {
        let mut c = Config::default_jbof("/tmp/x".into());
        assert_eq!(c.listen_tls(), TlsMode::None);
        let f = ConfigFile::parse("tls_psk = \"/etc/fabrik/tls.psk\"\ntls_psk_label = \"compat\"")
            .unwrap();
        c.apply_file(&f).unwrap();
        assert_eq!(
            c.listen_tls(),
            TlsMode::Required,
            "required once there are PSKs"
        );
        assert_eq!(c.tls_label, fabrik_proto::tls::LabelEncoding::Compat);
        c.validate().unwrap();
        c.set_tls("allowed").unwrap();
        assert_eq!(c.listen_tls(), TlsMode::Allowed);
        let e = c.set_tls("sometimes").unwrap_err().to_string();
        assert!(e.contains("\"required\", \"allowed\" or \"none\""), "{e}");
        let bad_label = ConfigFile::parse("tls_psk_label = \"rfc\"").unwrap();
        assert!(Config::default_jbof("/tmp/x".into())
            .apply_file(&bad_label)
            .is_err());
        // TLS without keys is refused at start, saying what to give.
        let mut c = Config::default_jbof("/tmp/x".into());
        c.set_tls("required").unwrap();
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("--tls-psk"), "{e}");
    }

    #[test]
    fn reactor_cores_polling_and_c2h_success_come_from_the_file() {
        let core = crate::reactor::allowed_cores()[0];
        let f = ConfigFile::parse(&format!(
            "cores = \"{core}\"\npoll_idle_us = 50\nc2h_success = true"
        ))
        .unwrap();
        let mut c = Config::default_jbof("/tmp/x".into());
        assert!(
            !c.c2h_success,
            "off by default, as the specification has it"
        );
        c.apply_file(&f).unwrap();
        assert!(c.c2h_success);
        c.validate().unwrap();
        assert_eq!(c.cores, vec![core]);
        assert_eq!(c.polling.idle_after, std::time::Duration::from_micros(50));
        for bad in ["cores = \"3-1\"", "cores = \"x\""] {
            let mut c = Config::default_jbof("/tmp/x".into());
            let e = c.apply_file(&ConfigFile::parse(bad).unwrap()).unwrap_err();
            assert!(e.to_string().starts_with("cores = "), "{e}");
        }
        let mut c = Config::default_jbof("/tmp/x".into());
        c.cores = vec![crate::reactor::allowed_cores().last().unwrap() + 1];
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("is not one fabrikd may run on"), "{e}");
    }

    #[test]
    fn the_example_config_is_valid() {
        let file = ConfigFile::parse(include_str!("../../deploy/fabrikd.toml")).unwrap();
        let mut c = Config::default_jbof("/tmp/x".into());
        c.apply_file(&file).unwrap();
        c.validate().unwrap();
        assert_eq!(c.box_name, "jbof-a");
        assert_eq!(c.drive_list().len(), 24);
    }

    #[test]
    fn listeners_by_transport() {
        let mut c = Config::default_jbof("/tmp/x".into());
        c.set_listeners(&[
            "10.0.0.1:4420".into(),
            "tcp:[::1]:4421".into(),
            "rdma:10.99.0.1:4420".into(),
        ])
        .unwrap();
        assert_eq!(
            c.listen,
            vec![
                "10.0.0.1:4420".parse().unwrap(),
                "[::1]:4421".parse().unwrap()
            ]
        );
        assert_eq!(c.rdma_listen, vec!["10.99.0.1:4420".parse().unwrap()]);
        c.set_listeners(&["rdma:0.0.0.0:4420".into()]).unwrap();
        assert!(c.listen.is_empty());
        c.validate().unwrap();
        assert!(parse_listen("rdma:10.0.0.1").is_err());
        assert!(parse_listen("roce:10.0.0.1:4420").is_err());
    }

    #[test]
    fn bad_values_are_refused() {
        assert!(parse_listen("nonsense").is_err());
        assert!(parse_backend("tape").is_err());
        let mut c = Config::default_jbof("/tmp/x".into());
        c.drive_size = 1000;
        assert!(c.validate().is_err());
        let mut c = Config::default_jbof("/tmp/x".into());
        c.allowed_hosts = Some(vec!["not-an-nqn".into()]);
        assert!(c.validate().is_err());
    }
}
