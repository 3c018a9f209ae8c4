//! The CSI Controller service: volumes are fabrik volumes (`csi-<digest of the CSI name>`,
//! RAID 0 of one drive unless the StorageClass says otherwise) on the box placement picks;
//! publishing composes a volume to the node's host NQN. A volume's ID is its subsystem NQN,
//! which names its box. Every answer comes from the boxes: the driver keeps no state, so a
//! restarted controller (or a second one) sees what the first made.

pub mod placement;

use crate::boxes::{StorageBox, CALL_LIMIT, CREATE_LIMIT};
use crate::busy::Volumes;
use crate::names;
use crate::pb::controller_server::Controller;
use crate::pb::controller_service_capability::rpc::Type as Rpc;
use crate::pb::*;
use fabrik_api::models::{self as api, CompositionRequest, VolumeRequest};
use futures_util::future::join_all;
use placement::{Candidate, Racks, Shape};
use std::collections::HashMap;
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// Cheap to clone: a volume is made in a task of its own (see `create_volume`).
#[derive(Clone)]
pub struct ControllerService {
    boxes: Arc<Vec<StorageBox>>,
    /// Volumes (fabrik names) with an operation under way.
    busy: Volumes,
}

/// A volume found on a box.
struct Located {
    box_index: usize,
    volume: api::Volume,
}

/// The smallest XFS that mkfs.xfs makes (xfsprogs 5.19 on).
const XFS_MIN: u64 = 300 << 20;
/// How often a new volume's placement is tried again when another took its drives first.
const PLACEMENT_TRIES: usize = 3;

fn invalid(e: impl Into<String>) -> Status {
    Status::invalid_argument(e.into())
}

impl ControllerService {
    pub fn new(boxes: Vec<StorageBox>) -> ControllerService {
        ControllerService {
            boxes: Arc::new(boxes),
            busy: Volumes::default(),
        }
    }

    /// Whether any box has a rack (then volumes carry topology).
    pub fn has_racks(&self) -> bool {
        self.boxes.iter().any(|b| b.rack.is_some())
    }

    /// The fabrik volume `name` on whichever box has it (and, given `nqn`, only as that
    /// volume ID). A box that does not answer while no other has it is an error: the volume
    /// may be there, and an answer either way would be a guess.
    async fn locate(&self, name: &str, nqn: Option<&str>) -> Result<Option<Located>, Status> {
        let answers = join_all(self.boxes.iter().map(|b| b.find(|c| c.volume(name)))).await;
        let mut failed = None;
        for (box_index, answer) in answers.into_iter().enumerate() {
            match answer {
                Ok(Some(volume)) if nqn.is_none_or(|n| n == volume.nqn) => {
                    return Ok(Some(Located { box_index, volume }))
                }
                Ok(_) => {}
                Err(e) => failed = Some(e),
            }
        }
        // The box's own code stays (UNAVAILABLE, PERMISSION_DENIED, a wrong URL's
        // FAILED_PRECONDITION): what to fix differs.
        match failed {
            Some(e) => Err(Status::new(
                e.code(),
                format!("cannot tell whether volume {name} exists: {}", e.message()),
            )),
            None => Ok(None),
        }
    }

    /// The box a StorageClass pins its volumes to (parameter `box`: a URL as given to `--box`).
    fn pinned_box(&self, params: &HashMap<String, String>) -> Result<Option<usize>, Status> {
        let Some(url) = params.get("box") else {
            return Ok(None);
        };
        let i = self
            .boxes
            .iter()
            .position(|b| &b.url == url)
            .ok_or_else(|| {
                let urls: Vec<&str> = self.boxes.iter().map(|b| b.url.as_str()).collect();
                invalid(format!(
                    "box {url:?} is none of this controller's ({})",
                    urls.join(", ")
                ))
            })?;
        Ok(Some(i))
    }

    /// Each answering box's free drives (see `free_drives`), none on a box other than
    /// `pinned`. Boxes that do not answer are named in the second list.
    async fn candidates(&self, pinned: Option<usize>) -> (Vec<Candidate>, Vec<String>) {
        let answers = join_all(self.boxes.iter().enumerate().map(|(i, b)| async move {
            // A box the class is not pinned to is not asked (nor waited for).
            if pinned.is_some_and(|p| p != i) {
                return Ok(Vec::new());
            }
            let (drives, subsystems) = tokio::try_join!(
                b.call(CALL_LIMIT, |c| c.drives()),
                b.call(CALL_LIMIT, |c| c.subsystems())
            )?;
            Ok::<_, Status>(free_drives(b, &drives, &subsystems))
        }))
        .await;
        let mut down = Vec::new();
        let out = self
            .boxes
            .iter()
            .zip(answers)
            .map(|(b, answer)| Candidate {
                url: b.url.clone(),
                rack: b.rack.clone(),
                free: answer.unwrap_or_else(|e| {
                    down.push(e.message().to_string());
                    Vec::new()
                }),
            })
            .collect();
        (out, down)
    }

