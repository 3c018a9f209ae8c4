//! What the API shows: the live target and its persisted state as API models.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use fabrik_api::models as api;
use fabrik_proto::nvme::log::critical;

use super::Manager;
use crate::backend::guard::Guarded;
use crate::backend::Drive;
use crate::controller::TargetState;
use crate::model::Namespace;
use crate::state::{self, Access, CompositionState, State, SubsystemState};

impl Manager {
    pub(super) fn drive_view(&self, st: &State, slot: usize) -> api::Drive {
        let d = &st.drives[slot];
        let sub = st.subsystem_of_drive(&d.id);
        let namespaces: Vec<Arc<Namespace>> = self
            .namespaces_of(&d.id)
            .into_iter()
            .map(|(_, ns)| ns)
            .collect();
        let info = self.drives.get(&d.id).map(|x| x.info().clone());
        api::Drive {
            id: d.id.clone(),
            slot: slot as u32,
            serial: state::serial_number(&st.box_name, &d.id),
            model: format!("fabrik {} drive", d.backend),
            backend: d.backend.clone(),
            path: d.path.as_ref().map(|p| p.display().to_string()),
            capacity_bytes: info.as_ref().map_or(d.size, |i| i.capacity),
            block_size: info.as_ref().map_or(d.block_size, |i| i.block_size),
            health: self.drive_health(&d.id, &namespaces),
            subsystems: sub.iter().map(|s| s.nqn.clone()).collect(),
            hosts: sub.and_then(|s| st.effective_hosts(s)),
            composed_to: st
                .compositions
                .iter()
                .filter(|c| c.drives.contains(&d.id))
                .map(|c| c.host_nqn.clone())
                .collect(),
            qos: st.drive_qos.get(&d.id).cloned(),
            volume: st
                .volumes
                .iter()
                .find(|v| v.all_drives().any(|x| x == d.id))
                .map(|v| v.name.clone()),
        }
    }

    /// The opened drives by ID: every drive of the box, exported or not.
    pub(crate) fn drive_registry(&self) -> &BTreeMap<String, Arc<Guarded>> {
        &self.drives
    }

    pub(crate) fn target_state(&self) -> &Arc<TargetState> {
        &self.target
    }

    /// The live namespaces backed by `drive`, each with its subsystem's NQN (none for a drive
    /// that no subsystem exports).
    pub(crate) fn namespaces_of(&self, drive: &str) -> Vec<(String, Arc<Namespace>)> {
        let mut out = Vec::new();
        for sub in self.target.subsystems() {
            for ns in sub.namespaces() {
                if ns.drive_id == drive {
                    out.push((sub.nqn.to_string(), ns));
                }
            }
        }
        out
    }

    /// A drive's health: from the device's SMART log where it has one, else from fabrikd's
    /// counters over the namespaces it backs. The one source of the REST drive view and of the
    /// metrics' health gauges. Blocking (the SMART log is an ioctl).
    pub(crate) fn drive_health(
        &self,
        drive: &str,
        namespaces: &[Arc<Namespace>],
    ) -> api::DriveHealth {
        let count = |f: fn(&Namespace) -> u64| namespaces.iter().map(|n| f(n)).sum::<u64>();
        let ready = namespaces.iter().all(|n| n.is_ready());
        let mut h = api::DriveHealth {
            state: if ready { "ok" } else { "not_ready" }.into(),
            fault: None,
            source: "fabrikd".into(),
            source_error: None,
            temperature_celsius: None,
            percentage_used: None,
            media_errors: count(|n| n.stats.media_errors.load(Relaxed)),
            critical_warnings: 0,
            power_on_hours: self.target.started.elapsed().as_secs() / 3600,
            read_commands: count(|n| n.stats.read_commands()),
            write_commands: count(|n| n.stats.write_commands()),
            bytes_read: count(|n| n.stats.bytes_read()),
            bytes_written: count(|n| n.stats.bytes_written()),
        };
        match self.drives.get(drive).and_then(|d| d.smart_log()) {
            None => {}
            Some(Err(e)) => h.source_error = Some(format!("SMART log unreadable: {e}")),
            Some(Ok(log)) => {
                h.source = "smart".into();
                // 0 K means the device reports no temperature.
                h.temperature_celsius =
                    (log.temperature_k != 0).then(|| log.temperature_k as i32 - 273);
                h.percentage_used = Some(log.percentage_used);
                h.media_errors = log.media_errors.min(u64::MAX as u128) as u64;
                h.critical_warnings = log.critical_warning;
                h.power_on_hours = log.power_on_hours.min(u64::MAX as u128) as u64;
                if ready && log.critical_warning != 0 {
                    h.state = "warning".into();
                }
            }
        }
        if let Some(f) = self.drives.get(drive).and_then(|d| d.fault()) {
            h.fault = Some(f.cause);
            h.critical_warnings |= critical::READ_ONLY | critical::DEGRADED;
            if ready {
                h.state = "read_only".into();
            }
        }
        h
    }

