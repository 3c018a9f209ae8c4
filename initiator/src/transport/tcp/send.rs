//! The writer task of a queue: encodes queued PDUs in order and sends everything queued with
//! one system call (writev): headers and small payloads (capsules) together in a staging
//! buffer, large payloads from where they are.

use std::io::IoSlice;
use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use fabrik_proto::tcp::{Digests, Pdu};
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::Shared;
use crate::error::HostError;

/// Most segments gathered into one send (Linux's IOV_MAX is 1024).
const MAX_IOVECS: usize = 512;
/// A send of at most this many segments takes its slices from a small array on the stack.
const FEW_IOVECS: usize = 8;
/// Payloads up to this size are copied into the writer's staging buffer, many to one iovec.
const COPY_MAX: usize = 4096;

pub(super) async fn write_loop<W: AsyncWrite + Unpin>(shared: Arc<Shared>, mut writer: W) {
    let mut batch = Batch::default();
    let mut pdus: Vec<Pdu> = Vec::new();
    loop {
        let waiting = {
            let mut state = shared.state.lock().unwrap();
            state.writer_waiting = state.outgoing.is_empty();
            state.writer_waiting
        };
        if waiting {
            // A PDU queued from here on wakes it (a permit is kept if it comes first).
            shared.writer_wake.notified().await;
        }
        if shared.commands_in_flight() > 1 {
            // Other commands' callers are likely runnable too (a receive completes many at
            // once) and about to submit: let them run first so that their capsules go in this
            // system call. Woken by the first of them, this task ran next and sent each alone:
            // one writev per command at QD32 (strace, `fabrik bench` 4K random reads).
            tokio::task::yield_now().await;
        }
        // Everything queued goes in the same system call(s).
        std::mem::swap(&mut pdus, &mut shared.state.lock().unwrap().outgoing);
        for pdu in pdus.drain(..) {
            batch.push(pdu, shared.digests);
            if batch.segments.len() >= MAX_IOVECS {
                batch.seal();
                if let Err(e) = write_all_vectored(&mut writer, &mut batch.segments).await {
                    shared.fail(HostError::io(format!("queue {}: send", shared.qid), e));
                    return;
                }
            }
        }
        batch.seal();
        if let Err(e) = write_all_vectored(&mut writer, &mut batch.segments).await {
            shared.fail(HostError::io(format!("queue {}: send", shared.qid), e));
            return;
        }
    }
}

/// What the writer sends next: headers and small payloads copied together into one staging
/// buffer, large payloads as they are (no copy).
#[derive(Default)]
struct Batch {
    segments: Vec<Bytes>,
    staging: BytesMut,
}

impl Batch {
    /// Encodes `pdu`: its header (and header digest), its payload, its data digest.
    fn push(&mut self, pdu: Pdu, digests: Digests) {
        let data_digest = pdu.encode_head(digests, &mut self.staging);
        let payload = match pdu {
            Pdu::CapsuleCmd(c) => c.data,
            Pdu::H2CData(d) => d.data,
            _ => Bytes::new(),
        };
        if !payload.is_empty() {
            self.segment(payload);
            if let Some(digest) = data_digest {
                self.staging.extend_from_slice(&digest.to_le_bytes());
            }
        }
    }

    fn segment(&mut self, segment: Bytes) {
        if segment.len() <= COPY_MAX {
            self.staging.extend_from_slice(&segment);
        } else {
            self.seal();
            self.segments.push(segment);
        }
    }

    /// Ends the staged run of small segments (its buffer is reused once the send is done).
    fn seal(&mut self) {
        if !self.staging.is_empty() {
            self.segments.push(self.staging.split().freeze());
        }
    }
}

/// Writes every segment of `batch` in order, gathering them (writev), and empties it.
async fn write_all_vectored<W: AsyncWrite + Unpin>(
    writer: &mut W,
    batch: &mut Vec<Bytes>,
) -> std::io::Result<()> {
    let mut first = 0;
    loop {
        // Segments written whole (and empty ones) are done.
        while batch.get(first).is_some_and(|b| b.is_empty()) {
            first += 1;
        }
        if first == batch.len() {
            break;
        }
        let mut written = if batch.len() - first <= FEW_IOVECS {
            write_some::<W, FEW_IOVECS>(writer, &batch[first..]).await?
        } else {
            write_some::<W, MAX_IOVECS>(writer, &batch[first..]).await?
        };
        if written == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while written > 0 {
            let segment = &mut batch[first];
            if written >= segment.len() {
                written -= segment.len();
                first += 1;
            } else {
                segment.advance(written);
                written = 0;
            }
        }
    }
    batch.clear();
    writer.flush().await
}

