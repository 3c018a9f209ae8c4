//! `fabrik`: the NVMe-oF host command line. One file per subcommand under `cli/`.

mod cli;

use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    match cli::run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => report(&e),
    }
}

/// An expected error reads as `error: ...`, then its causes, a line each, as nvme-cli and git
/// print them: never a backtrace (RUST_BACKTRACE is often set), which is for panics, bugs.
fn report(err: &anyhow::Error) -> ExitCode {
    eprintln!("error: {err}");
    err.chain()
        .skip(1)
        .for_each(|c| eprintln!("  caused by: {c}"));
    ExitCode::FAILURE
}
