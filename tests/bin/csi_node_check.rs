//! csi-node-check: the CSI node lifecycle against a running fabrik-csi (controller and node in
//! one process) on a machine with the kernel NVMe host, as the kubelet and the attacher drive
//! it: a filesystem volume made, published, staged (connected, formatted, mounted), published
//! into a pod's path, written, unstaged (disconnected), staged again read-only and read back;
//! a block volume written through its device file and read back after a reconnect; a volume
//! holding data is never formatted over. Each step is idempotent as CSI asks (done twice).
//! Run by tests/interop/fabrikd-tcp.sh in the guest:
//!
//!     csi-node-check SOCKET WORKDIR

use anyhow::{bail, ensure, Context, Result};
use fabrik_csi::pb::controller_client::ControllerClient;
use fabrik_csi::pb::node_client::NodeClient;
use fabrik_csi::pb::volume_capability::{
    access_mode::Mode, AccessMode, AccessType, BlockVolume, MountVolume,
};
use fabrik_csi::pb::*;
use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use tonic::transport::Channel;

const MIB: i64 = 1 << 20;

fn mount_cap(mode: Mode) -> VolumeCapability {
    VolumeCapability {
        access_mode: Some(AccessMode { mode: mode as i32 }),
        access_type: Some(AccessType::Mount(MountVolume {
            fs_type: "ext4".into(),
            ..Default::default()
        })),
    }
}

fn block_cap() -> VolumeCapability {
    VolumeCapability {
        access_mode: Some(AccessMode {
            mode: Mode::SingleNodeWriter as i32,
        }),
        access_type: Some(AccessType::Block(BlockVolume {})),
    }
}

fn mounted(path: &Path) -> bool {
    fabrik_csi::node::system::is_mount_point(path).unwrap_or(false)
}

fn connected(nqn: &str) -> bool {
    fabrik_csi::node::system::subsystem_present(Path::new("/sys"), nqn)
}

fn pattern(len: usize, mut seed: u64) -> Vec<u8> {
    (0..len)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed as u8
        })
        .collect()
}

struct Check {
    ctl: ControllerClient<Channel>,
    node: NodeClient<Channel>,
    node_id: String,
    work: PathBuf,
}

impl Check {
    async fn make(&mut self, name: &str, bytes: i64, cap: VolumeCapability) -> Result<Volume> {
        let req = CreateVolumeRequest {
            name: name.into(),
            capacity_range: Some(CapacityRange {
                required_bytes: bytes,
                limit_bytes: 0,
            }),
            volume_capabilities: vec![cap],
            ..Default::default()
        };
        let v = self.ctl.create_volume(req).await?.into_inner().volume;
        v.context("CreateVolume answered no volume")
    }

    async fn publish(
        &mut self,
        v: &Volume,
        cap: &VolumeCapability,
    ) -> Result<HashMap<String, String>> {
        let req = ControllerPublishVolumeRequest {
            volume_id: v.volume_id.clone(),
            node_id: self.node_id.clone(),
            volume_capability: Some(cap.clone()),
            ..Default::default()
        };
        Ok(self
            .ctl
            .controller_publish_volume(req)
            .await?
            .into_inner()
            .publish_context)
    }

    async fn stage(
        &mut self,
        v: &Volume,
        ctx: &HashMap<String, String>,
        cap: &VolumeCapability,
        at: &Path,
    ) -> Result<()> {
        let req = NodeStageVolumeRequest {
            volume_id: v.volume_id.clone(),
            publish_context: ctx.clone(),
            staging_target_path: at.display().to_string(),
            volume_capability: Some(cap.clone()),
            ..Default::default()
        };
        self.node.node_stage_volume(req).await?;
        Ok(())
    }

