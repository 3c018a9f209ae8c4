//! `fabrik io-check`: write random data, read it back, compare.

use std::time::Instant;

use anyhow::{bail, Result};
use bytes::Bytes;
use clap::Args;
use fabrik_initiator::Controller;

use super::args::{connect_controller, ConnectArgs};

#[derive(Args)]
pub struct IoCheckArgs {
    #[command(flatten)]
    connect: ConnectArgs,
    /// Namespace.
    #[arg(long, default_value_t = 1)]
    nsid: u32,
    /// First block.
    #[arg(long, default_value_t = 0)]
    slba: u64,
    /// Blocks to write and verify.
    #[arg(short = 'c', long, default_value_t = 256)]
    blocks: u32,
}

pub async fn run(args: IoCheckArgs) -> Result<()> {
    let ctrl = connect_controller(&args.connect).await?;
    io_check(&ctrl, args.nsid, args.slba, args.blocks).await?;
    ctrl.shutdown().await?;
    Ok(())
}

async fn io_check(ctrl: &Controller, nsid: u32, slba: u64, blocks: u32) -> Result<()> {
    let lba_size = ctrl.lba_size(nsid).await?;
    let len = blocks as usize * lba_size as usize;
    let clock = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let data = Bytes::from(pattern(
        len,
        clock.as_nanos() as u64 ^ std::process::id() as u64,
    ));
    let started = Instant::now();
    ctrl.write(nsid, slba, data.clone(), false).await?;
    let written = started.elapsed();
    let read = ctrl.read(nsid, slba, blocks).await?;
    let total = started.elapsed();
    if read != data {
        let first = read
            .iter()
            .zip(data.iter())
            .position(|(a, b)| a != b)
            .unwrap_or(read.len().min(data.len()));
        bail!(
            "data mismatch at byte {first} (block {})",
            slba + (first / lba_size as usize) as u64
        );
    }
    println!(
        "io-check: {blocks} blocks of {lba_size} bytes at LBA {slba} of namespace {nsid}: written in {written:?}, read back and verified in {:?}",
        total - written
    );
    Ok(())
}

/// Pseudo-random bytes (xorshift64*) so every run writes something different.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        out.extend_from_slice(&state.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    out.truncate(len);
    out
}
