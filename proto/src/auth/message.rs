//! The DH-HMAC-CHAP transaction's messages, carried by Authentication Send (host to controller)
//! and Authentication Receive (controller to host). All fields little-endian; every message
//! starts with AUTH_TYPE (0: common, 1: DH-HMAC-CHAP), AUTH_ID and the transaction ID (T_ID,
//! bytes 4..6).

use super::{DhGroup, HashId};
use crate::error::{need, DecodeError};

const WHAT: &str = "authentication message";

/// AUTH_TYPE/AUTH_ID pairs.
mod id {
    pub const NEGOTIATE: (u8, u8) = (0x00, 0x00);
    pub const CHALLENGE: (u8, u8) = (0x01, 0x01);
    pub const REPLY: (u8, u8) = (0x01, 0x02);
    pub const SUCCESS1: (u8, u8) = (0x01, 0x03);
    pub const SUCCESS2: (u8, u8) = (0x01, 0x04);
    pub const FAILURE2: (u8, u8) = (0x00, 0xf0);
    pub const FAILURE1: (u8, u8) = (0x00, 0xf1);
}

/// AUTHID of the DH-HMAC-CHAP protocol descriptor in a Negotiate.
pub const AUTHID_DHCHAP: u8 = 0x01;
/// A Negotiate's protocol descriptor: 64 bytes from byte 8.
const DESCRIPTOR_LEN: usize = 64;
/// Hash and DH group lists hold at most 30 IDs each.
const MAX_IDS: usize = 30;

/// Failure REASON: the only one defined.
pub const REASON_FAILED: u8 = 0x01;

/// Failure EXPLANATIONs.
pub mod explanation {
    /// Authentication failed (a response did not match).
    pub const FAILED: u8 = 0x01;
    pub const PROTOCOL_NOT_USABLE: u8 = 0x02;
    pub const SECURE_CHANNEL_MISMATCH: u8 = 0x03;
    pub const HASH_NOT_USABLE: u8 = 0x04;
    pub const DHGROUP_NOT_USABLE: u8 = 0x05;
    pub const INCORRECT_PAYLOAD: u8 = 0x06;
    pub const INCORRECT_PROTOCOL_MESSAGE: u8 = 0x07;
}

/// One message of a transaction, as sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// AUTH_Negotiate (host): the secure channel concatenation it asks for (SC_C, byte 6) and
    /// the hash functions and DH groups its DH-HMAC-CHAP descriptor offers, by ID.
    Negotiate {
        t_id: u16,
        sc_c: u8,
        /// Protocol descriptors other than DH-HMAC-CHAP are skipped; none: `dhchap` is None.
        dhchap: Option<Offer>,
    },
    /// DH-HMAC-CHAP_Challenge (controller).
    Challenge {
        t_id: u16,
        hash: HashId,
        dhgroup: DhGroup,
        /// S1.
        seqnum: u32,
        /// C1, as long as the hash's output.
        challenge: Vec<u8>,
        /// The controller's DH public value (empty for the null group).
        public: Vec<u8>,
    },
    /// DH-HMAC-CHAP_Reply (host).
    Reply {
        t_id: u16,
        /// R1.
        response: Vec<u8>,
        /// C2 when the host authenticates the controller too (CVALID), else None.
        challenge: Option<Vec<u8>>,
        /// S2.
        seqnum: u32,
        /// The host's DH public value.
        public: Vec<u8>,
    },
    /// DH-HMAC-CHAP_Success1 (controller), with R2 when the host asked for it. `hash_len` is HL.
    Success1 {
        t_id: u16,
        hash_len: u8,
        response: Option<Vec<u8>>,
    },
    /// DH-HMAC-CHAP_Success2 (host, bidirectional only).
    Success2 { t_id: u16 },
    /// AUTH_Failure1 (controller) or AUTH_Failure2 (host, `from_host`).
    Failure {
        t_id: u16,
        from_host: bool,
        reason: u8,
        explanation: u8,
    },
}

/// What a host's DH-HMAC-CHAP descriptor offers: IDs as sent (unknown ones included, so a
/// controller can tell "nothing usable" from "nothing offered").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Offer {
    pub hashes: Vec<u8>,
    pub dhgroups: Vec<u8>,
}

fn field(offset: usize, reason: &'static str) -> DecodeError {
    DecodeError::field(WHAT, offset, reason)
}

