//! The host's end of a transaction (see the parent module).

use crate::auth::message::{explanation, Message, Offer, REASON_FAILED};
use crate::auth::{
    augmented_challenge, controller_response, host_response, same_response, DhGroup, HashId,
    Random, Secret,
};

/// What the host uses: its secret, the controller's secret if it authenticates the controller,
/// the NQNs, and what it offers.
#[derive(Clone, Debug)]
pub struct HostKeys {
    pub host: Secret,
    pub ctrl: Option<Secret>,
    pub hostnqn: String,
    pub subnqn: String,
}

/// Why the host's side of a transaction failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HostAuthError {
    #[error("the controller refused authentication ({0})")]
    Refused(&'static str),
    #[error("the controller's message is malformed: {0}")]
    Malformed(String),
    #[error("the controller answered with {0} out of order")]
    OutOfOrder(&'static str),
    #[error(
        "the controller's response does not match its secret (controller authentication failed)"
    )]
    ControllerMismatch,
    #[error("the controller chose a {0} the host did not offer")]
    NotOffered(&'static str),
}

/// The host's end of one queue's transaction.
pub struct HostAuth {
    keys: HostKeys,
    t_id: u16,
    offer: Offer,
    /// After the Reply: the expected R2 (bidirectional), and the hash length.
    expect: Option<(Option<Vec<u8>>, usize)>,
    seqnum: u32,
}

/// What the host does next.
#[derive(Debug)]
pub enum HostStep {
    /// Send this and receive the controller's next message.
    Send(Message),
    /// Send this (Success2); the queue is authenticated.
    SendAndDone(Message),
    /// The queue is authenticated.
    Done,
    /// Authentication failed; send the Failure2 if there is one, then give up on the queue.
    Failed(Option<Message>, HostAuthError),
}

impl HostAuth {
    pub fn new(keys: HostKeys, t_id: u16, random: &mut dyn Random) -> HostAuth {
        let mut s = [0u8; 4];
        random.fill(&mut s);
        HostAuth {
            keys,
            t_id,
            offer: Offer {
                hashes: HashId::ALL.iter().map(|h| h.id()).collect(),
                dhgroups: DhGroup::ALL.iter().map(|g| g.id()).collect(),
            },
            expect: None,
            seqnum: u32::from_le_bytes(s).max(1),
        }
    }

    /// Offers only these (tests, and a host configured to insist).
    pub fn offering(mut self, hashes: &[HashId], dhgroups: &[DhGroup]) -> HostAuth {
        self.offer = Offer {
            hashes: hashes.iter().map(|h| h.id()).collect(),
            dhgroups: dhgroups.iter().map(|g| g.id()).collect(),
        };
        self
    }

    /// The Negotiate that starts the transaction.
    pub fn negotiate(&self) -> Message {
        Message::Negotiate {
            t_id: self.t_id,
            sc_c: 0,
            dhchap: Some(self.offer.clone()),
        }
    }

    fn failure(&self, explanation: u8) -> Message {
        Message::Failure {
            t_id: self.t_id,
            from_host: true,
            reason: REASON_FAILED,
            explanation,
        }
    }

