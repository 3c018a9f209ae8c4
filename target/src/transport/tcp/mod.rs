//! NVMe/TCP (TP 8000), controller side. One TCP connection is one queue. Per connection a
//! single task decodes PDUs, runs commands concurrently (bounded by the queue size), asks for
//! write data with R2T, and sends data (C2HData) and responses, batching whatever is ready
//! into one vectored write.

mod outgoing;
pub mod tls;

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::io::IoSlice;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use fabrik_proto::fabrics::discovery::{sectype, treq};
use fabrik_proto::tcp::pdu::{fes, pdu_type};
use fabrik_proto::tcp::{
    C2HData, CapsuleCmd, CapsuleResp, Decoder, Digests, H2CData, IcReq, IcResp, Pdu, PduError,
    Role, TermReq, R2T,
};
use fabrik_proto::{SglDescriptor, Status};
use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::FutureExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use self::outgoing::Outgoing;
use super::admission::{
    AcceptBackoff, Admission, MAX_CONNECTIONS_PER_LISTENER, MAX_CONNECTIONS_PER_PEER,
};
use super::signals::{Signal, Signals};
use super::Listener;
use crate::controller::books::{Arrival, QueueBooks};
use crate::controller::{limits, Admitted, Queue, Response, Route, TargetState};
use crate::model::{Port, TlsMode, Transport, TransportCaps};
use crate::stats::ConnectionGuard;

/// Largest H2CData payload we accept: a whole maximum transfer in one PDU.
const MAX_H2C_DATA: u32 = limits::MAX_TRANSFER;
/// Write data a connection may have been asked for (R2T) and not yet received. Bounds the memory
/// one host can make us hold: further writes wait for their R2T until data has come in.
const R2T_BUDGET: u64 = 16 << 20;
/// The Linux host gives up on ICResp after 10 s; so do we on ICReq.
const IC_TIMEOUT: Duration = Duration::from_secs(10);
/// A queue not connected to a controller this long after its ICResp is closed: hosts send
/// Connect at once, and a connection that never does only holds a descriptor.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Segments (PDU headers, data payloads) one write sends at most; IOV_MAX is 1024.
const MAX_SEGMENTS_PER_WRITE: usize = 256;
/// Up to this many segments (four read responses) a write sets up a small array of slices.
const FEW_SEGMENTS: usize = 8;

/// What NVMe/TCP offers: data in the byte stream (in-capsule or by R2T and C2HData), no
/// access to host memory, no security (SECTYPE 0).
pub const CAPS: TransportCaps = TransportCaps {
    keyed_sgls: false,
    in_capsule_data: limits::IO_INLINE_DATA,
    tsas: fabrik_proto::fabrics::discovery::Tsas::Tcp {
        sectype: sectype::NONE,
    },
    treq: treq::NOT_SPECIFIED,
};

/// A port's TLS: whether hosts must or may use it, and the keys it is served with.
#[derive(Clone)]
pub struct PortTls {
    pub mode: TlsMode,
    pub server: Arc<tls::TlsServer>,
}

pub struct TcpListenerPort {
    listener: TcpListener,
    port: Port,
    tls: Option<PortTls>,
}

impl TcpListenerPort {
    /// `tls` with mode `None` is no TLS.
    pub async fn bind(
        addr: SocketAddr,
        port_id: u16,
        tls: Option<PortTls>,
    ) -> std::io::Result<TcpListenerPort> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let tls = tls.filter(|t| !t.mode.is_none());
        let caps = match &tls {
            Some(t) => TransportCaps {
                tsas: fabrik_proto::fabrics::discovery::Tsas::Tcp {
                    sectype: sectype::TLS13,
                },
                treq: t.mode.treq(),
                ..CAPS
            },
            None => CAPS,
        };
        Ok(TcpListenerPort {
            listener,
            port: Port {
                id: port_id,
                transport: Transport::Tcp,
                addr,
                caps,
            },
            tls,
        })
    }
}

impl Listener for TcpListenerPort {
    fn port(&self) -> &Port {
        &self.port
    }

