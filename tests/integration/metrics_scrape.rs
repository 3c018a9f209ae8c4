//! Scraping a live fabrikd's `/metrics` over real HTTP and reading the samples back, for the
//! metrics tests; and running promtool where it is installed.
#![allow(dead_code)] // each test binary uses its own subset

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What the Prometheus server sends (it prefers OpenMetrics).
pub const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// `GET /metrics` (HTTP/1.0, so the body ends with the connection): (content type, body).
pub async fn scrape(addr: SocketAddr, accept: Option<&str>) -> (String, String) {
    scrape_with(addr, accept, None).await
}

/// The same with `Authorization: Bearer <token>`, as Prometheus sends a credentials file.
pub async fn scrape_with(
    addr: SocketAddr,
    accept: Option<&str>,
    token: Option<&str>,
) -> (String, String) {
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .expect("metrics endpoint accepts");
    let accept = accept.map_or(String::new(), |a| format!("Accept: {a}\r\n"));
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    s.write_all(format!("GET /metrics HTTP/1.0\r\nHost: fabrikd\r\n{accept}{auth}\r\n").as_bytes())
        .await
        .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.unwrap();
    let raw = String::from_utf8(raw).expect("UTF-8 response");
    let (head, body) = raw.split_once("\r\n\r\n").expect("HTTP header and body");
    let status = head.lines().next().unwrap();
    assert!(status.contains(" 200 "), "status line {status:?}");
    let content_type = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-type")
                .then(|| v.trim().to_string())
        })
        .expect("a Content-Type");
    (content_type, body.to_string())
}

/// One sample: metric name, labels, value.
#[derive(Debug, Clone)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// The samples of a text exposition (Prometheus 0.0.4 or OpenMetrics).
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|line| parse_line(line).unwrap_or_else(|| panic!("bad sample line {line:?}")))
        .collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let name_end = line.find(['{', ' '])?;
    let name = line[..name_end].to_string();
    let mut labels = BTreeMap::new();
    let mut rest = &line[name_end..];
    if let Some(r) = rest.strip_prefix('{') {
        rest = r;
        loop {
            if let Some(r) = rest.strip_prefix('}') {
                rest = r;
                break;
            }
            let (key, r) = rest.split_once("=\"")?;
            let mut value = String::new();
            let mut chars = r.char_indices();
            let end = loop {
                match chars.next()? {
                    (i, '"') => break i,
                    (_, '\\') => match chars.next()?.1 {
                        'n' => value.push('\n'),
                        c => value.push(c),
                    },
                    (_, c) => value.push(c),
                }
            };
            labels.insert(key.trim_start_matches(',').to_string(), value);
            rest = r[end + 1..].trim_start_matches(',');
        }
    }
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some(Sample {
        name,
        labels,
        value,
    })
}

/// The value of the one sample with this name and these labels (others may be present).
#[track_caller]
pub fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    let found: Vec<_> = samples
        .iter()
        .filter(|s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .collect();
    assert_eq!(
        found.len(),
        1,
        "samples named {name} with {labels:?}: {found:?}"
    );
    found[0].value
}

/// promtool, if installed (tests/run's deps stage installs Debian's prometheus package). With
/// FABRIK_REQUIRE_PROMTOOL set (tests/run sets it), a missing promtool fails the test.
pub fn promtool() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("promtool"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("FABRIK_REQUIRE_PROMTOOL").is_none(),
            "promtool not found and FABRIK_REQUIRE_PROMTOOL is set (apt-get install prometheus)"
        );
        eprintln!("SKIPPED: promtool not installed (apt-get install prometheus)");
    }
    found
}

/// The repository's root (for deploy/).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}
