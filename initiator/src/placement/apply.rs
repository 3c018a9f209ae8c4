//! Carrying out a plan: the composition that gives this host the plan's drives at the box's
//! REST API, and fabrik's own userspace sessions as the alternative to the kernel's
//! `nvme connect` (each planned connection made and proven with one read).

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};

use fabrik_api::client::{Client, ClientError};
use fabrik_api::models::{Composition, CompositionRequest, Drive as ApiDrive, Port as ApiPort};

use crate::host::{ConnectOptions, Controller, HostIdentity};
use crate::HostError;

use super::{Connection, Plan, TargetPort, Transport};

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("the box's API refused the composition: {0}")]
    Refused(ClientError),
    #[error("asking the box's API for its drives: {0}")]
    Inventory(ClientError),
    #[error("the box has no drive exported as {0} (its API lists none in that subsystem)")]
    UnknownSubsystem(String),
    #[error("the plan has no drive to compose")]
    NothingToCompose,
}

/// The plan's connections, in plan order.
pub fn connections(plan: &Plan) -> impl Iterator<Item = &Connection> {
    plan.gpus.iter().flat_map(|g| &g.connections)
}

/// The composition request for the plan: every drive of every planned subsystem (a subsystem
/// holds one drive as fabrikd exports them, but may hold several), restricted to the box ports
/// the plan connects to when the API knows them all by address.
pub fn composition_request(
    plan: &Plan,
    host_nqn: &str,
    drives: &[ApiDrive],
    ports: &[ApiPort],
) -> Result<CompositionRequest, ApplyError> {
    let mut ids: Vec<String> = Vec::new();
    let mut subsystems = BTreeSet::new();
    for c in connections(plan) {
        if !subsystems.insert(c.nqn.as_str()) {
            continue;
        }
        let before = ids.len();
        for d in drives.iter().filter(|d| d.subsystems.contains(&c.nqn)) {
            if !ids.contains(&d.id) {
                ids.push(d.id.clone());
            }
        }
        if ids.len() == before {
            return Err(ApplyError::UnknownSubsystem(c.nqn.clone()));
        }
    }
    if ids.is_empty() {
        return Err(ApplyError::NothingToCompose);
    }
    let mut port_ids: Vec<u16> = Vec::new();
    for c in connections(plan) {
        match ports.iter().find(|p| same_port(p, &c.target)) {
            Some(p) if !port_ids.contains(&p.id) => port_ids.push(p.id),
            Some(_) => {}
            None => {
                port_ids.clear();
                break;
            }
        }
    }
    port_ids.sort_unstable();
    Ok(CompositionRequest {
        host_nqn: host_nqn.to_string(),
        drives: ids,
        ports: (!port_ids.is_empty()).then_some(port_ids),
        shared: false,
    })
}

fn same_port(p: &ApiPort, t: &TargetPort) -> bool {
    let addr_eq = match (p.address.parse::<IpAddr>(), t.traddr.parse::<IpAddr>()) {
        (Ok(a), Ok(b)) => a == b,
        _ => p.address == t.traddr,
    };
    p.transport == t.trtype.as_str() && p.service_id == t.trsvcid && addr_eq
}

/// What applying a plan asks of the box: a composition of the drives not yet composed to this
/// host (None: all of them are), and this host's compositions that hold the others already.
#[derive(Debug, Clone)]
pub struct CompositionPlan {
    pub request: Option<CompositionRequest>,
    pub existing: Vec<Composition>,
}

/// Reads the box's drives, ports and compositions (changes nothing) and works out the
/// composition the plan needs; running `--apply` again composes nothing twice.
pub async fn composition_plan(
    client: &Client,
    plan: &Plan,
    host_nqn: &str,
) -> Result<CompositionPlan, ApplyError> {
    let drives = client.drives().await.map_err(ApplyError::Inventory)?;
    let ports = client.ports().await.map_err(ApplyError::Inventory)?;
    let mine: Vec<Composition> = client
        .compositions()
        .await
        .map_err(ApplyError::Inventory)?
        .into_iter()
        .filter(|c| c.host_nqn == host_nqn)
        .collect();
    let mut req = composition_request(plan, host_nqn, &drives, &ports)?;
    let existing: Vec<Composition> = mine
        .into_iter()
        .filter(|c| c.drives.iter().any(|d| req.drives.contains(d)))
        .collect();
    req.drives
        .retain(|d| !existing.iter().any(|c| c.drives.contains(d)));
    Ok(CompositionPlan {
        request: (!req.drives.is_empty()).then_some(req),
        existing,
    })
}

