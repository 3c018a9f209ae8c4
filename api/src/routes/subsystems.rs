//! `/subsystems`, their allowed hosts and their namespaces.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;

use super::{blocking, read, Encoded, Mgmt};
use crate::error::{ApiError, JsonBody, PathParam};
use crate::models::{
    AccessRequest, AuthenticationRequest, HostRequest, Namespace, NamespaceRequest, Problem,
    Subsystem, SubsystemRequest,
};

#[utoipa::path(get, path = "/api/v1/subsystems", tag = "subsystems",
    responses((status = 200, description = "Every subsystem", body = Vec<Subsystem>)))]
pub async fn list(State(m): State<Mgmt>) -> Result<Encoded, ApiError> {
    read(&m, |m| Ok(m.subsystems())).await
}

#[utoipa::path(get, path = "/api/v1/subsystems/{nqn}", tag = "subsystems",
    params(("nqn" = String, Path, description = "Subsystem NQN")),
    responses((status = 200, body = Subsystem),
        (status = 404, description = "No such subsystem", body = Problem, content_type = "application/problem+json")))]
pub async fn get(
    State(m): State<Mgmt>,
    PathParam(nqn): PathParam<String>,
) -> Result<Encoded, ApiError> {
    read(&m, move |m| m.subsystem(&nqn)).await
}

#[utoipa::path(post, path = "/api/v1/subsystems", tag = "subsystems", request_body = SubsystemRequest,
    security(("bearer" = [])),
    responses((status = 201, body = Subsystem),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body is not application/json", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No or wrong token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown drive", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "NQN taken, or a drive already exported", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Malformed NQN", body = Problem, content_type = "application/problem+json")))]
pub async fn create(
    State(m): State<Mgmt>,
    JsonBody(req): JsonBody<SubsystemRequest>,
) -> Result<(StatusCode, Json<Subsystem>), ApiError> {
    Ok((
        StatusCode::CREATED,
        Json(blocking(&m, move |m| m.create_subsystem(req)).await?),
    ))
}

/// Removes the subsystem: its controllers are torn down, its drives become free.
#[utoipa::path(delete, path = "/api/v1/subsystems/{nqn}", tag = "subsystems",
    params(("nqn" = String, Path, description = "Subsystem NQN")),
    security(("bearer" = [])),
    responses((status = 204, description = "Removed"),
        (status = 401, description = "No or wrong token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such subsystem", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "A composition uses it", body = Problem, content_type = "application/problem+json")))]
pub async fn delete(
    State(m): State<Mgmt>,
    PathParam(nqn): PathParam<String>,
) -> Result<StatusCode, ApiError> {
    blocking(&m, move |m| m.delete_subsystem(&nqn)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Any host, or only the allowed hosts (hosts that lose access are disconnected).
#[utoipa::path(put, path = "/api/v1/subsystems/{nqn}/access", tag = "subsystems", request_body = AccessRequest,
    params(("nqn" = String, Path, description = "Subsystem NQN")),
    security(("bearer" = [])),
    responses((status = 200, body = Subsystem),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body is not application/json", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No or wrong token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such subsystem", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Composed: access follows the composition", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "JSON of the wrong shape", body = Problem, content_type = "application/problem+json")))]
pub async fn set_access(
    State(m): State<Mgmt>,
    PathParam(nqn): PathParam<String>,
    JsonBody(req): JsonBody<AccessRequest>,
) -> Result<Json<Subsystem>, ApiError> {
    Ok(Json(
        blocking(&m, move |m| m.set_subsystem_access(&nqn, req)).await?,
    ))
}

/// Only hosts with DH-HMAC-CHAP keys may connect (those without get Connect Invalid Host;
/// controllers already connected stay), or any allowed host.
#[utoipa::path(put, path = "/api/v1/subsystems/{nqn}/authentication", tag = "subsystems", request_body = AuthenticationRequest,
    params(("nqn" = String, Path, description = "Subsystem NQN")),
    security(("bearer" = [])),
    responses((status = 200, body = Subsystem),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body is not application/json", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No or wrong token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such subsystem", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "JSON of the wrong shape", body = Problem, content_type = "application/problem+json")))]
pub async fn set_authentication(
    State(m): State<Mgmt>,
    PathParam(nqn): PathParam<String>,
    JsonBody(req): JsonBody<AuthenticationRequest>,
) -> Result<Json<Subsystem>, ApiError> {
    Ok(Json(
        blocking(&m, move |m| m.set_subsystem_authentication(&nqn, req)).await?,
    ))
}

