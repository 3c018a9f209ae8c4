//! A queue as the controller sees it: one per transport connection (NVMe/TCP) or queue pair
//! (RDMA). It starts unbound; Connect binds it to a new controller (admin queue) or to an existing
//! one (I/O queue). Commands go through two steps so the transport can fetch data in between:
//! `admit` (parse and check everything that needs no data) and `execute`.

use std::net::SocketAddr;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use fabrik_proto::fabrics::FabricsCommand;
use fabrik_proto::nvme::admin::AdminCommand;
use fabrik_proto::nvme::io::IoCommand;
use fabrik_proto::nvme::reservation::ReservationCommand;
use fabrik_proto::nvme::{admin_opcode, data_direction, DataDirection};
use fabrik_proto::{Sqe, Status};
use tokio_util::sync::CancellationToken;

use super::ns_cache::{NamespaceCache, QueueNamespace};
use super::{limits, Controller, PortInfo, TargetState};
use crate::backend::ReadBuf;
use crate::model::Port;

/// A queue bound to its controller by Connect.
pub struct Binding {
    pub ctrl: Arc<Controller>,
    pub qid: u16,
    /// Entries in the queue (SQSIZE + 1).
    pub entries: u32,
    /// The host disabled SQ flow control (Connect CATTR bit 2): SQHD is not reported.
    pub sq_flow_disabled: bool,
    /// Cancelled when the controller is torn down: this queue's own child of the controller's
    /// token. A queue looks at it on every turn of its loop, and a token's state sits behind a
    /// lock: one shared by the controller's queues on other cores would be a contended lock per
    /// turn (see `transport::tcp::serve_connection`).
    pub teardown: CancellationToken,
    /// The namespaces this queue's commands named lately.
    pub(super) namespaces: Arc<NamespaceCache>,
    /// In-band authentication: whether the queue may run commands yet, and its transaction.
    pub(super) auth: super::auth::QueueAuth,
}

/// A parsed command, checked as far as possible before its data arrives.
#[derive(Debug)]
pub struct Admitted {
    /// The command's identifier and namespace, for the error log (the rest of the SQE is in
    /// `command`: a transport moves this struct a few times per command, so it stays small).
    pub cid: u16,
    pub nsid: u32,
    pub command: Command,
    /// Bytes the command moves (the SGL's length).
    pub transfer_len: u32,
    pub direction: DataDirection,
}

impl Admitted {
    /// An Asynchronous Event Request waits for an event, maybe for ever: a transport does not
    /// hold a shutdown up for it.
    pub fn waits_for_an_event(&self) -> bool {
        matches!(
            self.command,
            Command::Admin(AdminCommand::AsyncEventRequest)
        )
    }

    /// For a Read that returns data: `buf` (memory the transport lent, as large as the
    /// transfer) is where the drive reads into, and the response's data lies in it. Any other
    /// command, or a buffer of another size, gives `buf` back.
    pub fn read_into(&mut self, buf: ReadBuf) -> Result<(), ReadBuf> {
        let fits = buf.len() == self.transfer_len as usize && !buf.is_empty();
        match &mut self.command {
            Command::Io(io) if fits && io.reads_a_namespace() => {
                io.into = Some(buf);
                Ok(())
            }
            _ => Err(buf),
        }
    }

    /// A Read of a namespace: the one command `read_into` takes memory for (a transport
    /// asks before it takes any).
    pub fn reads_into_lent_memory(&self) -> bool {
        matches!(&self.command, Command::Io(io) if io.reads_a_namespace())
    }
}

/// What a transport does with a command once `Queue::route` has admitted it.
#[derive(Debug)]
pub enum Route {
    /// Run it now with this data: it carried all of its data in the capsule, or takes none.
    Execute(Admitted, Bytes),
    /// Fetch its data from host memory first, then run it.
    FetchData(Admitted),
    /// Complete it with this status; it never runs.
    Fail(Status),
}

