//! The sysfs topology reader on fixture trees of real machines: device kinds, switches, NUMA,
//! and the distance classes `nvidia-smi topo -m` prints for them.

mod fixtures;

use std::path::Path;
use std::process::Command;

use fabrik_initiator::topology::{BridgeRole, DeviceKind, Distance, PciAddr, Topology};

fn pci(s: &str) -> PciAddr {
    s.parse().unwrap()
}

/// The matrix cells between the named rows and columns, one string per row (space separated).
fn rows(topo: &Topology, labels: &[&str], row: &[&str], col: &[&str]) -> Vec<String> {
    let addr = |l: &str| -> PciAddr {
        let i = labels.iter().position(|x| *x == l).unwrap();
        addr_of(topo, i)
    };
    row.iter()
        .map(|r| {
            col.iter()
                .map(|c| topo.distance(addr(r), addr(c)).unwrap().to_string())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// GPUs first, then RDMA devices, as in `nvidia-smi topo -m`.
fn addr_of(topo: &Topology, i: usize) -> PciAddr {
    let gpus: Vec<PciAddr> = topo.gpus().map(|g| g.addr).collect();
    if i < gpus.len() {
        gpus[i]
    } else {
        topo.rdma[i - gpus.len()].pci.unwrap()
    }
}

#[test]
fn dgx_h100_matches_published_nvidia_smi_rows() {
    let m = fixtures::machines::dgx_h100();
    let topo = Topology::read(m.root()).unwrap();
    assert_eq!(topo.gpus().count(), 8);
    let names: Vec<&str> = topo.rdma.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7",
            "mlx5_8", "mlx5_9", "mlx5_10", "mlx5_11"
        ]
    );
    let labels: Vec<String> = (0..8)
        .map(|i| format!("GPU{i}"))
        .chain((0..12).map(|i| format!("NIC{i}")))
        .collect();
    let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
    let nics: Vec<&str> = labels[8..].to_vec();
    // dgx-h100.nvidia-smi-topo.partial.txt, GPU4..GPU7 rows, NIC columns.
    assert_eq!(
        rows(&topo, &labels, &["GPU4", "GPU5", "GPU6", "GPU7"], &nics),
        [
            "SYS SYS SYS SYS SYS SYS PXB NODE NODE NODE NODE NODE",
            "SYS SYS SYS SYS SYS SYS NODE NODE NODE PXB NODE NODE",
            "SYS SYS SYS SYS SYS SYS NODE NODE NODE NODE PXB NODE",
            "SYS SYS SYS SYS SYS SYS NODE NODE NODE NODE NODE PXB",
        ]
    );
    // NIC0..NIC7 rows, GPU and NIC columns (X on the diagonal).
    let mut cols = labels[..8].to_vec();
    cols.extend(&nics);
    assert_eq!(
        rows(&topo, &labels, &nics[..8], &cols),
        [
            "PXB NODE NODE NODE SYS SYS SYS SYS X NODE NODE NODE NODE NODE SYS SYS SYS SYS SYS SYS",
            "NODE NODE NODE NODE SYS SYS SYS SYS NODE X PIX NODE NODE NODE SYS SYS SYS SYS SYS SYS",
            "NODE NODE NODE NODE SYS SYS SYS SYS NODE PIX X NODE NODE NODE SYS SYS SYS SYS SYS SYS",
            "NODE PXB NODE NODE SYS SYS SYS SYS NODE NODE NODE X NODE NODE SYS SYS SYS SYS SYS SYS",
            "NODE NODE PXB NODE SYS SYS SYS SYS NODE NODE NODE NODE X NODE SYS SYS SYS SYS SYS SYS",
            "NODE NODE NODE PXB SYS SYS SYS SYS NODE NODE NODE NODE NODE X SYS SYS SYS SYS SYS SYS",
            "SYS SYS SYS SYS PXB NODE NODE NODE SYS SYS SYS SYS SYS SYS X NODE NODE NODE NODE NODE",
            "SYS SYS SYS SYS NODE NODE NODE NODE SYS SYS SYS SYS SYS SYS NODE X PIX NODE NODE NODE",
        ]
    );
    // Two switch levels per GPU: the GPU's nearest switch is the leaf, under the top one.
    let gpu0 = topo.device(pci("0000:1b:00.0")).unwrap();
    assert_eq!(topo.switch_of(gpu0), Some(pci("0000:19:00.0")));
    assert_eq!(gpu0.numa_node, Some(0));
    assert_eq!(gpu0.local_cpulist.as_deref(), Some("0-55,112-167"));
    assert_eq!(
        topo.device(pci("0000:16:00.0")).unwrap().kind,
        DeviceKind::Bridge(BridgeRole::SwitchUpstream)
    );
    assert_eq!(
        topo.device(pci("0000:17:01.0")).unwrap().kind,
        DeviceKind::Bridge(BridgeRole::SwitchDownstream)
    );
    assert_eq!(
        topo.device(pci("0000:15:01.0")).unwrap().kind,
        DeviceKind::Bridge(BridgeRole::RootPort)
    );
    // InfiniBand compute ports: 400 Gb/s, no IP addresses in the GID table.
    let mlx5_0 = &topo.rdma[0];
    assert_eq!(mlx5_0.pci, Some(pci("0000:18:00.0")));
    assert_eq!(mlx5_0.ports[0].rate_gbps, Some(400.0));
    assert!(mlx5_0.ports[0].addrs.is_empty());
    assert_eq!(mlx5_0.ports[0].netdev.as_deref(), Some("ibp24s0"));
}

#[test]
fn no_switch_server_matches_published_matrix() {
    let m = fixtures::machines::asus_no_switch();
    let topo = Topology::read(m.root()).unwrap();
    let labels = [
        "GPU0", "GPU1", "GPU2", "GPU3", "NIC0", "NIC1", "NIC2", "NIC3",
    ];
    // asus-esc8000a-e12.nvidia-smi-topo.txt, complete.
    assert_eq!(
        rows(&topo, &labels, &labels, &labels),
        [
            "X NODE SYS SYS NODE NODE SYS SYS",
            "NODE X SYS SYS NODE NODE SYS SYS",
            "SYS SYS X NODE SYS SYS NODE NODE",
            "SYS SYS NODE X SYS SYS NODE NODE",
            "NODE NODE SYS SYS X PIX SYS SYS",
            "NODE NODE SYS SYS PIX X SYS SYS",
            "SYS SYS NODE NODE SYS SYS X PIX",
            "SYS SYS NODE NODE SYS SYS PIX X",
        ]
    );
    assert!(topo.gpus().all(|g| topo.switch_of(g).is_none()));
    // NVMe on the carrier boards: two switch levels; drives of one leaf switch are PIX.
    let n: Vec<PciAddr> = topo.nvme.iter().map(|c| c.pci.unwrap()).collect();
    assert_eq!(n.len(), 4);
    assert_eq!(topo.distance(n[0], n[1]), Some(Distance::PIX));
    assert_eq!(topo.distance(n[0], n[2]), Some(Distance::SYS));
    assert_eq!(
        topo.distance(pci("0000:01:00.0"), n[0]),
        Some(Distance::NODE)
    );
    assert_eq!(topo.nvme[0].transport.as_deref(), Some("pcie"));
    assert_eq!(
        topo.switch_of(topo.device(n[0]).unwrap()),
        Some(pci("0000:63:00.0"))
    );
    let gpu = topo.device(pci("0000:41:00.0")).unwrap();
    assert_eq!(gpu.kind, DeviceKind::Gpu);
    assert_eq!(gpu.name.as_deref(), Some("NVIDIA RTX 6000 Ada"));
}

#[test]
fn reference_server_pairs_and_fabrics_controller() {
    let m = fixtures::machines::reference_2gpu();
    let topo = Topology::read(m.root()).unwrap();
    let (g0, g1) = (pci("0000:18:00.0"), pci("0000:9a:00.0"));
    assert_eq!(topo.distance(g0, pci("0000:19:00.1")), Some(Distance::PIX));
    assert_eq!(topo.distance(g0, pci("0000:1a:00.0")), Some(Distance::PIX));
    assert_eq!(topo.distance(g0, pci("0000:9b:00.0")), Some(Distance::SYS));
    assert_eq!(topo.distance(g1, pci("0000:9b:00.1")), Some(Distance::PIX));
    assert_eq!(topo.distance(g0, pci("0000:01:00.0")), Some(Distance::NODE));
    let port = &topo.rdma[1].ports[0];
    assert_eq!(
        port.addrs,
        [
            "10.10.1.1".parse::<std::net::IpAddr>().unwrap(),
            "10.10.1.2".parse().unwrap()
        ]
    );
    assert_eq!(port.netdev.as_deref(), Some("ens1f1np1"));
    assert_eq!(port.gbytes_per_sec(), Some(25.0));
    // The NVMe/RDMA controller goes through mlx5_0 (its host_traddr), PIX to GPU0.
    let fab = &topo.nvme[1];
    assert_eq!(fab.transport.as_deref(), Some("rdma"));
    assert_eq!(fab.traddr.as_deref(), Some("10.10.0.100"));
    assert_eq!(fab.host_traddr.as_deref(), Some("10.10.0.1"));
    assert_eq!(topo.nvme_path_device(fab), Some(pci("0000:19:00.0")));

    let json = fabrik_initiator::topology::to_json(&topo);
    let pairs = json["pairs"].as_array().unwrap();
    let pair = |gpu: u64, name: &str| {
        pairs
            .iter()
            .find(|p| p["gpu"] == gpu && p["name"] == name)
            .unwrap_or_else(|| panic!("no pair GPU{gpu}-{name}"))["distance"]
            .clone()
    };
    assert_eq!(pair(0, "mlx5_3"), "PIX");
    assert_eq!(pair(1, "mlx5_0"), "SYS");
    assert_eq!(pair(0, "nvme1"), "PIX");
    assert_eq!(pair(1, "nvme0"), "SYS");
    let gpu = json["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["pci"] == "0000:9a:00.0")
        .unwrap();
    assert_eq!(gpu["kind"], "gpu");
    assert_eq!(gpu["numa_node"], 1);
    assert_eq!(gpu["switch"], "0000:98:00.0");
}

/// hwloc's real sysfs snapshot of a Supermicro SYS-4029GP-TRT2: 2 PEX9797 switches, each with
/// one ConnectX-4 and four NEC Vector Engines.
#[test]
fn real_sysfs_snapshot_supermicro_4029gp() {
    let tmp = tempfile::tempdir().unwrap();
    let tarball = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/topology/supermicro-sys-4029gp-trt2-nec-ve.sysfs.tar.bz2");
    let status = Command::new("tar")
        .arg("-xjf")
        .arg(&tarball)
        .arg("-C")
        .arg(tmp.path())
        .status()
        .expect("running tar (needs tar and bzip2)");
    assert!(status.success(), "tar -xjf {} failed", tarball.display());
    let topo = Topology::read(&tmp.path().join("32intel64-2p8co2t+8ve/sys")).unwrap();
    let accel: Vec<String> = topo.gpus().map(|d| d.addr.to_string()).collect();
    assert_eq!(
        accel,
        [
            "0000:1b:00.0",
            "0000:1c:00.0",
            "0000:1d:00.0",
            "0000:1e:00.0",
            "0000:3d:00.0",
            "0000:3f:00.0",
            "0000:40:00.0",
            "0000:41:00.0"
        ]
    );
    assert!(topo.gpus().all(|d| d.kind == DeviceKind::Accelerator));
    for (sw, hca, ves) in [
        (
            "0000:18:00.0",
            "0000:1a:00.0",
            ["0000:1b:00.0", "0000:1e:00.0"],
        ),
        (
            "0000:3b:00.0",
            "0000:3e:00.0",
            ["0000:3d:00.0", "0000:41:00.0"],
        ),
    ] {
        let s = topo.device(pci(sw)).unwrap();
        assert_eq!(s.kind, DeviceKind::Bridge(BridgeRole::SwitchUpstream));
        assert_eq!((s.vendor, s.device), (0x10b5, 0x9797));
        assert_eq!(topo.device(pci(hca)).unwrap().kind, DeviceKind::Nic);
        for ve in ves {
            assert_eq!(topo.distance(pci(ve), pci(hca)), Some(Distance::PIX));
            assert_eq!(topo.switch_of(topo.device(pci(ve)).unwrap()), Some(pci(sw)));
        }
    }
    // The two switches hang off different host bridges of socket 0.
    assert_eq!(
        topo.distance(pci("0000:1b:00.0"), pci("0000:3e:00.0")),
        Some(Distance::NODE)
    );
    let hca = topo.device(pci("0000:1a:00.0")).unwrap();
    assert_eq!(
        hca.link.gbytes_per_sec().map(|g| (g * 10.0).round()),
        Some(158.0)
    );
    assert_eq!(hca.driver.as_deref(), Some("mlx5_core"));
    // hwloc kept no class/infiniband: said, not failed.
    assert!(topo.rdma.is_empty());
    assert!(
        topo.notes
            .iter()
            .any(|n| n.starts_with("no RDMA NIC found")),
        "{:?}",
        topo.notes
    );

    // With the two HCAs' RDMA devices added (EDR, 100 Gb/s) as mlx5_ib would show them, the
    // plan gives each accelerator the HCA of its own switch, shared four ways.
    let sys = tmp.path().join("32intel64-2p8co2t+8ve/sys");
    for (name, bdf) in [("mlx5_0", "0000:1a:00.0"), ("mlx5_1", "0000:3e:00.0")] {
        let dev = std::fs::canonicalize(sys.join("bus/pci/devices").join(bdf)).unwrap();
        let ib = dev.join("infiniband").join(name);
        std::fs::create_dir_all(ib.join("ports/1")).unwrap();
        std::os::unix::fs::symlink(format!("../../../{bdf}"), ib.join("device")).unwrap();
        std::fs::write(ib.join("ports/1/rate"), "100 Gb/sec (4X EDR)\n").unwrap();
        std::fs::write(ib.join("ports/1/state"), "4: ACTIVE\n").unwrap();
        std::fs::create_dir_all(sys.join("class/infiniband")).unwrap();
        std::os::unix::fs::symlink(&ib, sys.join("class/infiniband").join(name)).unwrap();
    }
    let topo = Topology::read(&sys).unwrap();
    let plan =
        fabrik_initiator::placement::plan(&topo, &Default::default(), &Default::default()).unwrap();
    let pairs: Vec<String> = plan
        .gpus
        .iter()
        .map(|g| {
            let p = &g.ports[0];
            format!(
                "{} {}/{} {} shared with {:?}",
                g.pci, p.rdma, p.port, p.distance, p.shared_with
            )
        })
        .collect();
    assert_eq!(
        pairs,
        [
            "0000:1b:00.0 mlx5_0/1 PIX shared with [1, 2, 3]",
            "0000:1c:00.0 mlx5_0/1 PIX shared with [0, 2, 3]",
            "0000:1d:00.0 mlx5_0/1 PIX shared with [0, 1, 3]",
            "0000:1e:00.0 mlx5_0/1 PIX shared with [0, 1, 2]",
            "0000:3d:00.0 mlx5_1/1 PIX shared with [5, 6, 7]",
            "0000:3f:00.0 mlx5_1/1 PIX shared with [4, 6, 7]",
            "0000:40:00.0 mlx5_1/1 PIX shared with [4, 5, 7]",
            "0000:41:00.0 mlx5_1/1 PIX shared with [4, 5, 6]",
        ]
    );
    for g in &plan.gpus {
        assert!(g.warnings.is_empty(), "{:?}", g.warnings);
        assert_eq!(g.ports.len(), 1);
        assert!(
            (g.ceiling.gbytes_per_sec - 12.5 / 4.0).abs() < 1e-9,
            "{:?}",
            g.ceiling
        );
    }
}

/// This machine's own /sys (a build box: no GPU, no RDMA NIC) reads without error and says so.
#[test]
fn this_machine_reads_and_says_what_is_missing() {
    let topo = Topology::read(Path::new("/sys")).unwrap();
    if topo.gpus().next().is_none() {
        assert!(
            topo.notes.iter().any(|n| n.starts_with("no GPU")),
            "{:?}",
            topo.notes
        );
    }
    if topo.rdma.is_empty() {
        assert!(
            topo.notes.iter().any(|n| n.starts_with("no RDMA NIC")),
            "{:?}",
            topo.notes
        );
    }
    // Matrix and tree render whatever is there.
    let _ = fabrik_initiator::topology::render_matrix(&topo);
    let _ = fabrik_initiator::topology::render_tree(&topo);
}

#[test]
fn a_directory_that_is_not_sysfs_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let err = Topology::read(tmp.path()).unwrap_err().to_string();
    assert!(err.contains("is not a sysfs tree"), "{err}");
}

/// Damaged or odd attributes are skipped or read as unknown, never a panic, and never a
/// device of the wrong kind.
#[test]
fn garbage_attributes_are_tolerated() {
    let m = fixtures::machines::far_socket_nic();
    let gpu0 = m.root().join("bus/pci/devices/0000:18:00.0");
    let nic = m.root().join("bus/pci/devices/0000:98:00.0");
    std::fs::write(gpu0.join("numa_node"), "-1\n").unwrap();
    std::fs::write(gpu0.join("max_link_speed"), "Unknown\n").unwrap();
    std::fs::write(gpu0.join("current_link_speed"), "NaN GT/s\n").unwrap();
    std::fs::remove_file(gpu0.join("current_link_width")).unwrap();
    std::fs::write(nic.join("class"), "not hex\n").unwrap();
    std::fs::write(
        m.root().join("class/infiniband/mlx5_1/ports/1/rate"),
        "inf Gb/sec\n",
    )
    .unwrap();
    std::fs::write(
        m.root().join("class/infiniband/mlx5_1/ports/1/gids/1"),
        "zzzz\n",
    )
    .unwrap();
    std::os::unix::fs::symlink("nowhere", m.root().join("bus/pci/devices/junk")).unwrap();
    let topo = Topology::read(m.root()).unwrap();
    let gpu = topo.device(pci("0000:18:00.0")).unwrap();
    assert_eq!(gpu.numa_node, None);
    assert_eq!(gpu.link.gbytes_per_sec(), None);
    assert!(topo.device(pci("0000:98:00.0")).is_none());
    assert!(
        topo.notes
            .iter()
            .any(|n| n.contains("0000:98:00.0") && n.contains("class")),
        "{:?}",
        topo.notes
    );
    assert!(
        topo.notes
            .iter()
            .any(|n| n.starts_with("skipped PCI device junk")),
        "{:?}",
        topo.notes
    );
    assert!(
        topo.notes
            .iter()
            .any(|n| n.contains("mlx5_0 points at 0000:98:00.0")),
        "{:?}",
        topo.notes
    );
    let port = &topo.rdma[1].ports[0];
    assert_eq!(port.rate_gbps, None);
    assert_eq!(
        port.addrs,
        ["10.30.1.1".parse::<std::net::IpAddr>().unwrap()]
    );
    // Unknown NUMA node against a known one: not the same node.
    assert_eq!(
        topo.distance(pci("0000:18:00.0"), pci("0000:98:00.1")),
        Some(Distance::SYS)
    );
    let plan =
        fabrik_initiator::placement::plan(&topo, &Default::default(), &Default::default()).unwrap();
    assert_eq!(plan.gpus.len(), 2);
}

/// The NVML hook: names and memory from outside sysfs land on the GPUs only.
#[test]
fn gpu_details_from_another_source() {
    let m = fixtures::machines::reference_2gpu();
    let mut topo = Topology::read(m.root()).unwrap();
    topo.enrich_gpus(|addr| {
        (addr == pci("0000:9a:00.0")).then(|| fabrik_initiator::topology::GpuInfo {
            name: Some("NVIDIA H100 80GB HBM3".into()),
            memory_bytes: Some(80 << 30),
        })
    });
    let g1 = topo.device(pci("0000:9a:00.0")).unwrap();
    assert_eq!(g1.name.as_deref(), Some("NVIDIA H100 80GB HBM3"));
    assert_eq!(g1.memory_bytes, Some(80 << 30));
    let g0 = topo.device(pci("0000:18:00.0")).unwrap();
    assert_eq!(g0.name.as_deref(), Some("NVIDIA H100 PCIe"));
    assert_eq!(g0.memory_bytes, None);
}
