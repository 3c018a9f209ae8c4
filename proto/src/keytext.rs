//! The text form NVMe gives both its secrets: `<prefix><nn>:<base64(key ‖ CRC-32(key) LE)>:`,
//! `DHHC-1:` for DH-HMAC-CHAP secrets (`auth::Secret`), `NVMeTLSkey-1:` for TLS PSKs
//! (`tls::ConfiguredPsk`), `nn` two decimal digits each gives its own meaning.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use zeroize::{Zeroize, Zeroizing};

/// Why a text is not a key of the form (the text itself is never repeated: it is a secret).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeyTextError {
    Format,
    Base64,
    /// No key before the CRC.
    Length,
    Crc,
}

/// The `nn` field and the key, its CRC checked; `key_lens` are the key lengths the caller takes
/// (a text of another length is `Length` before its CRC is looked at).
pub(crate) fn decode<'t>(
    text: &'t str,
    prefix: &str,
    key_lens: &[usize],
) -> Result<(&'t str, Zeroizing<Vec<u8>>), KeyTextError> {
    let rest = text
        .strip_prefix(prefix)
        .and_then(|r| r.strip_suffix(':'))
        .ok_or(KeyTextError::Format)?;
    let (nn, b64) = rest.split_once(':').ok_or(KeyTextError::Format)?;
    let mut raw = Zeroizing::new(
        STANDARD
            .decode(b64.as_bytes())
            .map_err(|_| KeyTextError::Base64)?,
    );
    let n = raw.len().checked_sub(4).ok_or(KeyTextError::Length)?;
    if !key_lens.contains(&n) {
        return Err(KeyTextError::Length);
    }
    let crc = u32::from_le_bytes([raw[n], raw[n + 1], raw[n + 2], raw[n + 3]]);
    if crc32fast::hash(&raw[..n]) != crc {
        return Err(KeyTextError::Crc);
    }
    raw.truncate(n);
    Ok((nn, raw))
}

/// The text of `key` with field `nn` (0..=99).
pub(crate) fn encode(prefix: &str, nn: u8, key: &[u8]) -> Zeroizing<String> {
    let mut raw = Zeroizing::new(key.to_vec());
    raw.extend_from_slice(&crc32fast::hash(key).to_le_bytes());
    let mut b64 = STANDARD.encode(&*raw);
    let text = format!("{prefix}{nn:02}:{b64}:");
    b64.zeroize();
    Zeroizing::new(text)
}
