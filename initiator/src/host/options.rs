//! What a host says when it connects: where, to which subsystem, as whom, with how many queues.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use fabrik_proto::fabrics::nqn::DISCOVERY_NQN;
use fabrik_proto::fabrics::Transport;
use fabrik_proto::tcp::Digests;

/// Options of one controller association (the `nvme connect` options that matter here).
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    pub addr: SocketAddr,
    /// Subsystem NQN to connect to.
    pub subnqn: String,
    /// This host's NQN.
    pub hostnqn: String,
    /// This host's identifier (HOSTID in the Connect data).
    pub host_id: [u8; 16],
    /// I/O queues to ask for (Set Features Number of Queues); the controller may grant fewer.
    pub io_queues: u16,
    /// Entries per I/O queue (Connect SQSIZE + 1), clamped to CAP.MQES + 1 and MAXCMD.
    pub queue_size: u16,
    /// Keep Alive Timeout in ms; 0 disables keep-alive (one-shot discovery).
    pub kato_ms: u32,
    /// Header and data digests, asked for on every queue.
    pub digests: Digests,
    /// How long one command may take before the queue is torn down.
    pub command_timeout: Duration,
    /// Largest H2CData PDU to send, below the target's MAXH2CDATA (None: MAXH2CDATA). For
    /// exercising a target's reassembly of write data.
    pub h2c_data_limit: Option<u32>,
    /// The transport binding: NVMe/TCP, or NVMe/RDMA (needs the `rdma` feature).
    pub transport: Transport,
    /// Ask the controller to disable SQ flow control (Connect CATTR bit 2, nvme-cli's
    /// `--disable-sqflow`); a target may then complete reads with a SUCCESS-flagged C2HData.
    pub disable_sq_flow: bool,
    /// Local address every queue connects from (nvme-cli `--host-traddr`); NVMe/RDMA resolves
    /// the route from it.
    pub host_traddr: Option<IpAddr>,
    /// Local interface every NVMe/TCP queue connects through (nvme-cli `--host-iface`,
    /// SO_BINDTODEVICE: kernels before 5.7 allow it only with CAP_NET_RAW).
    pub host_iface: Option<String>,
    /// How long an NVMe/TCP queue with commands in flight keeps looking for their answers
    /// instead of sleeping until the socket wakes it (adaptive polling; zero: it always sleeps).
    pub poll_window: Duration,
    /// Runtimes for the I/O queues: queue N (from 1) is set up on, and runs on, the
    /// ((N - 1) % len)-th, with everything it does. Empty: the caller's runtime.
    pub io_runtimes: Vec<tokio::runtime::Handle>,
    /// DH-HMAC-CHAP: this host's secret (`DHHC-1:..`), used when the controller asks the host to
    /// authenticate (nvme-cli `--dhchap-secret`).
    pub dhchap_secret: Option<fabrik_proto::auth::Secret>,
    /// The controller's secret: the host then authenticates the controller too
    /// (`--dhchap-ctrl-secret`).
    pub dhchap_ctrl_secret: Option<fabrik_proto::auth::Secret>,
    /// TLS 1.3 on every NVMe/TCP queue with this configured PSK (nvme-cli `--tls`).
    pub tls: Option<crate::transport::tcp::tls::TlsKey>,
}

/// Defaults of the Linux host (`fabrics.h`): 128 entries per queue, 5 s keep-alive.
pub const DEFAULT_QUEUE_SIZE: u16 = 128;
pub const DEFAULT_KATO_MS: u32 = 5000;
/// The Linux host's I/O timeout (`io_timeout`, 30 s).
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

