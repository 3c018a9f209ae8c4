//! TLS 1.3 for a host's NVMe/TCP queues, with a configured PSK (NVMe/TCP transport 3.6): each
//! queue opens its own TLS session before ICReq, offering the PSK identity of this host and the
//! subsystem and the TLS PSK derived for it (`fabrik_proto::tls`), as the Linux host does
//! through tlshd. OpenSSL, for its external PSKs (rustls has none); its TLS 1.3 PSK callback
//! makes SHA-256 sessions, so keys are SHA-256 ones.

use std::pin::Pin;
use std::sync::Arc;

use fabrik_proto::tls::{tls_psk, ConfiguredPsk, LabelEncoding, PskHash};
use openssl::ssl::{Ssl, SslContext, SslMethod, SslOptions, SslVersion};
use tokio::net::TcpStream;
use tokio_openssl::SslStream;

use crate::error::HostError;

/// The suites offered, as the target's (`fabrik_target::transport::tcp::tls`).
const CIPHERSUITES: &str =
    "TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256:TLS_AES_256_GCM_SHA384";

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
    ctx: SslContext,
}

impl std::fmt::Debug for TlsChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsChannel")
    }
}

impl TlsChannel {
    pub fn new(key: &TlsKey, hostnqn: &str, subnqn: &str) -> Result<Arc<TlsChannel>, HostError> {
        let invalid = |e: &dyn std::fmt::Display| HostError::Invalid(format!("TLS: {e}"));
        if key.psk.psk_hash() != PskHash::Sha256 {
            return Err(invalid(
                &"a SHA-384 PSK: fabrik takes SHA-256 ones (hash 01)",
            ));
        }
        let retained = key
            .psk
            .retained(hostnqn, key.label)
            .map_err(|e| invalid(&e))?;
        let identity = retained.identity(key.identity_version, hostnqn, subnqn);
        let psk = tls_psk(&key.psk, &identity, key.label).map_err(|e| invalid(&e))?;
        let identity = identity.to_text();
        let openssl = |e: openssl::error::ErrorStack| invalid(&e);
        let mut b = SslContext::builder(SslMethod::tls_client()).map_err(openssl)?;
        b.set_min_proto_version(Some(SslVersion::TLS1_3))
            .map_err(openssl)?;
        b.set_max_proto_version(Some(SslVersion::TLS1_3))
            .map_err(openssl)?;
        b.set_ciphersuites(CIPHERSUITES).map_err(openssl)?;
        b.set_options(SslOptions::NO_TICKET);
        b.set_psk_client_callback(move |_ssl, _hint, id_out, psk_out| {
            // OpenSSL takes the identity as a C string.
            let id = identity.as_bytes();
            if id.len() >= id_out.len() || psk.len() > psk_out.len() {
                return Ok(0);
            }
            id_out[..id.len()].copy_from_slice(id);
            id_out[id.len()] = 0;
            psk_out[..psk.len()].copy_from_slice(&psk);
            Ok(psk.len())
        });
        Ok(Arc::new(TlsChannel { ctx: b.build() }))
    }

    /// The client side of the handshake on queue `qid`'s new connection.
    pub async fn connect(
        &self,
        qid: u16,
        stream: TcpStream,
    ) -> Result<SslStream<TcpStream>, HostError> {
        let failed = |e: &dyn std::fmt::Display| HostError::Tls {
            qid,
            reason: e.to_string(),
        };
        let ssl = Ssl::new(&self.ctx).map_err(|e| failed(&e))?;
        let mut stream = SslStream::new(ssl, stream).map_err(|e| failed(&e))?;
        Pin::new(&mut stream)
            .connect()
            .await
            .map_err(|e| failed(&e))?;
        Ok(stream)
    }
}
