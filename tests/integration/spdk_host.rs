//! What SPDK's NVMe/TCP host does that the Linux host does not, byte for byte:
//! - by default it sends an empty Host NQN in Connect (spdk_nvme_perf, bdev_nvme): let in where
//!   any host may connect, refused as an unknown host where an allow list applies;
//! - at detach it completes its own Asynchronous Event Requests without telling the target and
//!   reuses their CIDs for the shutdown: Property Get CC, Property Set CC.SHN, then Property Get
//!   CSTS until the shutdown is complete.

mod common;
mod metrics_scrape;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::raw::RawConn;
use fabrik_api::models::CompositionRequest;
use fabrik_initiator::proto::fabrics::connect::invalid_parameter_result;
use fabrik_initiator::proto::fabrics::nqn::Nqn;
use fabrik_initiator::proto::fabrics::{ConnectData, FabricsCommand};
use fabrik_initiator::proto::nvme::admin::AdminCommand;
use fabrik_initiator::proto::nvme::features::{aec, fid};
use fabrik_initiator::proto::nvme::io::IoCommand;
use fabrik_initiator::proto::nvme::log::{aen, lid};
use fabrik_initiator::proto::tcp::Digests;
use fabrik_initiator::proto::Status;
use fabrik_initiator::transport::{TcpQueue, TcpQueueConfig};
use fabrik_initiator::HostIdentity;
use fabrik_target::backend::ram::RamDrive;
use fabrik_target::metrics::MetricsEndpoint;
use fabrik_target::model::Namespace;

const CC: u32 = 0x14;
const CSTS: u32 = 0x1c;

fn property_get(cid: u16, offset: u32) -> fabrik_initiator::proto::Sqe {
    FabricsCommand::PropertyGet {
        size8: false,
        offset,
    }
    .to_sqe(cid)
}

