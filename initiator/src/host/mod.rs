//! The host side of an NVMe-oF association: options, the controller and its queues, discovery.

pub mod ana;
mod auth;
pub mod controller;
pub mod discovery;
pub mod events;
pub mod io;
pub mod kernel;
pub mod mdns;
pub mod ns_identity;
pub mod options;
pub mod queue;
pub mod session;

pub use controller::Controller;
pub use discovery::{discover, discover_all, discover_with, DiscoveryLog, OfferedSubsystem};
pub use fabrik_proto::fabrics::Transport;
pub use io::IoQueue;
pub use options::{ConnectOptions, HostIdentity};
