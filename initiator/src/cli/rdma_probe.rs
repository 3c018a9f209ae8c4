//! `fabrik rdma-probe` (hidden): bad input over NVMe/RDMA, for testing a target. Wrong CM
//! private data must be rejected with the NVMe/RDMA status for it; commands with bad SGLs must
//! get the right NVMe status on a queue that stays up; a keyed SGL with a wrong key ends that
//! queue; another host's controller on the same subsystem keeps working through all of it.

use anyhow::{bail, Result};
use clap::Args;

use super::args::ConnectArgs;

#[derive(Args)]
pub struct RdmaProbeArgs {
    /// The bystander: a healthy controller doing I/O on namespace 1 (use -t rdma).
    #[command(flatten)]
    connect: ConnectArgs,
}

#[cfg(not(feature = "rdma"))]
pub async fn run(_args: RdmaProbeArgs) -> Result<()> {
    bail!("RDMA unavailable: fabrik was built without the `rdma` feature")
}

#[cfg(feature = "rdma")]
pub async fn run(args: RdmaProbeArgs) -> Result<()> {
    use bytes::Bytes;
    use fabrik_initiator::proto::fabrics::connect::ConnectData;
    use fabrik_initiator::proto::fabrics::nqn::Nqn;
    use fabrik_initiator::proto::fabrics::FabricsCommand;
    use fabrik_initiator::proto::rdma::{CmRequest, RejectStatus};
    use fabrik_initiator::proto::{SglDescriptor, Status};
    use fabrik_initiator::transport::rdma::{connect_request, RdmaQueue, SglChoice};
    use fabrik_initiator::HostIdentity;

    use super::args::{connect_controller, resolve, IO_PORT};

    let addr = resolve(&args.connect.target, IO_PORT).await?;
    let bystander = connect_controller(&args.connect).await?;
    let lba = bystander.lba_size(1).await? as usize;
    let pattern = Bytes::from((0..lba * 8).map(|i| (i * 7 + 3) as u8).collect::<Vec<u8>>());
    bystander.write(1, 64, pattern.clone(), false).await?;
    let mut failed = 0;
    let mut check = |what: &str, ok: bool, detail: String| {
        println!("{} {what}: {detail}", if ok { "PASS" } else { "FAIL" });
        if !ok {
            failed += 1;
        }
    };

    // Wrong private data: each is rejected with its NVMe/RDMA status.
    let admin = connect_request(0, 32);
    let cases: [(&str, CmRequest, RejectStatus); 4] = [
        (
            "RECFMT 1",
            CmRequest { recfmt: 1, ..admin },
            RejectStatus::INVALID_RECFMT,
        ),
        (
            "QID 65535",
            CmRequest {
                qid: 0xffff,
                ..admin
            },
            RejectStatus::INVALID_QID,
        ),
        (
            "admin HSQSIZE 32 (33 entries)",
            CmRequest {
                hsqsize: 32,
                ..admin
            },
            RejectStatus::INVALID_HSQSIZE,
        ),
        (
            "HRQSIZE 0",
            CmRequest {
                hrqsize: 0,
                ..admin
            },
            RejectStatus::INVALID_HRQSIZE,
        ),
    ];
    let code = |s: Option<RejectStatus>| s.map_or(0, RejectStatus::code);
    for (what, request, want) in cases {
        match RdmaQueue::connect_with(addr, 0, 32, request).await? {
            Ok(_) => check(&format!("reject {what}"), false, "accepted".into()),
            Err(got) => check(
                &format!("reject {what}"),
                got == Some(want),
                format!("NVMe/RDMA status {}, expected {}", code(got), want.code()),
            ),
        }
    }

    // Bad SGLs on an admin queue: the right status, the queue stays up (Connect works after).
    let queue = match RdmaQueue::connect_with(addr, 0, 32, connect_request(0, 32)).await? {
        Ok(q) => q,
        Err(status) => bail!(
            "a valid admin queue was rejected with status {}",
            code(status)
        ),
    };
    let host = HostIdentity::random();
    let data = ConnectData {
        host_id: host.id,
        cntlid: 0xffff,
        subnqn: Nqn::new(&args.connect.nqn)?,
        hostnqn: Some(Nqn::new(&host.nqn)?),
    };
    let data = Bytes::copy_from_slice(&data.to_bytes()[..]);
    let connect = FabricsCommand::Connect {
        recfmt: 0,
        qid: 0,
        sqsize: 31,
        cattr: 0,
        kato: 0,
    }
    .to_sqe(0);
    let sgl_cases = [
        (
            "keyed SGL of 16 MiB - 1 (beyond MDTS)",
            SglChoice::Length(0xff_ffff),
            Status::SGL_LENGTH_INVALID,
        ),
        (
            "data block SGL (address subtype)",
            SglChoice::Exact(SglDescriptor::DataBlock {
                address: 0x1000,
                length: 1024,
            }),
            Status::SGL_TYPE_INVALID,
        ),
        (
            "in-capsule SGL for data the capsule does not carry",
            SglChoice::Exact(SglDescriptor::DataBlockOffset {
                offset: 0,
                length: 1024,
            }),
            Status::SGL_OFFSET_INVALID,
        ),
    ];
    for (what, sgl, want) in sgl_cases {
        let got = queue
            .submit_with(connect, Some(data.clone()), 0, sgl)
            .await
            .map(|c| c.cqe.status);
        match got {
            Ok(status) => check(
                what,
                status.same_code(want),
                format!("status {status}, expected {want}"),
            ),
            Err(e) => check(what, false, format!("queue failed: {e}")),
        }
    }
    match queue.submit(connect, Some(data.clone()), 0).await {
        Ok(c) => check(
            "valid Connect on the same queue afterwards",
            c.cqe.status.is_success(),
            format!("status {}, CNTLID {}", c.cqe.status, c.cqe.dw0() & 0xffff),
        ),
        Err(e) => check("valid Connect afterwards", false, e.to_string()),
    }

    // A wrong rkey: the target's RDMA READ of the Connect data fails, which ends that queue (an
    // RC queue pair in the error state): no NVMe status can come back.
    let queue = match RdmaQueue::connect_with(addr, 0, 32, connect_request(0, 32)).await? {
        Ok(q) => q,
        Err(status) => bail!(
            "a valid admin queue was rejected with status {}",
            code(status)
        ),
    };
    let got = tokio::time::timeout(
        std::time::Duration::from_secs(15),
        queue.submit_with(connect, Some(data.clone()), 0, SglChoice::BadKey),
    )
    .await;
    match got {
        Ok(Err(e)) if e.status().is_none() => check(
            "Connect with a wrong rkey ends the queue",
            true,
            e.to_string(),
        ),
        Ok(Err(e)) => check("wrong rkey", false, format!("NVMe status instead: {e}")),
        Ok(Ok(c)) => check("wrong rkey", false, format!("completed: {}", c.cqe.status)),
        Err(_) => check(
            "wrong rkey",
            false,
            "no answer, queue still up after 15 s".into(),
        ),
    }
    let after = queue.submit(connect, Some(data), 0).await;
    check(
        "that queue takes no more commands",
        after.is_err(),
        format!("{:?}", after.map(|c| c.cqe.status)),
    );

    // The other host was not disturbed.
    let back = bystander.read(1, 64, 8).await?;
    check(
        "bystander reads back its data",
        back == pattern,
        format!("{} bytes", back.len()),
    );
    bystander.shutdown().await?;
    if failed > 0 {
        bail!("{failed} check(s) failed");
    }
    println!("rdma-probe: all checks passed");
    Ok(())
}
