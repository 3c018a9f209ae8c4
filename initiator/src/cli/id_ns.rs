//! `fabrik id-ns`: Identify Namespace over a userspace session, the fields nvme-cli shows.

use anyhow::Result;
use clap::Args;
use serde_json::json;

use super::args::{connect_controller, ConnectArgs};

#[derive(Args)]
pub struct IdNsArgs {
    #[command(flatten)]
    connect: ConnectArgs,
    /// Namespace.
    #[arg(long, default_value_t = 1)]
    nsid: u32,
    /// Print as JSON.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: IdNsArgs) -> Result<()> {
    let ctrl = connect_controller(&args.connect).await?;
    let ns = ctrl.identify_namespace(args.nsid).await;
    ctrl.shutdown().await?;
    let ns = ns?;
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let formats: Vec<_> = ns
        .lbaf
        .iter()
        .map(|f| json!({"ms": f.ms, "lbads": f.lbads, "rp": f.rp}))
        .collect();
    if args.json {
        let value = json!({
            "nsid": args.nsid,
            "nsze": ns.nsze, "ncap": ns.ncap, "nuse": ns.nuse,
            "nsfeat": ns.nsfeat, "nlbaf": ns.nlbaf, "flbas": ns.flbas,
            "mc": ns.mc, "dpc": ns.dpc, "dps": ns.dps, "nmic": ns.nmic, "dlfeat": ns.dlfeat,
            "anagrpid": ns.anagrpid,
            "nguid": hex(&ns.nguid), "eui64": hex(&ns.eui64),
            "lba_size": ns.lba_size(),
            "lbafs": formats,
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    println!("NVME Identify Namespace {}:", args.nsid);
    println!("nsze    : {:#x}", ns.nsze);
    println!("ncap    : {:#x}", ns.ncap);
    println!("nuse    : {:#x}", ns.nuse);
    println!("nsfeat  : {:#x}", ns.nsfeat);
    println!("nlbaf   : {}", ns.nlbaf);
    println!("flbas   : {:#x}", ns.flbas);
    println!("mc      : {:#x}", ns.mc);
    println!("dpc     : {:#x}", ns.dpc);
    println!("dps     : {:#x}", ns.dps);
    println!("nmic    : {:#x}", ns.nmic);
    println!("dlfeat  : {}", ns.dlfeat);
    println!("anagrpid: {}", ns.anagrpid);
    println!("nguid   : {}", hex(&ns.nguid));
    println!("eui64   : {}", hex(&ns.eui64));
    let in_use = (ns.flbas & 0xf) as usize;
    for (i, f) in ns.lbaf.iter().enumerate() {
        println!(
            "lbaf {i:>2} : ms:{:<3} lbads:{:<2} rp:{:#x}{}",
            f.ms,
            f.lbads,
            f.rp,
            if i == in_use { " (in use)" } else { "" }
        );
    }
    Ok(())
}
