//! NVMe/RDMA (the RDMA transport binding). Capsules are plain SQEs and CQEs and data moves by
//! keyed SGLs (`nvme::sgl`); what is RDMA's own is connection setup: the rdma_cm private data.

pub mod cm;

pub use cm::{CmAccept, CmReject, CmRequest, RejectStatus};
