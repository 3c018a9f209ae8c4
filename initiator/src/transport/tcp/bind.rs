//! Where a queue's connection leaves from: nvme-cli's `--host-traddr` (the local address) and
//! `--host-iface` (the interface, SO_BINDTODEVICE), applied to the socket before it connects.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::net::{TcpSocket, TcpStream};

use crate::error::HostError;

/// Opens a TCP connection to `addr`, from `host_traddr` and through `host_iface` if given.
pub(super) async fn connect(
    qid: u16,
    addr: SocketAddr,
    host_traddr: Option<IpAddr>,
    host_iface: Option<&str>,
    timeout: Duration,
) -> Result<TcpStream, HostError> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(|e| HostError::io(format!("queue {qid}: socket for {addr}"), e))?;
    if let Some(iface) = host_iface {
        bind_device(qid, &socket, iface)?;
    }
    if let Some(ip) = host_traddr {
        if ip.is_ipv4() != addr.is_ipv4() {
            return Err(HostError::Invalid(format!(
                "host address {ip} and target address {addr} are of different IP families"
            )));
        }
        socket.bind(SocketAddr::new(ip, 0)).map_err(|e| {
            let why = if e.kind() == io::ErrorKind::AddrNotAvailable {
                " (not an address of this host)"
            } else {
                ""
            };
            HostError::io(format!("queue {qid}: binding to host address {ip}{why}"), e)
        })?;
    }
    tokio::time::timeout(timeout, socket.connect(addr))
        .await
        .map_err(|_| HostError::Timeout {
            qid,
            command: format!("TCP connect to {addr}"),
            after: timeout,
        })?
        .map_err(|e| HostError::io(format!("queue {qid}: connect to {addr}"), e))
}

/// SO_BINDTODEVICE, with the usual refusals said in words.
fn bind_device(qid: u16, socket: &TcpSocket, iface: &str) -> Result<(), HostError> {
    socket.bind_device(Some(iface.as_bytes())).map_err(|e| {
        let why = match e.raw_os_error() {
            Some(libc::EPERM) => " (not permitted: needs CAP_NET_RAW here, e.g. as root)",
            Some(libc::ENODEV) => " (no such interface)",
            _ => "",
        };
        HostError::io(
            format!("queue {qid}: binding to interface {iface:?}{why}"),
            e,
        )
    })
}
