//! The writer task of a queue: sends queued PDUs in order, gathering everything queued into
//! one system call (writev): small segments (headers, capsules) copied together into a staging
//! buffer, payloads sent from where they are.

use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use super::Shared;
use crate::error::HostError;

/// Most segments gathered into one send (Linux's IOV_MAX is 1024).
const MAX_IOVECS: usize = 512;
/// Segments up to this size are copied into the writer's staging buffer, many to one iovec.
const COPY_MAX: usize = 4096;

pub(super) async fn write_loop<W: AsyncWrite + Unpin>(
    shared: Arc<Shared>,
    mut writer: W,
    mut outgoing: mpsc::UnboundedReceiver<Vec<Bytes>>,
) {
    let mut batch = Batch::default();
    while let Some(segments) = outgoing.recv().await {
        // Everything already queued goes in the same system call(s): a PDU's header with its
        // payload, and many small capsules together.
        batch.extend(segments);
        if shared.commands_in_flight() > 1 {
            // Other commands' callers are likely runnable too (a receive completes many at
            // once) and about to submit: let them run first so that their capsules go in this
            // system call. Woken by the first of them, this task ran next and sent each alone:
            // one writev per command at QD32 (strace, `fabrik bench` 4K random reads).
            tokio::task::yield_now().await;
        }
        while batch.segments.len() < MAX_IOVECS {
            match outgoing.try_recv() {
                Ok(more) => batch.extend(more),
                Err(_) => break,
            }
        }
        batch.seal();
        if let Err(e) = write_all_vectored(&mut writer, &mut batch.segments).await {
            shared.fail(HostError::io(format!("queue {}: send", shared.qid), e));
            return;
        }
    }
}

/// What the writer sends next: small segments (headers, capsules) copied together into one
/// staging buffer, payloads as they are (no copy).
#[derive(Default)]
struct Batch {
    segments: Vec<Bytes>,
    staging: BytesMut,
}

impl Batch {
    fn extend(&mut self, segments: Vec<Bytes>) {
        for segment in segments {
            if segment.len() <= COPY_MAX {
                self.staging.extend_from_slice(&segment);
            } else {
                self.seal();
                self.segments.push(segment);
            }
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
        let slices: Vec<std::io::IoSlice<'_>> = batch[first..]
            .iter()
            .take(MAX_IOVECS)
            .map(|b| std::io::IoSlice::new(b))
            .collect();
        let mut written = writer.write_vectored(&slices).await?;
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
            batch.extend(segments());
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
        batch.extend(input);
        batch.seal();
        let lens: Vec<usize> = batch.segments.iter().map(|b| b.len()).collect();
        assert_eq!(lens, [8, 20_000, 18, 20_000]);
        assert_eq!(batch.segments[1].as_ptr(), payload, "no copy of a payload");
        assert_eq!(&batch.segments[2][..], b"capsule-2capsule-3");
    }
}
