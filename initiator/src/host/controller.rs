//! A controller association: the admin queue, the I/O queues, keep-alive, and the admin commands.
//!
//! `Controller::connect` follows the Linux host's bring-up (NVMEOF-FACTS 4.1) so that a target
//! that works with this host has met the same checks, in the same order.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use fabrik_proto::auth::CONNECT_AUTH_REQUIRED;
use fabrik_proto::fabrics::nqn::Nqn;
use fabrik_proto::fabrics::property::{self, Cap, Cc, Csts};
use fabrik_proto::fabrics::{ConnectData, FabricsCommand, Transport, CATTR_DISABLE_SQ_FLOW};
use fabrik_proto::nvme::admin::{cns, AdminCommand};
use fabrik_proto::nvme::features::{fid, NumberOfQueues};
use fabrik_proto::nvme::identify::{
    decode_ns_descriptors, decode_ns_list, IdentifyController, IdentifyNamespace, NsDescriptor,
    IDENTIFY_LEN,
};
use fabrik_proto::nvme::log::{lid, SmartLog, SMART_LOG_LEN};
use fabrik_proto::{Sqe, Status};
use tokio::task::JoinHandle;

use crate::error::HostError;
use crate::host::auth::{Authentication, ASCR};
use crate::host::io::IoQueue;
use crate::host::options::ConnectOptions;
use crate::host::queue::{Queue, ADMIN_IN_CAPSULE_LIMIT};
use crate::int_map::IntMap;
use crate::transport::tcp::tls::TlsChannel;
use crate::transport::{Completion, TcpQueueConfig};

/// Admin queue entries (`NVME_AQ_DEPTH`): Connect SQSIZE 31.
pub const ADMIN_QUEUE_SIZE: u16 = 32;
/// Dynamic controller model: the admin Connect asks the target to choose the CNTLID.
const CNTLID_DYNAMIC: u16 = 0xFFFF;
/// How long a shutdown may take (the Linux host's lower bound of the shutdown timeout).
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);
/// NSIDs per Identify Active Namespace ID list page.
const NS_LIST_PAGE: usize = IDENTIFY_LEN / 4;
/// NSIDs whose LBA size is kept in an array read without a lock (1 KiB per controller).
const LBA_SIZES_INDEXED: usize = 256;

/// One live controller. Share it between tasks with `Arc`; every command method takes `&self`.
pub struct Controller {
    opts: ConnectOptions,
    cntlid: u16,
    cap: Cap,
    vs: u32,
    /// CC as last written (shutdown writes it again with SHN set).
    cc: Cc,
    identify: IdentifyController,
    admin: Arc<Queue>,
    io: Vec<Queue>,
    next_io: AtomicUsize,
    /// LBA size per namespace, learnt from Identify Namespace on first use: NSIDs up to
    /// `LBA_SIZES_INDEXED` in an array of atomics read without a lock (every command looks its
    /// namespace up, from every I/O thread: a mutex here was a cache line passed between
    /// cores per command), larger ones in the map.
    lba_sizes_indexed: Box<[AtomicU32]>,
    lba_sizes: Mutex<IntMap<u32, u32>>,
    keep_alive: Option<JoinHandle<()>>,
    /// Every queue's TLS (NVMe/TCP with `ConnectOptions::tls`): one identity and PSK.
    tls: Option<Arc<TlsChannel>>,
    /// What an I/O queue's Connect carries (the admin queue's, with this controller's CNTLID);
    /// None for a discovery controller, which has no I/O queues.
    io_connect: Option<ConnectData>,
}

impl Controller {
    /// Connects and brings the controller up: admin queue, enable, identify, keep-alive, I/O
    /// queues.
    pub async fn connect(opts: ConnectOptions) -> Result<Controller, HostError> {
        let mut ctrl = Controller::connect_admin(opts).await?;
        ctrl.connect_io().await?;
        Ok(ctrl)
    }