/// One writev of the first segments, at most `N`, their slices in an array on the stack.
async fn write_some<W: AsyncWrite + Unpin, const N: usize>(
    writer: &mut W,
    segments: &[Bytes],
) -> std::io::Result<usize> {
    let mut slices = [IoSlice::new(&[]); N];
    let count = segments.len().min(N);
    for (slice, segment) in slices.iter_mut().zip(segments) {
        *slice = IoSlice::new(segment);
    }
    writer.write_vectored(&slices[..count]).await
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use super::*;

    /// Takes at most `step` bytes per write, gathering like a socket.
    struct Trickle {
        got: Vec<u8>,
        step: usize,
        calls: usize,
    }

    impl Trickle {
        fn take(&mut self, bufs: &[std::io::IoSlice<'_>]) -> usize {
            self.calls += 1;
            let mut n = 0;
            for b in bufs {
                let take = b.len().min(self.step - n);
                self.got.extend_from_slice(&b[..take]);
                n += take;
                if n == self.step {
                    break;
                }
            }
            n
        }
    }

    impl AsyncWrite for Trickle {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            Poll::Ready(Ok(self.take(&[std::io::IoSlice::new(buf)])))
        }

        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            bufs: &[std::io::IoSlice<'_>],
        ) -> Poll<std::io::Result<usize>> {
            Poll::Ready(Ok(self.take(bufs)))
        }

        fn is_write_vectored(&self) -> bool {
            true
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    fn segments() -> Vec<Bytes> {
        let big = Bytes::from((0..20_000u32).map(|i| i as u8).collect::<Vec<u8>>());
        vec![
            Bytes::from_static(b"header-1"),
            big.clone(),
            Bytes::new(),
            Bytes::from_static(b"capsule-2"),
            Bytes::from_static(b"capsule-3"),
            big,
        ]
    }

    #[tokio::test]
    async fn partial_writes_send_every_byte_in_order() {
        let want: Vec<u8> = segments().iter().flat_map(|b| b.to_vec()).collect();
        for step in [1, 7, 4096, 1 << 20] {
            let mut batch = Batch::default();
            segments().into_iter().for_each(|s| batch.segment(s));
            batch.seal();
            let mut out = Trickle {
                got: Vec::new(),
                step,
                calls: 0,
            };
            write_all_vectored(&mut out, &mut batch.segments)
                .await
                .unwrap();
            assert!(out.got == want, "step {step}");
            assert!(batch.segments.is_empty());
            if step == 1 << 20 {
                assert_eq!(out.calls, 1, "one system call for the whole batch");
            }
        }
    }

    #[test]
    fn small_segments_are_staged_together_and_payloads_sent_in_place() {
        let input = segments();
        let payload = input[1].as_ptr();
        let mut batch = Batch::default();
        input.into_iter().for_each(|s| batch.segment(s));
        batch.seal();
        let lens: Vec<usize> = batch.segments.iter().map(|b| b.len()).collect();
        assert_eq!(lens, [8, 20_000, 18, 20_000]);
        assert_eq!(batch.segments[1].as_ptr(), payload, "no copy of a payload");
        assert_eq!(&batch.segments[2][..], b"capsule-2capsule-3");
    }

    #[test]
    fn pushed_pdus_are_encoded_as_the_protocol_encodes_them() {
        use fabrik_proto::tcp::{CapsuleCmd, H2CData};
        for (header, data) in [(false, false), (true, false), (false, true), (true, true)] {
            let digests = Digests { header, data };
            let capsule = Pdu::CapsuleCmd(CapsuleCmd {
                sqe: fabrik_proto::Sqe::default(),
                data: Bytes::from(vec![7u8; 512]),
            });
            let large = Bytes::from(vec![9u8; 20_000]);
            let h2c = Pdu::H2CData(H2CData {
                cccid: 3,
                ttag: 1,
                datao: 0,
                last: true,
                data: large.clone(),
            });
            let mut want = BytesMut::new();
            capsule.encode(digests, &mut want);
            h2c.encode(digests, &mut want);
            let mut batch = Batch::default();
            batch.push(capsule, digests);
            batch.push(h2c, digests);
            batch.seal();
            let got: Vec<u8> = batch.segments.iter().flat_map(|b| b.to_vec()).collect();
            assert!(got == want[..], "digests {digests:?}");
            assert_eq!(
                batch.segments[1].as_ptr(),
                large.as_ptr(),
                "no copy of a payload"
            );
        }
    }
}
