//! Vectors made independently: Python's hmac, hashlib, zlib and base64, with HKDF written out
//! from RFC 5869 and the three label layouts of `NVMEOF-FACTS-2.md` D.3.

use super::*;

const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6";
const SUB: &str = "nqn.2024-01.io.fabrik:box:drive-00";

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

struct Vector {
    key: &'static str,
    encoding: LabelEncoding,
    retained: &'static str,
    digest: &'static str,
    v0: &'static str,
    v1: &'static str,
}

const SHA256_KEY: &str = "NVMeTLSkey-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
const SHA384_KEY: &str =
    "NVMeTLSkey-1:02:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vcSEgBQ==:";
const PLAIN_KEY: &str = "NVMeTLSkey-1:00:ZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXp7fH1+f4CBgoOeXryU:";

const VECTORS: &[Vector] = &[
    Vector {
        key: SHA256_KEY,
        encoding: LabelEncoding::Rfc8446,
        retained: "2777170cfb82b52c5ec8cb00cc26fa9145d942315f2c892822b0772f5debe85d",
        digest: "rura+zh9H7XfhuSkUvxGVoL/N/PPVz8A2MEuu3tl0ys=",
        v0: "62b6bf71e046f1610f88cd41565dde8af17a80c0ebf01e516ab0e6afc838b79d",
        v1: "0e6d88a15c8cce4f60893d1b67acc6795e5dd46402fb31835cb1122aba614064",
    },
    Vector {
        key: SHA256_KEY,
        encoding: LabelEncoding::Compat,
        retained: "8ea8c172dcbe294d04395b23836f5a90decc74a756669406f9c341df82b6ba04",
        digest: "8nhXnvPx7kxJjU10iXrURL/WIY+EL9Gsl4F/M9jsheA=",
        v0: "372477a8fa803dbac502cb82d4e43ce0f0b91e58ae6bf20b252da2e85a8ca244",
        v1: "0a9fdb353507aca6d0268adb613840c57ae0020c297b1afbf594bbf79c83cada",
    },
    Vector {
        key: SHA256_KEY,
        encoding: LabelEncoding::NoLength,
        retained: "91b6198d844a70d39c8c106c4a0777837d5aae9320c9a4ef570221c5773da33d",
        digest: "nB7z2JNe5DpjTrXlKIGEMh88Xv1PY8/K+nf+xbbU7WE=",
        v0: "fcfaa9eb14d05d4091b695d56f5e8c5ffa4b76a37a9f06cb3ba85f7020d5fa8b",
        v1: "06567f6b26ed33d38928e2ab4960185c508e5dee3f363d8abcc8ab3f7bf765f9",
    },
    Vector {
        key: SHA384_KEY,
        encoding: LabelEncoding::Rfc8446,
        retained: "9199e9844a95310712a6436350cb36769e36bb02461989493acb7f9419f9d1ca81374a176479e87994f6c7c17c5f2800",
        digest: "lfRob6p8kFluP2s6/KTGU3nfIoK43DKPmDT30TYyAKRlT0gg4k2Me5ohB23wsAlB",
        v0: "aeeaf905ea76ee79c9b630b2a3ad54b6077dec16a01ce6947f714bfdb1e3b188c80458c45f81759b7a924378d61d069d",
        v1: "afa90699d7803600bb5568f83f3795307f1117734eeb938fa77587315bfc8ab7475862d47d76e2bddc4a205f8c524e39",
    },
    Vector {
        key: SHA384_KEY,
        encoding: LabelEncoding::Compat,
        retained: "ea105ee8428afdba7ac84740c2acc77a9d5d3226b0b0908931dc92d917dfda80e102f0052555c88af7116d40da771a70",
        digest: "cgvhNBqrV6weBmpsmDvAygtcI97JP7WbqhfArQfuJVPXV87wHUOHLS/YFTAk8lvO",
        v0: "8508b0b590306163714142a655ddd71005f0ead34b6cc0e580387b461331f076375d99968c8d028a070cb2cd6b9d44c7",
        v1: "bc2cf179ed9047258e5778ce2333e7168d1b4108cd96564a5bfbcc9a3f920ed8c8f0d02673aede1102a18c03cdc4506c",
    },
    Vector {
        key: PLAIN_KEY,
        encoding: LabelEncoding::Rfc8446,
        retained: "6465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f80818283",
        digest: "N/UmFmkelz6JuyH0gW0SuX256lXxotwb2FaH6uPIbUE=",
        v0: "d9b3cd4cf921df1629ec767aecf6e5aa22a9913eea5f2010641d41e676eaf7a7",
        v1: "1424ca7b95ec1f057175070cb1f36b06db7959b0a96eb3a79e3f1e7afdf2d647",
    },
    Vector {
        key: PLAIN_KEY,
        encoding: LabelEncoding::NoLength,
        retained: "6465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f80818283",
        digest: "N/UmFmkelz6JuyH0gW0SuX256lXxotwb2FaH6uPIbUE=",
        v0: "9748ac219a2ead95fa9c008e46cbbbe0a673fa298cf1e74acd3d8c20cb4f6630",
        v1: "ce5d635906a1b62c803f616d0f3d762840bbe2b319f7ed1697be2960d11890d4",
    },
];

