//! `fabrik tls-identity`: what a kernel host's keyring needs for TLS to a subsystem: the PSK
//! identity and the TLS PSK derived from a configured key, as `nvme check-tls-key --insert`
//! derives them (nvme-cli 2.3 cannot insert; tlshd then finds the key by this identity).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use fabrik_initiator::proto::tls::{tls_psk, ConfiguredPsk, LabelEncoding};

#[derive(Args)]
pub struct TlsIdentityArgs {
    /// The configured PSK (`NVMeTLSkey-1:..`); from the environment keeps it off the process list.
    #[arg(long, env = "FABRIK_TLS_KEY", value_parser = super::args::parse_tls_key, hide_env_values = true)]
    tls_key: ConfiguredPsk,
    /// Host NQN.
    #[arg(short = 'q', long)]
    hostnqn: String,
    /// Subsystem NQN.
    #[arg(short = 'n', long)]
    subnqn: String,
    /// Identity version: 1 (with the PSK digest; the Linux host looks for it first) or 0.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=1))]
    identity: u8,
    /// HKDF label layout: rfc8446, compat or nolength (as the target derives).
    #[arg(long, default_value = "rfc8446", value_parser = super::args::parse_label)]
    psk_label: LabelEncoding,
    /// Write the TLS PSK's bytes to FILE (mode 0600), e.g. for `keyctl padd psk IDENTITY
    /// KEYRING < FILE`; the identity goes to stdout.
    #[arg(long, value_name = "FILE")]
    psk_out: Option<PathBuf>,
}

pub async fn run(args: TlsIdentityArgs) -> Result<()> {
    let retained = args
        .tls_key
        .retained(&args.hostnqn, args.psk_label)
        .context("TLS key")?;
    let identity = retained.identity(args.identity, &args.hostnqn, &args.subnqn);
    let psk = tls_psk(&args.tls_key, &identity, args.psk_label).context("TLS PSK")?;
    if let Some(path) = &args.psk_out {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)
            .with_context(|| format!("cannot write {}", path.display()))?;
        f.write_all(&psk)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    println!("{}", identity.to_text());
    Ok(())
}
