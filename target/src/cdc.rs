//! The central discovery controller (`fabrikd --role cdc`): the boxes registered with it, and
//! each host's discovery log, made from theirs.
//!
//! Boxes register with Discovery Information Management (TP8010), the standard way: a box's
//! entry is its discovery controller's address, and the box sends an update whenever its own
//! discovery log changes. Which subsystems a host may see stays where it is decided, on each
//! box (its subsystems' allowed hosts): for a host's log, the CDC reads every registered box's
//! discovery log as that host would, and lists what each answers. The CDC then needs no copy of
//! any box's access lists and no credentials for their management APIs, and a box's access
//! check is the one its own discovery controller makes.
//!
//! A box registered through a connection that ends (the box stopped or died) is gone with it.
//! Hosts' own registrations (`nvme dim`) are kept until deregistered; they are listed, and make
//! no difference to any log.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fabrik_initiator::{ConnectOptions, HostIdentity};
use fabrik_proto::fabrics::dim::{etype, tas, DimData, DimEntry};
use fabrik_proto::fabrics::discovery::{subtype, DiscoveryLogEntry};
use fabrik_proto::fabrics::Transport;
use fabrik_proto::Status;
use futures_util::future::join_all;

use crate::timer;

/// How long the CDC waits for one box's discovery log before leaving the box out.
const BOX_TIMEOUT: Duration = Duration::from_secs(3);
/// Registrations beyond this are refused (Insufficient Discovery Resources).
const MAX_REGISTRATIONS: usize = 1024;
/// Hosts whose logs are kept; past this the cache starts over.
const MAX_CACHED_HOSTS: usize = 4096;
/// Boxes' logs read at once. A change sends every persistent host to read its log again at
/// the same moment, each read a connection to every box: the herd waits its turn here instead
/// of opening thousands of connections at once.
const MAX_CONCURRENT_READS: usize = 64;

/// One entity registered with the CDC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registration {
    /// ETYPE: a box's discovery controller (DDC) or a host.
    pub etype: u16,
    /// The entity's NQN (EID).
    pub eid: String,
    /// Its name (ENAME).
    pub ename: String,
    /// Its entries, with an empty TRADDR replaced by the address it registered from.
    pub entries: Vec<DimEntry>,
    /// The discovery controller it registered through.
    pub via: u16,
}

impl Registration {
    /// Where this box's discovery controller answers: its NVMe/TCP entries' addresses.
    fn discovery_addrs(&self) -> Vec<SocketAddr> {
        self.entries
            .iter()
            .filter(|e| e.trtype == Transport::Tcp.trtype())
            .filter_map(|e| {
                let ip: IpAddr = e.traddr.parse().ok()?;
                Some(SocketAddr::new(ip, e.trsvcid.parse().ok()?))
            })
            .collect()
    }
}

/// What a DIM command changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// The set of boxes (or what one offers) changed: hosts' logs change with it.
    Boxes,
    /// Only a host's registration changed.
    Hosts,
}

/// Reads one box's discovery log as a host: (box address, host NQN) to its entries.
pub type Fetch = Arc<
    dyn Fn(
            SocketAddr,
            String,
        )
            -> futures_util::future::BoxFuture<'static, Result<Vec<DiscoveryLogEntry>, String>>
        + Send
        + Sync,
>;

/// A host's entries, shared by its reads of one generation.
type HostLog = Arc<Vec<DiscoveryLogEntry>>;

/// The registrations and the hosts' logs made from them.
pub struct Directory {
    registrations: Mutex<BTreeMap<String, Registration>>,
    /// Each host's log at a generation of the CDC's discovery log: a host reads the header,
    /// the entries and the header again, and must see one generation throughout.
    /// The hosts' logs of one generation (the newest read), by host NQN.
    logs: Mutex<(u64, HashMap<String, HostLog>)>,
    fetch: Fetch,
    reads: tokio::sync::Semaphore,
    host_logs: AtomicU64,
    box_reads_failed: AtomicU64,
}

impl Default for Directory {
    fn default() -> Self {
        Directory::with_fetch(Arc::new(|addr, hostnqn| {
            Box::pin(async move { fetch_box_log(addr, hostnqn).await })
        }))
    }
}

