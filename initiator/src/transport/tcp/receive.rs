//! The reader task of a queue: decodes the target's PDUs and dispatches them, and puts a read's
//! data where its command wants it.
//!
//! A large C2HData payload is received straight from the socket into its command's buffer once
//! the PDU header is in: no staging in the receive buffer, no copy out of it, no fresh memory per
//! PDU (the caller's buffer is reused from read to read). Small PDUs are taken from the receive
//! buffer, many per system call.

use bytes::{Buf, BufMut, BytesMut};
use fabrik_proto::tcp::{digest, pdu_type, C2HData, CommonHeader, DataHead, Decoder, Pdu};
use fabrik_proto::{Cqe, Status};
use std::sync::MutexGuard;
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncReadExt};

use super::data_in::Lent;
use super::{bad_pdu, InFlight, Shared, State, READ_CHUNK};
use crate::command_name::command_name;
use crate::error::HostError;

/// A C2HData payload is received straight into its command's buffer when at least this much of
/// it has not arrived yet; a smaller rest is cheaper to take with the next PDUs in one read.
const DIRECT_MIN: usize = 16 * 1024;
/// After a large C2HData PDU, the next read into the receive buffer asks for this much only: the
/// next PDU is likely large too, and its payload should go straight to its command.
const HEADER_READ: usize = 4096;

pub(super) async fn read_loop<R: AsyncRead + Unpin>(
    shared: std::sync::Arc<Shared>,
    mut reader: R,
    mut decoder: Decoder,
    mut buf: BytesMut,
) {
    let qid = shared.qid;
    // Whether the last data PDU was large (see HEADER_READ).
    let mut large = false;
    let err = loop {
        let c2h = c2h_data_at(&buf);
        if c2h != C2hAt::No {
            match decoder.decode_data_head(&mut buf) {
                Ok(Some(head)) if c2h == C2hAt::Large => {
                    large = true;
                    if let Err(err) = receive_direct(&shared, &mut reader, &mut buf, head).await {
                        break err;
                    }
                    continue;
                }
                Ok(Some(head)) => {
                    large = head.data_len >= DIRECT_MIN;
                    if let Err(err) = take_in_place(&shared, &mut buf, head) {
                        break err;
                    }
                    continue;
                }
                Ok(None) => {}
                Err(err) => break bad_pdu(qid, &err),
            }
        }
        match decoder.decode(&mut buf) {
            Ok(Some(pdu)) => {
                if let Err(err) = shared.on_pdu(pdu) {
                    break err;
                }
            }
            Ok(None) => {
                let want = if large && buf.is_empty() {
                    HEADER_READ
                } else {
                    READ_CHUNK
                };
                if let Err(err) = fill(&shared, &mut reader, &mut buf, want).await {
                    break err;
                }
            }
            Err(err) => break bad_pdu(qid, &err),
        }
    };
    tracing::debug!(qid, "NVMe/TCP queue closing: {err}");
    shared.fail(err);
}

/// Reads once from the socket into `buf`, at most `want` bytes. With commands in flight it
/// looks for their answers for up to the queue's polling window first, yielding between looks
/// (the runtime polls its sockets without waiting before it runs this task again), instead of
/// sleeping until the socket wakes it: a sleeping thread's wake-up is slow, more so where cores
/// sleep deeply or the machine is virtual.
async fn fill<R: AsyncRead + Unpin>(
    shared: &Shared,
    reader: &mut R,
    buf: &mut BytesMut,
    want: usize,
) -> Result<(), HostError> {
    let qid = shared.qid;
    buf.reserve(want);
    let received = |read: std::io::Result<usize>| match read {
        Ok(0) => Err(HostError::ConnectionClosed { qid }),
        Ok(_) => Ok(()),
        Err(e) => Err(HostError::io(format!("queue {qid}: receive"), e)),
    };
    if !shared.poll_window.is_zero() {
        let start = Instant::now();
        let mut yielded = false;
        loop {
            if let Some(read) = look(reader.read_buf(&mut buf.limit(want))) {
                return received(read);
            }
            // Nothing in flight even after the callers had a turn (the answers just taken
            // complete commands whose callers submit their next ones when they run): idle.
            let idle = yielded && shared.commands_in_flight() == 0;
            if idle || start.elapsed() >= shared.poll_window {
                break;
            }
            tokio::task::yield_now().await;
            yielded = true;
        }
    }
    received(reader.read_buf(&mut buf.limit(want)).await)
}

