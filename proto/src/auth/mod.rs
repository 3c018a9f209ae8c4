//! NVMe in-band authentication (DH-HMAC-CHAP), sans-IO: the messages Authentication Send and
//! Receive carry ([`message`]), `DHHC-1` secrets ([`secret`]), the hash functions and
//! Diffie-Hellman groups, the responses both sides compute, and the two ends of a transaction
//! as state machines ([`exchange`]) that the target's queues and the host's drive.
//!
//! The computations follow the NVMe Base specification (8.13.5) as the Linux host and target
//! implement them (`drivers/nvme/common/auth.c`); `NVMEOF-FACTS-2.md` section C has the layouts.
//! Randomness comes from the caller ([`Random`]), so transactions replay in tests.

pub mod exchange;
pub mod message;
pub mod secret;

use crypto_bigint::ctutils::CtEq;
use std::sync::OnceLock;

use crypto_bigint::modular::{BoxedMontyForm, BoxedMontyParams};
use crypto_bigint::{BoxedUint, Odd};
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256, Sha384, Sha512};
use zeroize::Zeroizing;

pub use exchange::{ControllerAuth, HostAuth};
pub use message::Message;
pub use secret::{Secret, SecretError};

/// SECP of Authentication Send/Receive for NVMe in-band authentication.
pub const SECP: u8 = 0xe9;
/// SPSP0 and SPSP1 of the same (both 01h).
pub const SPSP: u8 = 0x01;
/// The Connect response's AUTHREQ bit asking the host to authenticate (ATR: DW0 bit 17).
pub const CONNECT_AUTH_REQUIRED: u32 = 1 << 17;
/// The longest message: a Reply with two SHA-512 values and an ffdhe8192 public value.
pub const MAX_MESSAGE: usize = 16 + 2 * 64 + 1024;

/// A hash function of DH-HMAC-CHAP, by its identifier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HashId {
    Sha256 = 1,
    Sha384 = 2,
    Sha512 = 3,
}

impl HashId {
    pub const ALL: [HashId; 3] = [HashId::Sha256, HashId::Sha384, HashId::Sha512];

    pub fn from_id(id: u8) -> Option<HashId> {
        HashId::ALL.into_iter().find(|h| h.id() == id)
    }

    pub fn from_len(len: usize) -> Option<HashId> {
        HashId::ALL.into_iter().find(|h| h.len() == len)
    }

    /// By the name the configuration uses ("sha256", "sha384", "sha512").
    pub fn from_name(name: &str) -> Option<HashId> {
        HashId::ALL.into_iter().find(|h| h.name() == name)
    }

    pub fn id(self) -> u8 {
        self as u8
    }

    pub fn name(self) -> &'static str {
        match self {
            HashId::Sha256 => "sha256",
            HashId::Sha384 => "sha384",
            HashId::Sha512 => "sha512",
        }
    }

    /// Output length in bytes (HL).
    #[allow(clippy::len_without_is_empty)]
    pub fn len(self) -> usize {
        match self {
            HashId::Sha256 => 32,
            HashId::Sha384 => 48,
            HashId::Sha512 => 64,
        }
    }

    pub fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            HashId::Sha256 => Sha256::digest(data).to_vec(),
            HashId::Sha384 => Sha384::digest(data).to_vec(),
            HashId::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// HMAC with this hash over the concatenation of `parts`.
    pub fn hmac(self, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        fn run<M: Mac + KeyInit>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
            let mut mac =
                <M as KeyInit>::new_from_slice(key).expect("HMAC takes keys of any length");
            for p in parts {
                mac.update(p);
            }
            mac.finalize().into_bytes().to_vec()
        }
        match self {
            HashId::Sha256 => run::<Hmac<Sha256>>(key, parts),
            HashId::Sha384 => run::<Hmac<Sha384>>(key, parts),
            HashId::Sha512 => run::<Hmac<Sha512>>(key, parts),
        }
    }
}

/// A Diffie-Hellman group of DH-HMAC-CHAP (RFC 7919's finite field groups), by its identifier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DhGroup {
    /// No Diffie-Hellman: the responses rest on the secrets alone.
    Null = 0,
    Ffdhe2048 = 1,
    Ffdhe3072 = 2,
    Ffdhe4096 = 3,
    Ffdhe6144 = 4,
    Ffdhe8192 = 5,
}

/// Bits of the private exponent: at least twice the group's security strength (NIST SP
/// 800-56A; ffdhe8192's is 200 bits), and far cheaper than a full-size exponent.
const PRIVATE_BITS: u32 = 512;

