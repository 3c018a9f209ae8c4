//! Who a listener lets in: caps on connections (per listener and per peer address) and a calm
//! answer to accept errors. Descriptors are shared with everything else fabrikd serves, so a
//! flood on one port must not starve the others.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Connections one listener serves at once. A GPU server connects a queue per CPU to every
/// drive (24 x 193 for two 96-core CPUs); a box serves several such hosts per port.
pub const MAX_CONNECTIONS_PER_LISTENER: usize = 32768;
/// Connections from one peer address at once.
pub const MAX_CONNECTIONS_PER_PEER: usize = 8192;

/// Counts a listener's open connections, by peer address.
#[derive(Clone)]
pub(crate) struct Admission {
    per_listener: usize,
    per_peer: usize,
    open: Arc<Mutex<Open>>,
}

#[derive(Default)]
struct Open {
    total: usize,
    by_peer: HashMap<IpAddr, usize>,
    /// Refusals since the last one logged.
    refused: u64,
}

/// Held by a connection: its place in the counts, given back when it ends.
pub(crate) struct Admitted {
    peer: IpAddr,
    open: Arc<Mutex<Open>>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap();
        open.total -= 1;
        if let Some(n) = open.by_peer.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                open.by_peer.remove(&self.peer);
            }
        }
    }
}

impl Admission {
    pub(crate) fn new(per_listener: usize, per_peer: usize) -> Admission {
        Admission {
            per_listener,
            per_peer,
            open: Arc::default(),
        }
    }

    /// A place for a connection from `peer`, or None past a cap (the caller closes it). A
    /// refusal is logged at the first of a burst and then once per 1,000.
    pub(crate) fn admit(&self, peer: IpAddr) -> Option<Admitted> {
        let mut open = self.open.lock().unwrap();
        let from_peer = open.by_peer.get(&peer).copied().unwrap_or(0);
        if open.total >= self.per_listener || from_peer >= self.per_peer {
            if open.refused.is_multiple_of(1000) {
                tracing::warn!(
                    %peer,
                    open = open.total,
                    from_peer,
                    refused = open.refused + 1,
                    "connection refused: the listener's connection cap (or this peer's) is reached"
                );
            }
            open.refused += 1;
            return None;
        }
        open.total += 1;
        *open.by_peer.entry(peer).or_default() += 1;
        open.refused = 0;
        Some(Admitted {
            peer,
            open: self.open.clone(),
        })
    }
}

/// Accept errors (EMFILE above all) come in bursts: each waits a little longer, up to a
/// second, and a burst is logged at its start and its end, not once per attempt.
#[derive(Default)]
pub(crate) struct AcceptBackoff {
    failures: u32,
}

impl AcceptBackoff {
    pub(crate) async fn failed(&mut self, what: &str, e: &std::io::Error) {
        if self.failures == 0 {
            tracing::warn!("{what}: accept failed: {e} (retrying, backing off up to 1 s)");
        }
        self.failures += 1;
        let ms = 10u64 << self.failures.min(7);
        crate::timer::sleep(Duration::from_millis(ms.min(1000))).await;
    }

    pub(crate) fn accepted(&mut self, what: &str) {
        if self.failures > 0 {
            tracing::info!(
                failures = self.failures,
                "{what}: accepting again after a burst of accept errors"
            );
            self.failures = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_hold_per_peer_and_per_listener_and_free_on_drop() {
        let a = Admission::new(3, 2);
        let (p, q) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let one = a.admit(p).unwrap();
        let _two = a.admit(p).unwrap();
        assert!(a.admit(p).is_none(), "per-peer cap");
        let _three = a.admit(q).unwrap();
        assert!(a.admit(q).is_none(), "per-listener cap");
        drop(one);
        assert!(a.admit(p).is_some(), "a closed connection frees its place");
    }
}
