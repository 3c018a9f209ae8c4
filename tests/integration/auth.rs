//! DH-HMAC-CHAP (issue 19): a host registered with a secret must authenticate on every queue;
//! fabrik's host does it; a wrong or missing secret gets no controller; commands before
//! authentication fail with Authentication Required; keys rotate through REST while a
//! controller stays connected; secrets never come back from the API and are sealed at rest.

mod common;

use bytes::Bytes;
use common::api::{self, assert_problem, MIB};
use fabrik_api::models::{HostKeysRequest, HostRequest};
use fabrik_initiator::{Controller, HostIdentity};
use fabrik_proto::auth::Secret;
use fabrik_proto::fabrics::FabricsCommand;
use fabrik_proto::Status;
use fabrik_target::backend::BackendKind;

fn secret(t: u8, fill: u8) -> Secret {
    Secret::new(t, &[fill; 32]).unwrap()
}

async fn connect(
    a: &api::Api,
    host: &HostIdentity,
    mine: Option<Secret>,
    ctrl: Option<Secret>,
) -> Result<Controller, fabrik_initiator::HostError> {
    let mut opts = common::options(a.nvme(), &api::nqn("00")).with_host(host);
    opts.io_queues = 2;
    opts.dhchap_secret = mine;
    opts.dhchap_ctrl_secret = ctrl;
    Controller::connect(opts).await
}

/// `host` connects without authenticating, and leaves.
async fn connects_without_keys(a: &api::Api, host: &HostIdentity) {
    let c = connect(a, host, None, None).await.unwrap();
    c.shutdown().await.unwrap();
}

/// The error of a connect that must fail.
async fn refused(r: Result<Controller, fabrik_initiator::HostError>) -> String {
    match r {
        Ok(c) => {
            c.shutdown().await.ok();
            panic!("connected where it must not")
        }
        Err(e) => e.to_string(),
    }
}

/// A one-drive box in `dir` with `hostnqn` registered with `secret`.
async fn box_with_host(dir: &std::path::Path, hostnqn: &str, secret: &Secret) -> api::Api {
    let a = api::start_with(common::config(dir, BackendKind::Ram, 1, 16 * MIB)).await;
    let req = HostRequest {
        nqn: hostnqn.into(),
        dhchap_secret: Some(secret.to_text().to_string()),
        ..Default::default()
    };
    a.admin.add_host(&req).await.unwrap();
    a
}

