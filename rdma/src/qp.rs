//! Verbs: a queue pair with its registered memory, the shared receive queue, and the work
//! requests the NVMe/RDMA queues post.

use std::io;
use std::net::SocketAddr;
use std::ptr;
use std::sync::Arc;

use rdma_mummy_sys as sys;

use crate::cm::{sockaddr_from, CmEvent, EventChannel};
use crate::cm::{EV_ADDR_RESOLVED, EV_ESTABLISHED, EV_ROUTE_RESOLVED};
use crate::cq::{Completion, CompletionQueue};
use crate::util::{check, os_err, Raw};

/// What a device reports that sizes a queue pair (its limits) and shapes its traffic (who made
/// it: `vendor_id`).
#[derive(Clone, Copy, Debug)]
pub struct DeviceLimits {
    /// The IBTA vendor ID (0xffffff: none, as Soft-RoCE reports).
    pub vendor_id: u32,
    pub max_qp_wr: u32,
    pub max_sge: u32,
    pub max_cqe: u32,
    pub max_qp_rd_atom: u8,
    pub max_qp_init_rd_atom: u8,
}

/// Sizes of one queue pair's resources.
#[derive(Clone, Copy, Debug)]
pub struct QpSizes {
    pub recv_slots: u32,
    pub recv_size: usize,
    pub send_wr: u32,
    pub send_sge: u32,
    pub pool_bytes: usize,
    /// Register the buffers for the peer's RDMA READ and WRITE (the host side's data).
    pub remote_access: bool,
}

/// Page-aligned, zeroed memory that RDMA buffers live in. A `Region` registers it; a view of
/// it handed elsewhere (a write's data on its way to a drive) holds an `Arc` of it, which keeps
/// the memory, not the registration, alive: the region may go first.
pub struct Memory {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: plain memory; who may read or write which part is the owner's books' business, as
// `slice` and `slice_mut` require.
unsafe impl Send for Memory {}
// SAFETY: as above.
unsafe impl Sync for Memory {}

impl Memory {
    fn layout(len: usize) -> std::alloc::Layout {
        std::alloc::Layout::from_size_align(len.max(1), 4096).expect("page-aligned layout")
    }

    pub fn zeroed(len: usize) -> io::Result<Memory> {
        // SAFETY: the layout's size is non-zero.
        let ptr = unsafe { std::alloc::alloc_zeroed(Memory::layout(len)) };
        if ptr.is_null() {
            return Err(io::Error::new(io::ErrorKind::OutOfMemory, "RDMA buffers"));
        }
        Ok(Memory { ptr, len })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Where byte `offset` lies, for memory handed on by pointer (a drive's read into it).
    pub fn ptr(&self, offset: usize) -> std::ptr::NonNull<u8> {
        assert!(offset < self.len.max(1));
        // SAFETY: within the allocation, which is never null.
        unsafe { std::ptr::NonNull::new_unchecked(self.ptr.add(offset)) }
    }

    /// The offset of `p` if it points into this memory.
    pub fn offset_of(&self, p: *const u8) -> Option<usize> {
        (p as usize)
            .checked_sub(self.ptr as usize)
            .filter(|&off| off < self.len)
    }

    /// # Safety
    /// No RDMA operation may be writing the range (the caller's books say who owns which part).
    pub unsafe fn slice(&self, offset: usize, len: usize) -> &[u8] {
        assert!(offset.checked_add(len).is_some_and(|end| end <= self.len));
        std::slice::from_raw_parts(self.ptr.add(offset), len)
    }

    /// # Safety
    /// As `slice`, and no other reference to the range exists.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice_mut(&self, offset: usize, len: usize) -> &mut [u8] {
        assert!(offset.checked_add(len).is_some_and(|end| end <= self.len));
        std::slice::from_raw_parts_mut(self.ptr.add(offset), len)
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this layout; the last reference is going.
        unsafe { std::alloc::dealloc(self.ptr, Memory::layout(self.len)) }
    }
}

/// Memory registered with the protection domain once, at connect time.
pub struct Region {
    mem: std::sync::Arc<Memory>,
    mr: *mut sys::ibv_mr,
}

impl Region {
    /// Allocates `len` zeroed page-aligned bytes and registers them with `pd`.
    /// # Safety
    /// `pd` is a valid protection domain that outlives the region.
    unsafe fn register(
        pd: *mut sys::ibv_pd,
        len: usize,
        remote_access: bool,
    ) -> io::Result<Region> {
        let mem = Memory::zeroed(len)?;
        let mut access = sys::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE;
        if remote_access {
            access = access
                | sys::ibv_access_flags::IBV_ACCESS_REMOTE_READ
                | sys::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE;
        }
        let mr = sys::ibv_reg_mr(pd, mem.ptr.cast(), len.max(1), access.0 as i32);
        if mr.is_null() {
            return Err(os_err(
                "ibv_reg_mr (is the locked-memory limit high enough?)",
            ));
        }
        Ok(Region {
            mem: std::sync::Arc::new(mem),
            mr,
        })
    }

