//! TLS 1.3 for a host's NVMe/TCP queues, with a configured PSK (NVMe/TCP transport 3.6): each
//! queue opens its own TLS session before ICReq, offering the PSK identity of this host and the
//! subsystem and the TLS PSK derived for it (`fabrik_proto::tls`), as the Linux host does
//! through tlshd. OpenSSL through `fabrik_tls` (rustls has no external PSKs): the suites of
//! the PSK's hash (TLS_AES_128_GCM_SHA256 first for SHA-256, TLS_AES_256_GCM_SHA384).

use std::pin::Pin;
use std::sync::Arc;

use fabrik_proto::tls::{tls_psk, ConfiguredPsk, LabelEncoding, PskHash};
use fabrik_tls::Psk;
use openssl::ssl::{Ssl, SslContext};
use tokio::net::TcpStream;
use tokio_openssl::SslStream;

use crate::error::HostError;

/// What a host connects with: its configured PSK, the identity version to offer and the HKDF
/// label layout the target derives with.
#[derive(Clone)]
pub struct TlsKey {
    pub psk: ConfiguredPsk,
    /// 1 (with the PSK digest; the Linux host looks for these first) or 0.
    pub identity_version: u8,
    pub label: LabelEncoding,
}

impl std::fmt::Debug for TlsKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "TlsKey({:?}, identity v{}, {})",
            self.psk,
            self.identity_version,
            self.label.name()
        )
    }
}

impl TlsKey {
    pub fn new(psk: ConfiguredPsk) -> TlsKey {
        TlsKey {
            psk,
            identity_version: 1,
            label: LabelEncoding::default(),
        }
    }
}

/// The TLS client of one controller's queues: the identity and PSK of its host and subsystem.
#[derive(Clone)]
pub struct TlsChannel {
    /// Tried in order, each on a connection of its own, until one handshakes.
    attempts: Vec<SslContext>,
}

impl std::fmt::Debug for TlsChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsChannel")
    }
}

impl TlsChannel {
    pub fn new(key: &TlsKey, hostnqn: &str, subnqn: &str) -> Result<Arc<TlsChannel>, HostError> {
        let invalid = |e: &dyn std::fmt::Display| HostError::Invalid(format!("TLS: {e}"));
        let retained = key
            .psk
            .retained(hostnqn, key.label)
            .map_err(|e| invalid(&e))?;
        let identity = retained.identity(key.identity_version, hostnqn, subnqn);
        let psk = Psk {
            hash: identity.hash,
            key: tls_psk(&key.psk, &identity, key.label).map_err(|e| invalid(&e))?,
        };
        let id = identity.to_text();
        let mut attempts = vec![psk.clone()];
        if psk.hash == PskHash::Sha384 {
            // tlshd before ktls-utils 1.1 (Debian 13's 1.0) binds every key to SHA-256, so
            // nvmet behind it takes a SHA-384 NVMe key as a SHA-256 PSK: the second try.
            attempts.push(Psk {
                hash: PskHash::Sha256,
                ..psk
            });
        }
        let attempts = attempts
            .into_iter()
            .map(|psk| fabrik_tls::client_context(id.as_bytes(), psk))
            .collect::<Result<_, _>>()
            .map_err(|e| invalid(&e))?;
        Ok(Arc::new(TlsChannel { attempts }))
    }

    /// How many handshakes a queue may try, each on a fresh connection.
    pub fn attempts(&self) -> usize {
        self.attempts.len()
    }

    /// The client side of handshake `attempt` on queue `qid`'s new connection.
    pub async fn connect(
        &self,
        attempt: usize,
        qid: u16,
        stream: TcpStream,
    ) -> Result<SslStream<TcpStream>, HostError> {
        let failed = |e: &dyn std::fmt::Display| HostError::Tls {
            qid,
            reason: e.to_string(),
        };
        let ssl = Ssl::new(&self.attempts[attempt]).map_err(|e| failed(&e))?;
        let mut stream = SslStream::new(ssl, stream).map_err(|e| failed(&e))?;
        Pin::new(&mut stream)
            .connect()
            .await
            .map_err(|e| failed(&e))?;
        Ok(stream)
    }
}
