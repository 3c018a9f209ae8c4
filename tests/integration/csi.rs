//! The CSI driver's controller against two boxes on loopback, through its gRPC services as the
//! Kubernetes sidecars call them: volumes made by capacity and topology (idempotently, by
//! name), refused with the right code when asked wrong or when no box holds them, listed in
//! pages, published to a node's host NQN (which the box then lets connect, and no other),
//! unpublished, deleted; and a box that does not answer gives UNAVAILABLE, never a guess. The
//! node side (nvme connect, mkfs, mounts) needs the kernel host: tests/interop runs it.

mod common;

use common::api::*;
use fabrik_csi::pb::controller_client::ControllerClient;
use fabrik_csi::pb::identity_client::IdentityClient;
use fabrik_csi::pb::volume_capability::{access_mode::Mode, AccessMode, AccessType, MountVolume};
use fabrik_csi::pb::*;
use fabrik_initiator::HostIdentity;
use fabrik_target::backend::BackendKind;
use std::collections::HashMap;
use tonic::transport::Channel;
use tonic::Code;

const RACK: &str = fabrik_csi::names::RACK_KEY;
const NODE: &str = "nqn.2024-01.io.fabrik:node:n1";

async fn start_box(dir: &std::path::Path, name: &str, drives: u32, size: u64) -> Api {
    let mut cfg = common::config(dir, BackendKind::File, drives, size);
    cfg.box_name = name.into();
    start_with(cfg).await
}

