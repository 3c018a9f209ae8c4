//! Placement plans on the fixture machines: pairings, warnings, ceilings and bottlenecks.

mod fixtures;

use fabrik_initiator::placement::{
    plan, Bottleneck, BoxInventory, Drive, PlaceError, PlaceOptions, Plan, TargetPort, Transport,
    WarningKind,
};
use fabrik_initiator::topology::{Distance, PciAddr, Topology};

fn pci(s: &str) -> PciAddr {
    s.parse().unwrap()
}

/// The reference box: 24 drives, one RDMA port per host rail (10.10.k.100).
fn reference_box(drive_gbps: Option<f64>) -> BoxInventory {
    BoxInventory {
        ports: (0..6)
            .map(|k| TargetPort {
                trtype: Transport::Rdma,
                traddr: format!("10.10.{k}.100"),
                trsvcid: 4420,
            })
            .collect(),
        drives: (0..24)
            .map(|i| Drive {
                nqn: format!("nqn.2024-01.io.fabrik:box:drive-{i:02}"),
                gbytes_per_sec: drive_gbps,
                ports: Vec::new(),
            })
            .collect(),
    }
}

fn ports_of(plan: &Plan, gpu: usize) -> Vec<String> {
    plan.gpus[gpu]
        .ports
        .iter()
        .map(|p| format!("{}/{} {}", p.rdma, p.port, p.distance))
        .collect()
}

fn kinds(plan: &Plan, gpu: usize) -> Vec<WarningKind> {
    plan.gpus[gpu].warnings.iter().map(|w| w.kind).collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 0.05
}

#[test]
fn reference_server_keeps_each_gpu_under_its_switch() {
    let m = fixtures::machines::reference_2gpu();
    let topo = Topology::read(m.root()).unwrap();
    let plan = plan(&topo, &reference_box(None), &PlaceOptions::default()).unwrap();
    assert_eq!(plan.gpus.len(), 2);
    assert_eq!(
        ports_of(&plan, 0),
        [
            "mlx5_0/1 PIX",
            "mlx5_1/1 PIX",
            "mlx5_2/1 PIX",
            "mlx5_3/1 PIX"
        ]
    );
    assert_eq!(ports_of(&plan, 1), ["mlx5_4/1 PIX", "mlx5_5/1 PIX"]);
    assert!(
        plan.gpus.iter().all(|g| g.warnings.is_empty()),
        "{:#?}",
        plan.gpus
    );
    assert!(plan.unused_ports.is_empty());
    // GPU0: four 200G ports (100 GB/s) behind a Gen5 x16 link (63 GB/s): the link limits.
    let c0 = &plan.gpus[0].ceiling;
    assert_eq!(c0.bottleneck, Bottleneck::GpuLink);
    assert!(close(c0.gbytes_per_sec, 63.0), "{c0:?}");
    // GPU1: two ports, 50 GB/s.
    let c1 = &plan.gpus[1].ceiling;
    assert_eq!(c1.bottleneck, Bottleneck::NicPorts);
    assert!(close(c1.gbytes_per_sec, 50.0), "{c1:?}");
    assert!(close(plan.total_gbytes_per_sec, 113.0));
    // 24 drives dealt in turn: 12 each; GPU0's over its 4 ports, each port's two source
    // addresses in turn, each to the box port on the same rail.
    let g0 = &plan.gpus[0].connections;
    assert_eq!(g0.len(), 12);
    assert_eq!(g0[0].nqn, "nqn.2024-01.io.fabrik:box:drive-00");
    assert_eq!(
        plan.gpus[1].connections[0].nqn,
        "nqn.2024-01.io.fabrik:box:drive-01"
    );
    let line = |c: &fabrik_initiator::placement::Connection| {
        format!(
            "{} {}/{} {} -> {}",
            c.nqn.rsplit(':').next().unwrap(),
            c.rdma,
            c.port,
            c.host_traddr.unwrap(),
            c.target.traddr
        )
    };
    let first: Vec<String> = g0[..5].iter().map(line).collect();
    assert_eq!(
        first,
        [
            "drive-00 mlx5_0/1 10.10.0.1 -> 10.10.0.100",
            "drive-02 mlx5_1/1 10.10.1.1 -> 10.10.1.100",
            "drive-04 mlx5_2/1 10.10.2.1 -> 10.10.2.100",
            "drive-06 mlx5_3/1 10.10.3.1 -> 10.10.3.100",
            "drive-08 mlx5_0/1 10.10.0.2 -> 10.10.0.100",
        ]
    );
    assert_eq!(
        line(&plan.gpus[1].connections[1]),
        "drive-03 mlx5_5/1 10.10.5.1 -> 10.10.5.100"
    );
    assert!(g0.iter().all(|c| c.host_iface.is_some()));
    // Deterministic.
    let again =
        fabrik_initiator::placement::plan(&topo, &reference_box(None), &PlaceOptions::default())
            .unwrap();
    assert_eq!(
        serde_json::to_string(&plan).unwrap(),
        serde_json::to_string(&again).unwrap()
    );
}

