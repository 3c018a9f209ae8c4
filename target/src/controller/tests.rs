//! The controller and a queue's books driven in memory, as a transport drives them: commands
//! in, completions out, no socket and no queue pair.

mod ana;
mod caps;

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use fabrik_proto::fabrics::nqn::Nqn;
use fabrik_proto::fabrics::property::offset;
use fabrik_proto::fabrics::{ConnectData, FabricsCommand, CATTR_DISABLE_SQ_FLOW};
use fabrik_proto::nvme::admin::{cns, AdminCommand};
use fabrik_proto::nvme::io::IoCommand;
use fabrik_proto::{Cqe, Sqe, Status};

use super::books::{Arrival, QueueBooks, QueueOverrun};
use super::limits;
use super::queue::{Admitted, Queue, Response, Route};
use super::{Subsystem, TargetState};
use crate::backend::ram::RamDrive;
use crate::model::{Namespace, Port, Transport, TransportCaps};

const SUBNQN: &str = "nqn.2024-01.io.fabrik:test:drive-00";
const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001";

fn target() -> Arc<TargetState> {
    let target = Arc::new(TargetState::new("test".into()));
    let sub = Subsystem::new(
        Nqn::new(SUBNQN).unwrap(),
        "serial".into(),
        "model".into(),
        None,
    );
    let drive = Arc::new(RamDrive::new(1 << 20, 4096).unwrap());
    sub.add_namespace(Arc::new(Namespace::new(1, "00", drive, "seed")));
    target.add_subsystem(Arc::new(sub));
    target
}

/// One queue as a transport holds it: the controller's view and the books.
struct TestQueue {
    queue: Queue,
    books: QueueBooks,
}

impl TestQueue {
    fn new(target: &Arc<TargetState>, unbound_qid: u16, unbound_entries: u32) -> TestQueue {
        let addr: SocketAddr = "127.0.0.1:4420".parse().unwrap();
        let port = Port {
            id: 1,
            transport: Transport::Tcp,
            addr,
            caps: TransportCaps {
                keyed_sgls: false,
                in_capsule_data: limits::IO_INLINE_DATA,
                tsas: fabrik_proto::fabrics::discovery::Tsas::Tcp { sectype: 0 },
                treq: 0,
            },
        };
        TestQueue {
            queue: Queue::new(
                target.clone(),
                port,
                addr,
                "127.0.0.1:50000".parse().unwrap(),
            ),
            books: QueueBooks::new(unbound_qid, unbound_entries),
        }
    }

    /// Submits a command with the data it carries (or, for one whose SGL points at host
    /// memory, the data the transport fetched) and returns its completion and data.
    async fn submit(&mut self, sqe: Sqe, data: Bytes) -> (Cqe, Bytes) {
        assert_eq!(self.books.arrived(&self.queue, sqe.cid), Ok(Arrival::New));
        let len = data.len() as u32;
        let in_capsule = (!data.is_empty()).then(|| data.clone());
        let resp = match self.queue.route(&sqe, len, in_capsule) {
            Route::Execute(cmd, d) => self.run(cmd, d).await,
            Route::FetchData(cmd) => self.run(cmd, data).await,
            Route::Fail(status) => Response::status(status),
        };
        self.books.answered(&self.queue, sqe.cid);
        (
            self.books.completion(&self.queue, sqe.cid, &resp),
            resp.data,
        )
    }

    /// Runs an admitted command as the transports do: at once where it can, else awaited.
    async fn run(&self, mut cmd: Admitted, data: Bytes) -> Response {
        match self.queue.execute_now(&mut cmd, &data) {
            Some(resp) => resp,
            None => self.queue.execute(cmd, data).await,
        }
    }

    /// A read command moving `len` bytes to the host.
    async fn submit_read(&mut self, sqe: Sqe, len: u32) -> (Cqe, Bytes) {
        assert_eq!(self.books.arrived(&self.queue, sqe.cid), Ok(Arrival::New));
        let resp = match self.queue.route(&sqe, len, None) {
            Route::Execute(cmd, d) => self.run(cmd, d).await,
            Route::Fail(status) => Response::status(status),
            other => panic!("a read never fetches data: {other:?}"),
        };
        self.books.answered(&self.queue, sqe.cid);
        (
            self.books.completion(&self.queue, sqe.cid, &resp),
            resp.data,
        )
    }