    pub fn lkey(&self) -> u32 {
        // SAFETY: mr is valid while self lives.
        unsafe { (*self.mr).lkey }
    }
    pub fn rkey(&self) -> u32 {
        // SAFETY: mr is valid while self lives.
        unsafe { (*self.mr).rkey }
    }
    pub fn addr(&self, offset: usize) -> u64 {
        debug_assert!(offset <= self.mem.len);
        self.mem.ptr as u64 + offset as u64
    }
    /// The registered memory, for views that may outlive the registration.
    pub fn memory(&self) -> &std::sync::Arc<Memory> {
        &self.mem
    }
    /// # Safety
    /// No RDMA operation may be writing the range (the caller's books say who owns which part).
    pub unsafe fn slice(&self, offset: usize, len: usize) -> &[u8] {
        self.mem.slice(offset, len)
    }
    /// # Safety
    /// As `slice`, and no other reference to the range exists.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice_mut(&self, offset: usize, len: usize) -> &mut [u8] {
        self.mem.slice_mut(offset, len)
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: the MR is ours; the queue pairs using it are gone. The memory goes with its
        // last reference.
        unsafe { sys::ibv_dereg_mr(self.mr) };
    }
}

/// A shared receive queue (SRQ) with its receive buffers, on one device's protection domain:
/// every queue pair of that device created with it takes its command capsules from here, so
/// receive memory does not grow with connections.
pub struct SharedRecv {
    pd: *mut sys::ibv_pd,
    srq: *mut sys::ibv_srq,
    region: Option<Region>,
    count: u32,
    size: usize,
}

// SAFETY: the SRQ and PD are thread-safe verbs objects; ibv_post_srq_recv may be called from
// any thread, and each buffer is owned by exactly one user at a time (the SRQ or the queue
// that received into it, until it posts it back).
unsafe impl Send for SharedRecv {}
// SAFETY: as above.
unsafe impl Sync for SharedRecv {}

/// The device a cm_id is bound to, as a map key.
/// # Safety
/// `id` is a valid cm_id.
pub unsafe fn device_key(id: Raw<sys::rdma_cm_id>) -> usize {
    (*id.0).verbs as usize
}

impl SharedRecv {
    /// Creates a protection domain, an SRQ of `count` receives of `size` bytes each on the
    /// device of `id`, and posts every receive.
    pub fn new(id: Raw<sys::rdma_cm_id>, count: u32, size: usize) -> io::Result<SharedRecv> {
        // SAFETY: a valid id bound to a device; every object is checked and recorded, so Drop
        // releases what exists.
        unsafe {
            let verbs = (*id.0).verbs;
            let limits = query_limits(verbs)?;
            let mut shared = SharedRecv {
                pd: sys::ibv_alloc_pd(verbs),
                srq: ptr::null_mut(),
                region: None,
                count: count.min(limits.max_qp_wr),
                size,
            };
            if shared.pd.is_null() {
                return Err(os_err("ibv_alloc_pd"));
            }
            let mut attr: sys::ibv_srq_init_attr = std::mem::zeroed();
            attr.attr.max_wr = shared.count;
            attr.attr.max_sge = 1;
            shared.srq = sys::ibv_create_srq(shared.pd, &mut attr);
            if shared.srq.is_null() {
                return Err(os_err("ibv_create_srq"));
            }
            shared.region = Some(Region::register(
                shared.pd,
                shared.count as usize * size,
                false,
            )?);
            for i in 0..shared.count as usize {
                shared.post(i)?;
            }
            Ok(shared)
        }
    }

