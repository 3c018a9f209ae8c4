//! TLS 1.3 with external PSKs (RFC 8446 4.2.11) over OpenSSL, for NVMe/TCP's configured PSKs
//! (`fabrik_proto::tls` derives them): the contexts fabrikd's ports and fabrik's host queues
//! handshake with.
//!
//! The openssl crate wraps only OpenSSL's TLS 1.2-era PSK callbacks, which in TLS 1.3 make
//! SHA-256 sessions and nothing else; a SHA-384 PSK (48 bytes, TLS_AES_256_GCM_SHA384) needs
//! the TLS 1.3 session callbacks, declared here. This crate is where fabrik calls OpenSSL
//! beyond the openssl crate, as rdma/ is for verbs: every unsafe block is here.
//!
//! rustls has no external PSKs (only resumption); OpenSSL's are the ones ktls-utils' peers (the
//! Linux host and nvmet through tlshd, GnuTLS) and SPDK (OpenSSL) meet.

use std::ffi::{c_int, c_uchar, c_uint};
use std::sync::{Arc, OnceLock};

use fabrik_proto::tls::PskHash;
use foreign_types::ForeignTypeRef;
use openssl::error::ErrorStack;
use openssl::ex_data::Index;
use openssl::ssl::{
    ClientHelloResponse, Ssl, SslContext, SslContextBuilder, SslMethod, SslOptions, SslRef,
    SslSessionCacheMode, SslVersion,
};
use openssl_sys::{SSL, SSL_CIPHER, SSL_CTX, SSL_SESSION};
use zeroize::Zeroizing;

/// A TLS 1.3 external PSK: the key and the hash it is bound to.
#[derive(Clone)]
pub struct Psk {
    pub hash: PskHash,
    pub key: Zeroizing<Vec<u8>>,
}

impl std::fmt::Debug for Psk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Psk({:?}, <{} bytes>)", self.hash, self.key.len())
    }
}

/// How a server finds the PSK of an identity a ClientHello offers (None: it has none); the
/// identity it took is `accepted_identity` once the handshake is done.
pub type Lookup = Arc<dyn Fn(&[u8]) -> Option<Psk> + Send + Sync>;

/// The TLS 1.3 suites of each PSK hash, as tlshd (GnuTLS) offers them: a PSK's hash must be
/// the suite's.
fn suites(hash: PskHash) -> &'static str {
    match hash {
        PskHash::Sha256 => {
            "TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256:TLS_AES_128_CCM_SHA256"
        }
        PskHash::Sha384 => "TLS_AES_256_GCM_SHA384",
    }
}

/// TLS 1.3 only, no session tickets (the Linux host's kTLS takes any record but application
/// data after the handshake as fatal), no session cache.
fn builder(method: SslMethod) -> Result<SslContextBuilder, ErrorStack> {
    let mut b = SslContext::builder(method)?;
    b.set_min_proto_version(Some(SslVersion::TLS1_3))?;
    b.set_max_proto_version(Some(SslVersion::TLS1_3))?;
    b.set_options(SslOptions::NO_TICKET);
    b.set_num_tickets(0)?;
    b.set_session_cache_mode(SslSessionCacheMode::OFF);
    // A read takes whatever the socket has, not one record header and then its body: two
    // system calls a record halved 4K IOPS over TLS.
    b.set_read_ahead(true);
    Ok(b)
}

/// A server context that takes the PSKs `lookup` finds. The ClientHello's identities are looked
/// up before OpenSSL chooses the suite, and the suites narrowed to the PSK's hash: the suite is
/// chosen before the PSK, and a suite of the other hash would leave the PSK unusable.
///
/// The hash is the one the client's binder was made with (its length), whatever the lookup
/// says: tlshd before ktls-utils 1.1 binds every key, 48-byte ones included, to SHA-256, and
/// the Linux host (through it) and nvmet then use a SHA-384 NVMe key as a SHA-256 PSK.
pub fn server_context(lookup: Lookup) -> Result<SslContext, ErrorStack> {
    let mut b = builder(SslMethod::tls_server())?;
    b.set_ciphersuites(&format!(
        "{}:{}",
        suites(PskHash::Sha256),
        suites(PskHash::Sha384)
    ))?;
    b.set_ex_data(server_index()?, lookup);
    b.set_client_hello_callback(|ssl, _alert| {
        if let Some(found) = look_up_offered(ssl) {
            ssl.set_ciphersuites(suites(found.1.hash))?;
            ssl.set_ex_data(chosen_index()?, found);
        }
        // Without a PSK the handshake fails (no certificate), with an alert to the client.
        Ok(ClientHelloResponse::SUCCESS)
    });
    // SAFETY: `b` owns a live SSL_CTX; the callback has the signature OpenSSL declares
    // (`SSL_psk_find_session_cb_func`) and never unwinds.
    unsafe { SSL_CTX_set_psk_find_session_callback(b.as_ptr(), Some(find_session)) };
    Ok(b.build())
}

