//! The wrappers (built with the `verbs` feature).

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::ptr;

use rdma_mummy_sys as sys;
use tokio::io::unix::AsyncFd;

/// libibverbs and librdmacm can be loaded (the raw layer otherwise fails every call with
/// EOPNOTSUPP, silently).
pub fn check_libraries() -> Result<(), String> {
    for lib in [c"libibverbs.so.1", c"librdmacm.so.1"] {
        // SAFETY: dlopen with a valid NUL-terminated name; the handle is closed right away.
        let handle = unsafe { libc::dlopen(lib.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(format!("{} not found", lib.to_string_lossy()));
        }
        // SAFETY: a handle returned by dlopen above.
        unsafe { libc::dlclose(handle) };
    }
    Ok(())
}

fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor we own, with integer arguments.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Maps a `-1 + errno` or `errno`-style return to an error naming the call.
fn check(ret: i32, what: &str) -> io::Result<()> {
    if ret == 0 {
        return Ok(());
    }
    let e = if ret < 0 {
        io::Error::last_os_error()
    } else {
        io::Error::from_raw_os_error(ret)
    };
    Err(io::Error::new(e.kind(), format!("{what}: {e}")))
}

struct Fd(RawFd);
impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// A raw pointer that may move between threads: the objects behind these pointers are
/// thread-safe in libibverbs/librdmacm, and each is used by one owner at a time.
#[derive(Debug)]
pub struct Raw<T>(pub *mut T);
impl<T> Clone for Raw<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Raw<T> {}
// SAFETY: see the type's comment.
unsafe impl<T> Send for Raw<T> {}
// SAFETY: see the type's comment.
unsafe impl<T> Sync for Raw<T> {}

/// One rdma_cm event, copied out of the library's buffer (which is acked right after).
pub struct CmEvent {
    pub kind: u32,
    pub id: Raw<sys::rdma_cm_id>,
    pub private_data: Vec<u8>,
    pub responder_resources: u8,
    pub initiator_depth: u8,
}

pub const EV_CONNECT_REQUEST: u32 = sys::rdma_cm_event_type::RDMA_CM_EVENT_CONNECT_REQUEST;
pub const EV_ESTABLISHED: u32 = sys::rdma_cm_event_type::RDMA_CM_EVENT_ESTABLISHED;
pub const EV_ADDR_RESOLVED: u32 = sys::rdma_cm_event_type::RDMA_CM_EVENT_ADDR_RESOLVED;
pub const EV_ROUTE_RESOLVED: u32 = sys::rdma_cm_event_type::RDMA_CM_EVENT_ROUTE_RESOLVED;
pub const EV_REJECTED: u32 = sys::rdma_cm_event_type::RDMA_CM_EVENT_REJECTED;

pub fn event_name(kind: u32) -> String {
    // SAFETY: rdma_event_str returns a static string for any value.
    let s = unsafe { sys::rdma_event_str(kind) };
    if s.is_null() {
        return kind.to_string();
    }
    // SAFETY: a valid NUL-terminated static string.
    unsafe { std::ffi::CStr::from_ptr(s) }
        .to_string_lossy()
        .into_owned()
}

/// The CM event channel of a listener, with its listening id, driven by tokio.
pub struct EventChannel {
    raw: Raw<sys::rdma_event_channel>,
    fd: Option<AsyncFd<Fd>>,
    listen_id: Raw<sys::rdma_cm_id>,
}

impl EventChannel {
    /// Creates an event channel (driven by tokio: needs a runtime).
    pub fn new() -> io::Result<EventChannel> {
        // SAFETY: plain constructor; checked for NULL.
        let raw = unsafe { sys::rdma_create_event_channel() };
        if raw.is_null() {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("rdma_create_event_channel: {e} (is rdma_ucm loaded?)"),
            ));
        }
        // SAFETY: raw is a valid channel.
        let fd = unsafe { (*raw).fd };
        if let Err(e) = set_nonblocking(fd) {
            // SAFETY: the channel is ours and unused.
            unsafe { sys::rdma_destroy_event_channel(raw) };
            return Err(e);
        }
        Ok(EventChannel {
            raw: Raw(raw),
            // SAFETY: the channel's fd stays open until Drop, which deregisters it first.
            fd: Some(unsafe { AsyncFd::register(Fd(fd)) }?),
            listen_id: Raw(ptr::null_mut()),
        })
    }

    /// Creates the channel and a listening id bound to `addr` (port space TCP, as NVMe/RDMA).
    pub fn listen(addr: SocketAddr, backlog: i32) -> io::Result<EventChannel> {
        let mut chan = EventChannel::new()?;
        let id = chan.create_id()?;
        chan.listen_id = id;
        let (mut storage, _len) = sockaddr_from(addr);
        // SAFETY: valid id; the sockaddr is valid for the call.
        check(
            unsafe {
                sys::rdma_bind_addr(id.0, (&mut storage as *mut libc::sockaddr_storage).cast())
            },
            &format!("rdma_bind_addr {addr}"),
        )?;
        // SAFETY: valid bound id.
        check(unsafe { sys::rdma_listen(id.0, backlog) }, "rdma_listen")?;
        Ok(chan)
    }

    /// A new cm_id on this channel (port space TCP). The caller owns it: hand it to a
    /// `QueuePair`, which destroys it, before the channel goes.
    pub fn create_id(&self) -> io::Result<Raw<sys::rdma_cm_id>> {
        let mut id = ptr::null_mut();
        // SAFETY: valid channel, out pointer to a local.
        check(
            unsafe {
                sys::rdma_create_id(
                    self.raw.0,
                    &mut id,
                    ptr::null_mut(),
                    sys::rdma_port_space::RDMA_PS_TCP,
                )
            },
            "rdma_create_id",
        )?;
        Ok(Raw(id))
    }

    /// The address the listening id is bound to (the port chosen for port 0).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        // SAFETY: the listening id is valid while self lives.
        unsafe { local_addr(self.listen_id) }
    }

    /// The next CM event. `handle` runs before the event is acknowledged (a connect request's
    /// id must be accepted or rejected while its event is held).
    pub async fn next<R>(&self, mut handle: impl FnMut(&CmEvent) -> R) -> io::Result<R> {
        loop {
            let fd = self.fd.as_ref().expect("open channel");
            let mut guard = fd.readable().await?;
            let mut ev = ptr::null_mut();
            // SAFETY: valid channel (non-blocking fd), out pointer to a local.
            let ret = unsafe { sys::rdma_get_cm_event(self.raw.0, &mut ev) };
            if ret != 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::WouldBlock {
                    guard.clear_ready();
                    continue;
                }
                return Err(e);
            }
            // SAFETY: ev is a valid event until acked; for connection events `param.conn`
            // is the active union member and its private data is valid for its length.
            let event = unsafe {
                let e = &*ev;
                let conn = &e.param.conn;
                let private_data = if conn.private_data.is_null() {
                    Vec::new()
                } else {
                    std::slice::from_raw_parts(
                        conn.private_data.cast::<u8>(),
                        conn.private_data_len as usize,
                    )
                    .to_vec()
                };
                CmEvent {
                    kind: e.event,
                    id: Raw(e.id),
                    private_data,
                    responder_resources: conn.responder_resources,
                    initiator_depth: conn.initiator_depth,
                }
            };
            let r = handle(&event);
            // SAFETY: ev came from rdma_get_cm_event and is acked once.
            unsafe { sys::rdma_ack_cm_event(ev) };
            return Ok(r);
        }
    }
}

