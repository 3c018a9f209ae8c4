//! Who may call the API, and the record of what they changed.
//!
//! Over TCP every call needs a bearer token: the box's admin token, or a client token of its
//! own with a scope (`admin`, or `read` for monitoring: GET only, anything else 403). The local
//! socket's file permissions are its credential (admin). Every call that may change something
//! (any method but GET and HEAD) goes into an append-only audit log, one JSON line each: when,
//! who (the client's name, never its token), what (method and path, never the body, which may
//! hold secrets) and the outcome (the HTTP status).

use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use axum::http::Method;
use serde::{Deserialize, Serialize};

/// What a token may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Every call.
    Admin,
    /// GET and HEAD only.
    Read,
}

impl Scope {
    pub fn allows(self, method: &Method) -> bool {
        self == Scope::Admin || method == Method::GET || method == Method::HEAD
    }
}

/// A client of the API with a token of its own.
#[derive(Clone, Debug)]
pub struct ApiClient {
    /// Names it in the audit log.
    pub name: String,
    pub token: String,
    pub scope: Scope,
}

/// The caller of a request, once its credential is checked (a request extension).
#[derive(Clone, Debug)]
pub struct Caller {
    pub name: String,
    pub scope: Scope,
}

/// The append-only audit log.
pub struct AuditLog {
    file: Mutex<std::fs::File>,
}

#[derive(Serialize)]
struct Entry<'a> {
    time: String,
    who: &'a str,
    method: &'a str,
    path: &'a str,
    status: u16,
}

impl AuditLog {
    /// Opens (or creates, 0600) the log at `path` for appending.
    pub fn open(path: &Path) -> std::io::Result<AuditLog> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .open(path)?;
        Ok(AuditLog {
            file: Mutex::new(file),
        })
    }

    /// Appends one entry and makes it durable before the answer goes out. A failure to write
    /// is logged; the change itself is already made.
    pub fn record(&self, who: &str, method: &Method, path: &str, status: u16) {
        let entry = Entry {
            time: now_rfc3339(),
            who,
            method: method.as_str(),
            path,
            status,
        };
        let mut line = serde_json::to_vec(&entry).expect("an audit entry serializes");
        line.push(b'\n');
        let mut f = self.file.lock().unwrap();
        if let Err(e) = f.write_all(&line).and_then(|_| f.sync_data()) {
            tracing::error!("cannot write the audit log: {e}");
        }
    }
}

/// UTC now as RFC 3339 with milliseconds ("2026-12-04T17:40:01.123Z").
fn now_rfc3339() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        now.subsec_millis()
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + (m <= 2) as i64, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_791), (2026, 12, 4));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn entries_are_json_lines_appended() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let log = AuditLog::open(&path).unwrap();
        log.record("admin", &Method::POST, "/api/v1/hosts", 201);
        drop(log);
        AuditLog::open(&path)
            .unwrap()
            .record("grafana", &Method::PUT, "/api/v1/module", 403);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["who"], "admin");
        assert_eq!(lines[1]["status"], 403);
        assert!(lines[0]["time"].as_str().unwrap().ends_with('Z'));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
