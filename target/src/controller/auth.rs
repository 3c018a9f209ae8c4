//! NVMe in-band authentication (DH-HMAC-CHAP) on the controller's side: which hosts must
//! authenticate, and each queue's transaction, run by `fabrik_proto::auth::ControllerAuth`
//! through Authentication Send and Receive.
//!
//! As Linux nvmet: a host with a secret gets ATR in every Connect response of an NVM
//! subsystem (not discovery); until its queue has authenticated, any other command but
//! Disconnect fails with Authentication Required. A Negotiate on an authenticated queue starts
//! a re-authentication, during which the queue keeps working. Failure1 ends the association,
//! and so does the host's Failure2.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use fabrik_proto::auth::exchange::{ControllerKeys, Policy, Progress};
use fabrik_proto::auth::{ControllerAuth, OsRandom, Secret, MAX_MESSAGE, SECP, SPSP};
use fabrik_proto::Status;

use tokio_util::sync::CancellationToken;

use super::queue::{Queue, Response};
use super::{Controller, ControllerKind, TargetState};

/// A host's keys as the controllers use them.
#[derive(Debug)]
pub struct HostAuth {
    pub secret: Secret,
    pub ctrl_secret: Option<Secret>,
    pub policy: Policy,
}

/// The hosts that must authenticate, by NQN.
pub type HostAuthTable = HashMap<String, Arc<HostAuth>>;

impl TargetState {
    /// Takes the hosts' keys as the management layer last made them.
    pub fn set_host_auth(&self, table: HostAuthTable) {
        *self.host_auth.write().unwrap() = Arc::new(table);
    }

    pub(super) fn host_auth(&self, hostnqn: Option<&str>) -> Option<Arc<HostAuth>> {
        self.host_auth.read().unwrap().get(hostnqn?).cloned()
    }
}

/// A queue's authentication: whether it may run commands, and its transaction.
#[derive(Default)]
pub(super) struct QueueAuth {
    /// The host must authenticate and has not yet: commands other than authentication fail.
    blocked: Arc<AtomicBool>,
    exchange: Mutex<Option<ControllerAuth>>,
}

/// How long a queue may take to authenticate after its Connect when the controller has no
/// KATO (nvmet's transaction timeout).
const DEADLINE_WITHOUT_KATO: Duration = Duration::from_secs(120);

impl QueueAuth {
    pub(super) fn required() -> QueueAuth {
        QueueAuth {
            blocked: Arc::new(AtomicBool::new(true)),
            exchange: Mutex::default(),
        }
    }

    /// A queue that has not authenticated within KATO of its Connect is closed (its admin
    /// queue takes the controller with it): a host that connects and never authenticates
    /// holds nothing for long.
    pub(super) fn arm_deadline(&self, ctrl: &Arc<Controller>, qid: u16, queue: CancellationToken) {
        if self.allows_commands() {
            return;
        }
        let blocked = self.blocked.clone();
        let limit = match ctrl.kato_ms() {
            0 => DEADLINE_WITHOUT_KATO,
            ms => Duration::from_millis(ms as u64),
        };
        let weak = Arc::downgrade(ctrl);
        ctrl.target.spawn_control(async move {
            tokio::select! {
                _ = queue.cancelled() => return,
                _ = crate::timer::sleep(limit) => {}
            }
            if !blocked.load(Ordering::Relaxed) {
                return;
            }
            let Some(ctrl) = weak.upgrade() else { return };
            let why = format!("qid {qid} did not authenticate within {} ms of its Connect", limit.as_millis());
            if qid == 0 {
                ctrl.shut_down(&why);
            } else {
                tracing::warn!(cntlid = ctrl.cntlid, hostnqn = %ctrl.host_label(), "{why}: queue closed");
                queue.cancel();
            }
        });
    }

    /// Whether the queue may run commands other than authentication (one load per command).
    pub(super) fn allows_commands(&self) -> bool {
        !self.blocked.load(Ordering::Relaxed)
    }
}

