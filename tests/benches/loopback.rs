//! Loopback benchmark: fabrikd (RAM backend) and the userspace host on one machine, next to the
//! raw loopback TCP figures measured in the same run, which are the physical limit here.
//! Target and host each get their own single-threaded runtime (one core each on a 2-core box).
//!
//! Run: `cargo bench -p fabrik-tests --bench loopback` (add `-- --secs N` for longer runs).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use fabrik_initiator::{ConnectOptions, Controller};
use fabrik_target::backend::BackendKind;
use fabrik_target::config::Config;
use fabrik_target::Target;

const BLOCK: u32 = 4096;
const DRIVE_BLOCKS: u64 = (1 << 30) / BLOCK as u64;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

/// Raw TCP: one direction bulk throughput in bytes/s, with plain blocking sockets on two
/// threads (no runtime in the way): the kernel's loopback limit on this machine.
fn raw_throughput(secs: f64) -> f64 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let sink = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = vec![0u8; 1 << 20];
        let mut total = 0u64;
        loop {
            let n = std::io::Read::read(&mut s, &mut buf).unwrap();
            if n == 0 {
                return total;
            }
            total += n as u64;
        }
    });
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    let chunk = vec![0x5au8; 1 << 20];
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < secs {
        std::io::Write::write_all(&mut s, &chunk).unwrap();
    }
    drop(s);
    let total = sink.join().unwrap();
    total as f64 / start.elapsed().as_secs_f64()
}

/// Raw TCP round trip shaped like a 4 KiB read (a 72-byte capsule out, 4 KiB and headers back),
/// blocking sockets on two threads.
fn raw_round_trip(secs: f64) -> Duration {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_nodelay(true).unwrap();
        let mut req = [0u8; 72];
        let resp = vec![0u8; 4096 + 48];
        while s.read_exact(&mut req).is_ok() {
            if s.write_all(&resp).is_err() {
                break;
            }
        }
    });
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    let mut resp = vec![0u8; 4096 + 48];
    let mut n = 0u32;
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < secs {
        s.write_all(&[1u8; 72]).unwrap();
        s.read_exact(&mut resp).unwrap();
        n += 1;
    }
    start.elapsed() / n
}

/// `depth` concurrent readers of `nlb` blocks at random offsets on one I/O queue for `secs`.
/// Returns (IOPS, bytes/s, mean latency).
async fn read_load(
    ctrl: Arc<Controller>,
    nlb: u32,
    depth: usize,
    secs: f64,
) -> (f64, f64, Duration) {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..depth {
        let ctrl = ctrl.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = Lcg(t as u64 + 1);
            let (mut ios, mut lat) = (0u64, Duration::ZERO);
            let mut buf = bytes::BytesMut::new();
            while start.elapsed().as_secs_f64() < secs {
                let slba = rng.next() % (DRIVE_BLOCKS - nlb as u64);
                let t0 = Instant::now();
                buf = ctrl.read_into(1, slba, nlb, buf).await.expect("read");
                lat += t0.elapsed();
                assert_eq!(buf.len(), (nlb * BLOCK) as usize);
                ios += 1;
            }
            (ios, lat)
        }));
    }
    let (mut ios, mut lat) = (0u64, Duration::ZERO);
    for t in tasks {
        let (i, l) = t.await.unwrap();
        ios += i;
        lat += l;
    }
    let el = start.elapsed().as_secs_f64();
    let iops = ios as f64 / el;
    (iops, iops * (nlb * BLOCK) as f64, lat / ios.max(1) as u32)
}

