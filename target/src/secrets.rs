//! Secrets at rest. Hosts' DH-HMAC-CHAP secrets live in the state like the rest of the
//! configuration (one atomic file, so a change of keys is never half made), but sealed there:
//! ChaCha20-Poly1305 under a key of this box kept in its own file (`secrets.key`, 0600, made at
//! the first secret). A copy of `state.json` (a backup, a support bundle) shows no secret. In
//! memory and on the way to the other I/O module a secret is its `DHHC-1:` text; the REST API
//! never returns it (see `Shared::redacted`).

use std::io::{Read, Write};
use std::path::Path;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use chacha20poly1305::aead::{Aead, KeyInit};
use chacha20poly1305::{ChaCha20Poly1305, Nonce};
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

pub const SEAL_KEY_FILE: &str = "secrets.key";
const SEALED: &str = "sealed:";

/// A secret's text. Its `Debug` never shows it; it is wiped from memory when dropped.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretText(Zeroizing<String>);

impl Serialize for SecretText {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for SecretText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<SecretText, D::Error> {
        String::deserialize(d).map(SecretText::new)
    }
}

impl std::fmt::Debug for SecretText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretText(<redacted>)")
    }
}

impl SecretText {
    pub fn new(text: String) -> SecretText {
        SecretText(Zeroizing::new(text))
    }

    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_sealed(&self) -> bool {
        self.0.starts_with(SEALED)
    }

    /// What the API shows in its place: a digest, equal for equal secrets (so two modules'
    /// configurations compare) and of no use to find the secret (a random key of 256 bits or
    /// more).
    pub fn fingerprint(&self) -> String {
        use sha2::Digest;
        let d = sha2::Sha256::digest(self.0.as_bytes());
        let hex: String = d.iter().map(|b| format!("{b:02x}")).collect();
        format!("sha256:{hex}")
    }
}

/// The box's sealing key.
pub struct Sealer {
    cipher: ChaCha20Poly1305,
}

impl Sealer {
    /// The key in `dir`, made (32 random bytes, 0600) if there is none.
    pub fn open_or_create(dir: &Path) -> std::io::Result<Sealer> {
        if let Some(s) = Sealer::open(dir)? {
            return Ok(s);
        }
        let mut key = Zeroizing::new([0u8; 32]);
        std::fs::File::open("/dev/urandom")?.read_exact(&mut *key)?;
        crate::files::create_private_dir(dir)?;
        let path = dir.join(SEAL_KEY_FILE);
        let (mut f, created) = crate::files::open_or_create_private(&path, |_| {})?;
        if !created {
            // Another writer made it meanwhile: use theirs.
            drop(f);
            return Sealer::open(dir)?.ok_or_else(|| std::io::Error::other("secrets.key vanished"));
        }
        f.write_all(STANDARD.encode(*key).as_bytes())?;
        f.sync_all()?;
        Ok(Sealer::from_key(&*key))
    }

    /// The key in `dir`, if there is one.
    pub fn open(dir: &Path) -> std::io::Result<Option<Sealer>> {
        let path = dir.join(SEAL_KEY_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => Zeroizing::new(t),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let key = Zeroizing::new(STANDARD.decode(text.trim()).unwrap_or_default());
        if key.len() != 32 {
            return Err(std::io::Error::other(format!(
                "{} does not hold a 32-byte key in base64",
                path.display()
            )));
        }
        Ok(Some(Sealer::from_key(&key)))
    }

    fn from_key(key: &[u8]) -> Sealer {
        Sealer {
            cipher: ChaCha20Poly1305::new_from_slice(key).expect("a 32-byte key"),
        }
    }

    /// "sealed:" and the base64 of a random nonce and the ciphertext.
    pub fn seal(&self, secret: &SecretText) -> std::io::Result<SecretText> {
        let mut nonce = [0u8; 12];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut nonce)?;
        let sealed = self
            .cipher
            .encrypt(&Nonce::from(nonce), secret.expose().as_bytes())
            .map_err(|_| std::io::Error::other("sealing a secret failed"))?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        Ok(SecretText::new(format!("{SEALED}{}", STANDARD.encode(out))))
    }

    /// The secret a `seal` made; an error names no part of it.
    pub fn unseal(&self, sealed: &SecretText) -> anyhow::Result<SecretText> {
        let bad = || anyhow::anyhow!("a sealed secret does not open with {SEAL_KEY_FILE}");
        let raw = STANDARD
            .decode(sealed.expose().strip_prefix(SEALED).ok_or_else(bad)?)
            .map_err(|_| bad())?;
        if raw.len() < 12 {
            return Err(bad());
        }
        let plain = Zeroizing::new(
            self.cipher
                .decrypt(&Nonce::try_from(&raw[..12]).map_err(|_| bad())?, &raw[12..])
                .map_err(|_| bad())?,
        );
        let text = std::str::from_utf8(&plain).map_err(|_| bad())?;
        Ok(SecretText::new(text.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seals_and_opens_with_a_private_key_file() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        assert!(Sealer::open(dir.path()).unwrap().is_none());
        let s = Sealer::open_or_create(dir.path()).unwrap();
        let mode = std::fs::metadata(dir.path().join(SEAL_KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let secret = SecretText::new("DHHC-1:00:abc:".into());
        let sealed = s.seal(&secret).unwrap();
        assert!(sealed.is_sealed() && !sealed.expose().contains("abc"));
        assert_ne!(sealed, s.seal(&secret).unwrap(), "a fresh nonce each time");
        // The same key file opens it again; another box's does not; tampering is caught.
        let again = Sealer::open_or_create(dir.path()).unwrap();
        assert_eq!(again.unseal(&sealed).unwrap(), secret);
        let other = Sealer::open_or_create(tempfile::tempdir().unwrap().path()).unwrap();
        assert!(other.unseal(&sealed).is_err());
        let mut t = sealed.expose().to_string();
        t.pop();
        t.push(if sealed.expose().ends_with('A') {
            'B'
        } else {
            'A'
        });
        assert!(s.unseal(&SecretText::new(t)).is_err());
        assert_eq!(format!("{secret:?}"), "SecretText(<redacted>)");
    }
}
