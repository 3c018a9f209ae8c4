//! One queue of a controller, as the host layer sees it: commands in, completions checked and
//! named in NVMe terms out, a timeout on every command (kept by the transport queue).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use fabrik_proto::Sqe;

use super::Transport;
pub use crate::command_name::command_name;
use crate::error::HostError;
use crate::transport::peer::{PeerMemory, Registration};
#[cfg(feature = "rdma")]
use crate::transport::rdma::RdmaQueue;
use crate::transport::target::RecvTarget;
use crate::transport::{checked, AnswerTo, Completion, TcpQueue, TcpQueueConfig};

/// In-capsule data limit of the admin queue (`NVME_TCP_ADMIN_CCSZ`, NVMEOF-FACTS 1.6).
pub const ADMIN_IN_CAPSULE_LIMIT: usize = 8192;

/// The transport queue under a host queue.
enum TransportQueue {
    Tcp(TcpQueue),
    #[cfg(feature = "rdma")]
    Rdma(RdmaQueue),
}

pub struct Queue {
    transport: TransportQueue,
    /// Largest write sent in-capsule (NVMe/TCP); bigger ones go through R2T.
    in_capsule_limit: usize,
    /// Command timeout of an NVMe/RDMA queue (an NVMe/TCP queue keeps it itself).
    #[cfg(feature = "rdma")]
    timeout: Duration,
}

impl Queue {
    /// Connects one queue over `transport`; `config` gives its QID and depth (and the NVMe/TCP
    /// settings, which NVMe/RDMA ignores).
    pub async fn connect(
        transport: Transport,
        addr: SocketAddr,
        config: TcpQueueConfig,
        in_capsule_limit: usize,
        timeout: Duration,
    ) -> Result<Queue, HostError> {
        let transport = match transport {
            Transport::Tcp => {
                let config = TcpQueueConfig {
                    command_timeout: Some(timeout),
                    ..config
                };
                TransportQueue::Tcp(TcpQueue::connect(addr, config).await?)
            }
            #[cfg(feature = "rdma")]
            Transport::Rdma => {
                if let Some(iface) = &config.host_iface {
                    // As the Linux host: host_iface is an NVMe/TCP option only.
                    return Err(HostError::Invalid(format!(
                        "host interface {iface:?}: NVMe/RDMA binds by host address only"
                    )));
                }
                TransportQueue::Rdma(
                    RdmaQueue::connect(config.host_traddr, addr, config.qid, config.depth).await?,
                )
            }
            #[cfg(not(feature = "rdma"))]
            Transport::Rdma => {
                return Err(HostError::Invalid(
                    "RDMA unavailable: this build has no `rdma` feature".into(),
                ))
            }
        };
        Ok(Queue {
            transport,
            in_capsule_limit,
            #[cfg(feature = "rdma")]
            timeout,
        })
    }

    pub fn qid(&self) -> u16 {
        match &self.transport {
            TransportQueue::Tcp(t) => t.qid(),
            #[cfg(feature = "rdma")]
            TransportQueue::Rdma(r) => r.qid(),
        }
    }

    /// The most data one command may move on this transport (None: no limit below MDTS).
    pub fn max_command_data(&self) -> Option<usize> {
        match &self.transport {
            TransportQueue::Tcp(_) => None,
            #[cfg(feature = "rdma")]
            TransportQueue::Rdma(_) => Some(crate::transport::rdma::SLOT_DATA),
        }
    }

    /// The most data one peer-memory command may move on this transport (None: no limit
    /// below MDTS; NVMe/TCP has no peer transfers at all).
    pub fn max_peer_command_data(&self) -> Option<usize> {
        match &self.transport {
            TransportQueue::Tcp(_) => None,
            #[cfg(feature = "rdma")]
            TransportQueue::Rdma(_) => Some(crate::transport::rdma::PEER_DATA_MAX),
        }
    }

