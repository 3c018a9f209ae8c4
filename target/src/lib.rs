//! fabrik-target: the NVMe-oF target behind `fabrikd`.
//!
//! Drives (backends) are exported as Namespaces of Subsystems, reachable through Ports
//! (transport listeners). Hosts connect and get a Controller each (dynamic model).
//!
//! # Layers
//!
//! Bottom first: a module uses only modules listed on earlier lines, never one of its own line
//! or a later one, so the crate has no import circles. `tests/layers.rs` checks the code against
//! this list; a new module gets a place in it.
//!
//! - `numa`, `timer`, `module`: where cores and NICs sit (sysfs); timers, on a thread of their
//!   own; what the two I/O modules of a box derive from their names
//! - `stats`, `files`, `qos`: the counters the I/O path increments; private files and
//!   directories; I/O limits
//! - `secrets`: secrets at rest, sealed with the box's key
//! - `reactor`: the I/O threads (each claims its own stripe of the counters)
//! - `backend`: drives (file, block device, RAM, null) and the lost-write guard
//! - `cdc`: the central discovery controller's registered boxes, and hosts' logs from theirs
//! - `raid`: volumes (RAID 0, 1, 10, 5, 6) over drives, drives themselves
//! - `model`: namespaces and ports
//! - `controller`: controllers, their queues, and the subsystems that register them
//! - `transport`: the NVMe/TCP and NVMe/RDMA listeners that feed controller queues
//! - `config`: fabrikd's settings
//! - `registration`: a box registering with a central discovery controller
//! - `announce`: the discovery controller announced over mDNS
//! - `state`: the configuration persisted across restarts
//! - `management`: the operations the REST API calls
//! - `metrics`: the scrape of the counters
//! - `crate`: `Target` (this file), which starts and stops a target
//! - `endpoints`: where the REST API and `/metrics` are served

pub mod announce;
pub mod backend;
pub mod cdc;
pub mod config;
pub mod controller;
pub mod endpoints;
pub mod files;
pub mod management;
pub mod metrics;
pub mod model;
pub mod module;
pub mod numa;
pub mod qos;
pub mod raid;
pub mod reactor;
pub mod registration;
pub mod secrets;
pub mod state;
pub mod stats;
pub mod timer;
pub mod transport;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use tokio_util::sync::CancellationToken;

use backend::guard::{Fault, Guarded};
use backend::{BackendKind, Drive};
use config::{Config, DriveSpec};
use controller::TargetState;
use model::Transport;
use state::State;

/// Assembles the volumes of the state (making those whose making a crash cut short), each
/// telling `failures` of a member failing; members failed at assembly are recorded in `st`.
async fn open_volumes(
    st: &mut State,
    drives: &BTreeMap<String, Arc<Guarded>>,
    events: &management::VolumeEvents,
) -> anyhow::Result<BTreeMap<String, Arc<raid::Volume>>> {
    let mut out = BTreeMap::new();
    let mut lost = Vec::new();
    for v in &mut st.volumes {
        let specs = v.member_specs(drives).map_err(anyhow::Error::msg)?;
        let layout = v
            .layout(&specs)
            .map_err(|e| anyhow::anyhow!("volume {}: {e}", v.name))?;
        let on_failed = management::on_member_failed(Some(events.clone()), &v.name);
        let volume = if v.created {
            raid::Volume::assemble(&v.name, &v.uuid, layout, specs, v.generation, on_failed).await
        } else {
            tracing::warn!(volume = %v.name, "the volume's making was cut short: making it again");
            raid::Volume::create(&v.name, &v.uuid, layout, specs, on_failed).await
        }
        .map_err(|e| anyhow::anyhow!("volume {}: {e}", v.name))?;
        if !v.created {
            v.created = true;
            lost.push(v.name.clone());
        }
        for (m, d) in volume.members().iter().zip(&v.drives) {
            if m.is_failed() && !v.failed.contains(d) {
                v.failed.push(d.clone());
            }
        }
        // On record once the state is saved, before anything is served.
        v.generation = volume.generation();
        volume.change_recorded(volume.generation());
        if volume.is_failed() {
            tracing::error!(volume = %v.name, "too many members are lost: the volume's I/O fails");
        } else if volume.is_degraded() {
            tracing::warn!(volume = %v.name, "the volume serves degraded");
        }
        let limit = v.rebuild_mib_per_sec.map_or(0, |m| m << 20);
        volume
            .rebuild_limit
            .store(limit, std::sync::atomic::Ordering::Relaxed);
        let volume = Arc::new(volume);
        raid::volume::spawn_cleaner(&volume, raid::volume::CLEAN_EVERY);
        out.insert(v.id(), volume);
    }
    // A volume made here was never served: its subsystem comes now.
    for name in lost {
        let nqn = state::volume_nqn(&st.box_name, &name);
        let v = st.volumes.iter().find(|v| v.name == name);
        if let (false, Some(v)) = (st.subsystems.iter().any(|s| s.nqn == nqn), v) {
            let sub = state::volume_subsystem(&st.box_name, v);
            st.subsystems.push(sub);
        }
    }
    Ok(out)
}

