//! Prometheus metrics: what fabrikd reports (a [`Snapshot`] of plain numbers, taken on each
//! scrape), how it is encoded (OpenMetrics text, or the classic Prometheus text format for
//! clients that do not ask for OpenMetrics, such as `promtool` and `curl`), and the `GET /metrics`
//! route that serves it.
//!
//! Every name starts with `fabrik_`; counters end in `_total`, sizes in `_bytes`, times in
//! `_seconds`. Labels: `drive`, `subsystem`, `host`, `controller`, `port`, `group` (ANA) with
//! `state`, `volume`. `host` is an alias
//! (`h-` and 12 hex digits, or `(anonymous)`), never a host NQN: until DH-HMAC-CHAP is
//! required an NQN is all a host needs to connect as that host.

use std::future::Future;
use std::sync::Arc;

use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeMetric, NoLabelSet,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use crate::models::{AnaState, DriveHealth};

mod volumes;
pub use volumes::VolumeMetrics;

/// Content type of the OpenMetrics text format.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Upper bounds (seconds) of the latency histograms' buckets, +Inf excluded: 5 µs (a RAM drive)
/// to 1 s (a struggling disk).
pub const LATENCY_BUCKETS: [f64; 16] = [
    5e-6, 10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3,
    100e-3, 250e-3, 1.0,
];

/// Everything fabrikd reports on one scrape.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// fabrikd's version.
    pub version: String,
    pub box_name: String,
    pub uptime_seconds: f64,
    pub drives: Vec<DriveMetrics>,
    pub ports: Vec<PortMetrics>,
    pub controllers: Vec<ControllerMetrics>,
    pub ana_groups: Vec<AnaGroupMetrics>,
    pub module: ModuleMetrics,
    pub volumes: Vec<VolumeMetrics>,
    /// Set on a central discovery controller (`fabrikd --role cdc`).
    pub cdc: Option<CdcMetrics>,
}

/// A central discovery controller's registrations and reads of boxes.
#[derive(Clone, Debug, Default)]
pub struct CdcMetrics {
    pub boxes: u64,
    pub hosts: u64,
    /// Hosts' logs made (one per host and generation of the CDC's log).
    pub host_logs: u64,
    /// Boxes whose discovery log could not be read for a host (left out of that host's log).
    pub box_reads_failed: u64,
}

/// This I/O module of the box.
#[derive(Clone, Debug, Default)]
pub struct ModuleMetrics {
    /// "a" or "b"; empty for a box of one module.
    pub name: String,
    pub maintenance: bool,
    /// I/O commands the hosts' queues have in flight.
    pub io_in_flight: u64,
}

/// One ANA group, as this target's ports report it.
#[derive(Clone, Debug)]
pub struct AnaGroupMetrics {
    /// ANAGRPID.
    pub group: String,
    pub state: AnaState,
    /// Changes of state since fabrikd started (the ANA log's change count).
    pub changes: u64,
}

/// One drive of the box (all namespaces backed by it together; a drive no subsystem exports
/// too, with an empty `subsystem`).
#[derive(Clone, Debug, Default)]
pub struct DriveMetrics {
    pub drive: String,
    pub backend: String,
    /// Subsystem NQN it is exported in (the first one, should there be several; empty if none).
    pub subsystem: String,
    pub capacity_bytes: u64,
    /// Host NQNs the drive is composed to.
    pub composed_to: Vec<String>,
    pub read_ops: u64,
    pub write_ops: u64,
    /// Flush, Write Zeroes, Dataset Management.
    pub other_ops: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// I/O commands that failed once admitted: backend errors (media errors included), ranges
    /// found invalid once the data arrived, the drive gone not ready.
    pub errors: u64,
    pub read_latency: Histogram,
    pub write_latency: Histogram,
    /// Health exactly as `GET /api/v1/drives/{id}` shows it (SMART where the drive has it, else
    /// fabrikd's own figures): readiness, temperature, percentage used, media errors, critical
    /// warnings, power-on hours.
    pub health: DriveHealth,
}

/// A latency histogram: count per bucket (not cumulative), one per bound of
/// [`LATENCY_BUCKETS`] and a last one for +Inf; the sum of all observations in seconds.
#[derive(Clone, Debug, Default)]
pub struct Histogram {
    pub buckets: Vec<u64>,
    pub sum_seconds: f64,
}

