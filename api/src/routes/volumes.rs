//! `/volumes`: protected volumes (RAID) over the box's drives.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;

use super::{blocking, read, Encoded, Mgmt};
use crate::error::{ApiError, JsonBody, PathParam};
use crate::models::{Problem, RebuildLimit, SpareRequest, Volume, VolumeRequest};

#[utoipa::path(get, path = "/api/v1/volumes", tag = "volumes",
    responses((status = 200, description = "Every volume", body = Vec<Volume>)))]
pub async fn list(State(m): State<Mgmt>) -> Result<Encoded, ApiError> {
    read(&m, |m| Ok(m.volumes())).await
}

#[utoipa::path(get, path = "/api/v1/volumes/{name}", tag = "volumes",
    params(("name" = String, Path, description = "Volume name")),
    responses((status = 200, body = Volume),
        (status = 404, description = "No such volume", body = Problem, content_type = "application/problem+json")))]
pub async fn get(
    State(m): State<Mgmt>,
    PathParam(name): PathParam<String>,
) -> Result<Encoded, ApiError> {
    read(&m, move |m| m.volume(&name)).await
}

/// Makes a volume over drives no subsystem exports (remove their namespaces first) and serves
/// it in a subsystem of its own. The drives' data is erased.
#[utoipa::path(post, path = "/api/v1/volumes", tag = "volumes", request_body = VolumeRequest,
    security(("bearer" = [])),
    responses((status = 201, body = Volume),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body is not application/json", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No or wrong token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown drive", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The name is taken, or a drive is exported, composed or in a volume", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Bad name, level, strip size or drive count", body = Problem, content_type = "application/problem+json")))]
pub async fn create(
    State(m): State<Mgmt>,
    JsonBody(req): JsonBody<VolumeRequest>,
) -> Result<(StatusCode, Json<Volume>), ApiError> {
    Ok((
        StatusCode::CREATED,
        Json(blocking(&m, move |m| m.create_volume(req)).await?),
    ))
}

/// Stops serving the volume; its drives go back to subsystems of their own.
#[utoipa::path(delete, path = "/api/v1/volumes/{name}", tag = "volumes",
    params(("name" = String, Path, description = "Volume name")),
    security(("bearer" = [])),
    responses((status = 204, description = "Removed"),
        (status = 401, description = "No or wrong token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such volume", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Composed to a host", body = Problem, content_type = "application/problem+json")))]
pub async fn delete(
    State(m): State<Mgmt>,
    PathParam(name): PathParam<String>,
) -> Result<StatusCode, ApiError> {
    blocking(&m, move |m| m.delete_volume(&name)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Fails a member as an error from it would (fault injection): the volume goes on degraded.
#[utoipa::path(post, path = "/api/v1/volumes/{name}/members/{drive}/fail", tag = "volumes",
    params(("name" = String, Path, description = "Volume name"),
        ("drive" = String, Path, description = "Member drive ID")),
    security(("bearer" = [])),
    responses((status = 200, body = Volume),
        (status = 401, description = "No or wrong token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such volume, or the drive is not a member", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The member is failed already", body = Problem, content_type = "application/problem+json")))]
pub async fn fail_member(
    State(m): State<Mgmt>,
    PathParam((name, drive)): PathParam<(String, String)>,
) -> Result<Json<Volume>, ApiError> {
    Ok(Json(
        blocking(&m, move |m| m.fail_volume_member(&name, &drive)).await?,
    ))
}

/// Adds a spare: a drive no subsystem exports but alone. A volume with a failed member starts
/// rebuilding onto it at once.
#[utoipa::path(post, path = "/api/v1/volumes/{name}/spares", tag = "volumes", request_body = SpareRequest,
    params(("name" = String, Path, description = "Volume name")),
    security(("bearer" = [])),
    responses((status = 200, body = Volume),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body is not application/json", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No or wrong token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such volume or drive", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The drive is exported with others, composed or in a volume", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "The drive is too small or has another block size", body = Problem, content_type = "application/problem+json")))]
pub async fn add_spare(
    State(m): State<Mgmt>,
    PathParam(name): PathParam<String>,
    JsonBody(req): JsonBody<SpareRequest>,
) -> Result<Json<Volume>, ApiError> {
    Ok(Json(
        blocking(&m, move |m| m.add_volume_spare(&name, req)).await?,
    ))
}

/// Limits how fast rebuilds write (hosts' I/O keeps the rest of the drives' time).
#[utoipa::path(put, path = "/api/v1/volumes/{name}/rebuild-limit", tag = "volumes", request_body = RebuildLimit,
    params(("name" = String, Path, description = "Volume name")),
    security(("bearer" = [])),
    responses((status = 200, body = Volume),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body is not application/json", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No or wrong token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such volume", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A limit of 0 or past 1 TiB/s", body = Problem, content_type = "application/problem+json")))]
pub async fn set_rebuild_limit(
    State(m): State<Mgmt>,
    PathParam(name): PathParam<String>,
    JsonBody(req): JsonBody<RebuildLimit>,
) -> Result<Json<Volume>, ApiError> {
    Ok(Json(
        blocking(&m, move |m| m.set_volume_rebuild_limit(&name, req)).await?,
    ))
}

/// Starts a scrub: every stripe's parity (or mirror copies) checked against the data, and
/// written again where they disagree. Its progress and result are in the volume's `scrub`.
#[utoipa::path(post, path = "/api/v1/volumes/{name}/scrub", tag = "volumes",
    params(("name" = String, Path, description = "Volume name")),
    security(("bearer" = [])),
    responses((status = 202, description = "Started", body = Volume),
        (status = 401, description = "No or wrong token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such volume", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "A scrub runs, or a member is lost", body = Problem, content_type = "application/problem+json")))]
pub async fn scrub(
    State(m): State<Mgmt>,
    PathParam(name): PathParam<String>,
) -> Result<(StatusCode, Json<Volume>), ApiError> {
    Ok((
        StatusCode::ACCEPTED,
        Json(blocking(&m, move |m| m.scrub_volume(&name)).await?),
    ))
}