/// The append-only log of management changes, in the data directory (see `fabrik_api::access`).
pub const AUDIT_LOG: &str = "audit.log";

/// A running target.
pub struct Target {
    state: Arc<TargetState>,
    manager: Arc<management::Manager>,
    /// Management API clients besides the admin token, and the audit log of changes.
    api_clients: Vec<fabrik_api::access::ApiClient>,
    audit: Option<Arc<fabrik_api::access::AuditLog>>,
    listen_addrs: Vec<SocketAddr>,
    rdma_listen_addrs: Vec<SocketAddr>,
    stop: CancellationToken,
    /// The box's registration with a central discovery controller (`--cdc`).
    registration: Option<tokio::task::JoinHandle<()>>,
    /// The discovery controller's mDNS announcements (`--mdns`).
    announcer: Option<announce::Announcer>,
}

impl Target {
    /// Restores the persisted state (or seeds it from `config`), opens every drive, builds the
    /// subsystems, binds every listener and starts serving.
    pub async fn start(config: Config) -> anyhow::Result<Target> {
        config.validate()?;
        let state_path = config
            .persist_state
            .then(|| config.data_dir.join(state::STATE_FILE));
        let persisted = match &state_path {
            Some(path) => match state::load(path)? {
                Some(mut restored) => {
                    restored.reconcile(&config, path)?;
                    tracing::info!(path = %path.display(), "configuration restored from the state file");
                    restored
                }
                None => State::seed(&config),
            },
            None => State::seed(&config),
        };
        let mut persisted = persisted;
        persisted.validate()?;
        // Every drive behind a guard that remembers a lost write (backend::guard); a new
        // fault goes to the state file through `faults`.
        let (fault_tx, mut faults) = tokio::sync::mpsc::unbounded_channel();
        let mut drives = BTreeMap::new();
        for d in &persisted.drives {
            let spec = d.spec()?;
            let lock = match config.module {
                Some(_) => backend::Lock::Module,
                None => backend::Lock::Exclusive,
            };
            let drive = open_drive(&spec, lock).with_context(|| format!("drive {}", spec.id))?;
            let recorded = persisted.drive_faults.get(&spec.id).map(|f| Fault {
                since: f.since,
                cause: f.cause.clone(),
            });
            if let Some(f) = &recorded {
                tracing::error!(drive = %spec.id, cause = %f.cause, "drive lost a write earlier: read-only until an operator clears the fault");
            }
            let (tx, id) = (fault_tx.clone(), spec.id.clone());
            let guard = Guarded::new(
                drive,
                recorded,
                Box::new(move |f: &Fault| {
                    let _ = tx.send((id.clone(), f.clone()));
                }),
            );
            drives.insert(spec.id.clone(), Arc::new(guard));
        }
        let (volume_tx, mut volume_events) = tokio::sync::mpsc::unbounded_channel();
        let volumes = open_volumes(&mut persisted, &drives, &volume_tx).await?;
        if let Some(path) = &state_path {
            state::save(path, &persisted)
                .with_context(|| format!("cannot write the state file {}", path.display()))?;
        }
        let target = Arc::new(
            TargetState::new(persisted.box_name.clone())
                .with_reactors(config.cores.clone(), config.polling)
                .with_c2h_success(config.c2h_success)
                .with_module(config.module)
                .with_cdc(config.cdc_role.then(Default::default)),
        );
        let ports = persisted.ports.clone();
        let stop = CancellationToken::new();
        let peer = match &config.peer {
            Some(url) => {
                let token = match &config.peer_token {
                    Some(t) => t.clone(),
                    None => state::api_token(&config.data_dir, config.api_token.as_deref())?,
                };
                Some(management::sync::Peer::new(
                    url.clone(),
                    Some(token),
                    config.peer_ca.clone(),
                ))
            }
            None => None,
        };
        let tls = match &config.tls_psk {
            Some(path) => {
                let keys = transport::tcp::tls::TlsKeys::load(path, config.tls_label)?;
                Some(Arc::new(transport::tcp::tls::TlsServer::new(keys)?))
            }
            None => None,
        };
        let manager = Arc::new(
            management::Manager::new(
                target.clone(),
                drives,
                persisted,
                state_path,
                stop.clone(),
                peer,
                management::VolumeSet {
                    live: volumes,
                    events: Some(volume_tx),
                },
            )
            .with_tls(tls),
        );
        let store: std::sync::Weak<dyn controller::reservation::ReservationStore> =
            Arc::downgrade(&manager) as _;
        target.set_reservation_store(store);
        if config.peer.is_some() {
            // Hands over what changed while the other module was away, finds a divergence.
            let (manager, stop) = (Arc::downgrade(&manager), stop.clone());
            tokio::spawn(async move {
                loop {
                    let Some(m) = manager.upgrade() else { break };
                    let _ = tokio::task::spawn_blocking(move || m.check_peer()).await;
                    tokio::select! {
                        _ = stop.cancelled() => break,
                        _ = timer::sleep(management::sync::CHECK_EVERY) => {}
                    }
                }
            });
        }
        // A weak reference: the drives hold the channel's senders, and the manager the drives.
        tokio::spawn({
            let manager = Arc::downgrade(&manager);
            async move {
                while let Some((drive, fault)) = faults.recv().await {
                    let Some(m) = manager.upgrade() else { break };
                    let _ =
                        tokio::task::spawn_blocking(move || m.record_fault(&drive, fault)).await;
                }
            }
        });
        {
            // Rebuilds cut short by the stop, and failed members with spares.
            let m = manager.clone();
            tokio::task::spawn_blocking(move || m.start_rebuilds());
        }
        tokio::spawn({
            let manager = Arc::downgrade(&manager);
            async move {
                while let Some(event) = volume_events.recv().await {
                    let Some(m) = manager.upgrade() else { break };
                    let _ = tokio::task::spawn_blocking(move || m.volume_event(event)).await;
                }
            }
        });
        let mut listen_addrs = Vec::new();
        let mut rdma_listen_addrs = Vec::new();
        let has_tcp = ports.iter().any(|p| p.transport == Transport::Tcp);
        for p in &ports {
            let addr = match manager.listen(p).await {
                Ok(addr) => addr,
                // A box without RDMA still serves its NVMe/TCP ports.
                Err(e) if has_tcp && e.is::<transport::RdmaUnavailable>() => {
                    tracing::error!(
                        "NVMe/RDMA listener {}: {e}; serving NVMe/TCP only",
                        p.address
                    );
                    continue;
                }
                Err(e) => {
                    return Err(e.context(format!(
                        "cannot listen on {} ({})",
                        p.address,
                        p.transport.human_name()
                    )))
                }
            };
            match p.transport {
                Transport::Rdma => rdma_listen_addrs.push(addr),
                Transport::Tcp => listen_addrs.push(addr),
            }
        }
        let registration = config
            .cdc
            .map(|cdc| registration::spawn(target.clone(), cdc, stop.clone()));
        let announcer = match config.mdns {
            true => {
                let (name, role) = match config.cdc_role {
                    true => (format!("{}-cdc", target.box_name), "cdc"),
                    false => (target.box_name.clone(), "box"),
                };
                Some(announce::Announcer::start(&name, role, &listen_addrs)?)
            }
            false => None,
        };
        let audit = match config.persist_state {
            true => {
                let path = config.data_dir.join(AUDIT_LOG);
                let log = fabrik_api::access::AuditLog::open(&path)
                    .with_context(|| format!("cannot open the audit log {}", path.display()))?;
                Some(Arc::new(log))
            }
            false => None,
        };
        Ok(Target {
            state: target,
            manager,
            api_clients: config.api_clients.clone(),
            audit,
            listen_addrs,
            rdma_listen_addrs,
            stop,
            registration,
            announcer,
        })
    }

