//! Hosts' DH-HMAC-CHAP keys: checked as the API sets them, and handed to the controllers.

use std::sync::Arc;

use fabrik_api::models as api;
use fabrik_api::{Management, MgmtResult};

use super::{invalid, Manager};
use crate::secrets::SecretText;
use crate::state::{HostKeys, HostState, State};

/// A host's keys from an API request: None without a secret; a bad secret, hash or group
/// name, or a controller secret alone, is 422 (the message never repeats a secret).
pub(super) fn keys(
    secret: &Option<String>,
    ctrl_secret: &Option<String>,
    hash: &Option<String>,
    dhgroup: &Option<String>,
) -> MgmtResult<Option<HostKeys>> {
    let Some(secret) = secret else {
        if ctrl_secret.is_some() || hash.is_some() || dhgroup.is_some() {
            return Err(invalid(
                "`dhchap_ctrl_secret`, `dhchap_hash` and `dhchap_dhgroup` need `dhchap_secret`",
            ));
        }
        return Ok(None);
    };
    let keys = HostKeys {
        secret: SecretText::new(secret.clone()),
        ctrl_secret: ctrl_secret.clone().map(SecretText::new),
        hash: hash.clone(),
        dhgroup: dhgroup.clone(),
    };
    keys.live().map_err(|e| invalid(format!("{e:#}")))?;
    Ok(Some(keys))
}

impl Manager {
    /// `PUT /hosts/{nqn}/qos`: the host's limits replaced (all null: none); a host not yet
    /// registered is.
    pub(super) fn replace_host_qos(&self, nqn: &str, req: api::QosLimits) -> MgmtResult<api::Host> {
        super::check_nqn("host NQN", nqn)?;
        crate::state::check_qos(&req).map_err(|e| invalid(format!("{e:#}")))?;
        let qos = (!req.is_empty()).then_some(req);
        self.mutate(|st| {
            match st.hosts.iter_mut().find(|h| h.nqn == nqn) {
                Some(h) => h.qos = qos,
                None => st.hosts.push(HostState {
                    nqn: nqn.to_string(),
                    name: None,
                    dhchap: None,
                    qos,
                }),
            }
            Ok(())
        })?;
        self.host(nqn)
    }

    /// Hands the hosts' limits to their controllers, live ones included.
    pub(super) fn apply_host_qos(&self, st: &State) {
        self.target.set_host_qos(
            st.hosts
                .iter()
                .filter_map(|h| h.qos.as_ref().map(|q| (h.nqn.as_str(), q))),
        );
    }

    /// Hands the hosts' keys to the controllers (checked when they were set).
    pub(super) fn apply_host_auth(&self, st: &State) {
        let mut auth = std::collections::HashMap::new();
        for h in &st.hosts {
            if let Some(k) = &h.dhchap {
                match k.live() {
                    Ok(live) => {
                        auth.insert(h.nqn.clone(), Arc::new(live));
                    }
                    Err(e) => tracing::error!(host = %h.nqn, "keys not usable: {e:#}"),
                }
            }
        }
        self.target.set_host_auth(auth);
    }

    /// `PUT /hosts/{nqn}/keys` (see `Management::set_host_keys`).
    pub(super) fn replace_host_keys(
        &self,
        nqn: &str,
        req: api::HostKeysRequest,
    ) -> MgmtResult<api::Host> {
        super::check_nqn("host NQN", nqn)?;
        let keys = keys(
            &req.dhchap_secret,
            &req.dhchap_ctrl_secret,
            &req.dhchap_hash,
            &req.dhchap_dhgroup,
        )?;
        self.mutate(|st| {
            match st.hosts.iter_mut().find(|h| h.nqn == nqn) {
                Some(h) => h.dhchap = keys,
                None => st.hosts.push(HostState {
                    nqn: nqn.to_string(),
                    name: None,
                    dhchap: keys,
                    qos: None,
                }),
            }
            Ok(())
        })?;
        self.host(nqn)
    }
}
