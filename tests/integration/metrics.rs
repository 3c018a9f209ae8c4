//! Prometheus metrics of a live fabrikd: known I/O moves exactly the counters it should, over
//! real HTTP scrapes, and promtool accepts what /metrics serves.

mod common;
mod metrics_scrape;

use std::io::Write;
use std::process::{Command, Stdio};

use fabrik_initiator::{Controller, HostIdentity};
use fabrik_target::backend::BackendKind;
use fabrik_target::metrics::MetricsEndpoint;
use metrics_scrape::{parse, scrape, value, Sample, PROMETHEUS_ACCEPT};

const BLOCK: usize = 4096;

async fn samples(m: &MetricsEndpoint) -> Vec<Sample> {
    parse(&scrape(m.addr(), None).await.1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn known_io_moves_drive_controller_and_port_counters() {
    let dir = tempfile::tempdir().unwrap();
    let target = common::start(common::config(dir.path(), BackendKind::Ram, 4, 64 << 20)).await;
    let metrics = MetricsEndpoint::start(target.manager(), "127.0.0.1:0".parse().unwrap(), None)
        .await
        .expect("metrics endpoint starts");
    let nqns = common::nqns(&target);
    let drive3 = [("drive", "03")];
    let port = [("port", "1")];

    let before = samples(&metrics).await;
    assert_eq!(value(&before, "fabrik_drive_write_ops_total", &drive3), 0.0);
    assert_eq!(value(&before, "fabrik_port_connections_open", &port), 0.0);
    assert_eq!(value(&before, "fabrik_connected_hosts", &[]), 0.0);

    let host = HostIdentity::random();
    let ctrl =
        Controller::connect(common::options(common::addr(&target), &nqns[3]).with_host(&host))
            .await
            .expect("connect to drive 03");
    for i in 0..10u64 {
        let data = common::random_data(BLOCK, i);
        ctrl.write(1, i, data, false).await.expect("write");
    }
    for i in 0..5u64 {
        ctrl.read(1, i, 1).await.expect("read");
    }
    ctrl.flush(1).await.expect("flush");
    // A range past the end fails at the drive: one error for drive 03.
    let past_end = (64 << 20) / BLOCK as u64;
    assert!(ctrl.deallocate(1, &[(past_end, 8)]).await.is_err());

    let after = samples(&metrics).await;
    let delta = |name: &str, labels: &[(&str, &str)]| {
        value(&after, name, labels) - value(&before, name, labels)
    };
    assert_eq!(delta("fabrik_drive_write_ops_total", &drive3), 10.0);
    assert_eq!(delta("fabrik_drive_write_bytes_total", &drive3), 40960.0);
    assert_eq!(delta("fabrik_drive_read_ops_total", &drive3), 5.0);
    assert_eq!(delta("fabrik_drive_read_bytes_total", &drive3), 20480.0);
    assert_eq!(delta("fabrik_drive_other_ops_total", &drive3), 1.0);
    assert_eq!(delta("fabrik_drive_errors_total", &drive3), 1.0);
    assert_eq!(delta("fabrik_drive_media_errors_total", &drive3), 0.0);
    let inf = [("drive", "03"), ("le", "+Inf")];
    assert_eq!(
        delta("fabrik_drive_write_latency_seconds_bucket", &inf),
        10.0
    );
    assert_eq!(
        delta("fabrik_drive_write_latency_seconds_count", &drive3),
        10.0
    );
    assert_eq!(
        delta("fabrik_drive_read_latency_seconds_count", &drive3),
        5.0
    );
    assert!(delta("fabrik_drive_write_latency_seconds_sum", &drive3) > 0.0);
    // Buckets are cumulative: never decreasing towards +Inf.
    let mut buckets: Vec<(f64, f64)> = after
        .iter()
        .filter(|s| {
            s.name == "fabrik_drive_write_latency_seconds_bucket" && s.labels["drive"] == "03"
        })
        .map(|s| (s.labels["le"].parse::<f64>().unwrap(), s.value))
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].1), "{buckets:?}");
    // The other drives saw nothing.
    for other in ["00", "01", "02"] {
        assert_eq!(
            delta("fabrik_drive_write_ops_total", &[("drive", other)]),
            0.0
        );
        assert_eq!(
            delta("fabrik_drive_read_bytes_total", &[("drive", other)]),
            0.0
        );
    }

    // The host's controller: by the host's alias (never its NQN), one I/O queue, what it moved.
    let alias = fabrik_target::state::host_alias(&target.manager().state().alias_key, &host.nqn);
    let mine = [("host", alias.as_str()), ("subsystem", nqns[3].as_str())];
    assert_eq!(value(&after, "fabrik_controller_io_queues", &mine), 1.0);
    assert_eq!(
        value(&after, "fabrik_controller_write_ops_total", &mine),
        10.0
    );
    assert_eq!(
        value(&after, "fabrik_controller_write_bytes_total", &mine),
        40960.0
    );
    assert_eq!(
        value(&after, "fabrik_controller_read_ops_total", &mine),
        5.0
    );
    assert_eq!(
        value(&after, "fabrik_controller_read_bytes_total", &mine),
        20480.0
    );
    assert_eq!(value(&after, "fabrik_connected_hosts", &[]), 1.0);

    // The port: admin and I/O queue connections, the data plus PDU headers each way.
    assert_eq!(value(&after, "fabrik_port_connections_open", &port), 2.0);
    assert_eq!(delta("fabrik_port_connections_accepted_total", &port), 2.0);
    let received = delta("fabrik_port_received_bytes_total", &port);
    let sent = delta("fabrik_port_sent_bytes_total", &port);
    assert!(
        (40960.0..40960.0 + 64.0 * 1024.0).contains(&received),
        "received {received}"
    );
    assert!(
        (20480.0..20480.0 + 64.0 * 1024.0).contains(&sent),
        "sent {sent}"
    );

    ctrl.shutdown().await.expect("disconnect");
    // The connections close asynchronously on the target's side.
    let mut closed = samples(&metrics).await;
    for _ in 0..200 {
        if value(&closed, "fabrik_port_connections_open", &port) == 0.0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        closed = samples(&metrics).await;
    }
    assert_eq!(value(&closed, "fabrik_port_connections_open", &port), 0.0);
    assert_eq!(value(&closed, "fabrik_connected_hosts", &[]), 0.0);
    assert!(!closed
        .iter()
        .any(|s| s.name.starts_with("fabrik_controller_")));
    // Closed connections' bytes stay counted.
    assert!(
        value(&closed, "fabrik_port_received_bytes_total", &port)
            >= value(&after, "fabrik_port_received_bytes_total", &port)
    );
    assert_eq!(
        value(&closed, "fabrik_drive_write_ops_total", &drive3),
        value(&after, "fabrik_drive_write_ops_total", &drive3)
    );

    metrics.shutdown().await;
    target.shutdown().await;
}

