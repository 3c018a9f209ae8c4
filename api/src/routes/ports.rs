//! `/ports`: the transport listeners.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;

use super::{blocking, read, Encoded, Mgmt};
use crate::error::{ApiError, JsonBody, PathParam};
use crate::models::{Port, PortRequest, Problem};

#[utoipa::path(get, path = "/api/v1/ports", tag = "ports",
    responses((status = 200, description = "Every listener", body = Vec<Port>)))]
pub async fn list(State(m): State<Mgmt>) -> Result<Encoded, ApiError> {
    read(&m, |m| Ok(m.ports())).await
}

#[utoipa::path(get, path = "/api/v1/ports/{id}", tag = "ports",
    params(("id" = u16, Path, description = "Port ID", minimum = 0, maximum = 65535)),
    responses((status = 200, body = Port),
        (status = 400, description = "Not a port ID", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such port", body = Problem, content_type = "application/problem+json")))]
pub async fn get(
    State(m): State<Mgmt>,
    PathParam(id): PathParam<u16>,
) -> Result<Encoded, ApiError> {
    read(&m, move |m| m.port(id)).await
}

/// Starts a listener. Service ID 0 picks a free port.
#[utoipa::path(post, path = "/api/v1/ports", tag = "ports", request_body = PortRequest,
    security(("bearer" = [])),
    responses((status = 201, body = Port),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body is not application/json", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No or wrong token", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Address in use", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Bad address or transport", body = Problem, content_type = "application/problem+json")))]
pub async fn create(
    State(m): State<Mgmt>,
    JsonBody(req): JsonBody<PortRequest>,
) -> Result<(StatusCode, Json<Port>), ApiError> {
    Ok((
        StatusCode::CREATED,
        Json(blocking(&m, move |m| m.add_port(req)).await?),
    ))
}

/// Stops a listener; connections through it finish their commands and close.
#[utoipa::path(delete, path = "/api/v1/ports/{id}", tag = "ports",
    params(("id" = u16, Path, description = "Port ID", minimum = 0, maximum = 65535)),
    security(("bearer" = [])),
    responses((status = 204, description = "Removed"),
        (status = 400, description = "Not a port ID", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No or wrong token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such port", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The last port, or named by a composition", body = Problem, content_type = "application/problem+json")))]
pub async fn delete(
    State(m): State<Mgmt>,
    PathParam(id): PathParam<u16>,
) -> Result<StatusCode, ApiError> {
    blocking(&m, move |m| m.delete_port(id)).await?;
    Ok(StatusCode::NO_CONTENT)
}
