//! Helpers shared by the integration tests: an in-process fabrikd on a free loopback port,
//! connect options, random data, and a background host that keeps doing verified I/O.
#![allow(dead_code)] // each test binary uses its own subset

pub mod api;
pub mod raw;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use fabrik_initiator::{ConnectOptions, Controller, HostIdentity};
use fabrik_target::backend::BackendKind;
use fabrik_target::config::Config;
use fabrik_target::Target;

/// A target configuration for tests: `drives` drives of `drive_size` bytes, on a free port.
pub fn config(data_dir: &Path, backend: BackendKind, drives: u32, drive_size: u64) -> Config {
    let mut cfg = Config::default_jbof(data_dir.to_path_buf());
    cfg.listen = vec!["127.0.0.1:0".parse().unwrap()];
    cfg.box_name = "testbox".into();
    cfg.drives = drives;
    cfg.drive_size = drive_size;
    cfg.backend = backend;
    cfg
}

pub async fn start(cfg: Config) -> Target {
    Target::start(cfg).await.expect("target starts")
}

pub fn addr(target: &Target) -> SocketAddr {
    target.listen_addrs()[0]
}

/// Subsystem NQNs in drive order.
pub fn nqns(target: &Target) -> Vec<String> {
    let mut nqns = target.subsystem_nqns();
    nqns.sort();
    nqns
}

/// Options with a short command timeout, so a hung target fails a test quickly.
pub fn options(addr: SocketAddr, subnqn: &str) -> ConnectOptions {
    ConnectOptions {
        command_timeout: Duration::from_secs(10),
        ..ConnectOptions::new(addr, subnqn)
    }
}

/// Deterministic pseudo-random bytes (xorshift64*), different for every seed.
pub fn random_data(len: usize, seed: u64) -> Bytes {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        out.extend_from_slice(&state.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(len);
    Bytes::from(out)
}

/// Panics with the first differing byte rather than printing megabytes.
#[track_caller]
pub fn assert_same_data(got: &[u8], expected: &[u8], what: &str) {
    assert_eq!(got.len(), expected.len(), "{what}: length");
    if let Some(i) = got.iter().zip(expected).position(|(a, b)| a != b) {
        panic!(
            "{what}: data differs at byte {i} (got {:#04x}, expected {:#04x})",
            got[i], expected[i]
        );
    }
}

/// Another host doing write / read / verify in a loop on its own connections, to show that
/// whatever a test does to the target leaves other hosts unharmed.
pub struct BackgroundIo {
    stop: Arc<AtomicBool>,
    rounds: Arc<AtomicU64>,
    error: Arc<Mutex<Option<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl BackgroundIo {
    /// Connects to `subnqn` (its own host NQN) and starts looping; returns after the first
    /// verified round.
    pub async fn start(addr: SocketAddr, subnqn: &str) -> BackgroundIo {
        let host = HostIdentity::random();
        let ctrl = Controller::connect(options(addr, subnqn).with_host(&host))
            .await
            .expect("background host connects");
        let stop = Arc::new(AtomicBool::new(false));
        let rounds = Arc::new(AtomicU64::new(0));
        let error = Arc::new(Mutex::new(None));
        let task = tokio::spawn({
            let (stop, rounds, error) = (stop.clone(), rounds.clone(), error.clone());
            async move {
                let mut round = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    // 16 KiB in-capsule and 128 KiB through R2T, alternately.
                    let blocks = if round.is_multiple_of(2) { 4 } else { 32 };
                    let slba = (round % 64) * 32;
                    let data = random_data(blocks as usize * 4096, round ^ 0xB6);
                    let result = async {
                        ctrl.write(1, slba, data.clone(), false).await?;
                        let read = ctrl.read(1, slba, blocks).await?;
                        Ok::<_, fabrik_initiator::HostError>(read)
                    }
                    .await;
                    match result {
                        Ok(read) if read == data => {}
                        Ok(_) => {
                            *error.lock().unwrap() = Some(format!("round {round}: data mismatch"));
                            return;
                        }
                        Err(e) => {
                            *error.lock().unwrap() = Some(format!("round {round}: {e}"));
                            return;
                        }
                    }
                    round += 1;
                    rounds.store(round, Ordering::Relaxed);
                }
                if let Err(e) = ctrl.shutdown().await {
                    *error.lock().unwrap() = Some(format!("shutdown: {e}"));
                }
            }
        });
        let background = BackgroundIo {
            stop,
            rounds,
            error,
            task,
        };
        background.wait_rounds(1).await;
        background
    }

    pub fn rounds(&self) -> u64 {
        self.rounds.load(Ordering::Relaxed)
    }

    /// Waits until `more` further rounds have completed (fails on error or after 20 s).
    pub async fn wait_rounds(&self, more: u64) {
        let goal = self.rounds() + more;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while self.rounds() < goal {
            if let Some(e) = self.error.lock().unwrap().clone() {
                panic!("background I/O failed: {e}");
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "background I/O made no progress"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Stops the loop; asserts it kept going after `since` rounds and saw no error.
    pub async fn finish(self, since: u64) {
        self.wait_rounds(3).await;
        self.stop.store(true, Ordering::Relaxed);
        let rounds = self.rounds.clone();
        self.task.await.expect("background task");
        if let Some(e) = self.error.lock().unwrap().clone() {
            panic!("background I/O failed: {e}");
        }
        assert!(
            rounds.load(Ordering::Relaxed) >= since + 3,
            "background I/O progressed"
        );
    }
}