    pub fn count(&self) -> u32 {
        self.count
    }

    /// Posts receive buffer `idx` (again); its completion carries `wr_id` `1 << 32 | idx`.
    pub fn post(&self, idx: usize) -> io::Result<()> {
        let region = self.region.as_ref().expect("region");
        let mut sge = sys::ibv_sge {
            addr: region.addr(idx * self.size),
            length: self.size as u32,
            lkey: region.lkey(),
        };
        let mut wr = sys::ibv_recv_wr {
            wr_id: SRQ_WR_KIND << 32 | idx as u64,
            next: ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        let mut bad = ptr::null_mut();
        // SAFETY: valid SRQ; wr and sge live across the call; the buffer is registered.
        check(
            unsafe { sys::ibv_post_srq_recv(self.srq, &mut wr, &mut bad) },
            "ibv_post_srq_recv",
        )
    }

    /// The first `len` bytes received into buffer `idx`.
    /// # Safety
    /// The buffer's receive completed and it has not been posted again.
    pub unsafe fn received(&self, idx: usize, len: usize) -> &[u8] {
        assert!(len <= self.size);
        self.region
            .as_ref()
            .expect("region")
            .slice(idx * self.size, len)
    }
}

/// The work request kind (`wr_id >> 32`) of shared receive queue completions.
pub const SRQ_WR_KIND: u64 = 1;

impl Drop for SharedRecv {
    fn drop(&mut self) {
        // SAFETY: ours; every queue pair using the SRQ is gone (they hold an Arc of it).
        unsafe {
            if !self.srq.is_null() {
                sys::ibv_destroy_srq(self.srq);
            }
            self.region = None;
            if !self.pd.is_null() {
                sys::ibv_dealloc_pd(self.pd);
            }
        }
    }
}

/// Everything one NVMe/RDMA queue holds: its cm_id, protection domain, completion queue (its
/// own or a shared one), queue pair and registered memory. Dropped in the order the verbs
/// demand.
pub struct QueuePair {
    id: Raw<sys::rdma_cm_id>,
    pd: *mut sys::ibv_pd,
    cq: Option<Arc<CompletionQueue>>,
    qp_created: bool,
    pub region: Option<Region>,
    /// The device's shared receive queue and protection domain, when the QP uses them.
    shared: Option<Arc<SharedRecv>>,
}

// SAFETY: the verbs objects are thread-safe; the QueuePair is used by one task at a time.
unsafe impl Send for QueuePair {}
// SAFETY: as above; shared references only read the pointers.
unsafe impl Sync for QueuePair {}

impl QueuePair {
    /// Takes ownership of a connect request's cm_id; `setup` then creates the resources.
    /// Dropping the value destroys the id: do it only after the request's event is acked.
    pub fn new(id: Raw<sys::rdma_cm_id>) -> QueuePair {
        QueuePair {
            id,
            pd: ptr::null_mut(),
            cq: None,
            qp_created: false,
            region: None,
            shared: None,
        }
    }

    /// Creates the queue's resources on the device the connect request came in on. With
    /// `shared`, the QP takes its receives from that SRQ and lives in its protection domain
    /// (then `sizes.recv_size` is 0: no receive buffers of its own). With `cq`, its completions
    /// go to that shared completion queue (its owner polls it and has room for this QP's work
    /// requests); without, to a completion queue of its own, armed.
    pub fn setup(
        &mut self,
        sizes: impl FnOnce(&DeviceLimits) -> QpSizes,
        shared: Option<Arc<SharedRecv>>,
        cq: Option<Arc<CompletionQueue>>,
    ) -> io::Result<(QpSizes, DeviceLimits)> {
        self.shared = shared;
        self.cq = cq;
        // SAFETY: the id is a valid connect-request id (see `new`); every object created is
        // checked and recorded in self, so Drop releases exactly what exists.
        unsafe { self.setup_raw(sizes) }
    }

