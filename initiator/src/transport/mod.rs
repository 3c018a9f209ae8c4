//! Transports: the host halves of the NVMe-oF bindings. Each one moves capsules and data for one
//! queue; NVMe meaning (status codes, command names, timeouts) lives in `host`.

pub mod peer;
#[cfg(feature = "rdma")]
pub mod rdma;
pub mod target;
pub mod tcp;

pub use tcp::{Completion, TcpQueue, TcpQueueConfig};
