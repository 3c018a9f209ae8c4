//! The CSI Identity service: the driver's name and version, and which services it runs here
//! (a controller plugin, a node plugin, or both in one process).

use crate::names;
use crate::pb::identity_server::Identity;
use crate::pb::plugin_capability::service::Type as Service;
use crate::pb::*;
use tonic::{Request, Response, Status};

pub struct IdentityService {
    pub controller: bool,
    /// Whether volumes and nodes carry racks. Advertised only then: a provisioner told of
    /// topology refuses nodes that report none.
    pub topology: bool,
}

#[tonic::async_trait]
impl Identity for IdentityService {
    async fn get_plugin_info(
        &self,
        _: Request<GetPluginInfoRequest>,
    ) -> Result<Response<GetPluginInfoResponse>, Status> {
        Ok(Response::new(GetPluginInfoResponse {
            name: names::DRIVER_NAME.to_string(),
            vendor_version: env!("CARGO_PKG_VERSION").to_string(),
            manifest: Default::default(),
        }))
    }

    async fn get_plugin_capabilities(
        &self,
        _: Request<GetPluginCapabilitiesRequest>,
    ) -> Result<Response<GetPluginCapabilitiesResponse>, Status> {
        let service = |t: Service| PluginCapability {
            r#type: Some(plugin_capability::Type::Service(
                plugin_capability::Service { r#type: t as i32 },
            )),
        };
        let mut capabilities = Vec::new();
        if self.controller {
            capabilities.push(service(Service::ControllerService));
        }
        if self.topology {
            capabilities.push(service(Service::VolumeAccessibilityConstraints));
        }
        Ok(Response::new(GetPluginCapabilitiesResponse {
            capabilities,
        }))
    }

    async fn probe(&self, _: Request<ProbeRequest>) -> Result<Response<ProbeResponse>, Status> {
        Ok(Response::new(ProbeResponse { ready: Some(true) }))
    }
}
