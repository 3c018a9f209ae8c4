//! The CSI Node service: stage connects the kernel NVMe host to the volume's subsystem (nvme
//! connect, as the node's host NQN) and, for a filesystem, formats a new volume and mounts it
//! at the staging path; publish bind-mounts the device or that filesystem where the pod wants
//! it; unpublish and unstage undo each step, and unstage disconnects.

pub mod system;

use crate::names;
use crate::pb::node_server::Node;
use crate::pb::node_service_capability::rpc::Type as Rpc;
use crate::pb::volume_capability::AccessType;
use crate::pb::*;
use rustix::mount::{MountFlags, UnmountFlags};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use system::Holds;
use tonic::{Request, Response, Status};

/// How long a connected namespace may take to show up as a block device.
const DEVICE_WAIT: Duration = Duration::from_secs(30);
const CONNECT_LIMIT: Duration = Duration::from_secs(60);
const MKFS_LIMIT: Duration = Duration::from_secs(600);

pub struct NodeService {
    /// The node's ID: the host NQN it connects as.
    node_id: String,
    rack: Option<String>,
    /// Where sysfs is (tests point it elsewhere).
    sys: PathBuf,
    busy: Arc<Mutex<BTreeSet<String>>>,
}

struct Busy {
    set: Arc<Mutex<BTreeSet<String>>>,
    id: String,
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.set.lock().unwrap().remove(&self.id);
    }
}

fn invalid(e: impl Into<String>) -> Status {
    Status::invalid_argument(e.into())
}