    pub(super) fn namespace_view(&self, ns: &Namespace) -> api::Namespace {
        api::Namespace {
            nsid: ns.nsid,
            drive: ns.drive_id.clone(),
            nguid: hex(&ns.nguid),
            uuid: uuid_string(&ns.uuid),
            capacity_bytes: ns.drive.info().capacity,
            block_size: ns.block_size(),
        }
    }

    pub(super) fn subsystem_view(&self, access: &Access, s: &SubsystemState) -> api::Subsystem {
        let live = self.target.subsystem(&s.nqn);
        let hosts = access.hosts(s);
        api::Subsystem {
            nqn: s.nqn.clone(),
            serial: s.serial.clone(),
            model: s.model.clone(),
            allow_any_host: hosts.is_none(),
            hosts: hosts.unwrap_or_default(),
            require_auth: s.require_auth,
            namespaces: live
                .as_ref()
                .map(|l| {
                    l.namespaces()
                        .iter()
                        .map(|n| self.namespace_view(n))
                        .collect()
                })
                .unwrap_or_default(),
            ports: self.target.ports().iter().map(|p| p.id).collect(),
            controllers: live.map_or(0, |l| l.controllers().len() as u32),
        }
    }

    pub(super) fn controller_view(&self, c: &crate::controller::Controller) -> api::Controller {
        api::Controller {
            id: c.id,
            cntlid: c.cntlid,
            subsystem: c.subnqn(),
            discovery: c.is_discovery(),
            host_nqn: c.hostnqn.clone(),
            host_alias: match &c.hostnqn {
                Some(nqn) => state::host_alias(&self.state().alias_key, nqn),
                None => crate::controller::ANONYMOUS_HOST.into(),
            },
            address: c.port.peer_addr.to_string(),
            port_id: c.port.port_id,
            io_queues: c.io_queue_count() as u32,
            keep_alive_ms: c.kato_ms(),
            connected_seconds: c.connected_at.elapsed().as_secs(),
        }
    }

    /// The view of the live port `id`, if there is one.
    pub(super) fn find_port(&self, id: u16) -> Option<api::Port> {
        self.target
            .ports()
            .iter()
            .find(|p| p.id == id)
            .map(|p| self.port_view(p))
    }

    pub(super) fn port_view(&self, p: &crate::model::Port) -> api::Port {
        api::Port {
            id: p.id,
            transport: p.transport.to_string(),
            address: p.addr.ip().to_string(),
            service_id: p.addr.port(),
            state: "listening".into(),
            tls: crate::model::TlsMode::from_treq(p.caps.treq).name().into(),
            controllers: self
                .target
                .controllers()
                .iter()
                .filter(|c| c.port.port_id == p.id)
                .count() as u32,
        }
    }

