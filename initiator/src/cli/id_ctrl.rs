//! `fabrik id-ctrl`: connect and print the Identify Controller fields nvme-cli users look at.

use anyhow::Result;
use clap::Args;

use super::args::{connect_controller, ConnectArgs};

#[derive(Args)]
pub struct IdCtrlArgs {
    #[command(flatten)]
    connect: ConnectArgs,
}

pub async fn run(IdCtrlArgs { connect }: IdCtrlArgs) -> Result<()> {
    let ctrl = connect_controller(&connect).await?;
    let id = ctrl.identity();
    println!("cntlid    : {}", id.cntlid);
    println!("sn        : {}", id.serial);
    println!("mn        : {}", id.model);
    println!("fr        : {}", id.firmware);
    println!("subnqn    : {}", id.subnqn);
    let vs = ctrl.version();
    println!(
        "ver       : {}.{}.{}",
        vs >> 16,
        (vs >> 8) & 0xff,
        vs & 0xff
    );
    println!("cntrltype : {}", id.cntrltype);
    println!("mdts      : {}", id.mdts);
    println!("kas       : {}", id.kas);
    println!("maxcmd    : {}", id.maxcmd);
    println!("nn        : {}", id.nn);
    println!("oncs      : {:#06x}", id.oncs);
    println!("vwc       : {:#04x}", id.vwc);
    println!("sgls      : {:#010x}", id.sgls);
    println!("ioccsz    : {}", id.ioccsz);
    println!("iorcsz    : {}", id.iorcsz);
    println!("namespaces: {:?}", ctrl.active_namespaces().await?);
    ctrl.shutdown().await?;
    Ok(())
}
