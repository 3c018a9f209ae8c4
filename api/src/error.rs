//! RFC 9457 problem details: every error the API answers is `application/problem+json` with a
//! type, a title, the status and a detail saying what exactly was wrong.

use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use crate::management::MgmtError;
use crate::models::Problem;

pub const PROBLEM_JSON: &str = "application/problem+json";

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub detail: String,
}

/// The detail of the API's 404 for a path it does not serve (not a missing resource: a client
/// may tell a wrong base URL by it).
pub const NO_SUCH_ROUTE: &str = "no such resource";

impl ApiError {
    pub fn new(status: StatusCode, detail: impl Into<String>) -> ApiError {
        ApiError {
            status,
            detail: detail.into(),
        }
    }

    /// Type `about:blank`: the title is the status phrase, the detail says what was wrong
    /// (RFC 9457 section 4.2.1).
    pub fn problem(&self) -> Problem {
        Problem {
            kind: "about:blank".into(),
            title: self
                .status
                .canonical_reason()
                .unwrap_or("Error")
                .to_string(),
            status: self.status.as_u16(),
            detail: self.detail.clone(),
        }
    }
}

impl From<MgmtError> for ApiError {
    fn from(e: MgmtError) -> ApiError {
        let status = match &e {
            MgmtError::NotFound(_) => StatusCode::NOT_FOUND,
            MgmtError::Conflict(_) => StatusCode::CONFLICT,
            MgmtError::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
            MgmtError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            MgmtError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        };
        ApiError::new(status, e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&self.problem()).unwrap_or_default();
        (self.status, [(header::CONTENT_TYPE, PROBLEM_JSON)], body).into_response()
    }
}

/// `axum::Json` whose rejections are problems (400 malformed JSON, 415 wrong content type,
/// 422 JSON of the wrong shape) rather than plain text. Every request body of this API is a JSON
/// object: serde would also fill a struct from an array of its fields in order (`[true]` for
/// `{"allow_any_host": true}`), which the schema does not allow, so anything but an object is
/// refused before the fields are read.
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        // Any JSON is a `Value`: the only rejections left are the content type and the syntax.
        let value = match axum::Json::<serde_json::Value>::from_request(req, state).await {
            Ok(axum::Json(value)) => value,
            Err(rej) => {
                let status = match &rej {
                    JsonRejection::MissingJsonContentType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    _ => StatusCode::BAD_REQUEST,
                };
                return Err(ApiError::new(status, rej.body_text()));
            }
        };
        if !value.is_object() {
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "the request body must be a JSON object",
            ));
        }
        serde_json::from_value(value).map(JsonBody).map_err(|e| {
            ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("the request body does not fit: {e}"),
            )
        })
    }
}

/// `axum::extract::Path` whose rejections are 400 problems.
pub struct PathParam<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for PathParam<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(v)) => Ok(PathParam(v)),
            Err(rej) => {
                let status = match &rej {
                    PathRejection::FailedToDeserializePathParams(_) => StatusCode::BAD_REQUEST,
                    _ => StatusCode::INTERNAL_SERVER_ERROR,
                };
                Err(ApiError::new(status, rej.body_text()))
            }
        }
    }
}