#[test]
fn bandwidth_goal_borrows_a_spare_port_across_the_socket_with_a_warning() {
    let m = fixtures::machines::reference_2gpu();
    let topo = Topology::read(m.root()).unwrap();
    let opts = PlaceOptions {
        bandwidth_goal: Some(60.0),
        ..Default::default()
    };
    let plan = plan(&topo, &reference_box(None), &opts).unwrap();
    // GPU0 does not need all four of its ports to fill its link; GPU1 takes a share of one.
    assert_eq!(
        ports_of(&plan, 1),
        ["mlx5_4/1 PIX", "mlx5_5/1 PIX", "mlx5_0/1 SYS"]
    );
    let borrowed = &plan.gpus[1].ports[2];
    assert!(borrowed.borrowed);
    assert_eq!(borrowed.shared_with, [0]);
    assert!(
        close(plan.gpus[1].ceiling.gbytes_per_sec, 62.5),
        "{:?}",
        plan.gpus[1].ceiling
    );
    assert!(close(plan.gpus[0].ceiling.gbytes_per_sec, 63.0));
    assert_eq!(kinds(&plan, 1), [WarningKind::CrossSocket]);
    let w = &plan.gpus[1].warnings[0].message;
    assert!(
        w.contains("mlx5_0 port 1") && w.contains("NUMA node 1") && w.contains("bandwidth goal"),
        "{w}"
    );
    assert!(plan.gpus[0].warnings.is_empty());
    // A goal nobody can reach: GPU0 stays at its link and says so; nothing is taken from it.
    let opts = PlaceOptions {
        bandwidth_goal: Some(100.0),
        ..Default::default()
    };
    let plan = fabrik_initiator::placement::plan(&topo, &reference_box(None), &opts).unwrap();
    assert!(kinds(&plan, 0).contains(&WarningKind::BelowGoal));
    assert!(close(plan.gpus[0].ceiling.gbytes_per_sec, 63.0));
}

