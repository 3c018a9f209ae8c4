//! The two ends of a DH-HMAC-CHAP transaction, one per queue, as state machines: the target
//! feeds [`ControllerAuth`] what Authentication Send brings and answers Authentication Receive
//! with what it gives; the host drives [`HostAuth`] the other way.
//!
//! Controller:  Negotiate → (Challenge) → Reply → (Success1) → [Success2, bidirectional only]
//! A Negotiate at any time starts over (re-authentication); a queue already authenticated
//! stays so while it runs. Anything out of order or wrong ends in Failure1, after which the
//! target tears the association down, as Linux nvmet does.

use super::message::{explanation, Message, Offer, REASON_FAILED};
use super::{
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A repeatable byte stream for tests.
    pub(crate) struct Counter(pub u8);
    impl Random for Counter {
        fn fill(&mut self, buf: &mut [u8]) {
            for b in buf {
                self.0 = self.0.wrapping_mul(31).wrapping_add(7);
                *b = self.0;
            }
        }
    }

    const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:0f0e0d0c-0b0a-0908-0706-050403020100";
    const SUB: &str = "nqn.2024-01.io.fabrik:box:drive-00";

    fn secret(t: u8, b: u8) -> Secret {
        Secret::new(t, &[b; 32]).unwrap()
    }

    fn ctrl_keys(ctrl: Option<Secret>) -> ControllerKeys {
        ControllerKeys {
            host: secret(1, 1),
            ctrl,
            hostnqn: HOST.into(),
            subnqn: SUB.into(),
        }
    }

    fn host(host_secret: Secret, ctrl: Option<Secret>) -> HostAuth {
        HostAuth::new(
            HostKeys {
                host: host_secret,
                ctrl,
                hostnqn: HOST.into(),
                subnqn: SUB.into(),
            },
            3,
            &mut Counter(9),
        )
    }

    /// Runs a whole transaction in memory; the controller's outcome and the host's last step.
    fn run(
        mut h: HostAuth,
        c: &mut ControllerAuth,
        keys: Option<ControllerKeys>,
        policy: &Policy,
    ) -> (Progress, HostStep) {
        let mut rng = Counter(1);
        let mut out = h.negotiate();
        loop {
            let progress = c.on_send(&out.encode(), || keys.clone(), policy, &mut rng);
            if progress == Progress::Failed {
                return (progress, HostStep::Done);
            }
            let Some((answer, _)) = c.on_receive() else {
                return (progress, HostStep::Done);
            };
            match h.on_receive(&answer.encode(), &mut rng) {
                HostStep::Send(m) => out = m,
                HostStep::SendAndDone(m) => {
                    let p = c.on_send(&m.encode(), || None, policy, &mut rng);
                    return (p, HostStep::Done);
                }
                step => return (progress, step),
            }
        }
    }

    #[test]
    fn every_hash_and_group_authenticates_both_ways() {
        for hash in HashId::ALL {
            for group in [DhGroup::Null, DhGroup::Ffdhe2048, DhGroup::Ffdhe4096] {
                let policy = Policy {
                    hashes: vec![hash],
                    dhgroups: vec![group],
                };
                let mut c = ControllerAuth::new(&mut Counter(5));
                let (p, step) = run(
                    host(secret(1, 1), None),
                    &mut c,
                    Some(ctrl_keys(None)),
                    &policy,
                );
                assert_eq!(p, Progress::Authenticated, "{hash:?} {group:?}");
                assert!(matches!(step, HostStep::Done), "{step:?}");
                let mut c = ControllerAuth::new(&mut Counter(5));
                let (p, step) = run(
                    host(secret(1, 1), Some(secret(2, 2))),
                    &mut c,
                    Some(ctrl_keys(Some(secret(2, 2)))),
                    &policy,
                );
                assert_eq!(
                    p,
                    Progress::Authenticated,
                    "bidirectional {hash:?} {group:?}"
                );
                assert!(matches!(step, HostStep::Done), "{step:?}");
                assert!(!c.in_progress());
            }
        }
    }

    #[test]
    fn wrong_secrets_fail() {
        let policy = Policy::default();
        // The host's secret differs: Failure1 "authentication failed", and the association ends.
        let mut c = ControllerAuth::new(&mut Counter(5));
        let mut h = host(secret(1, 9), None);
        let mut rng = Counter(3);
        c.on_send(
            &h.negotiate().encode(),
            || Some(ctrl_keys(None)),
            &policy,
            &mut rng,
        );
        let (challenge, _) = c.on_receive().unwrap();
        let HostStep::Send(reply) = h.on_receive(&challenge.encode(), &mut rng) else {
            panic!()
        };
        assert_eq!(
            c.on_send(&reply.encode(), || None, &policy, &mut rng),
            Progress::Continue
        );
        let (failure, end) = c.on_receive().unwrap();
        assert!(end);
        assert!(matches!(
            failure,
            Message::Failure {
                from_host: false,
                explanation: explanation::FAILED,
                ..
            }
        ));
        let step = h.on_receive(&failure.encode(), &mut rng);
        assert!(matches!(
            step,
            HostStep::Failed(None, HostAuthError::Refused(_))
        ));

        // The controller proves the wrong secret: the host refuses it with Failure2.
        let mut c = ControllerAuth::new(&mut Counter(5));
        let (_, step) = run(
            host(secret(1, 1), Some(secret(2, 2))),
            &mut c,
            Some(ctrl_keys(Some(secret(2, 3)))),
            &policy,
        );
        assert!(matches!(
            step,
            HostStep::Failed(Some(_), HostAuthError::ControllerMismatch)
        ));

        // A host asks for the controller's proof where the controller has no secret.
        let mut c = ControllerAuth::new(&mut Counter(5));
        let (_, step) = run(
            host(secret(1, 1), Some(secret(2, 2))),
            &mut c,
            Some(ctrl_keys(None)),
            &policy,
        );
        assert!(matches!(
            step,
            HostStep::Failed(None, HostAuthError::Refused(_))
        ));

        // No secret for this host at all.
        let mut c = ControllerAuth::new(&mut Counter(5));
        let (_, step) = run(host(secret(1, 1), None), &mut c, None, &policy);
        assert!(matches!(
            step,
            HostStep::Failed(None, HostAuthError::Refused(_))
        ));
    }

    #[test]
    fn nothing_usable_and_out_of_order_fail() {
        let mut rng = Counter(3);
        let keys = || Some(ctrl_keys(None));
        let policy = Policy {
            hashes: vec![HashId::Sha256],
            dhgroups: vec![DhGroup::Null],
        };
        let expect_failure = |c: &mut ControllerAuth, why: u8| {
            let (m, end) = c.on_receive().unwrap();
            assert!(end);
            assert_eq!(
                m,
                Message::Failure {
                    t_id: 3,
                    from_host: false,
                    reason: REASON_FAILED,
                    explanation: why
                }
            );
        };
        let mut c = ControllerAuth::new(&mut rng);
        let h = host(secret(1, 1), None).offering(&[HashId::Sha512], &[DhGroup::Null]);
        c.on_send(&h.negotiate().encode(), keys, &policy, &mut rng);
        expect_failure(&mut c, explanation::HASH_NOT_USABLE);

        let h = host(secret(1, 1), None).offering(&[HashId::Sha256], &[DhGroup::Ffdhe2048]);
        c.on_send(&h.negotiate().encode(), keys, &policy, &mut rng);
        expect_failure(&mut c, explanation::DHGROUP_NOT_USABLE);

        // A Reply before any Negotiate.
        let reply = Message::Reply {
            t_id: 3,
            response: vec![0; 32],
            challenge: None,
            seqnum: 1,
            public: vec![],
        };
        c.on_send(&reply.encode(), keys, &policy, &mut rng);
        expect_failure(&mut c, explanation::INCORRECT_PROTOCOL_MESSAGE);

        // A Reply with another transaction ID.
        let h = host(secret(1, 1), None);
        c.on_send(&h.negotiate().encode(), keys, &policy, &mut rng);
        c.on_receive().unwrap();
        let Message::Reply { .. } = reply else {
            unreachable!()
        };
        let mut wrong = reply.encode();
        wrong[4] = 99;
        c.on_send(&wrong, keys, &policy, &mut rng);
        let (m, end) = c.on_receive().unwrap();
        assert!(
            end && matches!(
                m,
                Message::Failure {
                    explanation: explanation::INCORRECT_PROTOCOL_MESSAGE,
                    ..
                }
            )
        );

        // Truncated bytes: incorrect payload. Secure channel concatenation asked: refused.
        c.on_send(&h.negotiate().encode()[..20], keys, &policy, &mut rng);
        expect_failure(&mut c, explanation::INCORRECT_PAYLOAD);
        let Message::Negotiate { dhchap, .. } = h.negotiate() else {
            unreachable!()
        };
        let scc = Message::Negotiate {
            t_id: 3,
            sc_c: 1,
            dhchap,
        };
        c.on_send(&scc.encode(), keys, &policy, &mut rng);
        expect_failure(&mut c, explanation::SECURE_CHANNEL_MISMATCH);

        // Nothing due: a Receive gets nothing.
        assert!(c.on_receive().is_none());
    }

    /// A replayed Reply (from an earlier transaction) does not authenticate a new one.
    #[test]
    fn replayed_reply_fails() {
        let policy = Policy::default();
        let mut rng = Counter(3);
        let mut c = ControllerAuth::new(&mut rng);
        let mut h = host(secret(1, 1), None);
        c.on_send(
            &h.negotiate().encode(),
            || Some(ctrl_keys(None)),
            &policy,
            &mut rng,
        );
        let (ch, _) = c.on_receive().unwrap();
        let HostStep::Send(reply) = h.on_receive(&ch.encode(), &mut rng) else {
            panic!()
        };
        assert_eq!(
            c.on_send(&reply.encode(), || None, &policy, &mut rng),
            Progress::Authenticated
        );
        c.on_receive().unwrap();
        // Re-authentication: a new Negotiate, and the old Reply sent again.
        c.on_send(
            &h.negotiate().encode(),
            || Some(ctrl_keys(None)),
            &policy,
            &mut rng,
        );
        c.on_receive().unwrap();
        assert_eq!(
            c.on_send(&reply.encode(), || None, &policy, &mut rng),
            Progress::Continue
        );
        let (m, end) = c.on_receive().unwrap();
        assert!(
            end && matches!(
                m,
                Message::Failure {
                    explanation: explanation::FAILED,
                    ..
                }
            )
        );
    }
}
