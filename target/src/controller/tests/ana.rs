//! ANA reporting: what Identify says and the ANA log page, as the Linux host reads them.

use bytes::Bytes;
use fabrik_proto::nvme::admin::{cns, AdminCommand};
use fabrik_proto::nvme::features::{aec, fid};
use fabrik_proto::nvme::identify::{cmic, IdentifyController, IdentifyNamespace};
use fabrik_proto::nvme::log::{ana_state, lid, AnaLog};
use fabrik_proto::Status;

use super::{enabled_controller, target, TestQueue};
use crate::backend::ram::RamDrive;
use crate::model::Namespace;
use std::sync::Arc;

async fn ana_log(admin: &mut TestQueue, cid: u16, lsp: u8, len: u32) -> (Status, Bytes) {
    let get_log = AdminCommand::GetLogPage {
        nsid: 0xffff_ffff,
        lid: lid::ANA,
        lsp,
        rae: false,
        numd: len / 4 - 1,
        lpo: 0,
        csi: 0,
    };
    let (cqe, data) = admin.submit_read(get_log.to_sqe(cid), len).await;
    (cqe.status, data)
}

#[tokio::test]
async fn identify_and_the_ana_log_report_one_optimized_group_with_every_namespace() {
    let target = target();
    // Added out of order: the log lists NSIDs ascending all the same.
    let sub = target.subsystems()[0].clone();
    for nsid in [7, 3] {
        let drive = Arc::new(RamDrive::new(1 << 20, 4096).unwrap());
        sub.add_namespace(Arc::new(Namespace::new(nsid, "0x", drive, "seed")));
    }
    let (mut admin, _) = enabled_controller(&target).await;
    let identify = |cns, nsid| AdminCommand::Identify {
        nsid,
        cns,
        cntid: 0,
        csi: 0,
    };
    let (cqe, data) = admin
        .submit_read(identify(cns::CONTROLLER, 0).to_sqe(2), 4096)
        .await;
    assert_eq!(cqe.status, Status::SUCCESS);
    let ctrl = IdentifyController::decode(&data).unwrap();
    assert_eq!(
        ctrl.cmic & (cmic::MULTI_CONTROLLER | cmic::ANA_REPORTING),
        cmic::MULTI_CONTROLLER | cmic::ANA_REPORTING
    );
    assert_ne!(ctrl.oaes & aec::ANA_CHANGE_NOTICES, 0);
    assert_eq!((ctrl.anagrpmax, ctrl.nanagrpid), (1, 1));
    assert!(ctrl.anatt > 0);
    // The Linux host needs 1 <= MNAN <= NN with ANA, and sizes its log buffer by it.
    assert!(ctrl.mnan >= 1 && ctrl.mnan <= ctrl.nn);
    let (cqe, data) = admin
        .submit_read(identify(cns::NAMESPACE, 3).to_sqe(3), 4096)
        .await;
    assert_eq!(cqe.status, Status::SUCCESS);
    let ns = IdentifyNamespace::decode(&data).unwrap();
    assert_eq!((ns.anagrpid, ns.nmic), (1, 1));

    // As the Linux host reads it: 16 + NANAGRPID x 32 + MNAN x 4 bytes.
    let len = 16 + 32 + 4 * ctrl.mnan;
    let (status, data) = ana_log(&mut admin, 4, 0, len).await;
    assert_eq!(status, Status::SUCCESS);
    let log = AnaLog::decode(&data).unwrap();
    assert_eq!(log.groups.len(), 1);
    let group = &log.groups[0];
    assert_eq!((group.grpid, group.state), (1, ana_state::OPTIMIZED));
    assert_eq!(group.nsids, [1, 3, 7]);
    // As nvme-cli reads it: 4 KiB at a time, the second read past the groups.
    let get_tail = AdminCommand::GetLogPage {
        nsid: 0xffff_ffff,
        lid: lid::ANA,
        lsp: 0,
        rae: true,
        numd: (len - 4096) / 4 - 1,
        lpo: 4096,
        csi: 0,
    };
    let (cqe, tail) = admin.submit_read(get_tail.to_sqe(7), len - 4096).await;
    assert_eq!(cqe.status, Status::SUCCESS);
    assert!(tail.iter().all(|&b| b == 0));
    // Groups only (LSP bit 0): the descriptor without its NSIDs.
    let (status, data) = ana_log(&mut admin, 5, 1, 64).await;
    assert_eq!(status, Status::SUCCESS);
    let log = AnaLog::decode(&data).unwrap();
    assert_eq!(log.groups[0].nsids, Vec::<u32>::new());
    assert_eq!(log.groups[0].state, ana_state::OPTIMIZED);

    // The host turns ANA change notices on.
    let aec = AdminCommand::SetFeatures {
        nsid: 0,
        fid: fid::ASYNC_EVENT_CONFIG,
        save: false,
        cdw11: aec::NS_ATTR_NOTICES | aec::ANA_CHANGE_NOTICES,
        cdw12: 0,
        cdw13: 0,
        cdw14: 0,
    };
    let (cqe, _) = admin.submit(aec.to_sqe(6), Bytes::new()).await;
    assert_eq!(cqe.status, Status::SUCCESS);
}
