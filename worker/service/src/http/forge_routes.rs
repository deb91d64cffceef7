//! `POST /v1/forge/{name}`: a forge's webhook. No bearer token: the forge's signature is the
//! authentication, checked in constant time against the secret the repository policy names
//! before a byte of the body is parsed. Answers: 202 a new delivery (queued or ignored, with
//! the reason), 200 a delivery seen before (nothing changed), 401 a missing, malformed or wrong
//! signature, 404 a forge the policy does not name, 413 a body over the forge cap, 400 a payload
//! outside the documented shape. No answer quotes the payload.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;

use super::*;

pub(super) async fn webhook(
    State(sh): State<Arc<Shared>>,
    name: Result<UrlPath<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult {
    let name = name.map_err(|_| ServiceError::ForgeUnknown)?.0;
    let policy = sh.policy().ok_or(ServiceError::ForgeUnknown)?;
    let forge = policy.forge(&name).ok_or(ServiceError::ForgeUnknown)?;
    let secret = forge.secret().ok_or(ServiceError::ForgeUnknown)?;
    // The cap is checked while reading: nothing over it is buffered.
    let bytes = axum::body::to_bytes(body, forge::MAX_WEBHOOK_BODY_BYTES)
        .await
        .map_err(|_| {
            ServiceError::Forge(forge::ForgeError::BodyTooLarge {
                limit: forge::MAX_WEBHOOK_BODY_BYTES,
            })
        })?;
    let delivery =
        forge::verify(forge.kind(), &headers, &bytes, secret).map_err(ServiceError::Forge)?;
    let (row, created) = crate::forge_intake::accept(&sh, forge, &delivery, &bytes).await?;
    sh.metrics.forge_delivery(row.state, created);
    let status = if created {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        axum::Json(serde_json::json!({
            "delivery": row.delivery,
            "duplicate": !created,
            "state": row.state,
            "reason": row.reason,
            "job": row.job_id,
        })),
    )
        .into_response())
}