fn internal(e: impl std::fmt::Display) -> Status {
    Status::internal(e.to_string())
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

impl NodeService {
    /// `node`: the Kubernetes node name (or a host NQN) the node is known by.
    pub fn new(node: &str, rack: Option<String>) -> Result<NodeService, String> {
        Ok(NodeService {
            node_id: names::node_id(node)?,
            rack,
            sys: PathBuf::from("/sys"),
            busy: Arc::default(),
        })
    }

    pub fn has_rack(&self) -> bool {
        self.rack.is_some()
    }

    fn claim(&self, id: &str) -> Result<Busy, Status> {
        if !self.busy.lock().unwrap().insert(id.to_string()) {
            return Err(Status::aborted(format!(
                "an operation on volume {id} is under way"
            )));
        }
        Ok(Busy {
            set: self.busy.clone(),
            id: id.to_string(),
        })
    }

    fn device(&self, ctx: &HashMap<String, String>) -> Option<PathBuf> {
        let get = |k: &str| ctx.get(k).map_or("", String::as_str);
        system::find_device(&self.sys.join("block"), get("nguid"), get("uuid"))
    }

    /// Connects the host to the volume's subsystem (unless it is already) and waits for its
    /// namespace's block device.
    async fn connect(&self, id: &str, ctx: &HashMap<String, String>) -> Result<PathBuf, Status> {
        if let Some(dev) = self.device(ctx) {
            return Ok(dev);
        }
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
        if !system::subsystem_connected(&self.sys.join("class/nvme-subsystem"), nqn) {
            let host_id = names::host_id(&self.node_id);
            let args = [
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
                "--hostid",
                &host_id,
            ];
            system::run("nvme", &args, CONNECT_LIMIT)
                .await
                .map_err(Status::unavailable)?;
        }
        let until = tokio::time::Instant::now() + DEVICE_WAIT;
        loop {
            if let Some(dev) = self.device(ctx) {
                return Ok(dev);
            }
            if tokio::time::Instant::now() > until {
                return Err(Status::deadline_exceeded(format!(
                    "connected to {nqn}, but its namespace showed no block device within {} s",
                    DEVICE_WAIT.as_secs()
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Formats `dev` with `fs` if it holds nothing, then mounts it at `at`.
    async fn stage_filesystem(
        &self,
        dev: &Path,
        fs: &str,
        flags: &[String],
        at: &Path,
    ) -> Result<(), Status> {
        if system::is_mount_point(at) {
            return Ok(());
        }
        let head =
            system::read_head(dev).map_err(|e| internal(format!("{}: {e}", dev.display())))?;
        let fs = match system::probe(&head) {
            Holds::Nothing => {
                let mkfs = format!("mkfs.{fs}");
                let dev_arg = dev.to_string_lossy();
                let args: Vec<&str> = match fs {
                    "xfs" => vec!["-q", &dev_arg],
                    _ => vec!["-q", "-F", &dev_arg],
                };
                system::run(&mkfs, &args, MKFS_LIMIT)
                    .await
                    .map_err(internal)?;
                fs.to_string()
            }
            Holds::Filesystem(found) if found == fs => found.to_string(),
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
        };
        std::fs::create_dir_all(at).map_err(|e| internal(format!("{}: {e}", at.display())))?;
        let (known, data) = split_flags(flags);
        let data = std::ffi::CString::new(data).map_err(|_| invalid("a mount flag holds NUL"))?;
        rustix::mount::mount(dev, at, fs.as_str(), known, Some(data.as_c_str())).map_err(|e| {
            internal(format!(
                "mounting {} ({fs}) at {}: {e}",
                dev.display(),
                at.display()
            ))
        })
    }
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
    if system::is_mount_point(path) {
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
        let _busy = self.claim(&req.volume_id)?;
        let dev = self.connect(&req.volume_id, &req.publish_context).await?;
        if let Some(AccessType::Mount(m)) = &cap.access_type {
            let fs = if m.fs_type.is_empty() {
                "ext4"
            } else {
                &m.fs_type
            };
            self.stage_filesystem(
                &dev,
                fs,
                &m.mount_flags,
                Path::new(&req.staging_target_path),
            )
            .await?;
        }
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
        let _busy = self.claim(&req.volume_id)?;
        unmount(Path::new(&req.staging_target_path))?;
        // The volume ID is its subsystem's NQN: disconnecting it leaves every other volume be.
        if names::volume_of_id(&req.volume_id).is_some()
            && system::subsystem_connected(&self.sys.join("class/nvme-subsystem"), &req.volume_id)
        {
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
        if req.staging_target_path.is_empty() {
            return Err(invalid(
                "no staging_target_path given: volumes are staged first",
            ));
        }
        let cap = req
            .volume_capability
            .as_ref()
            .ok_or_else(|| invalid("no volume_capability given"))?;
        crate::caps::check(cap).map_err(invalid)?;
        let _busy = self.claim(&req.volume_id)?;
        let target = Path::new(&req.target_path);
        if system::is_mount_point(target) {
            return Ok(Response::new(NodePublishVolumeResponse {}));
        }
        let read_only = req.readonly || crate::caps::read_only(cap);
        match &cap.access_type {
            Some(AccessType::Block(_)) => {
                let dev = self.device(&req.publish_context).ok_or_else(|| {
                    Status::failed_precondition(format!(
                        "volume {} is not staged on this node: no block device for it",
                        req.volume_id
                    ))
                })?;
                if let Some(parent) = target.parent() {
                    std::fs::create_dir_all(parent).map_err(internal)?;
                }
                if !target.exists() {
                    std::fs::File::create(target)
                        .map_err(|e| internal(format!("{}: {e}", target.display())))?;
                }
                bind(&dev, target, read_only, &[])?;
            }
            Some(AccessType::Mount(m)) => {
                let staged = Path::new(&req.staging_target_path);
                if !system::is_mount_point(staged) {
                    return Err(Status::failed_precondition(format!(
                        "volume {} is not staged at {}",
                        req.volume_id, req.staging_target_path
                    )));
                }
                std::fs::create_dir_all(target)
                    .map_err(|e| internal(format!("{}: {e}", target.display())))?;
                bind(staged, target, read_only, &m.mount_flags)?;
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
        let _busy = self.claim(&req.volume_id)?;
        let target = Path::new(&req.target_path);
        unmount(target)?;
        let gone = match std::fs::symlink_metadata(target) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
            Ok(m) if m.is_dir() => std::fs::remove_dir(target),
            Ok(_) => std::fs::remove_file(target),
        };
        gone.map_err(|e| internal(format!("removing {}: {e}", target.display())))?;
        Ok(Response::new(NodeUnpublishVolumeResponse {}))
    }

    async fn node_get_volume_stats(
        &self,
        request: Request<NodeGetVolumeStatsRequest>,
    ) -> Result<Response<NodeGetVolumeStatsResponse>, Status> {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let req = request.into_inner();
        if req.volume_id.is_empty() {
            return Err(invalid("no volume_id given"));
        }
        if req.volume_path.is_empty() {
            return Err(invalid("no volume_path given"));
        }
        let path = Path::new(&req.volume_path);
        let meta = std::fs::metadata(path)
            .map_err(|e| Status::not_found(format!("{}: {e}", path.display())))?;
        let usage = if meta.file_type().is_block_device() {
            // A bind-mounted device: its size from sysfs, by its device number.
            let (major, minor) = (libc::major(meta.rdev()), libc::minor(meta.rdev()));
            let sectors =
                std::fs::read_to_string(self.sys.join(format!("dev/block/{major}:{minor}/size")))
                    .map_err(internal)?;
            let bytes = sectors.trim().parse::<i64>().map_err(internal)? * 512;
            vec![VolumeUsage {
                available: 0,
                total: bytes,
                used: 0,
                unit: volume_usage::Unit::Bytes as i32,
            }]
        } else {
            if !system::is_mount_point(path) {
                return Err(Status::not_found(format!(
                    "{} is no volume's mount point",
                    path.display()
                )));
            }
            let st = rustix::fs::statvfs(path).map_err(internal)?;
            let bytes = |n: u64| (n * st.f_frsize) as i64;
            vec![
                VolumeUsage {
                    available: bytes(st.f_bavail),
                    total: bytes(st.f_blocks),
                    used: bytes(st.f_blocks - st.f_bfree),
                    unit: volume_usage::Unit::Bytes as i32,
                },
                VolumeUsage {
                    available: st.f_favail as i64,
                    total: st.f_files as i64,
                    used: (st.f_files - st.f_ffree) as i64,
                    unit: volume_usage::Unit::Inodes as i32,
                },
            ]
        };
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