    unsafe fn setup_raw(
        &mut self,
        sizes: impl FnOnce(&DeviceLimits) -> QpSizes,
    ) -> io::Result<(QpSizes, DeviceLimits)> {
        let qp = self;
        let id = qp.id;
        let verbs = (*id.0).verbs;
        let limits = query_limits(verbs)?;
        let sizes = sizes(&limits);
        let srq = match &qp.shared {
            Some(shared) => shared.srq,
            None => {
                qp.pd = sys::ibv_alloc_pd(verbs);
                if qp.pd.is_null() {
                    return Err(os_err("ibv_alloc_pd"));
                }
                ptr::null_mut()
            }
        };
        let pd = qp.pd();
        let cq = match &qp.cq {
            Some(cq) => cq.raw(),
            None => {
                let entries = (sizes.recv_slots + sizes.send_wr).min(limits.max_cqe);
                let cq = Arc::new(CompletionQueue::create(verbs, entries)?);
                qp.cq.insert(cq).raw()
            }
        };
        let mut init: sys::ibv_qp_init_attr = std::mem::zeroed();
        init.send_cq = cq;
        init.recv_cq = cq;
        init.qp_type = sys::ibv_qp_type::IBV_QPT_RC;
        init.cap.max_send_wr = sizes.send_wr;
        if srq.is_null() {
            init.cap.max_recv_wr = sizes.recv_slots;
            init.cap.max_recv_sge = 1;
        } else {
            init.srq = srq;
        }
        init.cap.max_send_sge = sizes.send_sge;
        check(sys::rdma_create_qp(id.0, pd, &mut init), "rdma_create_qp")?;
        qp.qp_created = true;
        let len = sizes.recv_slots as usize * sizes.recv_size
            + sizes.recv_slots as usize * 16
            + sizes.pool_bytes;
        qp.region = Some(Region::register(pd, len, sizes.remote_access)?);
        Ok((sizes, limits))
    }

    pub fn id(&self) -> Raw<sys::rdma_cm_id> {
        self.id
    }

    /// The protection domain the queue pair and its memory live in (the device's shared one
    /// with an SRQ); null before `setup`. Regions registered on it must go before the
    /// QueuePair does.
    pub fn pd(&self) -> *mut sys::ibv_pd {
        self.shared.as_ref().map_or(self.pd, |s| s.pd)
    }

    /// The name of the device the cm_id is bound to ("rxe0", "mlx5_2"); empty before address
    /// resolution.
    pub fn device_name(&self) -> String {
        // SAFETY: valid id; its device context, once bound, lives as long as the id, and
        // ibv_get_device_name returns a string owned by the device (or NULL).
        unsafe {
            let verbs = (*self.id.0).verbs;
            if verbs.is_null() {
                return String::new();
            }
            let name = sys::ibv_get_device_name((*verbs).device);
            if name.is_null() {
                return String::new();
            }
            std::ffi::CStr::from_ptr(name)
                .to_string_lossy()
                .into_owned()
        }
    }

    /// Accepts the connection, with our private data and RDMA READ depths.
    pub fn accept(
        &self,
        private: &[u8],
        responder_resources: u8,
        initiator_depth: u8,
    ) -> io::Result<()> {
        let mut param = conn_param(private, responder_resources, initiator_depth);
        // SAFETY: valid id with a QP; param and its private data live across the call.
        check(
            unsafe { sys::rdma_accept(self.id.0, &mut param) },
            "rdma_accept",
        )
    }