impl Histogram {
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    fn bounded_buckets(&self) -> Vec<(f64, u64)> {
        LATENCY_BUCKETS
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY))
            .zip(self.buckets.iter().copied().chain(std::iter::repeat(0)))
            .collect()
    }
}

/// One transport listener.
#[derive(Clone, Debug, Default)]
pub struct PortMetrics {
    /// Port ID as the discovery log reports it.
    pub port: u16,
    pub transport: String,
    pub address: String,
    pub connections_accepted: u64,
    pub connections_open: u64,
    pub received_bytes: u64,
    pub sent_bytes: u64,
    /// Connections whose TLS handshake failed (NVMe/TCP ports with TLS).
    pub tls_handshake_failures: u64,
}

/// One live I/O controller: a host's association with a subsystem. `host` is the host's alias.
#[derive(Clone, Debug, Default)]
pub struct ControllerMetrics {
    pub subsystem: String,
    pub host: String,
    pub controller: u16,
    pub port: u16,
    pub io_queues: u64,
    pub read_ops: u64,
    pub write_ops: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Commands that waited for the host's QoS limits, and the time they waited.
    pub throttled_ops: u64,
    pub throttled_seconds: f64,
}

/// Which text format a scrape gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    OpenMetrics,
    /// Prometheus text format 0.0.4.
    PrometheusText,
}

impl Format {
    /// OpenMetrics when the client asks for it (Prometheus does), else the classic text format.
    pub fn negotiate(accept: Option<&str>) -> Format {
        match accept {
            Some(a) if a.contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::PrometheusText,
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
            Format::PrometheusText => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
        }
    }
}

/// Encodes a snapshot in the given format.
pub fn encode(snapshot: &Snapshot, format: Format) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(SnapshotCollector(snapshot.clone())));
    let mut out = String::with_capacity(16 * 1024);
    let result = match format {
        Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, &registry),
        Format::PrometheusText => {
            prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)
        }
    };
    // Writing to a String cannot fail.
    result.expect("metrics encode into a String");
    out
}

/// `GET /metrics`, serving what `source` reports at the moment of each scrape. A Router of its
/// own so that the REST API's router can `.merge()` it. With a `token`, a scrape needs
/// `Authorization: Bearer <token>` (Prometheus: `authorization: credentials_file`), or the
/// local socket.
pub fn router<F>(source: F, tokens: Option<Vec<String>>) -> Router
where
    F: Fn() -> Snapshot + Send + Sync + 'static,
{
    let source = Arc::new(source);
    let token = Arc::new(tokens);
    Router::new().route(
        "/metrics",
        get(
            move |local: Option<axum::Extension<crate::http::LocalAdmin>>, headers: HeaderMap| {
                let (source, token) = (source.clone(), token.clone());
                async move {
                    if let Some(tokens) = token.as_deref() {
                        let any = tokens.iter().any(|t| crate::server::bearer_ok(&headers, t));
                        if local.is_none() && !any {
                            return (
                                axum::http::StatusCode::UNAUTHORIZED,
                                [(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"))],
                                "metrics need Authorization: Bearer <token>\n",
                            )
                                .into_response();
                        }
                    }
                    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
                    let format = Format::negotiate(accept);
                    // The source may block (a drive's SMART log is an ioctl).
                    let snapshot = match tokio::task::spawn_blocking(move || source()).await {
                        Ok(s) => s,
                        Err(e) => {
                            let msg = format!("metrics snapshot failed: {e}\n");
                            return (axum::http::StatusCode::INTERNAL_SERVER_ERROR, msg)
                                .into_response();
                        }
                    };
                    let body = encode(&snapshot, format);
                    (
                        [(
                            header::CONTENT_TYPE,
                            HeaderValue::from_static(format.content_type()),
                        )],
                        body,
                    )
                        .into_response()
                }
            },
        ),
    )
}

/// Serves `router` on `listener` until `stop` completes, within the default `http::Limits`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    stop: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    crate::http::serve_tcp(listener, router, crate::http::Limits::default(), stop).await
}

#[derive(Debug)]
struct SnapshotCollector(Snapshot);

type Labels<'a> = Vec<(&'static str, &'a str)>;

fn by_drive(d: &DriveMetrics) -> Labels<'_> {
    vec![("drive", d.drive.as_str())]
}

