//! The controller's end of a transaction (see the parent module).

use crate::auth::message::{explanation, Message, Offer, REASON_FAILED};
use crate::auth::{
    augmented_challenge, controller_response, host_response, same_response, DhGroup, HashId,
    PrivateKey, Random, Secret,
};

/// What the controller uses to check one host: its secrets and the two NQNs.
#[derive(Clone, Debug)]
pub struct ControllerKeys {
    /// The host's secret (DH-HMAC-CHAP key), transformed with the host NQN.
    pub host: Secret,
    /// The controller's secret, for hosts that authenticate the controller too.
    pub ctrl: Option<Secret>,
    pub hostnqn: String,
    pub subnqn: String,
}

/// Which hash functions and DH groups the controller accepts, most preferred first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    pub hashes: Vec<HashId>,
    pub dhgroups: Vec<DhGroup>,
}

impl Default for Policy {
    /// The strongest hash the host offers, and ffdhe2048 before the others: a DH exchange on
    /// every queue of every connect, and the cheapest group that has one.
    fn default() -> Policy {
        Policy {
            hashes: vec![HashId::Sha512, HashId::Sha384, HashId::Sha256],
            dhgroups: vec![
                DhGroup::Ffdhe2048,
                DhGroup::Ffdhe3072,
                DhGroup::Ffdhe4096,
                DhGroup::Ffdhe6144,
                DhGroup::Ffdhe8192,
                DhGroup::Null,
            ],
        }
    }
}

enum Step {
    /// Nothing under way.
    Idle,
    /// The Challenge is ready for the host's next Authentication Receive.
    Challenge(Box<Pending>),
    /// The Challenge went out; the Reply is awaited.
    AwaitReply(Box<Pending>),
    /// Success1 is ready; `bidirectional`: Success2 comes after it.
    Success1 {
        message: Message,
        bidirectional: bool,
    },
    AwaitSuccess2 {
        t_id: u16,
    },
    /// Failure1 is ready; the association ends once it is sent.
    Failure1(Message),
    /// Failure1 went out, or the host sent Failure2: the association must end.
    Failed,
}

struct Pending {
    t_id: u16,
    hash: HashId,
    dhgroup: DhGroup,
    seqnum: u32,
    challenge: Vec<u8>,
    public: Vec<u8>,
    private: Option<PrivateKey>,
    keys: ControllerKeys,
}

/// What the queue does after a message from the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// The transaction goes on: the host's next Authentication Receive gets the answer.
    Continue,
    /// The host is authenticated (and the controller, if it asked): the queue may run commands.
    Authenticated,
    /// The host gave up (Failure2): the association must end.
    Failed,
}

/// The controller's end of one queue's transaction.
pub struct ControllerAuth {
    step: Step,
    /// S1 of the next Challenge: a running count, started at random, never 0.
    seqnum: u32,
}

impl ControllerAuth {
    pub fn new(random: &mut dyn Random) -> ControllerAuth {
        let mut s = [0u8; 4];
        random.fill(&mut s);
        ControllerAuth {
            step: Step::Idle,
            seqnum: u32::from_le_bytes(s),
        }
    }

