//! Keeping the two I/O modules' configurations in step: what one module's API changes in the
//! configuration they share (`state::Shared`: subsystems, hosts, compositions) is applied to
//! the other before the change is acknowledged.
//!
//! The rule:
//! - Each module counts the changes to the shared configuration (`config_generation`). A
//!   change goes to the other module with the generation it was made from; the other applies
//!   it only at that generation, and refuses it (409) otherwise or while a change of its own is
//!   under way. Refused there, the change is refused here too: nothing changes anywhere.
//! - The other module cannot be reached (down, or cut off): the change is made here alone and
//!   the module remembers that the other is behind (`peer_behind`, persisted). Every few
//!   seconds it asks the other for its configuration and, once it answers, hands its own over.
//! - Both were changed while apart (each remembers the other is behind), or both answer the same
//!   generation with different configurations: they have diverged. Neither guesses which side
//!   is right: both refuse changes (409) and say so (`config_sync: diverged` in `GET /module`)
//!   until an operator keeps one side's configuration (`POST /module/config/push` there).
//!
//! So a module that was down catches up when it returns, and a partition never lets the two
//! drift apart silently: the worst it does is stop configuration changes until an operator
//! decides.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fabrik_api::client::{Client, ClientError};
use fabrik_api::models as api;
use fabrik_api::{MgmtError, MgmtResult};

use fabrik_proto::nvme::reservation::NotificationKind;

use super::{conflict, invalid, Manager};
use crate::model::reservation::{HostId, Notice};
use crate::state::{Shared, State};

/// How long a call to the other module may take: a change waits this long at most for an
/// unreachable peer before it is made here alone.
const PEER_TIMEOUT: Duration = Duration::from_secs(3);
/// How often a module checks that the other has its configuration.
pub const CHECK_EVERY: Duration = Duration::from_secs(2);

/// The other I/O module, through its management API.
pub struct Peer {
    url: String,
    token: Option<String>,
    /// The CA its HTTPS certificate is checked against (None: the system's roots).
    ca: Option<std::path::PathBuf>,
    /// Both changed while apart (see the module documentation); found by `check_peer`.
    diverged: AtomicBool,
}

impl Peer {
    pub fn new(url: String, token: Option<String>, ca: Option<std::path::PathBuf>) -> Peer {
        Peer {
            url,
            token,
            ca,
            diverged: AtomicBool::new(false),
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Runs one call to the other module and waits for it, from any context (a management
    /// call runs on the blocking pool; a test may call it on a runtime's thread): on a thread
    /// of its own, with a runtime of its own. Changes are rare; this costs a thread start.
    fn call<T: Send>(
        &self,
        f: impl AsyncFnOnce(&Client) -> Result<T, ClientError> + Send,
    ) -> Result<T, ClientError> {
        self.call_within(PEER_TIMEOUT, f)
    }

    /// `call`, waiting at most `limit` for the answer.
    fn call_within<T: Send>(
        &self,
        limit: Duration,
        f: impl AsyncFnOnce(&Client) -> Result<T, ClientError> + Send,
    ) -> Result<T, ClientError> {
        let unreachable = |message: String| ClientError::Transport {
            url: self.url.clone(),
            message,
        };
        std::thread::scope(|s| {
            s.spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| unreachable(format!("no runtime for the call: {e}")))?;
                rt.block_on(async {
                    let client = Client::with_ca(&self.url, self.token.clone(), self.ca.as_deref());
                    match crate::timer::timeout(limit, f(&client)).await {
                        Ok(r) => r,
                        Err(_) => Err(unreachable(format!("no answer within {limit:?}"))),
                    }
                })
            })
            .join()
            .unwrap_or_else(|_| Err(unreachable("the call panicked".into())))
        })
    }
}

/// Whether `theirs` exports the drives as `ours` does. The alias key is left out: each module
/// makes its own at its first start, and the first change hands one over to the other.
fn same_exports(theirs: &serde_json::Value, ours: &Shared) -> bool {
    match serde_json::from_value::<Shared>(theirs.clone()) {
        Ok(theirs) => {
            Shared {
                alias_key: ours.alias_key.clone(),
                ..theirs
            } == *ours
        }
        Err(_) => false,
    }
}

/// Reservation notices as they go to the other module.
pub(super) fn notice_views(
    drive: &str,
    notices: &[Notice],
    abort: bool,
) -> Vec<api::ReservationNotice> {
    (notices.iter())
        .map(|(host, kind)| api::ReservationNotice {
            drive: drive.to_string(),
            host_id: super::views::hex(host),
            abort: abort && *kind == NotificationKind::RegistrationPreempted,
            kind: match kind {
                NotificationKind::RegistrationPreempted => {
                    api::ReservationNoticeKind::RegistrationPreempted
                }
                NotificationKind::ReservationReleased => {
                    api::ReservationNoticeKind::ReservationReleased
                }
                NotificationKind::ReservationPreempted => {
                    api::ReservationNoticeKind::ReservationPreempted
                }
            },
        })
        .collect()
}

