//! TLS 1.3 on NVMe/TCP (issue 19): fabrikd with configured PSKs (`--tls-psk`) serves a port
//! that requires TLS to fabrik's host, which derives the same TLS PSK from the same
//! `NVMeTLSkey-1:` key; a host with another key, or in clear text, gets nothing; an `allowed`
//! port takes both; the discovery log says which; a channel is bound to the NQNs of its PSK
//! identity.

mod common;

use std::net::SocketAddr;
use std::path::Path;

use bytes::Bytes;
use common::api::{self, MIB};
use fabrik_api::models::{Port, PortRequest};
use fabrik_initiator::proto::fabrics::{ConnectData, FabricsCommand};
use fabrik_initiator::transport::tcp::tls::{TlsChannel, TlsKey};
use fabrik_initiator::transport::{TcpQueue, TcpQueueConfig};
use fabrik_initiator::{Controller, HostError, HostIdentity};
use fabrik_proto::fabrics::discovery::Tsas;
use fabrik_proto::fabrics::nqn::Nqn;
use fabrik_proto::tcp::Digests;
use fabrik_proto::tls::{ConfiguredPsk, LabelEncoding, PskHash};
use fabrik_proto::Status;
use fabrik_target::backend::BackendKind;
use fabrik_target::model::TlsMode;

fn key(fill: u8) -> ConfiguredPsk {
    ConfiguredPsk::new(Some(PskHash::Sha256), &[fill; 32]).unwrap()
}

/// A two-drive RAM box whose NVMe/TCP listener has TLS `mode`, with the key file `keys`.
async fn tls_box(dir: &Path, keys: &str, mode: TlsMode) -> api::Api {
    use std::os::unix::fs::PermissionsExt;
    let file = dir.join("tls.psk");
    std::fs::write(&file, keys).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut cfg = common::config(dir, BackendKind::Ram, 2, 16 * MIB);
    cfg.tls_psk = Some(file);
    cfg.tls = Some(mode);
    api::start_with(cfg).await
}

fn options(
    addr: SocketAddr,
    sub: &str,
    host: &HostIdentity,
    tls: Option<TlsKey>,
) -> fabrik_initiator::ConnectOptions {
    let mut opts = common::options(addr, sub).with_host(host);
    opts.io_queues = 2;
    opts.tls = tls;
    opts
}

async fn write_read(c: &Controller, seed: u64) {
    // Larger than a TLS record, and a small one.
    // 4 KiB blocks (the RAM drives' default).
    for (slba, len) in [(0u64, 256 * 1024usize), (64, 4096)] {
        let data = common::random_data(len, seed + slba);
        c.write(1, slba, data.clone(), false).await.unwrap();
        let back = c.read(1, slba, (len / 4096) as u32).await.unwrap();
        common::assert_same_data(&back, &data, "read back over TLS");
    }
}

