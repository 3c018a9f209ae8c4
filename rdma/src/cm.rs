//! rdma_cm: the event channel (driven by tokio), listening, connection events, addresses.

use std::io;
use std::net::SocketAddr;
use std::ptr;

use rdma_mummy_sys as sys;
use tokio::io::unix::AsyncFd;

use crate::util::{check, set_nonblocking, when_readable, Fd, Raw};

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
pub const EV_DEVICE_REMOVAL: u32 = sys::rdma_cm_event_type::RDMA_CM_EVENT_DEVICE_REMOVAL;

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
        chan.bind_listen(addr, backlog)?;
        Ok(chan)
    }

    /// Creates this channel's listening id, bound to `addr`. ENODEV / EADDRNOTAVAIL: no RDMA
    /// device serves that address.
    pub fn bind_listen(&mut self, addr: SocketAddr, backlog: i32) -> io::Result<()> {
        let id = self.create_id()?;
        self.listen_id = id;
        let (mut storage, _len) = sockaddr_from(addr);
        // SAFETY: valid id; the sockaddr is valid for the call.
        check(
            unsafe {
                sys::rdma_bind_addr(id.0, (&mut storage as *mut libc::sockaddr_storage).cast())
            },
            &format!("rdma_bind_addr {addr}"),
        )?;
        // SAFETY: valid bound id.
        check(unsafe { sys::rdma_listen(id.0, backlog) }, "rdma_listen")
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
        let fd = self.fd.as_ref().expect("open channel");
        let (channel, mut ev) = (self.raw, Raw(ptr::null_mut()));
        // SAFETY: valid channel (non-blocking fd), out pointer to a local.
        when_readable(fd, || unsafe {
            sys::rdma_get_cm_event(channel.get(), ev.out())
        })
        .await?;
        let ev = ev.0;
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
        Ok(r)
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

pub(crate) fn sockaddr_from(addr: SocketAddr) -> (libc::sockaddr_storage, usize) {
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
