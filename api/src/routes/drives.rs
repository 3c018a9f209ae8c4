//! `/drives`: the storage of the box, with health and who uses it.

use axum::extract::State;

use super::{read, Encoded, Mgmt};
use crate::error::{ApiError, PathParam};
use crate::models::{Drive, Problem};

#[utoipa::path(get, path = "/api/v1/drives", tag = "drives",
    responses((status = 200, description = "Every drive", body = Vec<Drive>)))]
pub async fn list(State(m): State<Mgmt>) -> Result<Encoded, ApiError> {
    // On the blocking pool: health may come from a SMART ioctl.
    read(&m, |m| Ok(m.drives())).await
}

#[utoipa::path(get, path = "/api/v1/drives/{id}", tag = "drives",
    params(("id" = String, Path, description = "Drive ID")),
    responses((status = 200, body = Drive),
        (status = 404, description = "No such drive", body = Problem, content_type = "application/problem+json")))]
pub async fn get(
    State(m): State<Mgmt>,
    PathParam(id): PathParam<String>,
) -> Result<Encoded, ApiError> {
    read(&m, move |m| m.drive(&id)).await
}
