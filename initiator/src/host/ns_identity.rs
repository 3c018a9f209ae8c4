//! Whether two paths lead to the same namespaces: the NGUID, UUID and EUI-64 a controller gives
//! for each namespace (Namespace Identification Descriptors) must agree on every NSID both
//! paths have, as the Linux host checks (`nvme_ns_ids_equal`) before it joins a path to a
//! multipath device. The same NQN on two different boxes must not become one device.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use fabrik_proto::nvme::identify::NsDescriptor;

use crate::error::HostError;
use crate::host::controller::Controller;

/// Each active namespace's identifiers, by NSID.
pub type NamespaceIds = BTreeMap<u32, Vec<NsDescriptor>>;

/// The identifiers of every active namespace of `ctrl`.
pub async fn namespace_ids(ctrl: &Controller) -> Result<NamespaceIds, HostError> {
    let mut ids = NamespaceIds::new();
    for nsid in ctrl.active_namespaces().await? {
        let mut descriptors = match ctrl.ns_descriptors(nsid).await {
            Ok(d) => d,
            // A controller without the list (before NVMe 1.3) identifies nothing this way.
            Err(HostError::Status { status, .. }) => {
                tracing::debug!(nsid, "no namespace identification descriptors: {status}");
                Vec::new()
            }
            Err(e) => return Err(e),
        };
        // The command set is not an identity.
        descriptors.retain(|d| !matches!(d, NsDescriptor::Csi(_)));
        ids.insert(nsid, descriptors);
    }
    Ok(ids)
}

/// Refuses `path` (at `addr`) when a namespace it shares with `reference` is identified
/// differently: it is another subsystem under the same NQN.
pub fn check_same(
    subnqn: &str,
    reference: &NamespaceIds,
    path: usize,
    addr: SocketAddr,
    ids: &NamespaceIds,
) -> Result<(), HostError> {
    for (nsid, theirs) in ids {
        let Some(ours) = reference.get(nsid) else {
            continue;
        };
        let same = ours.len() == theirs.len() && ours.iter().all(|d| theirs.contains(d));
        if !same {
            return Err(HostError::Invalid(format!(
                "{subnqn}: path {path} ({addr}) leads to other namespaces under the same NQN: \
                 namespace {nsid} is {} there but {} on the other paths; not joining it",
                describe(theirs),
                describe(ours)
            )));
        }
    }
    Ok(())
}

/// e.g. `NGUID 00112233..., UUID 1234abcd-...`.
fn describe(ids: &[NsDescriptor]) -> String {
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let parts: Vec<String> = ids
        .iter()
        .map(|d| match d {
            NsDescriptor::Eui64(e) => format!("EUI-64 {}", hex(e)),
            NsDescriptor::Nguid(n) => format!("NGUID {}", hex(n)),
            NsDescriptor::Uuid(u) => format!("UUID {}", crate::host::options::format_uuid(u)),
            NsDescriptor::Csi(c) => format!("CSI {c}"),
        })
        .collect();
    if parts.is_empty() {
        "without identifiers".into()
    } else {
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(list: &[(u32, Vec<NsDescriptor>)]) -> NamespaceIds {
        list.iter().cloned().collect()
    }

    #[test]
    fn shared_namespaces_must_agree() {
        let addr = "127.0.0.1:4420".parse().unwrap();
        let a = ids(&[
            (
                1,
                vec![NsDescriptor::Nguid([1; 16]), NsDescriptor::Uuid([2; 16])],
            ),
            (2, vec![NsDescriptor::Nguid([3; 16])]),
        ]);
        // Same identifiers in another order, and a namespace only one side has: the same.
        let b = ids(&[
            (
                1,
                vec![NsDescriptor::Uuid([2; 16]), NsDescriptor::Nguid([1; 16])],
            ),
            (7, vec![NsDescriptor::Nguid([9; 16])]),
        ]);
        check_same("nqn.x", &a, 1, addr, &b).unwrap();
        // Another NGUID for namespace 2: refused, naming it.
        let c = ids(&[(2, vec![NsDescriptor::Nguid([4; 16])])]);
        let err = check_same("nqn.x", &a, 1, addr, &c)
            .unwrap_err()
            .to_string();
        assert!(err.contains("namespace 2 is NGUID 0404"), "{err}");
        assert!(err.contains("path 1 (127.0.0.1:4420)"), "{err}");
        // An identifier fewer is a difference too.
        let d = ids(&[(1, vec![NsDescriptor::Nguid([1; 16])])]);
        assert!(check_same("nqn.x", &a, 1, addr, &d).is_err());
    }
}
