//! Peer memory on an NVMe/RDMA queue: registering caller memory (a GPU's, by dma-buf or by
//! pointer) on the queue's protection domain, the registrations the driver keeps, and the
//! direction check of peer transfers.

use std::os::fd::AsRawFd;
use std::sync::{Arc, Weak};

use fabrik_proto::Sqe;
use fabrik_rdma::{ForeignRegion, QueuePair};

use super::Driver;
use crate::error::HostError;
use crate::transport::peer::{PeerMemory, Registration};

/// A peer transfer must go the way the opcode moves data (bits 1:0: 01b host to controller,
/// 10b controller to host), or the target would write into memory meant as a source.
pub(super) fn check_direction(sqe: &Sqe, host_to_target: bool) -> Result<(), HostError> {
    let opcode_says = match sqe.opcode & 0b11 {
        0b01 => Some(true),
        0b10 => Some(false),
        _ => None, // 00b: no data; 11b: both ways (Fabrics commands say theirs elsewhere)
    };
    match opcode_says {
        Some(dir) if dir != host_to_target => Err(HostError::Invalid(format!(
            "opcode {:02x}h moves data {}, not {}",
            sqe.opcode,
            direction_name(dir),
            direction_name(host_to_target)
        ))),
        _ => Ok(()),
    }
}

fn direction_name(host_to_target: bool) -> &'static str {
    if host_to_target {
        "to the target"
    } else {
        "from the target"
    }
}

/// Registers `mem` on the protection domain of `qp`: by dma-buf first, then by pointer. The
/// error lists each way tried and why it failed.
/// # Safety
/// The region is dropped before `qp`, and the memory stays allocated while the target may
/// access it through the region.
unsafe fn register_peer(
    qp: &QueuePair,
    mem: &dyn PeerMemory,
) -> Result<(ForeignRegion, Registration), String> {
    let pd = qp.pd();
    if mem.is_empty() {
        return Err("the allocation is empty".into());
    }
    let export = mem.export_dmabuf();
    let exported = export.is_some();
    let dmabuf = match export {
        // The region keeps its own reference to the dma-buf: the fd is closed on return.
        Some(Ok(fd)) => {
            match ForeignRegion::register_dmabuf(pd, fd.as_raw_fd(), 0, mem.len(), mem.addr()) {
                Ok(region) => return Ok((region, Registration::DmaBuf)),
                Err(e) => format!("dma-buf: {e}"),
            }
        }
        Some(Err(why)) => format!("dma-buf: export failed: {why}"),
        None => "dma-buf: this memory has no dma-buf export".into(),
    };
    let mut tried = vec![dmabuf];
    if mem.pointer_registrable() {
        match ForeignRegion::register_pointer(pd, mem.addr(), mem.len()) {
            Ok(region) => {
                if exported {
                    // Worth knowing: the memory has a dma-buf export, yet it did not serve.
                    tracing::info!(nic = %qp.device_name(), "{}; registered by pointer instead", tried[0]);
                }
                return Ok((region, Registration::Pointer));
            }
            Err(e) => tried.push(format!("pointer: {e}")),
        }
    } else {
        tried.push(
            "pointer: this memory cannot be registered by pointer (GPU memory needs \
             nvidia-peermem loaded)"
                .into(),
        );
    }
    Err(tried.join("; "))
}

/// Peer memory registered on the queue's protection domain.
pub(super) struct PeerRegion {
    /// Every handle to the allocation seen so far, held weakly: the cache must not keep memory
    /// alive. The region goes once all are gone (a command in flight holds its handle).
    handles: Vec<Weak<dyn PeerMemory>>,
    addr: u64,
    len: usize,
    region: ForeignRegion,
    how: Registration,
}

impl PeerRegion {
    /// Whether a handle to the memory is still alive (forgetting the dead ones).
    fn in_use(&mut self) -> bool {
        self.handles.retain(|h| h.strong_count() > 0);
        !self.handles.is_empty()
    }
}

impl Driver {
    /// The registration of `mem` and its rkey: cached, else made now. Regions of memory that
    /// is gone are deregistered first.
    pub(super) fn register(
        &mut self,
        mem: &Arc<dyn PeerMemory>,
    ) -> Result<(Registration, u32), HostError> {
        self.peers.retain(|_, r| r.in_use());
        if let Some(r) = self.peers.get_mut(&mem.id()) {
            // Another live allocation under the same id: a broken `id()`. Replacing the region
            // would break the commands in flight on the first one.
            if (r.addr, r.len) != (mem.addr(), mem.len()) {
                return Err(HostError::Invalid(format!(
                    "peer memory id {} names two live allocations ({} bytes at {:#x}, {} at {:#x})",
                    mem.id(),
                    r.len,
                    r.addr,
                    mem.len(),
                    mem.addr()
                )));
            }
            // Another handle to the same allocation keeps the region as well.
            if !r
                .handles
                .iter()
                .any(|h| std::ptr::addr_eq(h.as_ptr(), Arc::as_ptr(mem)))
            {
                r.handles.push(Arc::downgrade(mem));
            }
            return Ok((r.how.clone(), r.region.rkey()));
        }
        // SAFETY: the region goes into `peers`, which is dropped before the queue pair (see
        // `run`); a command using the memory holds it (`Pending::peer`) until it completes.
        let (region, how) = unsafe { register_peer(&self.qp, mem.as_ref()) }.map_err(|reason| {
            HostError::PeerMemory {
                nic: self.nic.clone(),
                reason,
            }
        })?;
        tracing::debug!(
            qid = self.qid,
            nic = %self.nic,
            id = mem.id(),
            len = mem.len(),
            %how,
            "peer memory registered"
        );
        let rkey = region.rkey();
        let entry = PeerRegion {
            handles: vec![Arc::downgrade(mem)],
            addr: mem.addr(),
            len: mem.len(),
            region,
            how: how.clone(),
        };
        self.peers.insert(mem.id(), entry);
        Ok((how, rkey))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabrik_proto::nvme::{admin_opcode, io_opcode};

    #[test]
    fn peer_transfers_go_the_way_the_opcode_moves_data() {
        let sqe = |opcode| Sqe {
            opcode,
            ..Sqe::default()
        };
        assert!(check_direction(&sqe(io_opcode::READ), false).is_ok());
        assert!(check_direction(&sqe(io_opcode::WRITE), true).is_ok());
        assert!(check_direction(&sqe(admin_opcode::FABRICS), true).is_ok());
        let err = check_direction(&sqe(io_opcode::READ), true).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid request: opcode 02h moves data from the target, not to the target"
        );
        assert!(matches!(
            check_direction(&sqe(io_opcode::WRITE), false),
            Err(HostError::Invalid(_))
        ));
    }
}
