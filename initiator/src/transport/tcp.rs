//! The host half of NVMe/TCP: one TCP connection is one queue.
//!
//! A queue is three parts:
//! - callers of [`TcpQueue::submit`], each holding one of `depth` slots (`commands.rs`) from
//!   submission until it takes the answer (back-pressure by queue depth); the slot gives the
//!   command id (CID), keeps the command while the target has it, then its answer, and the
//!   caller's waker meanwhile;
//! - a writer task that owns the socket's write half and sends queued PDUs in order;
//! - a reader task that owns the read half, decodes the target's PDUs and dispatches them:
//!   CapsuleResp completes a command, C2HData is appended to a read's buffer, R2T queues the
//!   H2CData PDUs it asks for, C2HTermReq ends the queue.
//!
//! Any transport failure or protocol violation by the target fails every command in flight and
//! closes the connection, as the Linux host's error recovery does (NVMEOF-FACTS 1.10, 4.5).

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use fabrik_proto::nvme::admin_opcode;
use fabrik_proto::tcp::{
    CapsuleCmd, Decoder, Digests, H2CData, IcReq, IcResp, Pdu, PduError, Role, R2T,
};
use fabrik_proto::{Cqe, SglDescriptor, Sqe};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::Notify;
use tokio::task::AbortHandle;

use self::commands::{Answered, Commands, Delivery, Waiter};
use self::data_in::DataIn;
use self::submit::Command;
pub use self::submit::Submitted;
use crate::command_name::command_name;
use crate::error::HostError;
use crate::transport::target::RecvTarget;
use crate::transport::{AnswerTo, CompletionQueue};

/// Bytes asked of the socket per read call.
const READ_CHUNK: usize = 256 * 1024;

/// How to set up one queue's connection.
#[derive(Clone, Debug)]
pub struct TcpQueueConfig {
    /// Queue id: 0 for the admin queue, 1.. for I/O queues. Used in errors.
    pub qid: u16,
    /// Digests to ask for in ICReq; the target must echo them exactly.
    pub digests: Digests,
    /// Commands in flight at most (the queue size the Connect announces).
    pub depth: u16,
    /// Largest payload accepted in one PDU from the target (C2HData): bounds what a misbehaving
    /// target can make us buffer before the transfer length check.
    pub max_pdu_data: u32,
    /// How long the TCP connect and the ICReq/ICResp exchange may take (Linux: 10 s).
    pub connect_timeout: Duration,
    /// Send H2CData PDUs of at most this many bytes even if MAXH2CDATA allows more (a host may
    /// always send smaller PDUs; tests use it to exercise a target's reassembly).
    pub h2c_data_limit: Option<u32>,
    /// Local address to connect from (nvme-cli `--host-traddr`).
    pub host_traddr: Option<IpAddr>,
    /// Local interface to connect through (nvme-cli `--host-iface`; SO_BINDTODEVICE, which kernels
    /// before 5.7 allow only with CAP_NET_RAW).
    pub host_iface: Option<String>,
    /// With commands in flight, how long the receiving task looks for their answers (yielding
    /// to the runtime, which polls the socket without waiting) before it sleeps until the
    /// socket wakes it. Zero: it always sleeps.
    pub poll_window: Duration,
    /// How long a command may wait for its completion before the queue fails (as the Linux
    /// host's I/O timeout: the target's state is unknown, so the queue goes). None: no limit.
    pub command_timeout: Option<Duration>,
    /// TLS before ICReq, with this channel's PSK (None: clear text).
    pub tls: Option<Arc<tls::TlsChannel>>,
}

impl TcpQueueConfig {
    pub fn new(qid: u16, depth: u16, digests: Digests) -> TcpQueueConfig {
        TcpQueueConfig {
            qid,
            digests,
            depth,
            max_pdu_data: 32 << 20,
            connect_timeout: Duration::from_secs(10),
            h2c_data_limit: None,
            host_traddr: None,
            host_iface: None,
            poll_window: Duration::ZERO,
            command_timeout: None,
            tls: None,
        }
    }
}

