//! The management REST API against an in-process fabrikd: compositions restrict drives to hosts
//! and tear down the others live, subsystems / namespaces / allow lists change live (namespace
//! events reach connected hosts), and the state survives a restart.

mod common;
mod metrics_scrape;

use std::time::Duration;

use common::api::*;
use fabrik_api::axum::http::Method;
use fabrik_api::models::*;
use fabrik_initiator::{discover, HostError, HostIdentity};
use fabrik_proto::nvme::admin::AdminCommand;
use fabrik_proto::nvme::features::{aec, fid};
use fabrik_proto::nvme::log::{aen, decode_changed_ns_list, lid};
use fabrik_proto::Status;
use metrics_scrape::{parse, scrape_with, value};

/// The commands a composition returns are quoted for a shell: a host NQN may hold spaces,
/// quotes and `$(...)`, and pasting the command must pass it as one argument, untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_commands_are_quoted_for_the_shell() {
    let dir = tempfile::tempdir().unwrap();
    let api = start(dir.path()).await;
    let host = "nqn.2024-01.example:gpu 7 '$(touch /tmp/pwned)' \"x\"";
    let comp = api
        .admin
        .compose(&CompositionRequest {
            host_nqn: host.into(),
            drives: vec!["02".into()],
            ports: None,
            shared: false,
        })
        .await
        .unwrap();
    // Its access follows the composition: opening it to every host is refused.
    assert_problem(
        api.admin
            .put::<Subsystem>(
                &format!("/subsystems/{}/access", nqn("02")),
                &AccessRequest {
                    allow_any_host: true,
                },
            )
            .await,
        409,
        "composition c1",
    );
    for line in [&comp.connect[0].nvme_cli, &comp.connect[0].fabrik] {
        let words = shlex::split(line).expect("a well-formed shell line");
        let at = words.iter().position(|w| w == "--hostnqn").unwrap();
        assert_eq!(words[at + 1], host, "{line}");
        assert_eq!(words.len(), at + 2, "{line}");
        let n = words.iter().position(|w| w == "-n").unwrap();
        assert_eq!(words[n + 1], nqn("02"), "{line}");
    }
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn composition_gives_the_drives_to_one_host_live() {
    let dir = tempfile::tempdir().unwrap();
    let api = start(dir.path()).await;
    let addr = api.nvme();
    let (a, b) = (HostIdentity::random(), HostIdentity::random());

    // Host A uses drive 00 while it is open to any host.
    let ctrl_a = connect(addr, &nqn("00"), &a).await.unwrap();
    ctrl_a
        .write(1, 0, common::random_data(4096, 1), false)
        .await
        .unwrap();

    let comp = api
        .admin
        .compose(&CompositionRequest {
            host_nqn: b.nqn.clone(),
            drives: vec!["00".into(), "01".into()],
            ports: None,
            shared: false,
        })
        .await
        .unwrap();
    assert_eq!(comp.subsystems, vec![nqn("00"), nqn("01")]);
    assert_eq!(comp.connect.len(), 2);
    assert_eq!(
        comp.connect[0].nvme_cli,
        format!(
            "nvme connect -t tcp -a 127.0.0.1 -s {} -n {} --hostnqn {}",
            addr.port(),
            nqn("00"),
            b.nqn
        )
    );
    assert!(
        comp.connect[1]
            .fabrik
            .starts_with("fabrik id-ctrl -a 127.0.0.1"),
        "{:?}",
        comp.connect[1]
    );

    // A lost drive 00 at once: its controller is gone, it can neither reconnect nor see it.
    let mut gone = false;
    for _ in 0..50 {
        if ctrl_a.read(1, 0, 1).await.is_err() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(gone, "host A's controller of drive 00 was torn down");
    match connect(addr, &nqn("00"), &a).await {
        Err(HostError::Status { status, .. }) => {
            assert!(status.same_code(Status::CONNECT_INVALID_HOST), "{status}")
        }
        Err(e) => panic!("host A connecting after the composition: {e}"),
        Ok(_) => panic!("host A connected after the composition"),
    }
    let seen: Vec<String> = discover(addr, &a.nqn)
        .await
        .unwrap()
        .entries
        .into_iter()
        .map(|e| e.subnqn)
        .collect();
    assert_eq!(
        seen,
        vec![nqn("02"), nqn("03")],
        "host A sees the free drives only"
    );
    let seen: Vec<String> = discover(addr, &b.nqn)
        .await
        .unwrap()
        .entries
        .into_iter()
        .map(|e| e.subnqn)
        .collect();
    assert_eq!(seen, nqn_list(&["00", "01", "02", "03"]));

    // B reads back what A wrote and writes its own.
    let ctrl_b = connect(addr, &nqn("00"), &b).await.unwrap();
    let data = common::random_data(4096, 1);
    common::assert_same_data(
        &ctrl_b.read(1, 0, 1).await.unwrap(),
        &data,
        "drive 00 for host B",
    );
    let d = api.admin.drive("00").await.unwrap();
    assert_eq!(d.composed_to, vec![b.nqn.clone()]);
    assert_eq!(d.hosts, Some(vec![b.nqn.clone()]));
    assert_eq!(
        api.admin.hosts().await.unwrap()[0].subsystems,
        nqn_list(&["00", "01"])
    );

    // Conflicts: the drive is B's; another host may not take it, B may not take it twice.
    let c = HostIdentity::random();
    let take = |host: &str, drives: &[&str], shared| CompositionRequest {
        host_nqn: host.to_string(),
        drives: drives.iter().map(|d| d.to_string()).collect(),
        ports: None,
        shared,
    };
    let before = std::fs::read(dir.path().join("state.json")).unwrap();
    assert_problem(
        api.admin.compose(&take(&c.nqn, &["01"], false)).await,
        409,
        "composed to",
    );
    assert_problem(
        api.admin.compose(&take(&c.nqn, &["01"], true)).await,
        409,
        "shared",
    );
    assert_problem(
        api.admin.compose(&take(&b.nqn, &["01"], false)).await,
        409,
        "already composed",
    );
    assert_problem(
        api.admin.compose(&take(&c.nqn, &["02", "99"], false)).await,
        404,
        "99",
    );
    assert_problem(
        api.admin.compose(&take("nqn.bogus", &["02"], false)).await,
        422,
        "NQN",
    );
    assert_problem(
        api.admin.compose(&take(&c.nqn, &[], false)).await,
        422,
        "drives",
    );
    assert_problem(
        api.admin.compose(&take(&c.nqn, &["02", "02"], false)).await,
        422,
        "twice",
    );
    let mut bad_port = take(&c.nqn, &["02"], false);
    bad_port.ports = Some(vec![9]);
    assert_problem(api.admin.compose(&bad_port).await, 404, "port 9");
    assert_problem(api.admin.decompose("c99").await, 404, "c99");
    assert_problem(
        api.admin.delete(&format!("/hosts/{}", b.nqn)).await,
        409,
        "decompose",
    );
    assert_problem(
        api.admin
            .delete(&format!("/subsystems/{}", nqn("00")))
            .await,
        409,
        "decompose",
    );
    assert_problem(
        api.admin
            .delete(&format!("/subsystems/{}/namespaces/1", nqn("01")))
            .await,
        409,
        "composed",
    );
    // Nothing half-done: drive 02 (valid in the failed calls) stays free, the file unchanged.
    assert_eq!(api.admin.drive("02").await.unwrap().hosts, None);
    assert_eq!(api.admin.compositions().await.unwrap().len(), 1);
    assert_eq!(
        std::fs::read(dir.path().join("state.json")).unwrap(),
        before,
        "state file untouched"
    );

    // Decompose: B loses the drives, A gets them back.
    api.admin.decompose(&comp.id).await.unwrap();
    let mut gone = false;
    for _ in 0..50 {
        if ctrl_b.read(1, 0, 1).await.is_err() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        gone,
        "host B's controller was torn down by the decomposition"
    );
    let ctrl_a = connect(addr, &nqn("00"), &a).await.unwrap();
    common::assert_same_data(
        &ctrl_a.read(1, 0, 1).await.unwrap(),
        &data,
        "drive 00 back with A",
    );
    assert_eq!(api.admin.drive("00").await.unwrap().hosts, None);
    ctrl_a.shutdown().await.unwrap();
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_drives_admit_every_composed_host() {
    let dir = tempfile::tempdir().unwrap();
    let api = start(dir.path()).await;
    let (a, b, c) = (
        HostIdentity::random(),
        HostIdentity::random(),
        HostIdentity::random(),
    );
    for h in [&a, &b] {
        api.admin
            .compose(&CompositionRequest {
                host_nqn: h.nqn.clone(),
                drives: vec!["03".into()],
                ports: Some(vec![1]),
                shared: true,
            })
            .await
            .unwrap();
    }
    let s = api.admin.subsystem(&nqn("03")).await.unwrap();
    assert_eq!(s.hosts, vec![a.nqn.clone(), b.nqn.clone()]);
    assert!(!s.allow_any_host);
    for h in [&a, &b] {
        connect_and_close(api.nvme(), &nqn("03"), h).await;
    }
    assert!(
        connect(api.nvme(), &nqn("03"), &c).await.is_err(),
        "a third host stays out"
    );
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subsystems_namespaces_and_hosts_change_live() {
    let dir = tempfile::tempdir().unwrap();
    let api = start(dir.path()).await;
    let addr = api.nvme();
    let host = HostIdentity::random();
    let m = &api.admin;

    // A drive is one namespace of one subsystem: drive 03 must leave its own first.
    assert_problem(
        m.post::<Subsystem>(
            "/subsystems",
            &SubsystemRequest {
                nqn: None,
                name: Some("pair".into()),
                drives: vec!["03".into()],
                hosts: vec![],
                allow_any_host: false,
                model: None,
            },
        )
        .await,
        409,
        "exported by",
    );
    assert_problem(
        m.post::<Subsystem>(
            "/subsystems",
            &SubsystemRequest {
                nqn: Some("bad nqn".into()),
                name: None,
                drives: vec![],
                hosts: vec![],
                allow_any_host: true,
                model: None,
            },
        )
        .await,
        422,
        "NQN",
    );
    let pair: Subsystem = m
        .post(
            "/subsystems",
            &SubsystemRequest {
                nqn: None,
                name: Some("pair".into()),
                drives: vec![],
                hosts: vec![host.nqn.clone()],
                allow_any_host: false,
                model: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(pair.nqn, "nqn.2024-01.io.fabrik:testbox:pair");
    assert_eq!(pair.hosts, vec![host.nqn.clone()]);
    assert_problem(
        m.post::<Subsystem>(
            "/subsystems",
            &SubsystemRequest {
                nqn: None,
                name: Some("pair".into()),
                drives: vec![],
                hosts: vec![],
                allow_any_host: true,
                model: None,
            },
        )
        .await,
        409,
        "exists",
    );
    m.delete(&format!("/subsystems/{}/namespaces/1", nqn("03")))
        .await
        .unwrap();
    assert_problem(
        m.delete(&format!("/subsystems/{}/namespaces/1", nqn("03")))
            .await,
        404,
        "no namespace",
    );

    // The host connects to the empty subsystem, asks for namespace events, gets one per change.
    let ctrl = connect(addr, &pair.nqn, &host).await.unwrap();
    assert!(ctrl.active_namespaces().await.unwrap().is_empty());
    ctrl.set_features(fid::ASYNC_EVENT_CONFIG, 0, aec::NS_ATTR_NOTICES)
        .await
        .unwrap();
    let expected = aen::result(
        aen::TYPE_NOTICE,
        aen::NOTICE_NS_ATTR_CHANGED,
        lid::CHANGED_NS_LIST,
    ) as u64;
    let aer = ctrl.submit_admin(AdminCommand::AsyncEventRequest.to_sqe(0), None, 0);
    let add = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        m.post::<Namespace>(
            &format!("/subsystems/{}/namespaces", pair.nqn),
            &NamespaceRequest {
                drive: "03".into(),
                nsid: Some(5),
            },
        )
        .await
        .unwrap()
    };
    let (event, ns) = tokio::join!(aer, add);
    assert_eq!(event.unwrap().cqe.result, expected);
    assert_eq!((ns.nsid, ns.drive.as_str()), (5, "03"));
    let log = ctrl
        .get_log_page(lid::CHANGED_NS_LIST, 0xffff_ffff, 4096, 0)
        .await
        .unwrap();
    assert_eq!(decode_changed_ns_list(&log).unwrap(), vec![5]);
    let data = common::random_data(8192, 5);
    ctrl.write(5, 0, data.clone(), false).await.unwrap();
    common::assert_same_data(&ctrl.read(5, 0, 2).await.unwrap(), &data, "namespace 5");
    let req = |drive: &str, nsid| NamespaceRequest {
        drive: drive.into(),
        nsid,
    };
    let path = format!("/subsystems/{}/namespaces", pair.nqn);
    assert_problem(
        m.post::<Namespace>(&path, &req("03", None)).await,
        409,
        "exported by",
    );
    assert_problem(
        m.post::<Namespace>(&path, &req("77", None)).await,
        404,
        "77",
    );
    assert_problem(
        m.post::<Namespace>(&path, &req("02", Some(0))).await,
        422,
        "out of range",
    );
    assert_problem(
        m.post::<Namespace>("/subsystems/nqn.2024-01.x:y/namespaces", &req("02", None))
            .await,
        404,
        "no subsystem",
    );

    // Host access: taking the host off the list tears its controller down at once.
    let other = HostIdentity::random();
    let s: Subsystem = m
        .post(
            &format!("/subsystems/{}/hosts", pair.nqn),
            &HostRequest {
                nqn: other.nqn.clone(),
                name: None,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(s.hosts, vec![host.nqn.clone(), other.nqn.clone()]);
    assert_problem(
        m.post::<Subsystem>(
            &format!("/subsystems/{}/hosts", pair.nqn),
            &HostRequest {
                nqn: other.nqn.clone(),
                name: None,
                ..Default::default()
            },
        )
        .await,
        409,
        "already",
    );
    assert_problem(
        m.post::<Subsystem>(
            &format!("/subsystems/{}/hosts", pair.nqn),
            &HostRequest {
                nqn: "x".into(),
                name: None,
                ..Default::default()
            },
        )
        .await,
        422,
        "NQN",
    );
    let _: Subsystem = m
        .request(
            Method::DELETE,
            &format!("/subsystems/{}/hosts/{}", pair.nqn, host.nqn),
            None,
        )
        .await
        .unwrap();
    assert!(
        ctrl.read(5, 0, 1).await.is_err(),
        "the removed host's controller is gone"
    );
    assert!(connect(addr, &pair.nqn, &host).await.is_err());
    connect_and_close(addr, &pair.nqn, &other).await;

    // Any host again, then the subsystem goes: its drive is free for another.
    let s: Subsystem = m
        .put(
            &format!("/subsystems/{}/access", pair.nqn),
            &AccessRequest {
                allow_any_host: true,
            },
        )
        .await
        .unwrap();
    assert!(s.allow_any_host && s.hosts.is_empty());
    m.delete(&format!("/subsystems/{}", pair.nqn))
        .await
        .unwrap();
    assert_problem(m.subsystem(&pair.nqn).await, 404, "no subsystem");
    let back: Namespace = m
        .post(
            &format!("/subsystems/{}/namespaces", nqn("03")),
            &req("03", None),
        )
        .await
        .unwrap();
    assert_eq!(back.nsid, 1);
    let c = connect(addr, &nqn("03"), &host).await.unwrap();
    common::assert_same_data(
        &c.read(1, 0, 2).await.unwrap(),
        &data,
        "drive 03 keeps its data",
    );
    c.shutdown().await.unwrap();

    // Hosts: register, refuse duplicates and bad NQNs, delete.
    let named: Host = m
        .post(
            "/hosts",
            &HostRequest {
                nqn: host.nqn.clone(),
                name: Some("gpu-1".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(named.name.as_deref(), Some("gpu-1"));
    assert_problem(
        m.post::<Host>(
            "/hosts",
            &HostRequest {
                nqn: host.nqn.clone(),
                name: None,
                ..Default::default()
            },
        )
        .await,
        409,
        "registered",
    );
    assert_problem(
        m.post::<Host>(
            "/hosts",
            &HostRequest {
                nqn: "nqn.2014-08.org.nvmexpress:uuid:zz".into(),
                name: None,
                ..Default::default()
            },
        )
        .await,
        422,
        "UUID",
    );
    m.delete(&format!("/hosts/{}", host.nqn)).await.unwrap();
    assert_problem(
        m.get::<Host>(&format!("/hosts/{}", host.nqn)).await,
        404,
        "unknown host",
    );
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_is_restored_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let api = start(dir.path()).await;
    let host = HostIdentity::random();
    let comp = api
        .admin
        .compose(&CompositionRequest {
            host_nqn: host.nqn.clone(),
            drives: vec!["02".into()],
            ports: None,
            shared: false,
        })
        .await
        .unwrap();
    api.admin
        .delete(&format!("/subsystems/{}/namespaces/1", nqn("03")))
        .await
        .unwrap();
    let _: Host = api
        .admin
        .post(
            "/hosts",
            &HostRequest {
                nqn: host.nqn.clone(),
                name: Some("n1".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let before = (
        api.admin.subsystems().await.unwrap(),
        api.admin.compositions().await.unwrap(),
        api.admin.hosts().await.unwrap(),
    );
    api.stop().await;

    let api = start(dir.path()).await;
    let after = (
        api.admin.subsystems().await.unwrap(),
        api.admin.compositions().await.unwrap(),
        api.admin.hosts().await.unwrap(),
    );
    assert_eq!(after.1[0].id, comp.id);
    // Port numbers differ (port 0 in the config): compare without the connect commands.
    let strip = |mut c: Vec<Composition>| {
        c.iter_mut().for_each(|c| c.connect.clear());
        c
    };
    // RAM drives keep no data across a restart: their namespaces come back as new devices
    // (new NGUID and UUID), so no host takes one for the drive it wrote to.
    let (mut subs_after, mut subs_before) = (after.0.clone(), before.0.clone());
    for (a, b) in subs_after.iter_mut().zip(subs_before.iter_mut()) {
        for (x, y) in a.namespaces.iter_mut().zip(b.namespaces.iter_mut()) {
            assert_ne!(
                (&x.nguid, &x.uuid),
                (&y.nguid, &y.uuid),
                "a RAM namespace keeps its identity"
            );
            (x.nguid, x.uuid) = (String::new(), String::new());
            (y.nguid, y.uuid) = (String::new(), String::new());
        }
    }
    assert_eq!(
        (&subs_after, strip(after.1.clone()), &after.2),
        (&subs_before, strip(before.1.clone()), &before.2)
    );
    assert!(
        connect(api.nvme(), &nqn("02"), &HostIdentity::random())
            .await
            .is_err(),
        "still composed"
    );
    connect_and_close(api.nvme(), &nqn("02"), &host).await;
    api.stop().await;
}

/// A composition and the host's controller show in `/metrics` (the API's address): the drive's
/// composition, the controller and what it moved, one connected host; all gone after
/// decompose. The host is named by its alias, never by its NQN (anyone who read the NQN could
/// connect as the host); the REST API, with the token, tells which alias is which host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn composition_and_controller_show_in_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let api = start(dir.path()).await;
    let host = HostIdentity::random();
    let comp = api
        .admin
        .compose(&CompositionRequest {
            host_nqn: host.nqn.clone(),
            drives: vec!["01".into()],
            ports: None,
            shared: false,
        })
        .await
        .unwrap();
    let ctrl = connect(api.nvme(), &nqn("01"), &host).await.unwrap();
    ctrl.write(1, 0, common::random_data(4096, 7), false)
        .await
        .unwrap();

    let text = scrape_with(api.api, None, Some(TOKEN)).await.1;
    assert!(
        !text.contains(&host.nqn),
        "no host NQN in the metrics:\n{text}"
    );
    let alias = api
        .admin
        .get::<Host>(&format!("/hosts/{}", host.nqn))
        .await
        .unwrap()
        .alias;
    assert!(alias.starts_with("h-") && alias.len() == 14, "{alias}");
    let ctrls = api.admin.controllers().await.unwrap();
    assert_eq!(ctrls[0].host_alias, alias);
    let samples = parse(&text);
    let mine = [("host", alias.as_str()), ("subsystem", &nqn("01"))];
    assert_eq!(
        value(&samples, "fabrik_controller_io_queues", &mine),
        ctrl.io_queue_count() as f64
    );
    assert_eq!(
        value(&samples, "fabrik_controller_write_bytes_total", &mine),
        4096.0
    );
    let cntlid = ctrl.cntlid().to_string();
    assert_eq!(
        value(
            &samples,
            "fabrik_controller_write_ops_total",
            &[("host", &alias), ("controller", &cntlid), ("port", "1")]
        ),
        1.0
    );
    assert_eq!(value(&samples, "fabrik_connected_hosts", &[]), 1.0);
    assert_eq!(
        value(
            &samples,
            "fabrik_drive_composed_info",
            &[("drive", "01"), ("host", &alias)]
        ),
        1.0
    );
    assert_eq!(
        samples
            .iter()
            .filter(|s| s.name == "fabrik_drive_composed_info")
            .count(),
        1,
        "only drive 01 is composed"
    );

    api.admin.decompose(&comp.id).await.unwrap();
    let mut text = String::new();
    for _ in 0..100 {
        text = scrape_with(api.api, None, Some(TOKEN)).await.1;
        if !text.contains(&alias) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !text.contains(&alias),
        "the host's controller and composition are gone:\n{text}"
    );
    assert_eq!(value(&parse(&text), "fabrik_connected_hosts", &[]), 0.0);
    api.stop().await;
}