#[utoipa::path(post, path = "/api/v1/subsystems/{nqn}/hosts", tag = "subsystems", request_body = HostRequest,
    params(("nqn" = String, Path, description = "Subsystem NQN")),
    security(("bearer" = [])),
    responses((status = 200, body = Subsystem),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body is not application/json", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No or wrong token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such subsystem", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Already allowed", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Malformed NQN", body = Problem, content_type = "application/problem+json")))]
pub async fn allow_host(
    State(m): State<Mgmt>,
    PathParam(nqn): PathParam<String>,
    JsonBody(req): JsonBody<HostRequest>,
) -> Result<Json<Subsystem>, ApiError> {
    if req.dhchap_secret.is_some()
        || req.dhchap_ctrl_secret.is_some()
        || req.dhchap_hash.is_some()
        || req.dhchap_dhgroup.is_some()
    {
        return Err(crate::MgmtError::Invalid(
            "a host's DH-HMAC-CHAP keys are set through /api/v1/hosts, not an allow list".into(),
        )
        .into());
    }
    Ok(Json(
        blocking(&m, move |m| m.allow_host(&nqn, &req.nqn)).await?,
    ))
}

/// Takes a host off the allow list; its controllers of this subsystem are torn down.
#[utoipa::path(delete, path = "/api/v1/subsystems/{nqn}/hosts/{host_nqn}", tag = "subsystems",
    params(("nqn" = String, Path, description = "Subsystem NQN"), ("host_nqn" = String, Path, description = "Host NQN")),
    security(("bearer" = [])),
    responses((status = 200, body = Subsystem),
        (status = 401, description = "No or wrong token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such subsystem, or host not on its list", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Allowed by a composition: decompose instead", body = Problem, content_type = "application/problem+json")))]
pub async fn disallow_host(
    State(m): State<Mgmt>,
    PathParam((nqn, host)): PathParam<(String, String)>,
) -> Result<Json<Subsystem>, ApiError> {
    Ok(Json(
        blocking(&m, move |m| m.disallow_host(&nqn, &host)).await?,
    ))
}

#[utoipa::path(get, path = "/api/v1/subsystems/{nqn}/namespaces", tag = "namespaces",
    params(("nqn" = String, Path, description = "Subsystem NQN")),
    responses((status = 200, body = Vec<Namespace>),
        (status = 404, description = "No such subsystem", body = Problem, content_type = "application/problem+json")))]
pub async fn namespaces(
    State(m): State<Mgmt>,
    PathParam(nqn): PathParam<String>,
) -> Result<Encoded, ApiError> {
    read(&m, move |m| m.namespaces(&nqn)).await
}

/// Adds a drive as a namespace; connected hosts get a Namespace Attribute Changed event.
#[utoipa::path(post, path = "/api/v1/subsystems/{nqn}/namespaces", tag = "namespaces", request_body = NamespaceRequest,
    params(("nqn" = String, Path, description = "Subsystem NQN")),
    security(("bearer" = [])),
    responses((status = 201, body = Namespace),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body is not application/json", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No or wrong token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such subsystem or drive", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Drive exported elsewhere, or NSID taken", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "NSID out of range", body = Problem, content_type = "application/problem+json")))]
pub async fn add_namespace(
    State(m): State<Mgmt>,
    PathParam(nqn): PathParam<String>,
    JsonBody(req): JsonBody<NamespaceRequest>,
) -> Result<(StatusCode, Json<Namespace>), ApiError> {
    Ok((
        StatusCode::CREATED,
        Json(blocking(&m, move |m| m.add_namespace(&nqn, req)).await?),
    ))
}

/// Removes a namespace; connected hosts get a Namespace Attribute Changed event.
#[utoipa::path(delete, path = "/api/v1/subsystems/{nqn}/namespaces/{nsid}", tag = "namespaces",
    params(("nqn" = String, Path, description = "Subsystem NQN"), ("nsid" = u32, Path, description = "Namespace ID")),
    security(("bearer" = [])),
    responses((status = 204, description = "Removed"),
        (status = 400, description = "Not an NSID", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No or wrong token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such subsystem or namespace", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "A composition uses the drive", body = Problem, content_type = "application/problem+json")))]
pub async fn remove_namespace(
    State(m): State<Mgmt>,
    PathParam((nqn, nsid)): PathParam<(String, u32)>,
) -> Result<StatusCode, ApiError> {
    blocking(&m, move |m| m.remove_namespace(&nqn, nsid)).await?;
    Ok(StatusCode::NO_CONTENT)
}
