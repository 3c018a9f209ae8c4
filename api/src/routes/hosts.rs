//! `/hosts`: host NQNs known to the box.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;

use super::{blocking, read, Encoded, Mgmt};
use crate::error::{ApiError, JsonBody, PathParam};
use crate::models::{Host, HostKeysRequest, HostRequest, Problem, QosLimits};

#[utoipa::path(get, path = "/api/v1/hosts", tag = "hosts",
    responses((status = 200, description = "Registered hosts and hosts named by allow lists or compositions", body = Vec<Host>)))]
pub async fn list(State(m): State<Mgmt>) -> Result<Encoded, ApiError> {
    read(&m, |m| Ok(m.hosts())).await
}

#[utoipa::path(get, path = "/api/v1/hosts/{nqn}", tag = "hosts",
    params(("nqn" = String, Path, description = "Host NQN")),
    responses((status = 200, body = Host),
        (status = 404, description = "Unknown host", body = Problem, content_type = "application/problem+json")))]
pub async fn get(
    State(m): State<Mgmt>,
    PathParam(nqn): PathParam<String>,
) -> Result<Encoded, ApiError> {
    read(&m, move |m| m.host(&nqn)).await
}

#[utoipa::path(post, path = "/api/v1/hosts", tag = "hosts", request_body = HostRequest,
    security(("bearer" = [])),
    responses((status = 201, body = Host),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body is not application/json", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No or wrong token", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Already registered", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Malformed NQN, secret, hash or DH group", body = Problem, content_type = "application/problem+json")))]
pub async fn create(
    State(m): State<Mgmt>,
    JsonBody(req): JsonBody<HostRequest>,
) -> Result<(StatusCode, Json<Host>), ApiError> {
    Ok((
        StatusCode::CREATED,
        Json(blocking(&m, move |m| m.add_host(req)).await?),
    ))
}

/// Replaces the host's DH-HMAC-CHAP keys (registering a host not yet registered); live
/// connections stay.
#[utoipa::path(put, path = "/api/v1/hosts/{nqn}/keys", tag = "hosts", request_body = HostKeysRequest,
    params(("nqn" = String, Path, description = "Host NQN")),
    security(("bearer" = [])),
    responses((status = 200, body = Host),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body is not application/json", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No or wrong token", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Malformed NQN, secret, hash or DH group", body = Problem, content_type = "application/problem+json")))]
pub async fn set_keys(
    State(m): State<Mgmt>,
    PathParam(nqn): PathParam<String>,
    JsonBody(req): JsonBody<HostKeysRequest>,
) -> Result<Json<Host>, ApiError> {
    Ok(Json(
        blocking(&m, move |m| m.set_host_keys(&nqn, req)).await?,
    ))
}

/// Replaces the host's I/O limits across this box's controllers, live ones included
/// (registering a host not yet registered).
#[utoipa::path(put, path = "/api/v1/hosts/{nqn}/qos", tag = "hosts", request_body = QosLimits,
    params(("nqn" = String, Path, description = "Host NQN")),
    security(("bearer" = [])),
    responses((status = 200, body = Host),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body is not application/json", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No or wrong token", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Malformed NQN, a limit of 0, or a burst past 10 s", body = Problem, content_type = "application/problem+json")))]
pub async fn set_qos(
    State(m): State<Mgmt>,
    PathParam(nqn): PathParam<String>,
    JsonBody(req): JsonBody<QosLimits>,
) -> Result<Json<Host>, ApiError> {
    Ok(Json(
        blocking(&m, move |m| m.set_host_qos(&nqn, req)).await?,
    ))
}

/// Forgets the host and removes it from every allow list, tearing down its controllers.
#[utoipa::path(delete, path = "/api/v1/hosts/{nqn}", tag = "hosts",
    params(("nqn" = String, Path, description = "Host NQN")),
    security(("bearer" = [])),
    responses((status = 204, description = "Removed"),
        (status = 401, description = "No or wrong token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown host", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "A composition names the host", body = Problem, content_type = "application/problem+json")))]
pub async fn delete(
    State(m): State<Mgmt>,
    PathParam(nqn): PathParam<String>,
) -> Result<StatusCode, ApiError> {
    blocking(&m, move |m| m.delete_host(&nqn)).await?;
    Ok(StatusCode::NO_CONTENT)
}