async fn refused(r: Result<Controller, HostError>) -> HostError {
    match r {
        Ok(c) => {
            c.shutdown().await.ok();
            panic!("connected where it must not")
        }
        Err(e) => e,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_required_port_serves_the_right_key_only() {
    let dir = tempfile::tempdir().unwrap();
    let (any, own) = (key(0x11), key(0x22));
    let mine = HostIdentity::random();
    let keys = format!(
        "# any host\n{}\n{} {}\n",
        &*any.to_text(),
        mine.nqn,
        &*own.to_text()
    );
    let a = tls_box(dir.path(), &keys, TlsMode::Required).await;
    let sub = api::nqn("00");

    // Any host with the any-host key, identity version 1 and 0; I/O on every queue.
    for version in [1, 0] {
        let host = HostIdentity::random();
        let tls = TlsKey {
            identity_version: version,
            ..TlsKey::new(any.clone())
        };
        let c = Controller::connect(options(a.nvme(), &sub, &host, Some(tls)))
            .await
            .unwrap();
        write_read(&c, version as u64).await;
        c.shutdown().await.unwrap();
    }
    // The host with its own key uses it; the any-host key no longer opens it.
    let c = Controller::connect(options(
        a.nvme(),
        &sub,
        &mine,
        Some(TlsKey::new(own.clone())),
    ))
    .await
    .unwrap();
    write_read(&c, 7).await;
    c.shutdown().await.unwrap();
    let e = refused(
        Controller::connect(options(
            a.nvme(),
            &sub,
            &mine,
            Some(TlsKey::new(any.clone())),
        ))
        .await,
    )
    .await;
    assert!(matches!(e, HostError::Tls { qid: 0, .. }), "{e}");

    // Another key, another label layout, clear text: refused, and quickly (no timeout).
    let other = HostIdentity::random();
    let started = std::time::Instant::now();
    let e = refused(
        Controller::connect(options(
            a.nvme(),
            &sub,
            &other,
            Some(TlsKey::new(key(0x33))),
        ))
        .await,
    )
    .await;
    assert!(matches!(e, HostError::Tls { .. }), "{e}");
    let compat = TlsKey {
        label: LabelEncoding::Compat,
        ..TlsKey::new(any.clone())
    };
    let e = refused(Controller::connect(options(a.nvme(), &sub, &other, Some(compat))).await).await;
    assert!(matches!(e, HostError::Tls { .. }), "{e}");
    let e = refused(Controller::connect(options(a.nvme(), &sub, &other, None)).await).await;
    assert!(
        !matches!(e, HostError::Timeout { .. }),
        "clear text must be refused at once: {e}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(8));

    // Discovery over TLS: the entries say TLS 1.3, required.
    let mut disc = fabrik_initiator::ConnectOptions::discovery(a.nvme()).with_host(&other);
    disc.tls = Some(TlsKey::new(any.clone()));
    let log = fabrik_initiator::host::discovery::discover_with(disc)
        .await
        .unwrap();
    assert_eq!(log.entries.len(), 2);
    for e in &log.entries {
        assert_eq!((e.tsas, e.treq & 3), (Tsas::Tcp { sectype: 2 }, 1), "{e:?}");
    }
    let ports: Vec<Port> = a.admin.get("/ports").await.unwrap();
    assert_eq!(ports[0].tls, "required");
    // The refusals above (a host's own key taken by the any-host one, another key, another
    // layout, clear text) were counted.
    let failures = a.target.state().metrics.port(ports[0].id).tls_failures();
    assert_eq!(failures, 4, "TLS handshake failures counted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_port_takes_tls_and_clear_text() {
    let dir = tempfile::tempdir().unwrap();
    let any = key(0x44);
    let a = tls_box(dir.path(), &any.to_text(), TlsMode::Allowed).await;
    let sub = api::nqn("01");
    for tls in [Some(TlsKey::new(any.clone())), None] {
        let host = HostIdentity::random();
        let c = Controller::connect(options(a.nvme(), &sub, &host, tls.clone()))
            .await
            .unwrap();
        write_read(&c, 3).await;
        c.shutdown().await.unwrap();
    }
    let log = fabrik_initiator::host::discovery::discover(a.nvme(), &HostIdentity::random().nqn)
        .await
        .unwrap();
    assert!(log
        .entries
        .iter()
        .all(|e| (e.tsas, e.treq & 3) == (Tsas::Tcp { sectype: 2 }, 2)));
}

/// A channel opened with the identity of one subsystem connects to no other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_is_bound_to_its_identity() {
    let dir = tempfile::tempdir().unwrap();
    let any = key(0x55);
    let a = tls_box(dir.path(), &any.to_text(), TlsMode::Required).await;
    let host = HostIdentity::random();
    let channel = TlsChannel::new(&TlsKey::new(any), &host.nqn, &api::nqn("00")).unwrap();
    for (sub, ok) in [(api::nqn("01"), false), (api::nqn("00"), true)] {
        let config = TcpQueueConfig {
            tls: Some(channel.clone()),
            ..TcpQueueConfig::new(0, 32, Digests::default())
        };
        let queue = TcpQueue::connect(a.nvme(), config).await.unwrap();
        let data = ConnectData {
            host_id: host.id,
            cntlid: 0xffff,
            subnqn: Nqn::new(&sub).unwrap(),
            hostnqn: Some(Nqn::new(&host.nqn).unwrap()),
        };
        let connect = FabricsCommand::Connect {
            recfmt: 0,
            qid: 0,
            sqsize: 31,
            cattr: 0,
            kato: 0,
        };
        let done = queue
            .submit(
                connect.to_sqe(0),
                Some(Bytes::copy_from_slice(&data.to_bytes()[..])),
                0,
                8192,
            )
            .await
            .unwrap();
        let status = done.cqe.status;
        match ok {
            true => assert!(status.is_success(), "{status:?}"),
            false => assert!(status.same_code(Status::CONNECT_INVALID_HOST), "{status:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ports_with_tls_through_the_api() {
    let dir = tempfile::tempdir().unwrap();
    let any = key(0x66);
    let a = tls_box(dir.path(), &any.to_text(), TlsMode::None).await;
    let req = |tls: Option<&str>| PortRequest {
        transport: None,
        address: "127.0.0.1".into(),
        service_id: 0,
        tls: tls.map(str::to_string),
    };
    let p: Port = a
        .admin
        .post("/ports", &req(Some("required")))
        .await
        .unwrap();
    assert_eq!(p.tls, "required");
    let addr: SocketAddr = format!("127.0.0.1:{}", p.service_id).parse().unwrap();
    let host = HostIdentity::random();
    let sub = api::nqn("00");
    let c = Controller::connect(options(addr, &sub, &host, Some(TlsKey::new(any.clone()))))
        .await
        .unwrap();
    write_read(&c, 9).await;
    c.shutdown().await.unwrap();
    // The first port stayed clear text.
    let c = Controller::connect(options(a.nvme(), &sub, &host, None))
        .await
        .unwrap();
    c.shutdown().await.unwrap();
    let r = a
        .admin
        .post::<Port>("/ports", &req(Some("sometimes")))
        .await;
    api::assert_problem(r, 422, "tls \"sometimes\"");

    // Without PSKs a TLS port is refused, saying what is missing.
    let dir2 = tempfile::tempdir().unwrap();
    let b = api::start_with(common::config(dir2.path(), BackendKind::Ram, 1, 16 * MIB)).await;
    let r = b.admin.post::<Port>("/ports", &req(Some("allowed"))).await;
    api::assert_problem(r, 422, "--tls-psk");
}

/// A port's TLS is part of the state: a restart serves it again with the keys, and refuses to
/// start without them rather than serve it in clear text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_port_survives_a_restart_and_needs_its_keys() {
    let dir = tempfile::tempdir().unwrap();
    let any = key(0x77);
    let a = tls_box(dir.path(), &any.to_text(), TlsMode::None).await;
    let req = PortRequest {
        transport: None,
        address: "127.0.0.1".into(),
        service_id: 0,
        tls: Some("required".into()),
    };
    let p: Port = a.admin.post("/ports", &req).await.unwrap();
    a.stop().await;
    let state = std::fs::read_to_string(dir.path().join("state.json")).unwrap();
    assert!(state.contains("\"tls\": \"required\""), "{state}");

    let b = tls_box(dir.path(), &any.to_text(), TlsMode::None).await;
    let addr: SocketAddr = format!("127.0.0.1:{}", p.service_id).parse().unwrap();
    let host = HostIdentity::random();
    let sub = api::nqn("00");
    let e = refused(Controller::connect(options(addr, &sub, &host, None)).await).await;
    assert!(!matches!(e, HostError::Timeout { .. }), "{e}");
    let c = Controller::connect(options(addr, &sub, &host, Some(TlsKey::new(any))))
        .await
        .unwrap();
    write_read(&c, 11).await;
    c.shutdown().await.unwrap();
    b.stop().await;

    let mut cfg = common::config(dir.path(), BackendKind::Ram, 2, 16 * MIB);
    cfg.persist_state = true;
    let e = match fabrik_target::Target::start(cfg).await {
        Ok(_) => panic!("started without the keys of a TLS port"),
        Err(e) => format!("{e:#}"),
    };
    assert!(e.contains("--tls-psk"), "{e}");
}

/// SHA-384 keys (`nvme gen-tls-key --hmac=2`, 48 bytes) take TLS_AES_256_GCM_SHA384, per host
/// beside a SHA-256 key for any other host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sha384_keys_work_beside_sha256_ones() {
    let dir = tempfile::tempdir().unwrap();
    let sha384 = ConfiguredPsk::new(Some(PskHash::Sha384), &[0x88; 48]).unwrap();
    let sha256 = key(0x99);
    let big = HostIdentity::random();
    let keys = format!(
        "{}\n{} {}\n",
        &*sha256.to_text(),
        big.nqn,
        &*sha384.to_text()
    );
    let a = tls_box(dir.path(), &keys, TlsMode::Required).await;
    let sub = api::nqn("01");
    for version in [1, 0] {
        let tls = TlsKey {
            identity_version: version,
            ..TlsKey::new(sha384.clone())
        };
        let c = Controller::connect(options(a.nvme(), &sub, &big, Some(tls)))
            .await
            .unwrap();
        write_read(&c, 20 + version as u64).await;
        c.shutdown().await.unwrap();
    }
    let other = HostIdentity::random();
    let c = Controller::connect(options(a.nvme(), &sub, &other, Some(TlsKey::new(sha256))))
        .await
        .unwrap();
    write_read(&c, 30).await;
    c.shutdown().await.unwrap();
    // The SHA-384 key is that host's only.
    let e = refused(
        Controller::connect(options(a.nvme(), &sub, &other, Some(TlsKey::new(sha384)))).await,
    )
    .await;
    assert!(matches!(e, HostError::Tls { .. }), "{e}");
}
