//! `/drives`: the storage of the box, with health and who uses it.

use axum::extract::State;

use super::{blocking, read, Encoded, Mgmt};
use crate::error::{ApiError, JsonBody, PathParam};
use crate::models::{Drive, Problem, QosLimits};

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

/// Replaces the drive's I/O limits: every host's commands to it share them (each host's own
/// limits hold too). Live connections follow.
#[utoipa::path(put, path = "/api/v1/drives/{id}/qos", tag = "drives", request_body = QosLimits,
    params(("id" = String, Path, description = "Drive ID")),
    security(("bearer" = [])),
    responses((status = 200, body = Drive),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body is not application/json", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No or wrong token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such drive", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A limit of 0, or a burst past 10 s", body = Problem, content_type = "application/problem+json")))]
pub async fn set_qos(
    State(m): State<Mgmt>,
    PathParam(id): PathParam<String>,
    JsonBody(req): JsonBody<QosLimits>,
) -> Result<axum::Json<Drive>, ApiError> {
    Ok(axum::Json(
        blocking(&m, move |m| m.set_drive_qos(&id, req)).await?,
    ))
}

/// A drive that lost a write (a failed Flush or FUA write) refuses every change, for every
/// host, until this: say it after dealing with the cause (the space, the device) and with what
/// the hosts wrote since their last good Flush.
#[utoipa::path(post, path = "/api/v1/drives/{id}/clear-fault", tag = "drives",
    params(("id" = String, Path, description = "Drive ID")),
    security(("bearer" = [])),
    responses((status = 200, description = "Writable again", body = Drive),
        (status = 401, description = "No or wrong token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such drive", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The drive has no fault", body = Problem, content_type = "application/problem+json")))]
pub async fn clear_fault(
    State(m): State<Mgmt>,
    PathParam(id): PathParam<String>,
) -> Result<axum::Json<Drive>, ApiError> {
    Ok(axum::Json(
        blocking(&m, move |m| m.clear_drive_fault(&id)).await?,
    ))
}