/// With a metrics token (fabrikd --metrics-token-file), a scrape without it gets 401 and
/// nothing else; Prometheus sending it (`authorization: credentials_file`) gets the metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metrics_token_keeps_scrapers_without_it_out() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const METRICS_TOKEN: &str = "metrics-token-0123456789";
    let dir = tempfile::tempdir().unwrap();
    let target = common::start(common::config(dir.path(), BackendKind::Ram, 1, 16 << 20)).await;
    let metrics = MetricsEndpoint::start(
        target.manager(),
        "127.0.0.1:0".parse().unwrap(),
        Some(METRICS_TOKEN.into()),
    )
    .await
    .unwrap();
    for auth in ["", "Authorization: Bearer wrong-token-0123456789\r\n"] {
        let mut s = tokio::net::TcpStream::connect(metrics.addr())
            .await
            .unwrap();
        s.write_all(format!("GET /metrics HTTP/1.0\r\n{auth}\r\n").as_bytes())
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        assert!(
            out.lines().next().unwrap_or("").contains(" 401 "),
            "{auth:?}: {out}"
        );
        assert!(!out.contains("fabrik_"), "no metrics without the token");
    }
    let (_, text) = metrics_scrape::scrape_with(metrics.addr(), None, Some(METRICS_TOKEN)).await;
    assert!(text.contains("fabrik_build_info"), "{text}");
    metrics.shutdown().await;
    target.shutdown().await;
}

