//! Command deadlines: one sweep per queue instead of a timer per command.
//!
//! A timed command records the sweep's epoch when it is queued. The sweep advances the epoch
//! every `timeout / TICKS` and fails the queue, naming the command that waited longest, once a
//! command has waited `TICKS` whole periods: never before its timeout, at most two periods
//! after it. A tokio timer per command took about 300 instructions of each 4K read in the host
//! (callgrind, `fabrik bench` QD32), and the futures it wrapped were moved again per command.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::MissedTickBehavior;

use super::Shared;
use crate::command_name::command_name;
use crate::error::HostError;

/// Sweep periods per command timeout.
const TICKS: u32 = 8;

pub(super) async fn sweep(shared: Arc<Shared>, timeout: Duration) {
    let period = (timeout / TICKS).max(Duration::from_millis(1));
    let mut ticks = tokio::time::interval(period);
    // A late tick (a busy thread) must not be made up by ticks in a row: each one counts as a
    // whole period.
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let late = {
            let mut state = shared.state.lock().unwrap();
            state.epoch = state.epoch.wrapping_add(1);
            let epoch = state.epoch;
            // Queued in epoch e, a command has waited at least (epoch - e - 1) periods.
            state
                .commands
                .commands()
                .filter_map(|c| Some((epoch.wrapping_sub(c.issued?), c)))
                .filter(|&(waited, _)| waited > TICKS)
                .max_by_key(|&(waited, _)| waited)
                .map(|(_, c)| command_name(shared.qid, &c.sqe))
        };
        if let Some(command) = late {
            shared.fail(HostError::Timeout {
                qid: shared.qid,
                command,
                after: timeout,
            });
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use fabrik_proto::nvme::io_opcode;
    use fabrik_proto::tcp::Digests;
    use fabrik_proto::{Sqe, Status};

    use super::super::tests::{pair_with, read_sqe};
    use super::super::TcpQueueConfig;
    use crate::error::HostError;

    fn timed(timeout: Duration) -> TcpQueueConfig {
        TcpQueueConfig {
            command_timeout: Some(timeout),
            ..TcpQueueConfig::new(1, 32, Digests::default())
        }
    }

    #[tokio::test]
    async fn a_command_never_answered_fails_the_queue_after_its_timeout() {
        let timeout = Duration::from_millis(200);
        let (queue, mut target) = pair_with(timed(timeout), 4096).await;
        let start = Instant::now();
        let both = async {
            tokio::join!(
                queue.submit(
                    Sqe {
                        cdw10: 8,
                        ..read_sqe(1)
                    },
                    None,
                    4096,
                    0
                ),
                target.recv_capsule()
            )
        };
        let (result, capsule) = tokio::time::timeout(Duration::from_secs(5), both)
            .await
            .expect("no timeout after 5 s");
        let waited = start.elapsed();
        match result {
            Err(HostError::Timeout {
                qid,
                command,
                after,
            }) => {
                assert_eq!((qid, after), (1, timeout));
                assert_eq!(command, "Read (NSID 1, SLBA 8)");
            }
            other => panic!("expected a timeout, got {other:?}"),
        }
        assert!(waited >= timeout, "failed early, after {waited:?}");
        assert!(waited < timeout * 2, "failed late, after {waited:?}");
        assert!(queue.closed().is_some());
        assert_eq!(capsule.sqe.cdw10, 8);
        assert!(target.host_closed().await, "the connection is closed");
    }

    #[tokio::test]
    async fn answered_commands_and_untimed_ones_do_not_time_out() {
        let timeout = Duration::from_millis(100);
        let (queue, mut target) = pair_with(timed(timeout), 4096).await;
        let flush = Sqe {
            opcode: io_opcode::FLUSH,
            ..Sqe::default()
        };
        // The untimed command waits while commands answered at once go by for five timeouts;
        // a Flush ends them, and the target then answers the untimed command.
        let host = async {
            let reads = async {
                let start = Instant::now();
                while start.elapsed() < timeout * 5 {
                    queue.submit(read_sqe(1), None, 0, 0).await.unwrap();
                }
                queue.submit(flush, None, 0, 0).await.unwrap();
            };
            tokio::join!(queue.submit_untimed(Sqe::default(), None, 0, 0), reads).0
        };
        let script = async {
            let waiting = target.recv_capsule().await;
            loop {
                let capsule = target.recv_capsule().await;
                if capsule.sqe.opcode == io_opcode::FLUSH {
                    target.respond(waiting.sqe.cid, Status::SUCCESS).await;
                    target.respond(capsule.sqe.cid, Status::SUCCESS).await;
                    break;
                }
                target.respond(capsule.sqe.cid, Status::SUCCESS).await;
            }
        };
        let (event, ()) = tokio::join!(host, script);
        assert!(event.unwrap().cqe.status.is_success());
        assert!(queue.closed().is_none());
    }
}
