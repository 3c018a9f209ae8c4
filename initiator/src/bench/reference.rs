//! Raw TCP over loopback, measured in the same run as a benchmark: bulk throughput and the round
//! trip of a 4 KiB read's shape. Plain blocking sockets on two threads, no runtime in the way:
//! the kernel's limit on this machine, which NVMe/TCP figures are put next to.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Instant;

use hdrhistogram::Histogram;

use super::report::{new_histogram, Reference};

/// Measures both figures for `secs` each. With `server_cpu`, the serving end (the sink, the
/// responder) runs pinned to that CPU: put it where the target runs, so that the reference
/// crosses cores the way the NVMe/TCP traffic does instead of ping-ponging on one core.
pub fn measure(secs: f64, server_cpu: Option<usize>) -> std::io::Result<Reference> {
    let bw = throughput(secs, server_cpu)?;
    let rtt = round_trip(secs, server_cpu)?;
    Ok(Reference {
        tcp_bytes_per_sec: bw,
        tcp_rtt_us: rtt.mean() / 1000.0,
        tcp_rtt_p50_us: rtt.value_at_quantile(0.5) as f64 / 1000.0,
    })
}

/// One-direction bulk throughput in bytes/s, 1 MiB writes.
pub fn throughput(secs: f64, server_cpu: Option<usize>) -> std::io::Result<f64> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let sink = std::thread::spawn(move || -> std::io::Result<u64> {
        pin_to(server_cpu)?;
        let (mut s, _) = listener.accept()?;
        let mut buf = vec![0u8; 1 << 20];
        let mut total = 0u64;
        loop {
            let n = s.read(&mut buf)?;
            if n == 0 {
                return Ok(total);
            }
            total += n as u64;
        }
    });
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    let chunk = vec![0x5au8; 1 << 20];
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < secs {
        s.write_all(&chunk)?;
    }
    drop(s);
    let total = sink
        .join()
        .map_err(|_| std::io::Error::other("the sink thread panicked"))??;
    Ok(total as f64 / start.elapsed().as_secs_f64())
}

/// Round trips (ns) of a 72-byte request (a command capsule) answered by 4 KiB + 48 bytes (a
/// C2HData PDU and a response capsule).
pub fn round_trip(secs: f64, server_cpu: Option<usize>) -> std::io::Result<Histogram<u64>> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let server = std::thread::spawn(move || -> std::io::Result<()> {
        pin_to(server_cpu)?;
        let (mut s, _) = listener.accept()?;
        s.set_nodelay(true)?;
        let mut req = [0u8; 72];
        let resp = vec![0u8; 4096 + 48];
        while s.read_exact(&mut req).is_ok() {
            s.write_all(&resp)?;
        }
        Ok(())
    });
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    let mut resp = vec![0u8; 4096 + 48];
    let mut histogram = new_histogram();
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < secs {
        let t0 = Instant::now();
        s.write_all(&[1u8; 72])?;
        s.read_exact(&mut resp)?;
        histogram.saturating_record(t0.elapsed().as_nanos().max(1) as u64);
    }
    drop(s);
    let _ = server.join();
    Ok(histogram)
}

/// Pins the calling thread to `cpu` (nothing without one).
pub(crate) fn pin_to(cpu: Option<usize>) -> std::io::Result<()> {
    let Some(cpu) = cpu else { return Ok(()) };
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(std::io::Error::other(format!("CPU {cpu} is out of range")));
    }
    // SAFETY: cpu_set_t is plain data; CPU_SET stays in bounds (checked above); pid 0 is this
    // thread.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        return Err(std::io::Error::new(
            e.kind(),
            format!("pinning to CPU {cpu}: {e}"),
        ));
    }
    Ok(())
}