fn u16_at(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

impl Message {
    pub fn t_id(&self) -> u16 {
        match *self {
            Message::Negotiate { t_id, .. }
            | Message::Challenge { t_id, .. }
            | Message::Reply { t_id, .. }
            | Message::Success1 { t_id, .. }
            | Message::Success2 { t_id }
            | Message::Failure { t_id, .. } => t_id,
        }
    }

    /// The message's name, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Message::Negotiate { .. } => "AUTH_Negotiate",
            Message::Challenge { .. } => "DH-HMAC-CHAP_Challenge",
            Message::Reply { .. } => "DH-HMAC-CHAP_Reply",
            Message::Success1 { .. } => "DH-HMAC-CHAP_Success1",
            Message::Success2 { .. } => "DH-HMAC-CHAP_Success2",
            Message::Failure {
                from_host: false, ..
            } => "AUTH_Failure1",
            Message::Failure {
                from_host: true, ..
            } => "AUTH_Failure2",
        }
    }

    /// Parses one message. Bytes after its end (a receive buffer's padding) are ignored;
    /// lengths that overrun the buffer, unknown types, hash or group IDs are errors.
    pub fn decode(b: &[u8]) -> Result<Message, DecodeError> {
        need(WHAT, b, 6)?;
        let t_id = u16_at(b, 4);
        match (b[0], b[1]) {
            id::NEGOTIATE => {
                need(WHAT, b, 8)?;
                let (sc_c, napd) = (b[6], b[7] as usize);
                if napd == 0 {
                    return Err(field(7, "no protocol descriptor"));
                }
                need(WHAT, b, 8 + napd * DESCRIPTOR_LEN)?;
                let mut dhchap = None;
                for i in 0..napd {
                    let at = 8 + i * DESCRIPTOR_LEN;
                    let d = &b[at..at + DESCRIPTOR_LEN];
                    if d[0] != AUTHID_DHCHAP {
                        continue;
                    }
                    let (halen, dhlen) = (d[2] as usize, d[3] as usize);
                    if halen > MAX_IDS {
                        return Err(field(at + 2, "HALEN over 30"));
                    }
                    if dhlen > MAX_IDS {
                        return Err(field(at + 3, "DHLEN over 30"));
                    }
                    dhchap = Some(Offer {
                        hashes: d[4..4 + halen].to_vec(),
                        dhgroups: d[34..34 + dhlen].to_vec(),
                    });
                }
                Ok(Message::Negotiate { t_id, sc_c, dhchap })
            }
            id::CHALLENGE => {
                need(WHAT, b, 16)?;
                let hl = b[6] as usize;
                let hash = HashId::from_id(b[8]).ok_or(field(8, "unknown hash function"))?;
                if hl != hash.len() {
                    return Err(field(6, "HL is not the hash's length"));
                }
                let dhgroup = DhGroup::from_id(b[9]).ok_or(field(9, "unknown DH group"))?;
                let dhvlen = u16_at(b, 10) as usize;
                if dhvlen != dhgroup.public_len() {
                    return Err(field(10, "DHVLEN is not the group's size"));
                }
                need(WHAT, b, 16 + hl + dhvlen)?;
                Ok(Message::Challenge {
                    t_id,
                    hash,
                    dhgroup,
                    seqnum: u32_at(b, 12),
                    challenge: b[16..16 + hl].to_vec(),
                    public: b[16 + hl..16 + hl + dhvlen].to_vec(),
                })
            }
            id::REPLY => {
                need(WHAT, b, 16)?;
                let hl = b[6] as usize;
                if HashId::from_len(hl).is_none() {
                    return Err(field(6, "HL is no hash's length"));
                }
                let cvalid = match b[8] {
                    0 => false,
                    1 => true,
                    _ => return Err(field(8, "CVALID is neither 0 nor 1")),
                };
                let dhvlen = u16_at(b, 10) as usize;
                need(WHAT, b, 16 + 2 * hl + dhvlen)?;
                let c2 = &b[16 + hl..16 + 2 * hl];
                Ok(Message::Reply {
                    t_id,
                    response: b[16..16 + hl].to_vec(),
                    challenge: cvalid.then(|| c2.to_vec()),
                    seqnum: u32_at(b, 12),
                    public: b[16 + 2 * hl..16 + 2 * hl + dhvlen].to_vec(),
                })
            }
            id::SUCCESS1 => {
                need(WHAT, b, 16)?;
                let hl = b[6];
                let response = match b[8] {
                    0 => None,
                    1 => {
                        if HashId::from_len(hl as usize).is_none() {
                            return Err(field(6, "HL is no hash's length"));
                        }
                        need(WHAT, b, 16 + hl as usize)?;
                        Some(b[16..16 + hl as usize].to_vec())
                    }
                    _ => return Err(field(8, "RVALID is neither 0 nor 1")),
                };
                Ok(Message::Success1 {
                    t_id,
                    hash_len: hl,
                    response,
                })
            }
            id::SUCCESS2 => {
                need(WHAT, b, 16)?;
                Ok(Message::Success2 { t_id })
            }
            id::FAILURE1 | id::FAILURE2 => {
                need(WHAT, b, 8)?;
                Ok(Message::Failure {
                    t_id,
                    from_host: b[1] == id::FAILURE2.1,
                    reason: b[6],
                    explanation: b[7],
                })
            }
            _ => Err(field(0, "unknown AUTH_TYPE/AUTH_ID")),
        }
    }

    /// The message's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let header = |(ty, id): (u8, u8), t_id: u16, len: usize| {
            let mut b = vec![0u8; len];
            b[0] = ty;
            b[1] = id;
            b[4..6].copy_from_slice(&t_id.to_le_bytes());
            b
        };
        match self {
            Message::Negotiate { t_id, sc_c, dhchap } => {
                // Without DH-HMAC-CHAP, one descriptor of no protocol (AUTHID 0) stands for
                // what the host offered instead: a Negotiate has at least one.
                let mut b = header(id::NEGOTIATE, *t_id, 8 + DESCRIPTOR_LEN);
                b[6] = *sc_c;
                b[7] = 1;
                if let Some(offer) = dhchap {
                    let d = &mut b[8..8 + DESCRIPTOR_LEN];
                    let (hashes, groups) = (
                        &offer.hashes[..offer.hashes.len().min(MAX_IDS)],
                        &offer.dhgroups[..offer.dhgroups.len().min(MAX_IDS)],
                    );
                    d[0] = AUTHID_DHCHAP;
                    d[2] = hashes.len() as u8;
                    d[3] = groups.len() as u8;
                    d[4..4 + hashes.len()].copy_from_slice(hashes);
                    d[34..34 + groups.len()].copy_from_slice(groups);
                }
                b
            }
            Message::Challenge {
                t_id,
                hash,
                dhgroup,
                seqnum,
                challenge,
                public,
            } => {
                let mut b = header(id::CHALLENGE, *t_id, 16 + challenge.len() + public.len());
                b[6] = challenge.len() as u8;
                b[8] = hash.id();
                b[9] = dhgroup.id();
                b[10..12].copy_from_slice(&(public.len() as u16).to_le_bytes());
                b[12..16].copy_from_slice(&seqnum.to_le_bytes());
                b[16..16 + challenge.len()].copy_from_slice(challenge);
                b[16 + challenge.len()..].copy_from_slice(public);
                b
            }
            Message::Reply {
                t_id,
                response,
                challenge,
                seqnum,
                public,
            } => {
                let hl = response.len();
                let mut b = header(id::REPLY, *t_id, 16 + 2 * hl + public.len());
                b[6] = hl as u8;
                b[8] = challenge.is_some() as u8;
                b[10..12].copy_from_slice(&(public.len() as u16).to_le_bytes());
                b[12..16].copy_from_slice(&seqnum.to_le_bytes());
                b[16..16 + hl].copy_from_slice(response);
                if let Some(c2) = challenge {
                    let n = c2.len().min(hl);
                    b[16 + hl..16 + hl + n].copy_from_slice(&c2[..n]);
                }
                b[16 + 2 * hl..].copy_from_slice(public);
                b
            }
            Message::Success1 {
                t_id,
                hash_len,
                response,
            } => {
                let len = 16 + response.as_ref().map_or(0, |r| r.len());
                let mut b = header(id::SUCCESS1, *t_id, len);
                b[6] = *hash_len;
                if let Some(r2) = response {
                    b[8] = 1;
                    b[16..].copy_from_slice(r2);
                }
                b
            }
            Message::Success2 { t_id } => header(id::SUCCESS2, *t_id, 16),
            Message::Failure {
                t_id,
                from_host,
                reason,
                explanation,
            } => {
                let kind = if *from_host {
                    id::FAILURE2
                } else {
                    id::FAILURE1
                };
                let mut b = header(kind, *t_id, 8);
                b[6] = *reason;
                b[7] = *explanation;
                b
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(m: Message) {
        let bytes = m.encode();
        assert_eq!(Message::decode(&bytes).unwrap(), m, "{}", m.name());
        // Padding after the message (a 4096-byte receive buffer) changes nothing.
        let mut padded = bytes.clone();
        padded.resize(4096, 0);
        assert_eq!(Message::decode(&padded).unwrap(), m);
        // Every truncation is an error, never a panic.
        for n in 0..bytes.len() {
            assert!(
                Message::decode(&bytes[..n]).is_err(),
                "{} cut at {n}",
                m.name()
            );
        }
    }

    #[test]
    fn every_message_round_trips() {
        round_trip(Message::Negotiate {
            t_id: 7,
            sc_c: 0,
            dhchap: Some(Offer {
                hashes: vec![1, 2, 3],
                dhgroups: vec![0, 1, 2, 3, 4, 5],
            }),
        });
        round_trip(Message::Challenge {
            t_id: 7,
            hash: HashId::Sha384,
            dhgroup: DhGroup::Ffdhe2048,
            seqnum: 0x0102_0304,
            challenge: vec![0xc1; 48],
            public: vec![0xd1; 256],
        });
        round_trip(Message::Reply {
            t_id: 7,
            response: vec![0xa1; 32],
            challenge: Some(vec![0xc2; 32]),
            seqnum: 9,
            public: vec![0xd2; 256],
        });
        round_trip(Message::Reply {
            t_id: 7,
            response: vec![0xa1; 64],
            challenge: None,
            seqnum: 0,
            public: vec![],
        });
        round_trip(Message::Success1 {
            t_id: 7,
            hash_len: 32,
            response: Some(vec![0xb2; 32]),
        });
        round_trip(Message::Success1 {
            t_id: 7,
            hash_len: 32,
            response: None,
        });
        round_trip(Message::Success2 { t_id: 7 });
        round_trip(Message::Negotiate {
            t_id: 1,
            sc_c: 0,
            dhchap: None,
        });
        for from_host in [false, true] {
            round_trip(Message::Failure {
                t_id: 7,
                from_host,
                reason: REASON_FAILED,
                explanation: explanation::HASH_NOT_USABLE,
            });
        }
    }

    /// The Linux host's Negotiate: 72 bytes, SC_C 0, one descriptor offering SHA-256/384/512
    /// and the null group and ffdhe2048..8192 (NVMEOF-FACTS-2 C.3).
    #[test]
    fn linux_negotiate_layout() {
        let mut b = vec![0u8; 72];
        b[4] = 0x2a;
        b[7] = 1;
        b[8] = 1;
        b[10] = 3;
        b[11] = 6;
        b[12..15].copy_from_slice(&[1, 2, 3]);
        b[42..48].copy_from_slice(&[0, 1, 2, 3, 4, 5]);
        let m = Message::decode(&b).unwrap();
        assert_eq!(
            m,
            Message::Negotiate {
                t_id: 0x2a,
                sc_c: 0,
                dhchap: Some(Offer {
                    hashes: vec![1, 2, 3],
                    dhgroups: vec![0, 1, 2, 3, 4, 5]
                })
            }
        );
        assert_eq!(m.encode(), b);
    }

    #[test]
    fn bad_fields_are_errors() {
        let challenge = Message::Challenge {
            t_id: 1,
            hash: HashId::Sha256,
            dhgroup: DhGroup::Null,
            seqnum: 1,
            challenge: vec![1; 32],
            public: vec![],
        }
        .encode();
        let mut b = challenge.clone();
        b[6] = 48; // HL not SHA-256's
        assert_eq!(Message::decode(&b).unwrap_err().offset(), 6);
        let mut b = challenge.clone();
        b[9] = 9; // no such group
        assert_eq!(Message::decode(&b).unwrap_err().offset(), 9);
        let mut b = challenge;
        b[10] = 1; // a public value with the null group
        assert_eq!(Message::decode(&b).unwrap_err().offset(), 10);
        let mut b = Message::Success2 { t_id: 1 }.encode();
        b[1] = 0x77;
        assert_eq!(Message::decode(&b).unwrap_err().offset(), 0);
    }
}