/// What the target answered to one command: its completion entry (any status) and the data it
/// sent (empty for commands that read nothing).
#[derive(Clone, Debug)]
pub struct Completion {
    pub cqe: Cqe,
    pub data: Bytes,
}

impl Completion {
    /// The data as a buffer for the next read: the very buffer a read into one was given
    /// (`submit_into`, `start_into`), with no copy while nothing else holds it.
    pub fn into_buffer(self) -> BytesMut {
        self.data
            .try_into_mut()
            .unwrap_or_else(|shared| BytesMut::from(&shared[..]))
    }
}

/// One NVMe/TCP queue. Dropping it closes the connection.
pub struct TcpQueue {
    shared: Arc<Shared>,
}

/// State shared by the submitting callers, the reader and the writer.
struct Shared {
    qid: u16,
    digests: Digests,
    maxh2cdata: u32,
    /// Data bytes per H2CData PDU: MAXH2CDATA, or less if configured.
    h2c_pdu_size: u32,
    /// Told when a slot is freed while callers wait for room (`State::waiting`).
    room: Notify,
    /// See `TcpQueueConfig::poll_window`.
    poll_window: Duration,
    state: Mutex<State>,
    /// Told when a PDU is queued while the writer waits for one (`State::writer_waiting`).
    writer_wake: Notify,
    tasks: Mutex<Vec<AbortHandle>>,
}

struct State {
    commands: Commands,
    /// Advanced by the deadline sweep (`deadline.rs`); a timed command records it when queued.
    epoch: u32,
    /// Callers waiting for a slot because all `depth` are taken.
    waiting: usize,
    /// Set once when the queue fails or is closed; later submits get this error.
    closed: Option<HostError>,
    /// Commands started with a tag (`TcpQueue::start`) while every slot was taken, in order;
    /// bounded by their callers, who keep count of what they started.
    backlog: VecDeque<Backlogged>,
    /// PDUs to send, in order, taken by the writer a batch at a time. Every entry belongs to a
    /// command holding a slot, so the queue depth bounds it. Queued under the lock a command
    /// takes anyway: a channel to the writer cost 3 % of a host core at QD128 (perf record,
    /// H200 machine).
    outgoing: Vec<Pdu>,
    /// The writer found nothing to send and sleeps until `Shared::writer_wake`.
    writer_waiting: bool,
}

impl State {
    /// Puts `command` in a free slot (the caller saw one), answered to `waiter`, and its capsule
    /// in the send queue. Gives its CID and whether the writer must be woken.
    fn queue_command(&mut self, command: Command, waiter: Waiter) -> (u16, bool) {
        let Command {
            mut sqe,
            data_out,
            in_capsule,
            data_in,
            data_in_len,
            timed,
        } = command;
        // Read only by the deadline sweep, which runs only for a queue with a command timeout.
        let issued = timed.then_some(self.epoch);
        let fetched = if in_capsule {
            Bytes::new()
        } else {
            data_out.clone()
        };
        let in_flight = InFlight {
            sqe,
            issued,
            data_out: fetched,
            requested: 0,
            data_in,
            data_in_len,
            digest_error: false,
        };
        let cid = self
            .commands
            .insert(in_flight, waiter)
            .expect("a free slot: looked above");
        sqe.cid = cid;
        let data = if in_capsule { data_out } else { Bytes::new() };
        let wake = self.queue_pdu(Pdu::CapsuleCmd(CapsuleCmd { sqe, data }));
        (cid, wake)
    }

    /// A slot was freed: the first started command waiting for one takes it (`TcpQueue::start`),
    /// else one caller waiting for room is told.
    fn slot_freed(&mut self, shared: &Shared) {
        if let Some(Backlogged {
            command,
            queue,
            tag,
        }) = self.backlog.pop_front()
        {
            let (_, wake) = self.queue_command(command, Waiter::Queue(queue, tag));
            if wake {
                shared.writer_wake.notify_one();
            }
            return;
        }
        if self.waiting > 0 {
            shared.room.notify_one();
        }
    }