    /// Resolves `dst` to a local device and a route to it (the active side, before `setup`),
    /// from the local address `src` if given (else the one the routing table picks).
    pub async fn resolve(
        &self,
        channel: &EventChannel,
        src: Option<std::net::IpAddr>,
        dst: SocketAddr,
        timeout_ms: i32,
    ) -> io::Result<()> {
        let (mut storage, _len) = sockaddr_from(dst);
        let mut src = src.map(|ip| sockaddr_from(SocketAddr::new(ip, 0)).0);
        let src_ptr = src.as_mut().map_or(ptr::null_mut(), |s| {
            (s as *mut libc::sockaddr_storage).cast()
        });
        // SAFETY: valid id; the sockaddrs are valid for the call.
        check(
            unsafe {
                sys::rdma_resolve_addr(
                    self.id.0,
                    src_ptr,
                    (&mut storage as *mut libc::sockaddr_storage).cast(),
                    timeout_ms,
                )
            },
            "rdma_resolve_addr",
        )?;
        channel.expect(EV_ADDR_RESOLVED).await?;
        // SAFETY: valid id with a resolved address.
        check(
            unsafe { sys::rdma_resolve_route(self.id.0, timeout_ms) },
            "rdma_resolve_route",
        )?;
        channel.expect(EV_ROUTE_RESOLVED).await?;
        Ok(())
    }

    /// Connects (the active side, after `setup`) with our private data; returns the
    /// ESTABLISHED event, or the REJECTED one (with the peer's private data) as an error value.
    pub async fn connect(
        &self,
        channel: &EventChannel,
        private: &[u8],
        responder_resources: u8,
        initiator_depth: u8,
    ) -> io::Result<Result<CmEvent, CmEvent>> {
        {
            // In a block of its own: the raw pointer in `param` must not live across the await
            // below, or the future would not be Send.
            let mut param = conn_param(private, responder_resources, initiator_depth);
            param.retry_count = 7;
            // SAFETY: valid id with a QP; param and its private data live across the call.
            check(
                unsafe { sys::rdma_connect(self.id.0, &mut param) },
                "rdma_connect",
            )?;
        }
        let ev = channel
            .next(|e| CmEvent {
                kind: e.kind,
                id: e.id,
                private_data: e.private_data.clone(),
                responder_resources: e.responder_resources,
                initiator_depth: e.initiator_depth,
            })
            .await?;
        Ok(if ev.kind == EV_ESTABLISHED {
            Ok(ev)
        } else {
            Err(ev)
        })
    }

    /// Device limits of the id's device (after address resolution).
    pub fn device_limits(&self) -> io::Result<DeviceLimits> {
        // SAFETY: valid id bound to a device.
        unsafe { query_limits((*self.id.0).verbs) }
    }

    /// The active MTU of the port the id is bound to, in bytes (after address resolution).
    pub fn active_mtu(&self) -> io::Result<u32> {
        // SAFETY: valid id bound to a device and port; the attributes are written by the call.
        unsafe {
            let verbs = (*self.id.0).verbs;
            if verbs.is_null() {
                return Err(io::Error::other("the cm_id has no device yet"));
            }
            let mut attr: sys::ibv_port_attr = std::mem::zeroed();
            check(
                sys::ibv_query_port(verbs, (*self.id.0).port_num, &mut attr),
                "ibv_query_port",
            )?;
            // enum ibv_mtu: 1 = 256 bytes ... 5 = 4096.
            Ok(128 << (attr.active_mtu as u32).clamp(1, 5))
        }
    }

    /// Rejects the connect request with NVMe/RDMA private data.
    pub fn reject(&self, private: &[u8]) {
        // SAFETY: valid id; the private data lives across the call.
        unsafe { sys::rdma_reject(self.id.0, private.as_ptr().cast(), private.len() as u8) };
    }

    pub fn disconnect(&self) {
        // SAFETY: valid id; disconnecting twice only returns an error.
        unsafe { sys::rdma_disconnect(self.id.0) };
    }

