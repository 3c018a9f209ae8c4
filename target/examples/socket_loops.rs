//! The reactors' event loop, measured: a tokio current-thread loop (epoll, then a recv and a
//! writev per connection, as fabrikd's NVMe/TCP queues do) against a raw io_uring loop (every
//! connection's recv and sendmsg queued and submitted with one system call per turn), serving
//! NVMe/TCP-shaped traffic on loopback: 72-byte requests (a command capsule) answered by 24 bytes
//! of header and 4 KiB of data (a 4K read's C2HData), several connections, a fixed queue depth
//! each. The server runs on one core, the client on another; what counts is the server's CPU
//! time (user and system) per answered request, over the same seconds.
//!
//!     cargo run --release --example socket_loops -- epoll|uring|uring-tuned|uring-zc \
//!         [CONNS [QD [SECS [SERVER_CORE [CLIENT_CORE [DATA_BYTES]]]]]]
//!
//! Prints one line: loop, requests per second, server µs of CPU per request (user + system).
//! `tests/benches/socket-loops.sh` alternates the two and prints medians.

use std::io::{IoSlice, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

const REQUEST: usize = 72;
const HEADER: usize = 24;
/// The largest response's data: a 128K read.
const MAX_DATA: usize = 128 * 1024;
/// Responses gathered into one send at most (two iovecs each, IOV_MAX is 1024).
const MAX_BATCH: usize = 256;

static ZEROS: [u8; MAX_DATA] = [0; MAX_DATA];
static HEADER_BYTES: [u8; HEADER] = [7; HEADER];

/// 0 warming up, 1 measuring, 2 done: the server takes its CPU time and count at each change.
static PHASE: AtomicU8 = AtomicU8::new(0);

struct Usage {
    user: Duration,
    system: Duration,
    answered: u64,
}

fn thread_usage(answered: u64) -> Usage {
    // SAFETY: rusage is plain data; all-zero is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes one rusage into memory we own.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    Usage {
        user: tv(ru.ru_utime),
        system: tv(ru.ru_stime),
        answered,
    }
}

/// Takes the usage at the start and the end of the measured phase; true once it ended.
struct Meter {
    seen: u8,
    start: Option<Usage>,
    result: Option<(Usage, Usage)>,
}

impl Meter {
    fn new() -> Meter {
        Meter {
            seen: 0,
            start: None,
            result: None,
        }
    }

    fn tick(&mut self, answered: u64) -> bool {
        let phase = PHASE.load(Ordering::Relaxed);
        if phase != self.seen {
            self.seen = phase;
            match phase {
                1 => self.start = Some(thread_usage(answered)),
                _ => {
                    let start = self.start.take().expect("measuring began");
                    self.result = Some((start, thread_usage(answered)));
                }
            }
        }
        self.result.is_some()
    }
}

fn pin(core: usize) {
    // SAFETY: cpu_set_t is plain data; CPU_SET stays within it for any core under 1024.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
    }
}

/// The epoll loop: one task per connection, reading whatever arrived and answering every whole
/// request in it with one writev.
fn serve_epoll(conns: Vec<TcpStream>, data: usize) -> (Usage, Usage) {
    // Requests answered by all connections: they share one thread.
    let answered = std::rc::Rc::new(std::cell::Cell::new(0u64));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let local = tokio::task::LocalSet::new();
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
        for conn in conns {
            conn.set_nonblocking(true).expect("nonblocking");
            let mut stream = tokio::net::TcpStream::from_std(conn).expect("register");
            let answered = answered.clone();
            let done_tx = done_tx.clone();
            local.spawn_local(async move {
                let mut rbuf = bytes::BytesMut::with_capacity(64 * 1024);
                let mut meter = Meter::new();
                loop {
                    rbuf.reserve(64 * 1024);
                    if stream.read_buf(&mut rbuf).await.unwrap_or(0) == 0 {
                        return;
                    }
                    let whole = rbuf.len() / REQUEST;
                    let _ = rbuf.split_to(whole * REQUEST);
                    let mut left = whole;
                    while left > 0 {
                        let n = left.min(MAX_BATCH);
                        let mut slices: Vec<IoSlice<'_>> = (0..n)
                            .flat_map(|_| {
                                [IoSlice::new(&HEADER_BYTES), IoSlice::new(&ZEROS[..data])]
                            })
                            .collect();
                        let mut slices = &mut slices[..];
                        while !slices.is_empty() {
                            let sent = stream.write_vectored(slices).await.expect("send");
                            IoSlice::advance_slices(&mut slices, sent);
                        }
                        left -= n;
                    }
                    answered.set(answered.get() + whole as u64);
                    if meter.tick(answered.get()) {
                        let _ = done_tx.send(meter.result.take().expect("ended"));
                        return;
                    }
                }
            });
        }
        drop(done_tx);
        local
            .run_until(async move { done_rx.recv().await.expect("a connection measured") })
            .await
    })
}

