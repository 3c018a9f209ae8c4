//! Volumes with an operation under way, in the controller and the node plugin alike: a second
//! operation on the same volume meanwhile is ABORTED, as CSI asks (the caller retries).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use tonic::Status;

#[derive(Clone, Default)]
pub struct Volumes(Arc<Mutex<BTreeSet<String>>>);

/// Holds a volume busy till dropped (it may move into a task that outlives the call).
pub struct Busy {
    set: Volumes,
    name: String,
}

impl Volumes {
    pub fn claim(&self, name: &str) -> Result<Busy, Status> {
        if !self.0.lock().unwrap().insert(name.to_string()) {
            return Err(Status::aborted(format!(
                "an operation on volume {name} is under way"
            )));
        }
        Ok(Busy {
            set: self.clone(),
            name: name.to_string(),
        })
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.set.0.lock().unwrap().remove(&self.name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_volume_is_claimed_once_at_a_time() {
        let v = Volumes::default();
        let held = v.claim("a").unwrap();
        assert_eq!(v.claim("a").err().unwrap().code(), tonic::Code::Aborted);
        assert!(v.claim("b").is_ok());
        drop(held);
        assert!(v.claim("a").is_ok());
    }
}