impl Collector for SnapshotCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = &self.0;
        let mut out = Out(&mut enc);
        let version: Labels = vec![("version", &s.version), ("box", &s.box_name)];
        out.gauges(
            "fabrik_build_info",
            "fabrikd's version and box name (always 1).",
            None,
            [(version, 1u64)],
        )?;
        out.gauges(
            "fabrik_uptime",
            "Time since fabrikd started.",
            Some(Unit::Seconds),
            [(vec![], s.uptime_seconds)],
        )?;
        self.encode_drives(&mut out)?;
        self.encode_ports(&mut out)?;
        self.encode_ana_groups(&mut out)?;
        self.encode_module(&mut out)?;
        self.encode_volumes(&mut out)?;
        self.encode_cdc(&mut out)?;
        self.encode_controllers(&mut out)
    }
}

impl SnapshotCollector {
    /// A central discovery controller's registered boxes and hosts, and its reads of boxes'
    /// logs (an alert on failures: a box registered but unreachable from the CDC).
    fn encode_cdc(&self, out: &mut Out<'_, '_>) -> Result<(), std::fmt::Error> {
        let Some(c) = &self.0.cdc else {
            return Ok(());
        };
        out.gauges(
            "fabrik_cdc_registrations",
            "Entities registered with this central discovery controller, by kind (box or host).",
            None,
            [
                (vec![("entity", "box")], c.boxes),
                (vec![("entity", "host")], c.hosts),
            ],
        )?;
        out.counters(
            "fabrik_cdc_host_logs",
            "Hosts' discovery logs made from the boxes' (one per host and generation).",
            None,
            [(vec![], c.host_logs)],
        )?;
        out.counters(
            "fabrik_cdc_box_reads_failed",
            "Boxes whose discovery log could not be read for a host (left out of that host's log).",
            None,
            [(vec![], c.box_reads_failed)],
        )
    }

    /// Whether this module is in maintenance (an alert when it stays so), and what it still
    /// has in flight (a planned failover waits for 0).
    fn encode_module(&self, out: &mut Out<'_, '_>) -> Result<(), std::fmt::Error> {
        let m = &self.0.module;
        let labels = || -> Labels { vec![("module", m.name.as_str())] };
        out.gauges(
            "fabrik_module_maintenance",
            "1 while this I/O module is in maintenance (every ANA group inaccessible through it).",
            None,
            [(labels(), m.maintenance as u64)],
        )?;
        out.gauges(
            "fabrik_module_io_in_flight",
            "I/O commands the hosts' queues on this module have in flight.",
            None,
            [(labels(), m.io_in_flight)],
        )
    }

    /// An ANA group's state as one sample per state, 1 for the one it is in (so an alert is
    /// `fabrik_ana_group_state{state="inaccessible"} == 1`), and its changes.
    fn encode_ana_groups(&self, out: &mut Out<'_, '_>) -> Result<(), std::fmt::Error> {
        let groups = &self.0.ana_groups;
        out.gauges(
            "fabrik_ana_group_state",
            "1 for the ANA state the group is in (as every port reports it), 0 for the others.",
            None,
            groups.iter().flat_map(|g| {
                AnaState::ALL.iter().map(move |&state| {
                    let labels: Labels = vec![("group", g.group.as_str()), ("state", state.name())];
                    (labels, (g.state == state) as u64)
                })
            }),
        )?;
        out.counters(
            "fabrik_ana_group_changes",
            "Changes of the ANA group's state since fabrikd started.",
            None,
            groups
                .iter()
                .map(|g| (vec![("group", g.group.as_str())], g.changes)),
        )
    }