    async fn unstage(&mut self, v: &Volume, at: &Path) -> Result<()> {
        let req = NodeUnstageVolumeRequest {
            volume_id: v.volume_id.clone(),
            staging_target_path: at.display().to_string(),
        };
        self.node.node_unstage_volume(req).await?;
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    async fn node_publish(
        &mut self,
        v: &Volume,
        ctx: &HashMap<String, String>,
        cap: &VolumeCapability,
        staged: &Path,
        target: &Path,
        readonly: bool,
    ) -> Result<()> {
        let req = NodePublishVolumeRequest {
            volume_id: v.volume_id.clone(),
            publish_context: ctx.clone(),
            staging_target_path: staged.display().to_string(),
            target_path: target.display().to_string(),
            volume_capability: Some(cap.clone()),
            readonly,
            ..Default::default()
        };
        self.node.node_publish_volume(req).await?;
        Ok(())
    }

    async fn node_unpublish(&mut self, v: &Volume, target: &Path) -> Result<()> {
        let req = NodeUnpublishVolumeRequest {
            volume_id: v.volume_id.clone(),
            target_path: target.display().to_string(),
        };
        self.node.node_unpublish_volume(req).await?;
        Ok(())
    }

    async fn stats(&mut self, v: &Volume, path: &Path) -> Result<Vec<VolumeUsage>> {
        let req = NodeGetVolumeStatsRequest {
            volume_id: v.volume_id.clone(),
            volume_path: path.display().to_string(),
            staging_target_path: String::new(),
        };
        Ok(self
            .node
            .node_get_volume_stats(req)
            .await?
            .into_inner()
            .usage)
    }

    async fn retire(&mut self, v: &Volume) -> Result<()> {
        let req = ControllerUnpublishVolumeRequest {
            volume_id: v.volume_id.clone(),
            node_id: self.node_id.clone(),
            secrets: HashMap::new(),
        };
        self.ctl.controller_unpublish_volume(req).await?;
        let req = DeleteVolumeRequest {
            volume_id: v.volume_id.clone(),
            secrets: HashMap::new(),
        };
        self.ctl.delete_volume(req).await?;
        Ok(())
    }

    async fn filesystem(&mut self) -> Result<()> {
        let cap = mount_cap(Mode::SingleNodeWriter);
        let v = self.make("guest-fs", 64 * MIB, cap.clone()).await?;
        let ctx = self.publish(&v, &cap).await?;
        let staged = self.work.join("fs-staging");
        let target = self.work.join("pods/a/fs");
        for _ in 0..2 {
            self.stage(&v, &ctx, &cap, &staged).await?;
        }
        ensure!(
            connected(&v.volume_id),
            "staged, but the host has no subsystem {}",
            v.volume_id
        );
        ensure!(
            mounted(&staged),
            "staged, but {} is no mount point",
            staged.display()
        );
        for _ in 0..2 {
            self.node_publish(&v, &ctx, &cap, &staged, &target, false)
                .await?;
        }
        ensure!(
            mounted(&target),
            "published, but {} is no mount point",
            target.display()
        );
        let text = b"written through fabrik-csi\n";
        let file = target.join("hello.txt");
        let mut f = std::fs::File::create(&file)?;
        f.write_all(text)?;
        f.sync_all()?;
        drop(f);
        let usage = self.stats(&v, &target).await?;
        let bytes = usage
            .iter()
            .find(|u| u.unit == volume_usage::Unit::Bytes as i32);
        ensure!(
            bytes.is_some_and(|b| b.total > 32 * MIB && b.used > 0 && b.available > 0),
            "stats of the mounted volume: {usage:?}"
        );
        // Asked about a path that holds no volume of its own: NOT_FOUND.
        expect_status(
            self.stats(&v, &self.work.clone()).await.map(drop),
            tonic::Code::NotFound,
            "holds no volume",
        )?;
        println!("ok: filesystem volume staged, published, written ({usage:?})");
        for _ in 0..2 {
            self.node_unpublish(&v, &target).await?;
        }
        ensure!(
            !target.exists(),
            "unpublished, but {} is still there",
            target.display()
        );
        for _ in 0..2 {
            self.unstage(&v, &staged).await?;
        }
        ensure!(
            !mounted(&staged),
            "unstaged, but {} is still mounted",
            staged.display()
        );
        ensure!(
            !connected(&v.volume_id),
            "unstaged, but the host is still connected"
        );
        println!("ok: unpublished and unstaged: unmounted and disconnected");

        let ro = mount_cap(Mode::SingleNodeReaderOnly);
        self.stage(&v, &ctx, &ro, &staged).await?;
        self.node_publish(&v, &ctx, &ro, &staged, &target, true)
            .await?;
        let back = std::fs::read(target.join("hello.txt"))?;
        ensure!(back == text, "read back {back:?} after a reconnect");
        match std::fs::write(target.join("other.txt"), b"x") {
            Err(e) if e.kind() == std::io::ErrorKind::ReadOnlyFilesystem => {}
            other => bail!("a read-only publish took a write: {other:?}"),
        }
        println!("ok: staged again and published read-only: the file is there, writes refused");
        self.node_unpublish(&v, &target).await?;
        self.unstage(&v, &staged).await?;
        self.retire(&v).await?;
        Ok(())
    }

    async fn block(&mut self) -> Result<()> {
        let cap = block_cap();
        let v = self.make("guest-block", 16 * MIB, cap.clone()).await?;
        let ctx = self.publish(&v, &cap).await?;
        let staged = self.work.join("blk-staging");
        let target = self.work.join("pods/b/dev");
        std::fs::create_dir_all(&staged)?;
        self.stage(&v, &ctx, &cap, &staged).await?;
        for _ in 0..2 {
            self.node_publish(&v, &ctx, &cap, &staged, &target, false)
                .await?;
        }
        let data = pattern(1 << 20, 7);
        let mut dev = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&target)?;
        dev.seek(SeekFrom::Start(4096))?;
        dev.write_all(&data)?;
        dev.sync_all()?;
        drop(dev);
        let usage = self.stats(&v, &target).await?;
        ensure!(
            usage.first().is_some_and(|u| u.total == v.capacity_bytes),
            "stats of the block volume: {usage:?}, its capacity {}",
            v.capacity_bytes
        );
        self.node_unpublish(&v, &target).await?;
        self.unstage(&v, &staged).await?;
        ensure!(
            !connected(&v.volume_id),
            "unstaged, but the host is still connected"
        );
        self.stage(&v, &ctx, &cap, &staged).await?;
        self.node_publish(&v, &ctx, &cap, &staged, &target, false)
            .await?;
        let mut back = vec![0u8; data.len()];
        let mut dev = std::fs::File::open(&target)?;
        dev.seek(SeekFrom::Start(4096))?;
        dev.read_exact(&mut back)?;
        drop(dev); // open, the device file could not be unmounted
        ensure!(
            back == data,
            "the block volume read back other data after a reconnect"
        );
        println!("ok: block volume written through its device file, read back after a reconnect ({usage:?})");
        // Not disconnected under a pod that still has it.
        expect_status(
            self.unstage(&v, &staged).await,
            tonic::Code::FailedPrecondition,
            "still in use",
        )?;
        ensure!(connected(&v.volume_id), "disconnected while published");
        println!("ok: a volume still published is not unstaged");
        // Published read-only: a write through the device file is refused.
        self.node_unpublish(&v, &target).await?;
        let ro = self.work.join("pods/c/dev");
        self.node_publish(&v, &ctx, &cap, &staged, &ro, true)
            .await?;
        let wrote = std::fs::OpenOptions::new()
            .write(true)
            .open(&ro)
            .and_then(|mut f| f.write_all(&data[..4096]).and_then(|()| f.sync_all()));
        ensure!(wrote.is_err(), "a read-only block publish took a write");
        println!(
            "ok: a read-only block publish refuses writes ({})",
            wrote.unwrap_err()
        );
        self.node_unpublish(&v, &ro).await?;
        self.unstage(&v, &staged).await?;
        // A publish context of another volume is refused, not staged.
        let mut wrong = ctx.clone();
        wrong.insert("nqn".into(), format!("{}0", v.volume_id));
        expect_status(
            self.stage(&v, &wrong, &cap, &staged).await,
            tonic::Code::InvalidArgument,
            "not volume",
        )?;
        // Staged as a filesystem now, it holds data that is none: refused, not formatted, and
        // the connect this stage made is undone.
        let fs = mount_cap(Mode::SingleNodeWriter);
        let other = self.work.join("blk-as-fs");
        expect_status(
            self.stage(&v, &ctx, &fs, &other).await,
            tonic::Code::FailedPrecondition,
            "not formatted over",
        )?;
        ensure!(
            !connected(&v.volume_id),
            "a stage that failed left its connect behind"
        );
        println!(
            "ok: a volume holding data is not formatted over, and the failed stage disconnects"
        );
        self.retire(&v).await?;
        Ok(())
    }
}