/// The io_uring loop: per turn, every connection's recv (re-armed as it completes) and one
/// sendmsg per connection with answers owed, all in one submission.
/// `zero_copy`: sends with IORING_OP_SENDMSG_ZC (the kernel's MSG_ZEROCOPY: the pages are
/// pinned instead of copied, and a second completion says when they are free again).
fn serve_uring(conns: Vec<TcpStream>, tuned: bool, zero_copy: bool, data: usize) -> (Usage, Usage) {
    use io_uring::{opcode, types, IoUring};
    struct Conn {
        stream: TcpStream,
        rbuf: Vec<u8>,
        partial: usize,
        owed: usize,
        iov: Vec<IoSlice<'static>>,
        /// Where the in-flight send has got to in `iov`.
        iov_at: usize,
        msg: libc::msghdr,
        sending: bool,
    }
    // Tuned: completions run only when this thread asks for them (no interrupting task work),
    // one submitter, and the sockets registered (no file lookup per operation).
    let mut ring = if tuned {
        IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_coop_taskrun()
            .build(1024)
            .expect("io_uring with DEFER_TASKRUN (Linux 6.1)")
    } else {
        IoUring::new(1024).expect("io_uring")
    };
    let mut conns: Vec<Box<Conn>> = conns
        .into_iter()
        .map(|stream| {
            Box::new(Conn {
                stream,
                rbuf: vec![0; 64 * 1024],
                partial: 0,
                owed: 0,
                iov: Vec::with_capacity(2 * MAX_BATCH),
                iov_at: 0,
                // SAFETY: msghdr is plain data; all-zero is an empty message.
                msg: unsafe { std::mem::zeroed() },
                sending: false,
            })
        })
        .collect();
    if tuned {
        let fds: Vec<i32> = conns.iter().map(|c| c.stream.as_raw_fd()).collect();
        ring.submitter()
            .register_files(&fds)
            .expect("register files");
    }
    const RECV: u64 = 0;
    const SEND: u64 = 1;
    let recv_sqe = |i: usize, c: &mut Conn| {
        let (buf, len) = (
            c.rbuf[c.partial..].as_mut_ptr(),
            (c.rbuf.len() - c.partial) as u32,
        );
        let sqe = if tuned {
            opcode::Recv::new(types::Fixed(i as u32), buf, len).build()
        } else {
            opcode::Recv::new(types::Fd(c.stream.as_raw_fd()), buf, len).build()
        };
        sqe.user_data((i as u64) << 1 | RECV)
    };
    let send_sqe = |i: usize, c: &mut Conn| {
        let iov = &mut c.iov[c.iov_at..];
        // IoSlice is an iovec on Unix (std documents the two as ABI compatible).
        c.msg.msg_iov = iov.as_mut_ptr().cast::<libc::iovec>();
        c.msg.msg_iovlen = iov.len();
        let sqe = if zero_copy {
            opcode::SendMsgZc::new(types::Fixed(i as u32), &c.msg).build()
        } else if tuned {
            opcode::SendMsg::new(types::Fixed(i as u32), &c.msg).build()
        } else {
            opcode::SendMsg::new(types::Fd(c.stream.as_raw_fd()), &c.msg).build()
        };
        sqe.user_data((i as u64) << 1 | SEND)
    };
    for (i, c) in conns.iter_mut().enumerate() {
        let sqe = recv_sqe(i, c);
        // SAFETY: the buffer lives in the boxed Conn until the process exits.
        unsafe { ring.submission().push(&sqe).expect("room") };
    }
    let mut meter = Meter::new();
    let mut answered = 0u64;
    loop {
        ring.submit_and_wait(1).expect("submit");
        // A zero-copy send's notification (its pages are free again) needs nothing here: they
        // are static.
        let done: Vec<(u64, i32)> = ring
            .completion()
            .filter(|c| !io_uring::cqueue::notif(c.flags()))
            .map(|c| (c.user_data(), c.result()))
            .collect();
        for (data, res) in done {
            let i = (data >> 1) as usize;
            let c = &mut conns[i];
            if data & 1 == RECV {
                assert!(res > 0, "recv: {res}");
                let have = c.partial + res as usize;
                let whole = have / REQUEST;
                c.partial = have % REQUEST;
                c.rbuf.copy_within(whole * REQUEST..have, 0);
                c.owed += whole;
                answered += whole as u64;
                let sqe = recv_sqe(i, c);
                // SAFETY: as above.
                unsafe { ring.submission().push(&sqe).expect("room") };
            } else {
                assert!(res > 0, "send: {res}");
                // Advance over what was sent; whatever is left goes again.
                let mut rest = &mut c.iov[c.iov_at..];
                IoSlice::advance_slices(&mut rest, res as usize);
                let left = rest.len();
                c.iov_at = c.iov.len() - left;
                if c.iov_at < c.iov.len() {
                    let sqe = send_sqe(i, c);
                    // SAFETY: the iovecs and msghdr live in the boxed Conn, untouched until
                    // this send completes; they point at statics.
                    unsafe { ring.submission().push(&sqe).expect("room") };
                } else {
                    c.sending = false;
                }
            }
        }
        for (i, c) in conns.iter_mut().enumerate() {
            if c.sending || c.owed == 0 {
                continue;
            }
            let n = c.owed.min(MAX_BATCH);
            c.owed -= n;
            c.iov.clear();
            c.iov_at = 0;
            for _ in 0..n {
                c.iov.push(IoSlice::new(&HEADER_BYTES));
                c.iov.push(IoSlice::new(&ZEROS[..data]));
            }
            c.sending = true;
            let sqe = send_sqe(i, c);
            // SAFETY: as above.
            unsafe { ring.submission().push(&sqe).expect("room") };
        }
        if meter.tick(answered) {
            // Receives are still in flight into the connections' buffers: they, and the
            // ring, stay until the process exits (dropped, a late receive wrote into freed
            // memory: "free(): corrupted unsorted chunks" on the H200 machine).
            std::mem::forget(conns);
            std::mem::forget(ring);
            return meter.result.take().expect("ended");
        }
    }
}

