//! The CSI Node service: stage connects the kernel NVMe host to the volume's subsystem (nvme
//! connect, as the node's host NQN) and, for a filesystem, formats a new volume and mounts it
//! at the staging path; publish bind-mounts the device or that filesystem where the pod wants
//! it; unpublish and unstage undo each step, and unstage disconnects.

pub mod system;

use crate::busy::{Busy, Volumes};
use crate::names;
use crate::pb::node_server::Node;
use crate::pb::node_service_capability::rpc::Type as Rpc;
use crate::pb::volume_capability::AccessType;
use crate::pb::*;
use rustix::mount::{MountFlags, UnmountFlags};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use system::Holds;
use tonic::{Request, Response, Status};

/// How long a connected namespace may take to show up as a block device.
const DEVICE_WAIT: Duration = Duration::from_secs(30);
const CONNECT_LIMIT: Duration = Duration::from_secs(60);
const MKFS_LIMIT: Duration = Duration::from_secs(600);
const SYS: &str = "/sys";

/// Cheap to clone: a stage runs in a task of its own (see `node_stage_volume`).
#[derive(Clone)]
pub struct NodeService {
    /// The node's ID: the host NQN it connects as.
    node_id: String,
    /// The host ID it connects with (None: nvme-cli's own, from /etc/nvme/hostid).
    host_id: Option<String>,
    rack: Option<String>,
    busy: Volumes,
}

fn invalid(e: impl Into<String>) -> Status {
    Status::invalid_argument(e.into())
}

fn internal(e: impl std::fmt::Display) -> Status {
    Status::internal(e.to_string())
}

/// Runs blocking file system work (reads of a device, mounts, statvfs: a path that is down may
/// hold them for its I/O timeout) off the async workers.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Status> + Send + 'static,
) -> Result<T, Status> {
    tokio::task::spawn_blocking(f).await.map_err(internal)?
}

/// The mount flags CSI's `mount_flags` may name, as the kernel's; the rest go to the
/// filesystem as its options.
fn split_flags(flags: &[String]) -> (MountFlags, String) {
    let mut known = MountFlags::empty();
    let mut data = Vec::new();
    for f in flags
        .iter()
        .flat_map(|f| f.split(','))
        .filter(|f| !f.is_empty())
    {
        match f {
            "ro" => known |= MountFlags::RDONLY,
            "nosuid" => known |= MountFlags::NOSUID,
            "nodev" => known |= MountFlags::NODEV,
            "noexec" => known |= MountFlags::NOEXEC,
            "noatime" => known |= MountFlags::NOATIME,
            "nodiratime" => known |= MountFlags::NODIRATIME,
            "relatime" => known |= MountFlags::RELATIME,
            "sync" => known |= MountFlags::SYNCHRONOUS,
            "rw" | "defaults" => {}
            other => data.push(other),
        }
    }
    (known, data.join(","))
}

fn mounted(path: &Path) -> Result<bool, Status> {
    system::is_mount_point(path).map_err(|e| internal(format!("reading the mount table: {e}")))
}

impl NodeService {
    /// `node`: the Kubernetes node name (or a host NQN) the node is known by.
    pub fn new(node: &str, rack: Option<String>) -> Result<NodeService, String> {
        let node_id = names::node_id(node)?;
        // A node known by its own NQN keeps its own host ID (Linux refuses one NQN under two
        // IDs); a node name's NQN gets one derived from it.
        let host_id = (node_id != node).then(|| names::host_id(&node_id));
        Ok(NodeService {
            node_id,
            host_id,
            rack,
            busy: Volumes::default(),
        })
    }

    pub fn has_rack(&self) -> bool {
        self.rack.is_some()
    }

    /// The volume's block device, if the host has it.
    fn device(id: &str, ctx: &HashMap<String, String>) -> Option<PathBuf> {
        let get = |k: &str| ctx.get(k).map_or("", String::as_str);
        system::find_device(Path::new(SYS), id, get("nguid"), get("uuid"))
    }