    /// Queues `pdu` for the writer; true if the writer must be woken.
    fn queue_pdu(&mut self, pdu: Pdu) -> bool {
        self.outgoing.push(pdu);
        std::mem::take(&mut self.writer_waiting)
    }
}

/// A command started with a tag while every slot was taken: it takes the next one freed.
struct Backlogged {
    command: Command,
    queue: CompletionQueue,
    tag: u64,
}

/// A command the target has not answered yet.
struct InFlight {
    /// The command as sent (CID included), to name it in errors.
    sqe: Sqe,
    /// The sweep's epoch when it was queued; None: it may wait forever (an Asynchronous Event
    /// Request).
    issued: Option<u32>,
    /// Data to send when the target asks with R2T (empty if none, or if it went in-capsule).
    data_out: Bytes,
    /// End of the furthest range the target has asked for so far.
    requested: u64,
    /// Data received so far (C2HData), and how much the command reads in total.
    data_in: DataIn,
    data_in_len: usize,
    /// A C2HData PDU for this command failed its data digest.
    digest_error: bool,
}

impl TcpQueue {
    /// Opens a TCP connection to `addr` and sets the queue up on it (ICReq/ICResp).
    pub async fn connect(addr: SocketAddr, config: TcpQueueConfig) -> Result<TcpQueue, HostError> {
        let qid = config.qid;
        let open = || async {
            let stream = bind::connect(
                qid,
                addr,
                config.host_traddr,
                config.host_iface.as_deref(),
                config.connect_timeout,
            )
            .await?;
            // Capsules are small and latency matters: never wait to coalesce (as the Linux host).
            stream
                .set_nodelay(true)
                .map_err(|e| HostError::io(format!("queue {qid}: set TCP_NODELAY"), e))?;
            Ok::<_, HostError>(stream)
        };
        let Some(tls) = config.tls.clone() else {
            return TcpQueue::establish(open().await?, config).await;
        };
        let mut failed = None;
        for attempt in 0..tls.attempts() {
            let handshake = tls.connect(attempt, qid, open().await?);
            match tokio::time::timeout(config.connect_timeout, handshake).await {
                Ok(Ok(stream)) => return TcpQueue::establish(stream, config).await,
                Ok(Err(e)) => failed = Some(e),
                Err(_) => {
                    failed = Some(HostError::Tls {
                        qid,
                        reason: format!("no answer within {:?}", config.connect_timeout),
                    })
                }
            }
        }
        Err(failed.expect("a channel has at least one attempt"))
    }

    /// Sets the queue up on an already connected byte stream: sends ICReq, checks ICResp like the
    /// Linux host, then starts the reader and writer tasks.
    pub async fn establish<S>(mut stream: S, config: TcpQueueConfig) -> Result<TcpQueue, HostError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let qid = config.qid;
        let icreq = Pdu::IcReq(IcReq {
            pfv: 0,
            hpda: 0,
            digests: config.digests,
            maxr2t: 0,
        });
        let mut out = BytesMut::new();
        icreq.encode(Digests::default(), &mut out);
        stream
            .write_all(&out)
            .await
            .map_err(|e| HostError::io(format!("queue {qid}: send ICReq"), e))?;

        let mut decoder = Decoder::new(Role::Host, config.max_pdu_data);
        let mut buf = BytesMut::with_capacity(READ_CHUNK);
        let first = tokio::time::timeout(
            config.connect_timeout,
            read_pdu(qid, &mut stream, &mut decoder, &mut buf),
        )
        .await
        .map_err(|_| HostError::Timeout {
            qid,
            command: "ICReq (waiting for ICResp)".into(),
            after: config.connect_timeout,
        })??;
        let icresp = match first {
            Pdu::IcResp(icresp) => icresp,
            Pdu::C2HTermReq(term) => {
                return Err(HostError::Terminated {
                    qid,
                    fes: term.fes,
                    fei: term.fei,
                })
            }
            other => {
                return Err(HostError::protocol(
                    qid,
                    format!("expected ICResp, got PDU type {:#04x}", other.pdu_type()),
                ))
            }
        };
        check_icresp(qid, &icresp, config.digests)?;
        decoder.set_digests(config.digests);

