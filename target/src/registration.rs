//! A box registering with a central discovery controller (`fabrikd --cdc ADDR:PORT`), with
//! Discovery Information Management (TP8010): its entry is its discovery controller's address
//! on every port. It registers at start, sends an update whenever its own discovery log
//! changes (the CDC then reads it again for its hosts), and deregisters at a clean stop.
//!
//! The registration's connection stays open, with keep-alive: when the box dies, the CDC loses
//! the connection and drops the box with it. When the CDC is away, the box tries again, waiting
//! longer each time (up to `MAX_BACKOFF`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use fabrik_initiator::{ConnectOptions, Controller, HostIdentity};
use fabrik_proto::fabrics::dim::{etype, tas, DimData, DimEntry, EKTYPE};
use fabrik_proto::fabrics::discovery::subtype;
use fabrik_proto::fabrics::nqn::DISCOVERY_NQN;
use fabrik_proto::nvme::identify::dctype;
use tokio_util::sync::CancellationToken;

use crate::config::NQN_PREFIX;
use crate::controller::TargetState;
use crate::timer;

/// Keep-alive of the registration's connection (nvme-cli's for persistent discovery).
const KATO_MS: u32 = 30_000;
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How long a deregistration at stop may take before the box stops anyway.
const DEREGISTER_TIMEOUT: Duration = Duration::from_secs(2);

/// The box's identity with the CDC: one per I/O module, which each serve their own ports.
pub fn entity_nqn(target: &TargetState) -> String {
    match target.module {
        None => format!("{NQN_PREFIX}:{}", target.box_name),
        Some(m) => format!("{NQN_PREFIX}:{}:module-{m}", target.box_name),
    }
}

/// What the box registers: its discovery controller on each of its ports (an unspecified
/// address left empty, which the CDC reads as the address the registration came from).
pub fn registration_data(target: &TargetState) -> DimData {
    let entries = target
        .ports()
        .iter()
        .map(|p| {
            let mut e =
                DimEntry::from(p.log_entry(p.addr, subtype::CURRENT_DISCOVERY, DISCOVERY_NQN));
            if p.addr.ip().is_unspecified() {
                e.traddr.clear();
            }
            e
        })
        .collect();
    DimData {
        etype: etype::DDC,
        portlcl: 0,
        ektype: EKTYPE,
        eid: entity_nqn(target),
        ename: target.box_name.clone(),
        ever: format!("fabrikd {}", env!("CARGO_PKG_VERSION")),
        entries,
    }
}

/// Keeps the box registered with the CDC at `cdc` until `stop`, then deregisters.
pub fn spawn(
    target: Arc<TargetState>,
    cdc: SocketAddr,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut backoff = FIRST_BACKOFF;
        loop {
            match registered(&target, cdc, &stop, &mut backoff).await {
                Ok(()) => return,
                Err(e) => {
                    tracing::warn!(%cdc, "registration with the central discovery controller: {e}; trying again in {backoff:?}")
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = timer::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    })
}

/// One registration: connect, register, update on every change until the connection is lost
/// (`Err`) or the box stops (deregistered, `Ok`). A registration that succeeded starts the
/// retries over at `FIRST_BACKOFF`: a CDC that restarts is found again in a second.
async fn registered(
    target: &TargetState,
    cdc: SocketAddr,
    stop: &CancellationToken,
    backoff: &mut Duration,
) -> Result<(), String> {
    let host = HostIdentity::with_nqn(entity_nqn(target));
    let mut opts = ConnectOptions::discovery(cdc).with_host(&host);
    opts.kato_ms = KATO_MS;
    let ctrl = Controller::connect(opts).await.map_err(|e| e.to_string())?;
    let outcome = serve(target, &ctrl, stop, backoff).await;
    let _ = ctrl.shutdown().await;
    outcome
}

async fn serve(
    target: &TargetState,
    ctrl: &Controller,
    stop: &CancellationToken,
    backoff: &mut Duration,
) -> Result<(), String> {
    if ctrl.identity().dctype != dctype::CDC {
        return Err("the controller there is not a central discovery controller".into());
    }
    let dim = |task| async move {
        let data = registration_data(target);
        ctrl.discovery_info_management(task, &data).await
    };
    // Read before the registration's data: a change made meanwhile is sent as an update.
    let mut genctr = target.discovery_genctr();
    dim(tas::REGISTER).await.map_err(|e| e.to_string())?;
    tracing::info!(eid = %entity_nqn(target), "registered with the central discovery controller");
    *backoff = FIRST_BACKOFF;
    // An Asynchronous Event Request stays outstanding: it fails when the connection is lost.
    let mut lost = Box::pin(ctrl.async_event_request());
    loop {
        let changed = target.discovery_notify.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        if target.discovery_genctr() != genctr {
            genctr = target.discovery_genctr();
            dim(tas::UPDATE).await.map_err(|e| e.to_string())?;
            continue;
        }
        tokio::select! {
            _ = stop.cancelled() => {
                match timer::timeout(DEREGISTER_TIMEOUT, dim(tas::DEREGISTER)).await {
                    Ok(Ok(())) => tracing::info!("deregistered from the central discovery controller"),
                    Ok(Err(e)) => tracing::warn!("deregistering from the central discovery controller: {e}"),
                    Err(_) => tracing::warn!("the central discovery controller did not answer the deregistration"),
                }
                return Ok(());
            }
            _ = &mut changed => {}
            r = &mut lost => match r {
                // An event (the CDC's own log changed): ask for the next one.
                Ok(_) => lost = Box::pin(ctrl.async_event_request()),
                Err(e) => return Err(format!("connection lost ({e})")),
            },
        }
    }
}