impl DhGroup {
    pub const ALL: [DhGroup; 6] = [
        DhGroup::Null,
        DhGroup::Ffdhe2048,
        DhGroup::Ffdhe3072,
        DhGroup::Ffdhe4096,
        DhGroup::Ffdhe6144,
        DhGroup::Ffdhe8192,
    ];

    pub fn from_id(id: u8) -> Option<DhGroup> {
        DhGroup::ALL.into_iter().find(|g| g.id() == id)
    }

    /// By the name the configuration uses ("null", "ffdhe2048", ...).
    pub fn from_name(name: &str) -> Option<DhGroup> {
        DhGroup::ALL.into_iter().find(|g| g.name() == name)
    }

    pub fn id(self) -> u8 {
        self as u8
    }

    pub fn name(self) -> &'static str {
        match self {
            DhGroup::Null => "null",
            DhGroup::Ffdhe2048 => "ffdhe2048",
            DhGroup::Ffdhe3072 => "ffdhe3072",
            DhGroup::Ffdhe4096 => "ffdhe4096",
            DhGroup::Ffdhe6144 => "ffdhe6144",
            DhGroup::Ffdhe8192 => "ffdhe8192",
        }
    }

    /// Bytes of a public value and of the shared secret (DHVLEN); 0 for the null group.
    pub fn public_len(self) -> usize {
        match self {
            DhGroup::Null => 0,
            DhGroup::Ffdhe2048 => 256,
            DhGroup::Ffdhe3072 => 384,
            DhGroup::Ffdhe4096 => 512,
            DhGroup::Ffdhe6144 => 768,
            DhGroup::Ffdhe8192 => 1024,
        }
    }

    fn prime_hex(self) -> &'static str {
        match self {
            DhGroup::Null => "",
            DhGroup::Ffdhe2048 => include_str!("ffdhe/ffdhe2048.hex"),
            DhGroup::Ffdhe3072 => include_str!("ffdhe/ffdhe3072.hex"),
            DhGroup::Ffdhe4096 => include_str!("ffdhe/ffdhe4096.hex"),
            DhGroup::Ffdhe6144 => include_str!("ffdhe/ffdhe6144.hex"),
            DhGroup::Ffdhe8192 => include_str!("ffdhe/ffdhe8192.hex"),
        }
    }

    /// The group's prime, big-endian, `public_len` bytes.
    fn prime_bytes(self) -> Vec<u8> {
        let digits: Vec<u8> = self
            .prime_hex()
            .lines()
            .filter(|l| !l.starts_with('#'))
            .flat_map(|l| l.trim().bytes())
            .collect();
        digits
            .chunks(2)
            .map(|p| {
                let nib = |c: u8| (c as char).to_digit(16).expect("hex prime") as u8;
                nib(p[0]) << 4 | nib(p[1])
            })
            .collect()
    }

    fn prime(self) -> Odd<BoxedUint> {
        let bits = (self.public_len() * 8) as u32;
        let p = BoxedUint::from_be_slice(&self.prime_bytes(), bits).expect("prime fits its group");
        Odd::new(p).into_option().expect("the group's prime is odd")
    }

    /// The group's Montgomery parameters, made once per process.
    fn params(self) -> BoxedMontyParams {
        static PARAMS: [OnceLock<BoxedMontyParams>; 6] = [const { OnceLock::new() }; 6];
        PARAMS[self as usize]
            .get_or_init(|| BoxedMontyParams::new(self.prime()))
            .clone()
    }

    /// base^x mod p, the exponent taken as `PRIVATE_BITS` bits: a private key's size, not the
    /// group's (a full-size exponent costs 4 to 16 times as much for nothing).
    fn pow(self, base: BoxedUint, x: &BoxedUint) -> BoxedUint {
        BoxedMontyForm::new(base, &self.params())
            .pow_bounded_exp(x, PRIVATE_BITS)
            .retrieve()
    }

    /// A fresh key pair (None for the null group).
    pub fn generate(self, random: &mut dyn Random) -> Option<(PrivateKey, Vec<u8>)> {
        let mut x = Zeroizing::new([0u8; 64]);
        random.fill(&mut *x);
        self.key_pair(&*x)
    }

    /// A key pair from `random` (the private exponent's bytes, at least 64): the private key,
    /// and the public value g^x mod p (g = 2), big-endian and left-padded to the group's size.
    /// None for the null group.
    pub fn key_pair(self, random: &[u8]) -> Option<(PrivateKey, Vec<u8>)> {
        if self == DhGroup::Null {
            return None;
        }
        let p = self.prime();
        let bits = p.bits_precision();
        let n = (PRIVATE_BITS / 8) as usize;
        assert!(random.len() >= n, "a DH private key takes {n} random bytes");
        let mut bytes = Zeroizing::new(random[..n].to_vec());
        // Never 0 or 1: the top bit set keeps the exponent at its full size.
        bytes[0] |= 0x80;
        let x = BoxedUint::from_be_slice(&bytes, bits).expect("fits");
        let g = BoxedUint::from_be_slice(&[2], bits).expect("fits");
        let public = self.pow(g, &x).to_be_bytes().to_vec();
        Some((PrivateKey { group: self, x }, public))
    }
}

