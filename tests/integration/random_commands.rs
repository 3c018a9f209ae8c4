//! Random commands, well framed but with arbitrary opcodes and fields, on the admin queue and
//! on I/O queues: every one gets a completion (whatever its status), the connection survives,
//! and another host's verified I/O carries on. Complements the fuzzed decoders by exercising
//! the controller logic behind them.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use fabrik_initiator::proto::fabrics::fctype;
use fabrik_initiator::proto::nvme::admin::{cns, AdminCommand};
use fabrik_initiator::proto::nvme::features::fid;
use fabrik_initiator::proto::nvme::io::{DsmRange, IoCommand, DSM_RANGE_LEN};
use fabrik_initiator::proto::nvme::log::lid;
use fabrik_initiator::proto::nvme::{admin_opcode, io_opcode};
use fabrik_initiator::proto::Sqe;
use fabrik_initiator::{Controller, HostError};
use fabrik_target::backend::BackendKind;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
    /// Mostly small values (the fields' interesting range), sometimes anything.
    fn dword(&mut self) -> u32 {
        match self.below(4) {
            0 => 0,
            1 => self.below(16) as u32,
            2 => self.below(1 << 16) as u32,
            _ => self.next() as u32,
        }
    }
}

/// What a random command carries: nothing, data to the target, or room for data back.
enum Data {
    None,
    Out(Bytes),
    In(usize),
}

/// A well-formed command with sizes that fit, which the controller executes.
fn valid_command(rng: &mut Rng, admin: bool) -> (Sqe, Data) {
    if admin {
        match rng.below(4) {
            0 => {
                let cns = rng.pick(&[
                    cns::NAMESPACE,
                    cns::CONTROLLER,
                    cns::ACTIVE_NS_LIST,
                    cns::NS_ID_DESCRIPTORS,
                ]);
                let nsid = rng.pick(&[0, 1, 2]);
                (
                    AdminCommand::Identify {
                        nsid,
                        cns,
                        cntid: 0,
                        csi: 0,
                    }
                    .to_sqe(0),
                    Data::In(4096),
                )
            }
            1 => {
                let lid = rng.pick(&[
                    lid::ERROR_INFO,
                    lid::SMART,
                    lid::FIRMWARE_SLOT,
                    lid::CHANGED_NS_LIST,
                ]);
                let bytes = rng.pick(&[64u32, 512, 4096]);
                let lpo = rng.pick(&[0u64, 64, 512]);
                let cmd = AdminCommand::GetLogPage {
                    nsid: 0xffff_ffff,
                    lid,
                    lsp: 0,
                    rae: rng.below(2) == 0,
                    numd: bytes / 4 - 1,
                    lpo,
                    csi: 0,
                };
                (cmd.to_sqe(0), Data::In(bytes as usize))
            }
            2 => {
                let fid = rng.pick(&[
                    fid::NUMBER_OF_QUEUES,
                    fid::KEEP_ALIVE_TIMER,
                    fid::ASYNC_EVENT_CONFIG,
                    fid::VOLATILE_WRITE_CACHE,
                    fid::ARBITRATION,
                ]);
                let sel = rng.pick(&[0u8, 1, 3]);
                (
                    AdminCommand::GetFeatures {
                        nsid: 0,
                        fid,
                        sel,
                        cdw11: 0,
                    }
                    .to_sqe(0),
                    Data::None,
                )
            }
            _ => (AdminCommand::KeepAlive.to_sqe(0), Data::None),
        }
    } else {
        let nlb = rng.pick(&[1u32, 2, 8, 32]);
        let slba = rng.below((64 << 20) / 4096 - 32);
        let nsid = 1;
        match rng.below(5) {
            0 => (
                IoCommand::Read {
                    nsid,
                    slba,
                    nlb,
                    fua: false,
                }
                .to_sqe(0),
                Data::In(nlb as usize * 4096),
            ),
            1 => {
                let data = random_data(nlb as usize * 4096, rng.next());
                (
                    IoCommand::Write {
                        nsid,
                        slba,
                        nlb,
                        fua: rng.below(2) == 0,
                    }
                    .to_sqe(0),
                    Data::Out(data),
                )
            }
            2 => (IoCommand::Flush { nsid }.to_sqe(0), Data::None),
            3 => {
                let cmd = IoCommand::WriteZeroes {
                    nsid,
                    slba,
                    nlb,
                    fua: false,
                    deallocate: rng.below(2) == 0,
                };
                (cmd.to_sqe(0), Data::None)
            }
            _ => {
                let range = DsmRange {
                    attributes: 0,
                    nlb,
                    slba,
                };
                let mut buf = vec![0u8; DSM_RANGE_LEN];
                range.encode(&mut buf);
                let cmd = IoCommand::DatasetManagement {
                    nsid,
                    ranges: 1,
                    deallocate: true,
                };
                (cmd.to_sqe(0), Data::Out(Bytes::from(buf)))
            }
        }
    }
}

/// Half well-formed commands (some with one field then scrambled), half arbitrary ones.
fn any_command(rng: &mut Rng, admin: bool) -> (Sqe, Data) {
    match rng.below(4) {
        0 | 1 => valid_command(rng, admin),
        2 => {
            let (mut sqe, data) = valid_command(rng, admin);
            let v = rng.dword();
            match rng.below(7) {
                0 => sqe.nsid = v,
                1 => sqe.cdw10 = v,
                2 => sqe.cdw11 = v,
                3 => sqe.cdw12 = v,
                4 => sqe.cdw13 = v,
                5 => sqe.cdw14 = v,
                _ => sqe.cdw15 = v,
            }
            (sqe, data)
        }
        _ => random_command(rng, admin),
    }
}

