//! deploy/ against a live fabrikd: every metric the Grafana dashboard queries is served by
//! /metrics after real I/O; the Prometheus scrape configuration and the systemd unit are valid.

mod common;
mod metrics_scrape;

use std::collections::BTreeSet;
use std::process::Command;

use fabrik_initiator::Controller;
use fabrik_target::backend::BackendKind;
use fabrik_target::metrics::MetricsEndpoint;
use metrics_scrape::{parse, repo_root, scrape};

/// Every PromQL expression in the dashboard: panel targets and template variable queries.
fn dashboard_queries(dashboard: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    collect(dashboard, &mut out);
    out
}

fn collect(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("expr" | "definition", serde_json::Value::String(s)) => out.push(s.clone()),
                    ("query", serde_json::Value::String(s)) if s.contains('(') => {
                        out.push(s.clone())
                    }
                    _ => collect(v, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| collect(v, out)),
        _ => {}
    }
}

/// The metric names an expression selects: identifiers starting with `fabrik_` outside strings.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut in_string = false;
    let bytes = expr.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'"' {
            in_string = !in_string;
        } else if !in_string
            && expr[i..].starts_with("fabrik_")
            && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_'))
        {
            let end = expr[i..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .map_or(expr.len(), |n| i + n);
            names.push(expr[i..end].to_string());
            i = end;
            continue;
        }
        i += 1;
    }
    names
}

#[test]
fn metric_names_are_found_outside_strings_only() {
    assert_eq!(
        metric_names(
            r#"histogram_quantile(0.99, sum by (drive, le) (rate(fabrik_drive_read_latency_seconds_bucket{instance=~"fabrik_x"}[5m])))"#
        ),
        ["fabrik_drive_read_latency_seconds_bucket"]
    );
    assert_eq!(
        metric_names("fabrik_a + myfabrik_b + fabrik_c_total"),
        ["fabrik_a", "fabrik_c_total"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_queries_only_metrics_fabrikd_serves() {
    let path = repo_root().join("deploy/grafana/fabrik-dashboard.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).expect("dashboard JSON");
    assert_eq!(dashboard["uid"], "fabrik-target");
    let queries = dashboard_queries(&dashboard);
    let wanted: BTreeSet<String> = queries.iter().flat_map(|q| metric_names(q)).collect();
    // Not vacuous: the dashboard covers drives, ports, hosts, health and the target.
    for must in [
        "fabrik_drive_read_bytes_total",
        "fabrik_drive_write_ops_total",
        "fabrik_drive_read_latency_seconds_bucket",
        "fabrik_port_sent_bytes_total",
        "fabrik_connected_hosts",
        "fabrik_drive_ready",
        "fabrik_build_info",
    ] {
        assert!(wanted.contains(must), "dashboard does not query {must}");
    }
    assert!(queries.len() >= 20, "{} queries", queries.len());

    // A live fabrikd with a host connected and I/O done, so that every family has samples.
    let dir = tempfile::tempdir().unwrap();
    let target = common::start(common::config(dir.path(), BackendKind::Ram, 2, 16 << 20)).await;
    let metrics = MetricsEndpoint::start(target.manager(), "127.0.0.1:0".parse().unwrap(), None)
        .await
        .unwrap();
    let nqns = common::nqns(&target);
    let ctrl = Controller::connect(common::options(common::addr(&target), &nqns[0]))
        .await
        .unwrap();
    ctrl.write(1, 0, common::random_data(4096, 7), false)
        .await
        .unwrap();
    ctrl.read(1, 0, 1).await.unwrap();
    let (_, text) = scrape(metrics.addr(), None).await;
    let served: BTreeSet<String> = parse(&text).into_iter().map(|s| s.name).collect();
    let missing: Vec<_> = wanted.difference(&served).collect();
    assert!(
        missing.is_empty(),
        "the dashboard queries metrics fabrikd does not serve: {missing:?}"
    );
    ctrl.shutdown().await.unwrap();
    metrics.shutdown().await;
    target.shutdown().await;
}

#[test]
fn prometheus_scrape_config_is_valid() {
    let Some(promtool) = metrics_scrape::promtool() else {
        return;
    };
    let config = repo_root().join("deploy/prometheus.yml");
    let out = Command::new(promtool)
        .arg("check")
        .arg("config")
        .arg(&config)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool check config: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(
        text.contains(":9420"),
        "scrapes fabrikd's default metrics port"
    );
}

/// The unit keeps its hardening and limits, and systemd (where installed) finds nothing wrong
/// in it: no unknown key, no bad value.
#[test]
fn systemd_unit_is_hardened_and_valid() {
    let unit = std::fs::read_to_string(repo_root().join("deploy/fabrikd.service")).unwrap();
    for line in [
        "User=fabrik",
        "LimitMEMLOCK=infinity",
        "LimitNOFILE=1048576",
        "ProtectSystem=strict",
        "StateDirectory=fabrik",
        "NoNewPrivileges=yes",
        "CapabilityBoundingSet=",
    ] {
        assert!(unit.lines().any(|l| l == line), "unit lacks {line:?}");
    }
    let sysusers =
        std::fs::read_to_string(repo_root().join("deploy/fabrik.sysusers.conf")).unwrap();
    assert!(sysusers.lines().any(|l| l.starts_with("u fabrik ")));
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    assert!(exec.starts_with("/usr/local/bin/fabrikd --config /etc/fabrik/fabrikd.toml"));
    assert!(
        exec.contains(" --api 127.0.0.1:8080") && exec.contains(" --metrics 127.0.0.1:9420"),
        "the API and metrics on loopback: {exec}"
    );
    assert!(
        !unit.lines().any(|l| l.starts_with("SupplementaryGroups=")),
        "group disk only where block drives need it"
    );
    // The documented opt-in for SMART passthrough (a drop-in of `#SMART ` lines), applied.
    let smart: Vec<&str> = unit
        .lines()
        .filter_map(|l| l.strip_prefix("#SMART "))
        .filter(|l| *l != "[Service]")
        .collect();
    assert_eq!(
        smart,
        [
            "CapabilityBoundingSet=CAP_SYS_ADMIN CAP_DAC_READ_SEARCH",
            "AmbientCapabilities=CAP_SYS_ADMIN CAP_DAC_READ_SEARCH"
        ]
    );
    let with_smart = unit.replace(
        "\nAmbientCapabilities=\n",
        &format!("\nAmbientCapabilities=\n{}\n", smart.join("\n")),
    );
    assert_ne!(with_smart, unit);
    let Ok(version) = Command::new("systemd-analyze").arg("--version").output() else {
        eprintln!("SKIPPED: systemd-analyze not installed");
        return;
    };
    assert!(version.status.success());
    for text in [&unit, &with_smart] {
        // verify wants the binary to exist: point ExecStart at one that does.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fabrikd.service");
        std::fs::write(&path, text.replace("/usr/local/bin/fabrikd", "/bin/true")).unwrap();
        let out = Command::new("systemd-analyze")
            .arg("verify")
            .arg(&path)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && !stderr.contains("fabrikd.service"),
            "systemd-analyze verify: {stderr}"
        );
    }
}