#[test]
fn derivations_match_an_independent_implementation() {
    for v in VECTORS {
        let key = ConfiguredPsk::parse(v.key).unwrap();
        let what = format!("{} {:?}", &v.key[..16], v.encoding);
        let retained = key.retained(HOST, v.encoding).unwrap();
        assert_eq!(hex(&retained.key), v.retained, "retained, {what}");
        assert_eq!(retained.digest(HOST, SUB), v.digest, "digest, {what}");
        for (version, want) in [(0, v.v0), (1, v.v1)] {
            let identity = retained.identity(version, HOST, SUB);
            let psk = tls_psk(&key, &identity, v.encoding).unwrap();
            assert_eq!(hex(&psk), want, "version {version} TLS PSK, {what}");
            // What the host sends parses back to the same identity.
            assert_eq!(
                PskIdentity::parse(identity.to_text().as_bytes()).unwrap(),
                identity
            );
        }
    }
}

#[test]
fn interchange_text_round_trips_and_checks() {
    for text in [SHA256_KEY, SHA384_KEY, PLAIN_KEY] {
        let key = ConfiguredPsk::parse(text).unwrap();
        assert_eq!(&*key.to_text(), text);
        assert!(!format!("{key:?}").contains("AAEC"));
    }
    // nvme-cli's lengths: 65 characters for 32 bytes, 89 for 48.
    assert_eq!(SHA256_KEY.len(), 65);
    assert_eq!(SHA384_KEY.len(), 89);
    assert_eq!(
        ConfiguredPsk::parse(SHA384_KEY).unwrap().psk_hash(),
        PskHash::Sha384
    );
    let mut bad_crc = SHA256_KEY.to_string();
    bad_crc.replace_range(20..21, "B");
    assert_eq!(ConfiguredPsk::parse(&bad_crc), Err(PskError::Crc));
    assert_eq!(
        ConfiguredPsk::parse(&SHA256_KEY.replace(":01:", ":03:")),
        Err(PskError::Hash)
    );
    // A 32-byte key cannot claim SHA-384.
    assert_eq!(
        ConfiguredPsk::parse(&SHA256_KEY.replace(":01:", ":02:")),
        Err(PskError::Length)
    );
    assert_eq!(
        ConfiguredPsk::parse(&SHA256_KEY[..64]),
        Err(PskError::Format)
    );
    assert_eq!(
        ConfiguredPsk::parse("NVMeTLSkey-1:01:!!!!:"),
        Err(PskError::Base64)
    );
    assert_eq!(
        ConfiguredPsk::parse("NVMeTLSkey-1:01:AAAA:"),
        Err(PskError::Length)
    );
}

#[test]
fn identities_parse_strictly() {
    let v0 = format!("NVMe0R01 {HOST} {SUB}");
    let id = PskIdentity::parse(v0.as_bytes()).unwrap();
    assert_eq!(
        (id.version, id.hash, id.digest.as_deref()),
        (0, PskHash::Sha256, None)
    );
    assert_eq!(id.hostnqn, HOST);
    assert_eq!(id.subnqn, SUB);
    assert_eq!(id.to_text(), v0);
    for (bad, why) in [
        (format!("NVMe2R01 {HOST} {SUB}"), IdentityError::Version),
        (format!("NVMe0G01 {HOST} {SUB}"), IdentityError::Generated),
        (format!("NVMe0R03 {HOST} {SUB}"), IdentityError::Hash),
        (format!("NVMe0R01 {HOST}"), IdentityError::Format),
        (
            format!("NVMe0R01 {HOST} {SUB} digest"),
            IdentityError::Format,
        ),
        (format!("NVMe1R01 {HOST} {SUB}"), IdentityError::Format),
        (format!("NVMe1R01 {HOST} {SUB} d x"), IdentityError::Format),
        (format!("NVMe0R01  {SUB}"), IdentityError::Format),
        ("Client_identity".to_string(), IdentityError::Format),
    ] {
        assert_eq!(PskIdentity::parse(bad.as_bytes()), Err(why), "{bad}");
    }
    assert_eq!(
        PskIdentity::parse(&[0xff, 0xfe]),
        Err(IdentityError::Format)
    );
}

#[test]
fn refused_identities() {
    let key = ConfiguredPsk::parse(SHA256_KEY).unwrap();
    let other = ConfiguredPsk::new(Some(PskHash::Sha256), &[9; 32]).unwrap();
    let enc = LabelEncoding::Rfc8446;
    // Another key's digest: refused (the host holds a different key).
    let foreign = other.retained(HOST, enc).unwrap().identity(1, HOST, SUB);
    assert_eq!(tls_psk(&key, &foreign, enc), Err(PskRefused::Digest));
    // A SHA-384 identity for a SHA-256 key.
    let mut wrong_hash = key.retained(HOST, enc).unwrap().identity(0, HOST, SUB);
    wrong_hash.hash = PskHash::Sha384;
    assert_eq!(tls_psk(&key, &wrong_hash, enc), Err(PskRefused::Hash));
    // A version 0 identity past 255 bytes has no RFC 8446 context; version 1 has.
    let long = format!("nqn.2024-01.io.fabrik:{}", "x".repeat(200));
    let id0 = key.retained(&long, enc).unwrap().identity(0, &long, SUB);
    assert_eq!(
        tls_psk(&key, &id0, enc),
        Err(PskRefused::Derive(DeriveError::ContextTooLong))
    );
    let id1 = key.retained(&long, enc).unwrap().identity(1, &long, SUB);
    assert_eq!(tls_psk(&key, &id1, enc).unwrap().len(), 32);
    assert!(tls_psk(&key, &id0, LabelEncoding::Compat).is_ok());
}

#[test]
fn encodings_by_name() {
    for e in LabelEncoding::ALL {
        assert_eq!(LabelEncoding::from_name(e.name()), Some(e));
    }
    assert_eq!(LabelEncoding::from_name("rfc"), None);
}