/// Prometheus gets OpenMetrics, other clients the classic text format; both carry the same
/// samples.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openmetrics_for_prometheus_text_for_others() {
    let dir = tempfile::tempdir().unwrap();
    let target = common::start(common::config(dir.path(), BackendKind::Ram, 2, 16 << 20)).await;
    let metrics = MetricsEndpoint::start(target.manager(), "127.0.0.1:0".parse().unwrap(), None)
        .await
        .unwrap();
    let (om_type, om) = scrape(metrics.addr(), Some(PROMETHEUS_ACCEPT)).await;
    let (text_type, text) = scrape(metrics.addr(), None).await;
    assert!(
        om_type.starts_with("application/openmetrics-text; version=1.0.0"),
        "{om_type}"
    );
    assert!(
        text_type.starts_with("text/plain; version=0.0.4"),
        "{text_type}"
    );
    assert!(om.ends_with("# EOF\n"));
    assert!(om.contains("# UNIT fabrik_drive_read_latency_seconds seconds\n"));
    // The same samples, in whatever order and number formatting (le="1e-05" or "0.00001").
    let names = |samples: Vec<Sample>| {
        samples
            .into_iter()
            .filter(|s| s.name != "fabrik_uptime_seconds")
            .map(|mut s| {
                if let Some(le) = s.labels.get_mut("le") {
                    *le = le.parse::<f64>().unwrap().to_string();
                }
                format!("{}{:?}={}", s.name, s.labels, s.value)
            })
            .collect::<std::collections::BTreeSet<_>>()
    };
    assert_eq!(names(parse(&om)), names(parse(&text)));
    let samples = parse(&text);
    assert_eq!(
        value(&samples, "fabrik_drive_ready", &[("drive", "01")]),
        1.0
    );
    assert_eq!(
        value(&samples, "fabrik_drive_capacity_bytes", &[("drive", "01")]),
        (16 << 20) as f64
    );
    assert_eq!(
        value(
            &samples,
            "fabrik_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        1.0
    );
    assert!(value(&samples, "fabrik_uptime_seconds", &[]) > 0.0);
    metrics.shutdown().await;
    target.shutdown().await;
}

/// `promtool check metrics` (naming conventions, help, types) on a live scrape after I/O, with
/// a host connected so that every family has samples; and the OpenMetrics rendering through
/// Prometheus's OpenMetrics parser.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promtool_accepts_live_metrics() {
    let Some(promtool) = metrics_scrape::promtool() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let target = common::start(common::config(dir.path(), BackendKind::Ram, 3, 16 << 20)).await;
    let metrics = MetricsEndpoint::start(target.manager(), "127.0.0.1:0".parse().unwrap(), None)
        .await
        .unwrap();
    let nqns = common::nqns(&target);
    let ctrl = Controller::connect(common::options(common::addr(&target), &nqns[1]))
        .await
        .unwrap();
    ctrl.write(1, 0, common::random_data(8 * BLOCK, 1), false)
        .await
        .unwrap();
    ctrl.read(1, 0, 8).await.unwrap();
    let (_, text) = scrape(metrics.addr(), None).await;
    assert!(text.contains("fabrik_controller_read_ops_total{"));
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool check metrics: {}\n{}{}\n--- metrics:\n{text}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // What Prometheus gets, through Prometheus's own OpenMetrics parser (its backfill tool:
    // each sample needs a timestamp there, so one is added).
    let (_, om) = scrape(metrics.addr(), Some(PROMETHEUS_ACCEPT)).await;
    let samples = parse(&om).len();
    let stamped: String = om
        .lines()
        .map(|l| match l.starts_with('#') {
            true => format!("{l}\n"),
            false => format!("{l} 1700000000\n"),
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("metrics.om");
    std::fs::write(&input, stamped).unwrap();
    let out = Command::new(metrics_scrape::promtool().unwrap())
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(&input)
        .arg(dir.path().join("blocks"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "promtool's OpenMetrics parser: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The block's NUM SAMPLES column: every sample was taken.
    assert!(
        stdout
            .lines()
            .nth(1)
            .is_some_and(|row| row.split_whitespace().nth(4) == Some(&samples.to_string())),
        "{samples} samples expected in\n{stdout}"
    );

    ctrl.shutdown().await.unwrap();
    metrics.shutdown().await;
    target.shutdown().await;
}
