//! TLS for NVMe/TCP with configured PSKs (NVMe/TCP transport 3.6, TP 8011), sans-IO: the
//! `NVMeTLSkey-1:` interchange format `nvme gen-tls-key` prints ([`ConfiguredPsk`]), the
//! retained PSK bound to a host NQN, the PSK identity a host offers in its ClientHello
//! ([`PskIdentity`]) and the TLS PSK both ends hand to the TLS stack ([`tls_psk`]).
//!
//! The Linux kernel derives nothing for configured PSKs: whoever inserts a host's key into its
//! keyring (libnvme, through `nvme check-tls-key --insert`) derives the TLS PSK, and libnvme's
//! HKDF labels changed twice ([`LabelEncoding`]). `NVMEOF-FACTS-2.md` section D has the steps.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hkdf::Hkdf;
use sha2::{Sha256, Sha384};
use zeroize::Zeroizing;

use crate::auth::HashId;
use crate::keytext::{self, KeyTextError};

const PREFIX: &str = "NVMeTLSkey-1:";

/// The PSK hash of a TLS PSK: SHA-256 (32-byte keys, TLS_AES_128_GCM_SHA256 and the other
/// SHA-256 suites) or SHA-384 (48-byte keys, TLS_AES_256_GCM_SHA384). Identities write it
/// as `01` / `02`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PskHash {
    Sha256 = 1,
    Sha384 = 2,
}

impl PskHash {
    pub fn from_id(id: u8) -> Option<PskHash> {
        match id {
            1 => Some(PskHash::Sha256),
            2 => Some(PskHash::Sha384),
            _ => None,
        }
    }

    pub fn id(self) -> u8 {
        self as u8
    }

    /// The hash whose output is `len` bytes (a key's, a binder's).
    pub fn from_len(len: usize) -> Option<PskHash> {
        [PskHash::Sha256, PskHash::Sha384]
            .into_iter()
            .find(|h| h.len() == len)
    }

    /// The key and output length: 32 or 48 bytes.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(self) -> usize {
        match self {
            PskHash::Sha256 => 32,
            PskHash::Sha384 => 48,
        }
    }

    fn hmac(self) -> HashId {
        match self {
            PskHash::Sha256 => HashId::Sha256,
            PskHash::Sha384 => HashId::Sha384,
        }
    }
}

/// Why a text is not an NVMe TLS key (the text itself is never repeated: it is a secret).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PskError {
    #[error("an NVMe TLS key starts with \"NVMeTLSkey-1:\" and ends with ':'")]
    Format,
    #[error("the hash of an NVMe TLS key is 00 (none), 01 (SHA-256) or 02 (SHA-384)")]
    Hash,
    #[error("an NVMe TLS key's key is base64")]
    Base64,
    #[error("an NVMe TLS key's key is 32 bytes (hash 00 or 01) or 48 bytes (00 or 02)")]
    Length,
    #[error("an NVMe TLS key's CRC does not match its key")]
    Crc,
}

/// A configured PSK: the key an administrator gives both ends. Its `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct ConfiguredPsk {
    /// The hash the retained PSK is derived with; None: the key is the retained PSK.
    hash: Option<PskHash>,
    key: Zeroizing<Vec<u8>>,
}

impl std::fmt::Debug for ConfiguredPsk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ConfiguredPsk(NVMeTLSkey-1:{:02}:<{} bytes>)",
            self.hash.map_or(0, PskHash::id),
            self.key.len()
        )
    }
}

impl ConfiguredPsk {
    /// A key from its bytes and the hash its retained PSK is derived with (None: used as is).
    pub fn new(hash: Option<PskHash>, key: &[u8]) -> Result<ConfiguredPsk, PskError> {
        let fits = match hash {
            Some(h) => key.len() == h.len(),
            None => matches!(key.len(), 32 | 48),
        };
        if !fits {
            return Err(PskError::Length);
        }
        Ok(ConfiguredPsk {
            hash,
            key: Zeroizing::new(key.to_vec()),
        })
    }

    pub fn parse(text: &str) -> Result<ConfiguredPsk, PskError> {
        let (hh, key) = keytext::decode(text, PREFIX, &[32, 48]).map_err(|e| match e {
            KeyTextError::Format => PskError::Format,
            KeyTextError::Base64 => PskError::Base64,
            KeyTextError::Length => PskError::Length,
            KeyTextError::Crc => PskError::Crc,
        })?;
        let hash = match hh {
            "00" => None,
            "01" => Some(PskHash::Sha256),
            "02" => Some(PskHash::Sha384),
            _ => return Err(PskError::Hash),
        };
        ConfiguredPsk::new(hash, &key)
    }

    /// The `NVMeTLSkey-1:` text (for a host's configuration; never logged).
    pub fn to_text(&self) -> Zeroizing<String> {
        keytext::encode(PREFIX, self.hash.map_or(0, PskHash::id), &self.key)
    }