        let (reader, writer) = tokio::io::split(stream);
        let shared = Arc::new(Shared {
            qid,
            digests: config.digests,
            maxh2cdata: icresp.maxh2cdata,
            h2c_pdu_size: icresp
                .maxh2cdata
                .min(config.h2c_data_limit.unwrap_or(u32::MAX))
                .max(4),
            room: Notify::new(),
            poll_window: config.poll_window,
            state: Mutex::new(State {
                commands: Commands::new(config.depth.max(1) as usize, qid),
                backlog: VecDeque::new(),
                epoch: 0,
                waiting: 0,
                closed: None,
                outgoing: Vec::new(),
                writer_waiting: false,
            }),
            writer_wake: Notify::new(),
            tasks: Mutex::new(Vec::new()),
        });
        let write_task = tokio::spawn(send::write_loop(shared.clone(), writer));
        let read_task = tokio::spawn(receive::read_loop(shared.clone(), reader, decoder, buf));
        let mut tasks = vec![write_task.abort_handle(), read_task.abort_handle()];
        if let Some(timeout) = config.command_timeout {
            tasks.push(tokio::spawn(deadline::sweep(shared.clone(), timeout)).abort_handle());
        }
        shared.tasks.lock().unwrap().extend(tasks);
        Ok(TcpQueue { shared })
    }

    pub fn qid(&self) -> u16 {
        self.shared.qid
    }

    /// Largest data in one H2CData PDU, from ICResp.
    pub fn maxh2cdata(&self) -> u32 {
        self.shared.maxh2cdata
    }

    pub fn digests(&self) -> Digests {
        self.shared.digests
    }

    /// The error that closed the queue, if it is closed.
    pub fn closed(&self) -> Option<HostError> {
        self.shared.state.lock().unwrap().closed.clone()
    }

    /// Queues one command; the future it gives waits for its completion, whatever its status,
    /// within the queue's command timeout. The command is queued at once, before the future is
    /// first polled (its state is then small: each layer above moves it per command).
    ///
    /// The queue assigns the CID and sets the SGL the way the Linux host does (1.7): data to send
    /// goes in-capsule (offset data block) when it fits in `in_capsule_limit` bytes, or for any
    /// Fabrics command; otherwise the target fetches it with R2T (transport data block). A command
    /// reading `data_in_len` bytes gets a transport data block of that length.
    pub fn submit(
        &self,
        sqe: Sqe,
        data_out: Option<Bytes>,
        data_in_len: usize,
        in_capsule_limit: usize,
    ) -> Submitted<'_> {
        let data_in = DataIn::Empty;
        self.submit_with(sqe, data_out, data_in, data_in_len, in_capsule_limit, true)
    }

    /// As `submit`, for a command that may wait forever (an Asynchronous Event Request
    /// completes only when an event happens).
    pub fn submit_untimed(
        &self,
        sqe: Sqe,
        data_out: Option<Bytes>,
        data_in_len: usize,
        in_capsule_limit: usize,
    ) -> Submitted<'_> {
        let data_in = DataIn::Empty;
        self.submit_with(sqe, data_out, data_in, data_in_len, in_capsule_limit, false)
    }

    /// Queues a command that reads `len` bytes into `buf` (cleared first, grown if it has less
    /// room): the completion's data is `buf`, frozen (`Bytes::try_into_mut` gives it back for the
    /// next read). The payload is received straight into it, with no copy of its own.
    pub fn submit_into(&self, sqe: Sqe, buf: BytesMut, len: usize) -> Submitted<'_> {
        self.submit_with(sqe, None, DataIn::into_buffer(buf), len, 0, true)
    }

    /// Queues a command that reads `target.len()` bytes into `target`: the payload is received
    /// straight into that memory; the completion's data is empty.
    pub fn submit_to(&self, sqe: Sqe, target: RecvTarget) -> Submitted<'_> {
        let len = target.len();
        self.submit_with(sqe, None, DataIn::into_target(target), len, 0, true)
    }

    /// As `submit`, with the answer going where `answer` says instead of to a future (see
    /// `transport::completions`). Nothing is refused here: an error comes as the answer. A queue
    /// at its depth starts the command when a slot frees, after those started before it.
    pub fn start(
        &self,
        sqe: Sqe,
        data_out: Option<Bytes>,
        data_in_len: usize,
        in_capsule_limit: usize,
        answer: AnswerTo<'_>,
    ) {
        let data_out = data_out.unwrap_or_default();
        let data_in = DataIn::Empty;
        self.start_with(
            sqe,
            data_out,
            data_in,
            data_in_len,
            in_capsule_limit,
            answer,
        );
    }

    /// As `submit_into`, with the answer going where `answer` says (see `start`): the
    /// completion's data is `buf`, frozen.
    pub fn start_into(&self, sqe: Sqe, buf: BytesMut, len: usize, answer: AnswerTo<'_>) {
        let data_in = DataIn::into_buffer(buf);
        self.start_with(sqe, Bytes::new(), data_in, len, 0, answer);
    }

    /// As `submit_to`, with the answer going where `answer` says (see `start`).
    pub fn start_to(&self, sqe: Sqe, target: RecvTarget, answer: AnswerTo<'_>) {
        let len = target.len();
        let data_in = DataIn::into_target(target);
        self.start_with(sqe, Bytes::new(), data_in, len, 0, answer);
    }

    fn start_with(
        &self,
        sqe: Sqe,
        data_out: Bytes,
        data_in: DataIn,
        data_in_len: usize,
        in_capsule_limit: usize,
        answer: AnswerTo<'_>,
    ) {
        match command(sqe, data_out, data_in, data_in_len, in_capsule_limit, true) {
            Ok(command) => self.shared.start(command, answer),
            Err(err) => answer.post(Err(err)),
        }
    }

    fn submit_with(
        &self,
        sqe: Sqe,
        data_out: Option<Bytes>,
        data_in: DataIn,
        data_in_len: usize,
        in_capsule_limit: usize,
        timed: bool,
    ) -> Submitted<'_> {
        let data_out = data_out.unwrap_or_default();
        match command(sqe, data_out, data_in, data_in_len, in_capsule_limit, timed) {
            Ok(command) => Submitted::new(&self.shared, command),
            Err(err) => Submitted::failed(&self.shared, err),
        }
    }

    /// Fails every command in flight with `err` and closes the connection.
    pub fn abort(&self, err: HostError) {
        self.shared.fail(err);
    }

    /// Closes the connection; commands still in flight fail with `QueueClosed`.
    pub fn close(&self, reason: &str) {
        self.shared.fail(HostError::QueueClosed {
            qid: self.shared.qid,
            reason: reason.into(),
        });
    }
}