    fn encode_drives(&self, out: &mut Out<'_, '_>) -> Result<(), std::fmt::Error> {
        let drives = &self.0.drives;
        let per = |f: fn(&DriveMetrics) -> u64| drives.iter().map(move |d| (by_drive(d), f(d)));
        let info = drives.iter().map(|d| {
            let labels = vec![
                ("drive", d.drive.as_str()),
                ("backend", d.backend.as_str()),
                ("subsystem", d.subsystem.as_str()),
                ("health_source", d.health.source.as_str()),
            ];
            (labels, 1u64)
        });
        out.gauges(
            "fabrik_drive_info",
            "Drive backend, the subsystem exporting it (empty: none) and where its health figures come from: smart (its SMART log) or fabrikd (fabrikd's counters) (always 1).",
            None,
            info,
        )?;
        let composed = drives.iter().flat_map(|d| {
            d.composed_to.iter().map(move |h| {
                (
                    vec![("drive", d.drive.as_str()), ("host", h.as_str())],
                    1u64,
                )
            })
        });
        out.gauges(
            "fabrik_drive_composed_info",
            "A composition of the drive to a host (always 1).",
            None,
            composed,
        )?;
        out.gauges(
            "fabrik_drive_capacity",
            "Drive capacity.",
            Some(Unit::Bytes),
            drives.iter().map(|d| (by_drive(d), d.capacity_bytes)),
        )?;
        out.gauges(
            "fabrik_drive_ready",
            "1 when the drive serves I/O, 0 when commands get Namespace Not Ready.",
            None,
            drives
                .iter()
                .map(|d| (by_drive(d), (d.health.state != "not_ready") as u64)),
        )?;
        out.gauges(
            "fabrik_drive_read_only",
            "1 when the drive lost a write (a failed Flush or FUA write) and refuses changes until an operator clears the fault.",
            None,
            drives
                .iter()
                .map(|d| (by_drive(d), d.health.fault.is_some() as u64)),
        )?;
        out.gauges(
            "fabrik_drive_critical_warning",
            "SMART critical warning bits (0: no warning).",
            None,
            drives
                .iter()
                .map(|d| (by_drive(d), d.health.critical_warnings as u64)),
        )?;
        let temps: Vec<_> = drives
            .iter()
            .filter_map(|d| Some((by_drive(d), d.health.temperature_celsius? as f64)))
            .collect();
        if !temps.is_empty() {
            out.gauges(
                "fabrik_drive_temperature",
                "Composite temperature from the drive's SMART log.",
                Some(Unit::Celsius),
                temps,
            )?;
        }
        let used: Vec<_> = drives
            .iter()
            .filter_map(|d| Some((by_drive(d), d.health.percentage_used? as f64 / 100.0)))
            .collect();
        if !used.is_empty() {
            out.gauges(
                "fabrik_drive_endurance_used",
                "SMART Percentage Used as a ratio (1: rated endurance reached; may exceed 1).",
                Some(Unit::Other("ratio".into())),
                used,
            )?;
        }
        out.gauges(
            "fabrik_drive_power_on",
            "Power-on time in whole hours (SMART), or fabrikd's uptime for drives without SMART.",
            Some(Unit::Seconds),
            drives
                .iter()
                .map(|d| (by_drive(d), d.health.power_on_hours.saturating_mul(3600))),
        )?;
        out.counters(
            "fabrik_drive_read_ops",
            "Read commands completed successfully.",
            None,
            per(|d| d.read_ops),
        )?;
        out.counters(
            "fabrik_drive_write_ops",
            "Write commands completed successfully.",
            None,
            per(|d| d.write_ops),
        )?;
        out.counters(
            "fabrik_drive_other_ops",
            "Flush, Write Zeroes and Dataset Management commands completed successfully.",
            None,
            per(|d| d.other_ops),
        )?;
        out.counters(
            "fabrik_drive_read",
            "Bytes read by hosts.",
            Some(Unit::Bytes),
            per(|d| d.read_bytes),
        )?;
        out.counters(
            "fabrik_drive_write",
            "Bytes written by hosts.",
            Some(Unit::Bytes),
            per(|d| d.write_bytes),
        )?;
        out.counters(
            "fabrik_drive_errors",
            "I/O commands that failed at the drive (after admission).",
            None,
            per(|d| d.errors),
        )?;
        out.counters(
            "fabrik_drive_media_errors",
            "Media errors: the drive's SMART count where it has SMART, else backend I/O errors fabrikd reported to hosts as media errors.",
            None,
            per(|d| d.health.media_errors),
        )?;
        out.histograms(
            "fabrik_drive_read_latency",
            "Time the drive took to serve a read.",
            drives.iter().map(|d| (by_drive(d), &d.read_latency)),
        )?;
        out.histograms(
            "fabrik_drive_write_latency",
            "Time the drive took to serve a write.",
            drives.iter().map(|d| (by_drive(d), &d.write_latency)),
        )
    }

