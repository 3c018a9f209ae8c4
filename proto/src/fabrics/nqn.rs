//! NVMe Qualified Names.

use std::fmt;

/// The well-known discovery subsystem NQN.
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";

/// Longest NQN the spec allows, in bytes (excluding the terminating NUL).
pub const NQN_MAX_LEN: usize = 223;

/// Prefix of NQNs made from a UUID (what nvme-cli's `gen-hostnqn` writes to /etc/nvme/hostnqn).
pub const UUID_NQN_PREFIX: &str = "nqn.2014-08.org.nvmexpress:uuid:";

/// `8-4-4-4-12` hex digits.
fn is_uuid(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

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
    /// Validates `s` by the NVMe naming rules (base spec 4.5, "NVM Qualified Names"):
    /// - UUID form: `nqn.2014-08.org.nvmexpress:uuid:` followed by exactly a UUID written
    ///   8-4-4-4-12 hex digits (either case), as nvme-cli's `gen-hostnqn` makes;
    /// - otherwise `nqn.` + `yyyy-mm` (digits, month 01..12) + `.` + a reverse domain name of
    ///   at least one character without whitespace or control characters, optionally followed
    ///   by `:` and a user part of anything but control characters.
    ///
    /// The well-known discovery NQN is valid by the second rule.
    pub fn new(s: &str) -> Result<Nqn, NqnError> {
        if s.is_empty() {
            return Err(NqnError::Empty);
        }
        if s.len() > NQN_MAX_LEN {
            return Err(NqnError::TooLong(s.len()));
        }
        if let Some(uuid) = s.strip_prefix(UUID_NQN_PREFIX) {
            return if is_uuid(uuid) {
                Ok(Nqn(s.to_string()))
            } else {
                Err(NqnError::Uuid(uuid.to_string()))
            };
        }
        let format = || NqnError::Format(s.to_string());
        let rest = s.strip_prefix("nqn.").ok_or_else(format)?;
        let date = rest.as_bytes().get(..8).ok_or_else(format)?;
        let digits = |r: std::ops::Range<usize>| date[r].iter().all(u8::is_ascii_digit);
        if !(digits(0..4) && date[4] == b'-' && digits(5..7) && date[7] == b'.') {
            return Err(format());
        }
        let month = (date[5] - b'0') * 10 + (date[6] - b'0');
        if !(1..=12).contains(&month) {
            return Err(format());
        }
        // The date is ASCII, so byte 8 is a char boundary.
        let (domain, user) = match rest[8..].split_once(':') {
            Some((domain, user)) => (domain, Some(user)),
            None => (&rest[8..], None),
        };
        if domain.is_empty() || domain.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format());
        }
        if user.is_some_and(|u| u.chars().any(char::is_control)) {
            return Err(format());
        }
        Ok(Nqn(s.to_string()))
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn accepted() {
        for s in [
            DISCOVERY_NQN,
            "nqn.2014-08.org.nvmexpress:uuid:4c4c4544-0035-4810-8051-b4c04f4a3732",
            "nqn.2014-08.org.nvmexpress:uuid:F81D4FAE-7DEC-11D0-A765-00A0C91E6BF6",
            "nqn.2024-01.io.fabrik:jbof:drive-07",
            "nqn.2024-01.io.fabrik",
            "nqn.2016-06.io.spdk:cnode1",
            "nqn.1999-12.x:",
            "nqn.2014-08.com.example:nvme:nvm-subsystem-sn-d78432",
            "nqn.2014-08.com.example:user part with spaces",
            "nqn.2024-01.io.fabrik:gr\u{fc}n",
        ] {
            let nqn = Nqn::new(s).unwrap_or_else(|e| panic!("{s}: {e}"));
            assert_eq!(nqn.as_str(), s);
            assert_eq!(nqn.to_string(), s);
            assert_eq!(s.parse::<Nqn>().unwrap(), nqn);
        }
        assert!(Nqn::new(DISCOVERY_NQN).unwrap().is_discovery());
        assert_eq!(Nqn::discovery(), Nqn::new(DISCOVERY_NQN).unwrap());
        assert!(!Nqn::new("nqn.2024-01.io.fabrik").unwrap().is_discovery());
        // Exactly 223 bytes.
        let long = format!("nqn.2024-01.io.fabrik:{}", "x".repeat(223 - 22));
        assert_eq!(long.len(), 223);
        assert!(Nqn::new(&long).is_ok());
    }

    #[test]
    fn rejected() {
        use NqnError::*;
        let long = format!("nqn.2024-01.io.fabrik:{}", "x".repeat(202));
        let cases: Vec<(&str, NqnError)> = vec![
            ("", Empty),
            (&long, TooLong(224)),
            ("nqn.2014-08.org.nvmexpress:uuid:", Uuid(String::new())),
            (
                "nqn.2014-08.org.nvmexpress:uuid:4c4c4544-0035-4810-8051-b4c04f4a373",
                Uuid("4c4c4544-0035-4810-8051-b4c04f4a373".into()),
            ),
            (
                "nqn.2014-08.org.nvmexpress:uuid:4c4c4544-0035-4810-8051-b4c04f4a37322",
                Uuid("4c4c4544-0035-4810-8051-b4c04f4a37322".into()),
            ),
            (
                "nqn.2014-08.org.nvmexpress:uuid:4c4c4544x0035-4810-8051-b4c04f4a3732",
                Uuid("4c4c4544x0035-4810-8051-b4c04f4a3732".into()),
            ),
            (
                "nqn.2014-08.org.nvmexpress:uuid:4c4c4544-0035-4810-8051-b4c04f4a373g",
                Uuid("4c4c4544-0035-4810-8051-b4c04f4a373g".into()),
            ),
            (
                "nqn.2014-08.org.nvmexpress:uuid:{4c4c4544-0035-4810-8051-b4c04f4a37}",
                Uuid("{4c4c4544-0035-4810-8051-b4c04f4a37}".into()),
            ),
        ];
        for (s, e) in cases {
            assert_eq!(Nqn::new(s), Err(e), "{s}");
        }
        for s in [
            "nqn",
            "nqn.",
            "iqn.2024-01.io.fabrik:x",
            "NQN.2024-01.io.fabrik",
            "nqn.24-01.io.fabrik",
            "nqn.2024-1.io.fabrik",
            "nqn.2024-00.io.fabrik",
            "nqn.2024-13.io.fabrik",
            "nqn.2024/01.io.fabrik",
            "nqn.2024-01io.fabrik",
            "nqn.2024-01.",
            "nqn.2024-01.:user",
            "nqn.2024-01.io fabrik",
            "nqn.2024-01.io.fab\trik",
            "nqn.2024-01.io.fabrik:bad\0nul",
            "nqn.2024-01.io.fabrik:bad\nline",
            "nqn.20a4-01.io.fabrik",
            "nqn.\u{e9}\u{e9}-01.io.fabrik",
            " nqn.2024-01.io.fabrik",
        ] {
            assert!(
                matches!(Nqn::new(s), Err(NqnError::Format(_))),
                "{s:?}: {:?}",
                Nqn::new(s)
            );
        }
    }

    #[test]
    fn errors_read_well() {
        assert_eq!(
            NqnError::TooLong(300).to_string(),
            "NQN is 300 bytes long; at most 223 are allowed"
        );
        assert!(Nqn::new("foo").unwrap_err().to_string().contains("\"foo\""));
    }

    proptest! {
        #[test]
        fn never_panics(s in ".{0,240}") {
            if let Ok(n) = Nqn::new(&s) {
                prop_assert!(n.as_str().starts_with("nqn."));
                prop_assert!(n.as_str().len() <= NQN_MAX_LEN);
            }
        }

        #[test]
        fn generated_names_are_valid(y in 0u32..10000, m in 1u32..=12, domain in "[a-z0-9.-]{1,40}", user in proptest::option::of("[ -~]{0,100}")) {
            let mut s = format!("nqn.{y:04}-{m:02}.{domain}");
            if let Some(u) = user {
                s = format!("{s}:{u}");
            }
            prop_assert!(Nqn::new(&s).is_ok(), "{}", s);
        }

        #[test]
        fn uuid_names_are_valid(u in "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}") {
            let s = format!("{UUID_NQN_PREFIX}{u}");
            prop_assert!(Nqn::new(&s).is_ok());
        }
    }
}
