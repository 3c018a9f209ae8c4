//! Placement fed by a real fabrikd: its discovery log (or its REST API) becomes the box
//! inventory, the plan deals its drives over the GPUs of a fixture machine, and every planned
//! connection is one fabrikd accepts (connect, write, read back). Applying a plan composes its
//! drives to this host through the API first: then they are this host's alone.

mod common;

#[path = "../../initiator/tests/fixtures/mod.rs"]
mod fixtures;

use common::*;
use fabrik_api::client::ClientError;
use fabrik_initiator::placement::apply::{self, ApplyError, SessionError};
use fabrik_initiator::placement::{plan, BoxInventory, PlaceOptions, Transport};
use fabrik_initiator::proto::Status;
use fabrik_initiator::topology::Topology;
use fabrik_initiator::{discover, Controller, HostError, HostIdentity};
use fabrik_target::backend::BackendKind;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovered_drives_are_placed_and_each_planned_connection_works() {
    let dir = tempfile::tempdir().unwrap();
    let target = start(config(dir.path(), BackendKind::Ram, 24, 1 << 20)).await;
    let addr = addr(&target);
    let log = discover(addr, &HostIdentity::random().nqn).await.unwrap();
    let inventory = BoxInventory::from_discovery(&log.entries);
    assert_eq!(inventory.ports.len(), 1);
    assert_eq!(inventory.ports[0].trtype, Transport::Tcp);
    assert_eq!(inventory.drives.len(), 24);

    let machine = fixtures::machines::reference_2gpu();
    let topo = Topology::read(machine.root()).unwrap();
    // The box is on loopback, not on the fixture's 10.10.k.0/24 rails: any network will do.
    let opts = PlaceOptions {
        subnet_bits: Some(0),
        drives_per_gpu: Some(12),
        ..Default::default()
    };
    let plan = plan(&topo, &inventory, &opts).unwrap();
    assert_eq!(plan.gpus.len(), 2);
    let mut planned: Vec<String> = Vec::new();
    for g in &plan.gpus {
        assert_eq!(g.connections.len(), 12);
        for c in &g.connections {
            assert_eq!(c.target.traddr, addr.ip().to_string());
            assert_eq!(c.target.trsvcid, addr.port());
            planned.push(c.nqn.clone());
        }
    }
    planned.sort();
    assert_eq!(planned, nqns(&target), "every drive placed exactly once");

    // Each GPU's first drive: connect as planned (the source address is the fixture's, so the
    // userspace host connects without binding it) and read back what was written.
    for (i, g) in plan.gpus.iter().enumerate() {
        let c = &g.connections[0];
        let ctrl = Controller::connect(options(addr, &c.nqn)).await.unwrap();
        let data = random_data(4096, i as u64);
        ctrl.write(1, 0, data.clone(), false).await.unwrap();
        let back = ctrl.read(1, 0, 1).await.unwrap();
        assert_same_data(&back, &data, &c.nqn);
        ctrl.shutdown().await.unwrap();
    }
}

