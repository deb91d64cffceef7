//! Errors and their HTTP status: `{"error": {"code", "message"}}`, each code's status by its type or failure class.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use vocab::{Coded, FailureClass};

use super::*;

/// An API error: its status, code and message.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) code: &'static str,
    pub(crate) message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({"error": {"code": self.code, "message": self.message}});
        let mut response = (self.status, axum::Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// The HTTP status of an error the API answers with, chosen from the error's type and variant: a
/// missing job is 404, a request that conflicts with the job's or the candidate's state 409, a
/// malformed argument 400; any other error answers by its failure class.
pub(crate) trait ApiStatus: Coded {
    /// The status of this error.
    fn api_status(&self) -> StatusCode {
        class_status(self.class())
    }
}

/// The status of a failure class: 400 usage, 422 rejected, 503 environment.
pub(super) fn class_status(class: FailureClass) -> StatusCode {
    match class {
        FailureClass::Usage => StatusCode::BAD_REQUEST,
        FailureClass::Rejected => StatusCode::UNPROCESSABLE_ENTITY,
        FailureClass::Environment => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl ApiStatus for jobs::JobsError {
    fn api_status(&self) -> StatusCode {
        match self {
            Self::NotFound { .. } => StatusCode::NOT_FOUND,
            Self::State { .. }
            | Self::Conflict { .. }
            | Self::Published { .. }
            | Self::NotAccepted { .. }
            | Self::Publishing { .. }
            | Self::ClaimLost { .. } => StatusCode::CONFLICT,
            Self::Vocab(_) | Self::Input { .. } | Self::Day { .. } | Self::RollupLimit { .. } => {
                StatusCode::BAD_REQUEST
            }
            _ => class_status(self.class()),
        }
    }
}

impl ApiStatus for review::ReviewError {
    fn api_status(&self) -> StatusCode {
        match self {
            Self::DigestMismatch { .. }
            | Self::GatesUnmet { .. }
            | Self::PolicyUnclean { .. }
            | Self::Published
            | Self::NotAccepted { .. }
            | Self::Superseded { .. }
            | Self::Chain { .. } => StatusCode::CONFLICT,
            Self::ReasonRequired { .. } | Self::Reason { .. } | Self::Input { .. } => {
                StatusCode::BAD_REQUEST
            }
            _ => class_status(self.class()),
        }
    }
}

impl ApiStatus for publish::PublishError {
    fn api_status(&self) -> StatusCode {
        match self {
            Self::BaseMoved { .. }
            | Self::BranchExists
            | Self::BranchMoved
            | Self::RebaseConflict
            | Self::RegateFailed => StatusCode::CONFLICT,
            Self::Input { .. } => StatusCode::BAD_REQUEST,
            _ => class_status(self.class()),
        }
    }
}

impl ApiStatus for ServiceError {
    fn api_status(&self) -> StatusCode {
        match self {
            Self::Jobs(e) => e.api_status(),
            Self::Forbidden { .. } | Self::TwoPerson { .. } | Self::PolicyRefused { .. } => {
                StatusCode::FORBIDDEN
            }
            Self::Quota { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::ForgeUnknown => StatusCode::NOT_FOUND,
            Self::Forge(e) => match e {
                forge::ForgeError::SignatureMissing { .. }
                | forge::ForgeError::SignatureMalformed { .. }
                | forge::ForgeError::SignatureWrong => StatusCode::UNAUTHORIZED,
                forge::ForgeError::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
                forge::ForgeError::Secret { .. } => StatusCode::SERVICE_UNAVAILABLE,
                _ => StatusCode::BAD_REQUEST,
            },
            _ => class_status(self.class()),
        }
    }
}

impl ApiStatus for finalizer::FinalizeError {}
impl ApiStatus for gate::GateError {}
impl ApiStatus for policy::PolicyError {}

impl<E: ApiStatus> From<E> for ApiError {
    fn from(e: E) -> Self {
        Self::new(e.api_status(), e.code(), e.to_string())
    }
}

pub(crate) type ApiResult = Result<Response, ApiError>;

/// 503 `PATCH_CANDIDATE_SERVICE_NOT_READY`: the service runs but cannot serve jobs now.
pub(super) fn not_ready(why: &str) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "PATCH_CANDIDATE_SERVICE_NOT_READY",
        format!("PATCH_CANDIDATE_SERVICE_NOT_READY: {why}"),
    )
}

pub(super) fn unauthorized() -> ApiError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "PATCH_CANDIDATE_SERVICE_UNAUTHORIZED",
        "PATCH_CANDIDATE_SERVICE_UNAUTHORIZED: a valid bearer token is required",
    )
}

pub(super) async fn not_found() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "PATCH_CANDIDATE_SERVICE_ROUTE",
        "PATCH_CANDIDATE_SERVICE_ROUTE: no such route",
    )
}

pub(super) async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "PATCH_CANDIDATE_SERVICE_METHOD",
        "PATCH_CANDIDATE_SERVICE_METHOD: method not allowed on this route",
    )
}