    /// Takes the controller's message (Authentication Receive).
    pub fn on_receive(&mut self, bytes: &[u8], random: &mut dyn Random) -> HostStep {
        let message = match Message::decode(bytes) {
            Ok(m) => m,
            Err(e) => {
                return HostStep::Failed(
                    Some(self.failure(explanation::INCORRECT_PAYLOAD)),
                    HostAuthError::Malformed(e.to_string()),
                )
            }
        };
        if let Message::Failure {
            from_host: false,
            explanation: why,
            ..
        } = message
        {
            return HostStep::Failed(None, HostAuthError::Refused(explanation_name(why)));
        }
        if message.t_id() != self.t_id {
            return HostStep::Failed(
                Some(self.failure(explanation::INCORRECT_PROTOCOL_MESSAGE)),
                HostAuthError::Malformed("wrong transaction ID".into()),
            );
        }
        match (message, self.expect.take()) {
            (
                Message::Challenge {
                    hash,
                    dhgroup,
                    seqnum,
                    challenge,
                    public,
                    ..
                },
                None,
            ) => {
                if !self.offer.hashes.contains(&hash.id()) {
                    return HostStep::Failed(
                        Some(self.failure(explanation::HASH_NOT_USABLE)),
                        HostAuthError::NotOffered("hash function"),
                    );
                }
                if !self.offer.dhgroups.contains(&dhgroup.id()) {
                    return HostStep::Failed(
                        Some(self.failure(explanation::DHGROUP_NOT_USABLE)),
                        HostAuthError::NotOffered("DH group"),
                    );
                }
                let (shared, mine) = match dhgroup.generate(random) {
                    None => (None, Vec::new()),
                    Some((k, p)) => match k.shared_secret(&public) {
                        Ok(z) => (Some(z), p),
                        Err(e) => {
                            return HostStep::Failed(
                                Some(self.failure(explanation::INCORRECT_PAYLOAD)),
                                HostAuthError::Malformed(e.to_string()),
                            )
                        }
                    },
                };
                let shared = shared.as_deref().map(|z| z.as_slice());
                let k = &self.keys;
                let ca1 = augmented_challenge(hash, &challenge, shared);
                let response = host_response(
                    hash,
                    &k.host.transformed(&k.hostnqn),
                    &ca1,
                    seqnum,
                    self.t_id,
                    &k.hostnqn,
                    &k.subnqn,
                );
                let (c2, r2) = match &k.ctrl {
                    None => (None, None),
                    Some(ctrl) => {
                        let mut c2 = vec![0u8; hash.len()];
                        random.fill(&mut c2);
                        let ca2 = augmented_challenge(hash, &c2, shared);
                        self.seqnum = self.seqnum.wrapping_add(1).max(1);
                        let r2 = controller_response(
                            hash,
                            &ctrl.transformed(&k.subnqn),
                            &ca2,
                            self.seqnum,
                            self.t_id,
                            &k.hostnqn,
                            &k.subnqn,
                        );
                        (Some(c2), Some(r2))
                    }
                };
                self.expect = Some((r2, hash.len()));
                HostStep::Send(Message::Reply {
                    t_id: self.t_id,
                    response,
                    challenge: c2,
                    seqnum: self.seqnum,
                    public: mine,
                })
            }
            (
                Message::Success1 {
                    hash_len, response, ..
                },
                Some((expected, len)),
            ) => {
                if hash_len as usize != len {
                    return HostStep::Failed(
                        Some(self.failure(explanation::INCORRECT_PAYLOAD)),
                        HostAuthError::Malformed("Success1's HL is not the hash's length".into()),
                    );
                }
                match (expected, response) {
                    (None, _) => HostStep::Done,
                    (Some(want), Some(got)) if same_response(&want, &got) => {
                        HostStep::SendAndDone(Message::Success2 { t_id: self.t_id })
                    }
                    _ => HostStep::Failed(
                        Some(self.failure(explanation::FAILED)),
                        HostAuthError::ControllerMismatch,
                    ),
                }
            }
            (m, _) => HostStep::Failed(
                Some(self.failure(explanation::INCORRECT_PROTOCOL_MESSAGE)),
                HostAuthError::OutOfOrder(m.name()),
            ),
        }
    }
}

/// A Failure explanation in words.
pub fn explanation_name(e: u8) -> &'static str {
    match e {
        explanation::FAILED => "authentication failed",
        explanation::PROTOCOL_NOT_USABLE => "protocol not usable",
        explanation::SECURE_CHANNEL_MISMATCH => "secure channel concatenation mismatch",
        explanation::HASH_NOT_USABLE => "hash function not usable",
        explanation::DHGROUP_NOT_USABLE => "DH group not usable",
        explanation::INCORRECT_PAYLOAD => "incorrect payload",
        explanation::INCORRECT_PROTOCOL_MESSAGE => "incorrect protocol message",
        _ => "unknown reason",
    }
}