/// `fabrik place --apply --userspace` as a library: the inventory from the API, a dry run that
/// changes nothing, the composition for this host, the refusals (no token, a second host), and
/// a verified read over every planned connection as the composed host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn applying_a_plan_composes_its_drives_to_this_host_only() {
    let dir = tempfile::tempdir().unwrap();
    let api = api::start(dir.path()).await;
    let ports = api.admin.ports().await.unwrap();
    let drives = api.admin.drives().await.unwrap();
    let inventory = BoxInventory::from_api(&ports, &drives, Some("127.0.0.1"));
    assert_eq!(inventory.ports.len(), 1);
    assert_eq!(inventory.ports[0].trsvcid, api.nvme().port());
    assert_eq!(
        inventory
            .drives
            .iter()
            .map(|d| d.nqn.clone())
            .collect::<Vec<_>>(),
        api::nqn_list(&["00", "01", "02", "03"])
    );
    let machine = fixtures::machines::reference_2gpu();
    let topo = Topology::read(machine.root()).unwrap();
    let opts = PlaceOptions {
        subnet_bits: Some(0),
        ..Default::default()
    };
    let plan = plan(&topo, &inventory, &opts).unwrap();
    assert_eq!(plan.gpus.len(), 2);
    assert_eq!(apply::connections(&plan).count(), 4);

    let me = HostIdentity::random();
    let other = HostIdentity::random();
    // The dry run reads the box and changes nothing: the other host still reaches drive 00.
    let cp = apply::composition_plan(&api.local, &plan, &me.nqn)
        .await
        .unwrap();
    assert!(cp.existing.is_empty());
    let req = cp.request.unwrap();
    let mut ids = req.drives.clone();
    ids.sort();
    assert_eq!(ids, ["00", "01", "02", "03"]);
    assert_eq!(req.ports, Some(vec![ports[0].id]));
    assert_eq!(req.host_nqn, me.nqn);
    assert!(api.admin.compositions().await.unwrap().is_empty());
    let first = apply::connections(&plan).next().unwrap().clone();
    apply::check_session(&first, &other).await.unwrap();

    // Without the token the API says why.
    match apply::compose(&api.anon, &plan, &me.nqn).await {
        Err(
            ApplyError::Inventory(ClientError::Api(p)) | ApplyError::Refused(ClientError::Api(p)),
        ) => {
            assert_eq!(p.status, 401, "{p:?}")
        }
        other => panic!("composing without a token: {other:?}"),
    }
    assert!(api.admin.compositions().await.unwrap().is_empty());

    let (comp, _) = apply::compose(&api.admin, &plan, &me.nqn).await.unwrap();
    let comp = comp.expect("a new composition");
    assert_eq!(comp.host_nqn, me.nqn);
    assert_eq!(comp.drives.len(), 4);
    assert!(apply::unconfirmed(&plan, &[&comp]).is_empty(), "{comp:?}");
    assert_eq!(api.admin.compositions().await.unwrap(), vec![comp.clone()]);
    // Applying again composes nothing twice: the existing composition covers the plan.
    let (again, cp) = apply::compose(&api.admin, &plan, &me.nqn).await.unwrap();
    assert!(again.is_none() && cp.request.is_none());
    assert_eq!(cp.existing, vec![comp.clone()]);
    assert_eq!(api.admin.compositions().await.unwrap().len(), 1);

    // A second host can neither compose the same drives nor connect to them.
    let err = apply::compose(&api.admin, &plan, &other.nqn)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ApplyError::Refused(ClientError::Api(p)) if p.status == 409 && p.detail.contains("is composed to")),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .starts_with("the box's API refused the composition: 409"),
        "{err}"
    );
    for c in apply::connections(&plan) {
        match apply::check_session(c, &other).await {
            Err(SessionError::Host(HostError::Status { status, .. })) => {
                assert!(status.same_code(Status::CONNECT_INVALID_HOST), "{status}")
            }
            r => panic!("the other host on {}: {r:?}", c.nqn),
        }
    }

    // The composed host: every planned connection reads a block; what it writes reads back.
    for c in apply::connections(&plan) {
        let s = apply::check_session(c, &me).await.unwrap();
        assert_eq!((s.nsid, s.bytes_read), (1, 4096), "{}", c.nqn);
    }
    let ctrl = api::connect(api.nvme(), &first.nqn, &me).await.unwrap();
    let data = random_data(4096, 7);
    ctrl.write(1, 3, data.clone(), false).await.unwrap();
    assert_same_data(&ctrl.read(1, 3, 1).await.unwrap(), &data, &first.nqn);
    ctrl.shutdown().await.unwrap();
    api.stop().await;
}

/// A planned drive the box does not export: a clear error before anything is asked of the box.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_naming_an_unknown_subsystem_is_not_composed() {
    let dir = tempfile::tempdir().unwrap();
    let api = api::start(dir.path()).await;
    let ports = api.admin.ports().await.unwrap();
    let mut inventory = BoxInventory::from_api(&ports, &[], Some("127.0.0.1"));
    inventory.drives.push(fabrik_initiator::placement::Drive {
        nqn: "nqn.2024-01.io.fabrik:otherbox:drive-00".into(),
        gbytes_per_sec: None,
        ports: Vec::new(),
    });
    let machine = fixtures::machines::reference_2gpu();
    let topo = Topology::read(machine.root()).unwrap();
    let opts = PlaceOptions {
        subnet_bits: Some(0),
        ..Default::default()
    };
    let plan = plan(&topo, &inventory, &opts).unwrap();
    let err = apply::compose(&api.admin, &plan, &HostIdentity::random().nqn)
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("no drive exported as nqn.2024-01.io.fabrik:otherbox:drive-00"),
        "{err}"
    );
    assert!(api.admin.compositions().await.unwrap().is_empty());
    api.stop().await;
}