impl EventChannel {
    /// Waits for the next event on a channel that serves one id, which must be `kind`.
    pub async fn expect(&self, kind: u32) -> io::Result<()> {
        let (got, status_ok) = self.next(|e| (e.kind, e.kind == kind)).await?;
        if status_ok {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "rdma_cm: {} while waiting for {}",
                event_name(got),
                event_name(kind)
            )))
        }
    }
}

impl Drop for EventChannel {
    fn drop(&mut self) {
        self.fd = None;
        // SAFETY: the listening id and the channel are ours; every child id was destroyed
        // before (the listener waits for its connections).
        unsafe {
            if !self.listen_id.0.is_null() {
                sys::rdma_destroy_id(self.listen_id.0);
            }
            sys::rdma_destroy_event_channel(self.raw.0);
        }
    }
}

fn sockaddr_from(addr: SocketAddr) -> (libc::sockaddr_storage, usize) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut s: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in and suitably aligned.
            unsafe { ptr::write((&mut s as *mut libc::sockaddr_storage).cast(), sin) };
            (s, std::mem::size_of::<libc::sockaddr_in>())
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as above, for sockaddr_in6.
            unsafe { ptr::write((&mut s as *mut libc::sockaddr_storage).cast(), sin6) };
            (s, std::mem::size_of::<libc::sockaddr_in6>())
        }
    }
}

