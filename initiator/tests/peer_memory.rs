//! Peer-memory I/O (the zero-copy NVMe/RDMA path) as far as it runs without an RDMA device:
//! NVMe/TCP queues refuse it with a clear error, transfers outside the memory are refused
//! before anything is sent, and the connection stays usable. The data path itself runs in the
//! Soft-RoCE guest (tests/interop).

use std::sync::Arc;
use std::time::Duration;

use fabrik_initiator::host::session::{RecoveryPolicy, Session};
use fabrik_initiator::transport::peer::{HostMemory, PeerMemory};
use fabrik_initiator::{ConnectOptions, Controller, HostError};
use fabrik_target::backend::BackendKind;
use fabrik_target::config::Config;
use fabrik_target::Target;

async fn start_target(dir: &std::path::Path) -> (Target, ConnectOptions) {
    let mut cfg = Config::default_jbof(dir.to_path_buf());
    cfg.listen = vec!["127.0.0.1:0".parse().unwrap()];
    cfg.box_name = "peerbox".into();
    cfg.drives = 1;
    cfg.drive_size = 1 << 24;
    cfg.backend = BackendKind::Ram;
    let target = Target::start(cfg).await.unwrap();
    let opts = ConnectOptions {
        command_timeout: Duration::from_secs(10),
        ..ConnectOptions::new(target.listen_addrs()[0], &target.subsystem_nqns()[0])
    };
    (target, opts)
}

fn host_memory(len: usize) -> Arc<dyn PeerMemory> {
    Arc::new(HostMemory::new(len).unwrap())
}

fn assert_tcp_refusal<T: std::fmt::Debug>(r: Result<T, HostError>) {
    match r {
        Err(HostError::PeerMemory { nic, reason }) => {
            assert_eq!(nic, "(NVMe/TCP)");
            assert!(reason.contains("NVMe/RDMA"), "{reason}");
        }
        other => panic!("expected the NVMe/TCP peer-memory refusal, got {other:?}"),
    }
}

