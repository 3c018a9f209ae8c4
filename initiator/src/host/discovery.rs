//! Reading the discovery log the way libnvme does (NVMEOF-FACTS 5.3): the header first, then the
//! whole log in pieces of at most 4 KiB, then the header again; if the generation counter moved
//! in between, start over.

use std::net::{IpAddr, SocketAddr};

use bytes::Bytes;
use fabrik_proto::fabrics::dim::DimData;
use fabrik_proto::fabrics::discovery::{
    decode_discovery_log, subtype, DiscoveryLogEntry, DiscoveryLogHeader, DISCOVERY_ENTRY_LEN,
    DISCOVERY_HEADER_LEN,
};
use fabrik_proto::nvme::admin::AdminCommand;
use fabrik_proto::nvme::log::lid;

use crate::error::HostError;
use crate::host::controller::Controller;
use crate::host::options::{ConnectOptions, HostIdentity};

/// Attempts before giving up on a log that keeps changing (libnvme's default `max_retries`).
const MAX_ATTEMPTS: usize = 10;
/// Bytes per Get Log Page command, as libnvme splits it.
const CHUNK: usize = 4096;
/// A sanity bound on NUMREC: more records than this is not a log we will allocate for.
const MAX_RECORDS: u64 = 64 * 1024;

/// A discovery log, read consistently (one generation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiscoveryLog {
    pub genctr: u64,
    pub entries: Vec<DiscoveryLogEntry>,
}

impl Controller {
    /// Reads the whole discovery log (for discovery controllers).
    pub async fn discovery_log(&self) -> Result<DiscoveryLog, HostError> {
        for _ in 0..MAX_ATTEMPTS {
            let first = self.discovery_header(true).await?;
            if first.numrec == 0 {
                return Ok(DiscoveryLog {
                    genctr: first.genctr,
                    entries: Vec::new(),
                });
            }
            if first.numrec > MAX_RECORDS {
                return Err(HostError::protocol(
                    0,
                    format!("discovery log claims {} records", first.numrec),
                ));
            }
            let len = DISCOVERY_HEADER_LEN + first.numrec as usize * DISCOVERY_ENTRY_LEN;
            let mut page = Vec::with_capacity(len);
            while page.len() < len {
                let n = CHUNK.min(len - page.len());
                let part = self
                    .get_log_page_with(lid::DISCOVERY, 0, n, page.len() as u64, true)
                    .await?;
                page.extend_from_slice(&part);
            }
            let last = self.discovery_header(false).await?;
            if last.genctr != first.genctr {
                continue;
            }
            let (header, entries) = decode_discovery_log(&page).map_err(|e| {
                HostError::protocol(0, format!("discovery log data is invalid: {e}"))
            })?;
            if header.genctr != first.genctr || header.numrec != first.numrec {
                continue;
            }
            return Ok(DiscoveryLog {
                genctr: header.genctr,
                entries,
            });
        }
        Err(HostError::protocol(
            0,
            format!("discovery log kept changing (GENCTR) over {MAX_ATTEMPTS} attempts"),
        ))
    }

    /// Discovery Information Management (TP8010): registers (`dim::tas::REGISTER`),
    /// deregisters or updates `data`'s entity with a Central Discovery Controller. fabrikd uses it
    /// to register a box with a CDC, as `nvme dim` does for a host. Deregistering sends the same
    /// data as registering (libnvme does). The data goes host to controller; nothing comes back
    /// but the completion, whose error status (e.g. Invalid Discovery Information, Insufficient
    /// Discovery Resources, or Invalid Opcode from a controller that is not a CDC) is a
    /// [`HostError::Status`].
    pub async fn discovery_info_management(
        &self,
        tas: u8,
        data: &DimData,
    ) -> Result<(), HostError> {
        if tas > 0xf {
            return Err(HostError::Invalid(format!(
                "DIM task {tas} does not fit in TAS (4 bits)"
            )));
        }
        let sqe = AdminCommand::DiscoveryInfoManagement { tas }.to_sqe(0);
        self.submit_admin(sqe, Some(Bytes::from(data.encode())), 0)
            .await
            .map(|_| ())
    }