#[derive(Debug)]
pub enum Command {
    Fabrics(FabricsCommand),
    Admin(AdminCommand),
    Io(IoRequest),
    Reservation(ReservationRequest),
}

/// An admitted reservation command and its namespace.
pub struct ReservationRequest {
    pub cmd: ReservationCommand,
    pub(super) ns: QueueNamespace,
}

impl std::fmt::Debug for ReservationRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.cmd.fmt(f)
    }
}

/// An admitted I/O command and the namespace it was admitted against (None: a broadcast
/// Flush), looked up once for both steps.
pub struct IoRequest {
    pub cmd: IoCommand,
    pub(super) ns: Option<QueueNamespace>,
    /// Where a Read's data goes, when the transport lent memory for it (`Admitted::read_into`).
    pub(super) into: Option<ReadBuf>,
}

impl IoRequest {
    fn reads_a_namespace(&self) -> bool {
        matches!(self.cmd, IoCommand::Read { .. }) && self.ns.is_some()
    }
}

impl std::fmt::Debug for IoRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.cmd.fmt(f)
    }
}

/// What a command answers: the completion's result and status, data for the host, and whether
/// the transport must close the queue once the response is sent.
#[derive(Debug, Default)]
pub struct Response {
    pub result: u64,
    pub status: Status,
    pub data: Bytes,
    pub close: bool,
}

impl Response {
    pub fn ok() -> Response {
        Response::default()
    }
    pub fn status(status: Status) -> Response {
        Response {
            status,
            ..Response::default()
        }
    }
    pub fn result(result: u64) -> Response {
        Response {
            result,
            ..Response::default()
        }
    }
    pub fn data(data: impl Into<Bytes>) -> Response {
        Response {
            data: data.into(),
            ..Response::default()
        }
    }

    /// Data, success and nothing else: the data alone may stand for the completion (NVMe/TCP's
    /// SUCCESS flag), for the host then completes the command with a zero result.
    pub fn completes_with_data(&self) -> bool {
        !self.data.is_empty() && self.status.is_success() && self.result == 0
    }
}

impl From<Status> for Response {
    fn from(status: Status) -> Response {
        Response::status(status)
    }
}

pub struct Queue {
    pub target: Arc<TargetState>,
    pub port: Port,
    pub local_addr: SocketAddr,
    pub peer_addr: SocketAddr,
    binding: OnceLock<Binding>,
    /// The PSK identity of the queue's TLS channel: its Connect must name the same host and
    /// subsystem.
    pub tls_identity: Option<fabrik_proto::tls::PskIdentity>,
    /// Commands in flight on this queue, as its books count them (written only by the queue's
    /// own thread, read by its controller: see `Controller::io_in_flight`).
    pub(super) in_flight: Arc<AtomicU32>,
}

impl Queue {
    pub fn new(
        target: Arc<TargetState>,
        port: Port,
        local_addr: SocketAddr,
        peer_addr: SocketAddr,
    ) -> Queue {
        Queue {
            target,
            port,
            local_addr,
            peer_addr,
            binding: OnceLock::new(),
            tls_identity: None,
            in_flight: Arc::new(AtomicU32::new(0)),
        }
    }

    /// A queue whose connection is a TLS channel set up with `identity`.
    pub fn with_tls_identity(mut self, identity: fabrik_proto::tls::PskIdentity) -> Queue {
        self.tls_identity = Some(identity);
        self
    }

    pub fn binding(&self) -> Option<&Binding> {
        self.binding.get()
    }

    pub fn controller(&self) -> Option<&Arc<Controller>> {
        self.binding.get().map(|b| &b.ctrl)
    }

    pub(super) fn bind(&self, binding: Binding) -> bool {
        let (ctrl, namespaces, qid) = (
            binding.ctrl.clone(),
            binding.namespaces.clone(),
            binding.qid,
        );
        let bound = self.binding.set(binding).is_ok();
        if bound {
            ctrl.queue_bound();
            ctrl.watch_namespace_cache(&namespaces);
            if qid > 0 {
                ctrl.watch_io_queue(&self.in_flight);
            }
        }
        bound
    }

