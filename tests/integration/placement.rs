//! Placement fed by a real fabrikd: its discovery log becomes the box inventory, the plan deals
//! its 24 drives over the GPUs of a fixture machine, and every planned connection is one
//! fabrikd accepts (connect, write, read back).

mod common;

#[path = "../../initiator/tests/fixtures/mod.rs"]
mod fixtures;

use common::*;
use fabrik_initiator::placement::{plan, BoxInventory, PlaceOptions, Transport};
use fabrik_initiator::topology::Topology;
use fabrik_initiator::{discover, Controller, HostIdentity};
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
