//! This I/O module's side of the management API: its ANA groups' states as its ports report
//! them, and maintenance (every group inaccessible, for a planned failover).

use fabrik_api::models as api;
use fabrik_api::MgmtResult;
use fabrik_proto::nvme::log::ana_state;

use super::{not_found, Manager};
use crate::state::{AnaSetting, State};

impl Manager {
    /// Group `grpid`'s state as `st` makes it: inaccessible in maintenance; else as an operator
    /// set it; else the module's default (its own group optimized, the other module's
    /// non-optimized; a box of one module reports its one group optimized).
    pub(super) fn ana_setting(&self, st: &State, grpid: u32) -> AnaSetting {
        if st.maintenance {
            return AnaSetting::Inaccessible;
        }
        st.ana_groups
            .get(&grpid)
            .copied()
            .unwrap_or_else(|| self.default_ana_setting(grpid))
    }

    fn default_ana_setting(&self, grpid: u32) -> AnaSetting {
        match self.target.module {
            Some(m) if m.own_group() != grpid => AnaSetting::NonOptimized,
            _ => AnaSetting::Optimized,
        }
    }

    /// Makes every group's live state follow `new` (at start too: the groups start optimized).
    pub(super) fn apply_ana(&self, new: &State) {
        for grpid in 1..=self.target.ana.groups() {
            let state = self.ana_setting(new, grpid);
            if self.target.set_ana_state(grpid, state.code()) {
                tracing::info!("ANA group {grpid} is now {state:?}");
            }
        }
    }

    fn ana_group_view(&self, grpid: u32) -> Option<api::AnaGroup> {
        let ana = &self.target.ana;
        Some(api::AnaGroup {
            id: grpid,
            state: match ana.state(grpid)? {
                ana_state::OPTIMIZED => api::AnaState::Optimized,
                ana_state::NON_OPTIMIZED => api::AnaState::NonOptimized,
                ana_state::INACCESSIBLE => api::AnaState::Inaccessible,
                ana_state::PERSISTENT_LOSS => api::AnaState::PersistentLoss,
                _ => api::AnaState::Change,
            },
            change_count: ana.change_count(),
        })
    }

    pub(super) fn ana_groups_view(&self) -> Vec<api::AnaGroup> {
        (1..=self.target.ana.groups())
            .filter_map(|g| self.ana_group_view(g))
            .collect()
    }

    pub(super) fn ana_group_by_id(&self, id: u32) -> MgmtResult<api::AnaGroup> {
        self.ana_group_view(id)
            .ok_or_else(|| not_found(format!("no ANA group {id}")))
    }

    pub(super) fn put_ana_group(
        &self,
        id: u32,
        req: api::AnaGroupRequest,
    ) -> MgmtResult<api::AnaGroup> {
        self.ana_group_by_id(id)?;
        let setting = match req.state {
            api::AnaState::Optimized => AnaSetting::Optimized,
            api::AnaState::NonOptimized => AnaSetting::NonOptimized,
            api::AnaState::Inaccessible => AnaSetting::Inaccessible,
            api::AnaState::PersistentLoss => AnaSetting::PersistentLoss,
            api::AnaState::Change => AnaSetting::Change,
        };
        let default = self.default_ana_setting(id);
        self.mutate(|st| {
            if setting == default {
                st.ana_groups.remove(&id);
            } else {
                st.ana_groups.insert(id, setting);
            }
            Ok(())
        })?;
        self.ana_group_by_id(id)
    }

    pub(super) fn module_view(&self) -> api::Module {
        let st = self.state();
        let maintenance = st.maintenance;
        let io_in_flight = (self.target.controllers().iter())
            .filter(|c| !c.is_discovery())
            .map(|c| c.io_in_flight())
            .sum();
        api::Module {
            name: self.target.module.map(|m| m.name().to_string()),
            maintenance,
            drained: maintenance && io_in_flight == 0,
            io_in_flight,
            ana_groups: self.ana_groups_view(),
            peer: self.peer.as_ref().map(|p| p.url().to_string()),
            config_sync: self.config_sync(&st),
            config_generation: st.config_generation,
        }
    }

    pub(super) fn put_module(&self, req: api::ModuleRequest) -> MgmtResult<api::Module> {
        self.mutate(|st| {
            st.maintenance = req.maintenance;
            Ok(())
        })?;
        if req.maintenance {
            tracing::info!(
                "module in maintenance: every ANA group is inaccessible through its ports"
            );
        }
        Ok(self.module_view())
    }
}