impl Drop for TcpQueue {
    fn drop(&mut self) {
        self.close("the queue was dropped");
    }
}

impl Shared {
    /// Commands submitted and not yet completed.
    fn commands_in_flight(&self) -> usize {
        self.state.lock().unwrap().commands.in_flight()
    }

    /// Queues a PDU for the writer, which encodes it where it gathers the next send.
    fn send(&self, pdu: Pdu) {
        // Once the queue failed nothing more is sent: the command's slot tells its caller why.
        if self.state.lock().unwrap().queue_pdu(pdu) {
            self.writer_wake.notify_one();
        }
    }

    /// Fails every command in flight and stops both tasks, which closes the socket. The first
    /// failure is the one remembered.
    fn fail(&self, err: HostError) {
        let (deliveries, backlog) = {
            let mut state = self.state.lock().unwrap();
            if state.closed.is_none() {
                state.closed = Some(err.clone());
            }
            let backlog = std::mem::take(&mut state.backlog);
            (state.commands.fail_all(&err), backlog)
        };
        // Callers waiting for room see the close.
        self.room.notify_waiters();
        deliveries.into_iter().for_each(Delivery::deliver);
        for Backlogged { queue, tag, .. } in backlog {
            queue.post(tag, Err(err.clone()));
        }
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
    }