/// Composes the plan's drives to `host_nqn` (those not composed to it already): the new
/// composition, if one was needed.
pub async fn compose(
    client: &Client,
    plan: &Plan,
    host_nqn: &str,
) -> Result<(Option<Composition>, CompositionPlan), ApplyError> {
    let cp = composition_plan(client, plan, host_nqn).await?;
    let new = match &cp.request {
        Some(req) => Some(client.compose(req).await.map_err(ApplyError::Refused)?),
        None => None,
    };
    Ok((new, cp))
}

/// Planned connections that none of `comps` lists (a box port the API does not know by the
/// plan's address): the connect may still work, but the box did not confirm it.
pub fn unconfirmed<'a>(plan: &'a Plan, comps: &[&Composition]) -> Vec<&'a Connection> {
    connections(plan)
        .filter(|c| {
            !comps.iter().flat_map(|comp| &comp.connect).any(|k| {
                k.subsystem == c.nqn
                    && k.transport == c.target.trtype.as_str()
                    && k.service_id == c.target.trsvcid
                    && k.address == c.target.traddr
            })
        })
        .collect()
}

/// One planned connection made by fabrik's userspace host: what it read.
#[derive(Debug)]
pub struct SessionCheck {
    pub nqn: String,
    pub addr: SocketAddr,
    pub nsid: u32,
    pub bytes_read: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("cannot resolve {0}")]
    Resolve(String),
    #[error("{0}")]
    Host(#[from] HostError),
    #[error("the subsystem has no active namespace")]
    NoNamespace,
    #[error("read {got} bytes of namespace {nsid}, expected one {want}-byte block")]
    ShortRead { nsid: u32, got: usize, want: u32 },
}

/// The userspace host's options for one planned connection as `host`: the target port's
/// transport and address, the subsystem, and the source address and (NVMe/TCP only, as
/// `nvme connect` takes it) the interface the plan gives.
pub async fn connect_options(
    c: &Connection,
    host: &HostIdentity,
) -> Result<ConnectOptions, SessionError> {
    let addr = tokio::net::lookup_host((c.target.traddr.as_str(), c.target.trsvcid))
        .await
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| {
            SessionError::Resolve(format!("{}:{}", c.target.traddr, c.target.trsvcid))
        })?;
    let mut opts = ConnectOptions::new(addr, c.nqn.clone()).with_host(host);
    opts.transport = c.target.trtype;
    opts.host_traddr = c.host_traddr;
    if c.target.trtype == Transport::Tcp {
        opts.host_iface = c.host_iface.clone();
    }
    Ok(opts)
}

/// Connects one planned connection as `host` with the userspace host (the source address is
/// not bound: the userspace host leaves the route to the kernel), reads the first block of the
/// first namespace, checks its length and disconnects.
pub async fn check_session(
    c: &Connection,
    host: &HostIdentity,
) -> Result<SessionCheck, SessionError> {
    let mut opts = connect_options(c, host).await?;
    // `place --apply --userspace` proves that the drive answers, from wherever the kernel
    // routes (as documented); `bench --gpu` is what runs bound to the plan's ports.
    opts.host_traddr = None;
    opts.host_iface = None;
    let addr = opts.addr;
    let ctrl = Controller::connect(opts).await?;
    let result = read_first_block(&ctrl).await;
    let _ = ctrl.shutdown().await;
    let (nsid, bytes_read) = result?;
    Ok(SessionCheck {
        nqn: c.nqn.clone(),
        addr,
        nsid,
        bytes_read,
    })
}

async fn read_first_block(ctrl: &Controller) -> Result<(u32, usize), SessionError> {
    let nsid = *ctrl
        .active_namespaces()
        .await?
        .first()
        .ok_or(SessionError::NoNamespace)?;
    let want = ctrl.lba_size(nsid).await?;
    let data = ctrl.read(nsid, 0, 1).await?;
    if data.len() != want as usize {
        return Err(SessionError::ShortRead {
            nsid,
            got: data.len(),
            want,
        });
    }
    Ok((nsid, data.len()))
}