/// A Diffie-Hellman private key of one transaction.
pub struct PrivateKey {
    group: DhGroup,
    x: BoxedUint,
}

impl Drop for PrivateKey {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.x);
    }
}

/// Why a peer's public value is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the peer's DH public value is not valid for the group")]
pub struct BadPublicValue;

impl PrivateKey {
    /// The shared secret Z = peer^x mod p, left-padded to the group's size. The peer's value
    /// must be the group's size and lie in 2..p-2 (SP 800-56A's partial check, as Linux).
    pub fn shared_secret(&self, peer: &[u8]) -> Result<Zeroizing<Vec<u8>>, BadPublicValue> {
        if peer.len() != self.group.public_len() {
            return Err(BadPublicValue);
        }
        let p = self.group.prime();
        let bits = p.bits_precision();
        let y = BoxedUint::from_be_slice(peer, bits).map_err(|_| BadPublicValue)?;
        let one = BoxedUint::one_with_precision(bits);
        let p_minus_1 = p.as_ref().wrapping_sub(&one);
        if y <= one || y >= p_minus_1 {
            return Err(BadPublicValue);
        }
        Ok(Zeroizing::new(
            self.group.pow(y, &self.x).to_be_bytes().to_vec(),
        ))
    }
}

/// The challenge a response is computed over: C itself with the null group, else
/// HMAC(H(Z), C) (the "augmented challenge").
pub fn augmented_challenge(hash: HashId, challenge: &[u8], shared: Option<&[u8]>) -> Vec<u8> {
    match shared {
        None => challenge.to_vec(),
        Some(z) => hash.hmac(&hash.hash(z), &[challenge]),
    }
}

/// R1, the host's response: HMAC(Kh', Ca1 ‖ S1 ‖ T_ID ‖ SC_C ‖ "HostHost" ‖ HostNQN ‖ 0 ‖
/// SubNQN), with `key` the host secret transformed with the host NQN.
pub fn host_response(
    hash: HashId,
    key: &[u8],
    challenge: &[u8],
    seqnum: u32,
    t_id: u16,
    hostnqn: &str,
    subnqn: &str,
) -> Vec<u8> {
    let names = [
        b"HostHost".as_slice(),
        hostnqn.as_bytes(),
        subnqn.as_bytes(),
    ];
    response(hash, key, challenge, seqnum, t_id, names)
}

/// R2, the controller's response: HMAC(Kc', Ca2 ‖ S2 ‖ T_ID ‖ SC_C ‖ "Controller" ‖ SubNQN ‖
/// 0 ‖ HostNQN), with `key` the controller secret transformed with the subsystem NQN.
pub fn controller_response(
    hash: HashId,
    key: &[u8],
    challenge: &[u8],
    seqnum: u32,
    t_id: u16,
    hostnqn: &str,
    subnqn: &str,
) -> Vec<u8> {
    let names = [
        b"Controller".as_slice(),
        subnqn.as_bytes(),
        hostnqn.as_bytes(),
    ];
    response(hash, key, challenge, seqnum, t_id, names)
}

/// Either response: the challenge, S, T_ID, SC_C (0), then who answers and the two NQNs, the
/// answerer's first.
fn response(
    hash: HashId,
    key: &[u8],
    challenge: &[u8],
    seqnum: u32,
    t_id: u16,
    [role, first, second]: [&[u8]; 3],
) -> Vec<u8> {
    let (s, t) = (seqnum.to_le_bytes(), t_id.to_le_bytes());
    hash.hmac(key, &[challenge, &s, &t, &[0], role, first, &[0], second])
}

/// Equal, in time that does not depend on where they differ.
pub fn same_response(a: &[u8], b: &[u8]) -> bool {
    a.ct_eq(b).into()
}

/// Where a transaction's random bytes come from (challenges, sequence numbers, DH keys).
pub trait Random {
    fn fill(&mut self, buf: &mut [u8]);
}

/// The operating system's random source.
pub struct OsRandom;