/// The controller on a Unix socket in `dir`, and a channel to it.
async fn start_driver(
    dir: &std::path::Path,
    boxes: &[String],
) -> (Channel, tokio::sync::oneshot::Sender<()>) {
    let socket = dir.join("csi.sock");
    let boxes = boxes
        .iter()
        .map(|b| fabrik_csi::boxes::StorageBox::parse(b, Some(TOKEN.into()), None).unwrap())
        .collect();
    let controller = fabrik_csi::controller::ControllerService::new(boxes);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let path = socket.clone();
    tokio::spawn(async move {
        fabrik_csi::serve(&path, Some(controller), None, async {
            let _ = stopped.await;
        })
        .await
        .unwrap();
    });
    for _ in 0..100 {
        if socket.exists() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let channel = fabrik_csi::channel(&socket).await.unwrap();
    (channel, stop)
}

fn mount_cap(mode: Mode) -> VolumeCapability {
    VolumeCapability {
        access_mode: Some(AccessMode { mode: mode as i32 }),
        access_type: Some(AccessType::Mount(MountVolume {
            fs_type: "ext4".into(),
            ..Default::default()
        })),
    }
}

fn rack(r: &str) -> Topology {
    Topology {
        segments: HashMap::from([(RACK.to_string(), r.to_string())]),
    }
}

fn create(name: &str, bytes: i64, params: &[(&str, &str)]) -> CreateVolumeRequest {
    CreateVolumeRequest {
        name: name.into(),
        capacity_range: Some(CapacityRange {
            required_bytes: bytes,
            limit_bytes: 0,
        }),
        volume_capabilities: vec![mount_cap(Mode::SingleNodeWriter)],
        parameters: params
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    }
}

/// The volume CreateVolume makes (or finds) for `request`.
async fn create_ok(ctl: &mut ControllerClient<Channel>, request: CreateVolumeRequest) -> Volume {
    let response = ctl.create_volume(request).await.unwrap().into_inner();
    response.volume.expect("CreateVolume answers with a volume")
}

#[track_caller]
fn assert_code<T: std::fmt::Debug>(r: Result<T, tonic::Status>, code: Code, words: &str) {
    let e = r.expect_err("an error");
    assert_eq!(e.code(), code, "{e:?}");
    assert!(
        e.message().contains(words),
        "{:?} lacks {words:?}",
        e.message()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volumes_are_made_published_and_deleted_through_the_boxes() {
    let dir = tempfile::tempdir().unwrap();
    let a = start_box(&dir.path().join("a"), "box-a", 3, 64 * MIB).await;
    let b = start_box(&dir.path().join("b"), "box-b", 4, 128 * MIB).await;
    // Box A gives the driver its drives 00-02 (a pool, though any host may reach them); box B
    // gives none, so only the drives closed to every host are the driver's: three of its four
    // (01-03; 00 stays open).
    for d in ["01", "02", "03"] {
        let path = format!("/subsystems/nqn.2024-01.io.fabrik:box-b:drive-{d}/access");
        let closed = fabrik_api::models::AccessRequest {
            allow_any_host: false,
        };
        let _: fabrik_api::models::Subsystem = b.admin.put(&path, &closed).await.unwrap();
    }
    // Box B first: where both would do, only the rack preference puts a volume on box A.
    let urls = [
        format!("http://{},rack=r2", b.api),
        format!("http://{},rack=r1,drives=00-02", a.api),
    ];
    let (channel, stop) = start_driver(dir.path(), &urls).await;
    let mut identity = IdentityClient::new(channel.clone());
    let mut ctl = ControllerClient::new(channel);

    let info = identity
        .get_plugin_info(GetPluginInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.name, "csi.fabrik.io");
    let caps = identity
        .get_plugin_capabilities(GetPluginCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(caps.capabilities.len(), 2, "{caps:?}");
    let probe = identity.probe(ProbeRequest {}).await.unwrap().into_inner();
    assert_eq!(probe.ready, Some(true));

    // Capacity: one drive a volume by default; each drive keeps 4 MiB of metadata.
    let capacity = |topology: Option<Topology>, params: &[(&str, &str)]| GetCapacityRequest {
        volume_capabilities: vec![],
        parameters: params
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        accessible_topology: topology,
    };
    let all = ctl
        .get_capacity(capacity(None, &[]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(all.available_capacity as u64, 3 * 60 * MIB + 3 * 124 * MIB);
    assert_eq!(all.maximum_volume_size, Some((124 * MIB) as i64));
    let r1 = ctl
        .get_capacity(capacity(Some(rack("r1")), &[]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r1.maximum_volume_size, Some((60 * MIB) as i64));
    let r5 = ctl
        .get_capacity(capacity(None, &[("level", "raid5"), ("drives", "3")]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r5.maximum_volume_size, Some((2 * 124 * MIB) as i64));

    // Made on the preferred rack's box, the size asked; the same request again is the same
    // volume; the same name asked bigger is another volume, refused.
    let mut one = create("pvc-one", (10 * MIB) as i64, &[]);
    one.accessibility_requirements = Some(TopologyRequirement {
        requisite: vec![rack("r1"), rack("r2")],
        preferred: vec![rack("r1")],
    });
    let v1 = create_ok(&mut ctl, one.clone()).await;
    assert!(
        v1.volume_id
            .starts_with("nqn.2024-01.io.fabrik:box-a:vol-csi-"),
        "{v1:?}"
    );
    assert_eq!(v1.capacity_bytes as u64, 10 * MIB);
    assert_eq!(v1.accessible_topology, [rack("r1")]);
    let again = create_ok(&mut ctl, one.clone()).await;
    assert_eq!(again.volume_id, v1.volume_id);
    // A restarted controller (here a second one) keeps nothing, yet finds the same volume.
    let (restarted, stop_restarted) = start_driver(&dir.path().join("restarted"), &urls).await;
    let found = create_ok(&mut ControllerClient::new(restarted), one.clone()).await;
    assert_eq!(found.volume_id, v1.volume_id);
    let _ = stop_restarted.send(());
    // A URL that is not a box's management API is said to be one, not taken for no volume.
    let wrong = [format!("http://{}/api/v1", a.api)];
    let (misled, stop_misled) = start_driver(&dir.path().join("wrong"), &wrong).await;
    assert_code(
        ControllerClient::new(misled)
            .delete_volume(DeleteVolumeRequest {
                volume_id: v1.volume_id.clone(),
                secrets: HashMap::new(),
            })
            .await,
        Code::FailedPrecondition,
        "without /api/v1",
    );
    let _ = stop_misled.send(());
    let mut bigger = one.clone();
    bigger.capacity_range = Some(CapacityRange {
        required_bytes: (20 * MIB) as i64,
        limit_bytes: 0,
    });
    assert_code(
        ctl.create_volume(bigger).await,
        Code::AlreadyExists,
        "not what is asked",
    );
    let mut strips = one.clone();
    strips.parameters.insert("stripKiB".into(), "128".into());
    assert_code(
        ctl.create_volume(strips).await,
        Code::AlreadyExists,
        "64 KiB strips",
    );
    let mut elsewhere = one.clone();
    elsewhere.accessibility_requirements = Some(TopologyRequirement {
        requisite: vec![rack("r2")],
        preferred: vec![],
    });
    assert_code(
        ctl.create_volume(elsewhere).await,
        Code::AlreadyExists,
        "on box",
    );
    // XFS needs 300 MiB: more than a limit of 100 MiB allows.
    let mut xfs = create("pvc-xfs", MIB as i64, &[]);
    xfs.capacity_range.as_mut().unwrap().limit_bytes = (100 * MIB) as i64;
    xfs.volume_capabilities = vec![VolumeCapability {
        access_mode: Some(AccessMode {
            mode: Mode::SingleNodeWriter as i32,
        }),
        access_type: Some(AccessType::Mount(MountVolume {
            fs_type: "xfs".into(),
            ..Default::default()
        })),
    }];
    assert_code(
        ctl.create_volume(xfs).await,
        Code::OutOfRange,
        "at least 314572800 bytes",
    );
    // Closed to every host till published.
    assert!(connect(a.nvme(), &v1.volume_id, &HostIdentity::random())
        .await
        .is_err());
    let made = a.admin.volumes().await.unwrap();
    assert_eq!(made.len(), 1);
    assert_eq!(
        (made[0].level.as_str(), made[0].members.len()),
        ("raid0", 1)
    );

    // RAID 5 over three drives, only where r2 is required: box-b's three closed drives, not
    // its open one.
    let mut five = create(
        "pvc-five",
        (100 * MIB) as i64,
        &[("level", "raid5"), ("drives", "3")],
    );
    five.accessibility_requirements = Some(TopologyRequirement {
        requisite: vec![rack("r2")],
        preferred: vec![],
    });
    let v5 = create_ok(&mut ctl, five).await;
    assert!(v5.volume_id.contains(":box-b:vol-csi-"), "{v5:?}");
    assert!(v5.capacity_bytes as u64 >= 100 * MIB);
    let made5 = b
        .admin
        .volume(v5.volume_id.rsplit_once(":vol-").unwrap().1)
        .await
        .unwrap();
    assert_eq!(made5.level, "raid5");
    let members: Vec<&str> = made5.members.iter().map(|m| m.drive.as_str()).collect();
    assert_eq!(members, ["01", "02", "03"]);

    // Pinned to a box (StorageClass parameter `box`): capacity and placement there alone.
    let pinned = [("box", urls[1].split(',').next().unwrap())];
    let only_a = ctl
        .get_capacity(capacity(None, &pinned))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(only_a.available_capacity as u64, 2 * 60 * MIB);
    let va = create_ok(&mut ctl, create("pvc-pinned", MIB as i64, &pinned)).await;
    assert!(va.volume_id.contains(":box-a:"), "{va:?}");
    assert_code(
        ctl.create_volume(create("pvc-x", MIB as i64, &[("box", "http://elsewhere")]))
            .await,
        Code::InvalidArgument,
        "none of this controller's",
    );
    let delete_pinned = DeleteVolumeRequest {
        volume_id: va.volume_id.clone(),
        secrets: HashMap::new(),
    };
    ctl.delete_volume(delete_pinned).await.unwrap();

    // No box holds it: RESOURCE_EXHAUSTED, saying what each box has.
    assert_code(
        ctl.create_volume(create("pvc-huge", (200 * MIB) as i64, &[]))
            .await,
        Code::ResourceExhausted,
        "no box has 1 free drives",
    );
    // Asked wrong.
    assert_code(
        ctl.create_volume(create("", 1, &[])).await,
        Code::InvalidArgument,
        "name",
    );
    let mut no_caps = create("pvc-x", 1, &[]);
    no_caps.volume_capabilities.clear();
    assert_code(
        ctl.create_volume(no_caps).await,
        Code::InvalidArgument,
        "capabilities",
    );
    let mut shared = create("pvc-x", 1, &[]);
    shared.volume_capabilities = vec![mount_cap(Mode::MultiNodeMultiWriter)];
    assert_code(
        ctl.create_volume(shared).await,
        Code::InvalidArgument,
        "one node's",
    );
    assert_code(
        ctl.create_volume(create("pvc-x", 1, &[("levle", "raid1")]))
            .await,
        Code::InvalidArgument,
        "unknown parameter",
    );
    let mut range = create("pvc-x", (2 * MIB) as i64, &[]);
    range.capacity_range.as_mut().unwrap().limit_bytes = MIB as i64;
    assert_code(
        ctl.create_volume(range).await,
        Code::OutOfRange,
        "more than limit_bytes",
    );
    assert_eq!(
        a.admin.volumes().await.unwrap().len() + b.admin.volumes().await.unwrap().len(),
        2
    );

    // Listed, in pages.
    let list = |max: i32, token: &str| ListVolumesRequest {
        max_entries: max,
        starting_token: token.into(),
    };
    let page = ctl.list_volumes(list(1, "")).await.unwrap().into_inner();
    assert_eq!((page.entries.len(), page.next_token.as_str()), (1, "1"));
    let rest = ctl.list_volumes(list(0, "1")).await.unwrap().into_inner();
    assert_eq!((rest.entries.len(), rest.next_token.as_str()), (1, ""));
    let mut ids: Vec<String> = page
        .entries
        .iter()
        .chain(&rest.entries)
        .map(|e| e.volume.as_ref().unwrap().volume_id.clone())
        .collect();
    ids.sort();
    let mut want = vec![v1.volume_id.clone(), v5.volume_id.clone()];
    want.sort();
    assert_eq!(ids, want);
    assert_code(
        ctl.list_volumes(list(0, "9")).await,
        Code::Aborted,
        "starting_token",
    );

    // Published to a node: the box lets that host NQN connect, and no other.
    let publish = |id: &str, node: &str| ControllerPublishVolumeRequest {
        volume_id: id.into(),
        node_id: node.into(),
        volume_capability: Some(mount_cap(Mode::SingleNodeWriter)),
        ..Default::default()
    };
    let ctx = ctl
        .controller_publish_volume(publish(&v1.volume_id, NODE))
        .await
        .unwrap()
        .into_inner()
        .publish_context;
    assert_eq!(ctx["nqn"], v1.volume_id);
    assert_eq!(ctx["transport"], "tcp");
    assert_eq!(ctx["traddr"], "127.0.0.1");
    assert_eq!(ctx["trsvcid"], a.nvme().port().to_string());
    assert_eq!(ctx["nguid"].len(), 32);
    let node = HostIdentity::with_nqn(NODE);
    let ctrl = connect(a.nvme(), &v1.volume_id, &node).await.unwrap();
    let data = common::random_data(64 << 10, 5);
    ctrl.write(1, 100, data.clone(), true).await.unwrap();
    common::assert_same_data(
        &ctrl.read(1, 100, 16).await.unwrap(),
        &data,
        "the published volume",
    );
    ctrl.shutdown().await.unwrap();
    assert!(connect(a.nvme(), &v1.volume_id, &HostIdentity::random())
        .await
        .is_err());
    let same = ctl
        .controller_publish_volume(publish(&v1.volume_id, NODE))
        .await
        .unwrap()
        .into_inner()
        .publish_context;
    assert_eq!(same, ctx);
    assert_code(
        ctl.controller_publish_volume(publish(&v1.volume_id, "nqn.2024-01.io.fabrik:node:n2"))
            .await,
        Code::FailedPrecondition,
        "one node's",
    );
    assert_code(
        ctl.controller_publish_volume(publish(&v1.volume_id, "some-fake-node-id"))
            .await,
        Code::NotFound,
        "not a host NQN",
    );
    // One of the driver's IDs that no box has.
    let mut gone_id = v1.volume_id.clone();
    let last = gone_id.pop().unwrap();
    gone_id.push(if last == '0' { '1' } else { '0' });
    assert_code(
        ctl.controller_publish_volume(publish(&gone_id, NODE)).await,
        Code::NotFound,
        "no volume",
    );
    let listed = ctl.list_volumes(list(0, "")).await.unwrap().into_inner();
    let status = listed
        .entries
        .iter()
        .find(|e| e.volume.as_ref().unwrap().volume_id == v1.volume_id)
        .and_then(|e| e.status.clone())
        .unwrap();
    assert_eq!(status.published_node_ids, [NODE]);
    // Validated: what it serves, and not what it does not.
    let validate = |caps: Vec<VolumeCapability>| ValidateVolumeCapabilitiesRequest {
        volume_id: v1.volume_id.clone(),
        volume_capabilities: caps,
        ..Default::default()
    };
    let ok = ctl
        .validate_volume_capabilities(validate(vec![mount_cap(Mode::SingleNodeReaderOnly)]))
        .await
        .unwrap()
        .into_inner();
    assert!(ok.confirmed.is_some(), "{ok:?}");
    let no = ctl
        .validate_volume_capabilities(validate(vec![mount_cap(Mode::MultiNodeReaderOnly)]))
        .await
        .unwrap()
        .into_inner();
    assert!(
        no.confirmed.is_none() && no.message.contains("one node's"),
        "{no:?}"
    );

    // Not deleted while published; unpublished (twice: the same), then deleted (twice).
    let delete = |id: &str| DeleteVolumeRequest {
        volume_id: id.into(),
        secrets: HashMap::new(),
    };
    assert_code(
        ctl.delete_volume(delete(&v1.volume_id)).await,
        Code::FailedPrecondition,
        NODE,
    );
    let unpublish = ControllerUnpublishVolumeRequest {
        volume_id: v1.volume_id.clone(),
        node_id: NODE.into(),
        secrets: HashMap::new(),
    };
    // Unpublished from another node: nothing to do, still published to this one.
    let other = ControllerUnpublishVolumeRequest {
        node_id: "nqn.2024-01.io.fabrik:node:n2".into(),
        ..unpublish.clone()
    };
    ctl.controller_unpublish_volume(other).await.unwrap();
    assert_code(
        ctl.delete_volume(delete(&v1.volume_id)).await,
        Code::FailedPrecondition,
        NODE,
    );
    // From every node (no node ID): unpublished; again: the same.
    let every = ControllerUnpublishVolumeRequest {
        node_id: String::new(),
        ..unpublish.clone()
    };
    ctl.controller_unpublish_volume(every).await.unwrap();
    ctl.controller_unpublish_volume(unpublish).await.unwrap();
    assert!(connect(a.nvme(), &v1.volume_id, &node).await.is_err());
    ctl.delete_volume(delete(&v1.volume_id)).await.unwrap();
    ctl.delete_volume(delete(&v1.volume_id)).await.unwrap();
    ctl.delete_volume(delete("some-volume-id")).await.unwrap();
    assert!(a.admin.volumes().await.unwrap().is_empty());
    assert_eq!(a.admin.drive("00").await.unwrap().volume, None);

    // A box that does not answer: nothing is made elsewhere on a guess, nothing deleted.
    b.stop().await;
    assert_code(
        ctl.create_volume(create("pvc-new", MIB as i64, &[])).await,
        Code::Unavailable,
        "cannot tell whether",
    );
    assert!(a.admin.volumes().await.unwrap().is_empty());
    assert_code(
        ctl.delete_volume(delete(&v5.volume_id)).await,
        Code::Unavailable,
        "cannot reach",
    );
    let _ = stop.send(());
    a.stop().await;
}