    fn volume_message(&self, l: &Located) -> Volume {
        let b = &self.boxes[l.box_index];
        let mut context = HashMap::new();
        context.insert("box".to_string(), b.url.clone());
        context.insert("level".to_string(), l.volume.level.clone());
        context.insert("drives".to_string(), l.volume.members.len().to_string());
        Volume {
            capacity_bytes: i64::try_from(l.volume.capacity_bytes).unwrap_or(i64::MAX),
            volume_id: l.volume.nqn.clone(),
            volume_context: context,
            content_source: None,
            accessible_topology: b
                .rack
                .iter()
                .map(|r| Topology {
                    segments: HashMap::from([(names::RACK_KEY.to_string(), r.clone())]),
                })
                .collect(),
        }
    }

    /// The volume ID's volume, or NOT_FOUND.
    async fn existing(&self, volume_id: &str) -> Result<Located, Status> {
        let not_found = || Status::not_found(format!("no volume {volume_id}"));
        let name = names::volume_of_id(volume_id).ok_or_else(not_found)?;
        self.locate(name, Some(volume_id))
            .await?
            .ok_or_else(not_found)
    }

    /// Compositions of the volume on its box.
    async fn compositions_of(&self, l: &Located) -> Result<Vec<api::Composition>, Status> {
        let all = self.boxes[l.box_index]
            .call(CALL_LIMIT, |c| c.compositions())
            .await?;
        Ok(all
            .into_iter()
            .filter(|c| c.drives.contains(&l.volume.id))
            .collect())
    }

    /// What the node plugin needs to connect to the volume: its subsystem, a path to it, and
    /// how its namespace is known (NGUID and UUID).
    async fn publish_context(
        &self,
        l: &Located,
        c: &api::Composition,
    ) -> Result<HashMap<String, String>, Status> {
        let b = &self.boxes[l.box_index];
        let nqn = l.volume.nqn.clone();
        let sub = b.call(CALL_LIMIT, |c| c.subsystem(&nqn)).await?;
        let ns = sub.namespaces.first().ok_or_else(|| {
            Status::internal(format!("box {}: volume {nqn} has no namespace", b.url))
        })?;
        // The kernel host's TCP first; RDMA where that is all there is.
        let path = c
            .connect
            .iter()
            .find(|p| p.subsystem == nqn && p.transport == "tcp")
            .or_else(|| c.connect.iter().find(|p| p.subsystem == nqn))
            .ok_or_else(|| {
                Status::failed_precondition(format!(
                    "box {}: volume {nqn} is reachable on no port",
                    b.url
                ))
            })?;
        Ok(HashMap::from([
            ("nqn".to_string(), nqn),
            ("transport".to_string(), path.transport.clone()),
            ("traddr".to_string(), path.address.clone()),
            ("trsvcid".to_string(), path.service_id.to_string()),
            ("nguid".to_string(), ns.nguid.clone()),
            ("uuid".to_string(), ns.uuid.clone()),
        ]))
    }

