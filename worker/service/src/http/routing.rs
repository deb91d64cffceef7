//! The routers (the full API, and the one that answers while the job store is away) and the serving loops.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::middleware::{self};
use axum::routing::{get, post};
use tokio::net::TcpListener;

use super::*;

pub(super) fn route_name(path: &str) -> &'static str {
    match path.split('/').collect::<Vec<_>>().as_slice() {
        ["", "healthz"] => "healthz",
        ["", "readyz"] => "readyz",
        ["", "metrics"] => "metrics",
        ["", "v1", "jobs"] => "jobs",
        ["", "v1", "jobs", _] => "job",
        ["", "v1", "jobs", _, "cancel"] => "job_cancel",
        ["", "v1", "jobs", _, "retry"] => "job_retry",
        ["", "v1", "jobs", _, "candidate"] => "job_candidate",
        ["", "v1", "jobs", _, "review"] | ["", "v1", "jobs", _, "review", "attempt-diff"] => {
            "job_review"
        }
        ["", "v1", "jobs", _, "publish"] => "job_publish",
        ["", "v1", "audit"] => "audit",
        ["", "v1", "usage"] => "usage",
        ["", "v1", "forge", _] => "forge_webhook",
        ["", "ui", ..] => "ui",
        _ => "other",
    }
}

/// The router of the API.
pub(crate) fn router(sh: Arc<Shared>) -> Router {
    let slots = Arc::new(limits::Slots::new());
    let protected = Router::new()
        .route("/metrics", get(metrics))
        .route("/v1/jobs", post(submit).get(list))
        .route("/v1/jobs/{id}", get(show))
        .route("/v1/jobs/{id}/cancel", post(cancel))
        .route("/v1/jobs/{id}/retry", post(retry))
        .route("/v1/jobs/{id}/candidate", get(candidate))
        .route("/v1/audit", get(audit))
        .route("/v1/usage", get(usage))
        .merge(review_api::routes())
        .route_layer(middleware::from_fn_with_state(
            Arc::clone(&sh),
            require_token,
        ));
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        // The forge's signature authenticates a webhook, not a bearer token.
        .route("/v1/forge/{name}", post(forge_routes::webhook))
        .merge(protected)
        .merge(ui_routes::router(Arc::clone(&sh)))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(
            (Arc::clone(&sh), slots),
            limits::limit_and_count,
        ))
        .with_state(sh)
}

/// Serves the API on `listener` until the process ends.
pub(crate) async fn serve_api(listener: Arc<TcpListener>, sh: Arc<Shared>) {
    limits::serve_on(listener, router(sh), std::future::pending()).await;
}

/// What the API answers while the service waits for its job store (before it has a store, a
/// job, or anything to report): `/healthz` 200 (the process is alive), `/readyz` 503
/// `PATCH_CANDIDATE_SERVICE_NOT_READY`, every other path 503 with the same error.
///
/// Every other path checks the bearer token first, as the full API does: a caller without it
/// learns nothing that `/readyz` does not tell anyone, and a caller with a wrong one is told so at
/// once (401) instead of retrying a 503 for as long as the database is away.
pub(super) fn waiting_router(token: Arc<Vec<u8>>) -> Router {
    async fn readyz_waiting() -> ApiError {
        not_ready("waiting for the job store")
    }
    async fn anything_else(State(token): State<Arc<Vec<u8>>>, headers: HeaderMap) -> ApiError {
        if authorized(&headers, &token) {
            not_ready("waiting for the job store")
        } else {
            unauthorized()
        }
    }
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz_waiting))
        .fallback(anything_else)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(token)
}

/// Serves the waiting API on `listener` until `opened` completes, then stops accepting (requests
/// in flight finish); the full API accepts from the same listener from then on.
pub(crate) async fn serve_waiting(
    listener: Arc<TcpListener>,
    token: Vec<u8>,
    opened: impl Future<Output = ()> + Send + 'static,
) {
    limits::serve_on(listener, waiting_router(Arc::new(token)), opened).await;
}
