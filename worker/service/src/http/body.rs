//! Request parsing: job ids in paths and strict JSON bodies.

use axum::body::Body;
use axum::extract::Path as UrlPath;
use axum::extract::rejection::PathRejection;
use axum::http::{HeaderMap, StatusCode, header};
use vocab::JobId;

use super::*;

/// The job id of a path: a segment axum cannot decode (invalid UTF-8 after percent-decoding) is
/// refused like any other malformed id, with the API's JSON error rather than axum's text.
pub(super) fn parse_id(raw: Result<UrlPath<String>, PathRejection>) -> Result<JobId, ApiError> {
    let parsed = raw.ok().and_then(|UrlPath(id)| JobId::parse(&id).ok());
    parsed.ok_or_else(|| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "PATCH_CANDIDATE_JOBS_ID",
            "PATCH_CANDIDATE_JOBS_ID: not a job id (job_ and 32 lowercase hex digits)",
        )
    })
}

/// Whether the request says its body is JSON (`application/json`, any case, parameters allowed).
pub(super) fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
}

/// A strict JSON body: `application/json`, at most [`MAX_BODY_BYTES`], unknown fields and
/// trailing bytes refused; errors name the JSON path, never the value.
pub(super) async fn json_body<T: serde::de::DeserializeOwned>(
    headers: &HeaderMap,
    body: Body,
) -> Result<T, ApiError> {
    if !is_json(headers) {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "PATCH_CANDIDATE_SERVICE_CONTENT_TYPE",
            "PATCH_CANDIDATE_SERVICE_CONTENT_TYPE: the body must be application/json",
        ));
    }
    let bytes = axum::body::to_bytes(body, MAX_BODY_BYTES).await.map_err(|_| {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "PATCH_CANDIDATE_SERVICE_BODY",
            format!("PATCH_CANDIDATE_SERVICE_BODY: the body exceeds {MAX_BODY_BYTES} bytes or was cut off"),
        )
    })?;
    let mut de = serde_json::Deserializer::from_slice(&bytes);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let kind = match e.inner().classify() {
            serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
                "malformed JSON"
            }
            serde_json::error::Category::Data => "unexpected field or value",
            serde_json::error::Category::Io => "unreadable body",
        };
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "PATCH_CANDIDATE_SERVICE_BODY",
            format!(
                "PATCH_CANDIDATE_SERVICE_BODY: {kind} at {}",
                vocab::Untrusted::quoted(&path)
            ),
        )
    })?;
    de.end().map_err(|_| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "PATCH_CANDIDATE_SERVICE_BODY",
            "PATCH_CANDIDATE_SERVICE_BODY: trailing bytes after the JSON document",
        )
    })?;
    Ok(value)
}

/// The job id of the path and the strict JSON body of a request on one job: [`parse_id`], then
/// [`json_body`].
pub(super) struct JobJson<T> {
    pub(super) id: JobId,
    pub(super) body: T,
}

impl<S: Send + Sync, T: serde::de::DeserializeOwned + Send> axum::extract::FromRequest<S>
    for JobJson<T>
{
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, ApiError> {
        use axum::extract::FromRequestParts as _;
        let (mut parts, body) = req.into_parts();
        let id = parse_id(UrlPath::<String>::from_request_parts(&mut parts, state).await)?;
        let body = json_body(&parts.headers, body).await?;
        Ok(Self { id, body })
    }
}