    fn serve(
        self: Box<Self>,
        target: Arc<TargetState>,
        stop: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let TcpListenerPort {
                listener,
                port,
                tls,
            } = *self;
            // Connections are told to stop only once nothing listens any more: whoever sees
            // them close (a removed port) finds the address refusing connections.
            let close_connections = CancellationToken::new();
            let mut connections = tokio::task::JoinSet::new();
            let admission = Admission::new(MAX_CONNECTIONS_PER_LISTENER, MAX_CONNECTIONS_PER_PEER);
            let mut backoff = AcceptBackoff::default();
            let what = format!("NVMe/TCP port {} ({})", port.id, port.addr);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    accepted = listener.accept() => match accepted {
                        Ok((stream, peer)) => {
                            backoff.accepted(&what);
                            // Past a cap the connection is closed at once (dropped).
                            let Some(place) = admission.admit(peer.ip()) else { continue };
                            // The socket moves to the reactor that serves it for its life,
                            // one near the NIC it came through where that is known.
                            let local = stream.local_addr().map(|a| a.ip());
                            let stream = match stream.into_std() {
                                Ok(s) => s,
                                Err(e) => {
                                    tracing::warn!(%peer, "cannot hand the connection to a reactor: {e}");
                                    continue;
                                }
                            };
                            let (t, port, stop) = (target.clone(), port.clone(), close_connections.clone());
                            let tls = tls.clone();
                            let local = local.unwrap_or(port.addr.ip());
                            target.reactors.place_near_nic(&mut connections, local, async move {
                                let _place = place;
                                let result = match TcpStream::from_std(stream) {
                                    Ok(stream) => secure_and_serve(stream, peer, t, port, tls, stop).await,
                                    Err(e) => Err(e.into()),
                                };
                                if let Err(e) = result {
                                    tracing::debug!(%peer, "connection ended: {e}");
                                }
                            });
                        }
                        Err(e) => backoff.failed(&what, &e).await,
                    },
                    Some(done) = connections.join_next(), if !connections.is_empty() => report_panic(done),
                }
            }
            drop(listener);
            close_connections.cancel();
            // Let every connection finish its in-flight commands.
            while let Some(done) = connections.join_next().await {
                report_panic(done);
            }
        })
    }
}

/// A connection task that panicked took only its own connection down (tokio contains it);
/// it is still a bug, so say so loudly.
fn report_panic(done: Result<(), tokio::task::JoinError>) {
    if let Err(e) = done {
        if e.is_panic() {
            tracing::error!("BUG: a connection task panicked: {e}");
        }
    }
}

