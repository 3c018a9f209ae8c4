//! Hosts in the state, and their DH-HMAC-CHAP keys (see `crate::secrets` for how the keys are
//! kept at rest).

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use std::path::Path;

use crate::secrets::{Sealer, SecretText, SEAL_KEY_FILE};

/// The hosts as the state file keeps them: secrets sealed (None: no host has any).
pub(super) fn sealed(hosts: &[HostState], dir: &Path) -> std::io::Result<Option<Vec<HostState>>> {
    if hosts.iter().all(|h| h.dhchap.is_none()) {
        return Ok(None);
    }
    let sealer = Sealer::open_or_create(dir)?;
    let mut out = hosts.to_vec();
    for t in out
        .iter_mut()
        .flat_map(|h| h.dhchap.iter_mut())
        .flat_map(|k| k.secrets_mut())
    {
        *t = sealer.seal(t)?;
    }
    Ok(Some(out))
}

/// Opens the sealed secrets of hosts read from the state file at `path` (a secret written
/// by hand is taken as it is, and sealed at the next save).
pub(super) fn unseal(hosts: &mut [HostState], path: &Path) -> anyhow::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut sealer = None;
    for h in hosts {
        for t in h.dhchap.iter_mut().flat_map(|k| k.secrets_mut()) {
            if !t.is_sealed() {
                continue;
            }
            if sealer.is_none() {
                sealer = Some(Sealer::open(dir)?.with_context(|| {
                    format!(
                        "the state file {} holds sealed secrets but {} is missing",
                        path.display(),
                        dir.join(SEAL_KEY_FILE).display()
                    )
                })?);
            }
            let opened = sealer.as_ref().expect("opened above").unseal(t);
            *t = opened.with_context(|| format!("host {}", h.nqn))?;
        }
    }
    Ok(())
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HostState {
    pub nqn: String,
    pub name: Option<String>,
    /// DH-HMAC-CHAP: with keys, the host must authenticate on every subsystem it reaches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhchap: Option<HostKeys>,
    /// Its I/O limits on this box.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<fabrik_api::models::QosLimits>,
}

/// A host's DH-HMAC-CHAP secrets (`DHHC-1:` texts; sealed in the state file, see `secrets`)
/// and, where set, the one hash function and DH group it must use.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HostKeys {
    pub secret: SecretText,
    /// The controller's secret, for a host that authenticates the controller too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ctrl_secret: Option<SecretText>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhgroup: Option<String>,
}

/// QoS limits that can hold (see `crate::qos::check`).
pub fn check_qos(q: &fabrik_api::models::QosLimits) -> anyhow::Result<()> {
    crate::qos::check(q).map_err(anyhow::Error::msg)
}

impl HostState {
    /// A host of the config file; its NQN and keys checked.
    pub fn from_entry(e: &fabrik_api::config::HostEntry) -> anyhow::Result<HostState> {
        fabrik_proto::fabrics::nqn::Nqn::new(&e.nqn).context("the host NQN")?;
        let dhchap = match &e.dhchap_secret {
            None => {
                if e.dhchap_ctrl_secret.is_some()
                    || e.dhchap_hash.is_some()
                    || e.dhchap_dhgroup.is_some()
                {
                    bail!("dhchap_ctrl_secret, dhchap_hash and dhchap_dhgroup need dhchap_secret");
                }
                None
            }
            Some(secret) => {
                let keys = HostKeys {
                    secret: SecretText::new(secret.clone()),
                    ctrl_secret: e.dhchap_ctrl_secret.clone().map(SecretText::new),
                    hash: e.dhchap_hash.clone(),
                    dhgroup: e.dhchap_dhgroup.clone(),
                };
                keys.live()?;
                Some(keys)
            }
        };
        let qos = e.qos.clone().filter(|q| !q.is_empty());
        if let Some(q) = &qos {
            check_qos(q)?;
        }
        Ok(HostState {
            nqn: e.nqn.clone(),
            name: e.name.clone(),
            dhchap,
            qos,
        })
    }
}

impl HostKeys {
    /// Checks the secrets and names; the live form the controllers use.
    pub fn live(&self) -> anyhow::Result<crate::controller::auth::HostAuth> {
        use fabrik_proto::auth::{exchange::Policy, DhGroup, HashId, Secret};
        let secret = |t: &SecretText, what: &str| {
            Secret::parse(t.expose()).with_context(|| format!("the {what}"))
        };
        let mut policy = Policy::default();
        if let Some(h) = &self.hash {
            let h = HashId::from_name(h)
                .with_context(|| format!("hash {h:?}: one of sha256, sha384, sha512"))?;
            policy.hashes = vec![h];
        }
        if let Some(g) = &self.dhgroup {
            let g = DhGroup::from_name(g).with_context(|| {
                format!("DH group {g:?}: one of null, ffdhe2048, ffdhe3072, ffdhe4096, ffdhe6144, ffdhe8192")
            })?;
            policy.dhgroups = vec![g];
        }
        Ok(crate::controller::auth::HostAuth {
            secret: secret(&self.secret, "DH-HMAC-CHAP secret")?,
            ctrl_secret: match &self.ctrl_secret {
                Some(c) => Some(secret(c, "controller's DH-HMAC-CHAP secret")?),
                None => None,
            },
            policy,
        })
    }

    pub(super) fn secrets_mut(&mut self) -> impl Iterator<Item = &mut SecretText> {
        std::iter::once(&mut self.secret).chain(self.ctrl_secret.as_mut())
    }
}