    pub(super) fn port_info(&self) -> PortInfo {
        PortInfo {
            port_id: self.port.id,
            transport: self.port.transport,
            caps: self.port.caps,
            local_addr: self.local_addr,
            peer_addr: self.peer_addr,
        }
    }

    /// How many bytes a command may carry in-capsule on this queue.
    pub fn inline_data_limit(&self, sqe: &Sqe) -> u32 {
        match self.binding.get() {
            // What Identify's IOCCSZ told the host.
            Some(b) if b.qid != 0 && sqe.opcode != admin_opcode::FABRICS => {
                self.port.caps.in_capsule_data
            }
            _ => limits::ADMIN_INLINE_DATA,
        }
    }

    /// Parses and checks a command before any data moves. `transfer_len` is the length of the
    /// data the SGL describes. An error is the status to complete the command with.
    pub fn admit(&self, sqe: &Sqe, transfer_len: u32) -> Result<Admitted, Status> {
        if sqe.fuse() != 0 {
            return Err(Status::INVALID_FIELD);
        }
        let direction = data_direction(sqe.opcode, sqe.fctype());
        let binding = self.binding.get();
        let command = if sqe.opcode == admin_opcode::FABRICS {
            let cmd = FabricsCommand::parse(sqe)?;
            match (&cmd, binding) {
                (FabricsCommand::Connect { .. }, None) => {}
                (FabricsCommand::Connect { .. }, Some(_)) => {
                    return Err(Status::COMMAND_SEQUENCE_ERROR)
                }
                (_, None) => return Err(Status::COMMAND_SEQUENCE_ERROR),
                (&FabricsCommand::AuthSend { secp, spsp, len }, Some(_))
                | (&FabricsCommand::AuthReceive { secp, spsp, len }, Some(_)) => {
                    super::auth::admit(secp, spsp, len, transfer_len)?
                }
                (FabricsCommand::Disconnect { .. }, Some(_)) => {}
                (_, Some(b)) if !b.auth.allows_commands() => return Err(Status::AUTH_REQUIRED),
                (
                    FabricsCommand::PropertyGet { .. } | FabricsCommand::PropertySet { .. },
                    Some(b),
                ) if b.qid != 0 => return Err(Status::INVALID_FIELD),
                _ => {}
            }
            Command::Fabrics(cmd)
        } else {
            let Some(b) = binding else {
                return Err(Status::COMMAND_SEQUENCE_ERROR);
            };
            if !b.auth.allows_commands() {
                return Err(Status::AUTH_REQUIRED);
            }
            if b.qid == 0 {
                let cmd = AdminCommand::parse(sqe)?;
                b.ctrl.admit_admin(&cmd, transfer_len)?;
                Command::Admin(cmd)
            } else {
                if !b.ctrl.is_ready() {
                    return Err(Status::COMMAND_SEQUENCE_ERROR);
                }
                if let Some(cmd) = ReservationCommand::parse(sqe)? {
                    let ns = b
                        .ctrl
                        .admit_reservation(&cmd, transfer_len, &b.namespaces)?;
                    Command::Reservation(ReservationRequest { cmd, ns })
                } else {
                    let cmd = IoCommand::parse(sqe)?;
                    let ns = b.ctrl.admit_io(&cmd, transfer_len, &b.namespaces)?;
                    Command::Io(IoRequest {
                        cmd,
                        ns,
                        into: None,
                    })
                }
            }
        };
        if transfer_len > limits::MAX_TRANSFER.max(limits::ADMIN_INLINE_DATA) {
            return Err(Status::SGL_LENGTH_INVALID);
        }
        if direction == DataDirection::None && transfer_len != 0 {
            return Err(Status::SGL_LENGTH_INVALID);
        }
        Ok(Admitted {
            cid: sqe.cid,
            nsid: sqe.nsid,
            command,
            transfer_len,
            direction,
        })
    }