/// An I/O queue of controller `cntlid` connected without a host NQN, as SPDK's host does.
async fn anonymous_io_queue(api: &common::api::Api, subnqn: &str, cntlid: u16) -> TcpQueue {
    let queue = TcpQueue::connect(api.nvme(), TcpQueueConfig::new(1, 32, Digests::default()))
        .await
        .unwrap();
    let connect = FabricsCommand::Connect {
        recfmt: 0,
        qid: 1,
        sqsize: 31,
        cattr: 0,
        kato: 0,
    }
    .to_sqe(0);
    let data = ConnectData {
        host_id: [0x5d; 16],
        cntlid,
        subnqn: Nqn::new(subnqn).unwrap(),
        hostnqn: None,
    };
    let done = queue
        .submit(
            connect,
            Some(Bytes::copy_from_slice(&*data.to_bytes())),
            0,
            8192,
        )
        .await
        .unwrap();
    assert_eq!(done.cqe.status, Status::SUCCESS, "I/O queue Connect");
    queue
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_without_a_host_nqn_is_let_in_only_where_any_host_may_connect() {
    let dir = tempfile::tempdir().unwrap();
    let api = common::api::start(dir.path()).await;
    let metrics =
        MetricsEndpoint::start(api.target.manager(), "127.0.0.1:0".parse().unwrap(), None)
            .await
            .unwrap();
    let open = common::api::nqn("00");

    // Drive 00: any host may connect, so an empty host NQN is let in, and does I/O.
    let mut admin = RawConn::connect(api.nvme(), Digests::default()).await;
    let cqe = admin.admin_connect_as(&open, None).await;
    assert_eq!(cqe.status, Status::SUCCESS, "{cqe:?}");
    let cntlid = cqe.dw0() as u16;
    admin.enable_controller().await;
    let io = anonymous_io_queue(&api, &open, cntlid).await;
    let data = common::random_data(4096, 15);
    let write = IoCommand::Write {
        nsid: 1,
        slba: 8,
        nlb: 1,
        fua: false,
    };
    let done = io
        .submit(write.to_sqe(0), Some(data.clone()), 0, 8192)
        .await
        .unwrap();
    assert_eq!(done.cqe.status, Status::SUCCESS);
    let read = IoCommand::Read {
        nsid: 1,
        slba: 8,
        nlb: 1,
        fua: false,
    };
    let done = io.submit(read.to_sqe(0), None, 4096, 0).await.unwrap();
    common::assert_same_data(&done.data, &data, "read back by the anonymous host");

    // Shown as anonymous, not as a blank: null in REST, "(anonymous)" in metrics.
    let ctrls = api.admin.controllers().await.unwrap();
    let ctrl = ctrls
        .iter()
        .find(|c| c.subsystem == open && c.cntlid == cntlid)
        .expect("the anonymous host's controller is listed");
    assert_eq!(ctrl.host_nqn, None);
    assert_eq!(ctrl.io_queues, 1);
    let (_, text) = metrics_scrape::scrape(metrics.addr(), None).await;
    let samples = metrics_scrape::parse(&text);
    let labels = [("subsystem", open.as_str()), ("host", "(anonymous)")];
    assert_eq!(
        metrics_scrape::value(&samples, "fabrik_controller_io_queues", &labels),
        1.0,
        "{text}"
    );

    // Drive 01 composed to one host: an empty host NQN is an unknown host there.
    let owner = HostIdentity::random();
    api.admin
        .compose(&CompositionRequest {
            host_nqn: owner.nqn.clone(),
            drives: vec!["01".into()],
            ports: None,
            shared: false,
        })
        .await
        .unwrap();
    let mut refused = RawConn::connect(api.nvme(), Digests::default()).await;
    let cqe = refused
        .admin_connect_as(&common::api::nqn("01"), None)
        .await;
    assert_eq!(cqe.status, Status::CONNECT_INVALID_HOST, "{cqe:?}");
    assert_eq!(
        cqe.dw0(),
        invalid_parameter_result(true, 512),
        "IATTR 1, IPO 512"
    );
    common::api::connect_and_close(api.nvme(), &common::api::nqn("01"), &owner).await;

    drop((io, admin, refused));
    api.stop().await;
}

/// SPDK's detach: its AERs (CIDs it completed itself) are retired by the shutdown commands that
/// reuse their CIDs, never answered afterwards; events still reach the AERs sent later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spdk_detach_reuses_the_cids_of_its_event_requests() {
    let dir = tempfile::tempdir().unwrap();
    let api = common::api::start(dir.path()).await;
    let nqn = common::api::nqn("00");
    let mut conn = RawConn::connect(api.nvme(), Digests::default()).await;
    assert!(conn.admin_connect_as(&nqn, None).await.status.is_success());
    conn.enable_controller().await;
    let aec_on = AdminCommand::SetFeatures {
        nsid: 0,
        fid: fid::ASYNC_EVENT_CONFIG,
        save: false,
        cdw11: aec::NS_ATTR_NOTICES,
        cdw12: 0,
        cdw13: 0,
        cdw14: 0,
    };
    assert!(conn.command(aec_on.to_sqe(2)).await.status.is_success());

    // AERs on CIDs 3 and 4; the host completes them itself and reads CC on CID 3, then on 4.
    for cid in [3, 4] {
        conn.send_command(AdminCommand::AsyncEventRequest.to_sqe(cid))
            .await;
    }
    let mut cc = 0;
    for cid in [3, 4] {
        let got = conn.command(property_get(cid, CC)).await;
        assert_eq!((got.cid, got.status), (cid, Status::SUCCESS), "{got:?}");
        assert_eq!(got.dw0() & 1, 1, "CC.EN is set");
        cc = got.dw0();
    }

    // An event goes to the AER sent afterwards, not to a retired one.
    conn.send_command(AdminCommand::AsyncEventRequest.to_sqe(5))
        .await;
    let subsystem = api.target.state().subsystem(&nqn).unwrap();
    let drive = Arc::new(RamDrive::new(16 << 20, 4096).unwrap());
    subsystem.add_namespace(Arc::new(Namespace::new(2, "extra", drive, "testbox:extra")));
    let event = conn.next_completion().await;
    assert_eq!((event.cid, event.status), (5, Status::SUCCESS));
    assert_eq!(
        event.dw0(),
        aen::result(
            aen::TYPE_NOTICE,
            aen::NOTICE_NS_ATTR_CHANGED,
            lid::CHANGED_NS_LIST
        )
    );

    // The shutdown, as SPDK sends it: CC.SHN, then CSTS until the shutdown is complete.
    let set_shn = FabricsCommand::PropertySet {
        size8: false,
        offset: CC,
        value: (cc | 1 << 14) as u64,
    };
    let done = conn.command(set_shn.to_sqe(4)).await;
    assert_eq!((done.cid, done.status), (4, Status::SUCCESS), "{done:?}");
    let start = Instant::now();
    loop {
        let csts = conn.command(property_get(4, CSTS)).await;
        assert_eq!((csts.cid, csts.status), (4, Status::SUCCESS), "{csts:?}");
        if (csts.dw0() >> 2) & 3 == 2 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "SHST never complete"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Nothing more comes for the retired AERs: the next completion is Keep Alive's.
    let ka = conn.command(AdminCommand::KeepAlive.to_sqe(9)).await;
    assert_eq!((ka.cid, ka.status), (9, Status::SUCCESS), "{ka:?}");
    drop(conn);
    api.stop().await;
}

/// SPDK's host reads the NVM command set's Identify Controller data (CNS 06h, CSI 0) when it
/// initializes a controller: answered (all zero: no limits beyond MDTS), as Linux nvmet does;
/// another command set is Invalid Field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identify_of_the_nvm_command_set_controller_data() {
    use fabrik_initiator::proto::nvme::admin::{cns, csi};
    let dir = tempfile::tempdir().unwrap();
    let api = common::api::start(dir.path()).await;
    let host = HostIdentity::random();
    let ctrl = common::api::connect(api.nvme(), &common::api::nqn("00"), &host)
        .await
        .unwrap();
    let identify = |csi| AdminCommand::Identify {
        nsid: 0,
        cns: cns::CSI_CONTROLLER,
        cntid: 0,
        csi,
    };
    let done = ctrl
        .submit_admin(identify(csi::NVM).to_sqe(0), None, 4096)
        .await
        .unwrap();
    assert_eq!(done.cqe.status, Status::SUCCESS);
    assert_eq!(done.data.len(), 4096);
    assert!(done.data.iter().all(|&b| b == 0));
    let err = ctrl
        .submit_admin(identify(2).to_sqe(0), None, 4096)
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(Status::INVALID_FIELD));
    ctrl.shutdown().await.unwrap();
    api.stop().await;
}
