//! The target's configuration model at run time: Namespaces backed by Drives, and the Ports
//! hosts reach them through. Subsystems, which hold namespaces and the controllers of the hosts
//! connected, are in `controller` (see `controller::registry` for why).

pub mod reservation;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use fabrik_proto::fabrics::discovery::{adrfam, DiscoveryLogEntry, Tsas};
pub use fabrik_proto::fabrics::Transport;

use crate::backend::Drive;
use crate::stats::NamespaceStats;
use reservation::{HostId, Reservations};

/// A drive exported as a namespace, with the counters SMART and metrics report.
pub struct Namespace {
    pub nsid: u32,
    /// Name of the drive (e.g. "07"), for logs.
    pub drive_id: String,
    pub drive: Arc<dyn Drive>,
    pub nguid: [u8; 16],
    pub uuid: [u8; 16],
    /// The ANA group it belongs to (ANAGRPID; see `crate::module::ana_group_of`).
    pub ana_group: u32,
    /// False while the drive cannot serve I/O (commands get Namespace Not Ready).
    pub ready: AtomicBool,
    /// Taken out of its subsystem (removed or replaced): a command admitted before looks
    /// its NSID up again (see `Controller::run_io`).
    removed: AtomicBool,
    pub stats: NamespaceStats,
    /// Its drive's persistent reservation, as the management layer last made it.
    reservations: RwLock<Arc<Reservations>>,
    /// A reservation restricts access: the one load an I/O command makes when none does.
    reserved: AtomicBool,
    /// Its drive's I/O limits, once the drive has had any (see `crate::qos`).
    pub qos: std::sync::OnceLock<Arc<crate::qos::Limiter>>,
}

impl Namespace {
    pub fn new(nsid: u32, drive_id: &str, drive: Arc<dyn Drive>, identity_seed: &str) -> Namespace {
        let nguid = stable_id(identity_seed, b"nguid");
        let mut uuid = stable_id(identity_seed, b"uuid");
        // RFC 4122 version 4 / variant 1 bits, so tools display a well-formed UUID.
        uuid[6] = (uuid[6] & 0x0f) | 0x40;
        uuid[8] = (uuid[8] & 0x3f) | 0x80;
        Namespace {
            nsid,
            drive_id: drive_id.to_string(),
            drive,
            nguid,
            uuid,
            ana_group: 1,
            ready: AtomicBool::new(true),
            removed: AtomicBool::new(false),
            stats: NamespaceStats::default(),
            reservations: RwLock::default(),
            reserved: AtomicBool::new(false),
            qos: std::sync::OnceLock::new(),
        }
    }

    /// In ANA group `grpid` rather than 1.
    pub fn in_ana_group(mut self, grpid: u32) -> Namespace {
        self.ana_group = grpid;
        self
    }

    /// Its drive's limiter, when the drive has limits.
    pub fn limiter(&self) -> Option<&crate::qos::Limiter> {
        self.qos.get().map(|l| &**l).filter(|l| l.enabled())
    }

    pub fn block_size(&self) -> u32 {
        self.drive.info().block_size
    }

    /// Namespace size in logical blocks.
    pub fn blocks(&self) -> u64 {
        self.drive.info().capacity / self.block_size() as u64
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    pub fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }

    /// Ready, and still its subsystem's: a command may use it as it was looked up.
    pub fn serves_io(&self) -> bool {
        self.is_ready() && !self.is_removed()
    }

    /// Its subsystem let it go (see `Subsystem::remove_namespace`).
    pub fn mark_removed(&self) {
        self.removed.store(true, Ordering::Release);
    }

    pub fn reservations(&self) -> Arc<Reservations> {
        self.reservations.read().unwrap().clone()
    }

    /// Takes its drive's reservation state as it now is (persisted, on both modules).
    pub fn set_reservations(&self, r: &Reservations) {
        let mut cur = self.reservations.write().unwrap();
        if **cur != *r {
            self.reserved.store(r.restricts(), Ordering::Release);
            *cur = Arc::new(r.clone());
        }
    }

    /// Whether host `host` may read (`write` false) or write now: Reservation Conflict if a
    /// reservation keeps it out.
    pub fn check_access(&self, host: &HostId, write: bool) -> Result<(), fabrik_proto::Status> {
        if !self.reserved.load(Ordering::Acquire) {
            return Ok(());
        }
        self.reservations.read().unwrap().access(host, write)
    }
}

