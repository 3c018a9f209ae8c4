//! The boxes the controller serves: each one's management API client and rack, and calls to
//! them with a time limit, their failures turned into gRPC statuses that name the box.

use fabrik_api::client::{Client, ClientError};
use std::future::Future;
use std::path::Path;
use std::time::Duration;
use tonic::Status;

/// How long a box may take to answer a call (making a volume erases its capacity: longer).
pub const CALL_LIMIT: Duration = Duration::from_secs(15);
pub const CREATE_LIMIT: Duration = Duration::from_secs(300);

pub struct StorageBox {
    pub url: String,
    /// Its rack (the topology segment of its volumes), if given.
    pub rack: Option<String>,
    client: Client,
}

impl StorageBox {
    /// A box from its `--box` argument: `URL[,rack=NAME]`.
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
        for p in parts {
            match p.split_once('=') {
                Some(("rack", r)) if !r.is_empty() && r.len() <= 63 => rack = Some(r.to_string()),
                _ => {
                    return Err(format!(
                        "--box {arg:?}: {p:?} is not rack=NAME (1 to 63 characters)"
                    ))
                }
            }
        }
        let client = Client::with_ca(&url, token, ca);
        Ok(StorageBox { url, rack, client })
    }

    /// `call` on this box, within `limit`: its failure as a gRPC status naming the box. An API
    /// problem keeps its meaning (404 NOT_FOUND, 409 ABORTED: someone else changed it, 422
    /// INVALID_ARGUMENT, 507 RESOURCE_EXHAUSTED); a box that does not answer is UNAVAILABLE.
    pub async fn call<'a, T, F>(
        &'a self,
        limit: Duration,
        call: impl FnOnce(&'a Client) -> F,
    ) -> Result<T, Status>
    where
        F: Future<Output = Result<T, ClientError>> + 'a,
    {
        match tokio::time::timeout(limit, call(&self.client)).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.status(e)),
            Err(_) => Err(Status::unavailable(format!(
                "box {} did not answer within {} s",
                self.url,
                limit.as_secs()
            ))),
        }
    }

    /// `call`, a 404 as None.
    pub async fn find<'a, T, F>(
        &'a self,
        call: impl FnOnce(&'a Client) -> F,
    ) -> Result<Option<T>, Status>
    where
        F: Future<Output = Result<T, ClientError>> + 'a,
    {
        match tokio::time::timeout(CALL_LIMIT, call(&self.client)).await {
            Ok(Ok(v)) => Ok(Some(v)),
            Ok(Err(e)) if e.status() == Some(404) => Ok(None),
            Ok(Err(e)) => Err(self.status(e)),
            Err(_) => Err(Status::unavailable(format!(
                "box {} did not answer within {} s",
                self.url,
                CALL_LIMIT.as_secs()
            ))),
        }
    }

    fn status(&self, e: ClientError) -> Status {
        let text = format!("box {}: {e}", self.url);
        match e.status() {
            None => Status::unavailable(text),
            Some(401 | 403) => Status::permission_denied(text),
            Some(404) => Status::not_found(text),
            Some(409) => Status::aborted(text),
            Some(400 | 422) => Status::invalid_argument(text),
            Some(507) => Status::resource_exhausted(text),
            Some(_) => Status::internal(text),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn box_arguments_are_parsed_or_refused() {
        let b = StorageBox::parse("https://box-a:8443,rack=r1", None, None).unwrap();
        assert_eq!(b.url, "https://box-a:8443");
        assert_eq!(b.rack.as_deref(), Some("r1"));
        let b = StorageBox::parse("http://127.0.0.1:8080", None, None).unwrap();
        assert_eq!(b.rack, None);
        let refused = |arg: &str| StorageBox::parse(arg, None, None).err().unwrap();
        assert!(refused("box-a:8443").contains("management API URL"));
        assert!(refused("http://a,row=1").contains("rack=NAME"));
        assert!(StorageBox::parse("http://a,rack=", None, None).is_err());
    }
}
