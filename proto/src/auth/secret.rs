//! DH-HMAC-CHAP secrets in the `DHHC-1:<tt>:<base64>:` form `nvme gen-dhchap-key` prints:
//! `tt` the transform (00 none, 01/02/03 HMAC-SHA-256/384/512 of the NQN), the base64 of the
//! key (32, 48 or 64 bytes) followed by its CRC-32 (little-endian).

use zeroize::Zeroizing;

use super::HashId;
use crate::keytext::{self, KeyTextError};

const PREFIX: &str = "DHHC-1:";

/// A DH-HMAC-CHAP secret. Its `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    /// 0: the key is used as it is; 1..=3: HMAC-SHA-256/384/512 of the NQN with it, first.
    transform: u8,
    key: Zeroizing<Vec<u8>>,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Secret(DHHC-1:{:02}:<{} bytes>)",
            self.transform,
            self.key.len()
        )
    }
}

/// Why a text is not a DHHC-1 secret (the text itself is never repeated: it is a secret).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("a DH-HMAC-CHAP secret starts with \"DHHC-1:\" and ends with ':'")]
    Format,
    #[error("the transform of a DH-HMAC-CHAP secret is 00, 01, 02 or 03")]
    Transform,
    #[error("a DH-HMAC-CHAP secret's key is base64")]
    Base64,
    #[error("a DH-HMAC-CHAP secret's key is 32, 48 or 64 bytes")]
    Length,
    #[error("a DH-HMAC-CHAP secret's CRC does not match its key")]
    Crc,
}

impl Secret {
    /// A secret from its key bytes (32, 48 or 64) and transform (0..=3).
    pub fn new(transform: u8, key: &[u8]) -> Result<Secret, SecretError> {
        if transform > 3 {
            return Err(SecretError::Transform);
        }
        if !matches!(key.len(), 32 | 48 | 64) {
            return Err(SecretError::Length);
        }
        Ok(Secret {
            transform,
            key: Zeroizing::new(key.to_vec()),
        })
    }

    pub fn parse(text: &str) -> Result<Secret, SecretError> {
        let (tt, key) = keytext::decode(text, PREFIX, &[32, 48, 64]).map_err(|e| match e {
            KeyTextError::Format => SecretError::Format,
            KeyTextError::Base64 => SecretError::Base64,
            KeyTextError::Length => SecretError::Length,
            KeyTextError::Crc => SecretError::Crc,
        })?;
        let transform = match tt {
            "00" => 0,
            "01" => 1,
            "02" => 2,
            "03" => 3,
            _ => return Err(SecretError::Transform),
        };
        Ok(Secret { transform, key })
    }

    /// The `DHHC-1:` text (for the host's configuration; never logged).
    pub fn to_text(&self) -> Zeroizing<String> {
        keytext::encode(PREFIX, self.transform, &self.key)
    }

    pub fn transform(&self) -> u8 {
        self.transform
    }

    /// The key the responses are keyed with (NVMEOF-FACTS-2 C.5): the key itself, or
    /// HMAC(key, NQN ‖ "NVMe-over-Fabrics") with the hash the transform names (never the
    /// negotiated one). `nqn` is the host's NQN for a host secret, the subsystem's for a
    /// controller secret.
    pub fn transformed(&self, nqn: &str) -> Zeroizing<Vec<u8>> {
        let hash = match self.transform {
            1 => HashId::Sha256,
            2 => HashId::Sha384,
            3 => HashId::Sha512,
            _ => return self.key.clone(),
        };
        Zeroizing::new(hash.hmac(&self.key, &[nqn.as_bytes(), b"NVMe-over-Fabrics"]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_round_trips_and_checks() {
        let s = Secret::new(1, &[7u8; 32]).unwrap();
        let text = s.to_text();
        // nvme-cli's lengths: 59 characters for a 32-byte key.
        assert_eq!(text.len(), 59);
        assert_eq!(Secret::parse(&text).unwrap(), s);
        assert_eq!(Secret::new(3, &[1u8; 64]).unwrap().to_text().len(), 103);
        assert!(!format!("{s:?}").contains("Bwc"));

        let mut bad_crc = text.to_string();
        bad_crc.replace_range(10..11, if &text[10..11] == "A" { "B" } else { "A" });
        assert_eq!(Secret::parse(&bad_crc), Err(SecretError::Crc));
        assert_eq!(
            Secret::parse(&text.replace("DHHC-1:01", "DHHC-1:04")),
            Err(SecretError::Transform)
        );
        assert_eq!(
            Secret::parse(&text[..text.len() - 1]),
            Err(SecretError::Format)
        );
        assert_eq!(Secret::parse("DHHC-1:00:AAAA:"), Err(SecretError::Length));
        assert_eq!(Secret::parse("DHHC-1:00:!!!!:"), Err(SecretError::Base64));
    }

    /// A key whose text was made independently (Python's zlib.crc32 and base64).
    #[test]
    fn independently_made_key_parses() {
        let s =
            Secret::parse("DHHC-1:00:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWYOtVl3:").unwrap();
        assert_eq!(s.transform(), 0);
        assert_eq!(&*s.transformed("x"), b"0123456789abcdef0123456789abcdef");
    }
}