/// A listener: transport, address, and the port ID the discovery log reports.
#[derive(Clone, Debug)]
pub struct Port {
    pub id: u16,
    pub transport: Transport,
    pub addr: SocketAddr,
    pub caps: TransportCaps,
}

impl Port {
    /// The discovery log entry of `subnqn` (of `subtype`) reached through this port at `addr`
    /// (the port's own address, or where a host reached a wildcard listener).
    pub fn log_entry(&self, addr: SocketAddr, subtype: u8, subnqn: &str) -> DiscoveryLogEntry {
        DiscoveryLogEntry {
            trtype: self.transport.trtype(),
            adrfam: if addr.is_ipv4() {
                adrfam::IPV4
            } else {
                adrfam::IPV6
            },
            subtype,
            treq: self.caps.treq,
            portid: self.id,
            cntlid: 0xffff,
            asqsz: 32,
            eflags: 0,
            trsvcid: addr.port().to_string(),
            subnqn: subnqn.to_string(),
            traddr: addr.ip().to_string(),
            tsas: self.caps.tsas,
        }
    }
}

/// What a port's transport offers hosts, as Identify and the discovery log report it. The
/// transport's listener fills it in when it binds, so controllers read it and never ask which
/// transport they run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransportCaps {
    /// Data may be described by keyed SGLs: host memory the controller reads and writes
    /// remotely (Identify SGLS bit 2).
    pub keyed_sgls: bool,
    /// Bytes of data an I/O command capsule may carry after its SQE (Identify IOCCSZ; 0: none,
    /// and no SGL offsets either).
    pub in_capsule_data: u32,
    /// The transport specific address subtype of the port's discovery log entries.
    pub tsas: Tsas,
    /// TREQ of those entries: bits 1:0 the secure channel (0 not specified, 1 required, 2
    /// not required).
    pub treq: u8,
}

/// TLS on an NVMe/TCP port (nvmet's `addr_tsas` and `addr_treq`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TlsMode {
    /// Clear text only.
    #[default]
    None,
    /// TLS or clear text, as the host begins (TREQ "not required").
    Allowed,
    /// TLS only (TREQ "required").
    Required,
}

impl TlsMode {
    pub const ALL: [TlsMode; 3] = [TlsMode::None, TlsMode::Allowed, TlsMode::Required];

    pub fn name(self) -> &'static str {
        match self {
            TlsMode::None => "none",
            TlsMode::Allowed => "allowed",
            TlsMode::Required => "required",
        }
    }

    pub fn from_name(name: &str) -> Option<TlsMode> {
        TlsMode::ALL.into_iter().find(|m| m.name() == name)
    }

    pub fn is_none(&self) -> bool {
        *self == TlsMode::None
    }

    /// The discovery log's TREQ secure channel bits.
    pub fn treq(self) -> u8 {
        use fabrik_proto::fabrics::discovery::treq;
        match self {
            TlsMode::None => treq::NOT_SPECIFIED,
            TlsMode::Required => treq::REQUIRED,
            TlsMode::Allowed => treq::NOT_REQUIRED,
        }
    }

    /// The mode a port's TREQ says.
    pub fn from_treq(bits: u8) -> TlsMode {
        use fabrik_proto::fabrics::discovery::treq;
        match bits & treq::SECURE_CHANNEL_MASK {
            treq::REQUIRED => TlsMode::Required,
            treq::NOT_REQUIRED => TlsMode::Allowed,
            _ => TlsMode::None,
        }
    }
}

/// A stable 16-byte identifier derived from a name (FNV-1a, 128-bit): NGUIDs and UUIDs stay the
/// same across restarts and differ between drives and boxes, as the Linux host requires.
pub fn stable_id(seed: &str, salt: &[u8]) -> [u8; 16] {
    const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
    const PRIME: u128 = 0x0000000001000000000000000000013B;
    let mut h = OFFSET;
    for &b in seed.as_bytes().iter().chain(b"/").chain(salt) {
        h ^= b as u128;
        h = h.wrapping_mul(PRIME);
    }
    h.to_be_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_ids_differ_and_repeat() {
        assert_eq!(stable_id("box:00", b"nguid"), stable_id("box:00", b"nguid"));
        assert_ne!(stable_id("box:00", b"nguid"), stable_id("box:01", b"nguid"));
        assert_ne!(stable_id("box:00", b"nguid"), stable_id("box:00", b"uuid"));
    }
}