/// Authentication Send/Receive's fields, judged before any data moves (as nvmet): DH-HMAC-CHAP's
/// SECP and SPSP, a length (TL or AL) that is not 0, and a transfer as long as it.
pub(super) fn admit(secp: u8, spsp: [u8; 2], len: u32, transfer_len: u32) -> Result<(), Status> {
    if secp != SECP || spsp != [SPSP, SPSP] || len == 0 || len as usize > MAX_RECEIVE {
        return Err(Status::INVALID_FIELD);
    }
    if transfer_len != len {
        return Err(Status::SGL_LENGTH_INVALID);
    }
    Ok(())
}

/// The most an Authentication Send or Receive moves: the Linux host's receive buffer (every
/// message fits in it, see `MAX_MESSAGE`).
const MAX_RECEIVE: usize = 4096;
const _: () = assert!(MAX_MESSAGE <= MAX_RECEIVE);

impl Queue {
    /// Authentication Send: the host's message goes to the queue's transaction.
    pub(super) fn auth_send(&self, data: &Bytes) -> Response {
        let Some(b) = self.binding() else {
            return Response::status(Status::COMMAND_SEQUENCE_ERROR);
        };
        let ctrl = &b.ctrl;
        ctrl.keep_alive();
        // Looked up once: the keys (when a transaction starts) and the policy come from it.
        let auth = self.target.host_auth(ctrl.hostnqn.as_deref());
        let keys = || {
            let ControllerKind::Io(sub) = &ctrl.kind else {
                return None;
            };
            let auth = auth.as_ref()?;
            Some(ControllerKeys {
                host: auth.secret.clone(),
                ctrl: auth.ctrl_secret.clone(),
                hostnqn: ctrl.hostnqn.clone()?,
                subnqn: sub.nqn.to_string(),
            })
        };
        let policy = auth.as_ref().map(|a| a.policy.clone()).unwrap_or_default();
        let mut exchange = b.auth.exchange.lock().unwrap();
        let exchange = exchange.get_or_insert_with(|| ControllerAuth::new(&mut OsRandom));
        match exchange.on_send(data, keys, &policy, &mut OsRandom) {
            Progress::Continue => Response::ok(),
            Progress::Authenticated => {
                let what = if b.auth.blocked.swap(false, Ordering::Relaxed) {
                    "authenticated"
                } else {
                    "re-authenticated"
                };
                // Once per controller at the default level (its admin queue), as Linux.
                if b.qid == 0 {
                    tracing::info!(cntlid = ctrl.cntlid, hostnqn = %ctrl.host_label(), "host {what} (DH-HMAC-CHAP)");
                } else {
                    tracing::debug!(cntlid = ctrl.cntlid, qid = b.qid, hostnqn = %ctrl.host_label(), "queue {what}");
                }
                Response::ok()
            }
            Progress::Failed => {
                tracing::warn!(cntlid = ctrl.cntlid, qid = b.qid, hostnqn = %ctrl.host_label(), "the host ended authentication with a failure: association closed");
                Response {
                    close: true,
                    ..Response::ok()
                }
            }
        }
    }

    /// Authentication Receive: the transaction's next message, zero-padded to AL as nvmet
    /// does. After Failure1 the association ends.
    pub(super) fn auth_receive(&self, al: u32) -> Response {
        let Some(b) = self.binding() else {
            return Response::status(Status::COMMAND_SEQUENCE_ERROR);
        };
        let next = b
            .auth
            .exchange
            .lock()
            .unwrap()
            .as_mut()
            .and_then(|e| e.on_receive());
        let Some((message, end)) = next else {
            return Response::status(Status::COMMAND_SEQUENCE_ERROR);
        };
        let mut bytes = message.encode();
        let room = al as usize;
        if bytes.len() > room {
            return Response::status(Status::INVALID_FIELD);
        }
        bytes.resize(room, 0);
        if end {
            let ctrl = &b.ctrl;
            tracing::warn!(cntlid = ctrl.cntlid, qid = b.qid, hostnqn = %ctrl.host_label(), "authentication failed ({}): association closed", message.name());
        }
        Response {
            data: bytes.into(),
            close: end,
            ..Response::default()
        }
    }
}