/// `r` is the gRPC error `code` saying `words`.
fn expect_status(r: Result<()>, code: tonic::Code, words: &str) -> Result<()> {
    match &r {
        Err(e)
            if e.downcast_ref::<tonic::Status>()
                .is_some_and(|s| s.code() == code && s.message().contains(words)) =>
        {
            Ok(())
        }
        _ => bail!("expected {code:?} saying {words:?}, got {r:?}"),
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 {
        eprintln!("usage: csi-node-check SOCKET WORKDIR");
        std::process::exit(2);
    }
    if let Err(e) = run(&args[1], Path::new(&args[2])).await {
        eprintln!("FAIL: {e:#}");
        std::process::exit(1);
    }
}

async fn run(socket: &str, work: &Path) -> Result<()> {
    let ch = fabrik_csi::channel(&fabrik_csi::endpoint_path(socket).map_err(anyhow::Error::msg)?)
        .await?;
    let mut node = NodeClient::new(ch.clone());
    let node_id = node
        .node_get_info(NodeGetInfoRequest {})
        .await?
        .into_inner()
        .node_id;
    println!("node {node_id}");
    let mut check = Check {
        ctl: ControllerClient::new(ch),
        node,
        node_id,
        work: work.to_path_buf(),
    };
    check.filesystem().await.context("filesystem volume")?;
    check.block().await.context("block volume")?;
    println!("all passed");
    Ok(())
}
