//! NVM I/O commands on one I/O queue: read, write, flush, write zeroes, deallocate.
//!
//! Transfers bigger than one command may move (MDTS, or the 16-bit block count) are split into
//! several commands, one after the other, as the block layer would split them.
//!
//! `read_peer` / `write_peer` move the data straight between the target and caller memory
//! registered with the queue's NIC (GPU memory: GPUDirect RDMA); NVMe/RDMA only.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use fabrik_proto::nvme::io::{DsmRange, IoCommand, DSM_RANGE_LEN};
use fabrik_proto::Sqe;

use crate::error::HostError;
use crate::host::controller::Controller;
use crate::host::queue::Queue;
use crate::transport::peer::{self, PeerMemory, Registration};
use crate::transport::target::RecvTarget;
use crate::transport::{AnswerTo, Completion};

/// Most blocks one Read/Write/Write Zeroes can name (NLB is 16 bits, 0's based).
const MAX_BLOCKS_PER_COMMAND: u32 = 1 << 16;
/// Most ranges one Dataset Management command carries.
const MAX_DSM_RANGES: usize = 256;

/// One I/O queue of a controller (`Controller::io_queue`, `Controller::next_io_queue`).
pub struct IoQueue<'a> {
    ctrl: &'a Controller,
    queue: &'a Queue,
}

