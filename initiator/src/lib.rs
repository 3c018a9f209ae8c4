//! fabrik-initiator: a userspace NVMe-over-Fabrics host.
//!
//! Today: NVMe/TCP, one controller at a time, enough for tests and tools. `transport` holds the
//! host halves of the fabrics bindings (NVMe/TCP now; RDMA later), `host` the controller
//! association built on them (bring-up, admin commands, I/O, discovery).
//!
//! ```no_run
//! # async fn example() -> Result<(), fabrik_initiator::HostError> {
//! use fabrik_initiator::{ConnectOptions, Controller};
//! let opts = ConnectOptions::new("127.0.0.1:4420".parse().unwrap(), "nqn.2024-01.io.fabrik:box:drive-00");
//! let ctrl = Controller::connect(opts).await?;
//! let data = ctrl.read(1, 0, 8).await?;
//! ctrl.shutdown().await?;
//! # Ok(()) }
//! ```

pub mod bench;
pub mod command_name;
pub mod error;
pub mod gpu;
pub mod host;
pub mod int_map;
pub mod placement;
pub mod topology;
pub mod transport;

pub use error::HostError;
pub use fabrik_proto as proto;
pub use host::{
    discover, discover_all, discover_with, ConnectOptions, Controller, DiscoveryLog, HostIdentity,
    IoQueue, OfferedSubsystem, Transport,
};
pub use transport::Completion;
