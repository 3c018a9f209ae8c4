//! fabrik-rdma: owning wrappers over the raw rdma_cm and verbs objects, for both sides of
//! NVMe/RDMA (rdma-mummy-sys: libibverbs and librdmacm are loaded at run time, so binaries link
//! only libc). Everything unsafe about RDMA lives here; the queue logic in fabrikd and in the
//! host library works with these types and plain indices.
//!
//! Without the `verbs` feature the crate is empty, so `cargo build --workspace` works on a
//! machine without cmake and libclang (which rdma-mummy-sys needs to build).

#[cfg(feature = "verbs")]
mod cm;
#[cfg(feature = "verbs")]
mod cq;
#[cfg(feature = "verbs")]
mod mr;
#[cfg(feature = "verbs")]
mod qp;
#[cfg(feature = "verbs")]
mod util;

#[cfg(feature = "verbs")]
pub use cm::*;
#[cfg(feature = "verbs")]
pub use cq::{Completion, CompletionQueue};
#[cfg(feature = "verbs")]
pub use mr::ForeignRegion;
#[cfg(feature = "verbs")]
pub use qp::*;
#[cfg(feature = "verbs")]
pub use util::{check_devices, check_libraries, Raw};