/// A notice from the other module: the drive, whom to tell what, and whether to let that
/// host's commands in flight finish first (Preempt and Abort).
fn notice_of(n: &api::ReservationNotice) -> MgmtResult<(String, Notice, bool)> {
    let bad = || invalid(format!("host_id {:?} is not 32 hex digits", n.host_id));
    let text = &n.host_id;
    if text.len() != 32 || !text.bytes().all(|c| c.is_ascii_hexdigit()) {
        return Err(bad());
    }
    let mut host: HostId = [0; 16];
    for (i, b) in host.iter_mut().enumerate() {
        *b = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    let kind = match n.kind {
        api::ReservationNoticeKind::RegistrationPreempted => {
            NotificationKind::RegistrationPreempted
        }
        api::ReservationNoticeKind::ReservationReleased => NotificationKind::ReservationReleased,
        api::ReservationNoticeKind::ReservationPreempted => NotificationKind::ReservationPreempted,
    };
    Ok((n.drive.clone(), (host, kind), n.abort))
}

/// The shared configuration as it goes to the other module (secrets included: a push is a
/// request, never an answer).
fn shared_json(st: &State) -> serde_json::Value {
    serde_json::to_value(st.shared()).expect("the state serializes")
}

/// The shared configuration as an answer shows it: secrets by fingerprint only.
fn shared_json_redacted(st: &State) -> serde_json::Value {
    serde_json::to_value(st.shared_redacted()).expect("the state serializes")
}

impl Manager {
    /// A change of the shared configuration, from `cur` to `next`, made on the other module
    /// first (see the module documentation); `next` gets its generation, and remembers that the
    /// other is behind when it cannot be reached.
    pub(super) fn sync_change(
        &self,
        peer: &Peer,
        cur: &State,
        next: &mut State,
        notices: Vec<api::ReservationNotice>,
    ) -> MgmtResult<()> {
        if peer.diverged.load(Ordering::Relaxed) {
            return Err(conflict(
                "the two I/O modules' configurations diverged (both were changed while apart): \
                 changes are refused until an operator keeps one side's \
                 (POST /api/v1/module/config/push on that module)",
            ));
        }
        next.config_generation = cur.config_generation + 1;
        if cur.peer_behind {
            // The other has not got the earlier changes yet: it cannot take this one from
            // `cur`'s generation; `check_peer` hands it all over (without notices: hosts
            // connected to it then are not told).
            next.peer_behind = true;
            return Ok(());
        }
        // A Preempt and Abort is acknowledged there once the preempted hosts' commands in
        // flight have finished: the answer may take that long.
        let limit = if notices.iter().any(|n| n.abort) {
            PEER_TIMEOUT + crate::controller::reservation::ABORT_DRAIN
        } else {
            PEER_TIMEOUT
        };
        let push = api::ModuleConfigPush {
            base: cur.config_generation,
            generation: next.config_generation,
            force: false,
            config: shared_json(next),
            notices,
        };
        match peer.call_within(limit, async |c| c.apply_module_config(&push).await) {
            Ok(_) => Ok(()),
            Err(ClientError::Api(p)) if p.status == 422 => Err(invalid(format!(
                "the other I/O module refused the change: {}",
                p.detail
            ))),
            Err(ClientError::Api(p)) => Err(conflict(format!(
                "the other I/O module refused the change ({} {}): {}",
                p.status, p.title, p.detail
            ))),
            Err(e) => {
                tracing::warn!(peer = %peer.url, "configuration changed on this module alone (the other gets it when it can be reached): {e}");
                next.peer_behind = true;
                Ok(())
            }
        }
    }

    pub(super) fn module_config_view(&self) -> api::ModuleConfig {
        let st = self.state();
        api::ModuleConfig {
            module: self.target.module.map(|m| m.name().to_string()),
            generation: st.config_generation,
            peer_behind: st.peer_behind,
            config: shared_json_redacted(&st),
        }
    }

    pub(super) fn config_sync(&self, st: &State) -> Option<api::ConfigSync> {
        let peer = self.peer.as_ref()?;
        Some(if peer.diverged.load(Ordering::Relaxed) {
            api::ConfigSync::Diverged
        } else if st.peer_behind {
            api::ConfigSync::PeerBehind
        } else {
            api::ConfigSync::InStep
        })
    }

    /// The other module's change (or an operator's forced push) applied here.
    pub(super) fn take_module_config(
        &self,
        push: api::ModuleConfigPush,
    ) -> MgmtResult<api::ModuleConfig> {
        let Ok(_changing) = self.changing.try_lock() else {
            return Err(conflict(
                "a configuration change of this module's own is under way: try again",
            ));
        };
        let cur = self.state();
        if !push.force {
            if cur.peer_behind {
                if let Some(peer) = &self.peer {
                    peer.diverged.store(true, Ordering::Relaxed);
                }
                return Err(conflict(
                    "this module has configuration changes the other has not: the two diverged",
                ));
            }
            if cur.config_generation != push.base {
                return Err(conflict(format!(
                    "this module's configuration is at generation {}, the change was made from {}",
                    cur.config_generation, push.base
                )));
            }
        }
        let shared: Shared = serde_json::from_value(push.config)
            .map_err(|e| invalid(format!("not a configuration: {e}")))?;
        let notices = (push.notices.iter())
            .map(notice_of)
            .collect::<MgmtResult<Vec<_>>>()?;
        let mut next = State::clone(&cur);
        next.set_shared(shared);
        next.config_generation = push.generation;
        next.peer_behind = false;
        next.validate().map_err(|e| invalid(format!("{e:#}")))?;
        self.commit(&cur, next)?;
        for (drive, notice, _) in &notices {
            self.target.tell_reservation_notices(drive, &[*notice]);
        }
        // Preempt and Abort made on the other module: acknowledged once the preempted hosts'
        // commands in flight here have finished (see `Controller::change_reservations`).
        for (drive, (host, _), _) in notices.iter().filter(|(_, _, abort)| *abort) {
            if !self.target.drain_hosts(drive, &[*host]) {
                tracing::warn!(drive, "Preempt and Abort: the preempted host's commands did not finish in time; acknowledging anyway");
            }
        }
        if push.force {
            if let Some(peer) = &self.peer {
                peer.diverged.store(false, Ordering::Relaxed);
            }
            tracing::warn!(
                "configuration replaced by the other I/O module's (an operator kept that side's)"
            );
        }
        Ok(self.module_config_view())
    }

    /// The other module takes this one's configuration, whatever it has (an operator resolving
    /// a divergence).
    pub(super) fn give_module_config(&self) -> MgmtResult<api::Module> {
        let peer =
            (self.peer.as_ref()).ok_or_else(|| conflict("this module has no peer (--peer)"))?;
        let _changing = self.changing.lock().unwrap();
        let cur = self.state();
        self.hand_over(peer, &cur, 0, true)?;
        peer.diverged.store(false, Ordering::Relaxed);
        Ok(self.module_view())
    }

    /// Sends this module's configuration to the other (from its generation `base`), and
    /// records that the other is no longer behind.
    fn hand_over(&self, peer: &Peer, cur: &State, base: u64, force: bool) -> MgmtResult<()> {
        let push = api::ModuleConfigPush {
            base,
            generation: cur.config_generation,
            force,
            config: shared_json(cur),
            notices: Vec::new(),
        };
        peer.call(async |c| c.apply_module_config(&push).await)
            .map_err(|e| match e {
                ClientError::Api(p) => conflict(format!(
                    "the other I/O module refused this module's configuration: {}",
                    p.detail
                )),
                e => MgmtError::Unavailable(e.to_string()),
            })?;
        if cur.peer_behind {
            let mut next = State::clone(cur);
            next.peer_behind = false;
            self.commit(cur, next)?;
        }
        tracing::info!(peer = %peer.url, generation = cur.config_generation, "the other I/O module has this module's configuration");
        Ok(())
    }

    /// One look at the other module (every `CHECK_EVERY`): hands this module's changes over
    /// once it answers, and finds a divergence.
    pub fn check_peer(&self) {
        let Some(peer) = &self.peer else { return };
        // No lock while asking: the other module may be making a change on this one meanwhile.
        let theirs = match peer.call(async |c| c.module_config().await) {
            Ok(t) => t,
            Err(e) => {
                tracing::debug!(peer = %peer.url, "the other I/O module does not answer: {e}");
                return;
            }
        };
        let cur = self.state();
        let diverged = if cur.peer_behind && theirs.peer_behind {
            true
        } else if cur.peer_behind {
            let _changing = self.changing.lock().unwrap();
            let cur = self.state();
            if !cur.peer_behind {
                return; // handed over meanwhile
            }
            // At a stale generation (the other changed meanwhile), the other refuses it: the
            // next look tries again.
            if let Err(e) = self.hand_over(peer, &cur, theirs.generation, false) {
                tracing::warn!(peer = %peer.url, "handing the configuration over failed: {e}");
            }
            false
        } else {
            // Neither has changes of its own: the same generation must hold the same
            // configuration (two modules started from different config files do not).
            !theirs.peer_behind
                && theirs.generation == cur.config_generation
                && !same_exports(&theirs.config, &cur.shared_redacted())
        };
        if diverged && !peer.diverged.swap(true, Ordering::Relaxed) {
            tracing::error!(peer = %peer.url, "the two I/O modules' configurations diverged: changes are refused until an operator keeps one side's (POST /api/v1/module/config/push on that module)");
        } else if !diverged && !theirs.peer_behind {
            peer.diverged.store(false, Ordering::Relaxed);
        }
    }
}
