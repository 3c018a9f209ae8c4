//! Slow and idle HTTP clients cannot take the NVMe ports down: with few descriptors (as under
//! `ulimit -n 1024`), hundreds of half-sent request heads held on the API and metrics ports
//! leave NVMe connects and I/O as they were; the HTTP listeners close what is past their cap
//! at once, and the rest when the head does not come within the deadline.
//!
//! One test in its own binary: it lowers this process's descriptor limit.

mod common;

use std::time::{Duration, Instant};

use common::api::nqn;
use fabrik_initiator::HostIdentity;
use fabrik_target::metrics::MetricsEndpoint;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Half a request head: the server waits for the rest.
const PARTIAL: &[u8] = b"GET /api/v1/drives HTTP/1.1\r\nHost: localhost\r\nX-Slow: ";

/// Opens `n` connections to `addr`, each sending a partial request head; those the target
/// closes on the spot are counted (they read the end at once), the others are kept.
async fn hold(addr: std::net::SocketAddr, n: usize) -> (Vec<TcpStream>, usize) {
    let (mut kept, mut closed) = (Vec::new(), 0);
    for _ in 0..n {
        let Ok(mut s) = TcpStream::connect(addr).await else {
            closed += 1;
            continue;
        };
        let _ = s.write_all(PARTIAL).await;
        kept.push(s);
    }
    // Those past the cap were closed after accept: they read EOF (or a reset) now.
    let mut open = Vec::new();
    for mut s in kept {
        let mut b = [0u8; 64];
        match tokio::time::timeout(Duration::from_millis(20), s.read(&mut b)).await {
            Ok(_) => closed += 1,
            Err(_) => open.push(s),
        }
    }
    (open, closed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_http_clients_leave_the_nvme_ports_alone() {
    let (_, hard) = rlimit::getrlimit(rlimit::Resource::NOFILE).unwrap();
    rlimit::setrlimit(rlimit::Resource::NOFILE, 1024.min(hard), hard).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let api = common::api::start(dir.path()).await;
    let metrics =
        MetricsEndpoint::start(api.target.manager(), "127.0.0.1:0".parse().unwrap(), None)
            .await
            .unwrap();

    let start = Instant::now();
    let (api_held, api_closed) = hold(api.api, 300).await;
    let (metrics_held, metrics_closed) = hold(metrics.addr(), 300).await;
    // 1024 descriptors (this process holds the clients' ends too): each HTTP listener serves
    // at most 1024 / 16 = 64 at once.
    assert!(api_held.len() <= 64, "API holds {}", api_held.len());
    assert!(
        metrics_held.len() <= 64,
        "metrics hold {}",
        metrics_held.len()
    );
    assert!(
        api_closed >= 236 && metrics_closed >= 236,
        "{api_closed} {metrics_closed}"
    );

    // Meanwhile NVMe hosts connect and do I/O as ever.
    for drive in ["00", "01"] {
        let host = HostIdentity::random();
        let ctrl = common::api::connect(api.nvme(), &nqn(drive), &host)
            .await
            .expect("an NVMe host connects while HTTP clients hold the API");
        let data = common::random_data(64 << 10, 3);
        ctrl.write(1, 0, data.clone(), false).await.unwrap();
        common::assert_same_data(&ctrl.read(1, 0, 16).await.unwrap(), &data, drive);
        ctrl.shutdown().await.unwrap();
    }
    // And the API still answers whoever sends a whole request.
    assert_eq!(api.local.drives().await.unwrap().len(), 4);

    // The held connections are closed once the head is 10 s late.
    for (what, held) in [("API", api_held), ("metrics", metrics_held)] {
        for mut s in held {
            let left = Duration::from_secs(13).saturating_sub(start.elapsed());
            let mut b = [0u8; 64];
            let read = tokio::time::timeout(left, s.read(&mut b)).await;
            assert!(read.is_ok(), "a {what} connection still open after 13 s");
        }
    }
    assert!(
        start.elapsed() >= Duration::from_secs(9),
        "closed before the deadline"
    );
    metrics.shutdown().await;
    api.stop().await;
}
