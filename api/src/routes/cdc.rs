//! `/cdc`: a central discovery controller's registrations (`fabrikd --role cdc`).

use axum::extract::State;

use super::{read, Encoded, Mgmt};
use crate::error::ApiError;
use crate::models::{CdcRegistration, Problem};

/// Every box and host registered with this central discovery controller, by NQN.
#[utoipa::path(get, path = "/api/v1/cdc/registrations", tag = "cdc",
    responses((status = 200, description = "Every registration", body = Vec<CdcRegistration>),
        (status = 404, description = "This fabrikd is a box, not a central discovery controller", body = Problem, content_type = "application/problem+json")))]
pub async fn registrations(State(m): State<Mgmt>) -> Result<Encoded, ApiError> {
    read(&m, |m| m.cdc_registrations()).await
}
