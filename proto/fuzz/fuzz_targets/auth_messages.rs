//! DH-HMAC-CHAP: any bytes as one message (whatever decodes re-encodes to the same value),
//! and any sequence of messages fed to the controller's end of a transaction (never a panic,
//! never "authenticated" without the secret). Input: a config byte (bit 0: offer ffdhe2048
//! besides the null group), then messages, each a 2-byte little-endian length and its bytes.

#![no_main]

use fabrik_proto::auth::exchange::{ControllerKeys, Policy, Progress};
use fabrik_proto::auth::{ControllerAuth, DhGroup, HashId, Message, Random, Secret};
use libfuzzer_sys::fuzz_target;

struct Fixed(u8);
impl Random for Fixed {
    fn fill(&mut self, buf: &mut [u8]) {
        for b in buf {
            self.0 = self.0.wrapping_mul(29).wrapping_add(11);
            *b = self.0;
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = Message::decode(data) {
        let again = Message::decode(&m.encode()).expect("an encoded message decodes");
        assert_eq!(Message::decode(&again.encode()), Ok(again));
    }
    let Some((&config, mut rest)) = data.split_first() else {
        return;
    };
    let policy = Policy {
        hashes: HashId::ALL.to_vec(),
        dhgroups: if config & 1 != 0 {
            vec![DhGroup::Null, DhGroup::Ffdhe2048]
        } else {
            vec![DhGroup::Null]
        },
    };
    let keys = ControllerKeys {
        host: Secret::new(1, &[0x42; 32]).unwrap(),
        ctrl: Some(Secret::new(0, &[0x43; 32]).unwrap()),
        hostnqn: "nqn.2014-08.org.nvmexpress:uuid:host".into(),
        subnqn: "nqn.2024-01.io.fabrik:box:drive-00".into(),
    };
    let mut rng = Fixed(config);
    let mut ctrl = ControllerAuth::new(&mut rng);
    while rest.len() >= 2 {
        let len = u16::from_le_bytes([rest[0], rest[1]]) as usize;
        let msg = &rest[2..(2 + len).min(rest.len())];
        rest = &rest[(2 + len).min(rest.len())..];
        // Forging R1 needs the secret: a fuzzer that reaches Authenticated broke HMAC.
        let progress = ctrl.on_send(msg, || Some(keys.clone()), &policy, &mut rng);
        assert_ne!(
            progress,
            Progress::Authenticated,
            "authenticated without the secret"
        );
        if let Some((answer, _)) = ctrl.on_receive() {
            assert!(Message::decode(&answer.encode()).is_ok());
        }
    }
});