impl Random for OsRandom {
    fn fill(&mut self, buf: &mut [u8]) {
        getrandom::fill(buf).expect("the operating system's random source");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primes_have_rfc7919_shape() {
        for g in &DhGroup::ALL[1..] {
            let p = g.prime_bytes();
            assert_eq!(p.len(), g.public_len(), "{g:?}");
            // p = 2^b - 2^(b-64) + {[2^(b-130) e] + X} * 2^64 - 1: 64 one bits at each end,
            // and every group starts with the same bits of e.
            assert!(p[..8].iter().all(|&b| b == 0xff), "{g:?}");
            assert!(p[p.len() - 8..].iter().all(|&b| b == 0xff), "{g:?}");
            assert_eq!(&p[8..16], &[0xad, 0xf8, 0x54, 0x58, 0xa2, 0xbb, 0x4a, 0x9a]);
        }
    }

    #[test]
    fn both_sides_reach_the_same_secret() {
        for g in [DhGroup::Ffdhe2048, DhGroup::Ffdhe3072] {
            let (a, pa) = g.key_pair(&[0x5a; 64]).unwrap();
            let (b, pb) = g.key_pair(&[0xa5; 64]).unwrap();
            assert_eq!(pa.len(), g.public_len());
            let za = a.shared_secret(&pb).unwrap();
            assert_eq!(*za, *b.shared_secret(&pa).unwrap());
            assert_eq!(za.len(), g.public_len());
            assert_ne!(pa, pb);
            // Degenerate values are refused.
            let mut one = vec![0; g.public_len()];
            *one.last_mut().unwrap() = 1;
            assert_eq!(a.shared_secret(&one), Err(BadPublicValue));
            assert_eq!(a.shared_secret(&pb[1..]), Err(BadPublicValue));
            assert_eq!(a.shared_secret(&g.prime_bytes()), Err(BadPublicValue));
        }
    }

    /// g^x mod p against Python's pow() (x = 0x80 followed by 63 bytes of 0x01), ffdhe2048:
    /// the first and last bytes of the public value.
    #[test]
    fn public_value_matches_an_independent_computation() {
        let mut x = [1u8; 64];
        x[0] = 0x80;
        let (_, public) = DhGroup::Ffdhe2048.key_pair(&x).unwrap();
        assert_eq!(hex(&public[..8]), EXPECTED_FFDHE2048_HEAD);
        assert_eq!(hex(&public[248..]), EXPECTED_FFDHE2048_TAIL);
    }
    const EXPECTED_FFDHE2048_HEAD: &str = "6ff9cbc6dffb7a9c";
    const EXPECTED_FFDHE2048_TAIL: &str = "047fcdb672d8abd9";

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    /// R1 against Python's hmac/hashlib for fixed inputs.
    #[test]
    fn host_response_matches_an_independent_computation() {
        let r = host_response(
            HashId::Sha256,
            &[0x11; 32],
            &[0x22; 32],
            0x01020304,
            0x0506,
            "nqn.2014-08.org.nvmexpress:uuid:host",
            "nqn.2024-01.io.fabrik:box:sub",
        );
        assert_eq!(hex(&r), EXPECTED_R1);
        let c = controller_response(
            HashId::Sha512,
            &[0x11; 64],
            &[0x22; 64],
            7,
            1,
            "nqn.2014-08.org.nvmexpress:uuid:host",
            "nqn.2024-01.io.fabrik:box:sub",
        );
        assert_eq!(hex(&c), EXPECTED_R2);
        let s = Secret::new(1, &[0x33; 32]).unwrap();
        assert_eq!(hex(&s.transformed("nqn.x")), EXPECTED_TRANSFORMED);
        let aug = augmented_challenge(HashId::Sha384, &[0x44; 48], Some(&[0x55; 256]));
        assert_eq!(hex(&aug), EXPECTED_AUGMENTED);
    }
    const EXPECTED_R1: &str = "a0d5c5f961604a3f6ab9e31a5bc42daccaea1091936430c986394a15736524cd";
    const EXPECTED_R2: &str = "e9c9ca159f25e3ba41789988f46044dee8e01a85595db47cc736acb54be47c2ebcfe32580f9fda1fb9e35813570037b6d698052d3f703c21a85a75c458904b27";
    const EXPECTED_TRANSFORMED: &str =
        "78e52b878e08811e7ae37d9b981f824996ebbc337ab090693f1a6489ee611c30";
    const EXPECTED_AUGMENTED: &str = "0361782df5ea24e280f7cf33547a78b6295300007a10c86cf8a50a66e9289f163b58e8d59e2bca32b065faf476a63473";
}
