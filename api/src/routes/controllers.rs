//! `/controllers`: live host associations, and disconnecting one.

use axum::extract::State;
use axum::http::StatusCode;

use super::{blocking, read, Encoded, Mgmt};
use crate::error::{ApiError, PathParam};
use crate::models::{Controller, Problem};

#[utoipa::path(get, path = "/api/v1/controllers", tag = "controllers",
    responses((status = 200, description = "Every live controller", body = Vec<Controller>)))]
pub async fn list(State(m): State<Mgmt>) -> Result<Encoded, ApiError> {
    read(&m, |m| Ok(m.controllers())).await
}

#[utoipa::path(get, path = "/api/v1/controllers/{id}", tag = "controllers",
    params(("id" = u64, Path, description = "Controller ID (the `id` field)")),
    responses((status = 200, body = Controller),
        (status = 400, description = "Not a controller ID", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such controller", body = Problem, content_type = "application/problem+json")))]
pub async fn get(
    State(m): State<Mgmt>,
    PathParam(id): PathParam<u64>,
) -> Result<Encoded, ApiError> {
    read(&m, move |m| m.controller(id)).await
}

/// Tears the controller down: its connections close; the host may reconnect if still allowed.
#[utoipa::path(post, path = "/api/v1/controllers/{id}/disconnect", tag = "controllers",
    params(("id" = u64, Path, description = "Controller ID")),
    security(("bearer" = [])),
    responses((status = 204, description = "Disconnected"),
        (status = 400, description = "Not a controller ID", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No or wrong token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such controller", body = Problem, content_type = "application/problem+json")))]
pub async fn disconnect(
    State(m): State<Mgmt>,
    PathParam(id): PathParam<u64>,
) -> Result<StatusCode, ApiError> {
    blocking(&m, move |m| m.disconnect_controller(id)).await?;
    Ok(StatusCode::NO_CONTENT)
}
