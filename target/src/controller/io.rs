//! NVM I/O commands: Read, Write, Flush, Write Zeroes, Dataset Management.

use std::sync::Arc;

use bytes::Bytes;
use fabrik_proto::nvme::io::{DsmRange, IoCommand, DSM_RANGE_LEN};
use fabrik_proto::nvme::NSID_BROADCAST;
use fabrik_proto::Status;

use super::ns_cache::{NamespaceCache, QueueNamespace};
use super::queue::{IoRequest, Response};
use super::{limits, Controller};
use crate::backend::DriveError;
use crate::model::Namespace;
use crate::stats::Stopwatch;

impl Controller {
    pub(super) fn namespace_for_io(&self, nsid: u32) -> Result<Arc<Namespace>, Status> {
        let sub = self.subsystem().ok_or(Status::INVALID_OPCODE)?;
        let ns = sub.namespace(nsid).ok_or(Status::INVALID_NAMESPACE)?;
        if !ns.is_ready() {
            return Err(Status::NAMESPACE_NOT_READY);
        }
        Ok(ns)
    }

    /// Everything that can be checked before data moves: namespace, range, transfer length.
    /// The namespace it names (None for a broadcast Flush).
    pub(super) fn admit_io(
        &self,
        cmd: &IoCommand,
        transfer_len: u32,
        namespaces: &NamespaceCache,
    ) -> Result<Option<QueueNamespace>, Status> {
        self.keep_alive();
        if let IoCommand::Flush {
            nsid: NSID_BROADCAST,
        } = cmd
        {
            return Ok(None);
        }
        let ns = namespaces.get(cmd.nsid(), || self.namespace_for_io(cmd.nsid()))?;
        self.target.ana.io_allowed(ns.ana_group)?;
        ns.check_access(&self.host_id, !matches!(cmd, IoCommand::Read { .. }))?;
        let bs = ns.block_size();
        match *cmd {
            IoCommand::Read { slba, nlb, .. }
            | IoCommand::Write { slba, nlb, .. }
            | IoCommand::WriteZeroes { slba, nlb, .. } => {
                check_lba_range(&ns, slba, nlb as u64)?;
                if !matches!(cmd, IoCommand::WriteZeroes { .. }) {
                    let bytes = nlb as u64 * bs as u64;
                    if bytes > limits::MAX_TRANSFER as u64 {
                        return Err(Status::INVALID_FIELD);
                    }
                    if bytes != transfer_len as u64 {
                        return Err(Status::SGL_LENGTH_INVALID);
                    }
                }
            }
            IoCommand::DatasetManagement { ranges, .. } => {
                if transfer_len as usize != ranges as usize * DSM_RANGE_LEN {
                    return Err(Status::SGL_LENGTH_INVALID);
                }
            }
            IoCommand::Flush { .. } => {}
        }
        Ok(Some(ns))
    }

    pub(super) async fn execute_io(&self, req: IoRequest, data: Bytes) -> Response {
        let nsid = req.cmd.nsid();
        if let Some(wait) = self.qos_turn(&req) {
            if !wait.is_zero() {
                crate::timer::sleep(wait).await;
                self.io_counters.local().add_throttled(wait);
            }
        }
        let result = self.run_io(req, data).await;
        self.io_answer(nsid, result)
    }

    /// The host's limiter, when it has limits (one load or two per command).
    fn limited(&self) -> Option<&crate::qos::Limiter> {
        self.qos.get().map(|l| &**l).filter(|l| l.enabled())
    }