#[test]
fn dgx_h100_pairs_each_gpu_with_its_compute_nic() {
    let m = fixtures::machines::dgx_h100();
    let topo = Topology::read(m.root()).unwrap();
    let inv = BoxInventory {
        ports: vec![TargetPort {
            trtype: Transport::Rdma,
            traddr: "172.16.0.10".into(),
            trsvcid: 4420,
        }],
        drives: (0..24)
            .map(|i| Drive {
                nqn: format!("nqn.box:drive-{i:02}"),
                gbytes_per_sec: Some(6.8),
                ports: Vec::new(),
            })
            .collect(),
    };
    let opts = PlaceOptions {
        drives_per_gpu: Some(2),
        ..Default::default()
    };
    let plan = plan(&topo, &inv, &opts).unwrap();
    let pairs: Vec<String> = plan
        .gpus
        .iter()
        .map(|g| format!("GPU{} {}", g.gpu, ports_of(&plan, g.gpu).join(",")))
        .collect();
    assert_eq!(
        pairs,
        [
            "GPU0 mlx5_0/1 PXB",
            "GPU1 mlx5_3/1 PXB",
            "GPU2 mlx5_4/1 PXB",
            "GPU3 mlx5_5/1 PXB",
            "GPU4 mlx5_6/1 PXB",
            "GPU5 mlx5_9/1 PXB",
            "GPU6 mlx5_10/1 PXB",
            "GPU7 mlx5_11/1 PXB",
        ]
    );
    // The storage NICs (NODE to every GPU) are left alone.
    assert_eq!(
        plan.unused_ports,
        ["mlx5_1/1", "mlx5_2/1", "mlx5_7/1", "mlx5_8/1"]
    );
    for g in &plan.gpus {
        assert!(g.warnings.is_empty(), "{:?}", g.warnings);
        // Two drives of 6.8 GB/s are less than one 400G port (50 GB/s).
        assert_eq!(g.ceiling.bottleneck, Bottleneck::Drives);
        assert!(close(g.ceiling.gbytes_per_sec, 13.6));
        assert_eq!(g.connections.len(), 2);
        // InfiniBand: no IP in the GID table, so no source address to give.
        assert_eq!(g.connections[0].host_traddr, None);
    }
    assert_eq!(plan.unassigned_drives.len(), 8);
    assert!(plan
        .warnings
        .iter()
        .any(|w| w.kind == WarningKind::DrivesLeftOver));
    // Without the drive limit each GPU gets 3 drives and the NIC port limits (400 Gb/s).
    let plan = fabrik_initiator::placement::plan(
        &topo,
        &BoxInventory {
            drives: inv
                .drives
                .iter()
                .map(|d| Drive {
                    gbytes_per_sec: None,
                    ..d.clone()
                })
                .collect(),
            ..inv.clone()
        },
        &PlaceOptions::default(),
    )
    .unwrap();
    assert!(plan
        .gpus
        .iter()
        .all(|g| g.ceiling.bottleneck == Bottleneck::NicPorts
            && close(g.ceiling.gbytes_per_sec, 50.0)
            && g.connections.len() == 3));
}

#[test]
fn no_switch_server_uses_the_nic_of_the_same_numa_node_and_warns() {
    let m = fixtures::machines::asus_no_switch();
    let topo = Topology::read(m.root()).unwrap();
    let plan = plan(&topo, &BoxInventory::default(), &PlaceOptions::default()).unwrap();
    assert_eq!(ports_of(&plan, 0), ["mlx5_0/1 NODE"]);
    assert_eq!(ports_of(&plan, 1), ["mlx5_1/1 NODE"]);
    assert_eq!(ports_of(&plan, 2), ["mlx5_2/1 NODE"]);
    assert_eq!(ports_of(&plan, 3), ["mlx5_3/1 NODE"]);
    for g in 0..4 {
        assert_eq!(kinds(&plan, g), [WarningKind::CrossNode]);
        let w = &plan.gpus[g].warnings[0].message;
        assert!(
            w.contains("between host bridges") && w.contains("no NIC port is closer"),
            "{w}"
        );
        // RTX 6000 Ada, Gen4 x16 (31.5 GB/s) against one 200G port (25 GB/s).
        assert_eq!(plan.gpus[g].ceiling.bottleneck, Bottleneck::NicPorts);
        assert!(close(plan.gpus[g].ceiling.gbytes_per_sec, 25.0));
    }
}

#[test]
fn nic_on_the_far_socket_is_shared_with_warnings() {
    let m = fixtures::machines::far_socket_nic();
    let topo = Topology::read(m.root()).unwrap();
    let plan = plan(&topo, &BoxInventory::default(), &PlaceOptions::default()).unwrap();
    assert_eq!(ports_of(&plan, 0), ["mlx5_0/1 SYS"]);
    assert_eq!(ports_of(&plan, 1), ["mlx5_1/1 SYS"]);
    assert_eq!(kinds(&plan, 0), [WarningKind::CrossSocket]);
    assert_eq!(
        kinds(&plan, 1),
        [WarningKind::CrossSocket, WarningKind::LinkDegraded]
    );
    let w = &plan.gpus[0].warnings[0].message;
    assert!(
        w.contains("GPU on NUMA node 0, NIC on NUMA node 1")
            && w.contains("no NIC port is closer to this GPU than SYS"),
        "{w}"
    );
    assert!(plan.gpus[1].warnings[1].message.contains("x8 of x16"));
    // GPU1 at x8 (31.5 GB/s) still reads faster than its 200G port.
    assert!(close(plan.gpus[1].ceiling.gbytes_per_sec, 25.0));
    // Only GPU1 wanted: it gets both ports.
    let opts = PlaceOptions {
        gpus: Some(vec![pci("0000:19:00.0")]),
        ..Default::default()
    };
    let plan = fabrik_initiator::placement::plan(&topo, &BoxInventory::default(), &opts).unwrap();
    assert_eq!(plan.gpus.len(), 1);
    assert_eq!(plan.gpus[0].gpu, 1);
    assert_eq!(ports_of(&plan, 0), ["mlx5_0/1 SYS", "mlx5_1/1 SYS"]);
    // GPU1's x8 link (31.5 GB/s) now limits, not the two ports (50 GB/s).
    assert_eq!(plan.gpus[0].ceiling.bottleneck, Bottleneck::GpuLink);
    assert!(close(plan.gpus[0].ceiling.gbytes_per_sec, 31.5));
}

