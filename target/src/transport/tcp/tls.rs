//! TLS 1.3 on NVMe/TCP ports, with configured PSKs (NVMe/TCP transport 3.6): the host's
//! ClientHello offers a PSK identity naming its host NQN and the subsystem
//! (`fabrik_proto::tls::PskIdentity`); the controller derives that identity's TLS PSK from the
//! host's configured key, and the whole connection, ICReq on, is TLS application data.
//!
//! The handshake is OpenSSL's, through `fabrik_tls` (rustls has no external PSKs): SHA-256
//! PSKs with the SHA-256 suites (TLS_AES_128_GCM_SHA256 first), SHA-384 ones with
//! TLS_AES_256_GCM_SHA384; no session tickets (the kernel host's kTLS takes any record but
//! application data after the handshake as fatal).

use std::collections::HashMap;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use fabrik_proto::tls::{tls_psk, ConfiguredPsk, LabelEncoding, PskIdentity};
use fabrik_tls::Psk;
use openssl::ssl::{Ssl, SslContext};
use tokio::io::BufWriter;
use tokio::net::TcpStream;
use tokio_openssl::SslStream;
use zeroize::Zeroizing;

/// The Linux host's and target's handshake timeout (`tls_handshake_timeout`, 10 s).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The configured PSKs: one per host NQN, and one for any other host.
pub struct TlsKeys {
    any_host: Option<ConfiguredPsk>,
    hosts: HashMap<String, ConfiguredPsk>,
    encoding: LabelEncoding,
}

impl std::fmt::Debug for TlsKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsKeys")
            .field("any_host", &self.any_host.is_some())
            .field("hosts", &self.hosts.len())
            .field("encoding", &self.encoding)
            .finish()
    }
}

impl TlsKeys {
    /// Reads the key file: one key a line, `NVMeTLSkey-1:..:` (any host) or `HOSTNQN
    /// NVMeTLSkey-1:..:`; blank lines and `#` comments skipped. The file holds secrets, so it
    /// must not be readable by others than its owner (as ssh demands of private keys).
    pub fn load(path: &Path, encoding: LabelEncoding) -> anyhow::Result<TlsKeys> {
        use std::os::unix::fs::PermissionsExt;
        let what = || format!("TLS PSK file {}", path.display());
        let meta = std::fs::metadata(path).with_context(what)?;
        if meta.permissions().mode() & 0o077 != 0 {
            bail!(
                "{}: readable by others (mode {:o}): chmod 600 it",
                what(),
                meta.permissions().mode() & 0o777
            );
        }
        let text = Zeroizing::new(std::fs::read_to_string(path).with_context(what)?);
        TlsKeys::parse(&text, encoding).with_context(what)
    }

    pub fn parse(text: &str, encoding: LabelEncoding) -> anyhow::Result<TlsKeys> {
        let mut keys = TlsKeys {
            any_host: None,
            hosts: HashMap::new(),
            encoding,
        };
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let n = i + 1;
            let (host, key) = match line.split_once(char::is_whitespace) {
                Some((host, key)) => (Some(host), key.trim()),
                None => (None, line),
            };
            // The error names the line, never its key.
            let key = ConfiguredPsk::parse(key).with_context(|| format!("line {n}"))?;
            let dup = match host {
                Some(h) => keys.hosts.insert(h.to_string(), key).is_some(),
                None => keys.any_host.replace(key).is_some(),
            };
            if dup {
                bail!("line {n}: a second key for {}", host.unwrap_or("any host"));
            }
        }
        if keys.any_host.is_none() && keys.hosts.is_empty() {
            bail!("no key in it");
        }
        Ok(keys)
    }

    /// The TLS PSK for a ClientHello's identity, or why there is none.
    fn psk(&self, identity: &PskIdentity) -> Result<Zeroizing<Vec<u8>>, String> {
        let key = self
            .hosts
            .get(&identity.hostnqn)
            .or(self.any_host.as_ref())
            .ok_or("no key for the host")?;
        tls_psk(key, identity, self.encoding).map_err(|e| e.to_string())
    }
}

