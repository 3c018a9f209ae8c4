//! Discovery Information Management (TP8010): boxes and hosts registering with this fabrikd
//! when it is a central discovery controller (`crate::cdc`). Admitted only there.

use fabrik_proto::fabrics::dim::DimData;
use fabrik_proto::Status;

use super::queue::Response;
use super::Controller;
use crate::cdc::Change;

impl Controller {
    pub(super) fn discovery_info_management(&self, task: u8, data: &[u8]) -> Response {
        let Some(dir) = &self.target.cdc else {
            return Response::status(Status::INVALID_OPCODE);
        };
        let dim = match DimData::decode(data) {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(hostnqn = %self.host_label(), "discovery information refused: {e}");
                return Response::status(Status::INVALID_FIELD);
            }
        };
        match dir.manage(task, &dim, self.cntlid, self.port.peer_addr.ip()) {
            Ok(Some(Change::Boxes)) => {
                // Hosts' logs change: a new generation, and a notice to persistent connections.
                self.target.discovery_changed();
                Response::ok()
            }
            Ok(_) => Response::ok(),
            Err(status) => Response::status(status),
        }
    }
}