#[test]
fn more_gpus_than_ports_share_them() {
    // The no-switch box with mlx5_1 down: GPU0 and GPU1 (NUMA 0) have one port between them.
    let m = fixtures::machines::asus_no_switch();
    std::fs::write(
        m.root().join("class/infiniband/mlx5_1/ports/1/state"),
        "1: DOWN\n",
    )
    .unwrap();
    let topo = Topology::read(m.root()).unwrap();
    let opts = PlaceOptions {
        gpus: Some(vec![pci("0000:01:00.0"), pci("0000:41:00.0")]),
        ..Default::default()
    };
    let plan = plan(&topo, &BoxInventory::default(), &opts).unwrap();
    assert_eq!(ports_of(&plan, 0), ["mlx5_0/1 NODE"]);
    assert_eq!(ports_of(&plan, 1), ["mlx5_0/1 NODE"]);
    assert_eq!(plan.gpus[0].ports[0].shared_with, [1]);
    assert!(close(plan.gpus[1].ceiling.gbytes_per_sec, 12.5));
    assert!(plan
        .warnings
        .iter()
        .any(|w| w.kind == WarningKind::PortNotActive
            && w.message == "mlx5_1 port 1 is DOWN: not used"));
}

#[test]
fn switch_uplink_is_named_when_it_limits() {
    // Reference server with switch 0's uplink trained at x2: GPU1's borrowed port on switch 0
    // reaches it only through that uplink, which caps it.
    let m = fixtures::machines::reference_2gpu();
    std::fs::write(
        m.root()
            .join("devices/pci0000:15/0000:15:01.0/0000:16:00.0/current_link_width"),
        "2\n",
    )
    .unwrap();
    let topo = Topology::read(m.root()).unwrap();
    let opts = PlaceOptions {
        bandwidth_goal: Some(55.0),
        ..Default::default()
    };
    let plan = plan(&topo, &reference_box(None), &opts).unwrap();
    // Uplink x2 at Gen5 is 7.9 GB/s: a borrowed 12.5 GB/s share over it is capped to that.
    assert_eq!(
        ports_of(&plan, 1),
        ["mlx5_4/1 PIX", "mlx5_5/1 PIX", "mlx5_0/1 SYS"]
    );
    let c = &plan.gpus[1].ceiling;
    assert_eq!(
        c.bottleneck,
        Bottleneck::SwitchUplink {
            switch: pci("0000:16:00.0")
        }
    );
    assert!(close(c.gbytes_per_sec, 50.0 + 7.88), "{c:?}");
}

#[test]
fn nic_ports_without_a_box_port_on_their_network_are_left_out() {
    let m = fixtures::machines::reference_2gpu();
    let topo = Topology::read(m.root()).unwrap();
    let mut inv = reference_box(None);
    inv.ports
        .retain(|p| p.traddr == "10.10.0.100" || p.traddr == "10.10.4.100");
    let plan = plan(&topo, &inv, &PlaceOptions::default()).unwrap();
    assert_eq!(ports_of(&plan, 0), ["mlx5_0/1 PIX"]);
    assert_eq!(ports_of(&plan, 1), ["mlx5_4/1 PIX"]);
    assert_eq!(
        plan.unused_ports,
        ["mlx5_1/1", "mlx5_2/1", "mlx5_3/1", "mlx5_5/1"]
    );
    let left_out: Vec<&str> = plan
        .warnings
        .iter()
        .filter(|w| w.kind == WarningKind::NoBoxPortOnNetwork)
        .map(|w| w.message.as_str())
        .collect();
    assert_eq!(left_out.len(), 4);
    assert_eq!(
        left_out[0],
        "mlx5_1 port 1 (10.10.1.1,10.10.1.2) has no box port on its network: not used"
    );
    assert!(plan.gpus[0]
        .connections
        .iter()
        .all(|c| c.target.traddr == "10.10.0.100"));
    assert!(close(plan.gpus[0].ceiling.gbytes_per_sec, 25.0));
    // A /16 network: every port reaches both box ports again.
    let opts = PlaceOptions {
        subnet_bits: Some(16),
        ..Default::default()
    };
    let plan = fabrik_initiator::placement::plan(&topo, &inv, &opts).unwrap();
    assert_eq!(plan.gpus[0].ports.len(), 4);
    assert!(plan.unused_ports.is_empty());
}