/// The client: each connection keeps `qd` requests outstanding, sending one for every whole
/// response that came back.
fn client(
    addr: std::net::SocketAddr,
    conns: usize,
    qd: usize,
    core: usize,
    response: usize,
) -> Vec<TcpStream> {
    let streams: Vec<TcpStream> = (0..conns)
        .map(|_| {
            let s = TcpStream::connect(addr).expect("connect");
            s.set_nodelay(true).expect("nodelay");
            s
        })
        .collect();
    let mine: Vec<TcpStream> = streams
        .iter()
        .map(|s| s.try_clone().expect("clone"))
        .collect();
    std::thread::spawn(move || {
        pin(core);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .expect("runtime");
        let _in_runtime = rt.enter();
        let local = tokio::task::LocalSet::new();
        for s in mine {
            s.set_nonblocking(true).expect("nonblocking");
            let mut s = tokio::net::TcpStream::from_std(s).expect("register");
            local.spawn_local(async move {
                let requests = vec![0u8; REQUEST * qd];
                s.write_all(&requests).await.expect("send");
                let mut buf = vec![0u8; 256 * 1024];
                let mut partial = 0usize;
                loop {
                    let n = match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    partial += n;
                    let whole = partial / response;
                    partial %= response;
                    if whole > 0 && s.write_all(&requests[..whole * REQUEST]).await.is_err() {
                        return;
                    }
                }
            });
        }
        rt.block_on(local);
    });
    streams
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: usize| {
        args.get(i)
            .map_or(default, |a| a.parse().expect("a number"))
    };
    let mode = args
        .first()
        .map(String::as_str)
        .unwrap_or("epoll")
        .to_string();
    let (conns, qd, secs) = (arg(1, 8), arg(2, 32), arg(3, 3));
    let (server_core, client_core) = (arg(4, 0), arg(5, 1));
    let data = arg(6, 4096);
    if data == 0 || data > MAX_DATA {
        eprintln!("socket_loops: a response carries 1 to {MAX_DATA} bytes of data");
        std::process::exit(2);
    }
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("address");
    let _client_side = client(addr, conns, qd, client_core, HEADER + data);
    let accepted: Vec<TcpStream> = (0..conns)
        .map(|_| {
            let (s, _) = listener.accept().expect("accept");
            s.set_nodelay(true).expect("nodelay");
            s
        })
        .collect();
    let server = std::thread::spawn(move || {
        pin(server_core);
        match mode.as_str() {
            "epoll" => serve_epoll(accepted, data),
            "uring" => serve_uring(accepted, false, false, data),
            "uring-tuned" => serve_uring(accepted, true, false, data),
            "uring-zc" => serve_uring(accepted, true, true, data),
            other => {
                eprintln!(
                    "socket_loops: unknown loop {other:?} (epoll, uring, uring-tuned, uring-zc)"
                );
                std::process::exit(2);
            }
        }
    });
    std::thread::sleep(Duration::from_millis(500));
    PHASE.store(1, Ordering::Relaxed);
    std::thread::sleep(Duration::from_secs(secs as u64));
    PHASE.store(2, Ordering::Relaxed);
    let (start, end) = server.join().expect("server");
    let n = (end.answered - start.answered).max(1) as f64;
    let us = |d: Duration| d.as_secs_f64() * 1e6 / n;
    let (user, system) = (us(end.user - start.user), us(end.system - start.system));
    println!(
        "{} {:.0} req/s, server {:.3} us/req (user {:.3}, system {:.3})",
        args.first().map(String::as_str).unwrap_or("epoll"),
        n / secs as f64,
        user + system,
        user,
        system
    );
    let _ = std::io::stdout().flush();
    // The client's thread and the connections end with the process.
    std::process::exit(0);
}