/// Polls `read` once, without a waker to call: the caller looks again after yielding, and
/// waits with its own waker once it stops looking.
fn look<F: std::future::Future>(read: F) -> Option<F::Output> {
    let read = std::pin::pin!(read);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match read.poll(&mut cx) {
        std::task::Poll::Ready(v) => Some(v),
        std::task::Poll::Pending => None,
    }
}

/// What the front of the receive buffer holds, for a C2HData PDU.
#[derive(Clone, Copy, PartialEq, Eq)]
enum C2hAt {
    /// Not a C2HData PDU, or not enough of one to act on yet.
    No,
    /// A whole one: its payload is copied from the buffer (`take_in_place`).
    Whole,
    /// One with a large part of its payload still to come: received straight into its
    /// command's buffer (`receive_direct`).
    Large,
}

fn c2h_data_at(buf: &[u8]) -> C2hAt {
    match CommonHeader::peek(buf) {
        Some(ch) if ch.pdu_type == pdu_type::C2H_DATA => {
            let missing = (ch.plen as usize).saturating_sub(buf.len());
            match missing {
                0 => C2hAt::Whole,
                m if m >= DIRECT_MIN => C2hAt::Large,
                _ => C2hAt::No,
            }
        }
        _ => C2hAt::No,
    }
}

/// Receives the payload (and data digest) of the C2HData PDU whose header `head` was just taken
/// off `buf`: what `buf` already holds, then the rest straight from the socket, into the
/// command's buffer.
async fn receive_direct<R: AsyncRead + Unpin>(
    shared: &Shared,
    reader: &mut R,
    buf: &mut BytesMut,
    head: DataHead,
) -> Result<(), HostError> {
    let qid = shared.qid;
    let (cccid, datao, last, success) = c2h_fields(qid, &head)?;
    let len = head.data_len;
    let mut dest = shared.begin_c2h_data(cccid, datao, len, last, success)?;
    let start = dest.len();
    let buffered = buf.len().min(len);
    dest.put_slice(&buf[..buffered]);
    buf.advance(buffered);
    while dest.len() < start + len {
        let rest = start + len - dest.len();
        match reader.read_buf(&mut (&mut dest).limit(rest)).await {
            Ok(0) => return Err(HostError::ConnectionClosed { qid }),
            Ok(_) => {}
            Err(e) => return Err(HostError::io(format!("queue {qid}: receive"), e)),
        }
    }
    let mut digest_failed = false;
    if head.ddgst {
        while buf.len() < 4 {
            fill(shared, reader, buf, READ_CHUNK).await?;
        }
        let sent = buf.get_u32_le();
        digest_failed = sent != digest(&dest.filled()[start..]);
    }
    shared.end_c2h_data(cccid, dest, success, digest_failed);
    Ok(())
}

/// CCCID, DATAO, LAST_PDU and SUCCESS of the data PDU header `head`: a C2HData (the decoder
/// lets a host take no H2CData, but says so here rather than trusting it).
fn c2h_fields(qid: u16, head: &DataHead) -> Result<(u16, u32, bool, bool), HostError> {
    match head.pdu {
        Pdu::C2HData(C2HData {
            cccid,
            datao,
            last,
            success,
            ..
        }) => Ok((cccid, datao, last, success)),
        _ => Err(HostError::protocol(
            qid,
            "unexpected H2CData from the target",
        )),
    }
}

/// Copies the payload of the C2HData PDU whose header `head` was just taken off `buf` (all of
/// it is there) to its command, and takes it (and its data digest) off `buf`: no shared view of
/// the receive buffer is made, counted and dropped again per PDU (5 % of a host core at 4K,
/// perf record, H100 machine).
fn take_in_place(shared: &Shared, buf: &mut BytesMut, head: DataHead) -> Result<(), HostError> {
    let (cccid, datao, last, success) = c2h_fields(shared.qid, &head)?;
    let len = head.data_len;
    let payload = &buf[..len];
    // Like the Linux host: a failed data digest is not fatal, the command fails with a data
    // error. The PDU's flags still count (a SUCCESS flag completes the command).
    let digest_failed = head.ddgst
        && u32::from_le_bytes(buf[len..len + 4].try_into().expect("4 bytes")) != digest(payload);
    shared.on_c2h_data(cccid, datao, payload, last, success, digest_failed)?;
    buf.advance(len + if head.ddgst { 4 } else { 0 });
    Ok(())
}

