//! Transports: the host halves of the NVMe-oF bindings. Each one moves capsules and data for one
//! queue; NVMe meaning (status codes, command names, timeouts) lives in `host`.

pub mod completions;
pub mod peer;
#[cfg(feature = "rdma")]
pub mod rdma;
pub mod target;
pub mod tcp;

pub use completions::{AnswerTo, CompletionQueue, Tagged};
pub use tcp::{Completion, TcpQueue, TcpQueueConfig};

use crate::command_name::command_name;
use crate::error::HostError;
use fabrik_proto::Sqe;

/// A completion with a non-success status as `HostError::Status`, naming the command.
pub(crate) fn checked(
    qid: u16,
    sqe: &Sqe,
    completion: Result<Completion, HostError>,
) -> Result<Completion, HostError> {
    let completion = completion?;
    let status = completion.cqe.status;
    if !status.is_success() {
        return Err(HostError::Status {
            status,
            command: command_name(qid, sqe),
            qid,
            result: completion.cqe.dw0(),
        });
    }
    Ok(completion)
}