    /// Admits a command and says what the transport does next. `in_capsule` is the data the
    /// capsule carried (its SGL named in-capsule data), `None` when the SGL points elsewhere:
    /// into host memory, fetched by R2T (TCP) or RDMA READ, or nothing at all.
    pub fn route(&self, sqe: &Sqe, transfer_len: u32, in_capsule: Option<Bytes>) -> Route {
        let cmd = match self.admit(sqe, transfer_len) {
            Ok(cmd) => cmd,
            Err(status) => return Route::Fail(status),
        };
        match (cmd.direction, in_capsule) {
            (DataDirection::ToController, Some(data)) => Route::Execute(cmd, data),
            (DataDirection::ToController, None) if transfer_len > 0 => Route::FetchData(cmd),
            // Only a command that takes data may carry it in the capsule.
            (_, Some(_)) => Route::Fail(Status::INVALID_FIELD),
            (_, None) => Route::Execute(cmd, Bytes::new()),
        }
    }

    /// Runs an admitted command. `data` holds the host's data for commands that carry some
    /// (exactly `transfer_len` bytes); a response's data is at most `transfer_len` bytes.
    pub async fn execute(&self, cmd: Admitted, data: Bytes) -> Response {
        let sqid = self.binding.get().map_or(0, |b| b.qid);
        let (cid, nsid) = (cmd.cid, cmd.nsid);
        let response = match cmd.command {
            Command::Fabrics(f) => self.execute_fabrics(f, data).await,
            Command::Admin(a) => {
                let ctrl = &self
                    .binding
                    .get()
                    .expect("admitted admin command on a bound queue")
                    .ctrl;
                ctrl.execute_admin(a, cmd.transfer_len, data).await
            }
            Command::Io(io) => {
                let ctrl = &self
                    .binding
                    .get()
                    .expect("admitted I/O command on a bound queue")
                    .ctrl;
                ctrl.execute_io(io, data).await
            }
            Command::Reservation(ReservationRequest { cmd: r, ns }) => {
                let ctrl = &self
                    .binding
                    .get()
                    .expect("admitted reservation command on a bound queue")
                    .ctrl;
                ctrl.execute_reservation(r, ns, data).await
            }
        };
        self.answered(sqid, cid, nsid, response)
    }

    /// Runs an admitted command at once where nothing in it waits: a Read or Write of a drive
    /// that completes at once (memory), with no future made for it. None: it did not run (a
    /// Read's lent memory is still in `cmd`), and `execute` runs it.
    pub fn execute_now(&self, cmd: &mut Admitted, data: &Bytes) -> Option<Response> {
        let (Command::Io(io), Some(b)) = (&mut cmd.command, self.binding.get()) else {
            return None;
        };
        let response = b.ctrl.execute_io_now(io, data)?;
        Some(self.answered(b.qid, cmd.cid, cmd.nsid, response))
    }

    /// A failed command goes into its controller's error log.
    fn answered(&self, sqid: u16, cid: u16, nsid: u32, response: Response) -> Response {
        if !response.status.is_success() {
            if let Some(ctrl) = self.controller() {
                ctrl.record_error(sqid, cid, response.status, nsid);
            }
        }
        response
    }

    /// The queue's transport connection is gone: an admin queue takes its controller with it,
    /// an I/O queue only unbinds.
    /// The connection ended, and the transport has waited for every command it had passed
    /// to the backend (so the controller's queues can be counted as drained).
    pub fn closed(&self) {
        if let Some(b) = self.binding.get() {
            b.ctrl.drop_namespace_cache(&b.namespaces);
            if b.qid == 0 {
                b.ctrl.shut_down("admin queue closed");
            } else {
                b.ctrl.detach_io_queue(b.qid);
            }
            b.ctrl.queue_finished();
        }
    }
}