/// How long a closing connection keeps reading for the host to close its side.
const CLOSE_LINGER: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
enum ConnError {
    #[error("socket: {0}")]
    Io(#[from] std::io::Error),
    #[error("terminated by us: {0}")]
    Terminated(&'static str),
    #[error("host closed the connection")]
    Eof,
    #[error("no ICReq within {0:?}")]
    IcTimeout(Duration),
    #[error("no Connect within {0:?} of the ICResp")]
    ConnectTimeout(Duration),
    #[error("{0}")]
    Tls(tls::HandshakeError),
}

/// TLS first where the port asks for it (a host of an `allowed` port that begins in clear
/// text, with an ICReq, goes on without), then the queue.
async fn secure_and_serve(
    stream: TcpStream,
    peer: SocketAddr,
    target: Arc<TargetState>,
    port: Port,
    tls: Option<PortTls>,
    stop: CancellationToken,
) -> Result<(), ConnError> {
    stream.set_nodelay(true)?;
    let local = stream.local_addr()?;
    let tls = match tls {
        Some(t) if t.mode == TlsMode::Allowed && !begins_with_tls(&stream, &stop).await? => None,
        tls => tls,
    };
    let Some(tls) = tls else {
        let (reader, writer) = stream.into_split();
        let queue = Queue::new(target, port, local, peer);
        return serve_connection(reader, writer, queue, stop).await;
    };
    let (stream, identity) = tokio::select! {
        _ = stop.cancelled() => return Err(ConnError::Eof),
        r = tls.server.accept(stream) => r.map_err(|e| {
            tracing::info!(%peer, "TLS refused: {e}");
            target.metrics.port(port.id).tls_failed();
            ConnError::Tls(e)
        })?,
    };
    tracing::debug!(%peer, identity = %identity.to_text(), "TLS established");
    let (reader, writer) = tokio::io::split(stream);
    // Coalesces a batch's PDUs into few TLS records (the stream encrypts each write as one).
    let writer = tokio::io::BufWriter::with_capacity(TLS_WRITE_BUFFER, writer);
    let queue = Queue::new(target, port, local, peer).with_tls_identity(identity);
    serve_connection(reader, writer, queue, stop).await
}

/// Whether the host begins with a TLS handshake (its first byte a handshake record's 16h) rather
/// than in clear text (an ICReq's PDU type 0).
async fn begins_with_tls(stream: &TcpStream, stop: &CancellationToken) -> Result<bool, ConnError> {
    let mut first = [0u8; 1];
    let peeked = tokio::select! {
        _ = stop.cancelled() => return Err(ConnError::Eof),
        r = crate::timer::timeout(IC_TIMEOUT, stream.peek(&mut first)) => r.map_err(|_| ConnError::IcTimeout(IC_TIMEOUT))??,
    };
    match peeked {
        0 => Err(ConnError::Eof),
        _ => Ok(first[0] == TLS_HANDSHAKE_RECORD),
    }
}

/// The content type of a TLS handshake record, a ClientHello's first byte.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;
/// What a TLS connection gathers before it encrypts: one record's worth.
const TLS_WRITE_BUFFER: usize = 16 * 1024;

/// The write half of a connection: a socket's sends what it is given; a TLS stream's holds
/// what it was given (the records of a batch) until it is flushed.
trait Outbound: AsyncWrite + Unpin {
    const BUFFERED: bool;
}

impl Outbound for tokio::net::tcp::OwnedWriteHalf {
    const BUFFERED: bool = false;
}

impl<W: AsyncWrite + Unpin> Outbound for tokio::io::BufWriter<W> {
    const BUFFERED: bool = true;
}

async fn serve_connection<R, W>(
    reader: R,
    writer: W,
    queue: Queue,
    stop: CancellationToken,
) -> Result<(), ConnError>
where
    R: AsyncRead + Unpin,
    W: Outbound,
{
    let counters = queue.target.metrics.port(queue.port.id).connection();
    let peer = queue.peer_addr;
    let mut conn = Connection {
        counters,
        reader,
        writer,
        rbuf: BytesMut::with_capacity(256 * 1024),
        decoder: Decoder::new(Role::Controller, MAX_H2C_DATA.max(limits::IO_INLINE_DATA)),
        digests: Digests::default(),
        out: Outgoing::with_capacity(64 * 1024),
        pending_writes: HashMap::new(),
        r2t_waiting: VecDeque::new(),
        r2t_outstanding: 0,
        // Before Connect, only the Connect itself: an admin queue's defaults will do.
        books: QueueBooks::new(0, limits::MAX_ADMIN_QUEUE_ENTRIES),
        close_after_flush: false,
    };
    let result = conn.run(&queue, &stop).await;
    queue.closed();
    if !matches!(result, Err(ConnError::Eof | ConnError::Io(_))) {
        conn.close().await;
    }
    if let Err(ConnError::Terminated(why)) = &result {
        tracing::warn!(%peer, "connection terminated: {why}");
    }
    result
}

/// Commands executing, each yielding its CID and answer (None: a retired AER, not answered).
type Inflight<'q> =
    FuturesUnordered<Pin<Box<dyn Future<Output = (u16, Option<Response>)> + Send + 'q>>>;

/// A write command waiting for its data (H2CData answering our R2T).
struct PendingWrite {
    cmd: Admitted,
    buf: BytesMut,
    /// The single payload when one H2CData PDU carried all the data (no copy).
    whole: Option<Bytes>,
    received: u32,
    /// The R2T went out (else the write waits in `r2t_waiting` for budget).
    r2t_sent: bool,
}

struct Connection<R, W> {
    /// Bytes in and out, for the port's metrics.
    counters: ConnectionGuard,
    reader: R,
    writer: W,
    rbuf: BytesMut,
    decoder: Decoder,
    digests: Digests,
    /// What the next write sends.
    out: Outgoing,
    pending_writes: HashMap<u16, PendingWrite>,
    /// Writes waiting for R2T budget, oldest first.
    r2t_waiting: VecDeque<u16>,
    /// Bytes asked for by R2Ts and not yet received.
    r2t_outstanding: u64,
    /// SQ head, CIDs in flight (waiting for data or executing), parked AERs.
    books: QueueBooks,
    close_after_flush: bool,
}

/// A protocol violation that ends the connection with a C2HTermReq.
struct Fatal(TermReq, &'static str);

impl Fatal {
    fn new(fes: u16, fei: u32, header: Bytes, why: &'static str) -> Fatal {
        Fatal(TermReq { fes, fei, header }, why)
    }
}

impl<R: AsyncRead + Unpin, W: Outbound> Connection<R, W> {
    /// Serves the queue; when it ends, for whatever reason, waits for the commands it had
    /// passed to the backend. Dropped, they would still complete at the drive, later: a write
    /// of this association could land after the host, reconnected, wrote the same blocks anew.
    async fn run<'q>(
        &mut self,
        queue: &'q Queue,
        stop: &CancellationToken,
    ) -> Result<(), ConnError> {
        self.initialize(stop).await?;
        let mut inflight: Inflight<'q> = FuturesUnordered::new();
        let result = self.serve(queue, stop, &mut inflight).await;
        self.books.retire_parked();
        while inflight.next().await.is_some() {}
        result
    }

    async fn serve<'q>(
        &mut self,
        queue: &'q Queue,
        stop: &CancellationToken,
        inflight: &mut Inflight<'q>,
    ) -> Result<(), ConnError> {
        let mut signals = Signals::new(stop, CONNECT_TIMEOUT);
        let mut stopping = false;
        loop {
            crate::reactor::active();
            // Everything already buffered first: PDUs, then completions that are ready.
            loop {
                match self.decoder.decode(&mut self.rbuf) {
                    Ok(Some(pdu)) => {
                        if let Err(f) = self.on_pdu(pdu, queue, inflight) {
                            return self.terminate(f).await;
                        }
                    }
                    Ok(None) => break,
                    Err(PduError::DataDigest { pdu_type, cccid }) => {
                        if let Err(f) = self.data_digest_error(queue, pdu_type, cccid) {
                            return self.terminate(f).await;
                        }
                    }
                    Err(e @ PduError::Fatal { reason, .. }) => {
                        let term = e
                            .term_req()
                            .expect("fatal errors have a termination request");
                        return self.terminate(Fatal(term, reason)).await;
                    }
                }
            }
            while let Some(Some((cid, resp))) = inflight.next().now_or_never() {
                self.executed(queue, cid, resp);
            }
            self.flush().await?;
            if self.close_after_flush {
                return Ok(());
            }
            if stopping && inflight.len() <= self.books.parked() {
                return Ok(());
            }
            signals.follow(queue);
            tokio::select! {
                // In this order, without select!'s random start (a thread-local generator's
                // draw per poll): the loop returns to it after every event anyway.
                biased;
                signal = signals.next() => match signal {
                    Signal::Teardown => return Ok(()),
                    Signal::ConnectTimeout => return Err(ConnError::ConnectTimeout(CONNECT_TIMEOUT)),
                    Signal::Stop => {
                        // Finish what is executing; writes still waiting for data were never
                        // acknowledged and the host will retry them after reconnecting.
                        stopping = true;
                        queue.target.shutting_down.store(true, Ordering::Release);
                    }
                },
                Some((cid, resp)) = inflight.next(), if !inflight.is_empty() => self.executed(queue, cid, resp),
                read = self.reader.read_buf(&mut self.rbuf), if !stopping => {
                    let n = read?;
                    if n == 0 {
                        return Err(ConnError::Eof);
                    }
                    self.counters.add_received(n);
                    self.reserve_for_next_pdu();
                }
            }
        }
    }

    /// Room for the rest of the PDU being received (its length is in the common header), so a
    /// large H2CData arrives in few reads and is never moved while it grows.
    fn reserve_for_next_pdu(&mut self) {
        const MIN_READ: usize = 64 * 1024;
        let pending = match self.rbuf.get(4..8) {
            Some(plen) => {
                let plen = u32::from_le_bytes(plen.try_into().expect("4 bytes")) as usize;
                // Bounded by what the decoder accepts; it rejects larger PDUs by their header.
                plen.min(MAX_H2C_DATA as usize + 1024)
                    .saturating_sub(self.rbuf.len())
            }
            None => 0,
        };
        self.rbuf.reserve(pending.max(MIN_READ));
    }

    /// ICReq / ICResp: the first PDU must be an ICReq; digests are echoed as the host asked.
    async fn initialize(&mut self, stop: &CancellationToken) -> Result<(), ConnError> {
        let icreq = tokio::select! {
            _ = stop.cancelled() => return Err(ConnError::Eof),
            r = crate::timer::timeout(IC_TIMEOUT, self.read_first_pdu()) => r.map_err(|_| ConnError::IcTimeout(IC_TIMEOUT))??,
        };
        let icreq: IcReq = match icreq {
            Ok(Pdu::IcReq(r)) => r,
            Ok(other) => {
                let mut head = BytesMut::new();
                other.encode_head(Digests::default(), &mut head);
                return self
                    .terminate(Fatal::new(
                        fes::PDU_SEQUENCE_ERROR,
                        0,
                        head.freeze(),
                        "first PDU is not ICReq",
                    ))
                    .await;
            }
            Err(f) => return self.terminate(f).await,
        };
        if icreq.hpda != 0 {
            let mut head = BytesMut::new();
            Pdu::IcReq(icreq).encode_head(Digests::default(), &mut head);
            return self
                .terminate(Fatal::new(
                    fes::INVALID_HEADER_FIELD,
                    10,
                    head.freeze(),
                    "HPDA other than 0",
                ))
                .await;
        }
        self.digests = icreq.digests;
        let resp = Pdu::IcResp(IcResp {
            pfv: 0,
            cpda: 0,
            digests: icreq.digests,
            maxh2cdata: MAX_H2C_DATA,
        });
        // The 6.1 host reads the ICResp with one receive: send it as one 128-byte write.
        let mut icresp = BytesMut::new();
        resp.encode(Digests::default(), &mut icresp);
        self.writer.write_all(&icresp).await?;
        self.counters.add_sent(icresp.len());
        self.decoder.set_digests(icreq.digests);
        Ok(())
    }

    async fn read_first_pdu(&mut self) -> Result<Result<Pdu, Fatal>, ConnError> {
        loop {
            match self.decoder.decode(&mut self.rbuf) {
                Ok(Some(pdu)) => return Ok(Ok(pdu)),
                Ok(None) => {}
                Err(PduError::Fatal {
                    fes,
                    fei,
                    header,
                    reason,
                }) => return Ok(Err(Fatal::new(fes, fei, header, reason))),
                Err(PduError::DataDigest { .. }) => {
                    return Ok(Err(Fatal::new(
                        fes::PDU_SEQUENCE_ERROR,
                        0,
                        Bytes::new(),
                        "first PDU is not ICReq",
                    )))
                }
            }
            let n = self.reader.read_buf(&mut self.rbuf).await?;
            if n == 0 {
                return Err(ConnError::Eof);
            }
            self.counters.add_received(n);
        }
    }

    fn on_pdu<'q>(
        &mut self,
        pdu: Pdu,
        queue: &'q Queue,
        inflight: &mut Inflight<'q>,
    ) -> Result<(), Fatal> {
        match pdu {
            Pdu::CapsuleCmd(cmd) => self.on_capsule(cmd, queue, inflight),
            Pdu::H2CData(data) => self.on_h2c_data(data, queue, inflight),
            Pdu::H2CTermReq(t) => {
                tracing::info!(fes = t.fes, fei = t.fei, "host terminated the connection");
                self.close_after_flush = true;
                Ok(())
            }
            other => Err(self.header_error(
                &other,
                fes::PDU_SEQUENCE_ERROR,
                0,
                "unexpected PDU after initialization",
            )),
        }
    }