/// A client context that offers `identity` with `psk` and the suites of its hash.
pub fn client_context(identity: &[u8], psk: Psk) -> Result<SslContext, ErrorStack> {
    let mut b = builder(SslMethod::tls_client())?;
    b.set_ciphersuites(suites(psk.hash))?;
    b.set_ex_data(client_index()?, (identity.to_vec(), psk));
    // SAFETY: as in `server_context`, for `SSL_psk_use_session_cb_func`.
    unsafe { SSL_CTX_set_psk_use_session_callback(b.as_ptr(), Some(use_session)) };
    Ok(b.build())
}

/// The identity the server accepted on `ssl`, once its handshake is done.
pub fn accepted_identity(ssl: &SslRef) -> Option<&[u8]> {
    let (identity, _) = ssl.ex_data(chosen_index().ok()?)?;
    Some(identity)
}

/// An identity and its PSK: the client's, and the one the server's ClientHello callback chose.
type Chosen = (Vec<u8>, Psk);

fn server_index() -> Result<Index<SslContext, Lookup>, ErrorStack> {
    static INDEX: OnceLock<Index<SslContext, Lookup>> = OnceLock::new();
    cached(&INDEX, SslContext::new_ex_index)
}

fn client_index() -> Result<Index<SslContext, Chosen>, ErrorStack> {
    static INDEX: OnceLock<Index<SslContext, Chosen>> = OnceLock::new();
    cached(&INDEX, SslContext::new_ex_index)
}

fn chosen_index() -> Result<Index<Ssl, Chosen>, ErrorStack> {
    static INDEX: OnceLock<Index<Ssl, Chosen>> = OnceLock::new();
    cached(&INDEX, Ssl::new_ex_index)
}

fn cached<T: Copy>(
    cell: &OnceLock<T>,
    make: impl FnOnce() -> Result<T, ErrorStack>,
) -> Result<T, ErrorStack> {
    if let Some(i) = cell.get() {
        return Ok(*i);
    }
    let i = make()?;
    Ok(*cell.get_or_init(|| i))
}

/// The pre_shared_key extension's type (RFC 8446 4.2).
const EXT_PRE_SHARED_KEY: c_uint = 41;

/// The first identity of the ClientHello's pre_shared_key extension that `lookup` has a PSK for.
fn look_up_offered(ssl: &mut SslRef) -> Option<Chosen> {
    let mut data: *const c_uchar = std::ptr::null();
    let mut len = 0usize;
    // SAFETY: called from the ClientHello callback, where OpenSSL allows it; on success `data`
    // points at `len` bytes owned by the connection, read before the callback returns.
    let ext = unsafe {
        if SSL_client_hello_get0_ext(ssl.as_ptr(), EXT_PRE_SHARED_KEY, &mut data, &mut len) != 1
            || data.is_null()
        {
            return None;
        }
        std::slice::from_raw_parts(data, len).to_vec()
    };
    let lookup = ssl.ssl_context().ex_data(server_index().ok()?)?.clone();
    offered(&ext)
        .into_iter()
        .find_map(|(identity, binder_len)| {
            let bound = PskHash::from_len(binder_len)?;
            let psk = lookup(identity)?;
            Some((identity.to_vec(), Psk { hash: bound, ..psk }))
        })
}

/// The identities of an OfferedPsks (`identities<7..2^16-1>` of `{identity<1..2^16-1>, u32
/// age}`, then `binders<33..2^16-1>` of `opaque<32..255>`, one per identity), each with its
/// binder's length; what is not well formed is left out.
fn offered(ext: &[u8]) -> Vec<(&[u8], usize)> {
    let u16_at = |b: &[u8], at: usize| {
        b.get(at..at + 2)
            .map(|x| u16::from_be_bytes([x[0], x[1]]) as usize)
    };
    let Some(total) = u16_at(ext, 0) else {
        return Vec::new();
    };
    let (Some(mut ids), Some(after)) = (ext.get(2..2 + total), ext.get(2 + total..)) else {
        return Vec::new();
    };
    let mut identities = Vec::new();
    while let Some(n) = u16_at(ids, 0) {
        let (Some(identity), Some(rest)) = (ids.get(2..2 + n), ids.get(2 + n + 4..)) else {
            break;
        };
        identities.push(identity);
        ids = rest;
    }
    let mut binders = match u16_at(after, 0) {
        Some(n) => after.get(2..2 + n).unwrap_or_default(),
        None => &[],
    };
    let mut out = Vec::new();
    for identity in identities {
        let Some(&n) = binders.first() else { break };
        let Some(rest) = binders.get(1 + n as usize..) else {
            break;
        };
        out.push((identity, n as usize));
        binders = rest;
    }
    out
}

