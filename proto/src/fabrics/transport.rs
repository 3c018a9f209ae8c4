//! The NVMe-oF transports fabrik speaks, named once: the TRTYPE code of the discovery and
//! error logs, the lowercase name of configuration, command lines and the management API
//! ("tcp"), and the name people read ("NVMe/TCP").

use std::fmt;
use std::str::FromStr;

/// An NVMe-oF transport binding fabrik speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "lowercase")
)]
pub enum Transport {
    Tcp,
    Rdma,
}

impl Transport {
    pub const ALL: [Transport; 2] = [Transport::Tcp, Transport::Rdma];

    /// TRTYPE: the code of the discovery log entry and the error information log.
    pub const fn trtype(self) -> u8 {
        match self {
            Transport::Rdma => 1,
            Transport::Tcp => 3,
        }
    }

    /// The transport of a TRTYPE code; None for one fabrik does not speak (FC, loop, ...).
    pub fn from_trtype(code: u8) -> Option<Transport> {
        Transport::ALL.into_iter().find(|t| t.trtype() == code)
    }

    /// The lowercase name nvme-cli's `-t` takes: "tcp", "rdma".
    pub const fn as_str(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Rdma => "rdma",
        }
    }

    /// How people name it: "NVMe/TCP", "NVMe/RDMA".
    pub const fn human_name(self) -> &'static str {
        match self {
            Transport::Tcp => "NVMe/TCP",
            Transport::Rdma => "NVMe/RDMA",
        }
    }
}

/// The lowercase name.
impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not "tcp" or "rdma".
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown transport {0:?} (tcp or rdma)")]
pub struct UnknownTransport(pub String);

/// From the lowercase name, exactly.
impl FromStr for Transport {
    type Err = UnknownTransport;

    fn from_str(s: &str) -> Result<Transport, UnknownTransport> {
        Transport::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| UnknownTransport(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_codes() {
        for t in Transport::ALL {
            assert_eq!(Transport::from_trtype(t.trtype()), Some(t));
            assert_eq!(t.to_string().parse(), Ok(t));
        }
        let table: Vec<_> = Transport::ALL
            .iter()
            .map(|t| (t.trtype(), t.as_str(), t.human_name()))
            .collect();
        assert_eq!(table, [(3, "tcp", "NVMe/TCP"), (1, "rdma", "NVMe/RDMA")]);
        // FC, loop: codes of transports fabrik does not speak.
        assert_eq!(Transport::from_trtype(2), None);
        assert_eq!(Transport::from_trtype(254), None);
        assert_eq!(
            "TCP".parse::<Transport>().unwrap_err().to_string(),
            "unknown transport \"TCP\" (tcp or rdma)"
        );
    }
}
