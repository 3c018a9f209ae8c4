//! TEMPORARY (replaced by the peer-mem branch).
use crate::error::HostError;
use crate::host::session::Session;
use crate::transport::peer::{PeerMemory, Registration};
use std::sync::Arc;
impl Session {
    pub async fn register_peer(
        self: &Arc<Self>,
        _queue: usize,
        _mem: &Arc<dyn PeerMemory>,
    ) -> Result<(Registration, String), HostError> {
        Err(HostError::PeerMemory {
            nic: "(NVMe/TCP)".into(),
            reason: "NVMe/TCP carries data in the byte stream".into(),
        })
    }
    pub async fn read_peer(
        self: &Arc<Self>,
        _queue: usize,
        _nsid: u32,
        _slba: u64,
        _nlb: u32,
        _mem: &Arc<dyn PeerMemory>,
        _offset: usize,
    ) -> Result<(), HostError> {
        unimplemented!()
    }
    #[allow(clippy::too_many_arguments)]
    pub async fn write_peer(
        self: &Arc<Self>,
        _queue: usize,
        _nsid: u32,
        _slba: u64,
        _nlb: u32,
        _mem: &Arc<dyn PeerMemory>,
        _offset: usize,
        _fua: bool,
    ) -> Result<(), HostError> {
        unimplemented!()
    }
}