    /// Handles one PDU from the target. An error is fatal for the queue. (C2HData does not come
    /// here: the reader takes each one's header alone and puts its payload where it belongs.)
    fn on_pdu(&self, pdu: Pdu) -> Result<(), HostError> {
        match pdu {
            Pdu::CapsuleResp(resp) => self.on_response(resp.cqe),
            Pdu::R2T(r2t) => self.on_r2t(r2t),
            Pdu::C2HTermReq(term) => Err(HostError::Terminated {
                qid: self.qid,
                fes: term.fes,
                fei: term.fei,
            }),
            other => Err(HostError::protocol(
                self.qid,
                format!(
                    "unexpected PDU type {:#04x} from the target",
                    other.pdu_type()
                ),
            )),
        }
    }

    fn on_response(&self, cqe: Cqe) -> Result<(), HostError> {
        let answer = |command: &mut InFlight| self.answer(command, cqe);
        let mut state = self.state.lock().unwrap();
        let answered = state.commands.answer(cqe.cid, answer);
        self.settled(state, answered).ok_or_else(|| {
            HostError::protocol(
                self.qid,
                format!("completion for unknown command id {:#06x}", cqe.cid),
            )
        })
    }

    /// Frees a settled command's slot for the next command if it is free, lets the lock go, then
    /// delivers the answer. None: the answer was for no command.
    fn settled(&self, mut state: MutexGuard<'_, State>, answered: Answered) -> Option<()> {
        let Answered::Settled { delivery, freed } = answered else {
            return None;
        };
        if freed {
            state.slot_freed(self);
        }
        drop(state);
        delivery.deliver();
        Some(())
    }

    /// A command's answer: its data if all of it arrived intact, else an error that concerns
    /// only this command.
    fn answer(&self, command: &mut InFlight, cqe: Cqe) -> Result<Completion, HostError> {
        let qid = self.qid;
        if command.digest_error {
            Err(HostError::DataDigest {
                qid,
                command: command_name(qid, &command.sqe),
            })
        } else if cqe.status.is_success() && command.data_in.len() != command.data_in_len {
            Err(HostError::protocol(
                qid,
                format!(
                    "{} completed successfully with {} of its {} bytes of data",
                    command_name(qid, &command.sqe),
                    command.data_in.len(),
                    command.data_in_len
                ),
            ))
        } else if cqe.status.is_success() && command.requested < command.data_out.len() as u64 {
            Err(HostError::protocol(
                qid,
                format!(
                    "{} completed successfully after asking for {} of its {} bytes of data",
                    command_name(qid, &command.sqe),
                    command.requested,
                    command.data_out.len()
                ),
            ))
        } else {
            Ok(Completion {
                cqe,
                data: std::mem::take(&mut command.data_in).freeze(),
            })
        }
    }

    /// Queues the H2CData PDUs an R2T asks for, each at most MAXH2CDATA bytes, LAST_PDU on the
    /// final one. The data is sliced from the caller's buffer, not copied.
    fn on_r2t(&self, r2t: R2T) -> Result<(), HostError> {
        let qid = self.qid;
        let R2T {
            cccid,
            ttag,
            r2to,
            r2tl,
        } = r2t;
        let data = {
            let mut state = self.state.lock().unwrap();
            let command = state.commands.get_mut(cccid).ok_or_else(|| {
                HostError::protocol(qid, format!("R2T for unknown command id {cccid:#06x}"))
            })?;
            let total = command.data_out.len() as u64;
            if total == 0 {
                return Err(HostError::protocol(
                    qid,
                    format!(
                        "R2T for {}, which has no data to fetch",
                        command_name(qid, &command.sqe)
                    ),
                ));
            }
            if r2tl == 0 {
                return Err(HostError::protocol(
                    qid,
                    format!("R2T for command {cccid:#06x} with R2TL 0"),
                ));
            }
            let end = r2to as u64 + r2tl as u64;
            if end > total {
                return Err(HostError::protocol(
                    qid,
                    format!("R2T for command {cccid:#06x} asks for bytes {r2to}..{end} of a {total}-byte transfer"),
                ));
            }
            if (r2to as u64) < command.requested {
                return Err(HostError::protocol(
                    qid,
                    format!(
                        "R2T for command {cccid:#06x} at offset {r2to} asks again for data already sent (up to {})",
                        command.requested
                    ),
                ));
            }
            command.requested = end;
            command.data_out.slice(r2to as usize..end as usize)
        };
        let max = self.h2c_pdu_size as usize;
        let mut offset = 0;
        while offset < data.len() {
            let len = max.min(data.len() - offset);
            self.send(Pdu::H2CData(H2CData {
                cccid,
                ttag,
                datao: r2to + offset as u32,
                last: offset + len == data.len(),
                data: data.slice(offset..offset + len),
            }));
            offset += len;
        }
        Ok(())
    }
}