impl<'a> IoQueue<'a> {
    pub(crate) fn new(ctrl: &'a Controller, queue: &'a Queue) -> IoQueue<'a> {
        IoQueue { ctrl, queue }
    }

    pub fn qid(&self) -> u16 {
        self.queue.qid()
    }

    /// The NIC the queue runs on ("mlx5_2"); None for NVMe/TCP.
    pub fn nic(&self) -> Option<&'a str> {
        self.queue.nic()
    }

    /// Registers `mem` with the queue's NIC for `read_peer` / `write_peer` (which otherwise do
    /// it on first use), saying how.
    pub async fn register_peer(
        &self,
        mem: &Arc<dyn PeerMemory>,
    ) -> Result<Registration, HostError> {
        self.queue.register_peer(mem).await
    }

    /// Sends any command on this queue (CID and SGL are set by the queue).
    pub async fn submit(
        &self,
        sqe: Sqe,
        data_out: Option<Bytes>,
        data_in_len: usize,
    ) -> Result<Completion, HostError> {
        self.queue.submit(sqe, data_out, data_in_len).await
    }

    async fn command(
        &self,
        command: IoCommand,
        data_out: Option<Bytes>,
        data_in_len: usize,
    ) -> Result<Completion, HostError> {
        self.queue
            .submit(command.to_sqe(0), data_out, data_in_len)
            .await
    }

    /// Blocks per command for namespace blocks of `lba_size` bytes.
    fn blocks_per_command(&self, lba_size: u32) -> u32 {
        blocks_within(self.ctrl.max_transfer(), lba_size)
    }

    /// Blocks per peer-memory command: the caller's memory is not bound by the transport's
    /// buffer slots, only by MDTS and what one SGL can name.
    fn peer_blocks_per_command(&self, lba_size: u32) -> u32 {
        let max = match (self.ctrl.mdts(), self.queue.max_peer_command_data()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        blocks_within(max, lba_size)
    }

    /// Reads `nlb` blocks from `slba` into `mem` at `offset`, straight from the target into
    /// that memory (NVMe/RDMA; registered with the NIC on first use). Split into several
    /// commands like `read`.
    pub async fn read_peer(
        &self,
        nsid: u32,
        slba: u64,
        nlb: u32,
        mem: &Arc<dyn PeerMemory>,
        offset: usize,
    ) -> Result<(), HostError> {
        self.peer_transfer(nsid, slba, nlb, mem, offset, None).await
    }

    /// Writes `nlb` blocks at `slba` from `mem` at `offset`, straight from that memory to the
    /// target (as `read_peer`); `fua`: durable before completion.
    pub async fn write_peer(
        &self,
        nsid: u32,
        slba: u64,
        nlb: u32,
        mem: &Arc<dyn PeerMemory>,
        offset: usize,
        fua: bool,
    ) -> Result<(), HostError> {
        self.peer_transfer(nsid, slba, nlb, mem, offset, Some(fua))
            .await
    }

    /// A read (`write_fua` None) or write of `nlb` blocks to or from `mem` at `offset`.
    async fn peer_transfer(
        &self,
        nsid: u32,
        slba: u64,
        nlb: u32,
        mem: &Arc<dyn PeerMemory>,
        offset: usize,
        write_fua: Option<bool>,
    ) -> Result<(), HostError> {
        if nlb == 0 {
            return Err(HostError::Invalid("a transfer of 0 blocks".into()));
        }
        let lba_size = self.ctrl.lba_size(nsid).await?;
        let block = lba_size as usize;
        let len = (nlb as usize)
            .checked_mul(block)
            .ok_or_else(|| HostError::Invalid(format!("{nlb} blocks are too many")))?;
        peer::check_range(mem.as_ref(), offset, len)?;
        for (done, at, count) in pieces(slba, nlb, self.peer_blocks_per_command(lba_size)) {
            let command = match write_fua {
                None => IoCommand::Read {
                    nsid,
                    slba: at,
                    nlb: count,
                    fua: false,
                },
                Some(fua) => IoCommand::Write {
                    nsid,
                    slba: at,
                    nlb: count,
                    fua,
                },
            };
            let part = offset + done as usize * block;
            self.queue
                .submit_peer(
                    command.to_sqe(0),
                    mem,
                    part,
                    count as usize * block,
                    write_fua.is_some(),
                )
                .await?;
        }
        Ok(())
    }

    /// Reads `nlb` blocks from `slba`.
    pub async fn read(&self, nsid: u32, slba: u64, nlb: u32) -> Result<Bytes, HostError> {
        if nlb == 0 {
            return Err(HostError::Invalid("a read of 0 blocks".into()));
        }
        let lba_size = self.ctrl.lba_size(nsid).await?;
        let step = self.blocks_per_command(lba_size);
        if nlb <= step {
            let len = nlb as usize * lba_size as usize;
            let command = IoCommand::Read {
                nsid,
                slba,
                nlb,
                fua: false,
            };
            return Ok(self.command(command, None, len).await?.data);
        }
        let mut data = BytesMut::with_capacity(nlb as usize * lba_size as usize);
        for (_, at, count) in pieces(slba, nlb, step) {
            let command = IoCommand::Read {
                nsid,
                slba: at,
                nlb: count,
                fua: false,
            };
            let part = self
                .command(command, None, count as usize * lba_size as usize)
                .await?;
            data.extend_from_slice(&part.data);
        }
        Ok(data.freeze())
    }

    /// Reads `nlb` blocks from `slba` into `buf` (cleared first, grown if it has less room) and
    /// gives it back filled: a caller that reads again and again reuses one buffer, and the
    /// data is received straight into it (NVMe/TCP).
    pub async fn read_into(
        &self,
        nsid: u32,
        slba: u64,
        nlb: u32,
        buf: BytesMut,
    ) -> Result<BytesMut, HostError> {
        if nlb == 0 {
            return Err(HostError::Invalid("a read of 0 blocks".into()));
        }
        let lba_size = self.ctrl.lba_size(nsid).await?;
        if nlb > self.blocks_per_command(lba_size) {
            // Split like `read`; the parts are gathered into `buf`. Boxed, to keep this rare
            // path's state out of every read's future.
            let data = Box::pin(self.read(nsid, slba, nlb)).await?;
            let mut buf = buf;
            buf.clear();
            buf.extend_from_slice(&data);
            return Ok(buf);
        }
        let command = IoCommand::Read {
            nsid,
            slba,
            nlb,
            fua: false,
        };
        let len = nlb as usize * lba_size as usize;
        let completion = self.queue.submit_into(command.to_sqe(0), buf, len).await?;
        Ok(completion.into_buffer())
    }

    /// Starts a read of `nlb` blocks from `slba` into `buf`, its answer to go where `answer`
    /// says (see `transport::completions`): on success the completion's data is `buf`,
    /// frozen, holding the blocks. Gives `buf` back when the read cannot start so: the
    /// namespace's block size not known yet, a read bigger than one command, a transport that
    /// answers through futures only. `read_into` does those.
    pub fn start_read_into(
        &self,
        nsid: u32,
        slba: u64,
        nlb: u32,
        buf: BytesMut,
        answer: AnswerTo<'_>,
    ) -> Result<(), BytesMut> {
        match self.one_read(nsid, slba, nlb) {
            Some((sqe, len)) => self.queue.start_into(sqe, buf, len, answer),
            None => Err(buf),
        }
    }

    /// Starts a read of `nlb` blocks from `slba` into `target` (exactly their size), its answer
    /// to go where `answer` says (see `start_read_into`, whose limits it has). False when it
    /// cannot start so: `read_to` does it.
    pub fn start_read_to(
        &self,
        nsid: u32,
        slba: u64,
        nlb: u32,
        target: &RecvTarget,
        answer: AnswerTo<'_>,
    ) -> bool {
        match self.one_read(nsid, slba, nlb) {
            Some((sqe, len)) if len == target.len() => self.queue.start_to(sqe, target, answer),
            _ => false,
        }
    }

    /// A read that one command carries, its namespace's LBA size known: its SQE and length.
    fn one_read(&self, nsid: u32, slba: u64, nlb: u32) -> Option<(Sqe, usize)> {
        let lba_size = self.ctrl.known_lba_size(nsid)?;
        if nlb == 0 || nlb > self.blocks_per_command(lba_size) {
            return None;
        }
        let command = IoCommand::Read {
            nsid,
            slba,
            nlb,
            fua: false,
        };
        Some((command.to_sqe(0), nlb as usize * lba_size as usize))
    }

    /// Starts a write of `data` at `slba`, its answer to go where `answer` says (see
    /// `start_read_into`, whose limits it has). Gives `data` back when it cannot start so.
    pub fn start_write(
        &self,
        nsid: u32,
        slba: u64,
        data: Bytes,
        fua: bool,
        answer: AnswerTo<'_>,
    ) -> Result<(), Bytes> {
        let Some(lba_size) = self.ctrl.known_lba_size(nsid) else {
            return Err(data);
        };
        let nlb = data.len() / lba_size as usize;
        if data.is_empty()
            || !data.len().is_multiple_of(lba_size as usize)
            || nlb > self.blocks_per_command(lba_size) as usize
        {
            return Err(data);
        }
        let command = IoCommand::Write {
            nsid,
            slba,
            nlb: nlb as u32,
            fua,
        };
        self.queue
            .start(command.to_sqe(0), Some(data), 0, answer)
            .map_err(Option::unwrap_or_default)
    }

    /// Reads `nlb` blocks from `slba` into `target` (exactly their size), received in place;
    /// split into several commands like `read`.
    pub async fn read_to(
        &self,
        nsid: u32,
        slba: u64,
        nlb: u32,
        target: &RecvTarget,
    ) -> Result<(), HostError> {
        let lba_size = self.ctrl.lba_size(nsid).await?;
        if nlb == 0 || nlb as usize * lba_size as usize != target.len() {
            return Err(HostError::Invalid(format!(
                "a read of {nlb} blocks into a {}-byte target",
                target.len()
            )));
        }
        for (done, at, count) in pieces(slba, nlb, self.blocks_per_command(lba_size)) {
            let command = IoCommand::Read {
                nsid,
                slba: at,
                nlb: count,
                fua: false,
            };
            let part = target.part(
                done as usize * lba_size as usize,
                count as usize * lba_size as usize,
            );
            self.queue.submit_to(command.to_sqe(0), part).await?;
        }
        Ok(())
    }

    /// Writes `data`, a whole number of blocks, at `slba`.
    pub async fn write(
        &self,
        nsid: u32,
        slba: u64,
        data: Bytes,
        fua: bool,
    ) -> Result<(), HostError> {
        let lba_size = self.ctrl.lba_size(nsid).await? as usize;
        if data.is_empty() || !data.len().is_multiple_of(lba_size) {
            return Err(HostError::Invalid(format!(
                "write of {} bytes is not a positive multiple of the {lba_size}-byte block",
                data.len()
            )));
        }
        let step = self.blocks_per_command(lba_size as u32) as usize * lba_size;
        let mut offset = 0;
        while offset < data.len() {
            let part = data.slice(offset..(offset + step).min(data.len()));
            let nlb = (part.len() / lba_size) as u32;
            let command = IoCommand::Write {
                nsid,
                slba: slba + (offset / lba_size) as u64,
                nlb,
                fua,
            };
            self.command(command, Some(part), 0).await?;
            offset += step;
        }
        Ok(())
    }

    pub async fn flush(&self, nsid: u32) -> Result<(), HostError> {
        self.command(IoCommand::Flush { nsid }, None, 0)
            .await
            .map(|_| ())
    }

    /// Writes zeroes to `nlb` blocks from `slba` (no data moves).
    pub async fn write_zeroes(&self, nsid: u32, slba: u64, nlb: u32) -> Result<(), HostError> {
        let mut done = 0;
        while done < nlb {
            let count = MAX_BLOCKS_PER_COMMAND.min(nlb - done);
            let command = IoCommand::WriteZeroes {
                nsid,
                slba: slba + done as u64,
                nlb: count,
                fua: false,
                deallocate: false,
            };
            self.command(command, None, 0).await?;
            done += count;
        }
        Ok(())
    }

    /// Deallocates (trims) the (slba, nlb) ranges: Dataset Management, AD attribute.
    pub async fn deallocate(&self, nsid: u32, ranges: &[(u64, u32)]) -> Result<(), HostError> {
        for chunk in ranges.chunks(MAX_DSM_RANGES) {
            let mut data = vec![0u8; chunk.len() * DSM_RANGE_LEN];
            for (&(slba, nlb), buf) in chunk.iter().zip(data.chunks_mut(DSM_RANGE_LEN)) {
                DsmRange {
                    attributes: 0,
                    nlb,
                    slba,
                }
                .encode(buf);
            }
            let command = IoCommand::DatasetManagement {
                nsid,
                ranges: chunk.len() as u32,
                deallocate: true,
            };
            self.command(command, Some(Bytes::from(data)), 0).await?;
        }
        Ok(())
    }
}

/// The commands a transfer of `nlb` blocks from `slba` splits into, at most `step` blocks
/// each: (blocks before the piece, its SLBA, its blocks).
fn pieces(slba: u64, nlb: u32, step: u32) -> impl Iterator<Item = (u32, u64, u32)> {
    (0..nlb)
        .step_by(step.max(1) as usize)
        .map(move |done| (done, slba + done as u64, step.max(1).min(nlb - done)))
}

/// Blocks of `lba_size` bytes one command may move when it may move `max` bytes.
fn blocks_within(max: Option<usize>, lba_size: u32) -> u32 {
    match max {
        Some(max) => ((max / lba_size as usize) as u32).clamp(1, MAX_BLOCKS_PER_COMMAND),
        None => MAX_BLOCKS_PER_COMMAND,
    }
}
