//! `fabrik`: the NVMe-oF host command line. One file per subcommand under `cli/`.

mod cli;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    cli::run().await
}
