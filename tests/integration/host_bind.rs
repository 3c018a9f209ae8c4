//! Where the userspace host's connections leave from (nvme-cli's `--host-traddr` and
//! `--host-iface`): the target sees the bound address as the host's, on every queue, and a
//! binding that cannot be made is a clear error.

mod common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use common::*;
use fabrik_initiator::Controller;
use fabrik_target::backend::BackendKind;

const HOST_ADDR: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

/// TCP connections of this process from `local` to `remote` (IPv4), from /proc/net/tcp.
fn connections(local: Ipv4Addr, remote: SocketAddr) -> usize {
    let hex = |ip: Ipv4Addr| format!("{:08X}", u32::from_ne_bytes(ip.octets()));
    let IpAddr::V4(remote_ip) = remote.ip() else {
        panic!("IPv4 target expected")
    };
    let remote = format!("{}:{:04X}", hex(remote_ip), remote.port());
    std::fs::read_to_string("/proc/net/tcp")
        .unwrap()
        .lines()
        .skip(1)
        .filter(|line| {
            let mut fields = line.split_whitespace().skip(1);
            let (l, r, state) = (fields.next(), fields.next(), fields.next());
            // 01: ESTABLISHED.
            l.is_some_and(|l| l.starts_with(&format!("{}:", hex(local))))
                && r == Some(remote.as_str())
                && state == Some("01")
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_queue_connects_from_the_host_address() {
    let dir = tempfile::tempdir().unwrap();
    let target = start(config(dir.path(), BackendKind::Ram, 1, 16 << 20)).await;
    let nqn = &nqns(&target)[0];
    let mut opts = options(addr(&target), nqn);
    opts.io_queues = 3;
    opts.host_traddr = Some(HOST_ADDR);
    let ctrl = Controller::connect(opts.clone()).await.unwrap();

    // The target sees the bound address as the host's.
    let seen: Vec<_> = target
        .state()
        .controllers()
        .into_iter()
        .filter(|c| c.hostnqn.as_ref() == Some(&opts.hostnqn))
        .map(|c| c.port.peer_addr.ip())
        .collect();
    assert_eq!(seen, vec![HOST_ADDR]);
    // The admin queue and every I/O queue leave from it.
    let IpAddr::V4(host_v4) = HOST_ADDR else {
        unreachable!()
    };
    assert_eq!(ctrl.io_queue_count(), 3);
    assert_eq!(connections(host_v4, addr(&target)), 4);

    // And I/O works over them.
    let data = random_data(8 * 4096, 7);
    ctrl.write(1, 16, data.clone(), false).await.unwrap();
    assert_eq!(ctrl.read(1, 16, 8).await.unwrap(), data);
    ctrl.shutdown().await.unwrap();
    target.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binding_that_cannot_be_made_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let target = start(config(dir.path(), BackendKind::Ram, 1, 16 << 20)).await;
    let nqn = &nqns(&target)[0];

    // An address this host does not have (TEST-NET-1).
    let mut opts = options(addr(&target), nqn);
    opts.host_traddr = Some("192.0.2.1".parse().unwrap());
    let err = Controller::connect(opts).await.err().expect("refused");
    let msg = err.to_string();
    assert!(
        msg.contains("host address 192.0.2.1") && msg.contains("not an address of this host"),
        "{msg}"
    );

    // An address of the other IP family.
    let mut opts = options(addr(&target), nqn);
    opts.host_traddr = Some("::1".parse().unwrap());
    let msg = Controller::connect(opts)
        .await
        .err()
        .expect("refused")
        .to_string();
    assert!(msg.contains("different IP families"), "{msg}");

    // An interface that does not exist: refused by name (or for want of CAP_NET_RAW).
    let mut opts = options(addr(&target), nqn);
    opts.host_iface = Some("fabrik-none0".into());
    let msg = Controller::connect(opts)
        .await
        .err()
        .expect("refused")
        .to_string();
    assert!(
        msg.contains("interface \"fabrik-none0\"")
            && (msg.contains("no such interface") || msg.contains("CAP_NET_RAW")),
        "{msg}"
    );

    // The loopback interface: bound when allowed, else refused saying why.
    let mut opts = options(addr(&target), nqn);
    opts.host_iface = Some("lo".into());
    match Controller::connect(opts.clone()).await {
        Ok(ctrl) => {
            let data = random_data(4096, 3);
            ctrl.write(1, 0, data.clone(), false).await.unwrap();
            assert_eq!(ctrl.read(1, 0, 1).await.unwrap(), data);
            ctrl.shutdown().await.unwrap();
        }
        Err(err) => assert!(err.to_string().contains("CAP_NET_RAW"), "{err}"),
    }
    target.shutdown().await;
}
