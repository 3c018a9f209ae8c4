//! Keep-alive: a controller whose host stays silent for longer than KATO is torn down.
//!
//! Armed at the admin Connect (the Linux host sends its first Keep Alive only kato/2 after the
//! controller is live, so the timer must cover setup), restarted by Keep Alive and, leniently,
//! by any command: a host busy with I/O is alive.
//!
//! Commands only raise a flag (`Controller::keep_alive`); this timer looks at it every quarter
//! of KATO and notes when it last saw it raised. A host is thus torn down after between KATO
//! and 1.25 KATO of silence, never before KATO (Linux nvmet's traffic-based keep-alive allows
//! up to twice KATO).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Controller;

/// How many times per KATO the timer looks whether the host was heard from.
const LOOKS_PER_KATO: u32 = 4;

pub(super) fn start(ctrl: &Arc<Controller>) {
    let weak = Arc::downgrade(ctrl);
    let teardown = ctrl.teardown.clone();
    ctrl.target.spawn_control(async move {
        let mut last_heard = Instant::now();
        loop {
            let Some(ctrl) = weak.upgrade() else { return };
            let kato = ctrl.kato_ms();
            let now = Instant::now();
            // The flag says "heard since the last look": dated now, which errs on the late side.
            if ctrl.heard_since_last_look() {
                last_heard = now;
            }
            if kato == 0 {
                // Disabled (discovery controllers): look again later, KATO may be set by a feature.
                drop(ctrl);
                last_heard = now;
                tokio::select! {
                    _ = teardown.cancelled() => return,
                    _ = crate::timer::sleep(Duration::from_secs(1)) => continue,
                }
            }
            let kato = Duration::from_millis(kato as u64);
            let since = now - last_heard;
            if since >= kato {
                ctrl.shut_down(&format!(
                    "keep-alive timer expired ({} ms without a command)",
                    since.as_millis()
                ));
                return;
            }
            drop(ctrl);
            let next_look = (kato / LOOKS_PER_KATO).min(kato - since);
            tokio::select! {
                _ = teardown.cancelled() => return,
                _ = crate::timer::sleep(next_look) => {}
            }
        }
    });
}