    /// The NIC an NVMe/RDMA queue runs on ("mlx5_2"); None for NVMe/TCP.
    pub fn nic(&self) -> Option<&str> {
        match &self.transport {
            TransportQueue::Tcp(_) => None,
            #[cfg(feature = "rdma")]
            TransportQueue::Rdma(r) => Some(r.nic()),
        }
    }

    /// Registers `mem` for peer transfers on this queue's NIC (see `RdmaQueue::register`).
    pub async fn register_peer(
        &self,
        mem: &Arc<dyn PeerMemory>,
    ) -> Result<Registration, HostError> {
        match &self.transport {
            TransportQueue::Tcp(_) => {
                let _ = mem;
                Err(no_peer_memory_over_tcp())
            }
            #[cfg(feature = "rdma")]
            TransportQueue::Rdma(r) => r.register(mem).await,
        }
    }

    /// As `submit`, for a command whose data moves straight between the target and `len`
    /// bytes at `offset` in `mem` (see `RdmaQueue::submit_peer`). NVMe/RDMA only.
    pub async fn submit_peer(
        &self,
        sqe: Sqe,
        mem: &Arc<dyn PeerMemory>,
        offset: usize,
        len: usize,
        host_to_target: bool,
    ) -> Result<Completion, HostError> {
        let completion = match &self.transport {
            TransportQueue::Tcp(_) => {
                let _ = (mem, offset, len, host_to_target);
                Err(no_peer_memory_over_tcp())
            }
            #[cfg(feature = "rdma")]
            TransportQueue::Rdma(r) => {
                let submit = r.submit_peer(sqe, mem, offset, len, host_to_target);
                self.rdma_timed(r, &sqe, submit).await
            }
        };
        checked(self.qid(), &sqe, completion)
    }

    /// The largest write data the target takes in one piece: NVMe/TCP's MAXH2CDATA; NVMe/RDMA
    /// has no such limit below a command's own.
    pub fn maxh2cdata(&self) -> u32 {
        match &self.transport {
            TransportQueue::Tcp(t) => t.maxh2cdata(),
            #[cfg(feature = "rdma")]
            TransportQueue::Rdma(_) => crate::transport::rdma::SLOT_DATA as u32,
        }
    }

    /// Sends a command and waits for it; a non-success status is `HostError::Status` naming the
    /// command. On timeout the queue is torn down: its state is unknown (as the Linux host).
    pub async fn submit(
        &self,
        sqe: Sqe,
        data_out: Option<Bytes>,
        data_in_len: usize,
    ) -> Result<Completion, HostError> {
        let completion = match &self.transport {
            TransportQueue::Tcp(t) => {
                t.submit(sqe, data_out, data_in_len, self.in_capsule_limit)
                    .await
            }
            #[cfg(feature = "rdma")]
            TransportQueue::Rdma(r) => {
                let submit = r.submit(sqe, data_out, data_in_len);
                self.rdma_timed(r, &sqe, submit).await
            }
        };
        checked(self.qid(), &sqe, completion)
    }

    /// As `submit`, for a command reading `len` bytes into `buf` (see `TcpQueue::submit_into` and
    /// `RdmaQueue::submit_into`).
    pub async fn submit_into(
        &self,
        sqe: Sqe,
        buf: BytesMut,
        len: usize,
    ) -> Result<Completion, HostError> {
        let completion = match &self.transport {
            TransportQueue::Tcp(t) => t.submit_into(sqe, buf, len).await,
            #[cfg(feature = "rdma")]
            TransportQueue::Rdma(r) => {
                let submit = r.submit_into(sqe, buf, len);
                self.rdma_timed(r, &sqe, submit).await
            }
        };
        checked(self.qid(), &sqe, completion)
    }

    /// As `submit`, the answer going where `answer` says (`TcpQueue::start`). Gives
    /// `data_out` back if this transport answers through futures only (NVMe/RDMA, for now).
    pub fn start(
        &self,
        sqe: Sqe,
        data_out: Option<Bytes>,
        data_in_len: usize,
        answer: AnswerTo<'_>,
    ) -> Result<(), Option<Bytes>> {
        match &self.transport {
            TransportQueue::Tcp(t) => {
                t.start(sqe, data_out, data_in_len, self.in_capsule_limit, answer);
                Ok(())
            }
            #[cfg(feature = "rdma")]
            TransportQueue::Rdma(_) => Err(data_out),
        }
    }

