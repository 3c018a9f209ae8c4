//! Management reads under load: listing thousands of hosts over and over does not hold up the
//! data path (the listings run off the runtime's workers and cost time linear in their
//! output; before, one `GET /hosts` over 5,000 hosts took 1.6 s on a worker).

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::api::*;
use fabrik_api::models::*;
use fabrik_initiator::HostIdentity;

/// GET `path` with the token: (status, bytes of the answer).
async fn get_len(addr: std::net::SocketAddr, path: &str) -> (u16, usize) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let status = String::from_utf8_lossy(&out[9..12]).parse().unwrap();
    (status, out.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_storm_leaves_io_latency_alone() {
    let dir = tempfile::tempdir().unwrap();
    let api = start(dir.path()).await;
    // 12,000 hosts named by allow lists (six subsystems of 2,000).
    for s in 0..6 {
        let hosts = (0..2000)
            .map(|i| format!("nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-{s:04}-{i:012}"))
            .collect();
        let _: Subsystem = api
            .admin
            .post(
                "/subsystems",
                &SubsystemRequest {
                    nqn: None,
                    name: Some(format!("crowd-{s}")),
                    drives: vec![],
                    hosts,
                    allow_any_host: false,
                    model: None,
                },
            )
            .await
            .unwrap();
    }
    let t = Instant::now();
    let all = api.admin.hosts().await.unwrap();
    assert_eq!(all.len(), 12_000);
    eprintln!("GET /hosts of 12,000 hosts: {:?}", t.elapsed());

    let host = HostIdentity::random();
    let ctrl = connect(api.nvme(), &nqn("00"), &host).await.unwrap();
    ctrl.write(1, 0, common::random_data(4096, 1), false)
        .await
        .unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let listings = Arc::new(AtomicU64::new(0));
    let mut storm = Vec::new();
    for _ in 0..2 {
        let (stop, listings, addr) = (stop.clone(), listings.clone(), api.api);
        // The listing's bytes only: this process serves the I/O too, so it does not parse them.
        storm.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let (status, len) = get_len(addr, "/api/v1/hosts").await;
                assert_eq!(status, 200);
                assert!(len > 1 << 20, "{len} bytes");
                listings.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    // QD1 4 KiB reads for 3 s while the storm goes on.
    let (mut worst, mut reads) = (Duration::ZERO, 0u64);
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        let t = Instant::now();
        ctrl.read(1, 0, 1).await.unwrap();
        worst = worst.max(t.elapsed());
        reads += 1;
    }
    stop.store(true, Ordering::Relaxed);
    for t in storm {
        t.await.unwrap();
    }
    let listings = listings.load(Ordering::Relaxed);
    eprintln!("{reads} reads, worst {worst:?}, {listings} listings meanwhile");
    assert!(listings >= 2, "the storm ran ({listings} listings)");
    // A listing on a worker stalled I/O for as long as it took (seconds); off the workers the
    // worst read is the scheduler's business on a loaded 2-core machine: a wide margin.
    assert!(
        worst < Duration::from_millis(300),
        "a 4 KiB read took {worst:?} during the read storm"
    );
    ctrl.shutdown().await.unwrap();
    api.stop().await;
}
