//! Keep-alive: a controller whose host stays silent for longer than KATO is torn down.
//!
//! Armed at the admin Connect (the Linux host sends its first Keep Alive only kato/2 after the
//! controller is live, so the timer must cover setup), restarted by Keep Alive and, leniently,
//! by any command: a host busy with I/O is alive.

use std::sync::Arc;
use std::time::Duration;

use super::Controller;

pub(super) fn start(ctrl: &Arc<Controller>) {
    let weak = Arc::downgrade(ctrl);
    let teardown = ctrl.teardown.clone();
    ctrl.target.spawn_control(async move {
        loop {
            let Some(ctrl) = weak.upgrade() else { return };
            let kato = ctrl.kato_ms();
            if kato == 0 {
                // Disabled (discovery controllers): look again later, KATO may be set by a feature.
                drop(ctrl);
                tokio::select! {
                    _ = teardown.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                }
            }
            let kato = Duration::from_millis(kato as u64);
            let since = ctrl.silent_for();
            if since >= kato {
                ctrl.shut_down(&format!(
                    "keep-alive timer expired ({} ms without a command)",
                    since.as_millis()
                ));
                return;
            }
            drop(ctrl);
            tokio::select! {
                _ = teardown.cancelled() => return,
                _ = tokio::time::sleep(kato - since) => {}
            }
        }
    });
}