/// One GPU and one NIC per switch, NIC sometimes below the GPU's bus number: PIX pairs.
#[test]
fn supermicro_hgx_h200_pairs_gpu_and_nic_of_each_switch() {
    let m = fixtures::machines::supermicro_hgx_h200_partial();
    let topo = Topology::read(m.root()).unwrap();
    let plan = plan(&topo, &BoxInventory::default(), &PlaceOptions::default()).unwrap();
    let pairs: Vec<String> = plan
        .gpus
        .iter()
        .map(|g| {
            format!(
                "{} {} {:?}",
                g.pci,
                ports_of(&plan, g.gpu).join(","),
                g.switch.map(|s| s.to_string())
            )
        })
        .collect();
    assert_eq!(
        pairs,
        [
            "0000:18:00.0 mlx5_0/1 PIX Some(\"0000:16:00.0\")",
            "0000:2a:00.0 mlx5_1/1 PIX Some(\"0000:27:00.0\")",
            "0000:3a:00.0 mlx5_2/1 PIX Some(\"0000:38:00.0\")",
            "0000:5d:00.0 mlx5_3/1 PIX Some(\"0000:5a:00.0\")",
        ]
    );
    for g in &plan.gpus {
        assert!(g.warnings.is_empty());
        // A 400G port (50 GB/s) under a Gen5 x16 GPU (63 GB/s).
        assert_eq!(g.ceiling.bottleneck, Bottleneck::NicPorts);
        assert!(close(g.ceiling.gbytes_per_sec, 50.0));
    }
    assert_eq!(
        topo.distance(pci("0000:18:00.0"), pci("0000:5c:00.0")),
        Some(Distance::SYS)
    );
    assert_eq!(
        topo.distance(pci("0000:18:00.0"), pci("0000:29:00.0")),
        Some(Distance::NODE)
    );
}

/// In a VM every GPU and NIC sits on its own root port: all pairs read PHB. The plan still
/// pairs them one to one, warns for each, and the topology says it is a VM.
#[test]
fn kvm_guest_pairs_one_to_one_and_says_the_host_topology_is_hidden() {
    let m = fixtures::machines::kvm_guest_h200();
    let topo = Topology::read(m.root()).unwrap();
    assert!(
        topo.notes
            .iter()
            .any(|n| n.starts_with("this looks like a virtual machine (DMI sys_vendor \"QEMU\")")),
        "{:?}",
        topo.notes
    );
    let plan = plan(&topo, &BoxInventory::default(), &PlaceOptions::default()).unwrap();
    for g in 0..8 {
        assert_eq!(ports_of(&plan, g), [format!("mlx5_{g}/1 PHB")]);
        assert_eq!(kinds(&plan, g), [WarningKind::CrossHostBridge]);
        // Gen4 x16 as the guest sees it (31.5 GB/s) against a 400G port.
        assert_eq!(plan.gpus[g].ceiling.bottleneck, Bottleneck::GpuLink);
    }
    // The virtio NIC is a NIC, not an RDMA port: never placed.
    assert_eq!(plan.unused_ports, Vec::<String>::new());
}