/// A box's discovery log as `hostnqn` sees it, over NVMe/TCP (keep-alive off, as `nvme
/// discover`).
async fn fetch_box_log(
    addr: SocketAddr,
    hostnqn: String,
) -> Result<Vec<DiscoveryLogEntry>, String> {
    let opts = ConnectOptions::discovery(addr).with_host(&HostIdentity::with_nqn(hostnqn));
    match timer::timeout(BOX_TIMEOUT, fabrik_initiator::host::discover_with(opts)).await {
        Ok(Ok(log)) => Ok(log.entries),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no discovery log within {BOX_TIMEOUT:?}")),
    }
}

impl Directory {
    /// A directory reading boxes' logs with `fetch` (tests give their own).
    pub fn with_fetch(fetch: Fetch) -> Directory {
        Directory {
            registrations: Mutex::default(),
            logs: Mutex::default(),
            fetch,
            reads: tokio::sync::Semaphore::new(MAX_CONCURRENT_READS),
            host_logs: AtomicU64::new(0),
            box_reads_failed: AtomicU64::new(0),
        }
    }

    /// Registrations by kind, and the reads of boxes' logs.
    pub fn metrics(&self) -> fabrik_api::metrics::CdcMetrics {
        let regs = self.registrations.lock().unwrap();
        let boxes = regs.values().filter(|r| r.etype == etype::DDC).count() as u64;
        fabrik_api::metrics::CdcMetrics {
            boxes,
            hosts: regs.len() as u64 - boxes,
            host_logs: self.host_logs.load(Ordering::Relaxed),
            box_reads_failed: self.box_reads_failed.load(Ordering::Relaxed),
        }
    }

    /// Every registration, by EID.
    pub fn registrations(&self) -> Vec<Registration> {
        self.registrations
            .lock()
            .unwrap()
            .values()
            .cloned()
            .collect()
    }

    /// A Discovery Information Management command with task `task` and `data`, received by
    /// discovery controller `via` from `peer`. `Err` is the completion status.
    pub fn manage(
        &self,
        task: u8,
        data: &DimData,
        via: u16,
        peer: IpAddr,
    ) -> Result<Option<Change>, Status> {
        let change = match data.etype {
            etype::DDC => Change::Boxes,
            etype::HOST => Change::Hosts,
            // A CDC registering with a CDC is not something fabrik does.
            _ => return Err(Status::INVALID_DISCOVERY_INFO),
        };
        if data.eid.is_empty() {
            return Err(Status::INVALID_DISCOVERY_INFO);
        }
        let mut regs = self.registrations.lock().unwrap();
        match task {
            tas::REGISTER | tas::UPDATE => {
                if data.etype == etype::DDC && data.entries.is_empty() {
                    // A box with no address to reach its discovery controller at.
                    return Err(Status::INVALID_DISCOVERY_INFO);
                }
                if !regs.contains_key(&data.eid) && regs.len() >= MAX_REGISTRATIONS {
                    return Err(Status::INSUFFICIENT_DISCOVERY_RESOURCES);
                }
                let entries = data
                    .entries
                    .iter()
                    .cloned()
                    .map(|mut e| {
                        // TP8010: an empty TRADDR means the address the command came from.
                        if e.traddr.is_empty() {
                            e.traddr = peer.to_string();
                        }
                        e
                    })
                    .collect();
                let reg = Registration {
                    etype: data.etype,
                    eid: data.eid.clone(),
                    ename: data.ename.clone(),
                    entries,
                    via,
                };
                tracing::info!(eid = %reg.eid, name = %reg.ename, entity = entity_name(reg.etype), task = task_name(task), "registered with the CDC");
                regs.insert(reg.eid.clone(), reg);
            }
            tas::DEREGISTER => {
                if regs.remove(&data.eid).is_none() {
                    return Ok(None);
                }
                tracing::info!(eid = %data.eid, "deregistered from the CDC");
            }
            _ => return Err(Status::INVALID_FIELD),
        }
        Ok(Some(change))
    }