    /// The command's turn under the host's limits and its drive's (None: neither has any):
    /// how long it waits. Reads and Flush count as reads; the other commands that change
    /// data as writes, with the bytes they move.
    fn qos_turn(&self, req: &IoRequest) -> Option<std::time::Duration> {
        let ns = req.ns.as_ref().map(|ns| &***ns);
        let drive = ns.and_then(|ns| ns.limiter());
        let host = self.limited();
        if host.is_none() && drive.is_none() {
            return None;
        }
        let bs = ns.map_or(0, |ns| ns.block_size() as u64);
        let (write, bytes) = match req.cmd {
            IoCommand::Read { nlb, .. } => (false, nlb as u64 * bs),
            IoCommand::Write { nlb, .. } => (true, nlb as u64 * bs),
            IoCommand::WriteZeroes { .. } | IoCommand::DatasetManagement { .. } => (true, 0),
            IoCommand::Flush { .. } => (false, 0),
        };
        let turn = |l: Option<&crate::qos::Limiter>| {
            l.map_or(std::time::Duration::ZERO, |l| l.reserve(write, bytes))
        };
        Some(turn(host).max(turn(drive)))
    }

    /// A Read or Write whose drive completes at once (`Drive::completes_at_once`: memory),
    /// done here and now: no future is made for it. None: it did not run, and `execute_io`
    /// runs it.
    pub(super) fn execute_io_now(&self, req: &mut IoRequest, data: &Bytes) -> Option<Response> {
        if self.limited().is_some() || req.ns.as_ref().is_some_and(|ns| ns.limiter().is_some()) {
            return None; // it may have to wait its turn: `execute_io`
        }
        let IoRequest { cmd, ns, into } = req;
        let ns = ns
            .as_ref()
            .filter(|ns| ns.drive.completes_at_once() && ns.serves_io())?;
        let bs = ns.block_size() as u64;
        let result = match *cmd {
            IoCommand::Read { slba, nlb, .. } => {
                let len = nlb as u64 * bs;
                let started = Stopwatch::start();
                let read = match into.take() {
                    Some(buf) if buf.len() as u64 == len => ns.drive.read_into_now(slba * bs, buf),
                    _ => ns.drive.read_now(slba * bs, len as usize),
                };
                self.read_done(ns, len, started, read)
            }
            IoCommand::Write { slba, fua, .. } => {
                let fua = fua || !self.volatile_write_cache();
                let started = Stopwatch::start();
                let written = ns.drive.write_now(slba * bs, data, fua);
                self.write_done(ns, data.len() as u64, started, written)
            }
            _ => return None,
        };
        Some(self.io_answer(cmd.nsid(), result))
    }

    fn io_answer(&self, nsid: u32, result: Result<Response, Status>) -> Response {
        match result {
            Ok(r) => r,
            Err(status) => {
                // Counted against the drive (a failure path: the lookup costs nothing on success).
                if let Some(ns) = self.subsystem().and_then(|s| s.namespace(nsid)) {
                    ns.stats.add_error();
                }
                Response::status(status)
            }
        }
    }

    fn read_done(
        &self,
        ns: &Namespace,
        len: u64,
        started: Stopwatch,
        read: Result<Bytes, DriveError>,
    ) -> Result<Response, Status> {
        let data = read.map_err(|e| media_error(ns, e, false))?;
        ns.stats.read(len, started.nanos());
        self.io_counters.local().add_read(len);
        Ok(Response::data(data))
    }

    fn write_done(
        &self,
        ns: &Namespace,
        len: u64,
        started: Stopwatch,
        written: Result<(), DriveError>,
    ) -> Result<Response, Status> {
        written.map_err(|e| media_error(ns, e, true))?;
        ns.stats.write(len, started.nanos());
        self.io_counters.local().add_write(len);
        Ok(Response::ok())
    }