    /// The NVMe/TCP addresses actually bound (a port 0 in the configuration becomes the one chosen).
    pub fn listen_addrs(&self) -> Vec<SocketAddr> {
        self.listen_addrs.clone()
    }

    /// The NVMe/RDMA addresses actually bound.
    pub fn rdma_listen_addrs(&self) -> Vec<SocketAddr> {
        self.rdma_listen_addrs.clone()
    }

    pub fn subsystem_nqns(&self) -> Vec<String> {
        self.state
            .subsystems()
            .iter()
            .map(|s| s.nqn.to_string())
            .collect()
    }

    pub fn state(&self) -> &Arc<TargetState> {
        &self.state
    }

    /// The management operations (what the REST API calls).
    pub fn manager(&self) -> Arc<management::Manager> {
        self.manager.clone()
    }

    /// The `/api/v1` router over this target; merge other routes into it freely.
    pub fn api_router(&self, token: String) -> fabrik_api::axum::Router {
        let auth = fabrik_api::Auth {
            token,
            clients: self.api_clients.clone(),
            audit: self.audit.clone(),
        };
        fabrik_api::router(self.manager.clone(), auth)
    }

    /// `GET /metrics` over this target's counters, to merge into the API's router: `token` is
    /// the API's, which a scrape there needs (or the local socket).
    pub fn metrics_router(&self, token: String) -> fabrik_api::axum::Router {
        let manager = self.manager.clone();
        // The admin token, and every client's: a read-only one is what monitoring uses.
        let tokens = std::iter::once(token)
            .chain(self.api_clients.iter().map(|c| c.token.clone()))
            .collect();
        fabrik_api::metrics::router(move || metrics::snapshot(&manager), Some(tokens))
    }

