//! `/controllers`: live host associations, and disconnecting one.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;

use super::{blocking, Mgmt};
use crate::error::{ApiError, PathParam};
use crate::models::{Controller, Problem};

#[utoipa::path(get, path = "/api/v1/controllers", tag = "controllers",
    responses((status = 200, description = "Every live controller", body = Vec<Controller>)))]
pub async fn list(State(m): State<Mgmt>) -> Json<Vec<Controller>> {
    Json(m.controllers())
}

#[utoipa::path(get, path = "/api/v1/controllers/{id}", tag = "controllers",
    params(("id" = u64, Path, description = "Controller ID (the `id` field)")),
    responses((status = 200, body = Controller),
        (status = 400, description = "Not a controller ID", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such controller", body = Problem, content_type = "application/problem+json")))]
pub async fn get(
    State(m): State<Mgmt>,
    PathParam(id): PathParam<u64>,
) -> Result<Json<Controller>, ApiError> {
    Ok(Json(m.controller(id)?))
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
