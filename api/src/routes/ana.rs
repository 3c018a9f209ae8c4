//! `/ana-groups`: asymmetric namespace access, the state of each path group as the ports
//! report it to multipath hosts.

use axum::extract::State;
use axum::Json;

use super::{blocking, read, Encoded, Mgmt};
use crate::error::{ApiError, JsonBody, PathParam};
use crate::models::{
    AnaGroup, AnaGroupRequest, Module, ModuleConfig, ModuleConfigPush, ModuleRequest, Problem,
};

#[utoipa::path(get, path = "/api/v1/ana-groups", tag = "ana",
    responses((status = 200, description = "Every ANA group", body = Vec<AnaGroup>)))]
pub async fn list(State(m): State<Mgmt>) -> Result<Encoded, ApiError> {
    read(&m, |m| Ok(m.ana_groups())).await
}

#[utoipa::path(get, path = "/api/v1/ana-groups/{id}", tag = "ana",
    params(("id" = u32, Path, description = "ANA group ID (ANAGRPID)")),
    responses((status = 200, body = AnaGroup),
        (status = 400, description = "Not a group ID", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such group", body = Problem, content_type = "application/problem+json")))]
pub async fn get(
    State(m): State<Mgmt>,
    PathParam(id): PathParam<u32>,
) -> Result<Encoded, ApiError> {
    read(&m, move |m| m.ana_group(id)).await
}

/// Puts a group in a state, as `echo inaccessible > .../ana_groups/N/ana_state` does for Linux
/// nvmet: `inaccessible` before taking this path away for maintenance (multipath hosts move
/// their I/O to another path), `optimized` when it is back.
#[utoipa::path(put, path = "/api/v1/ana-groups/{id}", tag = "ana", request_body = AnaGroupRequest,
    params(("id" = u32, Path, description = "ANA group ID (ANAGRPID)")),
    security(("bearer" = [])),
    responses((status = 200, body = AnaGroup),
        (status = 400, description = "Malformed JSON or not a group ID", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body is not application/json", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No or wrong token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such group", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "JSON of the wrong shape (an unknown state)", body = Problem, content_type = "application/problem+json")))]
pub async fn set(
    State(m): State<Mgmt>,
    PathParam(id): PathParam<u32>,
    JsonBody(req): JsonBody<AnaGroupRequest>,
) -> Result<Json<AnaGroup>, ApiError> {
    Ok(Json(blocking(&m, move |m| m.set_ana_group(id, req)).await?))
}

#[utoipa::path(get, path = "/api/v1/module", tag = "ana",
    responses((status = 200, description = "This I/O module", body = Module)))]
pub async fn module(State(m): State<Mgmt>) -> Result<Encoded, ApiError> {
    read(&m, |m| Ok(m.module())).await
}

/// A planned failover: `{"maintenance": true}` makes every group inaccessible through this
/// module's ports (multipath hosts move their I/O to the other module) and `drained` turns
/// true once no I/O command is left in flight; `{"maintenance": false}` puts it back.
#[utoipa::path(put, path = "/api/v1/module", tag = "ana", request_body = ModuleRequest,
    security(("bearer" = [])),
    responses((status = 200, body = Module),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body is not application/json", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No or wrong token", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "JSON of the wrong shape", body = Problem, content_type = "application/problem+json")))]
pub async fn set_module(
    State(m): State<Mgmt>,
    JsonBody(req): JsonBody<ModuleRequest>,
) -> Result<Json<Module>, ApiError> {
    Ok(Json(blocking(&m, move |m| m.set_module(req)).await?))
}

/// The configuration this module shares with the other (subsystems, hosts, compositions) and
/// its generation: what the other module reads to catch up.
#[utoipa::path(get, path = "/api/v1/module/config", tag = "ana",
    security(("bearer" = [])),
    responses((status = 200, body = ModuleConfig),
        (status = 401, description = "No or wrong token", body = Problem, content_type = "application/problem+json")))]
pub async fn config(State(m): State<Mgmt>) -> Result<Encoded, ApiError> {
    read(&m, |m| Ok(m.module_config())).await
}

/// The other module's change, applied here before it acknowledges it to its client.
#[utoipa::path(put, path = "/api/v1/module/config", tag = "ana", request_body = ModuleConfigPush,
    security(("bearer" = [])),
    responses((status = 200, body = ModuleConfig),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body is not application/json", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No or wrong token", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Not at the change's base (the modules diverged), or a change of this module's own is under way", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "The configuration is invalid here", body = Problem, content_type = "application/problem+json")))]
pub async fn apply_config(
    State(m): State<Mgmt>,
    JsonBody(push): JsonBody<ModuleConfigPush>,
) -> Result<Json<ModuleConfig>, ApiError> {
    Ok(Json(
        blocking(&m, move |m| m.apply_module_config(push)).await?,
    ))
}

/// Makes the other module take this one's configuration: how an operator resolves a
/// divergence (both changed while apart), keeping this side's changes.
#[utoipa::path(post, path = "/api/v1/module/config/push", tag = "ana",
    security(("bearer" = [])),
    responses((status = 200, body = Module),
        (status = 401, description = "No or wrong token", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "No peer configured, or it refused", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The other module cannot be reached", body = Problem, content_type = "application/problem+json")))]
pub async fn push_config(State(m): State<Mgmt>) -> Result<Json<Module>, ApiError> {
    Ok(Json(blocking(&m, |m| m.push_module_config()).await?))
}