async fn write_read(c: &Controller, seed: u64) {
    let data = common::random_data(8192, seed);
    c.write(1, 16, data.clone(), false).await.unwrap();
    common::assert_same_data(&c.read(1, 16, 2).await.unwrap(), &data, "read back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_with_secrets_authenticate_on_every_queue() {
    let dir = tempfile::tempdir().unwrap();
    let a = api::start_with(common::config(dir.path(), BackendKind::Ram, 2, 16 * MIB)).await;
    let host = HostIdentity::random();
    let (hs, cs) = (secret(1, 0x11), secret(3, 0x22));

    // Before registration the host connects without authenticating.
    connects_without_keys(&a, &host).await;

    let view = a
        .admin
        .add_host(&HostRequest {
            nqn: host.nqn.clone(),
            dhchap_secret: Some(hs.to_text().to_string()),
            dhchap_ctrl_secret: Some(cs.to_text().to_string()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(view.dhchap && view.dhchap_ctrl);

    // The right secret: I/O works on both I/O queues; with the controller's secret too.
    let c = connect(&a, &host, Some(hs.clone()), None).await.unwrap();
    write_read(&c, 1).await;
    write_read(&c, 2).await;
    c.shutdown().await.unwrap();
    let c = connect(&a, &host, Some(hs.clone()), Some(cs.clone()))
        .await
        .unwrap();
    write_read(&c, 3).await;

    // Wrong or missing secrets get nothing; so does a wrong controller secret (the host
    // refuses the controller).
    let before = a.target.state().controllers().len();
    let e = refused(connect(&a, &host, Some(secret(1, 0x12)), None).await).await;
    assert!(e.to_string().contains("authentication failed"), "{e}");
    let e = refused(connect(&a, &host, None, None).await).await;
    assert!(e.to_string().contains("no secret"), "{e}");
    let e = refused(connect(&a, &host, Some(hs.clone()), Some(secret(3, 0x23))).await).await;
    assert!(
        e.to_string().contains("controller authentication failed"),
        "{e}"
    );
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(
        a.target.state().controllers().len(),
        before,
        "no controller left behind"
    );

    // Rotation: new keys through REST; the connected controller keeps working, new
    // connections need the new secret.
    let new_keys = HostKeysRequest {
        dhchap_secret: Some(Secret::new(2, &[0x33; 48]).unwrap().to_text().to_string()),
        dhchap_hash: Some("sha256".into()),
        dhchap_dhgroup: Some("ffdhe3072".into()),
        ..Default::default()
    };
    let view = a.admin.set_host_keys(&host.nqn, &new_keys).await.unwrap();
    assert!(view.dhchap && !view.dhchap_ctrl);
    assert_eq!(view.dhchap_dhgroup.as_deref(), Some("ffdhe3072"));
    write_read(&c, 4).await;
    assert!(connect(&a, &host, Some(hs.clone()), None).await.is_err());
    let rotated = Secret::new(2, &[0x33; 48]).unwrap();
    let c2 = connect(&a, &host, Some(rotated), None).await.unwrap();
    write_read(&c2, 5).await;
    c2.shutdown().await.unwrap();
    c.shutdown().await.unwrap();

    // Lifting the keys: the host connects without authenticating again.
    a.admin
        .set_host_keys(&host.nqn, &HostKeysRequest::default())
        .await
        .unwrap();
    connects_without_keys(&a, &host).await;
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_before_authentication_fail_and_bad_messages_end_the_association() {
    use common::raw::RawConn;
    use fabrik_proto::tcp::Digests;
    let dir = tempfile::tempdir().unwrap();
    let hostnqn = "nqn.2014-08.org.nvmexpress:uuid:6a1d2b8e-0000-4000-8000-000000000001";
    let a = box_with_host(dir.path(), hostnqn, &secret(0, 0x44)).await;
    let mut raw = RawConn::connect(a.nvme(), Digests::default()).await;
    let cqe = raw.admin_connect_as(&api::nqn("00"), Some(hostnqn)).await;
    assert_eq!(cqe.status, Status::SUCCESS);
    assert_ne!(
        cqe.result as u32 & fabrik_proto::auth::CONNECT_AUTH_REQUIRED,
        0,
        "ATR set"
    );
    // Property Get before authenticating: Authentication Required.
    let get = FabricsCommand::PropertyGet {
        size8: true,
        offset: 0,
    }
    .to_sqe(1);
    assert_eq!(raw.command(get).await.status, Status::AUTH_REQUIRED);
    // A Receive with nothing due, and a Send with the wrong protocol: command errors.
    let (cqe, _) = raw.command_reading(recv_sqe(2), 4096).await;
    assert_eq!(cqe.status, Status::COMMAND_SEQUENCE_ERROR);
    let mut wrong = recv_sqe(2);
    wrong.cdw10 = 0x01_01_01_00; // SECP 01h: not DH-HMAC-CHAP
    let (cqe, _) = raw.command_reading(wrong, 4096).await;
    assert_eq!(cqe.status, Status::INVALID_FIELD);
    // A Reply out of order: Failure1 comes back, and the association ends.
    let reply = fabrik_proto::auth::Message::Reply {
        t_id: 0,
        response: vec![0; 32],
        challenge: None,
        seqnum: 1,
        public: vec![],
    }
    .encode();
    let send = FabricsCommand::AuthSend {
        secp: 0xe9,
        spsp: [1, 1],
        len: reply.len() as u32,
    };
    let status = raw
        .command_with_data(send.to_sqe(3), Bytes::from(reply))
        .await
        .status;
    assert_eq!(status, Status::SUCCESS);
    let (cqe, data) = raw.command_reading(recv_sqe(4), 4096).await;
    assert_eq!(cqe.status, Status::SUCCESS);
    assert_eq!(&data[..2], &[0x00, 0xf1], "AUTH_Failure1");
    raw.expect_graceful_close().await;

    // A truncated Negotiate on a new association: Failure1 "incorrect payload", then the close.
    let mut raw = RawConn::connect(a.nvme(), Digests::default()).await;
    let cqe = raw.admin_connect_as(&api::nqn("00"), Some(hostnqn)).await;
    assert_eq!(cqe.status, Status::SUCCESS);
    let cut = &fabrik_proto::auth::Message::Negotiate {
        t_id: 0,
        sc_c: 0,
        dhchap: None,
    }
    .encode()[..20];
    let send = FabricsCommand::AuthSend {
        secp: 0xe9,
        spsp: [1, 1],
        len: cut.len() as u32,
    };
    let cqe = raw
        .command_with_data(send.to_sqe(5), Bytes::copy_from_slice(cut))
        .await;
    assert_eq!(cqe.status, Status::SUCCESS);
    let (_, data) = raw.command_reading(recv_sqe(6), 4096).await;
    assert_eq!(&data[..2], &[0x00, 0xf1], "AUTH_Failure1");
    assert_eq!(data[7], 0x06, "incorrect payload");
    raw.expect_graceful_close().await;
    a.stop().await;
}

/// An I/O queue of an authenticated controller still authenticates itself: until it does, its
/// commands get Authentication Required.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_io_queue_authenticates_on_its_own() {
    use common::raw::RawConn;
    use fabrik_proto::nvme::io::IoCommand;
    use fabrik_proto::tcp::Digests;
    let dir = tempfile::tempdir().unwrap();
    let host = HostIdentity::random();
    let s = secret(1, 0x47);
    let a = box_with_host(dir.path(), &host.nqn, &s).await;
    // Admin queue by hand, authenticated with proto's host end over raw commands.
    let mut admin = RawConn::connect(a.nvme(), Digests::default()).await;
    let cqe = admin
        .admin_connect_as(&api::nqn("00"), Some(&host.nqn))
        .await;
    let cntlid = cqe.dw0() as u16;
    authenticate(&mut admin, &host.nqn, &s, 0).await;
    let get = FabricsCommand::PropertyGet {
        size8: true,
        offset: 0,
    }
    .to_sqe(2);
    assert_eq!(
        admin.command(get).await.status,
        Status::SUCCESS,
        "authenticated"
    );
    admin.enable_controller().await;
    // An I/O queue of that controller: it must authenticate too.
    let mut raw = RawConn::connect(a.nvme(), Digests::default()).await;
    let cqe = raw
        .connect_queue(&api::nqn("00"), Some(&host.nqn), 1, cntlid)
        .await;
    assert_eq!(cqe.status, Status::SUCCESS, "{cqe:?}");
    assert_ne!(
        cqe.result as u32 & fabrik_proto::auth::CONNECT_AUTH_REQUIRED,
        0
    );
    let read = IoCommand::Read {
        nsid: 1,
        slba: 0,
        nlb: 1,
        fua: false,
    }
    .to_sqe(9);
    let (cqe, _) = raw.command_reading(read, 4096).await;
    assert_eq!(cqe.status, Status::AUTH_REQUIRED);
    authenticate(&mut raw, &host.nqn, &s, 1).await;
    let read = IoCommand::Read {
        nsid: 1,
        slba: 0,
        nlb: 1,
        fua: false,
    }
    .to_sqe(10);
    let (cqe, data) = raw.command_reading(read, 4096).await;
    assert_eq!((cqe.status, data.len()), (Status::SUCCESS, 4096));
    a.stop().await;
}

/// A subsystem that requires authentication admits only hosts with keys: one without gets
/// Connect Invalid Host; lifting the requirement lets it in again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subsystem_may_require_authentication() {
    let dir = tempfile::tempdir().unwrap();
    let keyed = HostIdentity::random();
    let s = secret(1, 0x48);
    let a = box_with_host(dir.path(), &keyed.nqn, &s).await;
    let plain = HostIdentity::random();
    let view = a
        .admin
        .set_subsystem_authentication(&api::nqn("00"), true)
        .await
        .unwrap();
    assert!(view.require_auth);
    let e = refused(connect(&a, &plain, None, None).await).await;
    assert!(e.contains("Connect Invalid Host"), "{e}");
    let c = connect(&a, &keyed, Some(s), None).await.unwrap();
    write_read(&c, 8).await;
    c.shutdown().await.unwrap();
    a.admin
        .set_subsystem_authentication(&api::nqn("00"), false)
        .await
        .unwrap();
    connects_without_keys(&a, &plain).await;
    a.stop().await;
}

/// One DH-HMAC-CHAP transaction over a raw queue, driven by proto's host end.
async fn authenticate(raw: &mut common::raw::RawConn, hostnqn: &str, s: &Secret, t_id: u16) {
    use fabrik_proto::auth::exchange::{HostKeys, HostStep};
    use fabrik_proto::auth::{HostAuth, OsRandom};
    let keys = HostKeys {
        host: s.clone(),
        ctrl: None,
        hostnqn: hostnqn.into(),
        subnqn: api::nqn("00"),
    };
    let mut h = HostAuth::new(keys, t_id, &mut OsRandom);
    let mut out = h.negotiate();
    for cid in (20u16..).step_by(2) {
        let bytes = out.encode();
        let send = FabricsCommand::AuthSend {
            secp: 0xe9,
            spsp: [1, 1],
            len: bytes.len() as u32,
        };
        let cqe = raw
            .command_with_data(send.to_sqe(cid), Bytes::from(bytes))
            .await;
        assert_eq!(cqe.status, Status::SUCCESS);
        let (cqe, data) = raw.command_reading(recv_sqe(cid + 1), 4096).await;
        assert_eq!(cqe.status, Status::SUCCESS);
        match h.on_receive(&data, &mut OsRandom) {
            HostStep::Send(m) => out = m,
            HostStep::Done => return,
            other => panic!("{other:?}"),
        }
    }
}

/// A host that keeps its admin queue busy with authentication and never finishes loses its
/// controller after KATO (the keep-alive timer alone would keep it: it is heard from).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_that_never_authenticates_is_closed_after_kato() {
    use common::raw::RawConn;
    use fabrik_proto::auth::message::Offer;
    use fabrik_proto::auth::Message;
    use fabrik_proto::tcp::Digests;
    let dir = tempfile::tempdir().unwrap();
    let hostnqn = "nqn.2014-08.org.nvmexpress:uuid:6a1d2b8e-0000-4000-8000-000000000002";
    let a = box_with_host(dir.path(), hostnqn, &secret(0, 0x46)).await;
    let mut raw = RawConn::connect(a.nvme(), Digests::default()).await;
    let t0 = std::time::Instant::now();
    let cqe = raw
        .connect_queue_kato(&api::nqn("00"), Some(hostnqn), 0, 0xffff, 0, 1000)
        .await;
    assert_eq!(cqe.status, Status::SUCCESS);
    let negotiate = Message::Negotiate {
        t_id: 0,
        sc_c: 0,
        dhchap: Some(Offer {
            hashes: vec![1],
            dhgroups: vec![0],
        }),
    }
    .encode();
    let send = FabricsCommand::AuthSend {
        secp: 0xe9,
        spsp: [1, 1],
        len: negotiate.len() as u32,
    };
    let mut rounds = 0;
    // Start over every 200 ms: a Negotiate and its Challenge, never a Reply.
    let closed_at = loop {
        rounds += 1;
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(5),
            "still open after 5 s"
        );
        raw.send(fabrik_proto::tcp::Pdu::CapsuleCmd(
            fabrik_proto::tcp::CapsuleCmd {
                sqe: {
                    let mut sqe = send.to_sqe(3);
                    sqe.set_sgl(&fabrik_proto::SglDescriptor::DataBlockOffset {
                        offset: 0,
                        length: negotiate.len() as u32,
                    });
                    sqe
                },
                data: Bytes::from(negotiate.clone()),
            },
        ))
        .await;
        if raw.next().await.is_none() {
            break t0.elapsed();
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert!(rounds >= 4, "{rounds} rounds");
    assert!(
        closed_at >= std::time::Duration::from_millis(1000),
        "closed after {closed_at:?}"
    );
    a.stop().await;
}

fn recv_sqe(cid: u16) -> fabrik_proto::Sqe {
    FabricsCommand::AuthReceive {
        secp: 0xe9,
        spsp: [1, 1],
        len: 4096,
    }
    .to_sqe(cid)
}

/// Secrets are write-only: no answer holds one, the state file holds them sealed, and a
/// restart opens them again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_write_only_and_sealed_at_rest() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = common::config(dir.path(), BackendKind::Ram, 1, 16 * MIB);
    let a = api::start_with(cfg.clone()).await;
    let host = HostIdentity::random();
    let s = secret(1, 0x55);
    let text = s.to_text().to_string();
    let b64 = text.split(':').nth(2).unwrap().to_string();
    a.admin
        .add_host(&HostRequest {
            nqn: host.nqn.clone(),
            dhchap_secret: Some(text.clone()),
            ..Default::default()
        })
        .await
        .unwrap();
    for path in [
        "/api/v1/hosts",
        &format!("/api/v1/hosts/{}", host.nqn),
        "/api/v1/module/config",
    ] {
        let (status, _, body) = api::raw(a.api, "GET", path, None).await;
        assert_eq!(status, 200, "{path}");
        assert!(!body.contains(&b64), "{path} shows the secret: {body}");
    }
    let state = std::fs::read_to_string(dir.path().join("state.json")).unwrap();
    assert!(
        !state.contains(&b64) && state.contains("sealed:"),
        "{state}"
    );
    // Bad secrets and lone fields are 422 and never repeat the text.
    let bad = HostRequest {
        nqn: HostIdentity::random().nqn,
        dhchap_secret: Some(text.replace("DHHC-1:01", "DHHC-1:07")),
        ..Default::default()
    };
    let r = a.admin.add_host(&bad).await;
    assert_problem(r, 422, "transform");
    let r = a
        .admin
        .set_host_keys(
            &host.nqn,
            &HostKeysRequest {
                dhchap_ctrl_secret: Some(text.clone()),
                ..Default::default()
            },
        )
        .await;
    assert_problem(r, 422, "need `dhchap_secret`");
    a.stop().await;

    // After a restart the sealed secret opens: the host authenticates with it.
    let a = api::start_with(cfg).await;
    let mut opts = common::options(a.nvme(), &api::nqn("00")).with_host(&host);
    assert!(Controller::connect(opts.clone()).await.is_err());
    opts.dhchap_secret = Some(s);
    Controller::connect(opts)
        .await
        .unwrap()
        .shutdown()
        .await
        .unwrap();
    a.stop().await;
}
