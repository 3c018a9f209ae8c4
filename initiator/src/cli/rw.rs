//! `fabrik read` / `fabrik write`: dd-like copies between a namespace and a file over a
//! userspace session, in chunks with several in flight.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use bytes::BytesMut;
use clap::Args;
use fabrik_initiator::bench::parse_size;
use fabrik_initiator::Controller;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::args::{connect_controller, ConnectArgs};

/// Bytes per command (split further if MDTS is smaller).
const CHUNK: usize = 1 << 20;

#[derive(Args)]
pub struct RwArgs {
    #[command(flatten)]
    connect: ConnectArgs,
    /// Namespace.
    #[arg(long, default_value_t = 1)]
    nsid: u32,
    /// First block.
    #[arg(long, default_value_t = 0)]
    slba: u64,
    /// Bytes to move (e.g. 64m) [read: required; write: the file's size].
    #[arg(short = 'z', long = "data-size", value_parser = parse_size)]
    size: Option<u64>,
    /// The file to read into (read) or write from (write); "-" is stdin/stdout.
    #[arg(short = 'd', long = "data")]
    file: PathBuf,
}

/// `fabrik read`: namespace to file.
pub async fn read(args: RwArgs) -> Result<()> {
    let Some(size) = args.size else {
        bail!("read: --data-size says how much to read");
    };
    let ctrl = connect_controller(&args.connect).await?;
    let result = read_to_file(&ctrl, &args, size).await;
    ctrl.shutdown().await?;
    let (bytes, secs) = result?;
    report("read", bytes, secs);
    Ok(())
}

/// `fabrik write`: file to namespace; a last partial block is padded with zeroes.
pub async fn write(args: RwArgs) -> Result<()> {
    let ctrl = connect_controller(&args.connect).await?;
    let result = write_from_file(&ctrl, &args).await;
    ctrl.shutdown().await?;
    let (bytes, secs) = result?;
    report("written", bytes, secs);
    Ok(())
}

fn report(what: &str, bytes: u64, secs: f64) {
    eprintln!(
        "{bytes} bytes {what} in {secs:.3} s ({:.1} MB/s)",
        bytes as f64 / secs.max(1e-9) / 1e6
    );
}

async fn read_to_file(ctrl: &Controller, args: &RwArgs, size: u64) -> Result<(u64, f64)> {
    let lba = ctrl.lba_size(args.nsid).await? as u64;
    let blocks = size.div_ceil(lba);
    let mut out: Box<dyn tokio::io::AsyncWrite + Unpin + Send> = if args.file.as_os_str() == "-" {
        Box::new(tokio::io::stdout())
    } else {
        Box::new(
            tokio::fs::File::create(&args.file)
                .await
                .with_context(|| format!("creating {}", args.file.display()))?,
        )
    };
    let started = Instant::now();
    let per_chunk = (CHUNK as u64 / lba).max(1);
    let mut done = 0u64;
    while done < blocks {
        let nlb = per_chunk.min(blocks - done) as u32;
        let data = ctrl
            .read(args.nsid, args.slba + done, nlb)
            .await
            .with_context(|| format!("{}: reading LBA {}", where_(ctrl), args.slba + done))?;
        let keep = ((size - done * lba) as usize).min(data.len());
        out.write_all(&data[..keep]).await?;
        done += nlb as u64;
    }
    out.flush().await?;
    Ok((size, started.elapsed().as_secs_f64()))
}

async fn write_from_file(ctrl: &Controller, args: &RwArgs) -> Result<(u64, f64)> {
    let lba = ctrl.lba_size(args.nsid).await? as usize;
    let mut input: Box<dyn tokio::io::AsyncRead + Unpin + Send> = if args.file.as_os_str() == "-" {
        Box::new(tokio::io::stdin())
    } else {
        Box::new(
            tokio::fs::File::open(&args.file)
                .await
                .with_context(|| format!("opening {}", args.file.display()))?,
        )
    };
    let limit = args.size.unwrap_or(u64::MAX);
    let started = Instant::now();
    let mut moved = 0u64;
    let mut slba = args.slba;
    let chunk = (CHUNK / lba).max(1) * lba;
    while moved < limit {
        let want = chunk.min((limit - moved).min(chunk as u64) as usize);
        let mut buf = BytesMut::zeroed(want);
        let mut filled = 0;
        while filled < want {
            let n = input.read(&mut buf[filled..]).await?;
            if n == 0 {
                break;
            }
            filled += n;
        }
        if filled == 0 {
            break;
        }
        buf.truncate(filled.div_ceil(lba) * lba);
        let nlb = (buf.len() / lba) as u64;
        ctrl.write(args.nsid, slba, buf.freeze(), false)
            .await
            .with_context(|| format!("{}: writing LBA {slba}", where_(ctrl)))?;
        moved += filled as u64;
        slba += nlb;
        if filled < want {
            break;
        }
    }
    if let Some(size) = args.size {
        if moved < size {
            bail!("the input ended after {moved} of the {size} bytes asked for");
        }
    }
    ctrl.flush(args.nsid).await?;
    Ok((moved, started.elapsed().as_secs_f64()))
}

/// "NQN at ADDR", so an error names the path.
fn where_(ctrl: &Controller) -> String {
    let opts = ctrl.options();
    format!("{} at {}", opts.subnqn, opts.addr)
}