    /// Stops accepting, lets in-flight commands complete and their answers reach the hosts,
    /// closes every connection, then flushes every drive.
    pub async fn shutdown(self) {
        self.stop.cancel();
        // Deregistered from the CDC and the announcements withdrawn first, so hosts stop being
        // offered what goes now.
        if let Some(r) = self.registration {
            let _ = r.await;
        }
        if let Some(a) = self.announcer {
            let _ = tokio::task::spawn_blocking(move || a.stop()).await;
        }
        self.manager.join_listeners().await;
        for sub in self.state.subsystems() {
            for ns in sub.namespaces() {
                if let Err(e) = ns.drive.flush().await {
                    tracing::error!(drive = %ns.drive_id, "flush at shutdown failed: {e}");
                }
            }
        }
        self.manager.close_volumes().await;
    }
}

fn open_drive(spec: &DriveSpec, lock: backend::Lock) -> anyhow::Result<Arc<dyn Drive>> {
    Ok(match spec.backend {
        BackendKind::File => {
            let path = spec
                .path
                .as_ref()
                .context("the file backend needs a path")?;
            Arc::new(match lock {
                backend::Lock::Exclusive => {
                    backend::file::FileDrive::open(path, spec.size, spec.block_size)?
                }
                backend::Lock::Module => {
                    backend::file::FileDrive::open_shared(path, spec.size, spec.block_size)?
                }
            })
        }
        BackendKind::Block => {
            let path = spec
                .path
                .as_ref()
                .context("the block backend needs a path")?;
            Arc::new(match lock {
                backend::Lock::Exclusive => backend::block::BlockDrive::open(path)?,
                backend::Lock::Module => backend::block::BlockDrive::open_shared(path)?,
            })
        }
        BackendKind::Ram => Arc::new(backend::ram::RamDrive::new(spec.size, spec.block_size)?),
        BackendKind::Null => Arc::new(backend::null::NullDrive::new(spec.size, spec.block_size)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without RDMA on the machine (or in the build), an RDMA listener beside a TCP one is
    /// skipped with an error message and NVMe/TCP serves; alone, it fails the start.
    #[tokio::test]
    async fn tcp_serves_when_rdma_is_unavailable() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::default_jbof(dir.path().into());
        config.drives = 1;
        config.drive_size = 1 << 20;
        config.backend = BackendKind::Ram;
        config.listen = vec!["127.0.0.1:0".parse().unwrap()];
        config.rdma_listen = vec!["127.0.0.1:0".parse().unwrap()];
        let target = Target::start(config.clone()).await.unwrap();
        assert_eq!(target.listen_addrs().len(), 1);
        let rdma_bound = !target.rdma_listen_addrs().is_empty();
        let tcp = tokio::net::TcpStream::connect(target.listen_addrs()[0]).await;
        assert!(tcp.is_ok());
        target.shutdown().await;
        if !rdma_bound {
            config.listen.clear();
            let err = Target::start(config)
                .await
                .err()
                .expect("RDMA-only start fails");
            assert!(format!("{err:#}").contains("RDMA unavailable"), "{err:#}");
        }
    }
}