/// # Safety
/// `sa` points at a valid sockaddr of its family.
unsafe fn sockaddr_to(sa: *const libc::sockaddr) -> Option<SocketAddr> {
    match i32::from((*sa).sa_family) {
        libc::AF_INET => {
            let sin = &*sa.cast::<libc::sockaddr_in>();
            let ip = std::net::Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::from((ip, u16::from_be(sin.sin_port))))
        }
        libc::AF_INET6 => {
            let sin6 = &*sa.cast::<libc::sockaddr_in6>();
            let ip = std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::from((ip, u16::from_be(sin6.sin6_port))))
        }
        _ => None,
    }
}

/// # Safety
/// `id` is a valid cm_id.
pub unsafe fn local_addr(id: Raw<sys::rdma_cm_id>) -> Option<SocketAddr> {
    sockaddr_to(&(*id.0).route.addr.src_addr_union.src_addr)
}

/// # Safety
/// `id` is a valid cm_id.
pub unsafe fn peer_addr(id: Raw<sys::rdma_cm_id>) -> Option<SocketAddr> {
    sockaddr_to(&(*id.0).route.addr.dst_addr_union.dst_addr)
}

/// Device limits that size a queue pair.
#[derive(Clone, Copy, Debug)]
pub struct DeviceLimits {
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

/// A page-aligned buffer registered with the protection domain once, at connect time.
pub struct Region {
    ptr: *mut u8,
    len: usize,
    mr: *mut sys::ibv_mr,
}

impl Region {
    pub fn lkey(&self) -> u32 {
        // SAFETY: mr is valid while self lives.
        unsafe { (*self.mr).lkey }
    }
    pub fn rkey(&self) -> u32 {
        // SAFETY: mr is valid while self lives.
        unsafe { (*self.mr).rkey }
    }
    pub fn addr(&self, offset: usize) -> u64 {
        debug_assert!(offset <= self.len);
        self.ptr as u64 + offset as u64
    }
    /// # Safety
    /// No RDMA operation may be writing the range (the caller's books say who owns which part).
    pub unsafe fn slice(&self, offset: usize, len: usize) -> &[u8] {
        assert!(offset + len <= self.len);
        std::slice::from_raw_parts(self.ptr.add(offset), len)
    }
    /// # Safety
    /// As `slice`, and no other reference to the range exists.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice_mut(&self, offset: usize, len: usize) -> &mut [u8] {
        assert!(offset + len <= self.len);
        std::slice::from_raw_parts_mut(self.ptr.add(offset), len)
    }
}