    async fn connect(&mut self, qid: u16, sqsize: u16, cattr: u8, cntlid: u16) -> Cqe {
        let sqe = FabricsCommand::Connect {
            recfmt: 0,
            qid,
            sqsize,
            cattr,
            kato: if qid == 0 { 30_000 } else { 0 },
        }
        .to_sqe(100 + qid);
        let data = ConnectData {
            host_id: [7; 16],
            cntlid,
            subnqn: Nqn::new(SUBNQN).unwrap(),
            hostnqn: Some(Nqn::new(HOSTNQN).unwrap()),
        };
        self.submit(sqe, Bytes::copy_from_slice(&data.to_bytes()[..]))
            .await
            .0
    }
}

/// An admin queue connected and enabled; its controller's ID.
async fn enabled_controller(target: &Arc<TargetState>) -> (TestQueue, u16) {
    let mut admin = TestQueue::new(target, 0, limits::MAX_ADMIN_QUEUE_ENTRIES);
    let cqe = admin.connect(0, 31, 0, 0xffff).await;
    assert_eq!(cqe.status, Status::SUCCESS);
    let cntlid = cqe.result as u16;
    let enable = FabricsCommand::PropertySet {
        size8: false,
        offset: offset::CC,
        // EN, IOSQES 6 (64 B), IOCQES 4 (16 B).
        value: 1 | 6 << 16 | 4 << 20,
    };
    let (cqe, _) = admin.submit(enable.to_sqe(1), Bytes::new()).await;
    assert_eq!(cqe.status, Status::SUCCESS);
    (admin, cntlid)
}

#[tokio::test]
async fn an_admin_queue_connects_enables_and_identifies_without_a_transport() {
    let target = target();
    let (mut admin, cntlid) = enabled_controller(&target).await;
    let csts = FabricsCommand::PropertyGet {
        size8: false,
        offset: offset::CSTS,
    };
    let (cqe, _) = admin.submit(csts.to_sqe(2), Bytes::new()).await;
    assert_eq!(cqe.result & 1, 1, "CSTS.RDY");
    let identify = AdminCommand::Identify {
        nsid: 0,
        cns: cns::CONTROLLER,
        cntid: 0,
        csi: 0,
    };
    let (cqe, data) = admin.submit_read(identify.to_sqe(3), 4096).await;
    assert_eq!(cqe.status, Status::SUCCESS);
    assert_eq!(data.len(), 4096);
    assert_eq!(u16::from_le_bytes([data[78], data[79]]), cntlid, "CNTLID");
    assert!(data[768..].starts_with(SUBNQN.as_bytes()), "SUBNQN");
    // Four commands fetched from a 32-entry admin queue: SQHD 4, SQID 0.
    assert_eq!((cqe.sqhd, cqe.sqid, cqe.cid), (4, 0, 3));
}

#[tokio::test]
async fn data_written_through_an_io_queue_reads_back() {
    let target = target();
    let (_admin, cntlid) = enabled_controller(&target).await;
    let mut io = TestQueue::new(&target, 1, 4);
    assert_eq!(io.connect(1, 3, 0, cntlid).await.status, Status::SUCCESS);
    let data: Bytes = (0..8192u32).map(|i| (i * 7 % 251) as u8).collect();
    let write = IoCommand::Write {
        nsid: 1,
        slba: 5,
        nlb: 2,
        fua: false,
    };
    let (cqe, _) = io.submit(write.to_sqe(1), data.clone()).await;
    assert_eq!(cqe.status, Status::SUCCESS);
    let read = IoCommand::Read {
        nsid: 1,
        slba: 5,
        nlb: 2,
        fua: false,
    };
    let (cqe, back) = io.submit_read(read.to_sqe(2), 8192).await;
    assert_eq!(cqe.status, Status::SUCCESS);
    assert_eq!(back, data);
    // Connect, write, read on a 4-entry queue: SQHD wraps to 3 % 4; SQID is the queue's.
    assert_eq!((cqe.sqhd, cqe.sqid), (3, 1));
    let beyond = IoCommand::Read {
        nsid: 1,
        slba: 256,
        nlb: 1,
        fua: false,
    };
    let (cqe, _) = io.submit_read(beyond.to_sqe(3), 4096).await;
    assert_eq!(cqe.status, Status::LBA_OUT_OF_RANGE);
    assert_eq!(cqe.sqhd, 0, "the fourth command fetched wraps SQHD to 0");
}