    fn encode_ports(&self, out: &mut Out<'_, '_>) -> Result<(), std::fmt::Error> {
        // Port IDs as strings, kept alive for the labels that borrow them.
        let ids: Vec<String> = self.0.ports.iter().map(|p| p.port.to_string()).collect();
        let ports: Vec<(Labels<'_>, &PortMetrics)> = self
            .0
            .ports
            .iter()
            .zip(&ids)
            .map(|(p, id)| {
                let labels = vec![
                    ("port", id.as_str()),
                    ("transport", p.transport.as_str()),
                    ("address", p.address.as_str()),
                ];
                (labels, p)
            })
            .collect();
        let per = |f: fn(&PortMetrics) -> u64| ports.iter().map(move |(l, p)| (l.clone(), f(p)));
        out.counters(
            "fabrik_port_connections_accepted",
            "Connections accepted on the port.",
            None,
            per(|p| p.connections_accepted),
        )?;
        out.gauges(
            "fabrik_port_connections_open",
            "Connections open on the port.",
            None,
            per(|p| p.connections_open),
        )?;
        out.counters(
            "fabrik_port_received",
            "Bytes received from hosts on the port.",
            Some(Unit::Bytes),
            per(|p| p.received_bytes),
        )?;
        out.counters(
            "fabrik_port_sent",
            "Bytes sent to hosts on the port.",
            Some(Unit::Bytes),
            per(|p| p.sent_bytes),
        )?;
        out.counters(
            "fabrik_port_tls_handshake_failures",
            "Connections whose TLS handshake failed (no or another key, clear text where TLS is required, a timeout).",
            None,
            per(|p| p.tls_handshake_failures),
        )
    }

    fn encode_controllers(&self, out: &mut Out<'_, '_>) -> Result<(), std::fmt::Error> {
        let ctrls = &self.0.controllers;
        let mut hosts: Vec<&str> = ctrls.iter().map(|c| c.host.as_str()).collect();
        hosts.sort_unstable();
        hosts.dedup();
        out.gauges(
            "fabrik_connected_hosts",
            "Distinct hosts with at least one live I/O controller.",
            None,
            [(vec![], hosts.len() as u64)],
        )?;
        let ids: Vec<(String, String)> = ctrls
            .iter()
            .map(|c| (c.controller.to_string(), c.port.to_string()))
            .collect();
        let labelled: Vec<(Labels<'_>, &ControllerMetrics)> = ctrls
            .iter()
            .zip(&ids)
            .map(|(c, (id, port))| {
                let labels = vec![
                    ("subsystem", c.subsystem.as_str()),
                    ("host", c.host.as_str()),
                    ("controller", id.as_str()),
                    ("port", port.as_str()),
                ];
                (labels, c)
            })
            .collect();
        let per =
            |f: fn(&ControllerMetrics) -> u64| labelled.iter().map(move |(l, c)| (l.clone(), f(c)));
        out.gauges(
            "fabrik_controller_io_queues",
            "I/O queues connected to the controller.",
            None,
            per(|c| c.io_queues),
        )?;
        out.counters(
            "fabrik_controller_read_ops",
            "Read commands the host completed through this controller.",
            None,
            per(|c| c.read_ops),
        )?;
        out.counters(
            "fabrik_controller_write_ops",
            "Write commands the host completed through this controller.",
            None,
            per(|c| c.write_ops),
        )?;
        out.counters(
            "fabrik_controller_read",
            "Bytes the host read through this controller.",
            Some(Unit::Bytes),
            per(|c| c.read_bytes),
        )?;
        out.counters(
            "fabrik_controller_write",
            "Bytes the host wrote through this controller.",
            Some(Unit::Bytes),
            per(|c| c.write_bytes),
        )?;
        out.counters(
            "fabrik_controller_throttled_ops",
            "Commands that waited for the host's QoS limits.",
            None,
            per(|c| c.throttled_ops),
        )?;
        out.counters(
            "fabrik_controller_throttled",
            "Time commands waited for the host's QoS limits, summed.",
            Some(Unit::Seconds),
            labelled
                .iter()
                .map(|(l, c)| (l.clone(), c.throttled_seconds)),
        )
    }
}

/// Writes metric families: one descriptor, then one sample (set) per label set.
struct Out<'a, 'b>(&'a mut DescriptorEncoder<'b>);

impl Out<'_, '_> {
    fn counters<'l, V: EncodeCounterValue>(
        &mut self,
        name: &str,
        help: &str,
        unit: Option<Unit>,
        samples: impl IntoIterator<Item = (Labels<'l>, V)>,
    ) -> Result<(), std::fmt::Error> {
        let mut family =
            self.0
                .encode_descriptor(name, help, unit.as_ref(), MetricType::Counter)?;
        for (labels, value) in samples {
            ConstCounter::new(value).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }

    fn gauges<'l, V: EncodeGaugeValue>(
        &mut self,
        name: &str,
        help: &str,
        unit: Option<Unit>,
        samples: impl IntoIterator<Item = (Labels<'l>, V)>,
    ) -> Result<(), std::fmt::Error> {
        let mut family = self
            .0
            .encode_descriptor(name, help, unit.as_ref(), MetricType::Gauge)?;
        for (labels, value) in samples {
            ConstGauge::new(value).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }

    fn histograms<'l, 'h>(
        &mut self,
        name: &str,
        help: &str,
        samples: impl IntoIterator<Item = (Labels<'l>, &'h Histogram)>,
    ) -> Result<(), std::fmt::Error> {
        let mut family =
            self.0
                .encode_descriptor(name, help, Some(&Unit::Seconds), MetricType::Histogram)?;
        for (labels, h) in samples {
            family
                .encode_family(&labels)?
                .encode_histogram::<NoLabelSet>(
                    h.sum_seconds,
                    h.count(),
                    &h.bounded_buckets(),
                    None,
                )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Snapshot {
        let mut read_latency = Histogram {
            buckets: vec![0; LATENCY_BUCKETS.len() + 1],
            sum_seconds: 0.000_012,
        };
        read_latency.buckets[1] = 1; // 10 µs bucket
        Snapshot {
            version: "0.1.0".into(),
            box_name: "jbof-a".into(),
            uptime_seconds: 12.5,
            drives: vec![DriveMetrics {
                drive: "03".into(),
                backend: "ram".into(),
                subsystem: "nqn.2024-01.io.fabrik:jbof-a:drive-03".into(),
                capacity_bytes: 1 << 30,
                composed_to: vec!["nqn.2014-08.org.nvmexpress:uuid:gpu-a".into()],
                read_ops: 1,
                write_ops: 10,
                read_bytes: 4096,
                write_bytes: 40960,
                read_latency,
                health: DriveHealth {
                    state: "ok".into(),
                    source: "smart".into(),
                    temperature_celsius: Some(41),
                    percentage_used: Some(3),
                    power_on_hours: 2,
                    media_errors: 4,
                    ..DriveHealth::default()
                },
                ..DriveMetrics::default()
            }],
            ports: vec![PortMetrics {
                port: 1,
                transport: "tcp".into(),
                address: "127.0.0.1:4420".into(),
                connections_accepted: 2,
                connections_open: 2,
                received_bytes: 100,
                sent_bytes: 200,
                tls_handshake_failures: 0,
            }],
            controllers: vec![ControllerMetrics {
                subsystem: "nqn.2024-01.io.fabrik:jbof-a:drive-03".into(),
                host: "nqn.2014-08.org.nvmexpress:uuid:\"quoted\"".into(),
                controller: 1,
                port: 1,
                io_queues: 1,
                write_ops: 10,
                write_bytes: 40960,
                ..ControllerMetrics::default()
            }],
            ana_groups: vec![AnaGroupMetrics {
                group: "1".into(),
                state: AnaState::Inaccessible,
                changes: 3,
            }],
            module: ModuleMetrics {
                name: "b".into(),
                maintenance: true,
                io_in_flight: 7,
            },
            cdc: Some(CdcMetrics {
                boxes: 2,
                hosts: 1,
                host_logs: 5,
                box_reads_failed: 1,
            }),
            volumes: vec![VolumeMetrics {
                volume: "r5".into(),
                level: "raid5".into(),
                state: "rebuilding".into(),
                members: vec![
                    ("00".into(), "active".into()),
                    ("05".into(), "rebuilding".into()),
                ],
                rebuild_progress: Some(0.25),
                reconstructed_reads: 9,
                ..Default::default()
            }],
        }
    }

    #[test]
    fn openmetrics_has_units_totals_buckets_and_eof() {
        let text = encode(&sample(), Format::OpenMetrics);
        for line in [
            "fabrik_volume_state{volume=\"r5\",state=\"rebuilding\"} 1",
            "fabrik_volume_state{volume=\"r5\",state=\"optimal\"} 0",
            "fabrik_volume_member_state{volume=\"r5\",drive=\"05\",state=\"rebuilding\"} 1",
            "fabrik_volume_rebuild_progress{volume=\"r5\"} 0.25",
            "fabrik_volume_reconstructed_reads_total{volume=\"r5\"} 9",
            "fabrik_drive_write_ops_total{drive=\"03\"} 10",
            "fabrik_drive_write_bytes_total{drive=\"03\"} 40960",
            "# UNIT fabrik_drive_read_latency_seconds seconds",
            "fabrik_drive_read_latency_seconds_bucket{le=\"0.000005\",drive=\"03\"} 0",
            "fabrik_drive_read_latency_seconds_bucket{le=\"0.00001\",drive=\"03\"} 1",
            "fabrik_drive_read_latency_seconds_bucket{le=\"+Inf\",drive=\"03\"} 1",
            "fabrik_drive_read_latency_seconds_count{drive=\"03\"} 1",
            "fabrik_drive_temperature_celsius{drive=\"03\"} 41.0",
            "fabrik_drive_endurance_used_ratio{drive=\"03\"} 0.03",
            "fabrik_drive_power_on_seconds{drive=\"03\"} 7200",
            "fabrik_drive_media_errors_total{drive=\"03\"} 4",
            "fabrik_drive_ready{drive=\"03\"} 1",
            "fabrik_drive_read_only{drive=\"03\"} 0",
            "fabrik_drive_composed_info{drive=\"03\",host=\"nqn.2014-08.org.nvmexpress:uuid:gpu-a\"} 1",
            "fabrik_port_received_bytes_total{port=\"1\",transport=\"tcp\",address=\"127.0.0.1:4420\"} 100",
            "fabrik_connected_hosts 1",
            "fabrik_uptime_seconds 12.5",
            "fabrik_ana_group_state{group=\"1\",state=\"inaccessible\"} 1",
            "fabrik_ana_group_state{group=\"1\",state=\"optimized\"} 0",
            "fabrik_ana_group_changes_total{group=\"1\"} 3",
            "fabrik_module_maintenance{module=\"b\"} 1",
            "fabrik_module_io_in_flight{module=\"b\"} 7",
            "fabrik_cdc_registrations{entity=\"box\"} 2",
            "fabrik_cdc_registrations{entity=\"host\"} 1",
            "fabrik_cdc_host_logs_total 5",
            "fabrik_cdc_box_reads_failed_total 1",
        ] {
            assert!(text.lines().any(|l| l == line), "no line {line:?} in\n{text}");
        }
        // Label values are escaped: a quote in a host NQN cannot break the exposition.
        assert!(text.contains(r#"host="nqn.2014-08.org.nvmexpress:uuid:\"quoted\"""#));
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn prometheus_text_names_counters_with_total() {
        let text = encode(&sample(), Format::PrometheusText);
        assert!(text.contains("# TYPE fabrik_drive_write_ops_total counter\n"));
        assert!(text.contains("fabrik_drive_write_ops_total{drive=\"03\"} 10\n"));
        assert!(!text.contains("# EOF"));
    }

    #[test]
    fn metrics_without_a_sensor_are_left_out() {
        let mut s = sample();
        s.drives[0].health.temperature_celsius = None;
        s.drives[0].health.percentage_used = None;
        let text = encode(&s, Format::OpenMetrics);
        assert!(!text.contains("fabrik_drive_temperature"));
        assert!(!text.contains("fabrik_drive_endurance_used"));
    }

    #[test]
    fn negotiation_follows_accept() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::negotiate(Some(prometheus)), Format::OpenMetrics);
        assert_eq!(Format::negotiate(Some("*/*")), Format::PrometheusText);
        assert_eq!(Format::negotiate(None), Format::PrometheusText);
    }
}
