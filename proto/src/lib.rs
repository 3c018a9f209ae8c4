//! fabrik-proto: the NVMe, NVMe over Fabrics, NVMe/TCP and NVMe/RDMA wire formats, sans-IO.
//!
//! Pure data: typed structures, exhaustive validation on decode (a malformed input is a
//! [`DecodeError`], never a panic), encoders for both directions so the target and the host share
//! one definition of every byte. No sockets, no async.

pub mod auth;
pub mod error;
pub mod fabrics;
mod keytext;
mod le;
pub mod nvme;
pub mod rdma;
pub mod tcp;
pub mod tls;

pub use error::DecodeError;
pub use nvme::cqe::Cqe;
pub use nvme::sgl::SglDescriptor;
pub use nvme::sqe::Sqe;
pub use nvme::status::Status;