    /// The hash of every PSK derived from this key: the configured one, else the one its
    /// length implies.
    pub fn psk_hash(&self) -> PskHash {
        // A key is 32 or 48 bytes (`new`).
        self.hash
            .or(PskHash::from_len(self.key.len()))
            .unwrap_or(PskHash::Sha256)
    }

    /// The retained PSK of host `hostnqn`: HKDF-Expand-Label(HKDF-Extract(0, key), "HostNQN",
    /// hostnqn) with the configured hash, or the key itself for hash 00.
    pub fn retained(
        &self,
        hostnqn: &str,
        encoding: LabelEncoding,
    ) -> Result<RetainedPsk, DeriveError> {
        let hash = self.psk_hash();
        let key = match self.hash {
            None => self.key.clone(),
            Some(h) => expand_label(h, &self.key, b"HostNQN", hostnqn.as_bytes(), encoding)?,
        };
        Ok(RetainedPsk { hash, key })
    }
}

/// A configured PSK bound to one host.
pub struct RetainedPsk {
    hash: PskHash,
    key: Zeroizing<Vec<u8>>,
}

impl RetainedPsk {
    pub fn hash(&self) -> PskHash {
        self.hash
    }

    /// The PSK digest of a version 1 identity: base64(HMAC(retained, hostnqn ‖ " " ‖ subnqn ‖
    /// " NVMe-over-Fabrics")).
    pub fn digest(&self, hostnqn: &str, subnqn: &str) -> String {
        let mac = self.hash.hmac().hmac(
            &self.key,
            &[
                hostnqn.as_bytes(),
                b" ",
                subnqn.as_bytes(),
                b" ",
                b"NVMe-over-Fabrics",
            ],
        );
        STANDARD.encode(mac)
    }

    /// The identity a host offers for this key (with the digest in version 1).
    pub fn identity(&self, version: u8, hostnqn: &str, subnqn: &str) -> PskIdentity {
        PskIdentity {
            version,
            hash: self.hash,
            hostnqn: hostnqn.to_string(),
            subnqn: subnqn.to_string(),
            digest: (version == 1).then(|| self.digest(hostnqn, subnqn)),
        }
    }
}

/// How HKDF-Expand-Label lays out its info bytes. libnvme changed it twice, and a target must
/// derive as the tool that inserted the host's key did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LabelEncoding {
    /// RFC 8446's HkdfLabel: u16 length (big-endian), length-prefixed "tls13 " label and
    /// context (libnvme 1.16 and later, their default).
    #[default]
    Rfc8446,
    /// u16 length in little-endian order, then "tls13 " label and context without lengths
    /// (libnvme 1.7 to 1.15; nvme-cli's `--compat`).
    Compat,
    /// "tls13 " label and context only (libnvme 1.4 to 1.6).
    NoLength,
}

impl LabelEncoding {
    pub const ALL: [LabelEncoding; 3] = [
        LabelEncoding::Rfc8446,
        LabelEncoding::Compat,
        LabelEncoding::NoLength,
    ];

    /// By the name the configuration uses: "rfc8446", "compat", "nolength".
    pub fn from_name(name: &str) -> Option<LabelEncoding> {
        LabelEncoding::ALL.into_iter().find(|e| e.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            LabelEncoding::Rfc8446 => "rfc8446",
            LabelEncoding::Compat => "compat",
            LabelEncoding::NoLength => "nolength",
        }
    }
}

/// A derivation that cannot be laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeriveError {
    #[error(
        "a PSK identity past 255 bytes cannot be an RFC 8446 HKDF context: use identity version 1"
    )]
    ContextTooLong,
}

/// HKDF-Expand-Label(HKDF-Extract(salt 0, ikm), label, context, L = len(ikm)).
fn expand_label(
    hash: PskHash,
    ikm: &[u8],
    label: &[u8],
    context: &[u8],
    encoding: LabelEncoding,
) -> Result<Zeroizing<Vec<u8>>, DeriveError> {
    let len = ikm.len();
    let mut info = Vec::with_capacity(10 + label.len() + context.len());
    match encoding {
        LabelEncoding::Rfc8446 => {
            let context_len =
                u8::try_from(context.len()).map_err(|_| DeriveError::ContextTooLong)?;
            info.extend_from_slice(&(len as u16).to_be_bytes());
            info.push((6 + label.len()) as u8);
            info.extend_from_slice(b"tls13 ");
            info.extend_from_slice(label);
            info.push(context_len);
        }
        LabelEncoding::Compat => {
            info.extend_from_slice(&(len as u16).to_le_bytes());
            info.extend_from_slice(b"tls13 ");
            info.extend_from_slice(label);
        }
        LabelEncoding::NoLength => {
            info.extend_from_slice(b"tls13 ");
            info.extend_from_slice(label);
        }
    }
    info.extend_from_slice(context);
    let mut okm = Zeroizing::new(vec![0u8; len]);
    // Both expansions are one or two blocks long: far below HKDF's limit of 255.
    match hash {
        PskHash::Sha256 => Hkdf::<Sha256>::new(None, ikm)
            .expand(&info, &mut okm)
            .expect("32 bytes"),
        PskHash::Sha384 => Hkdf::<Sha384>::new(None, ikm)
            .expand(&info, &mut okm)
            .expect("48 bytes"),
    }
    Ok(okm)
}