#[tokio::test]
async fn a_read_given_memory_answers_with_its_data_there_and_other_commands_give_it_back() {
    use crate::backend::read_buf::test_lender::VecLender;
    use std::sync::atomic::Ordering;
    let target = target();
    let (admin, cntlid) = enabled_controller(&target).await;
    let mut io = TestQueue::new(&target, 1, 8);
    assert_eq!(io.connect(1, 7, 0, cntlid).await.status, Status::SUCCESS);
    let data: Bytes = (0..8192u32).map(|i| (i * 13 % 253) as u8).collect();
    let write = IoCommand::Write {
        nsid: 1,
        slba: 9,
        nlb: 2,
        fua: false,
    };
    assert_eq!(
        io.submit(write.to_sqe(1), data.clone()).await.0.status,
        Status::SUCCESS
    );
    let lender = VecLender::new();
    let read = IoCommand::Read {
        nsid: 1,
        slba: 9,
        nlb: 2,
        fua: false,
    };
    let Route::Execute(mut cmd, none) = io.queue.route(&read.to_sqe(2), 8192, None) else {
        panic!("a read executes at once");
    };
    assert!(cmd.reads_into_lent_memory());
    let buf = lender.buf(8192, 0xa5);
    let at = buf.as_slice().as_ptr() as usize;
    cmd.read_into(buf).expect("a read takes the memory");
    let resp = io.queue.execute(cmd, none).await;
    assert_eq!(resp.status, Status::SUCCESS);
    assert_eq!(resp.data, data);
    assert_eq!(
        resp.data.as_ptr() as usize,
        at,
        "read where the memory lies"
    );
    drop(resp);
    assert_eq!(
        lender.out.load(Ordering::SeqCst),
        0,
        "back when the data goes"
    );
    // A buffer of another size, a write, an admin command's data: not taken.
    let Route::Execute(mut cmd, _) = io.queue.route(&read.to_sqe(3), 8192, None) else {
        panic!("a read executes at once");
    };
    assert!(cmd.read_into(lender.buf(4096, 0)).is_err());
    let Route::FetchData(mut cmd) = io.queue.route(&write.to_sqe(4), 8192, None) else {
        panic!("a write fetches its data");
    };
    assert!(!cmd.reads_into_lent_memory());
    assert!(cmd.read_into(lender.buf(8192, 0)).is_err());
    let identify = AdminCommand::Identify {
        nsid: 0,
        cns: cns::CONTROLLER,
        cntid: 0,
        csi: 0,
    };
    let Route::Execute(mut cmd, _) = admin.queue.route(&identify.to_sqe(9), 4096, None) else {
        panic!("identify executes at once");
    };
    assert!(
        !cmd.reads_into_lent_memory(),
        "a transport lends it nothing"
    );
    assert!(cmd.read_into(lender.buf(4096, 0)).is_err());
    assert_eq!(
        lender.out.load(Ordering::SeqCst),
        0,
        "refused buffers went back"
    );
}

#[tokio::test]
async fn a_queue_takes_as_many_commands_as_it_holds_and_no_more() {
    let target = target();
    let (_admin, cntlid) = enabled_controller(&target).await;
    let mut io = TestQueue::new(&target, 1, 4);
    io.connect(1, 3, 0, cntlid).await;
    for cid in 0..4 {
        assert_eq!(io.books.arrived(&io.queue, cid), Ok(Arrival::New));
    }
    assert_eq!(
        io.books.arrived(&io.queue, 4),
        Err(QueueOverrun { entries: 4 })
    );
    io.books.answered(&io.queue, 2);
    assert_eq!(io.books.arrived(&io.queue, 4), Ok(Arrival::New));
    assert_eq!(io.books.outstanding(), 4);
    // The controller sees its I/O queues' commands in flight (a module drains by it).
    let ctrl = io.queue.controller().unwrap().clone();
    assert_eq!(ctrl.io_in_flight(), 4);
    for cid in [0, 1, 3] {
        io.books.answered(&io.queue, cid);
    }
    assert_eq!(ctrl.io_in_flight(), 1);
    io.books.answered(&io.queue, 4);
    assert_eq!(ctrl.io_in_flight(), 0);
}

