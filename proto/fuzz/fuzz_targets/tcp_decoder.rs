//! The NVMe/TCP streaming decoder, both roles and every digest setting.
//!
//! Input: byte 0 picks the configuration, bytes 1..4 are chunk lengths used in turn, the rest
//! is the byte stream. The stream is decoded once whole and once in chunks; both must give the
//! same PDUs and errors, every PDU must survive an encode/decode round trip, and every fatal
//! error must give a termination request that the peer's decoder accepts. A third pass takes
//! data PDUs header first (`decode_data_head`, the payload taken by hand, as a receiver putting
//! data straight into its buffers does) and must agree too.

#![no_main]

use bytes::{Buf, BytesMut};
use fabrik_proto::tcp::{digest, DataHead, Decoder, Digests, Pdu, PduError, Role};
use libfuzzer_sys::fuzz_target;

#[derive(Clone, Copy, Debug)]
struct Config {
    role: Role,
    digests: Digests,
    max_data: u32,
}

impl Config {
    /// Bit 0: role (0 controller, 1 host); bits 1..3: DGST bits; bits 3..5: max_data.
    fn from_byte(b: u8) -> Config {
        let role = if b & 1 == 0 {
            Role::Controller
        } else {
            Role::Host
        };
        let max_data = [0, 512, 8192, u32::MAX][(b >> 3 & 3) as usize];
        Config {
            role,
            digests: Digests::from_bits(b >> 1 & 3),
            max_data,
        }
    }

    fn decoder(self) -> Decoder {
        let mut dec = Decoder::new(self.role, self.max_data);
        dec.set_digests(self.digests);
        dec
    }
}

/// What one decode call gave; fatal errors without the header copy, whose length depends on
/// how many bytes had arrived.
#[derive(PartialEq, Debug)]
enum Outcome {
    Pdu(Pdu),
    DataDigest(PduError),
    Fatal {
        fes: u16,
        fei: u32,
        reason: &'static str,
    },
}

impl Outcome {
    fn of(e: PduError) -> Outcome {
        match e {
            PduError::Fatal {
                fes, fei, reason, ..
            } => Outcome::Fatal { fes, fei, reason },
            e @ PduError::DataDigest { .. } => Outcome::DataDigest(e),
        }
    }
}

fuzz_target!(|input: &[u8]| {
    if input.len() < 4 {
        return;
    }
    let cfg = Config::from_byte(input[0]);
    let chunks: Vec<usize> = input[1..4].iter().map(|&c| c as usize + 1).collect();
    let stream = &input[4..];

    let whole = run(cfg, stream, &[usize::MAX]);
    let chunked = run(cfg, stream, &chunks);
    assert_eq!(whole, chunked, "chunking changed the outcome");

    // Header first judges a data PDU's header before its payload is there, so on a stream
    // that ends inside such a PDU it may see one fatal error more; otherwise it must agree.
    let header_first = run_header_first(cfg, stream, &chunks);
    let n = whole.len();
    assert_eq!(
        header_first[..n.min(header_first.len())],
        whole[..],
        "header first"
    );
    assert!(
        header_first.len() == n
            || (header_first.len() == n + 1
                && matches!(header_first[n], Outcome::Fatal { .. })
                && !matches!(whole.last(), Some(Outcome::Fatal { .. }))),
        "header first: {header_first:?} against {whole:?}"
    );
});

/// As `run`, taking data PDUs header first and their payload and digest by hand.
fn run_header_first(cfg: Config, stream: &[u8], chunks: &[usize]) -> Vec<Outcome> {
    let mut dec = cfg.decoder();
    let mut outcomes = Vec::new();
    // A data PDU whose header was taken: its payload (and digest) so far.
    let mut pending: Option<(DataHead, BytesMut)> = None;
    feed(stream, chunks, |buf| {
        drain_header_first(&mut dec, buf, &mut pending, &mut outcomes)
    });
    outcomes
}

/// As `drain`, header first: decodes until more bytes are needed (false) or a fatal error (true).
fn drain_header_first(
    dec: &mut Decoder,
    buf: &mut BytesMut,
    pending: &mut Option<(DataHead, BytesMut)>,
    out: &mut Vec<Outcome>,
) -> bool {
    loop {
        if let Some((head, got)) = pending {
            let need = head.data_len + if head.ddgst { 4 } else { 0 };
            let take = (need - got.len()).min(buf.len());
            got.extend_from_slice(&buf.split_to(take));
            if got.len() < need {
                return false;
            }
            let (head, mut got) = pending.take().expect("pending");
            out.push(finish_data(head, &mut got));
            continue;
        }
        match dec.decode_data_head(buf) {
            Ok(Some(head)) => {
                *pending = Some((head, BytesMut::new()));
                continue;
            }
            Ok(None) => {}
            Err(e @ PduError::Fatal { .. }) => {
                out.push(Outcome::of(e));
                return true;
            }
            Err(e) => panic!("decode_data_head gave {e:?}"),
        }
        match dec.decode(buf) {
            Ok(Some(pdu)) => out.push(Outcome::Pdu(pdu)),
            Ok(None) => return false,
            Err(e @ PduError::DataDigest { .. }) => out.push(Outcome::of(e)),
            Err(e @ PduError::Fatal { .. }) => {
                out.push(Outcome::of(e));
                return true;
            }
        }
    }
}