    /// Discovery controller `via` is gone: so are the boxes that registered through it (a box
    /// keeps its registration's connection for as long as it serves). True if any was.
    pub fn controller_gone(&self, via: u16) -> bool {
        let mut regs = self.registrations.lock().unwrap();
        let before = regs.len();
        regs.retain(|eid, r| {
            let gone = r.etype == etype::DDC && r.via == via;
            if gone {
                tracing::warn!(eid = %eid, name = %r.ename, "box lost its connection to the CDC: its subsystems leave the discovery log");
            }
            !gone
        });
        regs.len() != before
    }

    /// Host `hostnqn`'s entries at generation `genctr`: what every registered box's discovery
    /// controller offers it (NVM subsystems only, each path once). A box that does not answer
    /// is left out, and said so in the log.
    pub async fn log_for(&self, hostnqn: &str, genctr: u64) -> HostLog {
        {
            let (g, logs) = &*self.logs.lock().unwrap();
            if let Some(log) = logs.get(hostnqn).filter(|_| *g == genctr) {
                return log.clone();
            }
        }
        let boxes: Vec<Registration> = self
            .registrations
            .lock()
            .unwrap()
            .values()
            .filter(|r| r.etype == etype::DDC)
            .cloned()
            .collect();
        let reads = boxes.iter().map(|b| self.box_log(b, hostnqn));
        let mut paths = std::collections::HashSet::new();
        let entries: Vec<DiscoveryLogEntry> = join_all(reads)
            .await
            .into_iter()
            .flatten()
            .filter(|e| e.subtype == subtype::NVM)
            .filter(|e| {
                paths.insert((
                    e.trtype,
                    e.subnqn.clone(),
                    e.traddr.clone(),
                    e.trsvcid.clone(),
                ))
            })
            .collect();
        let log = Arc::new(entries);
        self.host_logs.fetch_add(1, Ordering::Relaxed);
        // A read of an older generation that ends late is answered, not kept: it must not
        // throw away the newer logs.
        let (g, logs) = &mut *self.logs.lock().unwrap();
        if genctr > *g || logs.len() >= MAX_CACHED_HOSTS {
            logs.clear();
            *g = genctr;
        }
        if genctr == *g {
            logs.insert(hostnqn.to_string(), log.clone());
        }
        log
    }

    /// One box's entries for `hostnqn`, from the first of its addresses that answers.
    async fn box_log(&self, reg: &Registration, hostnqn: &str) -> Vec<DiscoveryLogEntry> {
        let mut why = String::from("no NVMe/TCP address registered");
        for addr in reg.discovery_addrs() {
            let _turn = self.reads.acquire().await.expect("never closed");
            match (self.fetch)(addr, hostnqn.to_string()).await {
                Ok(entries) => return entries,
                Err(e) => why = format!("{addr}: {e}"),
            }
        }
        self.box_reads_failed.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(eid = %reg.eid, name = %reg.ename, host = %hostnqn, "box left out of the CDC's discovery log: {why}");
        Vec::new()
    }
}

/// A registration as the management API shows it.
pub fn view(r: &Registration) -> fabrik_api::models::CdcRegistration {
    fabrik_api::models::CdcRegistration {
        nqn: r.eid.clone(),
        name: r.ename.clone(),
        entity: entity_name(r.etype).into(),
        addresses: r
            .entries
            .iter()
            .filter(|_| r.etype == etype::DDC)
            .map(|e| fabrik_api::models::CdcAddress {
                transport: Transport::from_trtype(e.trtype)
                    .map_or(e.trtype.to_string(), |t| t.as_str().into()),
                traddr: e.traddr.clone(),
                trsvcid: e.trsvcid.clone(),
            })
            .collect(),
    }
}

fn entity_name(etype: u16) -> &'static str {
    match etype {
        etype::DDC => "box",
        etype::HOST => "host",
        _ => "other",
    }
}