    /// CreateVolume's work: the volume of that name if a box has it (and it is what is asked),
    /// else a new one where placement puts it.
    async fn make(
        &self,
        req: &CreateVolumeRequest,
        name: &str,
        shape: &Shape,
        bytes: Option<u64>,
    ) -> Result<Volume, Status> {
        let racks = racks(req.accessibility_requirements.as_ref());
        let pinned = self.pinned_box(&req.parameters)?;
        if let Some(l) = self.locate(name, None).await? {
            if pinned.is_some_and(|p| p != l.box_index) {
                return Err(Status::already_exists(format!(
                    "volume {:?} exists on box {}, not the one asked for",
                    req.name, self.boxes[l.box_index].url
                )));
            }
            return self
                .same(req, shape, &racks, &l)
                .map(|()| self.volume_message(&l));
        }
        let mut tries = 0;
        loop {
            let (candidates, down) = self.candidates(pinned).await;
            let (box_index, drives) =
                placement::place(shape, bytes, &candidates, &racks).map_err(|e| {
                    let down = if down.is_empty() {
                        String::new()
                    } else {
                        format!("; not answering: {}", down.join("; "))
                    };
                    Status::resource_exhausted(format!("{e}{down}"))
                })?;
            let b = &self.boxes[box_index];
            let request = VolumeRequest {
                name: name.to_string(),
                level: shape.level.clone(),
                drives,
                strip_kib: Some(shape.strip >> 10),
                spares: Vec::new(),
                capacity_bytes: bytes,
                // Closed from the start: no host reaches it till it is published.
                allow_any_host: Some(false),
            };
            tracing::info!(csi_name = %req.name, volume = %name, r#box = %b.url, drives = ?request.drives, "making a volume");
            match b.call(CREATE_LIMIT, |c| c.create_volume(&request)).await {
                Ok(volume) => return Ok(self.volume_message(&Located { box_index, volume })),
                // Another volume took a drive between the look and the request: look again.
                Err(e) if e.code() == tonic::Code::Aborted && tries + 1 < PLACEMENT_TRIES => {
                    tracing::info!(volume = %name, "placement raced: {}", e.message());
                    tries += 1;
                }
                Err(e) if e.code() == tonic::Code::Unavailable => {
                    return Err(Status::unavailable(format!(
                        "{} (the box may have made it: a retry finds it)",
                        e.message()
                    )))
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Whether volume `l`, found under the name asked for, is what `req` asks: else
    /// ALREADY_EXISTS (or ABORTED while its box is still making it).
    fn same(
        &self,
        req: &CreateVolumeRequest,
        shape: &Shape,
        racks: &Racks,
        l: &Located,
    ) -> Result<(), Status> {
        let v = &l.volume;
        if v.state == "making" {
            return Err(Status::aborted(format!(
                "volume {:?} is being made on box {}",
                req.name, self.boxes[l.box_index].url
            )));
        }
        let range = req.capacity_range.unwrap_or_default();
        let (required, limit) = (
            range.required_bytes.max(0) as u64,
            range.limit_bytes.max(0) as u64,
        );
        let cap = v.capacity_bytes;
        let same = shape.matches(v)
            && racks.allows(self.boxes[l.box_index].rack.as_deref())
            && cap >= required
            && (limit == 0 || cap <= limit);
        if same {
            return Ok(());
        }
        Err(Status::already_exists(format!(
            "volume {:?} exists as {} of {} drives ({} KiB strips), {cap} bytes, on box {}: not what is asked now",
            req.name,
            v.level,
            v.members.len(),
            v.strip_kib,
            self.boxes[l.box_index].url
        )))
    }
}

/// Drives placement may take: those of the box's pool (`drives=` of its `--box`), or without
/// one, those no host may reach (in no subsystem, or in one closed to every host: how an
/// operator hands a drive to the driver); and of those, the ones in no volume, composed to no
/// one, healthy, keeping data (not ram or null), exported (if at all) alone by a subsystem no
/// host is connected to. Making a volume erases its drives: a drive a host may still use is
/// never taken on a guess.
fn free_drives(
    b: &StorageBox,
    drives: &[api::Drive],
    subsystems: &[api::Subsystem],
) -> Vec<(String, u64)> {
    let in_use = |nqn: &String| {
        subsystems
            .iter()
            .find(|s| &s.nqn == nqn)
            .is_none_or(|s| s.controllers > 0 || s.namespaces.len() > 1)
    };
    drives
        .iter()
        .filter(|d| {
            let offered = match b.pool {
                Some(_) => b.in_pool(&d.id),
                None => d.subsystems.is_empty() || d.hosts.as_ref().is_some_and(|h| h.is_empty()),
            };
            offered
                && d.volume.is_none()
                && d.composed_to.is_empty()
                && d.health.state == "ok"
                && !matches!(d.backend.as_str(), "ram" | "null")
                && !d.subsystems.iter().any(in_use)
        })
        .map(|d| (d.id.clone(), d.capacity_bytes))
        .collect()
}

/// CSI's accessibility requirement as racks.
fn racks(req: Option<&TopologyRequirement>) -> Racks {
    let rack_of = |t: &Topology| t.segments.get(names::RACK_KEY).cloned();
    match req {
        None => Racks::default(),
        Some(r) => Racks {
            requisite: r.requisite.iter().filter_map(rack_of).collect(),
            preferred: r.preferred.iter().filter_map(rack_of).collect(),
        },
    }
}

/// The least a volume with these capabilities may serve (mkfs.xfs makes none smaller).
fn minimum(caps: &[VolumeCapability]) -> u64 {
    let xfs = caps.iter().any(|c| {
        matches!(&c.access_type, Some(volume_capability::AccessType::Mount(m)) if m.fs_type == "xfs")
    });
    if xfs {
        XFS_MIN
    } else {
        0
    }
}

/// The bytes a new volume serves for `range` (None: all its drives hold), at least `min`, or
/// OUT_OF_RANGE.
fn size_for(shape: &Shape, range: Option<&CapacityRange>, min: u64) -> Result<Option<u64>, Status> {
    let (required, limit) = range.map_or((0, 0), |r| (r.required_bytes, r.limit_bytes));
    if required < 0 || limit < 0 {
        return Err(invalid("capacity_range holds a negative size"));
    }
    let (required, limit) = (required as u64, limit as u64);
    if limit > 0 && required > limit {
        return Err(Status::out_of_range(format!(
            "required_bytes {required} is more than limit_bytes {limit}"
        )));
    }
    let bytes = match (required, limit) {
        (0, 0) => return Ok(None),
        (0, l) => l / shape.stripe_bytes() * shape.stripe_bytes(),
        (r, _) => shape.rounded(r.max(min)),
    };
    if bytes == 0 || bytes < min || (limit > 0 && bytes > limit) {
        return Err(Status::out_of_range(format!(
            "a {} volume of {} drives serves whole stripes of {} bytes, and at least {min} bytes \
             here: none lies between {required} and {limit} bytes",
            shape.level,
            shape.members,
            shape.stripe_bytes()
        )));
    }
    Ok(Some(bytes))
}

#[tonic::async_trait]
impl Controller for ControllerService {
    async fn create_volume(
        &self,
        request: Request<CreateVolumeRequest>,
    ) -> Result<Response<CreateVolumeResponse>, Status> {
        let req = request.into_inner();
        if req.name.is_empty() {
            return Err(invalid("a volume needs a name"));
        }
        crate::caps::check_all(&req.volume_capabilities).map_err(invalid)?;
        if req.volume_content_source.is_some() {
            return Err(invalid(
                "volumes from snapshots or other volumes are not served",
            ));
        }
        let shape = Shape::from_parameters(&req.parameters).map_err(invalid)?;
        let bytes = size_for(
            &shape,
            req.capacity_range.as_ref(),
            minimum(&req.volume_capabilities),
        )?;
        let name = names::volume_name(&req.name);
        let busy = self.busy.claim(&name)?;
        // Erasing a big volume outlasts the caller's deadline: the work goes on in a task of its
        // own (holding the volume busy, so a retry meanwhile is ABORTED, which the provisioner
        // retries), and the call that finds it made answers.
        let this = self.clone();
        let made = tokio::spawn(async move {
            let _busy = busy;
            this.make(&req, &name, &shape, bytes).await
        });
        let volume = made.await.map_err(|e| Status::internal(e.to_string()))??;
        Ok(Response::new(CreateVolumeResponse {
            volume: Some(volume),
        }))
    }

    async fn delete_volume(
        &self,
        request: Request<DeleteVolumeRequest>,
    ) -> Result<Response<DeleteVolumeResponse>, Status> {
        let id = request.into_inner().volume_id;
        if id.is_empty() {
            return Err(invalid("no volume_id given"));
        }
        // An ID that is none of ours names no volume: deleted already, as CSI sees it.
        let Some(name) = names::volume_of_id(&id) else {
            return Ok(Response::new(DeleteVolumeResponse {}));
        };
        let _busy = self.busy.claim(name)?;
        let Some(l) = self.locate(name, Some(&id)).await? else {
            return Ok(Response::new(DeleteVolumeResponse {}));
        };
        let published = self.compositions_of(&l).await?;
        if let Some(c) = published.first() {
            return Err(Status::failed_precondition(format!(
                "volume {id} is published to {}: unpublish it first",
                c.host_nqn
            )));
        }
        tracing::info!(volume = %name, r#box = %self.boxes[l.box_index].url, "deleting a volume");
        // Gone meanwhile (404) is deleted as well.
        self.boxes[l.box_index]
            .find(|c| c.delete_volume(name))
            .await?;
        Ok(Response::new(DeleteVolumeResponse {}))
    }

    async fn controller_publish_volume(
        &self,
        request: Request<ControllerPublishVolumeRequest>,
    ) -> Result<Response<ControllerPublishVolumeResponse>, Status> {
        let req = request.into_inner();
        if req.volume_id.is_empty() {
            return Err(invalid("no volume_id given"));
        }
        if req.node_id.is_empty() {
            return Err(invalid("no node_id given"));
        }
        let cap = req
            .volume_capability
            .as_ref()
            .ok_or_else(|| invalid("no volume_capability given"))?;
        crate::caps::check(cap).map_err(invalid)?;
        let name = names::volume_of_id(&req.volume_id)
            .ok_or_else(|| Status::not_found(format!("no volume {}", req.volume_id)))?;
        let _busy = self.busy.claim(name)?;
        let l = self.existing(&req.volume_id).await?;
        names::check_node_id(&req.node_id).map_err(Status::not_found)?;
        let published = self.compositions_of(&l).await?;
        let composition = match published.into_iter().next() {
            Some(c) if c.host_nqn == req.node_id => c,
            Some(c) => {
                return Err(Status::failed_precondition(format!(
                    "volume {} is published to node {}: it is one node's",
                    req.volume_id, c.host_nqn
                )))
            }
            None => {
                let compose = CompositionRequest {
                    host_nqn: req.node_id.clone(),
                    drives: vec![l.volume.id.clone()],
                    ports: None,
                    shared: false,
                };
                tracing::info!(volume = %name, node = %req.node_id, "publishing");
                self.boxes[l.box_index]
                    .call(CALL_LIMIT, |c| c.compose(&compose))
                    .await?
            }
        };
        Ok(Response::new(ControllerPublishVolumeResponse {
            publish_context: self.publish_context(&l, &composition).await?,
        }))
    }

    async fn controller_unpublish_volume(
        &self,
        request: Request<ControllerUnpublishVolumeRequest>,
    ) -> Result<Response<ControllerUnpublishVolumeResponse>, Status> {
        let req = request.into_inner();
        if req.volume_id.is_empty() {
            return Err(invalid("no volume_id given"));
        }
        let done = Response::new(ControllerUnpublishVolumeResponse {});
        let Some(name) = names::volume_of_id(&req.volume_id) else {
            return Ok(done);
        };
        let _busy = self.busy.claim(name)?;
        let Some(l) = self.locate(name, Some(&req.volume_id)).await? else {
            return Ok(done);
        };
        for c in self.compositions_of(&l).await? {
            if req.node_id.is_empty() || c.host_nqn == req.node_id {
                tracing::info!(volume = %name, node = %c.host_nqn, "unpublishing");
                self.boxes[l.box_index].find(|x| x.decompose(&c.id)).await?;
            }
        }
        Ok(done)
    }

    async fn validate_volume_capabilities(
        &self,
        request: Request<ValidateVolumeCapabilitiesRequest>,
    ) -> Result<Response<ValidateVolumeCapabilitiesResponse>, Status> {
        let req = request.into_inner();
        if req.volume_id.is_empty() {
            return Err(invalid("no volume_id given"));
        }
        if req.volume_capabilities.is_empty() {
            return Err(invalid("no volume_capabilities given"));
        }
        let l = self.existing(&req.volume_id).await?;
        let mut why = crate::caps::check_all(&req.volume_capabilities).err();
        if why.is_none() && !req.parameters.is_empty() {
            why = match Shape::from_parameters(&req.parameters) {
                Ok(s) if s.matches(&l.volume) => None,
                Ok(s) => Some(format!(
                    "the volume is {} of {} drives ({} KiB strips), not {} of {} ({} KiB)",
                    l.volume.level,
                    l.volume.members.len(),
                    l.volume.strip_kib,
                    s.level,
                    s.members,
                    s.strip >> 10
                )),
                Err(e) => Some(e),
            };
        }
        let answer = match why {
            Some(message) => ValidateVolumeCapabilitiesResponse {
                confirmed: None,
                message,
            },
            None => ValidateVolumeCapabilitiesResponse {
                confirmed: Some(validate_volume_capabilities_response::Confirmed {
                    volume_context: req.volume_context,
                    volume_capabilities: req.volume_capabilities,
                    parameters: req.parameters,
                    mutable_parameters: HashMap::new(),
                }),
                message: String::new(),
            },
        };
        Ok(Response::new(answer))
    }

    async fn list_volumes(
        &self,
        request: Request<ListVolumesRequest>,
    ) -> Result<Response<ListVolumesResponse>, Status> {
        let req = request.into_inner();
        if req.max_entries < 0 {
            return Err(invalid("max_entries is negative"));
        }
        let answers = join_all(self.boxes.iter().map(|b| async move {
            let volumes = b.call(CALL_LIMIT, |c| c.volumes()).await?;
            let compositions = b.call(CALL_LIMIT, |c| c.compositions()).await?;
            Ok::<_, Status>((volumes, compositions))
        }))
        .await;
        let mut entries = Vec::new();
        for (box_index, answer) in answers.into_iter().enumerate() {
            let (volumes, compositions) = answer?;
            for volume in volumes
                .into_iter()
                .filter(|v| names::is_driver_volume(&v.name))
            {
                let nodes = compositions
                    .iter()
                    .filter(|c| c.drives.contains(&volume.id))
                    .map(|c| c.host_nqn.clone())
                    .collect();
                let l = Located { box_index, volume };
                entries.push(list_volumes_response::Entry {
                    volume: Some(self.volume_message(&l)),
                    status: Some(list_volumes_response::VolumeStatus {
                        published_node_ids: nodes,
                        volume_condition: None,
                    }),
                });
            }
        }
        entries.sort_by(|a, b| {
            let id =
                |e: &list_volumes_response::Entry| e.volume.as_ref().map(|v| v.volume_id.clone());
            id(a).cmp(&id(b))
        });
        // The token is where the next page starts in that order.
        let start = match req.starting_token.as_str() {
            "" => 0,
            t => t
                .parse::<usize>()
                .ok()
                .filter(|&s| s <= entries.len())
                .ok_or_else(|| Status::aborted(format!("starting_token {t:?} is not one given")))?,
        };
        let end = match req.max_entries {
            0 => entries.len(),
            n => (start + n as usize).min(entries.len()),
        };
        let next_token = if end < entries.len() {
            end.to_string()
        } else {
            String::new()
        };
        Ok(Response::new(ListVolumesResponse {
            entries: entries.drain(start..end).collect(),
            next_token,
        }))
    }

    async fn get_capacity(
        &self,
        request: Request<GetCapacityRequest>,
    ) -> Result<Response<GetCapacityResponse>, Status> {
        let req = request.into_inner();
        let shape = Shape::from_parameters(&req.parameters).map_err(invalid)?;
        // Capacity for volumes with every capability asked: none, for one not served.
        if req
            .volume_capabilities
            .iter()
            .any(|c| crate::caps::check(c).is_err())
        {
            return Ok(Response::new(GetCapacityResponse {
                available_capacity: 0,
                maximum_volume_size: Some(0),
                minimum_volume_size: None,
            }));
        }
        let racks = match &req.accessible_topology {
            None => Racks::default(),
            Some(t) => Racks {
                requisite: t
                    .segments
                    .get(names::RACK_KEY)
                    .into_iter()
                    .cloned()
                    .collect(),
                preferred: Vec::new(),
            },
        };
        let pinned = self.pinned_box(&req.parameters)?;
        let (candidates, _) = self.candidates(pinned).await;
        let (total, largest) = placement::capacity(&shape, &candidates, &racks);
        let min = minimum(&req.volume_capabilities);
        let bytes = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        Ok(Response::new(GetCapacityResponse {
            available_capacity: bytes(total),
            maximum_volume_size: Some(bytes(largest)),
            minimum_volume_size: (min > 0).then_some(bytes(min)),
        }))
    }

    async fn controller_get_capabilities(
        &self,
        _: Request<ControllerGetCapabilitiesRequest>,
    ) -> Result<Response<ControllerGetCapabilitiesResponse>, Status> {
        let rpc = |t: Rpc| ControllerServiceCapability {
            r#type: Some(controller_service_capability::Type::Rpc(
                controller_service_capability::Rpc { r#type: t as i32 },
            )),
        };
        Ok(Response::new(ControllerGetCapabilitiesResponse {
            capabilities: vec![
                rpc(Rpc::CreateDeleteVolume),
                rpc(Rpc::PublishUnpublishVolume),
                rpc(Rpc::ListVolumes),
                rpc(Rpc::ListVolumesPublishedNodes),
                rpc(Rpc::GetCapacity),
                rpc(Rpc::SingleNodeMultiWriter),
            ],
        }))
    }
}