fn assert_invalid<T: std::fmt::Debug>(r: Result<T, HostError>, words: &str) {
    match r {
        Err(HostError::Invalid(why)) => assert!(why.contains(words), "{why}"),
        other => panic!("expected an invalid-request error about {words:?}, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_queues_refuse_peer_memory_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let (target, opts) = start_target(dir.path()).await;
    let ctrl = Controller::connect(opts).await.unwrap();
    let mem = host_memory(64 << 10);
    {
        let q = ctrl.io_queue(0).unwrap();
        assert_eq!(q.nic(), None);
        assert_tcp_refusal(q.register_peer(&mem).await);
        assert_tcp_refusal(q.read_peer(1, 0, 8, &mem, 0).await);
        assert_tcp_refusal(q.write_peer(1, 0, 8, &mem, 4096, true).await);
        let err = q.read_peer(1, 0, 8, &mem, 0).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "NIC (NVMe/TCP) cannot register GPU memory: NVMe/TCP carries data in the byte \
             stream, not by RDMA: peer memory needs an NVMe/RDMA connection"
        );
        // The refusal left the queue as it was.
        assert_eq!(ctrl.read(1, 0, 8).await.unwrap().len(), 8 * 4096);
    }
    ctrl.shutdown().await.unwrap();
    target.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_outside_the_memory_are_refused_before_sending() {
    let dir = tempfile::tempdir().unwrap();
    let (target, opts) = start_target(dir.path()).await;
    let ctrl = Controller::connect(opts).await.unwrap();
    let mem = host_memory(16 << 10); // four 4 KiB blocks
    {
        let q = ctrl.io_queue(0).unwrap();
        assert_invalid(q.read_peer(1, 0, 5, &mem, 0).await, "do not fit");
        assert_invalid(
            q.write_peer(1, 0, 1, &mem, 16 << 10, false).await,
            "do not fit",
        );
        assert_invalid(
            q.read_peer(1, 0, 2, &mem, usize::MAX - 10).await,
            "do not fit",
        );
        assert_invalid(q.read_peer(1, 0, 0, &mem, 0).await, "0 blocks");
        let empty = host_memory(0);
        assert_invalid(q.write_peer(1, 0, 1, &empty, 0, false).await, "do not fit");
        // In bounds, the transport's refusal comes next.
        assert_tcp_refusal(q.read_peer(1, 0, 4, &mem, 0).await);
    }
    ctrl.shutdown().await.unwrap();
    target.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_report_the_refusal_without_failing_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let (target, opts) = start_target(dir.path()).await;
    let session = Session::connect(vec![opts], RecoveryPolicy::default())
        .await
        .unwrap();
    let mem = host_memory(64 << 10);
    assert_tcp_refusal(session.register_peer(0, &mem).await);
    assert_tcp_refusal(session.read_peer(0, 1, 0, 8, &mem, 0).await);
    assert_tcp_refusal(session.write_peer(0, 1, 0, 8, &mem, 0, false).await);
    assert_invalid(session.read_peer(0, 1, 0, 32, &mem, 0).await, "do not fit");
    // Not a path failure: the path stays up and serves I/O.
    assert_eq!(session.live_paths(), 1);
    assert_eq!(session.read(0, 1, 0, 1).await.unwrap().len(), 4096);
    session.shutdown().await;
    target.shutdown().await;
}

/// Peer I/O over NVMe/RDMA for real, with host memory registered by pointer: runs where
/// `FABRIK_TEST_RDMA_ADDR` names a local address with an RDMA device (the Soft-RoCE guest:
/// 10.99.0.1), else passes without doing anything.
#[cfg(feature = "rdma")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rdma_peer_io_moves_data_without_the_slot_buffer() {
    use fabrik_initiator::transport::peer::{unique_id, Registration};
    use fabrik_initiator::Transport;

    let Ok(ip) = std::env::var("FABRIK_TEST_RDMA_ADDR") else {
        eprintln!("FABRIK_TEST_RDMA_ADDR unset: no RDMA device to test with");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = Config::default_jbof(dir.path().to_path_buf());
    cfg.listen = vec![];
    cfg.rdma_listen = vec![format!("{ip}:4420").parse().unwrap()];
    cfg.box_name = "peerbox".into();
    cfg.drives = 1;
    cfg.drive_size = 1 << 26;
    cfg.backend = BackendKind::Ram;
    let target = Target::start(cfg)
        .await
        .expect("an NVMe/RDMA target (build with fabrik-target/rdma)");
    let opts = ConnectOptions {
        command_timeout: Duration::from_secs(10),
        transport: Transport::Rdma,
        ..ConnectOptions::new(target.rdma_listen_addrs()[0], &target.subsystem_nqns()[0])
    };
    let ctrl = Controller::connect(opts.clone()).await.unwrap();
    const MIB: usize = 1 << 20;
    let pattern: Vec<u8> = (0..3 * MIB).map(|i| (i * 7 + i / 4096) as u8).collect();
    {
        let q = ctrl.io_queue(0).unwrap();
        let nic = q.nic().unwrap().to_string();
        assert!(nic.starts_with("rxe"), "{nic}");

        // 3 MiB from peer memory at an offset: three 1 MiB commands (MDTS), each far beyond
        // the 128 KiB slot buffer.
        let src = Arc::new(HostMemory::new(4 * MIB).unwrap());
        src.write_at(4096, &pattern).unwrap();
        let src_dyn: Arc<dyn PeerMemory> = src.clone();
        assert_eq!(
            q.register_peer(&src_dyn).await.unwrap(),
            Registration::Pointer
        );
        q.write_peer(1, 16, 768, &src_dyn, 4096, false)
            .await
            .unwrap();
        let copied = ctrl.read(1, 16, 768).await.unwrap();
        assert!(
            copied[..] == pattern[..],
            "written through peer memory, read by copy"
        );

        // And back into other peer memory (registered on first use), at another offset.
        let dst = Arc::new(HostMemory::new(4 * MIB).unwrap());
        let dst_dyn: Arc<dyn PeerMemory> = dst.clone();
        q.read_peer(1, 16, 768, &dst_dyn, 8192).await.unwrap();
        let mut got = vec![0u8; 3 * MIB];
        dst.read_at(8192, &mut got).unwrap();
        assert!(got == pattern, "read into peer memory");
        let mut before = [0xffu8; 8192];
        dst.read_at(0, &mut before).unwrap();
        assert!(
            before.iter().all(|&b| b == 0),
            "nothing written before the offset"
        );

        // Memory dropped and new memory registered: the queue carries on.
        drop((dst, dst_dyn));
        let again: Arc<dyn PeerMemory> = Arc::new(HostMemory::new(MIB).unwrap());
        q.read_peer(1, 16, 256, &again, 0).await.unwrap();

        // A second handle to the same allocation shares the registration, which outlives the
        // first handle; another allocation claiming the same id is refused.
        let alias: Arc<dyn PeerMemory> = Arc::new(Handle::of(&src));
        assert_eq!(
            q.register_peer(&alias).await.unwrap(),
            Registration::Pointer
        );
        drop(src_dyn);
        q.write_peer(1, 2048, 16, &alias, 4096, false)
            .await
            .unwrap();
        let impostor: Arc<dyn PeerMemory> = Arc::new(Handle {
            id: src.id(),
            ..Handle::of(&Arc::new(HostMemory::new(MIB).unwrap()))
        });
        match q.register_peer(&impostor).await {
            Err(HostError::Invalid(why)) => assert!(why.contains("two live allocations"), "{why}"),
            other => panic!("expected an id clash, got {other:?}"),
        }
        assert!(ctrl.read(1, 2048, 16).await.unwrap()[..] == pattern[..16 * 4096]);

        // Memory the NIC cannot take: the error says what was tried, and only that command fails.
        for (dmabuf, words) in [
            (None, "dma-buf: this memory has no dma-buf export"),
            (Some("no exporter"), "dma-buf: export failed: no exporter"),
        ] {
            let mem = Arc::new(HostMemory::new(MIB).unwrap());
            let odd: Arc<dyn PeerMemory> = Arc::new(Handle {
                id: unique_id(),
                dmabuf,
                pointer: false,
                ..Handle::of(&mem)
            });
            match q.read_peer(1, 0, 8, &odd, 0).await {
                Err(HostError::PeerMemory { nic: n, reason }) => {
                    assert_eq!(n, nic);
                    assert!(reason.contains(words), "{reason}");
                    assert!(reason.contains("; pointer: "), "{reason}");
                }
                other => panic!("expected a peer-memory error, got {other:?}"),
            }
        }
        assert_eq!(ctrl.read(1, 16, 8).await.unwrap()[..], pattern[..8 * 4096]);
    }
    ctrl.shutdown().await.unwrap();

    let session = Session::connect(vec![opts], RecoveryPolicy::default())
        .await
        .unwrap();
    let mem: Arc<dyn PeerMemory> = Arc::new(HostMemory::new(MIB).unwrap());
    let (how, nic) = session.register_peer(0, &mem).await.unwrap();
    assert_eq!(how, Registration::Pointer);
    assert!(nic.starts_with("rxe"), "{nic}");
    session.read_peer(0, 1, 16, 256, &mem, 0).await.unwrap();
    session
        .write_peer(0, 1, 1024, 256, &mem, 0, true)
        .await
        .unwrap();
    let back = session.read(0, 1, 1024, 256).await.unwrap();
    assert!(back[..] == pattern[..MIB]);
    session.shutdown().await;
    target.shutdown().await;
}

/// A handle to host memory that may pose as other memory: another id, a failed dma-buf export,
/// no registration by pointer (as GPU memory without nvidia-peermem).
#[cfg(feature = "rdma")]
struct Handle {
    mem: Arc<HostMemory>,
    id: u64,
    dmabuf: Option<&'static str>,
    pointer: bool,
}

#[cfg(feature = "rdma")]
impl Handle {
    /// Another handle to `mem`, as it is.
    fn of(mem: &Arc<HostMemory>) -> Handle {
        Handle {
            mem: mem.clone(),
            id: mem.id(),
            dmabuf: None,
            pointer: true,
        }
    }
}

#[cfg(feature = "rdma")]
impl PeerMemory for Handle {
    fn id(&self) -> u64 {
        self.id
    }
    fn addr(&self) -> u64 {
        self.mem.addr()
    }
    fn len(&self) -> usize {
        self.mem.len()
    }
    fn export_dmabuf(&self) -> Option<Result<std::os::fd::OwnedFd, String>> {
        self.dmabuf.map(|why| Err(why.to_string()))
    }
    fn pointer_registrable(&self) -> bool {
        self.pointer
    }
}