/// A TLS 1.3 session carrying `psk` (RFC 8446 external PSKs are sessions in OpenSSL): the key
/// as its master key, a suite of its hash.
///
/// # Safety
/// `ssl` is a live connection (for the suite lookup).
unsafe fn psk_session(ssl: *mut SSL, psk: &Psk) -> *mut SSL_SESSION {
    let suite: [u8; 2] = match psk.hash {
        PskHash::Sha256 => [0x13, 0x01],
        PskHash::Sha384 => [0x13, 0x02],
    };
    let cipher = SSL_CIPHER_find(ssl, suite.as_ptr());
    if cipher.is_null() {
        return std::ptr::null_mut();
    }
    let session = SSL_SESSION_new();
    if session.is_null() {
        return session;
    }
    let ok = SSL_SESSION_set1_master_key(session, psk.key.as_ptr(), psk.key.len()) == 1
        && SSL_SESSION_set_cipher(session, cipher) == 1
        && SSL_SESSION_set_protocol_version(session, TLS1_3_VERSION) == 1;
    if !ok {
        openssl_sys::SSL_SESSION_free(session);
        return std::ptr::null_mut();
    }
    session
}

const TLS1_3_VERSION: c_int = 0x0304;

/// `SSL_psk_find_session_cb_func`: the session of the identity the ClientHello callback chose.
/// Returns 1 with `*sess` set, or NULL for no PSK; 0 only when OpenSSL failed.
unsafe extern "C" fn find_session(
    ssl: *mut SSL,
    identity: *const c_uchar,
    identity_len: usize,
    sess: *mut *mut SSL_SESSION,
) -> c_int {
    let run = std::panic::catch_unwind(|| {
        *sess = std::ptr::null_mut();
        // SAFETY: OpenSSL passes its live connection and `identity_len` bytes at `identity`.
        let ssl_ref = SslRef::from_ptr(ssl);
        let offered = std::slice::from_raw_parts(identity, identity_len);
        let Some((chosen, psk)) = chosen_index().ok().and_then(|i| ssl_ref.ex_data(i)) else {
            return 1;
        };
        if chosen.as_slice() != offered {
            return 1;
        }
        let session = psk_session(ssl, psk);
        if session.is_null() {
            return 0;
        }
        // OpenSSL takes this reference and frees the session.
        *sess = session;
        1
    });
    run.unwrap_or(0)
}

/// `SSL_psk_use_session_cb_func`: the client's identity and its PSK's session. Called again
/// with the digest the server chose (after a HelloRetryRequest): a PSK of another hash is then
/// withheld.
unsafe extern "C" fn use_session(
    ssl: *mut SSL,
    md: *const openssl_sys::EVP_MD,
    id: *mut *const c_uchar,
    idlen: *mut usize,
    sess: *mut *mut SSL_SESSION,
) -> c_int {
    let run = std::panic::catch_unwind(|| {
        *sess = std::ptr::null_mut();
        // SAFETY: OpenSSL passes its live connection.
        let ssl_ref = SslRef::from_ptr(ssl);
        let Some((identity, psk)) = client_index()
            .ok()
            .and_then(|i| ssl_ref.ssl_context().ex_data(i))
        else {
            return 1;
        };
        if !md.is_null() {
            // SAFETY: a digest OpenSSL hands over is a valid EVP_MD.
            let size = openssl::hash::MessageDigest::from_ptr(md).size();
            if size != psk.hash.len() {
                return 1;
            }
        }
        let session = psk_session(ssl, psk);
        if session.is_null() {
            return 0;
        }
        // The identity lives in the context's ex-data, which outlives the handshake (the
        // connection holds a reference to its context).
        *id = identity.as_ptr();
        *idlen = identity.len();
        *sess = session;
        1
    });
    run.unwrap_or(0)
}

type FindSession =
    unsafe extern "C" fn(*mut SSL, *const c_uchar, usize, *mut *mut SSL_SESSION) -> c_int;
type UseSession = unsafe extern "C" fn(
    *mut SSL,
    *const openssl_sys::EVP_MD,
    *mut *const c_uchar,
    *mut usize,
    *mut *mut SSL_SESSION,
) -> c_int;

// OpenSSL 1.1.1 and later (`ssl.h`); openssl-sys declares none of them.
extern "C" {
    fn SSL_CTX_set_psk_find_session_callback(ctx: *mut SSL_CTX, cb: Option<FindSession>);
    fn SSL_CTX_set_psk_use_session_callback(ctx: *mut SSL_CTX, cb: Option<UseSession>);
    fn SSL_SESSION_new() -> *mut SSL_SESSION;
    fn SSL_SESSION_set1_master_key(s: *mut SSL_SESSION, key: *const c_uchar, len: usize) -> c_int;
    fn SSL_SESSION_set_cipher(s: *mut SSL_SESSION, cipher: *const SSL_CIPHER) -> c_int;
    fn SSL_SESSION_set_protocol_version(s: *mut SSL_SESSION, version: c_int) -> c_int;
    fn SSL_CIPHER_find(ssl: *mut SSL, ptr: *const c_uchar) -> *const SSL_CIPHER;
}

use openssl_sys::SSL_client_hello_get0_ext;

#[cfg(test)]
mod tests;
