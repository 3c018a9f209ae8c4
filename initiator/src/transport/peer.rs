//! TEMPORARY (replaced by the peer-mem branch): the peer-memory interface.
pub trait PeerMemory: Send + Sync {
    fn id(&self) -> u64;
    fn addr(&self) -> u64;
    fn len(&self) -> usize;
    fn export_dmabuf(&self) -> Option<Result<std::os::fd::OwnedFd, String>>;
    fn pointer_registrable(&self) -> bool;
}
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Registration {
    DmaBuf,
    Pointer,
}
