//! `fabrik id-ctrl`: connect and print the Identify Controller fields nvme-cli users look at, as
//! text or as JSON (nvme-cli's field names).

use anyhow::Result;
use clap::Args;
use serde_json::json;

use super::args::{connect_controller, ConnectArgs};

#[derive(Args)]
pub struct IdCtrlArgs {
    #[command(flatten)]
    connect: ConnectArgs,
    /// Print as JSON.
    #[arg(long)]
    json: bool,
}

pub async fn run(IdCtrlArgs { connect, json }: IdCtrlArgs) -> Result<()> {
    let ctrl = connect_controller(&connect).await?;
    let namespaces = ctrl.active_namespaces().await;
    let id = ctrl.identity().clone();
    let vs = ctrl.version();
    ctrl.shutdown().await?;
    let namespaces = namespaces?;
    let ver = format!("{}.{}.{}", vs >> 16, (vs >> 8) & 0xff, vs & 0xff);
    if json {
        let value = json!({
            "cntlid": id.cntlid,
            "sn": id.serial,
            "mn": id.model,
            "fr": id.firmware,
            "subnqn": id.subnqn,
            "ver": vs,
            "cntrltype": id.cntrltype,
            "mdts": id.mdts,
            "kas": id.kas,
            "maxcmd": id.maxcmd,
            "nn": id.nn,
            "oncs": id.oncs,
            "vwc": id.vwc,
            "sgls": id.sgls,
            "ioccsz": id.ioccsz,
            "iorcsz": id.iorcsz,
            "active_namespaces": namespaces,
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    println!("cntlid    : {}", id.cntlid);
    println!("sn        : {}", id.serial);
    println!("mn        : {}", id.model);
    println!("fr        : {}", id.firmware);
    println!("subnqn    : {}", id.subnqn);
    println!("ver       : {ver}");
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
    println!("namespaces: {namespaces:?}");
    Ok(())
}