    /// Takes what the host sent (Authentication Send). `keys` are looked up for the host when
    /// a transaction starts (None: it has no secret here, and fails).
    pub fn on_send(
        &mut self,
        bytes: &[u8],
        keys: impl FnOnce() -> Option<ControllerKeys>,
        policy: &Policy,
        random: &mut dyn Random,
    ) -> Progress {
        let message = match Message::decode(bytes) {
            Ok(m) => m,
            Err(_) => {
                let t_id = bytes
                    .get(4..6)
                    .map_or(0, |b| u16::from_le_bytes([b[0], b[1]]));
                return self.fail(t_id, explanation::INCORRECT_PAYLOAD);
            }
        };
        let t_id = message.t_id();
        match message {
            Message::Negotiate { sc_c, dhchap, .. } => {
                self.negotiate(t_id, sc_c, dhchap, keys, policy, random)
            }
            Message::Reply {
                response,
                challenge,
                seqnum,
                public,
                ..
            } => {
                let Step::AwaitReply(p) = std::mem::replace(&mut self.step, Step::Idle) else {
                    return self.fail(t_id, explanation::INCORRECT_PROTOCOL_MESSAGE);
                };
                if t_id != p.t_id {
                    return self.fail(t_id, explanation::INCORRECT_PROTOCOL_MESSAGE);
                }
                if response.len() != p.hash.len() || public.len() != p.dhgroup.public_len() {
                    return self.fail(t_id, explanation::INCORRECT_PAYLOAD);
                }
                let shared = match &p.private {
                    None => None,
                    Some(k) => match k.shared_secret(&public) {
                        Ok(z) => Some(z),
                        Err(_) => return self.fail(t_id, explanation::INCORRECT_PAYLOAD),
                    },
                };
                let shared = shared.as_deref().map(|z| z.as_slice());
                let ca1 = augmented_challenge(p.hash, &p.challenge, shared);
                let expected = host_response(
                    p.hash,
                    &p.keys.host.transformed(&p.keys.hostnqn),
                    &ca1,
                    p.seqnum,
                    t_id,
                    &p.keys.hostnqn,
                    &p.keys.subnqn,
                );
                if !same_response(&expected, &response) {
                    return self.fail(t_id, explanation::FAILED);
                }
                let r2 = match challenge {
                    None => None,
                    Some(c2) => {
                        let Some(ctrl) = &p.keys.ctrl else {
                            // The host wants the controller to prove a secret it does not have.
                            return self.fail(t_id, explanation::FAILED);
                        };
                        let ca2 = augmented_challenge(p.hash, &c2, shared);
                        Some(controller_response(
                            p.hash,
                            &ctrl.transformed(&p.keys.subnqn),
                            &ca2,
                            seqnum,
                            t_id,
                            &p.keys.hostnqn,
                            &p.keys.subnqn,
                        ))
                    }
                };
                let bidirectional = r2.is_some();
                self.step = Step::Success1 {
                    message: Message::Success1 {
                        t_id,
                        hash_len: p.hash.len() as u8,
                        response: r2,
                    },
                    bidirectional,
                };
                if bidirectional {
                    Progress::Continue
                } else {
                    Progress::Authenticated
                }
            }
            Message::Success2 { .. } => match self.step {
                Step::AwaitSuccess2 { t_id: want } if want == t_id => {
                    self.step = Step::Idle;
                    Progress::Authenticated
                }
                _ => self.fail(t_id, explanation::INCORRECT_PROTOCOL_MESSAGE),
            },
            Message::Failure {
                from_host: true, ..
            } => {
                self.step = Step::Failed;
                Progress::Failed
            }
            _ => self.fail(t_id, explanation::INCORRECT_PROTOCOL_MESSAGE),
        }
    }

    fn negotiate(
        &mut self,
        t_id: u16,
        sc_c: u8,
        offer: Option<Offer>,
        keys: impl FnOnce() -> Option<ControllerKeys>,
        policy: &Policy,
        random: &mut dyn Random,
    ) -> Progress {
        if sc_c != 0 {
            return self.fail(t_id, explanation::SECURE_CHANNEL_MISMATCH);
        }
        let Some(offer) = offer else {
            return self.fail(t_id, explanation::PROTOCOL_NOT_USABLE);
        };
        let Some(hash) = policy
            .hashes
            .iter()
            .copied()
            .find(|h| offer.hashes.contains(&h.id()))
        else {
            return self.fail(t_id, explanation::HASH_NOT_USABLE);
        };
        let Some(dhgroup) = policy
            .dhgroups
            .iter()
            .copied()
            .find(|g| offer.dhgroups.contains(&g.id()))
        else {
            return self.fail(t_id, explanation::DHGROUP_NOT_USABLE);
        };
        let Some(keys) = keys() else {
            return self.fail(t_id, explanation::FAILED);
        };
        self.seqnum = self.seqnum.wrapping_add(1).max(1);
        let mut challenge = vec![0u8; hash.len()];
        random.fill(&mut challenge);
        let (private, public) = match dhgroup.generate(random) {
            Some((k, p)) => (Some(k), p),
            None => (None, Vec::new()),
        };
        self.step = Step::Challenge(Box::new(Pending {
            t_id,
            hash,
            dhgroup,
            seqnum: self.seqnum,
            challenge,
            public,
            private,
            keys,
        }));
        Progress::Continue
    }

    fn fail(&mut self, t_id: u16, explanation: u8) -> Progress {
        self.step = Step::Failure1(Message::Failure {
            t_id,
            from_host: false,
            reason: REASON_FAILED,
            explanation,
        });
        Progress::Continue
    }

    /// What the host's Authentication Receive gets, and whether the association must end once
    /// it is sent (after Failure1). None: nothing is due (a Receive out of order).
    pub fn on_receive(&mut self) -> Option<(Message, bool)> {
        match std::mem::replace(&mut self.step, Step::Idle) {
            Step::Challenge(p) => {
                let m = Message::Challenge {
                    t_id: p.t_id,
                    hash: p.hash,
                    dhgroup: p.dhgroup,
                    seqnum: p.seqnum,
                    challenge: p.challenge.clone(),
                    public: p.public.clone(),
                };
                self.step = Step::AwaitReply(p);
                Some((m, false))
            }
            Step::Success1 {
                message,
                bidirectional,
            } => {
                if bidirectional {
                    self.step = Step::AwaitSuccess2 {
                        t_id: message.t_id(),
                    };
                }
                Some((message, false))
            }
            Step::Failure1(m) => {
                self.step = Step::Failed;
                Some((m, true))
            }
            other => {
                self.step = other;
                None
            }
        }
    }

    /// A transaction is under way (started and not finished).
    pub fn in_progress(&self) -> bool {
        !matches!(self.step, Step::Idle | Step::Failed)
    }
}
