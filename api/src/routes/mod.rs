//! The `/api/v1` routes, one file per resource.

pub mod compositions;
pub mod controllers;
pub mod drives;
pub mod hosts;
pub mod ports;
pub mod subsystems;

use std::sync::Arc;

use axum::http::StatusCode;

use crate::error::ApiError;
use crate::management::{Management, MgmtResult};

pub type Mgmt = Arc<dyn Management>;

/// Runs a call on the blocking pool: mutations write and sync the state file, drive health
/// may ask the device.
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
