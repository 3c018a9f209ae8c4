//! What Identify and the discovery log say about the transport comes from the port's caps,
//! whatever transport the port names.

use std::net::SocketAddr;
use std::sync::Arc;

use fabrik_proto::fabrics::discovery::{decode_discovery_log, Tsas};
use fabrik_proto::fabrics::nqn::Nqn;
use fabrik_proto::nvme::identify::sgls;

use super::super::{Controller, ControllerKind, PortInfo, Subsystem, TargetState};
use crate::model::{Port, Transport, TransportCaps};

const RDMA_LIKE: TransportCaps = TransportCaps {
    keyed_sgls: true,
    in_capsule_data: 8192,
    tsas: Tsas::Rdma {
        qptype: 1,
        prtype: 4,
        cms: 1,
        pkey: 0xffff,
    },
    treq: 0,
};

const BARE: TransportCaps = TransportCaps {
    keyed_sgls: false,
    in_capsule_data: 0,
    tsas: Tsas::Tcp { sectype: 0 },
    treq: 0,
};

fn discovery_controller(target: Arc<TargetState>, caps: TransportCaps) -> Controller {
    let local: SocketAddr = "10.0.0.1:8009".parse().unwrap();
    let port = PortInfo {
        port_id: 1,
        // A transport that would say otherwise: only the caps may count.
        transport: Transport::Tcp,
        caps,
        local_addr: local,
        peer_addr: "10.0.0.2:50000".parse().unwrap(),
    };
    let kind = ControllerKind::Discovery;
    Controller::new(1, kind, None, [0; 16], port, target, 0)
}

#[test]
fn identify_sgls_and_ioccsz_follow_the_port_caps() {
    let target = Arc::new(TargetState::new("box".into()));
    let id = discovery_controller(target.clone(), RDMA_LIKE).identify_controller();
    assert_eq!(id.sgls, sgls::SUPPORTED | sgls::KEYED | sgls::OFFSET);
    assert_eq!(id.ioccsz, (64 + 8192) / 16);
    let id = discovery_controller(target, BARE).identify_controller();
    assert_eq!(id.sgls, sgls::SUPPORTED);
    assert_eq!(id.ioccsz, 64 / 16);
}

#[tokio::test]
async fn discovery_entries_follow_each_port_caps() {
    let target = Arc::new(TargetState::new("box".into()));
    let nqn = Nqn::new("nqn.2024-01.io.fabrik:box:drive-00").unwrap();
    let sub = Subsystem::new(nqn, "SN".into(), "MODEL".into(), None);
    target.add_subsystem(Arc::new(sub));
    // Not what the listeners fill in today: the entries must take them from the caps.
    let tcp_tsas = Tsas::Tcp { sectype: 2 };
    let ports = [
        (
            1,
            Transport::Tcp,
            TransportCaps {
                tsas: tcp_tsas,
                treq: 1,
                ..BARE
            },
        ),
        (2, Transport::Rdma, RDMA_LIKE),
    ];
    for (id, transport, caps) in ports {
        target.add_port(Port {
            id,
            transport,
            addr: SocketAddr::new("10.0.0.1".parse().unwrap(), 4419 + id),
            caps,
        });
    }
    let page = discovery_controller(target, BARE)
        .discovery_log_page()
        .await;
    let (_, entries) = decode_discovery_log(&page).unwrap();
    let seen: Vec<(u16, u8, Tsas, u8)> = entries
        .iter()
        .map(|e| (e.portid, e.trtype, e.tsas, e.treq))
        .collect();
    assert_eq!(
        seen,
        [
            (1, Transport::Tcp.trtype(), tcp_tsas, 1),
            (2, Transport::Rdma.trtype(), RDMA_LIKE.tsas, 0),
        ]
    );
}