/// The outcome of a data PDU taken header first: `got` is its payload and digest.
fn finish_data(head: DataHead, got: &mut BytesMut) -> Outcome {
    let payload = got.split_to(head.data_len).freeze();
    let (pdu_type, cccid) = match &head.pdu {
        Pdu::C2HData(d) => (0x07, d.cccid),
        Pdu::H2CData(d) => (0x06, d.cccid),
        other => panic!("decode_data_head gave {other:?}"),
    };
    if head.ddgst && got.get_u32_le() != digest(&payload) {
        return Outcome::of(PduError::DataDigest { pdu_type, cccid });
    }
    let mut pdu = head.pdu;
    match &mut pdu {
        Pdu::C2HData(d) => d.data = payload,
        Pdu::H2CData(d) => d.data = payload,
        _ => unreachable!(),
    }
    Outcome::Pdu(pdu)
}

/// Feeds `stream` in chunks of the given lengths (cycled), decoding after each, until the
/// stream ends or a fatal error stops the connection.
fn run(cfg: Config, stream: &[u8], chunks: &[usize]) -> Vec<Outcome> {
    let mut dec = cfg.decoder();
    let mut outcomes = Vec::new();
    feed(stream, chunks, |buf| {
        drain(cfg, &mut dec, buf, &mut outcomes)
    });
    outcomes
}

/// Appends `stream` to a buffer in chunks of the given lengths (cycled), calling `step` after
/// each, until the stream ends or `step` says the connection stopped (true).
fn feed(stream: &[u8], chunks: &[usize], mut step: impl FnMut(&mut BytesMut) -> bool) {
    let mut buf = BytesMut::new();
    let mut pos = 0;
    for &chunk in chunks.iter().cycle() {
        if pos >= stream.len() {
            break;
        }
        let end = stream.len().min(pos.saturating_add(chunk));
        buf.extend_from_slice(&stream[pos..end]);
        pos = end;
        if step(&mut buf) {
            break;
        }
    }
}

/// Decodes until more bytes are needed (false) or a fatal error (true).
fn drain(cfg: Config, dec: &mut Decoder, buf: &mut BytesMut, out: &mut Vec<Outcome>) -> bool {
    loop {
        let before = buf.clone();
        match dec.decode(buf) {
            Ok(Some(pdu)) => {
                assert!(
                    buf.len() < before.len(),
                    "a PDU was returned but nothing consumed"
                );
                check_round_trip(cfg, &pdu);
                out.push(Outcome::Pdu(pdu));
            }
            Ok(None) => {
                assert_eq!(*buf, before, "Ok(None) must leave the buffer untouched");
                return false;
            }
            Err(e @ PduError::DataDigest { .. }) => {
                assert!(
                    buf.len() < before.len(),
                    "a data digest error consumes the PDU"
                );
                out.push(Outcome::of(e));
            }
            Err(e @ PduError::Fatal { .. }) => {
                assert_eq!(*buf, before, "a fatal error leaves the buffer alone");
                check_term_req(cfg, &e);
                out.push(Outcome::of(e));
                return true;
            }
        }
    }
}

/// What was accepted must encode to bytes that decode to the same PDU, consumed exactly.
fn check_round_trip(cfg: Config, pdu: &Pdu) {
    let mut bytes = BytesMut::new();
    pdu.encode(cfg.digests, &mut bytes);
    let again = cfg.decoder().decode(&mut bytes);
    assert_eq!(
        again.as_ref(),
        Ok(&Some(pdu.clone())),
        "round trip of {pdu:?}"
    );
    assert!(bytes.is_empty());
}

/// The TermReq we would send must be one the peer decodes to the same values.
fn check_term_req(cfg: Config, err: &PduError) {
    let term = err.term_req().expect("a fatal error has a TermReq");
    assert!(term.header.len() <= 128);
    let (pdu, peer) = match cfg.role {
        Role::Controller => (Pdu::C2HTermReq(term), Role::Host),
        Role::Host => (Pdu::H2CTermReq(term), Role::Controller),
    };
    let mut bytes = BytesMut::new();
    pdu.encode(cfg.digests, &mut bytes);
    let mut dec = Decoder::new(peer, 0);
    dec.set_digests(cfg.digests);
    assert_eq!(dec.decode(&mut bytes), Ok(Some(pdu)));
}
