//! In-band authentication (DH-HMAC-CHAP) of a queue, right after its Connect, when the
//! controller asks for it (ATR): `fabrik_proto::auth::HostAuth` driven over Authentication Send
//! and Receive, as the Linux host does it.

use bytes::Bytes;
use fabrik_proto::fabrics::FabricsCommand;

use crate::error::HostError;
use crate::host::options::ConnectOptions;
use crate::host::queue::Queue;

/// AUTHREQ's ASCR bit (DW0 bit 18): secure channel concatenation (TLS after DH-HMAC-CHAP).
pub(super) const ASCR: u32 = 1 << 18;

/// What a queue needs to authenticate: the host's secrets and NQN.
pub(super) struct Authentication<'a> {
    opts: &'a ConnectOptions,
}

impl<'a> Authentication<'a> {
    pub(super) fn new(opts: &'a ConnectOptions) -> Authentication<'a> {
        Authentication { opts }
    }

    /// One DH-HMAC-CHAP transaction on `queue`, as the Linux host runs it: Negotiate, Challenge,
    /// Reply, Success1, and Success2 when it authenticates the controller too.
    pub(super) async fn run(&self, queue: &Queue, subnqn: &str) -> Result<(), HostError> {
        use fabrik_proto::auth::exchange::{HostKeys, HostStep};
        use fabrik_proto::auth::{HostAuth, Message, OsRandom};
        let qid = queue.qid();
        let Some(secret) = &self.opts.dhchap_secret else {
            return Err(HostError::Authentication {
                qid,
                reason: format!(
                    "the controller of {subnqn} requires it and no secret was given (--dhchap-secret)"
                ),
            });
        };
        let keys = HostKeys {
            host: secret.clone(),
            ctrl: self.opts.dhchap_ctrl_secret.clone(),
            hostnqn: self.opts.hostnqn.clone(),
            subnqn: subnqn.to_string(),
        };
        let mut host = HostAuth::new(keys, qid, &mut OsRandom);
        let send = async |m: Message| -> Result<(), HostError> {
            let bytes = m.encode();
            let sqe = FabricsCommand::AuthSend {
                secp: fabrik_proto::auth::SECP,
                spsp: [fabrik_proto::auth::SPSP; 2],
                len: bytes.len() as u32,
            }
            .to_sqe(0);
            queue
                .submit(sqe, Some(Bytes::from(bytes)), 0)
                .await
                .map(|_| ())
        };
        let receive = async || -> Result<Bytes, HostError> {
            let sqe = FabricsCommand::AuthReceive {
                secp: fabrik_proto::auth::SECP,
                spsp: [fabrik_proto::auth::SPSP; 2],
                len: AUTH_RECEIVE_LEN as u32,
            }
            .to_sqe(0);
            Ok(queue.submit(sqe, None, AUTH_RECEIVE_LEN).await?.data)
        };
        send(host.negotiate()).await?;
        loop {
            let answer = receive().await?;
            match host.on_receive(&answer, &mut OsRandom) {
                HostStep::Send(m) => send(m).await?,
                HostStep::SendAndDone(m) => return send(m).await,
                HostStep::Done => return Ok(()),
                HostStep::Failed(failure, why) => {
                    if let Some(m) = failure {
                        let _ = send(m).await;
                    }
                    return Err(HostError::Authentication {
                        qid,
                        reason: why.to_string(),
                    });
                }
            }
        }
    }
}

/// Bytes an Authentication Receive asks for (the Linux host's buffer).
const AUTH_RECEIVE_LEN: usize = 4096;
