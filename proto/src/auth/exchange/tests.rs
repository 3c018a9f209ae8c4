//! Both ends of a transaction against each other, in memory.

use super::*;
use crate::auth::message::{explanation, Message, REASON_FAILED};
use crate::auth::{DhGroup, HashId, Random, Secret};

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