    async fn run_io(&self, req: IoRequest, data: Bytes) -> Result<Response, Status> {
        let IoRequest { cmd, ns, into } = req;
        let ns = match ns {
            None => return Ok(Response::status(self.flush_all().await)),
            Some(ns) if ns.serves_io() => ns,
            // Removed or replaced while the command's data was in flight: looked up again.
            Some(_) => Arc::new(self.namespace_for_io(cmd.nsid())?),
        };
        let bs = ns.block_size() as u64;
        match cmd {
            IoCommand::Read { slba, nlb, .. } => {
                let len = nlb as u64 * bs;
                let started = Stopwatch::start();
                let read = match into {
                    // (A namespace replaced meanwhile may have another block size.)
                    Some(buf) if buf.len() as u64 == len => ns.drive.read_into(slba * bs, buf),
                    _ => ns.drive.read(slba * bs, len as usize),
                };
                let read = read.await;
                self.read_done(&ns, len, started, read)
            }
            IoCommand::Write { slba, fua, .. } => {
                let len = data.len() as u64;
                let fua = fua || !self.volatile_write_cache();
                let started = Stopwatch::start();
                let written = ns.drive.write(slba * bs, data, fua).await;
                self.write_done(&ns, len, started, written)
            }
            IoCommand::Flush { .. } => {
                ns.drive
                    .flush()
                    .await
                    .map_err(|e| media_error(&ns, e, true))?;
                ns.stats.add_other();
                Ok(Response::ok())
            }
            IoCommand::WriteZeroes {
                slba,
                nlb,
                fua,
                deallocate,
                ..
            } => {
                let (off, len) = (slba * bs, nlb as u64 * bs);
                let r = if deallocate {
                    ns.drive.deallocate(off, len).await
                } else {
                    ns.drive.write_zeroes(off, len).await
                };
                r.map_err(|e| media_error(&ns, e, true))?;
                if fua || !self.volatile_write_cache() {
                    ns.drive
                        .flush()
                        .await
                        .map_err(|e| media_error(&ns, e, true))?;
                }
                ns.stats.add_other();
                Ok(Response::ok())
            }
            IoCommand::DatasetManagement {
                ranges, deallocate, ..
            } => {
                let ranges = DsmRange::decode_list(&data, ranges as usize)
                    .map_err(|_| Status::INVALID_FIELD)?;
                for r in &ranges {
                    check_lba_range(&ns, r.slba, r.nlb as u64)?;
                }
                // Only deallocate has an effect; the attribute hints are advisory.
                if deallocate {
                    for r in ranges.iter().filter(|r| r.nlb > 0) {
                        ns.drive
                            .deallocate(r.slba * bs, r.nlb as u64 * bs)
                            .await
                            .map_err(|e| media_error(&ns, e, true))?;
                    }
                    // With the cache off, what completes is durable: the deallocation too.
                    if !self.volatile_write_cache() {
                        ns.drive
                            .flush()
                            .await
                            .map_err(|e| media_error(&ns, e, true))?;
                    }
                }
                ns.stats.add_other();
                Ok(Response::ok())
            }
        }
    }
}

fn check_lba_range(ns: &Namespace, slba: u64, nlb: u64) -> Result<(), Status> {
    match slba.checked_add(nlb) {
        Some(end) if end <= ns.blocks() => Ok(()),
        _ => Err(Status::LBA_OUT_OF_RANGE),
    }
}

/// Maps a backend error to the NVMe status the host sees (as nvmet maps errno), counting media
/// errors for SMART: a full file system is Capacity Exceeded, not a media error; a drive that
/// lost a write refuses changes with Write Fault (counted once, when it failed).
fn media_error(ns: &Namespace, e: DriveError, write: bool) -> Status {
    match e {
        DriveError::Failed(_) => {
            tracing::debug!(nsid = ns.nsid, drive = %ns.drive_id, "{e}");
            return Status::WRITE_FAULT;
        }
        DriveError::Io { ref source, .. } if crate::backend::guard::is_no_space(source) => {
            tracing::warn!(nsid = ns.nsid, drive = %ns.drive_id, "{e}");
            return Status::CAPACITY_EXCEEDED;
        }
        _ => tracing::error!(nsid = ns.nsid, drive = %ns.drive_id, "{e}"),
    }
    match e {
        DriveError::Failed(_) => Status::WRITE_FAULT,
        DriveError::OutOfRange { .. } => Status::LBA_OUT_OF_RANGE,
        DriveError::Unaligned { .. } => Status::INVALID_FIELD,
        DriveError::Io { .. } => {
            ns.stats
                .media_errors
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if write {
                Status::WRITE_FAULT
            } else {
                Status::UNRECOVERED_READ_ERROR
            }
        }
        DriveError::Open { .. } | DriveError::Unusable(_) => Status::NAMESPACE_NOT_READY,
    }
}