/// A PSK identity: `NVMe<v>R<hh> <hostnqn> <subnqn>`, followed by ` <digest>` in version 1.
/// fabrik speaks configured PSKs only (`R`), not those secure concatenation generates (`G`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PskIdentity {
    /// 0 or 1.
    pub version: u8,
    pub hash: PskHash,
    pub hostnqn: String,
    pub subnqn: String,
    /// The PSK digest (version 1 only).
    pub digest: Option<String>,
}

/// Why a ClientHello's PSK identity is not one fabrik takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    #[error("not an NVMe PSK identity (NVMe<version><type><hash> <host NQN> <subsystem NQN>)")]
    Format,
    #[error("PSK identity version other than 0 or 1")]
    Version,
    #[error("a generated PSK (secure channel concatenation) is not supported")]
    Generated,
    #[error("PSK identity hash other than 01 or 02")]
    Hash,
}

impl PskIdentity {
    pub fn parse(raw: &[u8]) -> Result<PskIdentity, IdentityError> {
        let text = std::str::from_utf8(raw).map_err(|_| IdentityError::Format)?;
        let (head, rest) = text.split_once(' ').ok_or(IdentityError::Format)?;
        let head = head.as_bytes();
        if head.len() != 8 || &head[..4] != b"NVMe" {
            return Err(IdentityError::Format);
        }
        let version = match head[4] {
            b'0' => 0,
            b'1' => 1,
            _ => return Err(IdentityError::Version),
        };
        match head[5] {
            b'R' => {}
            b'G' => return Err(IdentityError::Generated),
            _ => return Err(IdentityError::Format),
        }
        let hash = match &head[6..8] {
            b"01" => PskHash::Sha256,
            b"02" => PskHash::Sha384,
            _ => return Err(IdentityError::Hash),
        };
        let mut fields = rest.split(' ');
        let hostnqn = fields.next().filter(|s| !s.is_empty());
        let subnqn = fields.next().filter(|s| !s.is_empty());
        let digest = fields.next();
        let (Some(hostnqn), Some(subnqn)) = (hostnqn, subnqn) else {
            return Err(IdentityError::Format);
        };
        if fields.next().is_some() || (version == 1) != digest.is_some() {
            return Err(IdentityError::Format);
        }
        Ok(PskIdentity {
            version,
            hash,
            hostnqn: hostnqn.to_string(),
            subnqn: subnqn.to_string(),
            digest: digest.map(str::to_string),
        })
    }

    /// The identity's text, as sent in the ClientHello.
    pub fn to_text(&self) -> String {
        let mut s = format!(
            "NVMe{}R{:02} {} {}",
            self.version,
            self.hash.id(),
            self.hostnqn,
            self.subnqn
        );
        if let Some(d) = &self.digest {
            s.push(' ');
            s.push_str(d);
        }
        s
    }
}

/// Why a host's identity gets no TLS PSK.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PskRefused {
    #[error("the identity's hash is not the configured key's")]
    Hash,
    #[error("the identity's PSK digest does not match the configured key")]
    Digest,
    #[error(transparent)]
    Derive(#[from] DeriveError),
}

/// The TLS PSK for `identity` from `key`, the configured PSK of the identity's host: what the
/// host's TLS stack (tlshd, from the kernel keyring) uses, and the controller must too.
/// HKDF-Expand-Label(HKDF-Extract(0, retained), "nvme-tls-psk", context) with context the
/// identity (version 0) or `<hh> <digest>` (version 1). A version 1 identity whose digest
/// another key made is refused here, before any handshake message depends on it.
pub fn tls_psk(
    key: &ConfiguredPsk,
    identity: &PskIdentity,
    encoding: LabelEncoding,
) -> Result<Zeroizing<Vec<u8>>, PskRefused> {
    let retained = key.retained(&identity.hostnqn, encoding)?;
    if retained.hash != identity.hash {
        return Err(PskRefused::Hash);
    }
    let context = match &identity.digest {
        Some(digest) => {
            let ours = retained.digest(&identity.hostnqn, &identity.subnqn);
            if !subtle_eq(ours.as_bytes(), digest.as_bytes()) {
                return Err(PskRefused::Digest);
            }
            format!("{:02} {digest}", identity.hash.id())
        }
        None => identity.to_text(),
    };
    Ok(expand_label(
        retained.hash,
        &retained.key,
        b"nvme-tls-psk",
        context.as_bytes(),
        encoding,
    )?)
}

/// Equality in time that depends on the lengths only.
fn subtle_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests;
