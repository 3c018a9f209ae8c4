//! The host side of an NVMe-oF association: options, the controller and its queues, discovery.

pub mod controller;
pub mod discovery;
pub mod io;
pub mod options;
pub mod queue;

pub use controller::Controller;
pub use discovery::{discover, DiscoveryLog};
pub use io::IoQueue;
pub use options::{ConnectOptions, HostIdentity, Transport};
