//! The two ends of a DH-HMAC-CHAP transaction, one per queue, as state machines: the target
//! feeds [`ControllerAuth`] what Authentication Send brings and answers Authentication Receive
//! with what it gives; the host drives [`HostAuth`] the other way.
//!
//! Controller:  Negotiate → (Challenge) → Reply → (Success1) → [Success2, bidirectional only]
//! A Negotiate at any time starts over (re-authentication); a queue already authenticated
//! stays so while it runs. Anything out of order or wrong ends in Failure1, after which the
//! target tears the association down, as Linux nvmet does.

mod controller;
mod host;
#[cfg(test)]
mod tests;

pub use controller::{ControllerAuth, ControllerKeys, Policy, Progress};
pub use host::{explanation_name, HostAuth, HostAuthError, HostKeys, HostStep};