#[tokio::test]
async fn a_cid_in_use_conflicts_and_stays_with_its_command() {
    let target = target();
    let mut q = TestQueue::new(&target, 0, 32);
    assert_eq!(q.books.arrived(&q.queue, 9), Ok(Arrival::New));
    assert_eq!(q.books.arrived(&q.queue, 9), Ok(Arrival::CidConflict));
    assert_eq!(
        q.books.outstanding(),
        1,
        "the conflicting command is not counted"
    );
    q.books.answered(&q.queue, 9);
    assert_eq!(q.books.outstanding(), 0);
    assert_eq!(q.books.arrived(&q.queue, 9), Ok(Arrival::New));
}

#[tokio::test]
async fn a_command_reusing_a_parked_event_request_s_cid_retires_it() {
    use futures_util::FutureExt;
    let target = target();
    let mut q = TestQueue::new(&target, 0, 32);
    assert_eq!(q.books.arrived(&q.queue, 3), Ok(Arrival::New));
    let aer = q.books.park(3, std::future::pending::<Response>());
    assert_eq!(q.books.parked(), 1);
    assert_eq!(q.books.arrived(&q.queue, 3), Ok(Arrival::RetiredEvent));
    assert_eq!(q.books.parked(), 0);
    assert_eq!(
        q.books.outstanding(),
        1,
        "the new command took the AER's place"
    );
    assert!(matches!(aer.now_or_never(), Some(None)), "never answered");
    q.books.answered(&q.queue, 3);
    assert_eq!(q.books.outstanding(), 0);
}

#[tokio::test]
async fn completions_follow_the_queue_s_size_and_flow_control() {
    let target = target();
    // Before Connect: the transport's own view of the queue (an NVMe/RDMA CM request's).
    let unbound = TestQueue::new(&target, 3, 8);
    let cqe = unbound.books.completion(&unbound.queue, 1, &Response::ok());
    assert_eq!((cqe.sqid, cqe.sqhd), (3, 0));

    let (_admin, cntlid) = enabled_controller(&target).await;
    let mut io = TestQueue::new(&target, 2, 8);
    let cqe = io.connect(2, 7, CATTR_DISABLE_SQ_FLOW, cntlid).await;
    assert_eq!(cqe.status, Status::SUCCESS);
    assert_eq!(
        (cqe.sqid, cqe.sqhd),
        (2, 0xffff),
        "SQ flow control disabled"
    );
}

