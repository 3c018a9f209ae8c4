//! The `/api/v1` routes, one file per resource.

pub mod ana;
pub mod cdc;
pub mod compositions;
pub mod controllers;
pub mod drives;
pub mod hosts;
pub mod ports;
pub mod subsystems;
pub mod volumes;

use std::sync::Arc;

use axum::http::StatusCode;

use crate::error::ApiError;
use crate::management::{Management, MgmtResult};

pub type Mgmt = Arc<dyn Management>;

/// Runs a management call, read or change, on the blocking pool, never on the runtime's
/// workers, which serve NVMe I/O: changes write and sync the state file, drive health may ask
/// the device, and a listing of thousands of hosts takes a while.
/// A read's answer, JSON already encoded (on the blocking pool: a listing of thousands of
/// hosts is megabytes).
pub struct Encoded(Vec<u8>);

impl axum::response::IntoResponse for Encoded {
    fn into_response(self) -> axum::response::Response {
        (
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            self.0,
        )
            .into_response()
    }
}

/// A read: the view is made and encoded as JSON on the blocking pool (see `blocking`).
pub(crate) async fn read<T: serde::Serialize>(
    m: &Mgmt,
    f: impl FnOnce(&dyn Management) -> MgmtResult<T> + Send + 'static,
) -> Result<Encoded, ApiError> {
    blocking(m, move |m| {
        let view = f(m)?;
        serde_json::to_vec(&view)
            .map(Encoded)
            .map_err(|e| crate::MgmtError::Internal(format!("encoding the answer: {e}")))
    })
    .await
}

pub(crate) async fn blocking<T: Send + 'static>(
    m: &Mgmt,
    f: impl FnOnce(&dyn Management) -> MgmtResult<T> + Send + 'static,
) -> Result<T, ApiError> {
    let m = m.clone();
    match tokio::task::spawn_blocking(move || f(m.as_ref())).await {
        Ok(r) => r.map_err(ApiError::from),
        Err(e) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the operation failed: {e}"),
        )),
    }
}