    /// The first half of `connect`: the admin queue, enable, identify, keep-alive; the I/O
    /// queues come with `connect_io`. Several controllers brought up together should connect
    /// every admin queue first and then the I/O queues, as spdk_nvme_perf does: a target that
    /// gives each new connection its next core in turn (SPDK's round-robin) then spreads the
    /// I/O queues over its cores. Interleaved (admin, I/O, admin, I/O), with one I/O queue per
    /// controller, every I/O queue landed on every other core of a 4-core SPDK target, and
    /// `fabrik bench` reached 0.6x of perf's IOPS against it (H200 machine).
    pub async fn connect_admin(opts: ConnectOptions) -> Result<Controller, HostError> {
        let subnqn = parse_nqn("subsystem NQN", &opts.subnqn)?;
        let hostnqn = parse_nqn("host NQN", &opts.hostnqn)?;
        let connect_data = |cntlid| ConnectData {
            host_id: opts.host_id,
            cntlid,
            subnqn: subnqn.clone(),
            hostnqn: Some(hostnqn.clone()),
        };

        let tls = match &opts.tls {
            Some(_) if opts.transport != Transport::Tcp => {
                return Err(HostError::Invalid("TLS is for NVMe/TCP only".into()))
            }
            Some(key) => Some(TlsChannel::new(key, &opts.hostnqn, &opts.subnqn)?),
            None => None,
        };
        let admin = Queue::connect(
            opts.transport,
            opts.addr,
            queue_config(&opts, 0, ADMIN_QUEUE_SIZE, tls.clone()),
            ADMIN_IN_CAPSULE_LIMIT,
            opts.command_timeout,
        )
        .await?;
        let cattr = connect_attributes(&opts);
        let auth = Authentication::new(&opts);
        let cntlid = fabrics_connect(
            &admin,
            ADMIN_QUEUE_SIZE,
            opts.kato_ms,
            cattr,
            connect_data(CNTLID_DYNAMIC),
            &auth,
        )
        .await?;

        let cap = Cap::from_u64(property_get(&admin, property::offset::CAP, true).await?);
        // Two-step enable (Linux 5.19+): all fields with EN = 0, then the same with EN = 1.
        let cc = Cc {
            en: false,
            css: 0,
            mps: 0,
            ams: 0,
            shn: 0,
            iosqes: 6,
            iocqes: 4,
            crime: false,
        };
        property_set(&admin, property::offset::CC, cc.to_u32()).await?;
        let cc = Cc { en: true, ..cc };
        property_set(&admin, property::offset::CC, cc.to_u32()).await?;
        wait_ready(&admin, &cap).await?;
        let vs = property_get(&admin, property::offset::VS, false).await? as u32;

        let identify = identify_controller(&admin).await?;
        check_identify(&identify, cntlid)?;
        let is_discovery = subnqn.is_discovery() || identify.cntrltype == 2;
        if !is_discovery && identify.kas == 0 {
            return Err(HostError::protocol(
                0,
                "keep-alive support is mandatory for fabrics (KAS = 0)",
            ));
        }

        let admin = Arc::new(admin);
        let mut ctrl = Controller {
            cntlid,
            cap,
            vs,
            cc,
            identify,
            admin,
            io: Vec::new(),
            next_io: AtomicUsize::new(0),
            lba_sizes_indexed: (0..LBA_SIZES_INDEXED).map(|_| AtomicU32::new(0)).collect(),
            lba_sizes: Mutex::new(IntMap::default()),
            keep_alive: None,
            tls,
            io_connect: (!is_discovery).then(|| connect_data(cntlid)),
            opts,
        };
        if ctrl.opts.kato_ms > 0 {
            ctrl.keep_alive = Some(spawn_keep_alive(ctrl.admin.clone(), ctrl.opts.kato_ms));
        }
        Ok(ctrl)
    }

