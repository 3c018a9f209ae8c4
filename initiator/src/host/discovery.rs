//! Reading the discovery log the way libnvme does (NVMEOF-FACTS 5.3): the header first, then the
//! whole log in pieces of at most 4 KiB, then the header again; if the generation counter moved
//! in between, start over.

use std::net::SocketAddr;

use fabrik_proto::fabrics::discovery::{
    decode_discovery_log, DiscoveryLogEntry, DiscoveryLogHeader, DISCOVERY_ENTRY_LEN,
    DISCOVERY_HEADER_LEN,
};
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

    async fn discovery_header(&self, rae: bool) -> Result<DiscoveryLogHeader, HostError> {
        let data = self
            .get_log_page_with(lid::DISCOVERY, 0, DISCOVERY_HEADER_LEN, 0, rae)
            .await?;
        DiscoveryLogHeader::decode(&data)
            .map_err(|e| HostError::protocol(0, format!("discovery log header is invalid: {e}")))
    }
}

/// `nvme discover`: connects to the discovery controller at `addr` as host `hostnqn` (keep-alive
/// off), reads the log and disconnects.
pub async fn discover(addr: SocketAddr, hostnqn: &str) -> Result<DiscoveryLog, HostError> {
    let host = HostIdentity::with_nqn(hostnqn);
    let ctrl = Controller::connect(ConnectOptions::discovery(addr).with_host(&host)).await?;
    let log = ctrl.discovery_log().await;
    let shutdown = ctrl.shutdown().await;
    let log = log?;
    shutdown?;
    Ok(log)
}