/// Everything one NVMe/RDMA queue holds: its cm_id, protection domain, completion queue and
/// channel, queue pair and registered memory. Dropped in the order the verbs demand.
pub struct QueuePair {
    id: Raw<sys::rdma_cm_id>,
    pd: *mut sys::ibv_pd,
    channel: *mut sys::ibv_comp_channel,
    cq: *mut sys::ibv_cq,
    qp_created: bool,
    pub region: Option<Region>,
    fd: Option<AsyncFd<Fd>>,
    unacked_events: u32,
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
            channel: ptr::null_mut(),
            cq: ptr::null_mut(),
            qp_created: false,
            region: None,
            fd: None,
            unacked_events: 0,
        }
    }

    /// Creates the queue's resources on the device the connect request came in on.
    pub fn setup(
        &mut self,
        sizes: impl FnOnce(&DeviceLimits) -> QpSizes,
    ) -> io::Result<(QpSizes, DeviceLimits)> {
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
        qp.pd = sys::ibv_alloc_pd(verbs);
        if qp.pd.is_null() {
            return Err(os_err("ibv_alloc_pd"));
        }
        qp.channel = sys::ibv_create_comp_channel(verbs);
        if qp.channel.is_null() {
            return Err(os_err("ibv_create_comp_channel"));
        }
        let fd = (*qp.channel).fd;
        set_nonblocking(fd)?;
        // SAFETY: the channel's fd stays open until Drop, which deregisters it first.
        qp.fd = Some(AsyncFd::register(Fd(fd))?);
        let cqe = (sizes.recv_slots + sizes.send_wr).min(limits.max_cqe) as i32;
        qp.cq = sys::ibv_create_cq(verbs, cqe, ptr::null_mut(), qp.channel, 0);
        if qp.cq.is_null() {
            return Err(os_err("ibv_create_cq"));
        }
        let mut init: sys::ibv_qp_init_attr = std::mem::zeroed();
        init.send_cq = qp.cq;
        init.recv_cq = qp.cq;
        init.qp_type = sys::ibv_qp_type::IBV_QPT_RC;
        init.cap.max_send_wr = sizes.send_wr;
        init.cap.max_recv_wr = sizes.recv_slots;
        init.cap.max_send_sge = sizes.send_sge;
        init.cap.max_recv_sge = 1;
        check(
            sys::rdma_create_qp(id.0, qp.pd, &mut init),
            "rdma_create_qp",
        )?;
        qp.qp_created = true;
        let len = sizes.recv_slots as usize * sizes.recv_size
            + sizes.recv_slots as usize * 16
            + sizes.pool_bytes;
        let layout = std::alloc::Layout::from_size_align(len, 4096)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let ptr = std::alloc::alloc_zeroed(layout);
        if ptr.is_null() {
            return Err(io::Error::new(io::ErrorKind::OutOfMemory, "queue buffers"));
        }
        let mut access = sys::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE;
        if sizes.remote_access {
            access = access
                | sys::ibv_access_flags::IBV_ACCESS_REMOTE_READ
                | sys::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE;
        }
        let access = access.0 as i32;
        let mr = sys::ibv_reg_mr(qp.pd, ptr.cast(), len, access);
        if mr.is_null() {
            let e = os_err("ibv_reg_mr (is the locked-memory limit high enough?)");
            std::alloc::dealloc(ptr, layout);
            return Err(e);
        }
        qp.region = Some(Region { ptr, len, mr });
        check(sys::ibv_req_notify_cq(qp.cq, 0), "ibv_req_notify_cq")?;
        Ok((sizes, limits))
    }

    pub fn id(&self) -> Raw<sys::rdma_cm_id> {
        self.id
    }

    /// Accepts the connection, with our private data and RDMA READ depths.
    pub fn accept(
        &self,
        private: &[u8],
        responder_resources: u8,
        initiator_depth: u8,
    ) -> io::Result<()> {
        // SAFETY: all-zero is a valid rdma_conn_param.
        let mut param: sys::rdma_conn_param = unsafe { std::mem::zeroed() };
        param.private_data = private.as_ptr().cast();
        param.private_data_len = private.len() as u8;
        param.responder_resources = responder_resources;
        param.initiator_depth = initiator_depth;
        param.flow_control = 1;
        param.rnr_retry_count = 7;
        // SAFETY: valid id with a QP; param and its private data live across the call.
        check(
            unsafe { sys::rdma_accept(self.id.0, &mut param) },
            "rdma_accept",
        )
    }

    /// Resolves `dst` to a local device and a route to it (the active side, before `setup`).
    pub async fn resolve(
        &self,
        channel: &EventChannel,
        dst: SocketAddr,
        timeout_ms: i32,
    ) -> io::Result<()> {
        let (mut storage, _len) = sockaddr_from(dst);
        // SAFETY: valid id; the sockaddr is valid for the call.
        check(
            unsafe {
                sys::rdma_resolve_addr(
                    self.id.0,
                    ptr::null_mut(),
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
        // SAFETY: all-zero is a valid rdma_conn_param.
        let mut param: sys::rdma_conn_param = unsafe { std::mem::zeroed() };
        param.private_data = private.as_ptr().cast();
        param.private_data_len = private.len() as u8;
        param.responder_resources = responder_resources;
        param.initiator_depth = initiator_depth;
        param.flow_control = 1;
        param.retry_count = 7;
        param.rnr_retry_count = 7;
        // SAFETY: valid id with a QP; param and its private data live across the call.
        check(
            unsafe { sys::rdma_connect(self.id.0, &mut param) },
            "rdma_connect",
        )?;
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

    /// Posts a chain of send-queue work requests.
    pub fn post_send(&self, wrs: &[SendWr]) -> io::Result<()> {
        let region = self.region.as_ref().expect("region");
        let lkey = region.lkey();
        let mut sges: Vec<Vec<sys::ibv_sge>> = wrs
            .iter()
            .map(|w| {
                w.local
                    .iter()
                    .map(|&(off, len)| sys::ibv_sge {
                        addr: region.addr(off),
                        length: len,
                        lkey,
                    })
                    .collect()
            })
            .collect();
        // SAFETY: all-zero is a valid (empty) work request.
        let mut raw: Vec<sys::ibv_send_wr> =
            wrs.iter().map(|_| unsafe { std::mem::zeroed() }).collect();
        let n = raw.len();
        let base = raw.as_mut_ptr();
        for (i, (w, r)) in wrs.iter().zip(raw.iter_mut()).enumerate() {
            r.wr_id = w.wr_id;
            r.sg_list = sges[i].as_mut_ptr();
            r.num_sge = sges[i].len() as i32;
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
            if i + 1 < n {
                // SAFETY: i + 1 is within the vector.
                r.next = unsafe { base.add(i + 1) };
            }
        }
        let mut bad = ptr::null_mut();
        // SAFETY: valid QP; the chain, its SGEs and the registered buffers live across the call.
        check(
            unsafe { sys::ibv_post_send((*self.id.0).qp, base, &mut bad) },
            "ibv_post_send",
        )
    }

    /// Takes up to `wcs.len()` completions.
    pub fn poll(&self, wcs: &mut [Completion]) -> io::Result<usize> {
        // SAFETY: all-zero is a valid ibv_wc.
        let mut raw: [sys::ibv_wc; 32] = unsafe { std::mem::zeroed() };
        let want = wcs.len().min(raw.len()) as i32;
        // SAFETY: valid CQ; raw holds `want` entries.
        let n = unsafe { sys::ibv_poll_cq(self.cq, want, raw.as_mut_ptr()) };
        if n < 0 {
            return Err(io::Error::other("ibv_poll_cq failed"));
        }
        for (w, r) in wcs.iter_mut().zip(&raw[..n as usize]) {
            *w = Completion {
                wr_id: r.wr_id,
                ok: r.status == sys::ibv_wc_status::IBV_WC_SUCCESS,
                status: r.status,
                byte_len: r.byte_len,
            };
        }
        Ok(n as usize)
    }

    /// Re-arms completion notification (then poll once more: completions may have arrived
    /// before the arming).
    pub fn arm(&self) -> io::Result<()> {
        // SAFETY: valid CQ.
        check(
            unsafe { sys::ibv_req_notify_cq(self.cq, 0) },
            "ibv_req_notify_cq",
        )
    }

    /// Waits for the completion channel to signal and consumes the event.
    pub async fn wait(&mut self) -> io::Result<()> {
        let fd = self.fd.as_ref().expect("completion channel");
        loop {
            let mut guard = fd.readable().await?;
            let mut cq = ptr::null_mut();
            let mut ctx = ptr::null_mut();
            // SAFETY: valid channel with a non-blocking fd; out pointers to locals.
            let ret = unsafe { sys::ibv_get_cq_event(self.channel, &mut cq, &mut ctx) };
            if ret != 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::WouldBlock {
                    guard.clear_ready();
                    continue;
                }
                return Err(e);
            }
            self.unacked_events += 1;
            if self.unacked_events >= 64 {
                // SAFETY: the events came from this CQ.
                unsafe { sys::ibv_ack_cq_events(self.cq, self.unacked_events) };
                self.unacked_events = 0;
            }
            return Ok(());
        }
    }
}

/// # Safety
/// `verbs` is a valid device context.
unsafe fn query_limits(verbs: *mut sys::ibv_context) -> io::Result<DeviceLimits> {
    if verbs.is_null() {
        return Err(io::Error::other("the cm_id has no device yet"));
    }
    let mut attr: sys::ibv_device_attr = std::mem::zeroed();
    check(sys::ibv_query_device(verbs, &mut attr), "ibv_query_device")?;
    Ok(DeviceLimits {
        max_qp_wr: attr.max_qp_wr.max(1) as u32,
        max_sge: attr.max_sge.max(1) as u32,
        max_cqe: attr.max_cqe.max(1) as u32,
        max_qp_rd_atom: attr.max_qp_rd_atom.clamp(0, 255) as u8,
        max_qp_init_rd_atom: attr.max_qp_init_rd_atom.clamp(0, 255) as u8,
    })
}

fn os_err(what: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{what}: {e}"))
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
            if !self.cq.is_null() {
                if self.unacked_events > 0 {
                    sys::ibv_ack_cq_events(self.cq, self.unacked_events);
                }
                sys::ibv_destroy_cq(self.cq);
            }
            self.fd = None;
            if !self.channel.is_null() {
                sys::ibv_destroy_comp_channel(self.channel);
            }
            if let Some(r) = self.region.take() {
                sys::ibv_dereg_mr(r.mr);
                std::alloc::dealloc(
                    r.ptr,
                    std::alloc::Layout::from_size_align(r.len, 4096).expect("layout used at alloc"),
                );
            }
            if !self.pd.is_null() {
                sys::ibv_dealloc_pd(self.pd);
            }
            sys::rdma_destroy_id(self.id.0);
        }
    }
}

/// A completion, reduced to what the queue needs.
#[derive(Clone, Copy, Debug, Default)]
pub struct Completion {
    pub wr_id: u64,
    pub ok: bool,
    pub status: u32,
    pub byte_len: u32,
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
    pub local: Vec<(usize, u32)>,
    pub signaled: bool,
}