    /// Connects the host to the volume's subsystem (unless it is connected) and waits for its
    /// namespace's block device; whether this call connected it, too.
    async fn connect(
        &self,
        id: &str,
        ctx: &HashMap<String, String>,
    ) -> Result<(PathBuf, bool), Status> {
        let get = |k: &str| {
            ctx.get(k).filter(|v| !v.is_empty()).ok_or_else(|| {
                invalid(format!(
                    "publish_context has no {k}: it is the controller's"
                ))
            })
        };
        let nqn = get("nqn")?;
        if nqn != id {
            return Err(invalid(format!(
                "publish_context is for {nqn}, not volume {id}"
            )));
        }
        if get("nguid").is_err() && get("uuid").is_err() {
            return Err(invalid(
                "publish_context has no nguid or uuid: it is the controller's",
            ));
        }
        let sys = Path::new(SYS);
        let mut connected = false;
        if !system::subsystem_live(sys, nqn) {
            let mut args = vec![
                "connect",
                "-t",
                get("transport")?,
                "-a",
                get("traddr")?,
                "-s",
                get("trsvcid")?,
                "-n",
                nqn,
                "--hostnqn",
                &self.node_id,
            ];
            if let Some(h) = &self.host_id {
                args.extend(["--hostid", h]);
            }
            system::run("nvme", &args, CONNECT_LIMIT)
                .await
                .map_err(Status::unavailable)?;
            connected = true;
        }
        let until = tokio::time::Instant::now() + DEVICE_WAIT;
        loop {
            if let Some(dev) = Self::device(id, ctx) {
                return Ok((dev, connected));
            }
            if tokio::time::Instant::now() > until {
                if connected {
                    self.disconnect(id).await;
                }
                return Err(Status::deadline_exceeded(format!(
                    "connected to {nqn}, but its namespace showed no block device within {} s",
                    DEVICE_WAIT.as_secs()
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Undoes a connect this stage made, when the stage fails after it: kubelet calls no
    /// NodeUnstage for a stage that failed for good.
    async fn disconnect(&self, id: &str) {
        if let Err(e) = system::run("nvme", &["disconnect", "-n", id], CONNECT_LIMIT).await {
            tracing::warn!(volume = %id, "undoing the connect of a failed stage: {e}");
        }
    }

    async fn stage(self, req: NodeStageVolumeRequest, _busy: Busy) -> Result<(), Status> {
        let cap = req.volume_capability.clone().unwrap_or_default();
        let (dev, connected) = self.connect(&req.volume_id, &req.publish_context).await?;
        let Some(AccessType::Mount(m)) = &cap.access_type else {
            return Ok(());
        };
        let fs = if m.fs_type.is_empty() {
            "ext4"
        } else {
            &m.fs_type
        };
        let at = PathBuf::from(&req.staging_target_path);
        let staged = stage_filesystem(dev, fs.to_string(), m.mount_flags.clone(), at).await;
        if staged.is_err() && connected {
            self.disconnect(&req.volume_id).await;
        }
        staged
    }
}

/// Formats `dev` with `fs` if it holds nothing, then mounts it at `at` (if it is not yet).
async fn stage_filesystem(
    dev: PathBuf,
    fs: String,
    flags: Vec<String>,
    at: PathBuf,
) -> Result<(), Status> {
    let (d, a) = (dev.clone(), at.clone());
    let (done, head) = blocking(move || {
        if mounted(&a)? {
            return Ok((true, Vec::new()));
        }
        let head = system::read_head(&d).map_err(|e| internal(format!("{}: {e}", d.display())))?;
        Ok((false, head))
    })
    .await?;
    if done {
        return Ok(());
    }
    match system::probe(&head) {
        Holds::Nothing => {
            let dev_arg = dev.to_string_lossy();
            // No discard: a new volume reads zeros already. No -F for ext4: mke2fs then refuses
            // a device holding a signature it knows that the probe above does not.
            let args: Vec<&str> = match fs.as_str() {
                "xfs" => vec!["-q", "-K", &dev_arg],
                _ => vec!["-q", "-E", "nodiscard", &dev_arg],
            };
            system::run(&format!("mkfs.{fs}"), &args, MKFS_LIMIT)
                .await
                .map_err(internal)?;
        }
        Holds::Filesystem(found) if found == fs => {}
        Holds::Filesystem(found) => {
            return Err(Status::failed_precondition(format!(
                "{} holds {found}, not {fs}: not formatted over",
                dev.display()
            )))
        }
        Holds::Unknown => {
            return Err(Status::failed_precondition(format!(
                "{} holds data that is no filesystem this driver makes: not formatted over",
                dev.display()
            )))
        }
    }
    blocking(move || {
        std::fs::create_dir_all(&at).map_err(|e| internal(format!("{}: {e}", at.display())))?;
        let (known, data) = split_flags(&flags);
        let data = std::ffi::CString::new(data).map_err(|_| invalid("a mount flag holds NUL"))?;
        rustix::mount::mount(&dev, &at, fs.as_str(), known, Some(data.as_c_str())).map_err(|e| {
            internal(format!(
                "mounting {} ({fs}) at {}: {e}",
                dev.display(),
                at.display()
            ))
        })
    })
    .await
}

/// Bind-mounts `source` at `target`, read-only if asked (a bind mount takes flags only when
/// remounted).
fn bind(source: &Path, target: &Path, read_only: bool, flags: &[String]) -> Result<(), Status> {
    rustix::mount::mount_bind(source, target).map_err(|e| {
        internal(format!(
            "bind-mounting {} at {}: {e}",
            source.display(),
            target.display()
        ))
    })?;
    let (mut known, _) = split_flags(flags);
    if read_only {
        known |= MountFlags::RDONLY;
    }
    if !known.is_empty() {
        if let Err(e) = rustix::mount::mount_remount(target, known | MountFlags::BIND, "") {
            let _ = rustix::mount::unmount(target, UnmountFlags::empty());
            return Err(internal(format!(
                "remounting {} with its flags: {e}",
                target.display()
            )));
        }
    }
    Ok(())
}

/// Unmounts `path` if it is a mount point.
fn unmount(path: &Path) -> Result<(), Status> {
    if mounted(path)? {
        rustix::mount::unmount(path, UnmountFlags::empty())
            .map_err(|e| internal(format!("unmounting {}: {e}", path.display())))?;
    }
    Ok(())
}

#[tonic::async_trait]
impl Node for NodeService {
    async fn node_stage_volume(
        &self,
        request: Request<NodeStageVolumeRequest>,
    ) -> Result<Response<NodeStageVolumeResponse>, Status> {
        let req = request.into_inner();
        if req.volume_id.is_empty() {
            return Err(invalid("no volume_id given"));
        }
        if req.staging_target_path.is_empty() {
            return Err(invalid("no staging_target_path given"));
        }
        let cap = req
            .volume_capability
            .as_ref()
            .ok_or_else(|| invalid("no volume_capability given"))?;
        crate::caps::check(cap).map_err(invalid)?;
        let busy = self.busy.claim(&req.volume_id)?;
        // A connect and a mkfs may outlast kubelet's deadline: the work goes on in a task of
        // its own (a mkfs cut short would leave a half-made filesystem), holding the volume
        // busy; the retry finds it done.
        let staged = tokio::spawn(self.clone().stage(req, busy));
        staged.await.map_err(internal)??;
        Ok(Response::new(NodeStageVolumeResponse {}))
    }

    async fn node_unstage_volume(
        &self,
        request: Request<NodeUnstageVolumeRequest>,
    ) -> Result<Response<NodeUnstageVolumeResponse>, Status> {
        let req = request.into_inner();
        if req.volume_id.is_empty() {
            return Err(invalid("no volume_id given"));
        }
        if req.staging_target_path.is_empty() {
            return Err(invalid("no staging_target_path given"));
        }
        let _busy = self.busy.claim(&req.volume_id)?;
        let at = PathBuf::from(&req.staging_target_path);
        blocking(move || unmount(&at)).await?;
        let sys = Path::new(SYS);
        // The volume ID is its subsystem's NQN: disconnecting it leaves every other volume be.
        // Not while its device is still in use (a pod's bind mount, a filesystem, dm or md on
        // it): kubelet unpublishes first, and a disconnect under a user would lose its data.
        if names::volume_of_id(&req.volume_id).is_some()
            && system::subsystem_present(sys, &req.volume_id)
        {
            let table = system::mount_table()
                .map_err(|e| internal(format!("reading the mount table: {e}")))?;
            let uses: Vec<String> = system::devices_of(sys, &req.volume_id)
                .iter()
                .flat_map(|(name, dev)| system::uses_of(sys, &table, name, dev))
                .collect();
            if !uses.is_empty() {
                return Err(Status::failed_precondition(format!(
                    "volume {} is still in use ({}): not disconnected",
                    req.volume_id,
                    uses.join(", ")
                )));
            }
            system::run("nvme", &["disconnect", "-n", &req.volume_id], CONNECT_LIMIT)
                .await
                .map_err(internal)?;
        }
        Ok(Response::new(NodeUnstageVolumeResponse {}))
    }

    async fn node_publish_volume(
        &self,
        request: Request<NodePublishVolumeRequest>,
    ) -> Result<Response<NodePublishVolumeResponse>, Status> {
        let req = request.into_inner();
        if req.volume_id.is_empty() {
            return Err(invalid("no volume_id given"));
        }
        if req.target_path.is_empty() {
            return Err(invalid("no target_path given"));
        }
        let cap = req
            .volume_capability
            .clone()
            .ok_or_else(|| invalid("no volume_capability given"))?;
        crate::caps::check(&cap).map_err(invalid)?;
        if req.staging_target_path.is_empty() {
            return Err(Status::failed_precondition(
                "no staging_target_path given: volumes are staged first",
            ));
        }
        let _busy = self.busy.claim(&req.volume_id)?;
        let read_only = req.readonly || crate::caps::read_only(&cap);
        let target = PathBuf::from(&req.target_path);
        if blocking({
            let t = target.clone();
            move || mounted(&t)
        })
        .await?
        {
            return Ok(Response::new(NodePublishVolumeResponse {}));
        }
        match &cap.access_type {
            Some(AccessType::Block(_)) => {
                let dev = Self::device(&req.volume_id, &req.publish_context).ok_or_else(|| {
                    Status::failed_precondition(format!(
                        "volume {} is not staged on this node: no block device for it",
                        req.volume_id
                    ))
                })?;
                // A read-only bind mount of a device node stops no write to the device: the
                // device itself is made read-only (on this node, till it is unstaged).
                if read_only {
                    let d = dev.to_string_lossy().into_owned();
                    system::run("blockdev", &["--setro", &d], CONNECT_LIMIT)
                        .await
                        .map_err(internal)?;
                }
                blocking(move || {
                    if let Some(parent) = target.parent() {
                        std::fs::create_dir_all(parent).map_err(internal)?;
                    }
                    if !target.exists() {
                        std::fs::File::create(&target)
                            .map_err(|e| internal(format!("{}: {e}", target.display())))?;
                    }
                    bind(&dev, &target, read_only, &[])
                })
                .await?;
            }
            Some(AccessType::Mount(m)) => {
                let staged = PathBuf::from(&req.staging_target_path);
                let flags = m.mount_flags.clone();
                let id = req.volume_id.clone();
                blocking(move || {
                    if !mounted(&staged)? {
                        return Err(Status::failed_precondition(format!(
                            "volume {id} is not staged at {}",
                            staged.display()
                        )));
                    }
                    std::fs::create_dir_all(&target)
                        .map_err(|e| internal(format!("{}: {e}", target.display())))?;
                    bind(&staged, &target, read_only, &flags)
                })
                .await?;
            }
            None => return Err(invalid("a volume capability has no access type")),
        }
        Ok(Response::new(NodePublishVolumeResponse {}))
    }

    async fn node_unpublish_volume(
        &self,
        request: Request<NodeUnpublishVolumeRequest>,
    ) -> Result<Response<NodeUnpublishVolumeResponse>, Status> {
        let req = request.into_inner();
        if req.volume_id.is_empty() {
            return Err(invalid("no volume_id given"));
        }
        if req.target_path.is_empty() {
            return Err(invalid("no target_path given"));
        }
        let _busy = self.busy.claim(&req.volume_id)?;
        let target = PathBuf::from(&req.target_path);
        blocking(move || {
            unmount(&target)?;
            let gone = match std::fs::symlink_metadata(&target) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(e),
                Ok(m) if m.is_dir() => std::fs::remove_dir(&target),
                Ok(_) => std::fs::remove_file(&target),
            };
            gone.map_err(|e| internal(format!("removing {}: {e}", target.display())))
        })
        .await?;
        Ok(Response::new(NodeUnpublishVolumeResponse {}))
    }

    async fn node_get_volume_stats(
        &self,
        request: Request<NodeGetVolumeStatsRequest>,
    ) -> Result<Response<NodeGetVolumeStatsResponse>, Status> {
        let req = request.into_inner();
        if req.volume_id.is_empty() {
            return Err(invalid("no volume_id given"));
        }
        if req.volume_path.is_empty() {
            return Err(invalid("no volume_path given"));
        }
        let usage =
            blocking(move || volume_usage(&req.volume_id, Path::new(&req.volume_path))).await?;
        Ok(Response::new(NodeGetVolumeStatsResponse {
            usage,
            volume_condition: None,
        }))
    }

    async fn node_get_capabilities(
        &self,
        _: Request<NodeGetCapabilitiesRequest>,
    ) -> Result<Response<NodeGetCapabilitiesResponse>, Status> {
        let rpc = |t: Rpc| NodeServiceCapability {
            r#type: Some(node_service_capability::Type::Rpc(
                node_service_capability::Rpc { r#type: t as i32 },
            )),
        };
        Ok(Response::new(NodeGetCapabilitiesResponse {
            capabilities: vec![
                rpc(Rpc::StageUnstageVolume),
                rpc(Rpc::GetVolumeStats),
                rpc(Rpc::SingleNodeMultiWriter),
            ],
        }))
    }

    async fn node_get_info(
        &self,
        _: Request<NodeGetInfoRequest>,
    ) -> Result<Response<NodeGetInfoResponse>, Status> {
        Ok(Response::new(NodeGetInfoResponse {
            node_id: self.node_id.clone(),
            max_volumes_per_node: 0,
            accessible_topology: self.rack.as_ref().map(|r| Topology {
                segments: HashMap::from([(names::RACK_KEY.to_string(), r.clone())]),
            }),
        }))
    }
}

/// NodeGetVolumeStats: bytes and inodes of a mounted filesystem, the size of a block device;
/// NOT_FOUND unless `path` holds volume `id` (its device belongs to the volume's subsystem).
fn volume_usage(id: &str, path: &Path) -> Result<Vec<VolumeUsage>, Status> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let meta = std::fs::metadata(path)
        .map_err(|e| Status::not_found(format!("{}: {e}", path.display())))?;
    let block = meta.file_type().is_block_device();
    let dev = if block { meta.rdev() } else { meta.dev() };
    let (major, minor) = (rustix::fs::major(dev), rustix::fs::minor(dev));
    let sys = Path::new(SYS);
    if system::subsystem_of_dev(sys, major, minor).as_deref() != Some(id)
        || (!block && !mounted(path)?)
    {
        return Err(Status::not_found(format!(
            "{} holds no volume {id}",
            path.display()
        )));
    }
    let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    if block {
        let sectors = std::fs::read_to_string(sys.join(format!("dev/block/{major}:{minor}/size")))
            .map_err(internal)?;
        let sectors: u64 = sectors.trim().parse().map_err(internal)?;
        return Ok(vec![VolumeUsage {
            available: 0,
            total: n(sectors.saturating_mul(512)),
            used: 0,
            unit: volume_usage::Unit::Bytes as i32,
        }]);
    }
    let st = rustix::fs::statvfs(path).map_err(internal)?;
    let bytes = |blocks: u64| n(blocks.saturating_mul(st.f_frsize));
    Ok(vec![
        VolumeUsage {
            available: bytes(st.f_bavail),
            total: bytes(st.f_blocks),
            used: bytes(st.f_blocks.saturating_sub(st.f_bfree)),
            unit: volume_usage::Unit::Bytes as i32,
        },
        VolumeUsage {
            available: n(st.f_favail),
            total: n(st.f_files),
            used: n(st.f_files.saturating_sub(st.f_ffree)),
            unit: volume_usage::Unit::Inodes as i32,
        },
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_flags_split_into_the_kernels_and_the_filesystems() {
        let (known, data) = split_flags(&[
            "noatime".into(),
            "discard,nodev".into(),
            "data=ordered".into(),
            "rw".into(),
        ]);
        assert_eq!(known, MountFlags::NOATIME | MountFlags::NODEV);
        assert_eq!(data, "discard,data=ordered");
    }
}