impl Shared {
    /// Appends C2HData to its command's buffer. `digest_failed`: the PDU's data digest did not
    /// match; its bytes are counted (zero-filled) so the transfer stays in step, and the command
    /// will fail with a data digest error.
    pub(super) fn on_c2h_data(
        &self,
        cccid: u16,
        datao: u32,
        data: &[u8],
        last: bool,
        success: bool,
        digest_failed: bool,
    ) -> Result<(), HostError> {
        let mut state = self.state.lock().unwrap();
        let command = c2h_command(
            self.qid,
            &mut state,
            cccid,
            datao,
            data.len(),
            last,
            success,
        )?;
        // A failed digest's bytes are kept: the command fails anyway.
        command.digest_error |= digest_failed;
        command.data_in.push(data, command.data_in_len);
        if success {
            self.finish_with_success(state, cccid);
        }
        Ok(())
    }

    /// Checks a C2HData PDU of `len` bytes whose payload is about to be received directly, and
    /// lends out its command's buffer (data so far at its front, room for the rest).
    fn begin_c2h_data(
        &self,
        cccid: u16,
        datao: u32,
        len: usize,
        last: bool,
        success: bool,
    ) -> Result<Lent, HostError> {
        let mut state = self.state.lock().unwrap();
        let command = c2h_command(self.qid, &mut state, cccid, datao, len, last, success)?;
        Ok(command.data_in.take_buffer(command.data_in_len))
    }

    /// Gives the buffer back once the payload is in. The command may be gone meanwhile (the
    /// queue failed, e.g. on a timeout): the data is then dropped.
    fn end_c2h_data(&self, cccid: u16, buf: Lent, success: bool, digest_failed: bool) {
        let mut state = self.state.lock().unwrap();
        let Some(command) = state.commands.get_mut(cccid) else {
            return;
        };
        command.data_in = buf.into();
        command.digest_error |= digest_failed;
        if success {
            self.finish_with_success(state, cccid);
        }
    }

    /// SUCCESS: the command completed without error and no CapsuleResp follows.
    fn finish_with_success(&self, mut state: MutexGuard<'_, State>, cccid: u16) {
        let cqe = Cqe {
            sqid: self.qid,
            ..Cqe::new(cccid, Status::SUCCESS)
        };
        let answer = |command: &mut InFlight| self.answer(command, cqe);
        let answered = state.commands.answer(cccid, answer);
        let settled = self.settled(state, answered);
        debug_assert!(settled.is_some(), "looked up by the caller");
    }
}

/// The command a C2HData PDU of `len` bytes at `datao` is for, if the PDU is valid for it: data
/// must arrive in order (DATAO = bytes received so far) and within the transfer length.
fn c2h_command(
    qid: u16,
    state: &mut State,
    cccid: u16,
    datao: u32,
    len: usize,
    last: bool,
    success: bool,
) -> Result<&mut InFlight, HostError> {
    let command = state.commands.get_mut(cccid).ok_or_else(|| {
        HostError::protocol(qid, format!("C2HData for unknown command id {cccid:#06x}"))
    })?;
    if command.data_in_len == 0 {
        return Err(HostError::protocol(
            qid,
            format!(
                "C2HData for {}, which reads no data",
                command_name(qid, &command.sqe)
            ),
        ));
    }
    let received = command.data_in.len();
    if datao as usize != received {
        return Err(HostError::protocol(
            qid,
            format!(
                "C2HData for command {cccid:#06x} at DATAO {datao}, expected {received} (data must be contiguous)"
            ),
        ));
    }
    if received + len > command.data_in_len {
        return Err(HostError::protocol(
            qid,
            format!(
                "C2HData for command {cccid:#06x} carries bytes {received}..{} of a {}-byte transfer",
                received + len,
                command.data_in_len
            ),
        ));
    }
    if success && !last {
        return Err(HostError::protocol(
            qid,
            format!("C2HData for command {cccid:#06x} has SUCCESS set but not LAST_PDU"),
        ));
    }
    Ok(command)
}