#[tokio::test]
async fn memory_drives_run_reads_and_writes_at_once_and_count_them_as_awaited_ones() {
    use crate::backend::guard::{Guarded, Inject};
    use crate::backend::Drive;
    let target = target();
    let sub = target.subsystem(SUBNQN).unwrap();
    let guarded = Arc::new(Guarded::new(
        Arc::new(RamDrive::new(1 << 20, 4096).unwrap()),
        None,
        Box::new(|_| {}),
    ));
    sub.add_namespace(Arc::new(Namespace::new(2, "01", guarded.clone(), "seed1")));
    let (admin, cntlid) = enabled_controller(&target).await;
    let mut io = TestQueue::new(&target, 1, 16);
    assert_eq!(io.connect(1, 15, 0, cntlid).await.status, Status::SUCCESS);
    let data: Bytes = (0..4096u32).map(|i| (i % 241) as u8).collect();
    let write = |cid, fua| {
        IoCommand::Write {
            nsid: 2,
            slba: 1,
            nlb: 1,
            fua,
        }
        .to_sqe(cid)
    };
    let read = |cid| {
        IoCommand::Read {
            nsid: 2,
            slba: 1,
            nlb: 1,
            fua: false,
        }
        .to_sqe(cid)
    };
    let admitted = |sqe: &Sqe, len| match io.queue.route(sqe, len, None) {
        Route::Execute(cmd, _) | Route::FetchData(cmd) => cmd,
        Route::Fail(s) => panic!("{s:?}"),
    };
    // At once: no future.
    let resp = io
        .queue
        .execute_now(&mut admitted(&write(1, false), 4096), &data);
    assert_eq!(resp.map(|r| r.status), Some(Status::SUCCESS));
    let resp = io
        .queue
        .execute_now(&mut admitted(&read(2), 4096), &Bytes::new());
    assert_eq!(resp.map(|r| r.data), Some(data.clone()));
    // Awaited: the same command, the same answer.
    let resp = io
        .queue
        .execute(admitted(&read(3), 4096), Bytes::new())
        .await;
    assert_eq!(resp.data, data);
    // Counted alike: two reads, one write, each with its latency.
    let ns = sub.namespace(2).unwrap();
    assert_eq!((ns.stats.read_commands(), ns.stats.bytes_read()), (2, 8192));
    assert_eq!(
        (ns.stats.write_commands(), ns.stats.bytes_written()),
        (1, 4096)
    );
    let timed = |f: fn(&crate::stats::DriveCounters) -> u64| ns.stats.io.all().map(f).sum::<u64>();
    assert_eq!(timed(|c| c.read_latency.snapshot().count()), 2);
    assert_eq!(timed(|c| c.write_latency.snapshot().count()), 1);
    let ctrl = io.queue.controller().unwrap();
    let ops: u64 = ctrl
        .io_counters
        .all()
        .map(|c| c.read_ops.load(std::sync::atomic::Ordering::Relaxed))
        .sum();
    assert_eq!(ops, 2);

    // A write the drive fails at once is answered as an awaited one would be: Write Fault,
    // counted against the drive, in the controller's error log.
    guarded.inject(Inject::SyncError);
    guarded.write(0, data.clone(), true).await.unwrap_err();
    let resp = io
        .queue
        .execute_now(&mut admitted(&write(4, true), 4096), &data);
    assert_eq!(resp.map(|r| r.status), Some(Status::WRITE_FAULT));
    assert_eq!(
        timed(|c| c.errors.load(std::sync::atomic::Ordering::Relaxed)),
        1
    );
    let get_log = AdminCommand::GetLogPage {
        nsid: 0,
        lid: fabrik_proto::nvme::log::lid::ERROR_INFO,
        lsp: 0,
        rae: false,
        numd: 64 / 4 - 1,
        lpo: 0,
        csi: 0,
    };
    let mut admin = admin;
    let (cqe, log) = admin.submit_read(get_log.to_sqe(10), 64).await;
    assert_eq!(cqe.status, Status::SUCCESS);
    let newest = fabrik_proto::nvme::log::ErrorLogEntry::decode(&log).unwrap();
    assert_eq!((newest.sqid, newest.cid, newest.nsid), (1, 4, 2));

    // What cannot run at once comes back: an admin command, a drive that waits.
    let identify = AdminCommand::Identify {
        nsid: 0,
        cns: cns::CONTROLLER,
        cntid: 0,
        csi: 0,
    };
    let Route::Execute(mut cmd, d) = admin.queue.route(&identify.to_sqe(9), 4096, None) else {
        panic!("identify executes at once");
    };
    assert!(admin.queue.execute_now(&mut cmd, &d).is_none());
    assert!(guarded.clear_fault().is_some());
    guarded.inject(Inject::SlowWrite(std::time::Duration::from_millis(1)));
    let mut slow = admitted(&write(5, false), 4096);
    assert!(io.queue.execute_now(&mut slow, &data).is_none());
    assert_eq!(io.queue.execute(slow, data).await.status, Status::SUCCESS);
}

