//! `--sweep`: one run per (block size, threads, queue depth), as storage reviews publish them,
//! and the results drawn as two heatmaps (throughput and latency) in a hand-written SVG.

use std::fmt::Write;

use serde::Serialize;

use super::report::human_bytes;
use super::Report;

/// One point of a sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Point {
    pub bs: u32,
    pub threads: usize,
    pub iodepth: u32,
}

/// Every combination, block size outermost.
pub fn points(bs: &[u32], threads: &[usize], iodepth: &[u32]) -> Vec<Point> {
    let mut out = Vec::new();
    for &bs in bs {
        for &threads in threads {
            for &iodepth in iodepth {
                out.push(Point {
                    bs,
                    threads,
                    iodepth,
                });
            }
        }
    }
    out
}

/// The sweep's table: one line per point.
pub fn table(results: &[(Point, Report)]) -> String {
    let mut out = format!(
        "{:>9} {:>7} {:>7} {:>10} {:>9} {:>10} {:>10} {:>10} {:>10}\n",
        "bs", "threads", "iodepth", "IOPS", "GB/s", "avg us", "p99 us", "cpu %", "cpu us/io"
    );
    for (p, r) in results {
        let _ = writeln!(
            out,
            "{:>9} {:>7} {:>7} {:>10.0} {:>9.3} {:>10.1} {:>10.1} {:>10.0} {:>10.2}",
            human_bytes(p.bs as f64),
            p.threads,
            p.iodepth,
            r.iops,
            r.bytes_per_sec / 1e9,
            r.lat_us.avg,
            r.lat_us.p99,
            r.cpu.percent,
            r.cpu.us_per_io
        );
    }
    out
}

const CELL_W: usize = 74;
const CELL_H: usize = 30;
const LEFT: usize = 80;
const TOP: usize = 60;

/// Two heatmaps side by side: rows are block sizes, columns (threads, iodepth); cells are
/// GB/s (left, darker is faster) and mean latency in microseconds (right, darker is slower).
pub fn svg(title: &str, results: &[(Point, Report)]) -> String {
    let mut rows: Vec<u32> = results.iter().map(|(p, _)| p.bs).collect();
    rows.dedup();
    let mut cols: Vec<(usize, u32)> = Vec::new();
    for (p, _) in results {
        if !cols.contains(&(p.threads, p.iodepth)) {
            cols.push((p.threads, p.iodepth));
        }
    }
    let panel_w = LEFT + cols.len() * CELL_W + 30;
    let height = TOP + rows.len() * CELL_H + 60;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{height}" font-family="sans-serif" font-size="11">"#,
        panel_w * 2
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="10" y="18" font-size="14" font-weight="bold">{}</text>"#,
        escape(title)
    );
    let value = |p: &Point, tp: bool| {
        results.iter().find(|(q, _)| q == p).map(|(_, r)| {
            if tp {
                r.bytes_per_sec / 1e9
            } else {
                r.lat_us.avg
            }
        })
    };
    for (panel, throughput) in [(0usize, true), (1, false)] {
        let x0 = panel * panel_w;
        let name = if throughput {
            "throughput, GB/s"
        } else {
            "mean latency, us"
        };
        let _ = writeln!(
            out,
            r#"<text x="{}" y="40" font-size="12">{name}</text>"#,
            x0 + LEFT
        );
        let values: Vec<f64> = results
            .iter()
            .filter_map(|(p, _)| value(p, throughput))
            .collect();
        let (lo, hi) = values
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
        for (c, (threads, qd)) in cols.iter().enumerate() {
            let _ = writeln!(
                out,
                r#"<text x="{}" y="{}" text-anchor="middle">t{threads} q{qd}</text>"#,
                x0 + LEFT + c * CELL_W + CELL_W / 2,
                TOP - 6
            );
        }
        for (r, bs) in rows.iter().enumerate() {
            let y = TOP + r * CELL_H;
            let _ = writeln!(
                out,
                r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
                x0 + LEFT - 6,
                y + CELL_H / 2 + 4,
                human_bytes(*bs as f64)
            );
            for (c, &(threads, iodepth)) in cols.iter().enumerate() {
                let x = x0 + LEFT + c * CELL_W;
                let point = Point {
                    bs: *bs,
                    threads,
                    iodepth,
                };
                let Some(v) = value(&point, throughput) else {
                    continue;
                };
                // Latency spans decades: shade it on a log scale.
                let t = if throughput {
                    scale(v, lo, hi)
                } else {
                    scale(v.max(1e-3).ln(), lo.max(1e-3).ln(), hi.max(1e-3).ln())
                };
                let (fill, ink) = shade(t, throughput);
                let _ = writeln!(
                    out,
                    r#"<rect x="{x}" y="{y}" width="{CELL_W}" height="{CELL_H}" fill="{fill}" stroke="white"/><text x="{}" y="{}" text-anchor="middle" fill="{ink}">{}</text>"#,
                    x + CELL_W / 2,
                    y + CELL_H / 2 + 4,
                    if throughput {
                        format!("{v:.2}")
                    } else {
                        format!("{v:.0}")
                    }
                );
            }
        }
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" fill="gray">columns: threads (t) x queue depth (q); rows: block size</text>"#,
            x0 + LEFT,
            TOP + rows.len() * CELL_H + 20
        );
    }
    out.push_str("</svg>\n");
    out
}