fn random_command(rng: &mut Rng, admin: bool) -> (Sqe, Data) {
    // Commands that end the association or never complete by design are left out:
    // Disconnect, Property Set (CC.EN = 0 / SHN), Asynchronous Event Request.
    let opcodes: &[u8] = if admin {
        &[
            admin_opcode::GET_LOG_PAGE,
            admin_opcode::IDENTIFY,
            admin_opcode::ABORT,
            admin_opcode::SET_FEATURES,
            admin_opcode::GET_FEATURES,
            admin_opcode::KEEP_ALIVE,
            admin_opcode::FABRICS,
            admin_opcode::DELETE_IO_SQ,
            admin_opcode::CREATE_IO_CQ,
            0x10,
            0x80,
            0xC1,
        ]
    } else {
        &[
            io_opcode::FLUSH,
            io_opcode::WRITE,
            io_opcode::READ,
            io_opcode::WRITE_ZEROES,
            io_opcode::DATASET_MANAGEMENT,
            io_opcode::FABRICS,
            0x04,
            0x05,
            0x0D,
            0x81,
        ]
    };
    let opcode = rng.pick(opcodes);
    let mut sqe = Sqe {
        opcode,
        nsid: {
            let any = rng.next() as u32;
            rng.pick(&[0, 1, 1, 1, 2, 0xffff_ffff, any])
        },
        cdw10: rng.dword(),
        cdw11: rng.dword(),
        cdw12: rng.dword(),
        cdw13: rng.dword(),
        cdw14: rng.dword(),
        cdw15: rng.dword(),
        ..Sqe::default()
    };
    if opcode == admin_opcode::FABRICS {
        // Connect (again), Property Get, or an unknown type.
        let t = rng.pick(&[fctype::CONNECT, fctype::PROPERTY_GET, 0x07, 0x7F]);
        sqe.nsid = t as u32;
    }
    let data = match rng.below(3) {
        0 => Data::None,
        1 => Data::Out(random_data(
            rng.pick(&[16, 512, 1024, 4096, 8192, 65536]),
            rng.next(),
        )),
        _ => Data::In(rng.pick(&[4, 16, 512, 4096, 8192, 65536])),
    };
    (sqe, data)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_commands_all_get_an_answer() {
    let dir = tempfile::tempdir().unwrap();
    let target = start(config(dir.path(), BackendKind::Ram, 2, 64 << 20)).await;
    let nqns = nqns(&target);
    let background = BackgroundIo::start(addr(&target), &nqns[1]).await;
    let before = background.rounds();

    for seed in [
        0x5eed_f00d_1234_5678u64,
        0x0123_4567_89ab_cdef,
        0xdead_beef_cafe_f00d,
        7,
    ] {
        run_seed(addr(&target), &nqns[0], seed).await;
    }
    background.finish(before).await;
    target.shutdown().await;
}

async fn run_seed(addr: std::net::SocketAddr, nqn: &str, seed: u64) {
    let mut opts = options(addr, nqn);
    opts.io_queues = 2;
    opts.command_timeout = Duration::from_secs(5);
    let ctrl = Controller::connect(opts).await.unwrap();
    let mut rng = Rng(seed);
    let (mut answered, mut failed_status) = (0, 0);
    for batch in 0..40 {
        let mut commands = Vec::new();
        for _ in 0..16 {
            let admin = rng.below(3) == 0;
            let qid = if admin { 0 } else { 1 + rng.below(2) as u16 };
            let (sqe, data) = any_command(&mut rng, admin);
            commands.push((qid, sqe, data));
        }
        let results = futures_join(&ctrl, commands).await;
        for (what, result) in results {
            match result {
                Ok(_) => answered += 1,
                Err(HostError::Status { .. }) => {
                    answered += 1;
                    failed_status += 1;
                }
                // Refused by the host library before sending (e.g. a data size it won't send).
                Err(HostError::Invalid(_)) => {}
                Err(e) => {
                    panic!("seed {seed:#x} batch {batch}: {what}: no answer from the target: {e}")
                }
            }
        }
    }
    assert!(
        answered > 400,
        "most commands were sent and answered ({answered})"
    );
    assert!(
        failed_status > 0 && failed_status < answered,
        "a mix of outcomes: {failed_status} of {answered} failed"
    );

    // The association still works.
    let data = random_data(8192, 99);
    ctrl.write(1, 100, data.clone(), false).await.unwrap();
    assert_same_data(
        &ctrl.read(1, 100, 2).await.unwrap(),
        &data,
        "after random commands",
    );
    ctrl.shutdown().await.unwrap();
}

async fn futures_join(
    ctrl: &Controller,
    commands: Vec<(u16, Sqe, Data)>,
) -> Vec<(String, Result<fabrik_initiator::Completion, HostError>)> {
    let mut pending = Vec::new();
    for (qid, sqe, data) in commands {
        let what = format!(
            "qid {qid} opcode {:#04x} nsid {:#x} cdw10 {:#x}",
            sqe.opcode, sqe.nsid, sqe.cdw10
        );
        let (out, in_len) = match data {
            Data::None => (None, 0),
            Data::Out(b) => (Some(b), 0),
            Data::In(n) => (None, n),
        };
        pending.push(async move {
            let result = if qid == 0 {
                ctrl.submit_admin(sqe, out, in_len).await
            } else {
                ctrl.submit_io(qid, sqe, out, in_len).await
            };
            (what, result)
        });
    }
    // All 16 in flight at once, across the queues.
    futures_util::future::join_all(pending).await
}