async fn write_load(ctrl: Arc<Controller>, nlb: u32, depth: usize, secs: f64) -> f64 {
    let start = Instant::now();
    let data = Bytes::from(vec![0xa5u8; (nlb * BLOCK) as usize]);
    let mut tasks = Vec::new();
    for t in 0..depth {
        let (ctrl, data) = (ctrl.clone(), data.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = Lcg(t as u64 + 7);
            let mut ios = 0u64;
            while start.elapsed().as_secs_f64() < secs {
                let slba = rng.next() % (DRIVE_BLOCKS - nlb as u64);
                ctrl.write(1, slba, data.clone(), false)
                    .await
                    .expect("write");
                ios += 1;
            }
            ios
        }));
    }
    let mut ios = 0;
    for t in tasks {
        ios += t.await.unwrap();
    }
    ios as f64 * (nlb * BLOCK) as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let secs: f64 = args
        .iter()
        .position(|a| a == "--secs")
        .and_then(|i| args.get(i + 1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);

    let target_rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = Config::default_jbof(dir.path().to_path_buf());
    cfg.listen = vec!["127.0.0.1:0".parse().unwrap()];
    cfg.drives = 1;
    cfg.drive_size = DRIVE_BLOCKS * BLOCK as u64;
    cfg.backend = BackendKind::Ram;
    let target = target_rt.block_on(Target::start(cfg)).expect("target");
    let addr: SocketAddr = target.listen_addrs()[0];
    let nqn = target.subsystem_nqns()[0].clone();

    let host_rt = runtime();
    host_rt.block_on(async {
        let raw_bw = raw_throughput(secs);
        let raw_rtt = raw_round_trip(secs);
        let mut opts = ConnectOptions::new(addr, nqn);
        opts.io_queues = 1;
        let ctrl = Arc::new(Controller::connect(opts).await.expect("connect"));
        // Fill the drive's first part so reads touch allocated memory as well as holes.
        write_load(ctrl.clone(), 32, 8, secs / 3.0).await;
        let (qd1_iops, _, qd1_lat) = read_load(ctrl.clone(), 1, 1, secs).await;
        let (qd32_iops, _, _) = read_load(ctrl.clone(), 1, 32, secs).await;
        let (_, read_bw, _) = read_load(ctrl.clone(), 32, 8, secs).await;
        let write_bw = write_load(ctrl.clone(), 32, 8, secs).await;

        let gb = |b: f64| b / 1e9;
        println!("fabrik loopback benchmark (ram backend, 1 I/O queue, {secs} s per figure)");
        println!(
            "{:<40} {:>14}",
            "raw TCP loopback throughput",
            format!("{:.2} GB/s", gb(raw_bw))
        );
        println!(
            "{:<40} {:>14}",
            "raw TCP round trip (72 B / 4 KiB)",
            format!("{:.1} us", raw_rtt.as_secs_f64() * 1e6)
        );
        println!(
            "{:<40} {:>14}",
            "4 KiB random read QD1",
            format!("{:.0} IOPS", qd1_iops)
        );
        println!(
            "{:<40} {:>14}",
            "4 KiB random read QD1 latency",
            format!("{:.1} us", qd1_lat.as_secs_f64() * 1e6)
        );
        println!(
            "{:<40} {:>14}",
            "  over the raw round trip",
            format!(
                "+{:.1} us",
                (qd1_lat.as_secs_f64() - raw_rtt.as_secs_f64()) * 1e6
            )
        );
        println!(
            "{:<40} {:>14}",
            "4 KiB random read QD32",
            format!("{:.0} IOPS", qd32_iops)
        );
        println!(
            "{:<40} {:>14}",
            "128 KiB read QD8",
            format!("{:.2} GB/s", gb(read_bw))
        );
        println!(
            "{:<40} {:>14}",
            "  ratio to raw TCP",
            format!("{:.0} %", read_bw / raw_bw * 100.0)
        );
        println!(
            "{:<40} {:>14}",
            "128 KiB write QD8",
            format!("{:.2} GB/s", gb(write_bw))
        );
        println!(
            "{:<40} {:>14}",
            "  ratio to raw TCP",
            format!("{:.0} %", write_bw / raw_bw * 100.0)
        );
        Arc::try_unwrap(ctrl)
            .ok()
            .expect("no other users")
            .shutdown()
            .await
            .expect("shutdown");
    });
    target_rt.block_on(target.shutdown());
}