fn task_name(task: u8) -> &'static str {
    match task {
        tas::REGISTER => "register",
        tas::UPDATE => "update",
        _ => "deregister",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabrik_proto::fabrics::discovery::{adrfam, Tsas};

    fn entry(subnqn: &str, traddr: &str, port: u16) -> DiscoveryLogEntry {
        DiscoveryLogEntry {
            trtype: Transport::Tcp.trtype(),
            adrfam: adrfam::IPV4,
            subtype: subtype::NVM,
            treq: 0,
            portid: 1,
            cntlid: 0xffff,
            asqsz: 32,
            eflags: 0,
            trsvcid: port.to_string(),
            subnqn: subnqn.into(),
            traddr: traddr.into(),
            tsas: Tsas::Tcp { sectype: 0 },
        }
    }

    fn die(traddr: &str, port: u16) -> DimEntry {
        DimEntry {
            trtype: Transport::Tcp.trtype(),
            adrfam: adrfam::IPV4,
            subtype: subtype::CURRENT_DISCOVERY,
            treq: 0,
            portid: 1,
            cntlid: 0xffff,
            asqsz: 32,
            trsvcid: port.to_string(),
            nqn: fabrik_proto::fabrics::nqn::DISCOVERY_NQN.into(),
            traddr: traddr.into(),
            tsas: Tsas::Tcp { sectype: 0 },
            exats: Vec::new(),
        }
    }

    fn box_data(eid: &str, traddr: &str, port: u16) -> DimData {
        DimData {
            etype: etype::DDC,
            portlcl: 0,
            ektype: fabrik_proto::fabrics::dim::EKTYPE,
            eid: eid.into(),
            ename: eid.into(),
            ever: String::new(),
            entries: vec![die(traddr, port)],
        }
    }

    /// Boxes at ports 1 and 2 of 127.0.0.2; box 1 offers "a" to host A, box 2 "b" to A and
    /// "c" to B; port 3 never answers. Counts the reads.
    fn directory() -> (Directory, Arc<std::sync::atomic::AtomicUsize>) {
        let reads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = reads.clone();
        let fetch: Fetch = Arc::new(move |addr: SocketAddr, host: String| {
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Box::pin(async move {
                let e = |n: &str| entry(n, "127.0.0.2", 4420 + addr.port());
                match (addr.port(), host.as_str()) {
                    (1, "A") => Ok(vec![e("a")]),
                    (2, "A") => Ok(vec![e("b"), e("b")]),
                    (2, "B") => Ok(vec![e("c")]),
                    (3, _) => Err("connection refused".into()),
                    _ => Ok(Vec::new()),
                }
            })
        });
        (Directory::with_fetch(fetch), reads)
    }

    fn peer() -> IpAddr {
        "127.0.0.2".parse().unwrap()
    }

    #[tokio::test]
    async fn each_host_sees_what_each_box_offers_it() {
        let (dir, reads) = directory();
        for (eid, port) in [("box1", 1), ("box2", 2), ("dead", 3)] {
            let got = dir.manage(tas::REGISTER, &box_data(eid, "", port), 7, peer());
            assert_eq!(got, Ok(Some(Change::Boxes)));
        }
        // An empty TRADDR is the address the box registered from.
        assert!(dir
            .registrations()
            .iter()
            .all(|r| r.entries[0].traddr == "127.0.0.2"));
        let a: Vec<String> = dir
            .log_for("A", 5)
            .await
            .iter()
            .map(|e| e.subnqn.clone())
            .collect();
        assert_eq!(
            a,
            ["a", "b"],
            "box 2's duplicate path listed once, the dead box left out"
        );
        let b: Vec<String> = dir
            .log_for("B", 5)
            .await
            .iter()
            .map(|e| e.subnqn.clone())
            .collect();
        assert_eq!(b, ["c"]);
        assert!(dir.log_for("nobody", 5).await.is_empty());
        // One generation is read once per host; a new one is read again.
        let n = reads.load(std::sync::atomic::Ordering::Relaxed);
        dir.log_for("A", 5).await;
        assert_eq!(reads.load(std::sync::atomic::Ordering::Relaxed), n);
        dir.log_for("A", 6).await;
        assert_eq!(reads.load(std::sync::atomic::Ordering::Relaxed), n + 3);
        let m = dir.metrics();
        assert_eq!((m.boxes, m.hosts, m.host_logs), (3, 0, 4));
        assert_eq!(m.box_reads_failed, 4, "the dead box, in each of the 4 logs");
    }

    #[tokio::test]
    async fn a_box_leaves_by_deregistering_or_losing_its_connection() {
        let (dir, _) = directory();
        dir.manage(tas::REGISTER, &box_data("box1", "127.0.0.2", 1), 7, peer())
            .unwrap();
        dir.manage(tas::REGISTER, &box_data("box2", "127.0.0.2", 2), 8, peer())
            .unwrap();
        assert_eq!(dir.log_for("A", 1).await.len(), 2);
        assert!(dir.controller_gone(8));
        assert!(!dir.controller_gone(8), "nothing left to go");
        assert_eq!(dir.log_for("A", 2).await.len(), 1);
        let got = dir.manage(tas::DEREGISTER, &box_data("box1", "", 1), 7, peer());
        assert_eq!(got, Ok(Some(Change::Boxes)));
        assert!(dir.log_for("A", 3).await.is_empty());
        // Deregistering what is not registered changes nothing.
        let got = dir.manage(tas::DEREGISTER, &box_data("box1", "", 1), 7, peer());
        assert_eq!(got, Ok(None));
    }

    /// Many hosts reading at once read at most `MAX_CONCURRENT_READS` boxes at a time.
    #[tokio::test]
    async fn a_herd_of_hosts_reads_boxes_a_bounded_number_at_a_time() {
        use std::sync::atomic::AtomicUsize;
        let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (n, m) = (now.clone(), most.clone());
        let fetch: Fetch = Arc::new(move |_, _| {
            let (n, m) = (n.clone(), m.clone());
            Box::pin(async move {
                let at = n.fetch_add(1, Ordering::SeqCst) + 1;
                m.fetch_max(at, Ordering::SeqCst);
                tokio::task::yield_now().await;
                n.fetch_sub(1, Ordering::SeqCst);
                Ok(Vec::new())
            })
        });
        let dir = Arc::new(Directory::with_fetch(fetch));
        for b in 0..4 {
            let data = box_data(&format!("box{b}"), "127.0.0.2", 1 + b);
            dir.manage(tas::REGISTER, &data, b, peer()).unwrap();
        }
        let hosts = (0..100).map(|h| {
            let dir = dir.clone();
            tokio::spawn(async move { dir.log_for(&format!("host{h}"), 1).await })
        });
        for h in join_all(hosts).await {
            h.unwrap();
        }
        let most = most.load(Ordering::SeqCst);
        assert!(most > 1, "reads run side by side ({most})");
        assert!(most <= MAX_CONCURRENT_READS, "{most} reads at once");
        assert_eq!(dir.metrics().host_logs, 100);
    }

    #[tokio::test]
    async fn bad_registrations_are_refused() {
        let (dir, _) = directory();
        let mut d = box_data("box1", "", 1);
        assert_eq!(
            dir.manage(9, &d, 1, peer()),
            Err(Status::INVALID_FIELD),
            "unknown task"
        );
        d.etype = etype::CDC;
        assert_eq!(
            dir.manage(tas::REGISTER, &d, 1, peer()),
            Err(Status::INVALID_DISCOVERY_INFO)
        );
        let mut d = box_data("", "", 1);
        assert_eq!(
            dir.manage(tas::REGISTER, &d, 1, peer()),
            Err(Status::INVALID_DISCOVERY_INFO),
            "no EID"
        );
        d.eid = "box1".into();
        d.entries.clear();
        assert_eq!(
            dir.manage(tas::REGISTER, &d, 1, peer()),
            Err(Status::INVALID_DISCOVERY_INFO),
            "a box without an address"
        );
        // A host registers with no entries of use to the CDC, and stays when its connection goes.
        let host = DimData {
            etype: etype::HOST,
            eid: "nqn.host".into(),
            entries: vec![die("", 0)],
            ..box_data("x", "", 0)
        };
        assert_eq!(
            dir.manage(tas::REGISTER, &host, 4, peer()),
            Ok(Some(Change::Hosts))
        );
        assert!(!dir.controller_gone(4));
        assert_eq!(dir.registrations().len(), 1);
    }
}