fn scale(v: f64, lo: f64, hi: f64) -> f64 {
    if hi > lo {
        ((v - lo) / (hi - lo)).clamp(0.0, 1.0)
    } else {
        0.5
    }
}

/// Light to dark: green for throughput, red for latency; white ink on dark cells.
fn shade(t: f64, green: bool) -> (String, &'static str) {
    let (from, to) = if green {
        ([240.0, 249.0, 232.0], [0.0, 90.0, 50.0])
    } else {
        ([255.0, 245.0, 235.0], [165.0, 15.0, 21.0])
    };
    let c: Vec<f64> = (0..3).map(|i| from[i] + (to[i] - from[i]) * t).collect();
    let fill = format!("rgb({:.0},{:.0},{:.0})", c[0], c[1], c[2]);
    (fill, if t > 0.6 { "white" } else { "black" })
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Parses a comma-separated list of numbers.
pub fn parse_list<T: std::str::FromStr>(text: &str) -> Result<Vec<T>, String> {
    text.split(',')
        .map(|s| {
            s.trim()
                .parse()
                .map_err(|_| format!("{s:?} in {text:?} is not a number"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::report::{CpuUse, Latency};

    fn report(bytes_per_sec: f64, avg: f64) -> Report {
        Report {
            rw: "randread".into(),
            bs: 4096,
            iodepth: 1,
            threads: 1,
            drives: 1,
            runtime_s: 1.0,
            ios: 1,
            bytes: 1,
            iops: 1.0,
            bytes_per_sec,
            gib_per_sec: 0.0,
            lat_us: Latency {
                avg,
                ..Latency::default()
            },
            read: None,
            write: None,
            cpu: CpuUse::default(),
            verify: None,
            reference: None,
            memory: None,
            placement: None,
            events: Vec::new(),
        }
    }

    #[test]
    fn points_cover_every_combination() {
        let p = points(&[4096, 65536], &[1, 2], &[1, 32]);
        assert_eq!(p.len(), 8);
        assert_eq!(
            p[0],
            Point {
                bs: 4096,
                threads: 1,
                iodepth: 1
            }
        );
        assert_eq!(
            p[7],
            Point {
                bs: 65536,
                threads: 2,
                iodepth: 32
            }
        );
    }

    #[test]
    fn svg_has_a_cell_per_point_in_each_heatmap() {
        let results: Vec<_> = points(&[4096, 131072], &[1], &[1, 8])
            .into_iter()
            .enumerate()
            .map(|(i, p)| (p, report(1e9 * (i + 1) as f64, 10.0 * (i + 1) as f64)))
            .collect();
        let svg = svg("randread <loopback>", &results);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<rect x=").count(), 8, "4 points x 2 heatmaps");
        assert!(svg.contains("randread &lt;loopback&gt;"));
        assert!(
            svg.contains(">4.00<") && svg.contains(">40<"),
            "values are written in the cells"
        );
        assert!(svg.contains("t1 q8") && svg.contains("128.00 KiB"));
        let t = table(&results);
        assert_eq!(t.lines().count(), 5);
    }

    #[test]
    fn lists_parse() {
        assert_eq!(parse_list::<u32>("1, 8,32"), Ok(vec![1, 8, 32]));
        assert!(parse_list::<u32>("1,x").is_err());
    }
}