    /// The second half of `connect`: the I/O queues the options ask for (none for a discovery
    /// controller). Once only.
    pub async fn connect_io(&mut self) -> Result<(), HostError> {
        let Some(connect_data) = self.io_connect.clone() else {
            return Ok(());
        };
        if self.opts.io_queues == 0 || !self.io.is_empty() {
            return Ok(());
        }
        self.connect_io_queues(connect_data).await
    }

    /// Set Features Number of Queues, then one connection and Connect per granted queue.
    async fn connect_io_queues(&mut self, connect_data: ConnectData) -> Result<(), HostError> {
        let wanted = self.opts.io_queues as u32;
        let asked = NumberOfQueues {
            submission: wanted,
            completion: wanted,
        };
        let granted = NumberOfQueues::from_dword(
            self.set_features(fid::NUMBER_OF_QUEUES, 0, asked.to_dword())
                .await?,
        );
        let count = wanted.min(granted.submission).min(granted.completion);
        if count == 0 {
            return Err(HostError::protocol(
                0,
                "the controller granted no I/O queues",
            ));
        }

        let mut queue_size = self.opts.queue_size.min(self.cap.mqes.saturating_add(1));
        if self.identify.maxcmd != 0 {
            queue_size = queue_size.min(self.identify.maxcmd);
        }
        let queue_size = queue_size.max(2);
        let ioccsz = self.identify.ioccsz as usize;
        if ioccsz < 4 {
            return Err(HostError::protocol(
                0,
                format!("I/O queue command capsule supported size {ioccsz} < 4 (IOCCSZ)"),
            ));
        }
        let in_capsule_limit = ioccsz * 16 - 64;

        for qid in 1..=count as u16 {
            let connect = Queue::connect(
                self.opts.transport,
                self.opts.addr,
                queue_config(&self.opts, qid, queue_size, self.tls.clone()),
                in_capsule_limit,
                self.opts.command_timeout,
            );
            let runtimes = &self.opts.io_runtimes;
            let queue = match runtimes.get((qid as usize - 1) % runtimes.len().max(1)) {
                // Set up there, so that its socket and tasks belong to that runtime.
                Some(runtime) => runtime.spawn(connect).await.map_err(|e| {
                    HostError::Invalid(format!("I/O queue {qid}: its runtime stopped: {e}"))
                })??,
                None => connect.await?,
            };
            let cattr = connect_attributes(&self.opts);
            let auth = Authentication::new(&self.opts);
            fabrics_connect(&queue, queue_size, 0, cattr, connect_data.clone(), &auth).await?;
            self.io.push(queue);
        }
        Ok(())
    }

    /// Shuts the controller down like `nvme disconnect`: I/O queues closed first, then CC.SHN =
    /// 01b, wait for CSTS.SHST = 10b, then the admin queue closes.
    pub async fn shutdown(mut self) -> Result<(), HostError> {
        if let Some(task) = self.keep_alive.take() {
            task.abort();
        }
        for queue in self.io.drain(..) {
            queue.close("controller shutdown");
        }
        let cc = Cc { shn: 1, ..self.cc };
        property_set(&self.admin, property::offset::CC, cc.to_u32()).await?;
        let deadline = Instant::now() + SHUTDOWN_TIMEOUT;
        loop {
            let csts = Csts::from_u32(
                property_get(&self.admin, property::offset::CSTS, false).await? as u32,
            );
            if csts.shst == property::SHST_COMPLETE {
                break;
            }
            if Instant::now() > deadline {
                return Err(HostError::Timeout {
                    qid: 0,
                    command: "shutdown (waiting for CSTS.SHST = 10b)".into(),
                    after: SHUTDOWN_TIMEOUT,
                });
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.admin.close("controller shutdown");
        Ok(())
    }

    pub fn cntlid(&self) -> u16 {
        self.cntlid
    }
    pub fn cap(&self) -> Cap {
        self.cap
    }
    /// Version (VS property).
    pub fn version(&self) -> u32 {
        self.vs
    }
    pub fn options(&self) -> &ConnectOptions {
        &self.opts
    }
    /// The Identify Controller data read at connect time.
    pub fn identity(&self) -> &IdentifyController {
        &self.identify
    }
    pub fn io_queue_count(&self) -> usize {
        self.io.len()
    }
    /// MAXH2CDATA the target announced on the admin queue.
    pub fn maxh2cdata(&self) -> u32 {
        self.admin.maxh2cdata()
    }

    /// I/O queue `index` (0-based; its qid is `index + 1`).
    pub fn io_queue(&self, index: usize) -> Result<IoQueue<'_>, HostError> {
        let queue = self.io.get(index).ok_or_else(|| {
            HostError::Invalid(format!(
                "no I/O queue {index}: the controller has {}",
                self.io.len()
            ))
        })?;
        Ok(IoQueue::new(self, queue))
    }

    /// The next I/O queue, round-robin.
    pub fn next_io_queue(&self) -> Result<IoQueue<'_>, HostError> {
        if self.io.is_empty() {
            return Err(HostError::Invalid(
                "the controller has no I/O queues".into(),
            ));
        }
        self.io_queue(self.next_io.fetch_add(1, Ordering::Relaxed) % self.io.len())
    }