/// A command to queue, its SGL set the way the Linux host sets it (see `TcpQueue::submit`).
fn command(
    mut sqe: Sqe,
    data_out: Bytes,
    data_in: DataIn,
    data_in_len: usize,
    in_capsule_limit: usize,
    timed: bool,
) -> Result<Command, HostError> {
    if !data_out.is_empty() && data_in_len > 0 {
        return Err(HostError::Invalid(
            "a command cannot both send and receive data".into(),
        ));
    }
    let Ok(length) = u32::try_from(data_out.len().max(data_in_len)) else {
        return Err(HostError::Invalid("transfer longer than 4 GiB".into()));
    };
    let in_capsule = !data_out.is_empty()
        && (data_out.len() <= in_capsule_limit || sqe.opcode == admin_opcode::FABRICS);
    let sgl = if in_capsule {
        SglDescriptor::DataBlockOffset { offset: 0, length }
    } else {
        SglDescriptor::TransportDataBlock { length }
    };
    sqe.set_sgl(&sgl);
    Ok(Command {
        sqe,
        data_out,
        in_capsule,
        data_in,
        data_in_len,
        timed,
    })
}

/// The Linux host's ICResp checks (NVMEOF-FACTS 1.5). PDU type and PLEN are the decoder's.
pub(crate) fn check_icresp(qid: u16, icresp: &IcResp, asked: Digests) -> Result<(), HostError> {
    let bad = |reason: String| Err(HostError::protocol(qid, reason));
    if icresp.pfv != 0 {
        return bad(format!("ICResp PFV {} (only 0 is defined)", icresp.pfv));
    }
    if icresp.digests != asked {
        return bad(format!(
            "ICResp digests (header {}, data {}) differ from the requested (header {}, data {})",
            icresp.digests.header, icresp.digests.data, asked.header, asked.data
        ));
    }
    if icresp.cpda != 0 {
        return bad(format!("ICResp CPDA {} (only 0 is supported)", icresp.cpda));
    }
    if icresp.maxh2cdata < 4096 || !icresp.maxh2cdata.is_multiple_of(4) {
        return bad(format!(
            "ICResp MAXH2CDATA {} (must be a multiple of 4, at least 4096)",
            icresp.maxh2cdata
        ));
    }
    Ok(())
}

/// Reads until one whole PDU is decoded (used for ICResp, before the reader task exists).
async fn read_pdu<S: AsyncRead + Unpin>(
    qid: u16,
    stream: &mut S,
    decoder: &mut Decoder,
    buf: &mut BytesMut,
) -> Result<Pdu, HostError> {
    loop {
        match decoder.decode(buf) {
            Ok(Some(pdu)) => return Ok(pdu),
            Ok(None) => {}
            Err(err) => return Err(bad_pdu(qid, &err)),
        }
        buf.reserve(READ_CHUNK);
        match stream.read_buf(buf).await {
            Ok(0) => return Err(HostError::ConnectionClosed { qid }),
            Ok(_) => {}
            Err(e) => return Err(HostError::io(format!("queue {qid}: receive"), e)),
        }
    }
}

fn bad_pdu(qid: u16, err: &PduError) -> HostError {
    HostError::protocol(qid, format!("bad PDU from the target: {err}"))
}

mod bind;
mod commands;
mod data_in;
mod deadline;
mod receive;
mod send;
mod submit;
#[cfg(test)]
mod tests;
pub mod tls;