    fn on_capsule<'q>(
        &mut self,
        capsule: CapsuleCmd,
        queue: &'q Queue,
        inflight: &mut Inflight<'q>,
    ) -> Result<(), Fatal> {
        let sqe = capsule.sqe;
        let cid = sqe.cid;
        match self.books.arrived(queue, cid) {
            Ok(Arrival::New | Arrival::RetiredEvent) => {}
            Ok(Arrival::CidConflict) => {
                // Answering would complete the other command in the host's eyes, but the
                // status says exactly what went wrong. The other command stays in flight.
                tracing::warn!(cid, "command identifier conflict");
                self.send_completion(queue, cid, Response::status(Status::CID_CONFLICT));
                return Ok(());
            }
            Err(_) => {
                return Err(self.header_error(
                    &Pdu::CapsuleCmd(capsule),
                    fes::PDU_SEQUENCE_ERROR,
                    0,
                    "more commands outstanding than the queue holds",
                ))
            }
        }
        let (len, in_capsule) = match sqe.sgl() {
            Ok(SglDescriptor::TransportDataBlock { length }) if capsule.data.is_empty() => {
                (length, None)
            }
            Ok(SglDescriptor::DataBlockOffset { offset, length }) => {
                if offset != 0
                    || length as usize != capsule.data.len()
                    || length > queue.inline_data_limit(&sqe)
                {
                    return self.fail(queue, cid, Status::SGL_OFFSET_INVALID);
                }
                (length, Some(capsule.data))
            }
            Ok(SglDescriptor::TransportDataBlock { .. }) => {
                return self.fail(queue, cid, Status::INVALID_FIELD)
            }
            Ok(_) | Err(_) => return self.fail(queue, cid, Status::SGL_TYPE_INVALID),
        };
        match queue.route(&sqe, len, in_capsule) {
            Route::Execute(cmd, data) => {
                if cmd.waits_for_an_event() {
                    let aer = self.books.park(cid, queue.execute(cmd, data));
                    inflight.push(Box::pin(async move { (cid, aer.await) }));
                } else {
                    self.start(queue, inflight, cid, cmd, data);
                }
            }
            Route::FetchData(cmd) => {
                self.pending_writes.insert(
                    cid,
                    PendingWrite {
                        cmd,
                        buf: BytesMut::new(),
                        whole: None,
                        received: 0,
                        r2t_sent: false,
                    },
                );
                self.r2t_waiting.push_back(cid);
                self.send_r2ts();
            }
            Route::Fail(status) => return self.fail(queue, cid, status),
        }
        Ok(())
    }

    /// Completes a command with an error before it ran.
    fn fail(&mut self, queue: &Queue, cid: u16, status: Status) -> Result<(), Fatal> {
        self.respond(queue, cid, Response::status(status));
        Ok(())
    }

    fn on_h2c_data<'q>(
        &mut self,
        data: H2CData,
        queue: &'q Queue,
        inflight: &mut Inflight<'q>,
    ) -> Result<(), Fatal> {
        let Some(pending) = self
            .pending_writes
            .get_mut(&data.ttag)
            .filter(|p| p.r2t_sent)
        else {
            return Err(self.header_error(
                &Pdu::H2CData(data),
                fes::INVALID_HEADER_FIELD,
                10,
                "H2CData for an unknown transfer tag",
            ));
        };
        let total = pending.cmd.transfer_len;
        if data.cccid != data.ttag {
            return Err(self.header_error(
                &Pdu::H2CData(data),
                fes::INVALID_HEADER_FIELD,
                8,
                "H2CData CCCID does not match its transfer tag",
            ));
        }
        if data.datao != pending.received {
            return Err(self.header_error(
                &Pdu::H2CData(data),
                fes::DATA_OUT_OF_RANGE,
                12,
                "H2CData offset is not where the data stopped",
            ));
        }
        let len = data.data.len() as u32;
        if pending.received + len > total {
            return Err(self.header_error(
                &Pdu::H2CData(data),
                fes::DATA_OUT_OF_RANGE,
                16,
                "H2CData beyond the requested length",
            ));
        }
        if pending.received == 0 && len == total {
            pending.whole = Some(data.data);
        } else {
            if pending.buf.capacity() == 0 {
                pending.buf.reserve(total as usize);
            }
            pending.buf.extend_from_slice(&data.data);
        }
        pending.received += len;
        if pending.received == total {
            let cid = data.cccid;
            let done = self
                .pending_writes
                .remove(&cid)
                .expect("pending write present");
            self.r2t_outstanding -= total as u64;
            self.send_r2ts();
            let payload = done.whole.unwrap_or_else(|| done.buf.freeze());
            self.start(queue, inflight, cid, done.cmd, payload);
        }
        Ok(())
    }

    /// Runs a command. Reads and writes of drives that complete at once (RAM, null) run in
    /// place, with no future allocated; any other command that completes when first polled
    /// (most admin commands) is answered in this pass too: no task in `inflight`, no wake-up
    /// to come back for.
    fn start<'q>(
        &mut self,
        queue: &'q Queue,
        inflight: &mut Inflight<'q>,
        cid: u16,
        mut cmd: Admitted,
        data: Bytes,
    ) {
        if let Some(resp) = queue.execute_now(&mut cmd, &data) {
            return self.respond(queue, cid, resp);
        }
        let mut run = Box::pin(queue.execute(cmd, data));
        match run.as_mut().now_or_never() {
            Some(resp) => self.respond(queue, cid, resp),
            // `inflight` polls it again at once, with a waker of its own.
            None => inflight.push(Box::pin(async move { (cid, Some(run.await)) })),
        }
    }

    /// Sends R2Ts for waiting writes, oldest first, while the budget allows (always at least
    /// one, so a single write larger than the budget still proceeds).
    fn send_r2ts(&mut self) {
        while let Some(&cid) = self.r2t_waiting.front() {
            let Some(pending) = self.pending_writes.get_mut(&cid) else {
                self.r2t_waiting.pop_front();
                continue;
            };
            let len = pending.cmd.transfer_len as u64;
            if self.r2t_outstanding > 0 && self.r2t_outstanding + len > R2T_BUDGET {
                return;
            }
            self.r2t_waiting.pop_front();
            pending.r2t_sent = true;
            self.r2t_outstanding += len;
            r2t(cid, len as u32).encode(self.digests, self.out.encoded());
        }
    }

    fn header_error(&self, pdu: &Pdu, fes: u16, fei: u32, why: &'static str) -> Fatal {
        let mut head = BytesMut::new();
        pdu.encode_head(self.digests, &mut head);
        Fatal::new(fes, fei, head.freeze(), why)
    }

    /// A data digest mismatch fails only that command, with a status the host retries.
    /// Data for a transfer we never asked for is a protocol error instead.
    fn data_digest_error(&mut self, queue: &Queue, pdu_type: u8, cid: u16) -> Result<(), Fatal> {
        tracing::warn!(cid, pdu_type, "data digest error");
        if pdu_type == pdu_type::CAPSULE_CMD {
            if self.books.arrived(queue, cid) != Ok(Arrival::New) {
                return Err(Fatal::new(
                    fes::PDU_SEQUENCE_ERROR,
                    0,
                    Bytes::new(),
                    "data digest error on a command whose CID is in use",
                ));
            }
        } else {
            match self.pending_writes.remove(&cid) {
                Some(p) if p.r2t_sent => {
                    self.r2t_outstanding -= p.cmd.transfer_len as u64;
                    self.send_r2ts();
                }
                _ => {
                    return Err(Fatal::new(
                        fes::INVALID_HEADER_FIELD,
                        8,
                        Bytes::new(),
                        "H2CData (with a bad data digest) for an unknown transfer",
                    ))
                }
            }
        }
        self.fail(queue, cid, Status::TRANSIENT_TRANSPORT_ERROR)
    }

    /// A command finished executing. A retired AER has no answer, and its CID is already
    /// another command's.
    fn executed(&mut self, queue: &Queue, cid: u16, resp: Option<Response>) {
        if let Some(resp) = resp {
            self.respond(queue, cid, resp);
        }
    }

    /// A command is done: it leaves the in-flight books and its answer is queued.
    fn respond(&mut self, queue: &Queue, cid: u16, resp: Response) {
        self.books.answered(queue, cid);
        self.send_completion(queue, cid, resp);
    }

    /// Queues the answer to a command: its data (C2HData) and its completion.
    fn send_completion(&mut self, queue: &Queue, cid: u16, resp: Response) {
        let sq_flow_disabled = queue.binding().is_some_and(|b| b.sq_flow_disabled);
        if resp.close {
            self.close_after_flush = true;
        }
        let cqe = self.books.completion(queue, cid, &resp);
        // SUCCESS in the last C2HData replaces the response capsule, which the spec allows only
        // when SQ flow control is disabled (and `c2h_success` does for every host).
        let success = resp.completes_with_data() && (sq_flow_disabled || queue.target.c2h_success);
        if !resp.data.is_empty() && resp.status.is_success() {
            self.push_c2h_data(C2HData {
                cccid: cid,
                datao: 0,
                last: true,
                success,
                data: resp.data,
            });
            if success {
                return;
            }
        }
        Pdu::CapsuleResp(CapsuleResp { cqe }).encode(self.digests, self.out.encoded());
    }

    /// Appends a C2HData PDU without copying its data.
    fn push_c2h_data(&mut self, data: C2HData) {
        let pdu = Pdu::C2HData(data);
        let ddgst = pdu.encode_head(self.digests, self.out.encoded());
        if let Pdu::C2HData(data) = pdu {
            self.out.push_data(data.data);
        }
        if let Some(d) = ddgst {
            self.out.encoded().extend_from_slice(&d.to_le_bytes());
        }
    }

    async fn flush(&mut self) -> Result<(), ConnError> {
        while !self.out.is_empty() {
            // Up to 128 read responses per system call. At 32 (64 segments), 4K random reads
            // at QD32 on the H200 machine took 1.7 writes per receive of commands. A few
            // segments go from a small array: setting up the large one took 773 of a QD1
            // read's 6,922 instructions (callgrind).
            let n = if self.out.segments() <= FEW_SEGMENTS {
                write_segments::<_, FEW_SEGMENTS>(&mut self.writer, &mut self.out).await?
            } else {
                write_segments::<_, MAX_SEGMENTS_PER_WRITE>(&mut self.writer, &mut self.out).await?
            };
            if n == 0 {
                return Err(ConnError::Io(std::io::ErrorKind::WriteZero.into()));
            }
            self.counters.add_sent(n);
            self.out.advance(n);
        }
        // A TLS stream's buffer goes out (with the ICResp, written before the first flush). A
        // socket's flush does nothing, and awaiting it twice a read cost 116 instructions of a
        // QD1 read's 4,972 (callgrind).
        if W::BUFFERED {
            self.writer.flush().await?;
        }
        Ok(())
    }

    /// Closes as a host that may still be sending expects: FIN first, then whatever the host
    /// had already sent is read and dropped until it closes too (its answer to our FIN), for at
    /// most CLOSE_LINGER. Dropping a socket with unread bytes would reset the connection, and
    /// the Linux host's next send then fails with EPIPE in the context of the process that
    /// submitted the I/O, which gets a SIGPIPE: fio died of one when fabrikd restarted.
    /// Commands dropped here were never answered; the host retries them after reconnecting.
    async fn close(mut self) {
        let _ = self.writer.shutdown().await;
        let drain = async {
            loop {
                self.rbuf.clear();
                self.rbuf.reserve(64 * 1024);
                match self.reader.read_buf(&mut self.rbuf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        };
        let _ = crate::timer::timeout(CLOSE_LINGER, drain).await;
    }

    /// Sends a C2HTermReq; the error it returns makes `serve_connection` close, as the spec asks
    /// for a fatal transport error.
    async fn terminate(&mut self, fatal: Fatal) -> Result<(), ConnError> {
        let Fatal(term, why) = fatal;
        let _ = self.flush().await;
        let mut buf = BytesMut::new();
        Pdu::C2HTermReq(term).encode(Digests::default(), &mut buf);
        let _ = self.writer.write_all(&buf).await;
        Err(ConnError::Terminated(why))
    }
}

/// Writes the first segments, up to `N` of them, with one system call.
async fn write_segments<W: AsyncWrite + Unpin, const N: usize>(
    writer: &mut W,
    out: &mut Outgoing,
) -> std::io::Result<usize> {
    let mut slices = [IoSlice::new(&[]); N];
    let count = out.slices(&mut slices);
    writer.write_vectored(&slices[..count]).await
}

/// One R2T for the whole transfer, as the Linux target does; TTAG = CID.
fn r2t(cid: u16, len: u32) -> Pdu {
    Pdu::R2T(R2T {
        cccid: cid,
        ttag: cid,
        r2to: 0,
        r2tl: len,
    })
}
