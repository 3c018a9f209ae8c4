//! Small helpers shared by the wrappers: library check, errno mapping, fds, raw pointers.

use std::io;
use std::os::fd::{AsRawFd, RawFd};

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

/// This machine has an RDMA device (an RDMA NIC, or Soft-RoCE over an Ethernet one): without
/// one, rdma_cm fails with a bare ENODEV.
pub fn check_devices() -> Result<(), String> {
    let class = std::path::Path::new("/sys/class/infiniband");
    let any = std::fs::read_dir(class).is_ok_and(|mut d| d.next().is_some());
    if any {
        return Ok(());
    }
    Err(
        "no RDMA device on this machine (/sys/class/infiniband is empty): NVMe/RDMA needs an \
         RDMA NIC, or Soft-RoCE (rdma link add rxe0 type rxe netdev IFACE)"
            .into(),
    )
}

/// Runs `call` (a non-blocking verbs or rdma_cm call that takes the next event from a channel:
/// 0, else -1 with errno) until it succeeds, waiting for `fd` to be readable whenever it finds
/// nothing (EAGAIN); any other failure is returned.
pub(crate) async fn when_readable(
    fd: &AsyncFd<Fd>,
    mut call: impl FnMut() -> i32,
) -> io::Result<()> {
    loop {
        let mut guard = fd.readable().await?;
        if call() == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::WouldBlock {
            return Err(e);
        }
        guard.clear_ready();
    }
}

pub(crate) fn set_nonblocking(fd: RawFd) -> io::Result<()> {
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
pub(crate) fn check(ret: i32, what: &str) -> io::Result<()> {
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

pub(crate) struct Fd(pub(crate) RawFd);
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
impl<T> Raw<T> {
    /// The pointer, through the whole value: a closure that calls this captures the `Raw`
    /// (Send), where one that reads the field would capture the bare pointer (not Send).
    pub(crate) fn get(self) -> *mut T {
        self.0
    }

    /// Where a call that returns the pointer through an out parameter writes it.
    pub(crate) fn out(&mut self) -> *mut *mut T {
        &mut self.0
    }
}
// SAFETY: see the type's comment.
unsafe impl<T> Send for Raw<T> {}
// SAFETY: see the type's comment.
unsafe impl<T> Sync for Raw<T> {}

pub(crate) fn os_err(what: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{what}: {e}"))
}