#[test]
fn bad_requests_are_clear_errors() {
    let m = fixtures::machines::reference_2gpu();
    let topo = Topology::read(m.root()).unwrap();
    let err = plan(
        &topo,
        &reference_box(None),
        &PlaceOptions {
            gpus: Some(vec![pci("0000:19:00.0")]),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert_eq!(err, PlaceError::NotAGpu(pci("0000:19:00.0")));
    let err = plan(
        &topo,
        &reference_box(None),
        &PlaceOptions {
            drives_per_gpu: Some(13),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "13 drives per GPU for 2 GPUs needs 26 drives; the box has 24"
    );
    let no_ports = BoxInventory {
        ports: vec![],
        ..reference_box(None)
    };
    assert_eq!(
        plan(&topo, &no_ports, &PlaceOptions::default()).unwrap_err(),
        PlaceError::NoTargetPorts
    );
    assert!(matches!(
        plan(
            &topo,
            &reference_box(None),
            &PlaceOptions {
                bandwidth_goal: Some(f64::NAN),
                ..Default::default()
            }
        ),
        Err(PlaceError::BadGoal(_))
    ));
}

#[test]
fn this_machine_without_gpus_gives_an_empty_plan_that_says_so() {
    let topo = Topology::read(std::path::Path::new("/sys")).unwrap();
    let plan = plan(&topo, &reference_box(None), &PlaceOptions::default()).unwrap();
    if topo.gpus().next().is_none() {
        assert!(plan.gpus.is_empty());
        assert_eq!(plan.warnings[0].kind, WarningKind::NoGpu);
        assert_eq!(
            plan.warnings[0].message,
            "no GPU found under /sys: nothing to place"
        );
    }
}

/// Many boxes (as a central discovery controller lists them): each drive connects through a
/// port of its own box, on the rail of the NIC port it is read through where its box has one.
#[test]
fn drives_of_many_boxes_connect_through_their_own_boxs_ports() {
    use fabrik_initiator::proto::fabrics::discovery::{subtype, DiscoveryLogEntry, Tsas};
    let entry = |b: usize, k: usize, d: usize| DiscoveryLogEntry {
        trtype: Transport::Rdma.trtype(),
        adrfam: 1,
        subtype: subtype::NVM,
        treq: 0,
        portid: k as u16,
        cntlid: 0xffff,
        asqsz: 32,
        eflags: 0,
        trsvcid: "4420".into(),
        subnqn: format!("nqn.2024-01.io.fabrik:box{b}:drive-{d:02}"),
        traddr: format!("10.10.{k}.{}", 100 + b),
        tsas: Tsas::Other([0; 16]),
    };
    // Box 1 on every rail, box 2 on rails 0 and 4 only; four drives each.
    let mut entries = Vec::new();
    for d in 0..4 {
        entries.extend((0..6).map(|k| entry(1, k, d)));
        entries.extend([0, 4].map(|k| entry(2, k, d)));
    }
    let inventory = BoxInventory::from_discovery(&entries);
    assert_eq!(inventory.drives.len(), 8);
    assert_eq!(inventory.ports.len(), 8);
    let m = fixtures::machines::reference_2gpu();
    let topo = Topology::read(m.root()).unwrap();
    let plan = plan(&topo, &inventory, &PlaceOptions::default()).unwrap();
    let mut seen = 0;
    for c in plan.gpus.iter().flat_map(|g| &g.connections) {
        let (own, _) = c.nqn.rsplit_once(":drive-").unwrap();
        let b = own.rsplit_once(":box").unwrap().1;
        assert_eq!(
            c.target.traddr.rsplit('.').next().unwrap(),
            format!("10{b}"),
            "{c}: a port of box {b}"
        );
        if b == "1" {
            // Box 1 is on every rail: the port on the NIC port's own network.
            let rail = c.host_traddr.unwrap().to_string();
            let rail = rail.split('.').nth(2).unwrap();
            assert_eq!(c.target.traddr.split('.').nth(2).unwrap(), rail, "{c}");
        }
        seen += 1;
    }
    assert_eq!(seen, 8, "every drive connected");
    // A drive limited to ports the box does not list is an error, not a drive left out.
    let mut lost = inventory.clone();
    lost.drives[0].ports = vec![TargetPort {
        trtype: Transport::Rdma,
        traddr: "10.99.0.1".into(),
        trsvcid: 4420,
    }];
    let nqn = lost.drives[0].nqn.clone();
    assert_eq!(
        fabrik_initiator::placement::plan(&topo, &lost, &PlaceOptions::default()).err(),
        Some(PlaceError::DriveUnreachable(nqn))
    );
}
