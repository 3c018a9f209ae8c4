//! Raw TCP over loopback, measured in the same run as a benchmark: bulk throughput and the round
//! trip of a 4 KiB read's shape. Plain blocking sockets on two threads, no runtime in the way:
//! the kernel's limit on this machine, which NVMe/TCP figures are put next to.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Instant;

use hdrhistogram::Histogram;

use super::report::{new_histogram, Reference};

/// Measures both figures for `secs` each.
pub fn measure(secs: f64) -> std::io::Result<Reference> {
    let bw = throughput(secs)?;
    let rtt = round_trip(secs)?;
    Ok(Reference {
        tcp_bytes_per_sec: bw,
        tcp_rtt_us: rtt.mean() / 1000.0,
        tcp_rtt_p50_us: rtt.value_at_quantile(0.5) as f64 / 1000.0,
    })
}

/// One-direction bulk throughput in bytes/s, 1 MiB writes.
pub fn throughput(secs: f64) -> std::io::Result<f64> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let sink = std::thread::spawn(move || -> std::io::Result<u64> {
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
pub fn round_trip(secs: f64) -> std::io::Result<Histogram<u64>> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let server = std::thread::spawn(move || -> std::io::Result<()> {
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