    /// As `submit_into`, the answer going where `answer` says (see `start`).
    pub fn start_into(
        &self,
        sqe: Sqe,
        buf: BytesMut,
        len: usize,
        answer: AnswerTo<'_>,
    ) -> Result<(), BytesMut> {
        match &self.transport {
            TransportQueue::Tcp(t) => {
                t.start_into(sqe, buf, len, answer);
                Ok(())
            }
            #[cfg(feature = "rdma")]
            TransportQueue::Rdma(_) => Err(buf),
        }
    }

    /// As `submit_to`, the answer going where `answer` says (see `start`). False if this
    /// transport answers through futures only: nothing was started.
    pub fn start_to(&self, sqe: Sqe, target: &RecvTarget, answer: AnswerTo<'_>) -> bool {
        match &self.transport {
            TransportQueue::Tcp(t) => {
                t.start_to(sqe, target.clone(), answer);
                true
            }
            #[cfg(feature = "rdma")]
            TransportQueue::Rdma(_) => false,
        }
    }

    /// As `submit`, for a command reading `target.len()` bytes into `target` (see
    /// `TcpQueue::submit_to`).
    pub async fn submit_to(&self, sqe: Sqe, target: RecvTarget) -> Result<Completion, HostError> {
        let completion = match &self.transport {
            TransportQueue::Tcp(t) => t.submit_to(sqe, target).await,
            #[cfg(feature = "rdma")]
            TransportQueue::Rdma(r) => {
                let submit = r.submit_to(sqe, target);
                self.rdma_timed(r, &sqe, submit).await
            }
        };
        checked(self.qid(), &sqe, completion)
    }

    /// Waits for an NVMe/RDMA command up to the command timeout. (An NVMe/TCP queue keeps its
    /// commands' deadlines itself: `TcpQueueConfig::command_timeout`.)
    #[cfg(feature = "rdma")]
    async fn rdma_timed(
        &self,
        queue: &RdmaQueue,
        sqe: &Sqe,
        submit: impl std::future::Future<Output = Result<Completion, HostError>>,
    ) -> Result<Completion, HostError> {
        match tokio::time::timeout(self.timeout, submit).await {
            Ok(completion) => completion,
            Err(_) => {
                let err = HostError::Timeout {
                    qid: queue.qid(),
                    command: command_name(queue.qid(), sqe),
                    after: self.timeout,
                };
                queue.abort(err.clone());
                Err(err)
            }
        }
    }

    /// Sends a command and waits for its completion however long it takes (an Asynchronous
    /// Event Request completes only when an event happens); the status is not looked at.
    pub async fn submit_untimed(
        &self,
        sqe: Sqe,
        data_out: Option<Bytes>,
        data_in_len: usize,
    ) -> Result<Completion, HostError> {
        match &self.transport {
            TransportQueue::Tcp(t) => {
                t.submit_untimed(sqe, data_out, data_in_len, self.in_capsule_limit)
                    .await
            }
            #[cfg(feature = "rdma")]
            TransportQueue::Rdma(r) => r.submit(sqe, data_out, data_in_len).await,
        }
    }

    pub fn close(&self, reason: &str) {
        match &self.transport {
            TransportQueue::Tcp(t) => t.close(reason),
            #[cfg(feature = "rdma")]
            TransportQueue::Rdma(r) => r.close(reason),
        }
    }
}

/// Why an NVMe/TCP queue refuses peer memory.
fn no_peer_memory_over_tcp() -> HostError {
    HostError::PeerMemory {
        nic: "(NVMe/TCP)".into(),
        reason: "NVMe/TCP carries data in the byte stream, not by RDMA: peer memory needs an \
                 NVMe/RDMA connection"
            .into(),
    }
}