    /// Sends any admin command; the SQE's CID and SGL are set by the queue.
    pub async fn submit_admin(
        &self,
        sqe: Sqe,
        data_out: Option<Bytes>,
        data_in_len: usize,
    ) -> Result<Completion, HostError> {
        self.admin.submit(sqe, data_out, data_in_len).await
    }

    /// An Asynchronous Event Request, to await with no timeout (it completes only when an event
    /// happens). The future holds the admin queue, not the controller; it fails once the
    /// controller is shut down or its connection lost. Resolves to completion dword 0 (event
    /// type, information, log page).
    pub fn async_event_request(
        &self,
    ) -> impl std::future::Future<Output = Result<u32, HostError>> + Send + 'static {
        let admin = self.admin.clone();
        async move {
            let sqe = AdminCommand::AsyncEventRequest.to_sqe(0);
            let completion = admin.submit_untimed(sqe, None, 0).await?;
            let status = completion.cqe.status;
            if !status.is_success() {
                return Err(HostError::Status {
                    status,
                    command: "Asynchronous Event Request".into(),
                    qid: 0,
                    result: completion.cqe.dw0(),
                });
            }
            Ok(completion.cqe.dw0())
        }
    }

    /// Sends any command on I/O queue `qid` (1-based, as on the wire).
    pub async fn submit_io(
        &self,
        qid: u16,
        sqe: Sqe,
        data_out: Option<Bytes>,
        data_in_len: usize,
    ) -> Result<Completion, HostError> {
        if qid == 0 {
            return Err(HostError::Invalid(
                "qid 0 is the admin queue: use submit_admin".into(),
            ));
        }
        self.io_queue(qid as usize - 1)?
            .submit(sqe, data_out, data_in_len)
            .await
    }

    async fn admin_command(
        &self,
        command: AdminCommand,
        data_in_len: usize,
    ) -> Result<Completion, HostError> {
        self.admin
            .submit(command.to_sqe(0), None, data_in_len)
            .await
    }

    pub async fn identify_controller(&self) -> Result<IdentifyController, HostError> {
        identify_controller(&self.admin).await
    }

    pub async fn identify_namespace(&self, nsid: u32) -> Result<IdentifyNamespace, HostError> {
        let data = self.identify(cns::NAMESPACE, nsid).await?;
        IdentifyNamespace::decode(&data).map_err(|e| bad_data("Identify Namespace", e))
    }

    /// Active namespace IDs, ascending (Identify CNS 02h, page after page).
    pub async fn active_namespaces(&self) -> Result<Vec<u32>, HostError> {
        let mut nsids = Vec::new();
        loop {
            let after = nsids.last().copied().unwrap_or(0);
            let data = self.identify(cns::ACTIVE_NS_LIST, after).await?;
            let page =
                decode_ns_list(&data).map_err(|e| bad_data("Active Namespace ID list", e))?;
            let full = page.len() == NS_LIST_PAGE;
            nsids.extend(page);
            if !full {
                return Ok(nsids);
            }
        }
    }

    /// Namespace identification descriptors (Identify CNS 03h).
    pub async fn ns_descriptors(&self, nsid: u32) -> Result<Vec<NsDescriptor>, HostError> {
        let data = self.identify(cns::NS_ID_DESCRIPTORS, nsid).await?;
        decode_ns_descriptors(&data)
            .map_err(|e| bad_data("Namespace Identification Descriptor list", e))
    }

    async fn identify(&self, cns: u8, nsid: u32) -> Result<Bytes, HostError> {
        let command = AdminCommand::Identify {
            nsid,
            cns,
            cntid: 0,
            csi: 0,
        };
        Ok(self.admin_command(command, IDENTIFY_LEN).await?.data)
    }

    /// Get Log Page: `len` bytes (a multiple of 4) from byte `offset` of log `lid`.
    pub async fn get_log_page(
        &self,
        lid: u8,
        nsid: u32,
        len: usize,
        offset: u64,
    ) -> Result<Bytes, HostError> {
        self.get_log_page_with(lid, nsid, len, offset, false).await
    }

    /// Get Log Page with Retain Asynchronous Event chosen by the caller.
    pub(crate) async fn get_log_page_with(
        &self,
        lid: u8,
        nsid: u32,
        len: usize,
        offset: u64,
        rae: bool,
    ) -> Result<Bytes, HostError> {
        if len == 0 || !len.is_multiple_of(4) {
            return Err(HostError::Invalid(format!(
                "log page length {len} is not a positive multiple of 4"
            )));
        }
        let numd = (len / 4 - 1) as u32;
        let command = AdminCommand::GetLogPage {
            nsid,
            lid,
            lsp: 0,
            rae,
            numd,
            lpo: offset,
            csi: 0,
        };
        Ok(self.admin_command(command, len).await?.data)
    }

    /// SMART / Health Information for the whole controller.
    pub async fn smart_log(&self) -> Result<SmartLog, HostError> {
        let data = self
            .get_log_page(lid::SMART, 0xFFFF_FFFF, SMART_LOG_LEN, 0)
            .await?;
        SmartLog::decode(&data).map_err(|e| bad_data("SMART log", e))
    }

    /// Get Features; returns completion dword 0.
    pub async fn get_features(&self, fid: u8, nsid: u32, cdw11: u32) -> Result<u32, HostError> {
        let command = AdminCommand::GetFeatures {
            nsid,
            fid,
            sel: 0,
            cdw11,
        };
        Ok(self.admin_command(command, 0).await?.cqe.dw0())
    }

    /// Set Features (no data); returns completion dword 0.
    pub async fn set_features(&self, fid: u8, nsid: u32, cdw11: u32) -> Result<u32, HostError> {
        let command = AdminCommand::SetFeatures {
            nsid,
            fid,
            save: false,
            cdw11,
            cdw12: 0,
            cdw13: 0,
            cdw14: 0,
        };
        Ok(self.admin_command(command, 0).await?.cqe.dw0())
    }

    pub async fn keep_alive(&self) -> Result<(), HostError> {
        self.admin_command(AdminCommand::KeepAlive, 0)
            .await
            .map(|_| ())
    }

    /// Property Get (4 or 8 bytes).
    pub async fn property_get(&self, offset: u32, size8: bool) -> Result<u64, HostError> {
        property_get(&self.admin, offset, size8).await
    }

    /// LBA size of namespace `nsid`, from Identify Namespace (cached): ready at once when known.
    pub fn lba_size(&self, nsid: u32) -> LbaSize<'_> {
        match self.known_lba_size(nsid) {
            Some(size) => LbaSize::Known(std::future::ready(Ok(size))),
            // Boxed: inline, the Identify exchange would sit in every I/O command's future,
            // which is moved at each level of the path per command (callgrind: about 500
            // instructions of copying per 4K read, with the other rare paths).
            None => LbaSize::Learning(Box::pin(self.learn_lba_size(nsid))),
        }
    }

    /// The LBA size of `nsid` if it is known already (`lba_size` learns it).
    pub fn known_lba_size(&self, nsid: u32) -> Option<u32> {
        let indexed = (nsid as usize)
            .checked_sub(1)
            .and_then(|i| self.lba_sizes_indexed.get(i));
        match indexed {
            Some(size) => Some(size.load(Ordering::Relaxed)).filter(|&s| s != 0),
            None => self.lba_sizes.lock().unwrap().get(&nsid).copied(),
        }
    }

    /// The LBA size of `nsid` from Identify Namespace, remembered for the next commands.
    async fn learn_lba_size(&self, nsid: u32) -> Result<u32, HostError> {
        let ns = self.identify_namespace(nsid).await?;
        if ns.ncap == 0 {
            return Err(HostError::Invalid(format!(
                "namespace {nsid} is not active (NCAP 0)"
            )));
        }
        let size = ns
            .lba_size()
            .ok_or_else(|| bad_data("Identify Namespace", "FLBAS names no LBA format"))?;
        match (nsid as usize)
            .checked_sub(1)
            .and_then(|i| self.lba_sizes_indexed.get(i))
        {
            Some(indexed) => indexed.store(size, Ordering::Relaxed),
            None => {
                self.lba_sizes.lock().unwrap().insert(nsid, size);
            }
        }
        Ok(size)
    }

    /// Largest transfer of one command in bytes (MDTS; None = no limit). CAP.MPSMIN is 4 KiB here.
    pub fn max_transfer(&self) -> Option<usize> {
        match (self.mdts(), self.admin.max_command_data()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// MDTS in bytes (None = no limit), whatever the transport's own per-command limit.
    pub fn mdts(&self) -> Option<usize> {
        match self.identify.mdts {
            0 => None,
            mdts => Some(4096usize << mdts.min(20)),
        }
    }

    // I/O on the next queue, round-robin. `io_queue(i)` picks one explicitly.

    /// Reads `nlb` blocks from `slba`.
    pub async fn read(&self, nsid: u32, slba: u64, nlb: u32) -> Result<Bytes, HostError> {
        self.next_io_queue()?.read(nsid, slba, nlb).await
    }

    /// Reads into `buf` and gives it back filled (see `IoQueue::read_into`).
    pub async fn read_into(
        &self,
        nsid: u32,
        slba: u64,
        nlb: u32,
        buf: BytesMut,
    ) -> Result<BytesMut, HostError> {
        self.next_io_queue()?.read_into(nsid, slba, nlb, buf).await
    }

    /// Writes `data` (a whole number of blocks) at `slba`; `fua`: durable before completion.
    pub async fn write(
        &self,
        nsid: u32,
        slba: u64,
        data: Bytes,
        fua: bool,
    ) -> Result<(), HostError> {
        self.next_io_queue()?.write(nsid, slba, data, fua).await
    }
    pub async fn flush(&self, nsid: u32) -> Result<(), HostError> {
        self.next_io_queue()?.flush(nsid).await
    }
    pub async fn write_zeroes(&self, nsid: u32, slba: u64, nlb: u32) -> Result<(), HostError> {
        self.next_io_queue()?.write_zeroes(nsid, slba, nlb).await
    }
    /// Dataset Management with the deallocate attribute, for (slba, nlb) ranges.
    pub async fn deallocate(&self, nsid: u32, ranges: &[(u64, u32)]) -> Result<(), HostError> {
        self.next_io_queue()?.deallocate(nsid, ranges).await
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        // The keep-alive task holds the admin queue; without it the queue closes with us.
        if let Some(task) = self.keep_alive.take() {
            task.abort();
        }
    }
}

fn queue_config(
    opts: &ConnectOptions,
    qid: u16,
    depth: u16,
    tls: Option<Arc<TlsChannel>>,
) -> TcpQueueConfig {
    TcpQueueConfig {
        tls,
        h2c_data_limit: opts.h2c_data_limit,
        host_traddr: opts.host_traddr,
        host_iface: opts.host_iface.clone(),
        poll_window: opts.poll_window,
        ..TcpQueueConfig::new(qid, depth, opts.digests)
    }
}

fn parse_nqn(what: &str, nqn: &str) -> Result<Nqn, HostError> {
    Nqn::new(nqn).map_err(|e| HostError::Invalid(format!("{what}: {e}")))
}

fn bad_data(what: &str, err: impl std::fmt::Display) -> HostError {
    HostError::protocol(0, format!("{what} data from the target is invalid: {err}"))
}

/// Connect CATTR: like the Linux host's `disable_sqflow` option, on every queue.
fn connect_attributes(opts: &ConnectOptions) -> u8 {
    if opts.disable_sq_flow {
        CATTR_DISABLE_SQ_FLOW
    } else {
        0
    }
}

/// Connect on `queue` (its qid), with the 1024-byte data in-capsule, and the in-band
/// authentication the controller asks for; returns the CNTLID.
async fn fabrics_connect(
    queue: &Queue,
    queue_size: u16,
    kato: u32,
    cattr: u8,
    data: ConnectData,
    auth: &Authentication<'_>,
) -> Result<u16, HostError> {
    let qid = queue.qid();
    let command = FabricsCommand::Connect {
        recfmt: 0,
        qid,
        sqsize: queue_size - 1,
        cattr,
        kato,
    };
    let subnqn = data.subnqn.to_string();
    let data = Bytes::copy_from_slice(&data.to_bytes()[..]);
    let completion = match queue.submit(command.to_sqe(0), Some(data), 0).await {
        Ok(completion) => completion,
        Err(HostError::Status {
            status,
            command,
            qid,
            result,
        }) => {
            let command = match invalid_connect_parameter(result) {
                Some(field) if status.same_code(Status::CONNECT_INVALID_PARAMETERS) => {
                    format!("{command} to {subnqn} (the target rejects the {field})")
                }
                _ => format!("{command} to {subnqn}"),
            };
            return Err(HostError::Status {
                status,
                command,
                qid,
                result,
            });
        }
        Err(err) => return Err(err),
    };
    let dw0 = completion.cqe.dw0();
    if dw0 & ASCR != 0 {
        return Err(HostError::protocol(
            qid,
            format!(
                "Connect result {dw0:#010x} asks for secure channel concatenation (not supported)"
            ),
        ));
    }
    if dw0 & CONNECT_AUTH_REQUIRED != 0 {
        auth.run(queue, &subnqn).await?;
    }
    Ok(dw0 as u16)
}

/// The field a Connect Invalid Parameters result (IATTR bit 16, IPO 15:0) points at.
fn invalid_connect_parameter(result: u32) -> Option<&'static str> {
    let in_data = result & (1 << 16) != 0;
    Some(match (in_data, result as u16) {
        (true, 0) => "host identifier",
        (true, 16) => "controller ID (CNTLID)",
        (true, 256) => "subsystem NQN",
        (true, 512) => "host NQN",
        (false, 42) => "queue ID",
        (false, 44) => "queue size (SQSIZE)",
        (false, 46) => "connect attributes",
        (false, 48) => "keep-alive timeout",
        _ => return None,
    })
}

