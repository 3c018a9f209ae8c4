//! What the REST routes ask of the target. `fabrikd` implements it over its live state; tests
//! may implement it with a fake. Calls are synchronous and quick (mutations persist the state
//! file before they return); the routes run mutations on the blocking pool.

use crate::models::*;

/// Why an operation failed; each kind maps to one HTTP status.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum MgmtError {
    /// 404: the named resource does not exist.
    #[error("{0}")]
    NotFound(String),
    /// 409: the request conflicts with the current state (drive composed to another host,
    /// resource exists, port in use, ...).
    #[error("{0}")]
    Conflict(String),
    /// 422: the request is well-formed JSON but a value is invalid (malformed NQN, empty list, ...).
    #[error("{0}")]
    Invalid(String),
    /// 500: the target could not do it (state file not writable, ...); nothing was changed.
    #[error("{0}")]
    Internal(String),
    /// 503: something it needs cannot be reached now (the other I/O module); nothing was changed.
    #[error("{0}")]
    Unavailable(String),
}

pub type MgmtResult<T> = Result<T, MgmtError>;

pub trait Management: Send + Sync + 'static {
    fn box_name(&self) -> String;

    fn drives(&self) -> Vec<Drive>;
    fn drive(&self, id: &str) -> MgmtResult<Drive>;
    /// The operator's word that a drive that lost a write may take writes again; 409 when it
    /// has no fault.
    fn clear_drive_fault(&self, id: &str) -> MgmtResult<Drive>;
    /// Replaces the drive's I/O limits (its namespace's, whoever the host).
    fn set_drive_qos(&self, id: &str, req: QosLimits) -> MgmtResult<Drive>;

    fn subsystems(&self) -> Vec<Subsystem>;
    fn subsystem(&self, nqn: &str) -> MgmtResult<Subsystem>;
    fn create_subsystem(&self, req: SubsystemRequest) -> MgmtResult<Subsystem>;
    /// Refused (409) while a composition uses it.
    fn delete_subsystem(&self, nqn: &str) -> MgmtResult<()>;
    fn set_subsystem_access(&self, nqn: &str, req: AccessRequest) -> MgmtResult<Subsystem>;
    /// Whether only hosts with DH-HMAC-CHAP keys may connect (a host without keys gets
    /// Connect Invalid Host).
    fn set_subsystem_authentication(
        &self,
        nqn: &str,
        req: AuthenticationRequest,
    ) -> MgmtResult<Subsystem>;
    fn allow_host(&self, nqn: &str, host_nqn: &str) -> MgmtResult<Subsystem>;
    /// Tears down the host's controllers of this subsystem.
    fn disallow_host(&self, nqn: &str, host_nqn: &str) -> MgmtResult<Subsystem>;

    fn namespaces(&self, nqn: &str) -> MgmtResult<Vec<Namespace>>;
    fn add_namespace(&self, nqn: &str, req: NamespaceRequest) -> MgmtResult<Namespace>;
    fn remove_namespace(&self, nqn: &str, nsid: u32) -> MgmtResult<()>;

    fn hosts(&self) -> Vec<Host>;
    fn host(&self, nqn: &str) -> MgmtResult<Host>;
    fn add_host(&self, req: HostRequest) -> MgmtResult<Host>;
    /// Replaces the host's DH-HMAC-CHAP keys (registering the host if need be).
    fn set_host_keys(&self, nqn: &str, req: HostKeysRequest) -> MgmtResult<Host>;
    /// Replaces the host's I/O limits (registering the host if need be).
    fn set_host_qos(&self, nqn: &str, req: QosLimits) -> MgmtResult<Host>;
    /// Removes the host from every allow list (tearing its controllers down); refused (409)
    /// while a composition names it.
    fn delete_host(&self, nqn: &str) -> MgmtResult<()>;

    fn ports(&self) -> Vec<Port>;
    fn port(&self, id: u16) -> MgmtResult<Port>;
    /// Binds a new listener; 409 when the address is in use.
    fn add_port(&self, req: PortRequest) -> MgmtResult<Port>;
    /// Stops a listener (its connections close); refused (409) for the last port or one a
    /// composition names.
    fn delete_port(&self, id: u16) -> MgmtResult<()>;

    fn controllers(&self) -> Vec<Controller>;
    fn controller(&self, id: u64) -> MgmtResult<Controller>;
    fn disconnect_controller(&self, id: u64) -> MgmtResult<()>;

    fn ana_groups(&self) -> Vec<AnaGroup>;
    /// What is registered with this central discovery controller; NotFound on a box.
    fn cdc_registrations(&self) -> MgmtResult<Vec<CdcRegistration>>;
    fn ana_group(&self, id: u32) -> MgmtResult<AnaGroup>;
    /// Puts the group in `req.state` (kept across restarts).
    fn set_ana_group(&self, id: u32, req: AnaGroupRequest) -> MgmtResult<AnaGroup>;

    fn module(&self) -> Module;
    /// Puts the module into maintenance or back (kept across restarts).
    fn set_module(&self, req: ModuleRequest) -> MgmtResult<Module>;
    /// The configuration this module shares with the other.
    fn module_config(&self) -> ModuleConfig;
    /// The other module's change (or an operator's forced push), applied here.
    fn apply_module_config(&self, push: ModuleConfigPush) -> MgmtResult<ModuleConfig>;
    /// Makes the other module take this one's configuration (resolving a divergence).
    fn push_module_config(&self) -> MgmtResult<Module>;

    fn volumes(&self) -> Vec<Volume>;
    fn volume(&self, name: &str) -> MgmtResult<Volume>;
    /// Makes a volume over drives that no subsystem exports (their data is erased).
    fn create_volume(&self, req: VolumeRequest) -> MgmtResult<Volume>;
    /// Refused (409) while a composition uses it. Its drives go back to subsystems of their own.
    fn delete_volume(&self, name: &str) -> MgmtResult<()>;
    /// Fails a member, as an error from it would (fault injection, or a drive to be pulled).
    fn fail_volume_member(&self, name: &str, drive: &str) -> MgmtResult<Volume>;
    /// Adds a spare; a volume with a failed member starts rebuilding onto it.
    fn add_volume_spare(&self, name: &str, req: SpareRequest) -> MgmtResult<Volume>;
    fn set_volume_rebuild_limit(&self, name: &str, req: RebuildLimit) -> MgmtResult<Volume>;
    /// Starts a scrub; 409 while one runs or a member is lost.
    fn scrub_volume(&self, name: &str) -> MgmtResult<Volume>;

    fn compositions(&self) -> Vec<Composition>;
    fn composition(&self, id: &str) -> MgmtResult<Composition>;
    fn compose(&self, req: CompositionRequest) -> MgmtResult<Composition>;
    fn decompose(&self, id: &str) -> MgmtResult<()>;
}
