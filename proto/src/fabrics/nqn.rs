//! NVMe Qualified Names.

use std::fmt;

/// The well-known discovery subsystem NQN.
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";

/// Longest NQN the spec allows, in bytes (excluding the terminating NUL).
pub const NQN_MAX_LEN: usize = 223;

/// A validated NQN: `nqn.yyyy-mm.reverse.domain[:anything]`, or the UUID form
/// `nqn.2014-08.org.nvmexpress:uuid:<36-char uuid>`; at most 223 bytes of UTF-8.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Nqn(String);

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NqnError {
    #[error("NQN is empty")]
    Empty,
    #[error("NQN is {0} bytes long; at most 223 are allowed")]
    TooLong(usize),
    #[error("NQN must start with \"nqn.\" followed by a date as yyyy-mm and a reverse domain name: {0:?}")]
    Format(String),
    #[error("NQN in UUID form has an invalid UUID: {0:?}")]
    Uuid(String),
}

impl Nqn {
    pub fn new(s: &str) -> Result<Nqn, NqnError> {
        todo!()
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
    pub fn is_discovery(&self) -> bool {
        self.0 == DISCOVERY_NQN
    }
    pub fn discovery() -> Nqn {
        Nqn(DISCOVERY_NQN.to_string())
    }
}

impl fmt::Display for Nqn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Nqn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl std::str::FromStr for Nqn {
    type Err = NqnError;
    fn from_str(s: &str) -> Result<Nqn, NqnError> {
        Nqn::new(s)
    }
}