/// The socket under TLS: OpenSSL writes each record (16 KiB at most) on its own, and these
/// buffered records go out together when the connection flushes (a 128 KiB read is 8 records:
/// 8 system calls without it).
pub type Records = BufWriter<TcpStream>;
const RECORDS_BUFFER: usize = 256 * 1024;

/// A port's TLS: the keys and the OpenSSL context that serves them.
pub struct TlsServer {
    ctx: SslContext,
}

/// Why a connection's handshake failed.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("no TLS handshake within {0:?}")]
    Timeout(Duration),
    #[error("TLS handshake: {0}")]
    Tls(String),
}

impl TlsServer {
    pub fn new(keys: TlsKeys) -> anyhow::Result<TlsServer> {
        let keys = Arc::new(keys);
        let ctx = fabrik_tls::server_context(Arc::new(move |identity| {
            let shown = String::from_utf8_lossy(identity);
            let found = PskIdentity::parse(identity)
                .map_err(|e| e.to_string())
                .and_then(|id| keys.psk(&id).map(|key| Psk { hash: id.hash, key }));
            match found {
                Ok(psk) => Some(psk),
                Err(why) => {
                    // No PSK: the handshake fails with an alert to the host.
                    tracing::info!(identity = %shown, "TLS PSK refused: {why}");
                    None
                }
            }
        }))?;
        Ok(TlsServer { ctx })
    }

    /// The server side of the handshake on a new connection; the identity the host chose.
    pub async fn accept(
        &self,
        stream: TcpStream,
    ) -> Result<(SslStream<Records>, PskIdentity), HandshakeError> {
        let tls = |e: &dyn std::fmt::Display| HandshakeError::Tls(e.to_string());
        let ssl = Ssl::new(&self.ctx).map_err(|e| tls(&e))?;
        let stream = BufWriter::with_capacity(RECORDS_BUFFER, stream);
        let mut stream = SslStream::new(ssl, stream).map_err(|e| tls(&e))?;
        crate::timer::timeout(HANDSHAKE_TIMEOUT, Pin::new(&mut stream).accept())
            .await
            .map_err(|_| HandshakeError::Timeout(HANDSHAKE_TIMEOUT))?
            .map_err(|e| tls(&e))?;
        // The lookup accepted it: it parses.
        let identity = fabrik_tls::accepted_identity(stream.ssl())
            .and_then(|raw| PskIdentity::parse(raw).ok())
            .ok_or_else(|| HandshakeError::Tls("no PSK identity negotiated".into()))?;
        Ok((stream, identity))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "NVMeTLSkey-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";

    #[test]
    fn key_file_lines() {
        let text = format!("# keys\n\n{KEY}\nnqn.2014-08.org.nvmexpress:uuid:a  {KEY}\n");
        let keys = TlsKeys::parse(&text, LabelEncoding::Rfc8446).unwrap();
        assert!(keys.any_host.is_some());
        assert_eq!(keys.hosts.len(), 1);
        let err = |t: &str| {
            format!(
                "{:#}",
                TlsKeys::parse(t, LabelEncoding::Rfc8446).unwrap_err()
            )
        };
        assert!(err("").contains("no key"));
        assert!(err(&format!("{KEY}\n{KEY}")).contains("line 2: a second key for any host"));
        let bad = KEY.replace("AAEC", "AAED");
        let e = err(&format!("h {bad}"));
        assert!(e.contains("line 1") && e.contains("CRC"), "{e}");
        assert!(!e.contains("AAED"), "the error repeats the key: {e}");
        let sha384 = "NVMeTLSkey-1:02:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vcSEgBQ==:";
        assert!(TlsKeys::parse(sha384, LabelEncoding::Rfc8446).is_ok());
    }

    #[test]
    fn key_file_must_be_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("psk");
        std::fs::write(&path, KEY).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = format!(
            "{:#}",
            TlsKeys::load(&path, LabelEncoding::Rfc8446).unwrap_err()
        );
        assert!(e.contains("chmod 600"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(TlsKeys::load(&path, LabelEncoding::Rfc8446).is_ok());
    }
}
