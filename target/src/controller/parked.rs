//! Asynchronous Event Requests parked on an admin queue until an event, by CID.
//!
//! An AER stays outstanding for as long as nothing happens, and the host may give up on it.
//! SPDK's host does at detach: it completes its AERs itself, without telling the target
//! (`nvme_transport_admin_qpair_abort_aers`), and reuses their CIDs for the shutdown's Property
//! Get and Set of CC. Answering those with a CID conflict made every SPDK detach log "Failed to
//! read the CC register". A new command that comes with a parked AER's CID therefore retires
//! the AER: it never gets a completion (the host has finished it already), and the new command
//! runs. A CID held by any other command still conflicts.
//!
//! A list, not a map: a controller parks at most `limits::AER_LIMIT` AERs, I/O queues none,
//! and every answered command looks here (hashing its CID took 150 instructions of a 4K read).

use std::future::Future;

use futures_util::future::{AbortHandle, Abortable};

#[derive(Default)]
pub(super) struct ParkedEvents(Vec<(u16, AbortHandle)>);

impl ParkedEvents {
    /// Parks the AER `cid`: the future yields its answer, or None once it was retired.
    pub(super) fn park<F: Future>(
        &mut self,
        cid: u16,
        request: F,
    ) -> impl Future<Output = Option<F::Output>> {
        let (handle, registration) = AbortHandle::new_pair();
        // The books gave `cid` to this AER: no other parked one holds it.
        self.0.push((cid, handle));
        async move { Abortable::new(request, registration).await.ok() }
    }

    /// The command `cid` was answered (an AER or not).
    pub(super) fn answered(&mut self, cid: u16) {
        self.take(cid);
    }

    fn take(&mut self, cid: u16) -> Option<AbortHandle> {
        let at = self.0.iter().position(|(parked, _)| *parked == cid)?;
        Some(self.0.swap_remove(at).1)
    }

    /// A new command came with `cid`: if a parked AER holds it, that AER is retired (its
    /// future yields None at once and its answer is never sent) and the CID is the new
    /// command's. False if no AER holds the CID.
    pub(super) fn retire(&mut self, cid: u16) -> bool {
        match self.take(cid) {
            Some(handle) => {
                handle.abort();
                tracing::debug!(
                    cid,
                    "asynchronous event request retired: a new command reuses its CID"
                );
                true
            }
            None => false,
        }
    }

    /// The queue ends: every parked AER is retired (they hold nothing at the backend).
    pub(super) fn retire_all(&mut self) {
        for (_, handle) in self.0.drain(..) {
            handle.abort();
        }
    }

    pub(super) fn len(&self) -> usize {
        self.0.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    #[test]
    fn a_retired_request_yields_none_and_frees_its_cid() {
        let mut parked = ParkedEvents::default();
        let aer = parked.park(3, std::future::pending::<u32>());
        assert_eq!(parked.len(), 1);
        assert!(!parked.retire(4), "only a parked CID is retired");
        assert!(parked.retire(3));
        assert_eq!(parked.len(), 0);
        assert_eq!(aer.now_or_never(), Some(None));
    }

    #[test]
    fn an_answered_request_keeps_its_answer() {
        let mut parked = ParkedEvents::default();
        let aer = parked.park(5, async { 7u32 });
        assert_eq!(aer.now_or_never(), Some(Some(7)));
        parked.answered(5);
        assert!(!parked.retire(5), "an answered CID is no longer parked");
    }
}