impl ConnectOptions {
    /// Options for an I/O controller of `subnqn`, with one I/O queue and a fresh random host
    /// identity (see [`HostIdentity`] to keep one across connections).
    pub fn new(addr: SocketAddr, subnqn: impl Into<String>) -> ConnectOptions {
        let host = HostIdentity::random();
        ConnectOptions {
            addr,
            subnqn: subnqn.into(),
            hostnqn: host.nqn,
            host_id: host.id,
            io_queues: 1,
            queue_size: DEFAULT_QUEUE_SIZE,
            kato_ms: DEFAULT_KATO_MS,
            digests: Digests::default(),
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            h2c_data_limit: None,
            disable_sq_flow: false,
            transport: Transport::Tcp,
            host_traddr: None,
            host_iface: None,
            poll_window: Duration::ZERO,
            io_runtimes: Vec::new(),
            dhchap_secret: None,
            dhchap_ctrl_secret: None,
            tls: None,
        }
    }

    /// Options for a one-shot discovery controller: the well-known discovery NQN, no I/O queues,
    /// keep-alive off (as `nvme discover`).
    pub fn discovery(addr: SocketAddr) -> ConnectOptions {
        ConnectOptions {
            io_queues: 0,
            kato_ms: 0,
            ..ConnectOptions::new(addr, DISCOVERY_NQN)
        }
    }

    /// The same options as host `host`.
    pub fn with_host(mut self, host: &HostIdentity) -> ConnectOptions {
        self.hostnqn = host.nqn.clone();
        self.host_id = host.id;
        self
    }
}

/// A host's NQN and identifier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostIdentity {
    pub nqn: String,
    pub id: [u8; 16],
}

impl HostIdentity {
    /// A random UUID (version 4) as identifier and `nqn.2014-08.org.nvmexpress:uuid:<uuid>` as NQN,
    /// the form nvme-cli generates.
    pub fn random() -> HostIdentity {
        let id = random_uuid();
        HostIdentity {
            nqn: format!("nqn.2014-08.org.nvmexpress:uuid:{}", format_uuid(&id)),
            id,
        }
    }

    /// A host with this NQN and a random identifier.
    pub fn with_nqn(nqn: impl Into<String>) -> HostIdentity {
        HostIdentity {
            nqn: nqn.into(),
            id: random_uuid(),
        }
    }
}

/// A random version 4 UUID (RFC 4122 byte order).
pub fn random_uuid() -> [u8; 16] {
    let mut id = random_bytes();
    id[6] = (id[6] & 0x0f) | 0x40; // version 4
    id[8] = (id[8] & 0x3f) | 0x80; // RFC 4122 variant
    id
}

/// Lower-case hyphenated form, e.g. `123e4567-e89b-42d3-a456-426614174000`.
pub fn format_uuid(id: &[u8; 16]) -> String {
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// 16 random bytes from the kernel; falls back to hashing the clock and process id, which is
/// unique enough for a host identifier.
fn random_bytes() -> [u8; 16] {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .is_ok()
    {
        return bytes;
    }
    use std::hash::{BuildHasher, Hasher};
    let state = std::collections::hash_map::RandomState::new();
    for (i, half) in bytes.chunks_mut(8).enumerate() {
        let mut hasher = state.build_hasher();
        hasher.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos(),
        );
        hasher.write_u32(std::process::id());
        hasher.write_usize(i);
        half.copy_from_slice(&hasher.finish().to_le_bytes());
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_host_nqn_has_the_uuid_form() {
        let host = HostIdentity::random();
        let uuid = host
            .nqn
            .strip_prefix("nqn.2014-08.org.nvmexpress:uuid:")
            .unwrap();
        assert_eq!(uuid.len(), 36);
        assert_eq!(uuid, format_uuid(&host.id));
        assert_eq!(&uuid[14..15], "4");
        assert_ne!(HostIdentity::random(), host);
    }

    #[test]
    fn discovery_options() {
        let opts = ConnectOptions::discovery("127.0.0.1:8009".parse().unwrap());
        assert_eq!(opts.subnqn, DISCOVERY_NQN);
        assert_eq!((opts.io_queues, opts.kato_ms), (0, 0));
    }
}
