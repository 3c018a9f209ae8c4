//! The bench's I/O threads: one per worker, each a single-threaded tokio runtime that runs the
//! worker's I/O loops and its queue on every controller (`ConnectOptions::io_runtimes`), so that
//! a command, its send, its answer and the next command stay on one thread: no hand-off
//! between threads and no work stealing on the way. Pinned to the CPUs of `--cpus` when given.
//! The rest of a run (connecting, admin queues, keep-alives, the report) stays on the control
//! runtime.

use std::future::Future;

use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::reference::pin_to;

#[derive(Default)]
pub struct IoThreads {
    handles: Vec<Handle>,
    stops: Vec<oneshot::Sender<()>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl IoThreads {
    /// `count` threads; thread `i` pinned to `cpus[i % cpus.len()]` unless `cpus` is empty.
    pub fn start(count: usize, cpus: &[usize]) -> std::io::Result<IoThreads> {
        let mut io = IoThreads::default();
        for worker in 0..count {
            let cpu = (!cpus.is_empty()).then(|| cpus[worker % cpus.len()]);
            let (handle_tx, handle_rx) = std::sync::mpsc::channel();
            let (stop_tx, stop_rx) = oneshot::channel::<()>();
            let thread = std::thread::Builder::new()
                .name(format!("fabrik-io-{worker}"))
                .spawn(move || {
                    let runtime = pin_to(cpu).and_then(|()| {
                        tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()
                    });
                    match runtime {
                        Ok(runtime) => {
                            let _ = handle_tx.send(Ok(runtime.handle().clone()));
                            runtime.block_on(async {
                                let _ = stop_rx.await;
                            });
                        }
                        Err(e) => {
                            let _ = handle_tx.send(Err(e));
                        }
                    }
                })?;
            io.threads.push(thread);
            io.stops.push(stop_tx);
            let handle = handle_rx
                .recv()
                .map_err(|_| std::io::Error::other("an I/O thread ended at its start"))??;
            io.handles.push(handle);
        }
        Ok(io)
    }

    /// The runtimes, one per worker (empty: none were started).
    pub fn handles(&self) -> Vec<Handle> {
        self.handles.clone()
    }
}

/// Runs `task` on worker `worker`'s runtime among `runtimes`, or on the caller's when there
/// are none.
pub fn spawn_on<F>(runtimes: &[Handle], worker: usize, task: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    match runtimes.get(worker % runtimes.len().max(1)) {
        Some(runtime) => runtime.spawn(task),
        None => tokio::spawn(task),
    }
}

impl Drop for IoThreads {
    /// Stops the runtimes (tasks still on them are dropped) and waits for their threads. Not
    /// from inside a runtime: the caller's thread blocks.
    fn drop(&mut self) {
        for stop in self.stops.drain(..) {
            let _ = stop.send(());
        }
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_worker_runs_on_a_thread_of_its_own_and_stops_with_it() {
        let io = IoThreads::start(2, &[]).unwrap();
        let runtimes = io.handles();
        let names = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(async {
                let mut names = Vec::new();
                for worker in 0..4 {
                    let name = spawn_on(&runtimes, worker, async {
                        std::thread::current().name().map(str::to_owned)
                    });
                    names.push(name.await.unwrap().unwrap());
                }
                names
            });
        assert_eq!(
            names,
            ["fabrik-io-0", "fabrik-io-1", "fabrik-io-0", "fabrik-io-1"]
        );
        drop(io);
        // Stopped with their threads: a task given to one now is cancelled, never run.
        let late = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(runtimes[0].spawn(async {}));
        assert!(late.unwrap_err().is_cancelled());
    }
}
