//! `/compositions`: the call users want: these drives, reachable by that host.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;

use super::{blocking, read, Encoded, Mgmt};
use crate::error::{ApiError, JsonBody, PathParam};
use crate::models::{Composition, CompositionRequest, Problem};

#[utoipa::path(get, path = "/api/v1/compositions", tag = "compositions",
    responses((status = 200, description = "Every composition", body = Vec<Composition>)))]
pub async fn list(State(m): State<Mgmt>) -> Result<Encoded, ApiError> {
    read(&m, |m| Ok(m.compositions())).await
}

#[utoipa::path(get, path = "/api/v1/compositions/{id}", tag = "compositions",
    params(("id" = String, Path, description = "Composition ID")),
    responses((status = 200, body = Composition),
        (status = 404, description = "No such composition", body = Problem, content_type = "application/problem+json")))]
pub async fn get(
    State(m): State<Mgmt>,
    PathParam(id): PathParam<String>,
) -> Result<Encoded, ApiError> {
    read(&m, move |m| m.composition(&id)).await
}

/// Makes the drives reachable by the host (only by it, unless shared) and answers with the
/// connect commands for each port. Live: other hosts connected to these drives are disconnected.
#[utoipa::path(post, path = "/api/v1/compositions", tag = "compositions", request_body = CompositionRequest,
    security(("bearer" = [])),
    responses((status = 201, body = Composition),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body is not application/json", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No or wrong token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown drive or port", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "A drive is composed to another host and not shared", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Malformed host NQN, no drives, duplicate drive", body = Problem, content_type = "application/problem+json")))]
pub async fn create(
    State(m): State<Mgmt>,
    JsonBody(req): JsonBody<CompositionRequest>,
) -> Result<(StatusCode, Json<Composition>), ApiError> {
    Ok((
        StatusCode::CREATED,
        Json(blocking(&m, move |m| m.compose(req)).await?),
    ))
}

/// Takes the drives away from the host again: its controllers of them are torn down.
#[utoipa::path(delete, path = "/api/v1/compositions/{id}", tag = "compositions",
    params(("id" = String, Path, description = "Composition ID")),
    security(("bearer" = [])),
    responses((status = 204, description = "Removed"),
        (status = 401, description = "No or wrong token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such composition", body = Problem, content_type = "application/problem+json")))]
pub async fn delete(
    State(m): State<Mgmt>,
    PathParam(id): PathParam<String>,
) -> Result<StatusCode, ApiError> {
    blocking(&m, move |m| m.decompose(&id)).await?;
    Ok(StatusCode::NO_CONTENT)
}
