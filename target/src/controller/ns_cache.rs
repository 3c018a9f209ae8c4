//! The namespaces a queue's I/O commands named lately, each behind a reference of the queue's
//! own.
//!
//! Without it every I/O command read-locked its subsystem's namespace table and cloned the
//! namespace's `Arc`: four atomic read-modify-writes on two cache lines that every queue naming
//! that namespace writes too. A host's queues run on several reactors (spdk_nvme_perf gives
//! each of its cores a queue to every namespace), so those lines moved between cores on every
//! command. Here a command takes the queue's own lock (uncontended: one queue, one reactor)
//! and clones the queue's own `Arc`.
//!
//! A namespace removed or replaced is marked (`Namespace::is_removed`) and its controllers
//! are told (`Controller::namespace_changed`), which makes every queue's cache forget it: an
//! idle queue must not keep a removed drive open (a file drive holds an exclusive lock on its
//! file until the last reference goes).

use std::sync::{Arc, Mutex};

use fabrik_proto::Status;

use crate::model::Namespace;

/// A namespace as one queue holds it: cloning it touches only this queue's reference count.
pub type QueueNamespace = Arc<Arc<Namespace>>;

/// Namespaces a queue keeps at most; a host naming more through one queue looks the oldest up
/// again.
const ENTRIES: usize = 16;

#[derive(Default)]
pub struct NamespaceCache {
    entries: Mutex<Vec<(u32, QueueNamespace)>>,
}

impl NamespaceCache {
    /// NSID `nsid`, from the cache while it is still the subsystem's and ready, else through
    /// `lookup` (whose error is the command's status).
    pub fn get(
        &self,
        nsid: u32,
        lookup: impl FnOnce() -> Result<Arc<Namespace>, Status>,
    ) -> Result<QueueNamespace, Status> {
        let mut entries = self.entries.lock().unwrap();
        if let Some(i) = entries.iter().position(|(id, _)| *id == nsid) {
            let ns = &entries[i].1;
            if ns.serves_io() {
                return Ok(ns.clone());
            }
            entries.remove(i);
        }
        let ns = Arc::new(lookup()?);
        if entries.len() == ENTRIES {
            entries.remove(0);
        }
        entries.push((nsid, ns.clone()));
        Ok(ns)
    }

    /// The namespace changed (added, replaced, removed): looked up anew next time.
    pub fn forget(&self, nsid: u32) {
        self.entries.lock().unwrap().retain(|(id, _)| *id != nsid);
    }

    pub fn clear(&self) {
        self.entries.lock().unwrap().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::null::NullDrive;
    use crate::model::Namespace;

    fn namespace(nsid: u32) -> Arc<Namespace> {
        let drive = Arc::new(NullDrive::new(1 << 30, 4096).unwrap());
        Arc::new(Namespace::new(nsid, "00", drive, "box/00"))
    }

    #[test]
    fn looks_up_once_and_again_after_removal_or_forget() {
        let cache = NamespaceCache::default();
        let first = namespace(1);
        let lookups = std::cell::Cell::new(0);
        let lookup = |ns: &Arc<Namespace>| {
            lookups.set(lookups.get() + 1);
            Ok(ns.clone())
        };
        let a = cache.get(1, || lookup(&first)).unwrap();
        let b = cache.get(1, || lookup(&first)).unwrap();
        assert!(Arc::ptr_eq(&a, &b), "the queue's own reference, cloned");
        assert_eq!(lookups.get(), 1);
        // Replaced: the old one is marked, the next command finds the new one.
        first.mark_removed();
        let second = namespace(1);
        let c = cache.get(1, || lookup(&second)).unwrap();
        assert!(Arc::ptr_eq(&*c, &second));
        assert_eq!(lookups.get(), 2);
        // Forgotten (the controller was told of a change): no reference kept.
        cache.forget(1);
        drop((a, b, c));
        assert_eq!(Arc::strong_count(&second), 1);
        assert_eq!(Arc::strong_count(&first), 1);
    }

    #[test]
    fn a_failed_lookup_is_the_status_and_keeps_nothing() {
        let cache = NamespaceCache::default();
        assert!(matches!(
            cache.get(7, || Err(Status::INVALID_NAMESPACE)),
            Err(Status::INVALID_NAMESPACE)
        ));
        let ns = namespace(7);
        cache.get(7, || Ok(ns.clone())).unwrap();
        cache.clear();
        assert_eq!(Arc::strong_count(&ns), 1);
    }

    #[test]
    fn keeps_a_bounded_number() {
        let cache = NamespaceCache::default();
        let all: Vec<_> = (1..=ENTRIES as u32 + 4).map(namespace).collect();
        for ns in &all {
            cache.get(ns.nsid, || Ok(ns.clone())).unwrap();
        }
        let held = all.iter().filter(|ns| Arc::strong_count(ns) > 1).count();
        assert_eq!(held, ENTRIES);
        assert_eq!(Arc::strong_count(&all[0]), 1, "the oldest went first");
    }
}