    pub(super) fn composition_view(
        &self,
        access: &Access,
        c: &CompositionState,
    ) -> api::Composition {
        let mut subsystems: Vec<String> = Vec::new();
        for d in &c.drives {
            if let Some(s) = access.subsystem_of_drive(d) {
                if !subsystems.iter().any(|x| x == s) {
                    subsystems.push(s.to_string());
                }
            }
        }
        let ports: Vec<crate::model::Port> = self
            .target
            .ports()
            .into_iter()
            .filter(|p| c.ports.as_ref().is_none_or(|l| l.contains(&p.id)))
            .collect();
        let mut connect = Vec::new();
        // Quoted for a POSIX shell: an NQN may hold spaces, quotes or `$(...)`.
        let host = shell_quote(&c.host_nqn);
        for p in &ports {
            let addr = reachable_addr(p.addr);
            for s in &subsystems {
                let t = p.transport;
                let (sub, port) = (shell_quote(s), p.addr.port());
                connect.push(api::ConnectCommand {
                    subsystem: s.clone(),
                    port_id: p.id,
                    transport: t.to_string(),
                    address: addr.clone(),
                    service_id: port,
                    nvme_cli: format!(
                        "nvme connect -t {t} -a {addr} -s {port} -n {sub} --hostnqn {host}"
                    ),
                    fabrik: format!("fabrik id-ctrl -a {addr} -s {port} -n {sub} --hostnqn {host}"),
                });
            }
        }
        api::Composition {
            id: c.id.clone(),
            host_nqn: c.host_nqn.clone(),
            drives: c.drives.clone(),
            shared: c.shared,
            subsystems,
            ports: ports.iter().map(|p| p.id).collect(),
            connect,
        }
    }

    /// What the host views need, gathered once in time linear in the state and the live
    /// controllers: a listing of thousands of hosts was quadratic and took seconds.
    pub(super) fn host_index<'a>(&self, st: &'a State) -> HostIndex<'a> {
        let access = st.access();
        let mut subsystems: HashMap<String, Vec<String>> = HashMap::new();
        for s in &st.subsystems {
            for h in access.hosts(s).unwrap_or_default() {
                subsystems.entry(h).or_default().push(s.nqn.clone());
            }
        }
        let mut controllers: HashMap<String, u32> = HashMap::new();
        for c in self.target.controllers() {
            if let Some(nqn) = &c.hostnqn {
                *controllers.entry(nqn.clone()).or_default() += 1;
            }
        }
        HostIndex {
            alias_key: &st.alias_key,
            registered: st.hosts.iter().map(|h| (h.nqn.as_str(), h)).collect(),
            subsystems,
            controllers,
        }
    }

    /// Registered hosts, and hosts named by allow lists or compositions.
    pub(super) fn known_hosts(st: &State) -> BTreeSet<String> {
        let mut all: BTreeSet<String> = st.hosts.iter().map(|h| h.nqn.clone()).collect();
        for s in &st.subsystems {
            all.extend(s.hosts.iter().cloned());
        }
        all.extend(st.compositions.iter().map(|c| c.host_nqn.clone()));
        all
    }
}

pub(super) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub(super) fn uuid_string(u: &[u8; 16]) -> String {
    let h = hex(u);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// The address a host should dial: the listener's, or this machine's name for a wildcard one.
pub(super) fn reachable_addr(a: SocketAddr) -> String {
    if a.ip().is_unspecified() {
        crate::config::default_box_name()
    } else {
        a.ip().to_string()
    }
}

/// `s` as one word for a POSIX shell (unchanged when nothing in it is special).
pub(crate) fn shell_quote(s: &str) -> std::borrow::Cow<'_, str> {
    // NQNs hold no NUL (they are validated text), the one thing shlex cannot quote.
    shlex::try_quote(s).unwrap_or(std::borrow::Cow::Borrowed(s))
}

/// See `Manager::host_index`.
pub(super) struct HostIndex<'a> {
    alias_key: &'a str,
    registered: HashMap<&'a str, &'a crate::state::HostState>,
    subsystems: HashMap<String, Vec<String>>,
    controllers: HashMap<String, u32>,
}

impl HostIndex<'_> {
    pub(super) fn view(&self, nqn: &str) -> api::Host {
        let host = self.registered.get(nqn);
        let keys = host.and_then(|h| h.dhchap.as_ref());
        api::Host {
            nqn: nqn.to_string(),
            alias: state::host_alias(self.alias_key, nqn),
            name: host.and_then(|h| h.name.clone()),
            dhchap: keys.is_some(),
            dhchap_ctrl: keys.is_some_and(|k| k.ctrl_secret.is_some()),
            dhchap_hash: keys.and_then(|k| k.hash.clone()),
            dhchap_dhgroup: keys.and_then(|k| k.dhgroup.clone()),
            qos: host.and_then(|h| h.qos.clone()),
            subsystems: self.subsystems.get(nqn).cloned().unwrap_or_default(),
            controllers: self.controllers.get(nqn).copied().unwrap_or(0),
        }
    }
}
