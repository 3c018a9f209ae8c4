//! The boxes the controller serves: each one's management API client, rack and drive pool, and
//! calls to them with a time limit, their failures turned into gRPC statuses that name the box.

use fabrik_api::client::{Client, ClientError};
use std::future::Future;
use std::path::Path;
use std::time::Duration;
use tonic::Status;

/// How long a box may take to answer a call. Making a volume (which erases its capacity) runs
/// in a task of its own, with `CREATE_LIMIT`.
pub const CALL_LIMIT: Duration = Duration::from_secs(15);
pub const CREATE_LIMIT: Duration = Duration::from_secs(600);

pub struct StorageBox {
    pub url: String,
    /// Its rack (the topology segment of its volumes), if given.
    pub rack: Option<String>,
    /// The drives (numeric IDs, inclusive) the driver may make volumes of; None: only drives
    /// no host may reach (see the controller's `free_drives`).
    pub pool: Option<(u32, u32)>,
    client: Client,
}

impl StorageBox {
    /// A box from its `--box` argument: `URL[,rack=NAME][,drives=FIRST-LAST]`.
    pub fn parse(
        arg: &str,
        token: Option<String>,
        ca: Option<&Path>,
    ) -> Result<StorageBox, String> {
        let mut parts = arg.split(',');
        let url = parts.next().unwrap_or_default().trim().to_string();
        if !(url.starts_with("http://") || url.starts_with("https://") || url.starts_with("unix:"))
        {
            return Err(format!(
                "--box {arg:?}: give the box's management API URL (http://, https:// or unix:PATH)"
            ));
        }
        let mut rack = None;
        let mut pool = None;
        for p in parts {
            match p.split_once('=') {
                Some(("rack", r)) if !r.is_empty() && r.len() <= 63 => rack = Some(r.to_string()),
                Some(("drives", d)) => pool = Some(parse_range(d).map_err(|e| format!("--box {arg:?}: {e}"))?),
                _ => {
                    return Err(format!(
                        "--box {arg:?}: {p:?} is neither rack=NAME (1 to 63 characters) nor drives=FIRST-LAST"
                    ))
                }
            }
        }
        let client = Client::with_ca(&url, token, ca);
        Ok(StorageBox {
            url,
            rack,
            pool,
            client,
        })
    }

    /// Whether drive `id` is in the pool given (none is without one).
    pub fn in_pool(&self, id: &str) -> bool {
        self.pool
            .is_some_and(|(a, b)| id.parse::<u32>().is_ok_and(|n| (a..=b).contains(&n)))
    }

    /// `call` on this box, within `limit`: its failure as a gRPC status naming the box. An API
    /// problem keeps its meaning (404 NOT_FOUND, 409 ABORTED: someone else changed it, 422
    /// INVALID_ARGUMENT, 503 UNAVAILABLE); a box that does not answer is UNAVAILABLE.
    pub async fn call<'a, T, F>(
        &'a self,
        limit: Duration,
        call: impl FnOnce(&'a Client) -> F,
    ) -> Result<T, Status>
    where
        F: Future<Output = Result<T, ClientError>> + 'a,
    {
        match tokio::time::timeout(limit, call(&self.client)).await {
            Ok(r) => r.map_err(|e| self.status(e)),
            Err(_) => Err(Status::unavailable(format!(
                "box {} did not answer within {} s",
                self.url,
                limit.as_secs()
            ))),
        }
    }

    /// `call`, a 404 for the resource as None.
    pub async fn find<'a, T, F>(
        &'a self,
        call: impl FnOnce(&'a Client) -> F,
    ) -> Result<Option<T>, Status>
    where
        F: Future<Output = Result<T, ClientError>> + 'a,
    {
        match self.call(CALL_LIMIT, call).await {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.code() == tonic::Code::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn status(&self, e: ClientError) -> Status {
        let text = format!("box {}: {e}", self.url);
        // The API's own 404 for a path it does not serve: a wrong URL, not an absent volume
        // (taken for absent, a delete would report success and leave the volume).
        if let ClientError::Api(p) = &e {
            if p.status == 404 && p.detail == fabrik_api::error::NO_SUCH_ROUTE {
                return Status::failed_precondition(format!(
                    "{text} (is the URL the box's management API, without /api/v1?)"
                ));
            }
        }
        match e.status() {
            None => Status::unavailable(text),
            Some(401 | 403) => Status::permission_denied(text),
            Some(404) => Status::not_found(text),
            Some(409) => Status::aborted(text),
            Some(400 | 422) => Status::invalid_argument(text),
            Some(503) => Status::unavailable(text),
            Some(_) => Status::internal(text),
        }
    }
}

/// `FIRST-LAST` (or one ID) of numeric drive IDs.
fn parse_range(text: &str) -> Result<(u32, u32), String> {
    let (a, b) = text.split_once('-').unwrap_or((text, text));
    let n = |s: &str| {
        s.parse::<u32>()
            .map_err(|_| format!("drives={text}: give FIRST-LAST drive IDs, e.g. 00-11"))
    };
    let (a, b) = (n(a)?, n(b)?);
    if a > b {
        return Err(format!("drives={text}: the first is past the last"));
    }
    Ok((a, b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn box_arguments_are_parsed_or_refused() {
        let b = StorageBox::parse("https://box-a:8443,rack=r1,drives=04-11", None, None).unwrap();
        assert_eq!(b.url, "https://box-a:8443");
        assert_eq!(b.rack.as_deref(), Some("r1"));
        assert!(b.in_pool("04") && b.in_pool("11") && !b.in_pool("03") && !b.in_pool("12"));
        assert!(!b.in_pool("vol-x"));
        let b = StorageBox::parse("http://127.0.0.1:8080", None, None).unwrap();
        assert_eq!((b.rack, b.pool), (None, None));
        let refused = |arg: &str| StorageBox::parse(arg, None, None).err().unwrap();
        assert!(refused("box-a:8443").contains("management API URL"));
        assert!(refused("http://a,row=1").contains("rack=NAME"));
        assert!(refused("http://a,rack=").contains("rack=NAME"));
        assert!(refused("http://a,drives=x").contains("FIRST-LAST"));
        assert!(refused("http://a,drives=5-2").contains("past the last"));
    }
}