    /// Posts one receive of `len` bytes at `offset` in the region.
    pub fn post_recv(&self, wr_id: u64, offset: usize, len: usize) -> io::Result<()> {
        let region = self.region.as_ref().expect("region");
        let mut sge = sys::ibv_sge {
            addr: region.addr(offset),
            length: len as u32,
            lkey: region.lkey(),
        };
        let mut wr = sys::ibv_recv_wr {
            wr_id,
            next: ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        let mut bad = ptr::null_mut();
        // SAFETY: valid QP; wr and sge live across the call; the buffer is registered.
        check(
            unsafe { sys::ibv_post_recv((*self.id.0).qp, &mut wr, &mut bad) },
            "ibv_post_recv",
        )
    }

    /// Posts a chain of send-queue work requests, in order, in batches of up to `POST_BATCH`
    /// built on the stack: nothing is allocated per command, and a batch rings the doorbell
    /// once (a system call with Soft-RoCE).
    pub fn post_send(&self, wrs: &[SendWr]) -> io::Result<()> {
        const POST_BATCH: usize = 32;
        let region = self.region.as_ref().expect("region");
        let lkey = region.lkey();
        for batch in wrs.chunks(POST_BATCH) {
            let mut sges = [sys::ibv_sge {
                addr: 0,
                length: 0,
                lkey,
            }; POST_BATCH];
            // SAFETY: all-zero is a valid (empty) work request.
            let mut raw: [sys::ibv_send_wr; POST_BATCH] = unsafe { std::mem::zeroed() };
            for (i, w) in batch.iter().enumerate() {
                let (off, len) = w.local;
                sges[i].addr = region.addr(off);
                sges[i].length = len;
                let r = &mut raw[i];
                r.wr_id = w.wr_id;
                r.num_sge = 1;
                r.send_flags = if w.signaled {
                    sys::ibv_send_flags::IBV_SEND_SIGNALED.0
                } else {
                    0
                };
                match w.op {
                    SendOp::Send { invalidate: None } => r.opcode = sys::ibv_wr_opcode::IBV_WR_SEND,
                    SendOp::Send {
                        invalidate: Some(rkey),
                    } => {
                        r.opcode = sys::ibv_wr_opcode::IBV_WR_SEND_WITH_INV;
                        r.imm_data_invalidated_rkey_union.invalidated_rkey = rkey;
                    }
                    SendOp::Read { remote, rkey } | SendOp::Write { remote, rkey } => {
                        r.opcode = if matches!(w.op, SendOp::Read { .. }) {
                            sys::ibv_wr_opcode::IBV_WR_RDMA_READ
                        } else {
                            sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE
                        };
                        r.wr.rdma = sys::rdma_t {
                            remote_addr: remote,
                            rkey,
                        };
                    }
                }
            }
            // Linked once filled, through pointers only.
            let (base, sge) = (raw.as_mut_ptr(), sges.as_mut_ptr());
            for i in 0..batch.len() {
                // SAFETY: i (and i + 1 where linked) is within both arrays.
                unsafe {
                    (*base.add(i)).sg_list = sge.add(i);
                    if i + 1 < batch.len() {
                        (*base.add(i)).next = base.add(i + 1);
                    }
                }
            }
            let mut bad = ptr::null_mut();
            // SAFETY: valid QP; the chain, its SGEs and the registered buffers live across the
            // call (the provider copies the requests into its send queue).
            check(
                unsafe { sys::ibv_post_send((*self.id.0).qp, base, &mut bad) },
                "ibv_post_send",
            )?;
        }
        Ok(())
    }

    /// Takes up to `wcs.len()` completions from its completion queue (32 at most per call).
    pub fn poll(&self, wcs: &mut [Completion]) -> io::Result<usize> {
        self.completions()?.poll(wcs)
    }

    /// Re-arms completion notification (then poll once more: completions may have arrived
    /// before the arming).
    pub fn arm(&self) -> io::Result<()> {
        self.completions()?.arm()
    }

    /// Waits for the completion channel to signal and consumes the event (see
    /// `CompletionQueue::wait`).
    pub async fn wait(&self) -> io::Result<()> {
        self.completions()?.wait().await
    }

    fn completions(&self) -> io::Result<&CompletionQueue> {
        self.cq
            .as_deref()
            .ok_or_else(|| io::Error::other("the queue pair has no completion queue"))
    }

    /// The queue pair's number, which its completions carry; None before `setup`.
    pub fn qp_num(&self) -> Option<u32> {
        // SAFETY: valid id; its QP, once created, lives until Drop.
        unsafe {
            (self.qp_created && !(*self.id.0).qp.is_null()).then(|| (*(*self.id.0).qp).qp_num)
        }
    }

    /// Posts a signaled, empty RDMA WRITE as the last work request of a queue pair in the error
    /// state, as the kernel's ib_drain_sq does: its completion (flushed) comes after every
    /// earlier one of this queue pair, so once it is polled none of them is left in a shared
    /// completion queue.
    pub fn post_drain(&self, wr_id: u64) -> io::Result<()> {
        // SAFETY: all-zero is a valid (empty) work request.
        let mut wr: sys::ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = wr_id;
        wr.opcode = sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE;
        wr.send_flags = sys::ibv_send_flags::IBV_SEND_SIGNALED.0;
        let mut bad = ptr::null_mut();
        // SAFETY: valid QP (checked by qp_num); the request has no SGE and lives across the
        // call.
        check(
            unsafe {
                match self.qp_num() {
                    Some(_) => sys::ibv_post_send((*self.id.0).qp, &mut wr, &mut bad),
                    None => libc::EINVAL,
                }
            },
            "ibv_post_send (drain)",
        )
    }
}

/// # Safety
/// `verbs` is a valid device context.
pub(crate) unsafe fn query_limits(verbs: *mut sys::ibv_context) -> io::Result<DeviceLimits> {
    if verbs.is_null() {
        return Err(io::Error::other("the cm_id has no device yet"));
    }
    let mut attr: sys::ibv_device_attr = std::mem::zeroed();
    check(sys::ibv_query_device(verbs, &mut attr), "ibv_query_device")?;
    Ok(DeviceLimits {
        vendor_id: attr.vendor_id,
        max_qp_wr: attr.max_qp_wr.max(1) as u32,
        max_sge: attr.max_sge.max(1) as u32,
        max_cqe: attr.max_cqe.max(1) as u32,
        max_qp_rd_atom: attr.max_qp_rd_atom.clamp(0, 255) as u8,
        max_qp_init_rd_atom: attr.max_qp_init_rd_atom.clamp(0, 255) as u8,
    })
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        // SAFETY: each object is ours and destroyed once, users before what they use: the QP
        // (which may still hold flushed work requests) before the CQ and the memory it used,
        // the CQ before its channel, everything before the PD and the cm_id. rdma_destroy_id
        // waits for this id's events to be acked, which the listener does promptly.
        unsafe {
            if self.qp_created {
                sys::rdma_destroy_qp(self.id.0);
            }
            // Its own completion queue goes here; a shared one with its last user.
            self.cq = None;
            self.region = None;
            if !self.pd.is_null() {
                sys::ibv_dealloc_pd(self.pd);
            }
            sys::rdma_destroy_id(self.id.0);
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub enum SendOp {
    Send { invalidate: Option<u32> },
    Read { remote: u64, rkey: u32 },
    Write { remote: u64, rkey: u32 },
}

/// One send-queue work request: local (offset, length) pieces of the region.
#[derive(Clone, Debug)]
pub struct SendWr {
    pub wr_id: u64,
    pub op: SendOp,
    /// The piece of the region it moves: (offset, length).
    pub local: (usize, u32),
    pub signaled: bool,
}

/// The connection parameters both sides send: our private data (it must outlive the CM call),
/// RDMA READ depths, flow control, and infinite RNR retries.
fn conn_param(
    private: &[u8],
    responder_resources: u8,
    initiator_depth: u8,
) -> sys::rdma_conn_param {
    // SAFETY: all-zero is a valid rdma_conn_param.
    let mut param: sys::rdma_conn_param = unsafe { std::mem::zeroed() };
    param.private_data = private.as_ptr().cast();
    param.private_data_len = private.len() as u8;
    param.responder_resources = responder_resources;
    param.initiator_depth = initiator_depth;
    param.flow_control = 1;
    param.rnr_retry_count = 7;
    param
}
