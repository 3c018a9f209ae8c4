//! Asynchronous events of a session's controllers: namespace attribute notices turned into
//! "namespace added / removed" for the user, ANA change notices into the path's new namespace
//! states. One watcher per live controller; the session's set of known namespaces makes the
//! paths' duplicate notices one event.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, Weak};

use fabrik_proto::nvme::features::{aec, fid};
use fabrik_proto::nvme::log::{aen, lid};

use crate::host::ana::{self, PathAna};
use crate::host::controller::Controller;
use crate::host::session::SessionEvent;

/// Namespaces the session has reported so far (None until first listed).
pub type KnownNamespaces = Arc<Mutex<Option<BTreeSet<u32>>>>;

/// Bytes of the Changed Namespace List log (1024 NSIDs).
const CHANGED_NS_LIST_LEN: usize = 4096;

/// Watches `ctrl` until it goes away: enables namespace (and ANA change) notices, keeps one
/// Asynchronous Event Request outstanding, and on a notice reads the Changed Namespace List
/// (which re-arms the event) and reports the difference in active namespaces through `emit`,
/// or reads the ANA log into `path_ana` and calls `ana_changed`.
pub fn spawn_watcher(
    ctrl: &Arc<Controller>,
    known: KnownNamespaces,
    path_ana: Arc<PathAna>,
    ana_changed: impl Fn() + Send + Sync + 'static,
    emit: impl Fn(SessionEvent) + Send + Sync + 'static,
) {
    let weak: Weak<Controller> = Arc::downgrade(ctrl);
    tokio::spawn(async move {
        {
            let Some(ctrl) = weak.upgrade() else { return };
            let notices = match ana::reports_ana(&ctrl) {
                true => aec::NS_ATTR_NOTICES | aec::ANA_CHANGE_NOTICES,
                false => aec::NS_ATTR_NOTICES,
            };
            if let Err(e) = ctrl.set_features(fid::ASYNC_EVENT_CONFIG, 0, notices).await {
                tracing::debug!("no namespace notices: {e}");
                return;
            }
            if sync_namespaces(&ctrl, &known, &emit).await.is_err() {
                return;
            }
        }
        loop {
            // Only the admin queue is held while waiting, so the controller can shut down.
            let Some(ctrl) = weak.upgrade() else { return };
            let aer = ctrl.async_event_request();
            drop(ctrl);
            let dw0 = match aer.await {
                Ok(dw0) => dw0,
                Err(e) => {
                    tracing::debug!("asynchronous events stop: {e}");
                    return;
                }
            };
            let Some(ctrl) = weak.upgrade() else { return };
            let (kind, info, log) = ((dw0 & 0x7) as u8, (dw0 >> 8) as u8, (dw0 >> 16) as u8);
            if kind == aen::TYPE_NOTICE && info == aen::NOTICE_NS_ATTR_CHANGED {
                // Reading the log (RAE clear) re-arms the event.
                let _ = ctrl
                    .get_log_page(lid::CHANGED_NS_LIST, 0xffff_ffff, CHANGED_NS_LIST_LEN, 0)
                    .await;
                if sync_namespaces(&ctrl, &known, &emit).await.is_err() {
                    return;
                }
            } else if kind == aen::TYPE_NOTICE && info == aen::NOTICE_ANA_CHANGE {
                // Reading the log (RAE clear) re-arms the event.
                match ana::read_log(&ctrl).await {
                    Ok(Some(log)) => {
                        path_ana.update(&log);
                        ana_changed();
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::debug!("ANA log after a notice: {e}");
                        return;
                    }
                }
            } else {
                tracing::info!("asynchronous event type {kind} info {info:#x} log page {log:#x}");
            }
        }
    });
}

/// Lists the active namespaces and reports what changed since the last listing.
async fn sync_namespaces(
    ctrl: &Controller,
    known: &KnownNamespaces,
    emit: &impl Fn(SessionEvent),
) -> Result<(), crate::HostError> {
    let now: BTreeSet<u32> = ctrl.active_namespaces().await?.into_iter().collect();
    let mut known = known.lock().unwrap();
    if let Some(before) = known.as_ref() {
        for &nsid in now.difference(before) {
            emit(SessionEvent::NamespaceAdded { nsid });
        }
        for &nsid in before.difference(&now) {
            emit(SessionEvent::NamespaceRemoved { nsid });
        }
    }
    *known = Some(now);
    Ok(())
}
