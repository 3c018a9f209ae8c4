//! Handshakes between the two contexts over an in-memory stream, through OpenSSL itself.

use std::pin::Pin;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_openssl::SslStream;

use super::*;

fn psk(hash: PskHash, fill: u8) -> Psk {
    Psk {
        hash,
        key: Zeroizing::new(vec![fill; hash.len()]),
    }
}

/// A server that knows identity `known` with `key`.
fn server(known: &'static [u8], key: Psk) -> SslContext {
    server_context(Arc::new(move |id: &[u8]| {
        (id == known).then(|| key.clone())
    }))
    .unwrap()
}

/// Runs both ends: the suite both agreed on and the identity the server accepted, or the
/// client's error.
async fn handshake(client: SslContext, server: SslContext) -> Result<(String, Vec<u8>), String> {
    let (c, s) = tokio::io::duplex(64 * 1024);
    let server = tokio::spawn(async move {
        let mut s = SslStream::new(Ssl::new(&server).unwrap(), s).unwrap();
        Pin::new(&mut s).accept().await.ok()?;
        let mut buf = [0u8; 5];
        s.read_exact(&mut buf).await.ok()?;
        s.write_all(&buf).await.ok()?;
        s.flush().await.ok()?;
        let id = accepted_identity(s.ssl()).map(<[u8]>::to_vec);
        Some(id)
    });
    let mut c = SslStream::new(Ssl::new(&client).unwrap(), c).unwrap();
    let done = Pin::new(&mut c).connect().await;
    if let Err(e) = done {
        return Err(e.to_string());
    }
    let suite = c.ssl().current_cipher().unwrap().name().to_string();
    c.write_all(b"hello").await.unwrap();
    let mut echo = [0u8; 5];
    c.read_exact(&mut echo).await.map_err(|e| e.to_string())?;
    assert_eq!(&echo, b"hello");
    let id = server
        .await
        .unwrap()
        .flatten()
        .expect("the server accepted an identity");
    Ok((suite, id))
}

#[tokio::test]
async fn sha256_and_sha384_psks_handshake_with_their_suites() {
    for (hash, suite) in [
        (PskHash::Sha256, "TLS_AES_128_GCM_SHA256"),
        (PskHash::Sha384, "TLS_AES_256_GCM_SHA384"),
    ] {
        let client = client_context(b"NVMe1R0x host sub d", psk(hash, 7)).unwrap();
        let (got, id) = handshake(client, server(b"NVMe1R0x host sub d", psk(hash, 7)))
            .await
            .unwrap();
        assert_eq!(
            (got.as_str(), id.as_slice()),
            (suite, &b"NVMe1R0x host sub d"[..])
        );
    }
}

#[tokio::test]
async fn another_key_or_identity_is_refused() {
    let client = client_context(b"id", psk(PskHash::Sha256, 1)).unwrap();
    assert!(handshake(client, server(b"id", psk(PskHash::Sha256, 2)))
        .await
        .is_err());
    let client = client_context(b"other", psk(PskHash::Sha256, 1)).unwrap();
    assert!(handshake(client, server(b"id", psk(PskHash::Sha256, 1)))
        .await
        .is_err());
}

/// A client that offers a SHA-384 suite first with a SHA-256 PSK (OpenSSL's default order)
/// still gets in: the server narrows the suites to the PSK's hash before choosing.
#[tokio::test]
async fn the_server_picks_a_suite_of_the_psks_hash() {
    let mut b = builder(SslMethod::tls_client()).unwrap();
    b.set_ciphersuites(
        "TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256:TLS_AES_128_GCM_SHA256",
    )
    .unwrap();
    b.set_ex_data(
        client_index().unwrap(),
        (b"id".to_vec(), psk(PskHash::Sha256, 3)),
    );
    // SAFETY: as in `client_context`.
    unsafe { SSL_CTX_set_psk_use_session_callback(b.as_ptr(), Some(use_session)) };
    let (suite, _) = handshake(b.build(), server(b"id", psk(PskHash::Sha256, 3)))
        .await
        .unwrap();
    assert_eq!(suite, "TLS_CHACHA20_POLY1305_SHA256");
}

#[test]
fn offered_identities_parse_defensively() {
    // identities "ab" and "c" (ages 0), binders of 32 and 48 bytes.
    let mut ext = vec![0, 15, 0, 2, b'a', b'b', 0, 0, 0, 0, 0, 1, b'c', 0, 0, 0, 0];
    ext.extend_from_slice(&[0, 82, 32]);
    ext.extend_from_slice(&[1; 32]);
    ext.push(48);
    ext.extend_from_slice(&[2; 48]);
    assert_eq!(offered(&ext), vec![(&b"ab"[..], 32), (&b"c"[..], 48)]);
    // Binders cut short: nothing (OpenSSL refuses such a ClientHello anyway).
    assert!(offered(&ext[..ext.len() - 1]).is_empty());
    // Fewer binders than identities: those with one.
    let mut one = ext[..17].to_vec();
    one.extend_from_slice(&[0, 33, 32]);
    one.extend_from_slice(&[1; 32]);
    assert_eq!(offered(&one), vec![(&b"ab"[..], 32)]);
    for bad in [&[][..], &[0], &[0, 9, 0], &[0, 4, 0, 9, 1, 2], &ext[..17]] {
        assert!(offered(bad).is_empty(), "{bad:?}");
    }
}

/// A client that binds a 48-byte key to SHA-256 (tlshd before ktls-utils 1.1) gets in where
/// the server's key says SHA-384: the binder decides.
#[tokio::test]
async fn the_binder_decides_the_hash() {
    let key48 = |hash| Psk {
        hash,
        key: Zeroizing::new(vec![5; 48]),
    };
    let client = client_context(b"id", key48(PskHash::Sha256)).unwrap();
    let (suite, _) = handshake(client, server(b"id", key48(PskHash::Sha384)))
        .await
        .unwrap();
    assert_eq!(suite, "TLS_AES_128_GCM_SHA256");
}