#[tokio::test]
async fn a_write_admitted_before_its_namespace_went_away_follows_the_nsid() {
    let target = target();
    let sub = target.subsystem(SUBNQN).unwrap();
    let (_admin, cntlid) = enabled_controller(&target).await;
    let mut io = TestQueue::new(&target, 1, 8);
    assert_eq!(io.connect(1, 7, 0, cntlid).await.status, Status::SUCCESS);
    let data: Bytes = (0..4096u32).map(|i| (i % 253) as u8).collect();
    let write = |cid| {
        IoCommand::Write {
            nsid: 1,
            slba: 3,
            nlb: 1,
            fua: false,
        }
        .to_sqe(cid)
    };
    // Admitted (its data would now be fetched from the host), then the namespace is removed:
    // the write must not reach the drive that was taken away.
    let Route::FetchData(cmd) = io.queue.route(&write(1), 4096, None) else {
        panic!("a write without in-capsule data fetches it")
    };
    let old = sub.remove_namespace(1).unwrap();
    let mut cmd = cmd;
    assert!(
        io.queue.execute_now(&mut cmd, &data).is_none(),
        "a removed namespace's write is not run at once"
    );
    let resp = io.queue.execute(cmd, data.clone()).await;
    assert_eq!(resp.status, Status::INVALID_NAMESPACE);

    // Admitted against one drive, run after another replaced it under the same NSID: the
    // write lands on the namespace the NSID names when it runs, as a fresh lookup would.
    let first = Arc::new(RamDrive::new(1 << 20, 4096).unwrap());
    sub.add_namespace(Arc::new(Namespace::new(1, "01", first.clone(), "seed1")));
    let Route::FetchData(cmd) = io.queue.route(&write(2), 4096, None) else {
        panic!("a write without in-capsule data fetches it")
    };
    let second = Arc::new(RamDrive::new(1 << 20, 4096).unwrap());
    sub.add_namespace(Arc::new(Namespace::new(1, "02", second.clone(), "seed2")));
    let resp = io.queue.execute(cmd, data.clone()).await;
    assert_eq!(resp.status, Status::SUCCESS);
    use crate::backend::Drive;
    assert_eq!(second.read(3 * 4096, 4096).await.unwrap(), data);
    let untouched = first.read(3 * 4096, 4096).await.unwrap();
    assert!(untouched.iter().all(|&b| b == 0));
    assert!(old.is_removed());
}

#[tokio::test]
async fn queues_keep_no_namespace_once_it_is_removed_or_they_close() {
    let target = target();
    let sub = target.subsystem(SUBNQN).unwrap();
    let (_admin, cntlid) = enabled_controller(&target).await;
    let mut io = TestQueue::new(&target, 1, 8);
    assert_eq!(io.connect(1, 7, 0, cntlid).await.status, Status::SUCCESS);
    let read = |cid| {
        IoCommand::Read {
            nsid: 1,
            slba: 0,
            nlb: 1,
            fua: false,
        }
        .to_sqe(cid)
    };
    let drive = Arc::new(RamDrive::new(1 << 20, 4096).unwrap());
    let ns = Arc::new(Namespace::new(1, "01", drive.clone(), "seed1"));
    sub.add_namespace(ns.clone());
    let (cqe, _) = io.submit_read(read(1), 4096).await;
    assert_eq!(cqe.status, Status::SUCCESS);
    assert_eq!(
        Arc::strong_count(&ns),
        3,
        "this test, the subsystem, the queue's cache"
    );
    // Removed, nothing else holds it, nor its drive (a file drive: its lock on the file).
    drop(sub.remove_namespace(1));
    assert_eq!(Arc::strong_count(&ns), 1);
    drop(ns);
    assert_eq!(Arc::strong_count(&drive), 1);
    let (cqe, _) = io.submit_read(read(2), 4096).await;
    assert_eq!(cqe.status, Status::INVALID_NAMESPACE);

    // A queue that closes lets go of what it cached.
    let ns = Arc::new(Namespace::new(1, "02", drive, "seed2"));
    sub.add_namespace(ns.clone());
    let (cqe, _) = io.submit_read(read(3), 4096).await;
    assert_eq!(cqe.status, Status::SUCCESS);
    assert_eq!(Arc::strong_count(&ns), 3);
    io.queue.closed();
    assert_eq!(Arc::strong_count(&ns), 2);
}

#[test]
fn only_data_with_a_plain_success_may_stand_for_the_completion() {
    assert!(Response::data(vec![1u8; 4096]).completes_with_data());
    // The host completes from the data with a zero result and success: anything more needs the
    // completion itself.
    let with_result = Response {
        result: 7,
        ..Response::data(vec![1u8; 4096])
    };
    assert!(!with_result.completes_with_data());
    let failed = Response {
        status: Status::UNRECOVERED_READ_ERROR,
        ..Response::data(vec![1u8; 4096])
    };
    assert!(!failed.completes_with_data());
    assert!(
        !Response::ok().completes_with_data(),
        "no data to stand for it"
    );
}
