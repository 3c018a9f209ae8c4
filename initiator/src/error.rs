//! The host's one error type: what went wrong, said in NVMe terms.

use std::sync::Arc;
use std::time::Duration;

use fabrik_proto::Status;

/// Why a host operation failed.
///
/// It is `Clone` because one transport failure fails every command in flight on that queue;
/// each waiting caller gets its own copy.
#[derive(Debug, Clone, thiserror::Error)]
pub enum HostError {
    /// The controller completed the command with an error status. `result` is the completion's
    /// dword 0 (for Connect Invalid Parameters: IATTR bit 16, IPO 15:0).
    #[error("{command} on queue {qid} failed: {status}{}", result_text(*.result))]
    Status {
        status: Status,
        command: String,
        qid: u16,
        result: u32,
    },

    /// The socket failed (connect refused, reset, ...). The I/O error is in the message, not
    /// chained as a source, so it is printed once.
    #[error("{context}: {error}")]
    Io {
        context: String,
        error: Arc<std::io::Error>,
    },

    /// The target closed the connection of queue `qid`.
    #[error("queue {qid}: the target closed the connection")]
    ConnectionClosed { qid: u16 },

    /// The target broke the NVMe/TCP or NVMe rules (bad PDU, unknown command id, wrong data
    /// offsets, a bad Identify structure...). Like the Linux host, the queue is torn down.
    #[error("queue {qid}: protocol violation by the target: {reason}")]
    Protocol { qid: u16, reason: String },

    /// The target ended the connection with a C2HTermReq.
    #[error("queue {qid}: the target terminated the connection (C2HTermReq FES {fes:#x}: {}, FEI {fei})", fes_name(*.fes))]
    Terminated { qid: u16, fes: u16, fei: u32 },

    /// A C2HData PDU's data digest did not match; the command's data is not trustworthy.
    #[error("queue {qid}: {command}: data digest mismatch in the data from the target")]
    DataDigest { qid: u16, command: String },

    /// No completion arrived in time; the queue is torn down (its state is unknown).
    #[error("queue {qid}: {command} timed out after {after:?}")]
    Timeout {
        qid: u16,
        command: String,
        after: Duration,
    },

    /// The queue was closed earlier (by `shutdown` or a previous failure).
    #[error("queue {qid} is closed: {reason}")]
    QueueClosed { qid: u16, reason: String },

    /// The queue's NIC could not register caller memory for direct (peer) transfers; `reason`
    /// lists every way tried and why each failed. NVMe/TCP queues give this too.
    #[error("NIC {nic} cannot register GPU memory: {reason}")]
    PeerMemory { nic: String, reason: String },

    /// The GPU driver failed (allocation, copy, pinning...).
    #[error("GPU: {0}")]
    Gpu(String),

    /// In-band authentication (DH-HMAC-CHAP) of a queue failed: the secrets do not match, or
    /// the controller asks for it and no secret was given.
    #[error("queue {qid}: DH-HMAC-CHAP authentication failed: {reason}")]
    Authentication { qid: u16, reason: String },

    /// The TLS handshake of queue `qid` failed (the target has no key for this host's
    /// identity, or another one).
    #[error("queue {qid}: TLS handshake failed: {reason}")]
    Tls { qid: u16, reason: String },

    /// The caller asked for something this host cannot do (bad NQN, no such queue...).
    #[error("invalid request: {0}")]
    Invalid(String),
}

impl From<crate::gpu::GpuError> for HostError {
    fn from(e: crate::gpu::GpuError) -> HostError {
        HostError::Gpu(e.0)
    }
}

impl HostError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> HostError {
        HostError::Io {
            context: context.into(),
            error: Arc::new(source),
        }
    }

    pub(crate) fn protocol(qid: u16, reason: impl Into<String>) -> HostError {
        HostError::Protocol {
            qid,
            reason: reason.into(),
        }
    }

    /// The NVMe status, if the controller answered with one.
    pub fn status(&self) -> Option<Status> {
        match self {
            HostError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Completion dword 0 of a failed command (e.g. IATTR/IPO of a failed Connect).
    pub fn result(&self) -> Option<u32> {
        match self {
            HostError::Status { result, .. } => Some(*result),
            _ => None,
        }
    }
}

fn result_text(result: u32) -> String {
    if result == 0 {
        String::new()
    } else {
        format!(" (result {result:#010x})")
    }
}

/// The spec's name of a termination request's Fatal Error Status.
pub fn fes_name(fes: u16) -> &'static str {
    use fabrik_proto::tcp::fes;
    match fes {
        fes::INVALID_HEADER_FIELD => "Invalid PDU Header Field",
        fes::PDU_SEQUENCE_ERROR => "PDU Sequence Error",
        fes::HEADER_DIGEST_ERROR => "Header Digest Error",
        fes::DATA_OUT_OF_RANGE => "Data Transfer Out of Range",
        fes::DATA_LIMIT_EXCEEDED => "Data Transfer Limit Exceeded",
        fes::UNSUPPORTED_PARAMETER => "Unsupported Parameter",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_memory_error_names_the_nic_and_what_was_tried() {
        let err = HostError::PeerMemory {
            nic: "mlx5_2".into(),
            reason: "dma-buf: ibv_reg_dmabuf_mr: Operation not supported (os error 95); \
                     pointer: this memory cannot be registered by pointer"
                .into(),
        };
        assert_eq!(
            err.to_string(),
            "NIC mlx5_2 cannot register GPU memory: dma-buf: ibv_reg_dmabuf_mr: Operation not \
             supported (os error 95); pointer: this memory cannot be registered by pointer"
        );
    }
}
