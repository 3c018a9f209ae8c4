//! `/ports`: the transport listeners.

use axum::extract::State;
use axum::Json;

use super::Mgmt;
use crate::error::{ApiError, PathParam};
use crate::models::{Port, Problem};

#[utoipa::path(get, path = "/api/v1/ports", tag = "ports",
    responses((status = 200, description = "Every listener", body = Vec<Port>)))]
pub async fn list(State(m): State<Mgmt>) -> Json<Vec<Port>> {
    Json(m.ports())
}

#[utoipa::path(get, path = "/api/v1/ports/{id}", tag = "ports",
    params(("id" = u16, Path, description = "Port ID", minimum = 0, maximum = 65535)),
    responses((status = 200, body = Port),
        (status = 400, description = "Not a port ID", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such port", body = Problem, content_type = "application/problem+json")))]
pub async fn get(
    State(m): State<Mgmt>,
    PathParam(id): PathParam<u16>,
) -> Result<Json<Port>, ApiError> {
    Ok(Json(m.port(id)?))
}
