//! Metrics: the snapshot a scrape takes of the counters (`stats`), walking the management
//! state for what they belong to, and the `/metrics` endpoint. The sums over stripes,
//! connections, controllers and namespaces are made here, when Prometheus scrapes.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use fabrik_api::metrics::{
    AnaGroupMetrics, ControllerMetrics, DriveMetrics, Histogram, ModuleMetrics, PortMetrics,
    Snapshot,
};
use fabrik_api::Management;
use tokio_util::sync::CancellationToken;

use crate::backend::Drive;
use crate::controller::{TargetState, ANONYMOUS_HOST};
use crate::management::Manager;
use crate::model::Port;

/// Takes the figures a scrape reports. Drives come from the drive registry (every drive of the
/// box once, exported or not); their health from [`Manager::drive_health`], as the REST API's.
/// Blocking (SMART logs are read by ioctl).
pub fn snapshot(manager: &Manager) -> Snapshot {
    let target = manager.target_state();
    let state = manager.state();
    // Hosts by alias, never by NQN: whoever reads the metrics could connect as a host whose
    // NQN they learnt.
    let alias = |nqn: &str| crate::state::host_alias(&state.alias_key, nqn);
    let mut composed: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for c in &state.compositions {
        for d in &c.drives {
            composed
                .entry(d.clone())
                .or_default()
                .push(alias(&c.host_nqn));
        }
    }
    let mut drives = Vec::new();
    for (id, drive) in manager.drive_registry() {
        let exported = manager.namespaces_of(id);
        let namespaces: Vec<_> = exported.iter().map(|(_, ns)| ns.clone()).collect();
        let info = drive.info();
        let mut d = DriveMetrics {
            drive: id.clone(),
            backend: info.kind.name().to_string(),
            subsystem: exported
                .first()
                .map(|(nqn, _)| nqn.clone())
                .unwrap_or_default(),
            capacity_bytes: info.capacity,
            composed_to: composed.remove(id).unwrap_or_default(),
            health: manager.drive_health(id, &namespaces),
            ..DriveMetrics::default()
        };
        // A drive exported in several namespaces: the sum over them.
        for ns in &namespaces {
            let s = &ns.stats;
            d.read_ops += s.read_commands();
            d.write_ops += s.write_commands();
            d.read_bytes += s.bytes_read();
            d.write_bytes += s.bytes_written();
            for c in s.io.all() {
                d.other_ops += c.other_commands.load(Relaxed);
                d.errors += c.errors.load(Relaxed);
                add_histogram(&mut d.read_latency, c.read_latency.snapshot());
                add_histogram(&mut d.write_latency, c.write_latency.snapshot());
            }
        }
        drives.push(d);
    }
    let ports = target
        .ports()
        .iter()
        .map(|p| port_metrics(target, p))
        .collect();
    let controllers = target
        .subsystems()
        .iter()
        .flat_map(|sub| sub.controllers())
        .map(|c| {
            let mut m = ControllerMetrics {
                subsystem: c.subnqn(),
                host: c.hostnqn.as_deref().map_or(ANONYMOUS_HOST.into(), alias),
                controller: c.cntlid,
                port: c.port.port_id,
                io_queues: c.io_queue_count() as u64,
                ..ControllerMetrics::default()
            };
            for io in c.io_counters.all() {
                m.read_ops += io.read_ops.load(Relaxed);
                m.write_ops += io.write_ops.load(Relaxed);
                m.read_bytes += io.read_bytes.load(Relaxed);
                m.write_bytes += io.write_bytes.load(Relaxed);
                m.throttled_ops += io.throttled_ops.load(Relaxed);
                m.throttled_seconds += io.throttled_ns.load(Relaxed) as f64 / 1e9;
            }
            m
        })
        .collect();
    Snapshot {
        cdc: target.cdc.as_ref().map(|d| d.metrics()),
        volumes: manager.volume_metrics(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        box_name: target.box_name.clone(),
        uptime_seconds: target.started.elapsed().as_secs_f64(),
        drives,
        ports,
        controllers,
        ana_groups: manager
            .ana_groups()
            .into_iter()
            .map(|g| AnaGroupMetrics {
                group: g.id.to_string(),
                state: g.state,
                changes: g.change_count,
            })
            .collect(),
        module: {
            let m = manager.module();
            ModuleMetrics {
                name: m.name.unwrap_or_default(),
                maintenance: m.maintenance,
                io_in_flight: m.io_in_flight,
            }
        },
    }
}

fn add_histogram(total: &mut Histogram, h: Histogram) {
    if total.buckets.is_empty() {
        *total = h;
        return;
    }
    for (t, b) in total.buckets.iter_mut().zip(h.buckets) {
        *t += b;
    }
    total.sum_seconds += h.sum_seconds;
}

fn port_metrics(target: &TargetState, port: &Port) -> PortMetrics {
    let (accepted, open, rx, tx) = target.metrics.port(port.id).totals();
    PortMetrics {
        port: port.id,
        transport: port.transport.to_string(),
        address: port.addr.to_string(),
        connections_accepted: accepted,
        connections_open: open,
        received_bytes: rx,
        sent_bytes: tx,
        tls_handshake_failures: target.metrics.port(port.id).tls_failures(),
    }
}

/// The `GET /metrics` endpoint on its own address (the REST API's address serves it too).
pub struct MetricsEndpoint {
    addr: SocketAddr,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl MetricsEndpoint {
    /// Serves `/metrics` on `addr`; with a `token`, scrapes need `Authorization: Bearer`.
    pub async fn start(
        manager: Arc<Manager>,
        addr: SocketAddr,
        token: Option<String>,
    ) -> std::io::Result<MetricsEndpoint> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let router =
            fabrik_api::metrics::router(move || snapshot(&manager), token.map(|t| vec![t]));
        let stop = CancellationToken::new();
        let task = tokio::spawn({
            let stop = stop.clone();
            async move {
                let stopped = async move { stop.cancelled().await };
                if let Err(e) = fabrik_api::metrics::serve(listener, router, stopped).await {
                    tracing::error!("metrics endpoint failed: {e}");
                }
            }
        });
        Ok(MetricsEndpoint { addr, stop, task })
    }

    /// The address actually bound.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub async fn shutdown(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::guard::Guarded;
    use crate::backend::{ram::RamDrive, BoxFuture, DriveError, DriveInfo};
    use bytes::Bytes;
    use fabrik_api::Management;
    use fabrik_proto::nvme::log::SmartLog;

    /// A RAM drive that has a SMART log, as an NVMe block drive does.
    struct SmartRam(RamDrive);

    impl Drive for SmartRam {
        fn info(&self) -> &DriveInfo {
            self.0.info()
        }
        fn smart_log(&self) -> Option<std::io::Result<SmartLog>> {
            Some(Ok(SmartLog {
                critical_warning: 0x02,
                temperature_k: 310,
                percentage_used: 7,
                power_on_hours: 1234,
                media_errors: 3,
                ..SmartLog::default()
            }))
        }
        fn read(&self, offset: u64, len: usize) -> BoxFuture<'_, Result<Bytes, DriveError>> {
            self.0.read(offset, len)
        }
        fn write(
            &self,
            offset: u64,
            data: Bytes,
            fua: bool,
        ) -> BoxFuture<'_, Result<(), DriveError>> {
            self.0.write(offset, data, fua)
        }
        fn flush(&self) -> BoxFuture<'_, Result<(), DriveError>> {
            self.0.flush()
        }
        fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, Result<(), DriveError>> {
            self.0.write_zeroes(offset, len)
        }
        fn deallocate(&self, offset: u64, len: u64) -> BoxFuture<'_, Result<(), DriveError>> {
            self.0.deallocate(offset, len)
        }
    }

    /// The metrics' health gauges and the REST drive view come from one place: with a SMART
    /// log, both show its figures; without, both show fabrikd's.
    #[test]
    fn drive_health_is_the_drive_views() {
        let mut config = crate::config::Config::default_jbof("/nonexistent".into());
        config.drives = 2;
        config.backend = crate::backend::BackendKind::Ram;
        config.drive_size = 1 << 20;
        let state = crate::state::State::seed(&config);
        let ids: Vec<String> = state.drives.iter().map(|d| d.id.clone()).collect();
        let mut drives: BTreeMap<String, Arc<dyn Drive>> = BTreeMap::new();
        drives.insert(
            ids[0].clone(),
            Arc::new(SmartRam(RamDrive::new(1 << 20, 4096).unwrap())),
        );
        drives.insert(
            ids[1].clone(),
            Arc::new(RamDrive::new(1 << 20, 4096).unwrap()),
        );
        let guarded = |d: Arc<dyn Drive>| Arc::new(Guarded::new(d, None, Box::new(|_| {})));
        let manager = Manager::new(
            Arc::new(TargetState::new("box".into())),
            drives.into_iter().map(|(id, d)| (id, guarded(d))).collect(),
            state,
            None,
            CancellationToken::new(),
            None,
            Default::default(),
        );
        let snap = snapshot(&manager);
        assert_eq!(snap.drives.len(), 2);
        for (d, id) in snap.drives.iter().zip(&ids) {
            assert_eq!(&d.drive, id);
            assert_eq!(d.health, manager.drive(id).unwrap().health, "drive {id}");
        }
        let smart = &snap.drives[0].health;
        assert_eq!(
            (smart.source.as_str(), smart.state.as_str()),
            ("smart", "warning")
        );
        assert_eq!(
            (smart.temperature_celsius, smart.percentage_used),
            (Some(37), Some(7))
        );
        assert_eq!((smart.media_errors, smart.power_on_hours), (3, 1234));
        assert_eq!(snap.drives[1].health.source, "fabrikd");
        let text = fabrik_api::metrics::encode(&snap, fabrik_api::metrics::Format::PrometheusText);
        let d0 = &ids[0];
        for line in [
            format!("fabrik_drive_temperature_celsius{{drive=\"{d0}\"}} 37.0"),
            format!("fabrik_drive_endurance_used_ratio{{drive=\"{d0}\"}} 0.07"),
            format!("fabrik_drive_critical_warning{{drive=\"{d0}\"}} 2"),
            format!("fabrik_drive_media_errors_total{{drive=\"{d0}\"}} 3"),
            format!(
                "fabrik_drive_power_on_seconds{{drive=\"{d0}\"}} {}",
                1234 * 3600
            ),
            format!("fabrik_drive_ready{{drive=\"{d0}\"}} 1"),
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        }
        assert!(text.contains("health_source=\"smart\""));
        assert!(text.contains("health_source=\"fabrikd\""));
    }
}