    async fn discovery_header(&self, rae: bool) -> Result<DiscoveryLogHeader, HostError> {
        let data = self
            .get_log_page_with(lid::DISCOVERY, 0, DISCOVERY_HEADER_LEN, 0, rae)
            .await?;
        DiscoveryLogHeader::decode(&data)
            .map_err(|e| HostError::protocol(0, format!("discovery log header is invalid: {e}")))
    }
}

/// Referral chains reaching more discovery controllers than this are a loop or a
/// misconfiguration.
const MAX_DISCOVERY_CONTROLLERS: usize = 16;

/// `nvme discover`: connects to the discovery controller at `addr` as host `hostnqn` (keep-alive
/// off), reads the log and disconnects.
pub async fn discover(addr: SocketAddr, hostnqn: &str) -> Result<DiscoveryLog, HostError> {
    let host = HostIdentity::with_nqn(hostnqn);
    discover_with(ConnectOptions::discovery(addr).with_host(&host)).await
}

/// As [`discover`], with every connect option (host identity, host address and interface to
/// connect from).
pub async fn discover_with(opts: ConnectOptions) -> Result<DiscoveryLog, HostError> {
    let ctrl = Controller::connect(opts).await?;
    let log = ctrl.discovery_log().await;
    let shutdown = ctrl.shutdown().await;
    let log = log?;
    shutdown?;
    Ok(log)
}

/// An NVM subsystem the discovery controllers offer this host, with every port it is offered
/// through (in the order they were found).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OfferedSubsystem {
    pub subnqn: String,
    pub paths: Vec<SocketAddr>,
}

/// `nvme connect-all`'s view: every NVM subsystem the discovery controller `opts` names offers
/// this host over `opts.transport`, referrals followed (each discovery controller once, the
/// same connect options for each). The target lists only what the host NQN may use; entries of
/// other transports are left out.
pub async fn discover_all(opts: ConnectOptions) -> Result<Vec<OfferedSubsystem>, HostError> {
    let wanted = opts.transport.trtype();
    let first = opts.addr;
    let mut offered: Vec<OfferedSubsystem> = Vec::new();
    let mut pending = vec![first];
    let mut visited = Vec::new();
    while let Some(at) = pending.pop() {
        if visited.contains(&at) {
            continue;
        }
        if visited.len() == MAX_DISCOVERY_CONTROLLERS {
            return Err(HostError::Invalid(format!(
                "more than {MAX_DISCOVERY_CONTROLLERS} discovery controllers through referrals from {first}"
            )));
        }
        visited.push(at);
        let log = discover_with(ConnectOptions {
            addr: at,
            ..opts.clone()
        })
        .await?;
        for e in log.entries {
            if e.trtype != wanted || !matches!(e.subtype, subtype::NVM | subtype::REFERRAL) {
                continue;
            }
            let path = entry_address(&e).await?;
            if e.subtype == subtype::REFERRAL {
                pending.push(path);
                continue;
            }
            match offered.iter_mut().find(|o| o.subnqn == e.subnqn) {
                Some(o) if o.paths.contains(&path) => {}
                Some(o) => o.paths.push(path),
                None => offered.push(OfferedSubsystem {
                    subnqn: e.subnqn,
                    paths: vec![path],
                }),
            }
        }
    }
    Ok(offered)
}

/// The socket address of a discovery log entry (TRADDR an IP literal or a host name).
async fn entry_address(e: &DiscoveryLogEntry) -> Result<SocketAddr, HostError> {
    let bad = |what: &str| {
        HostError::protocol(
            0,
            format!(
                "discovery log entry for {} has {what} (TRADDR {:?}, TRSVCID {:?})",
                e.subnqn, e.traddr, e.trsvcid
            ),
        )
    };
    let port: u16 = e
        .trsvcid
        .trim()
        .parse()
        .map_err(|_| bad("a port that is not a number"))?;
    let host = e.traddr.trim();
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    let mut addrs = tokio::net::lookup_host((host, port))
        .await
        .map_err(|err| HostError::io(format!("resolving {host} (discovery log entry)"), err))?;
    addrs
        .next()
        .ok_or_else(|| bad("an address that does not resolve"))
}