async fn property_get(admin: &Queue, offset: u32, size8: bool) -> Result<u64, HostError> {
    let sqe = FabricsCommand::PropertyGet { size8, offset }.to_sqe(0);
    let value = admin.submit(sqe, None, 0).await?.cqe.result;
    Ok(if size8 { value } else { value & 0xffff_ffff })
}

async fn property_set(admin: &Queue, offset: u32, value: u32) -> Result<(), HostError> {
    let sqe = FabricsCommand::PropertySet {
        size8: false,
        offset,
        value: value as u64,
    }
    .to_sqe(0);
    admin.submit(sqe, None, 0).await.map(|_| ())
}

/// Polls CSTS until RDY, for at most (CAP.TO + 1) x 500 ms; CFS fails at once.
async fn wait_ready(admin: &Queue, cap: &Cap) -> Result<(), HostError> {
    let limit = Duration::from_millis(500 * (cap.to as u64 + 1));
    let deadline = Instant::now() + limit;
    loop {
        let csts = Csts::from_u32(property_get(admin, property::offset::CSTS, false).await? as u32);
        if csts.cfs {
            return Err(HostError::protocol(
                0,
                "controller fatal status (CSTS.CFS) after enabling",
            ));
        }
        if csts.rdy {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(HostError::Timeout {
                qid: 0,
                command: "enable (waiting for CSTS.RDY)".into(),
                after: limit,
            });
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn identify_controller(admin: &Queue) -> Result<IdentifyController, HostError> {
    let command = AdminCommand::Identify {
        nsid: 0,
        cns: cns::CONTROLLER,
        cntid: 0,
        csi: 0,
    };
    let data = admin
        .submit(command.to_sqe(0), None, IDENTIFY_LEN)
        .await?
        .data;
    IdentifyController::decode(&data).map_err(|e| bad_data("Identify Controller", e))
}

/// The Linux host's Identify Controller checks for fabrics (NVMEOF-FACTS 4.2, pitfalls 17, 19).
fn check_identify(id: &IdentifyController, cntlid: u16) -> Result<(), HostError> {
    if id.cntlid != cntlid {
        return Err(HostError::protocol(
            0,
            format!(
                "Mismatching cntlid: Connect {cntlid} vs Identify {}",
                id.cntlid
            ),
        ));
    }
    if id.icdoff != 0 {
        return Err(HostError::protocol(
            0,
            format!("ICDOFF {} is not supported", id.icdoff),
        ));
    }
    if id.sgls & 0x3 == 0 {
        return Err(HostError::protocol(
            0,
            "mandatory SGLs are not supported (SGLS bits 1:0 = 0)",
        ));
    }
    Ok(())
}

/// Sends Keep Alive every kato/2 until a command fails (then the association is dead anyway).
fn spawn_keep_alive(admin: Arc<Queue>, kato_ms: u32) -> JoinHandle<()> {
    tokio::spawn(async move {
        let period = Duration::from_millis((kato_ms / 2).max(1) as u64);
        loop {
            tokio::time::sleep(period).await;
            let sqe = AdminCommand::KeepAlive.to_sqe(0);
            if let Err(err) = admin.submit(sqe, None, 0).await {
                tracing::warn!("keep-alive stopped: {err}");
                return;
            }
        }
    })
}

/// `Controller::lba_size`: a namespace's LBA size, ready at once when known; otherwise learned
/// with Identify Namespace. A small future: an I/O command awaits it on every call, and an
/// `async fn` state machine cost each 4K read about 120 instructions (callgrind).
pub enum LbaSize<'a> {
    Known(std::future::Ready<Result<u32, HostError>>),
    Learning(Pin<Box<dyn Future<Output = Result<u32, HostError>> + Send + 'a>>),
}

impl Future for LbaSize<'_> {
    type Output = Result<u32, HostError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            LbaSize::Known(size) => Pin::new(size).poll(cx),
            LbaSize::Learning(learning) => learning.as_mut().poll(cx),
        }
    }
}
