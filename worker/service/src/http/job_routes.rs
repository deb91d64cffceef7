//! The probes, the metrics and the job routes (`/healthz`, `/readyz`, `/metrics`, `/v1/jobs…`).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path as UrlPath, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use jobs::JobState;

use super::*;
use crate::submission::{Submission, prepare};

pub(super) async fn healthz() -> Response {
    axum::Json(serde_json::json!({"status": "ok"})).into_response()
}

/// 200 while the host claims work; 503 while it drains (whatever the store's health) or while
/// its job store is unreachable.
pub(super) async fn readyz(State(sh): State<Arc<Shared>>) -> Response {
    if !sh.ready.load(Ordering::SeqCst) {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "PATCH_CANDIDATE_SERVICE_DRAINING",
            "PATCH_CANDIDATE_SERVICE_DRAINING: the service is draining",
        )
        .into_response()
    } else if sh.metrics.store_unreachable() {
        not_ready("the job store is unreachable").into_response()
    } else {
        axum::Json(serde_json::json!({"status": "ready"})).into_response()
    }
}

pub(super) async fn metrics(State(sh): State<Arc<Shared>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4"),
        )],
        sh.metrics.render(),
    )
        .into_response()
}

pub(super) async fn submit(
    State(sh): State<Arc<Shared>>,
    axum::Extension(caller): axum::Extension<Caller>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult {
    caller.require(jobs::Role::Submit)?;
    let sub: Submission = json_body(&headers, body).await?;
    // The repository policy in force admits the job (in `prepare`, before the repository is
    // read), and neither the caller's nor the repository's quota may be spent.
    let policy = sh.policy();
    if let Some(policy) = &policy {
        let locator = crate::Locator::parse(&sub.repository)?;
        sh.check_quota(
            policy,
            caller.principal.as_str(),
            locator.as_str(),
            "submit",
            None,
        )
        .await?;
    }
    let mut spec = prepare(
        sub,
        &sh.opts.state_dir,
        &sh.mirrors,
        sh.opts.gates.as_deref(),
        policy.as_deref(),
    )
    .await?;
    spec.follow_ups = sh.opts.follow_ups;
    spec.submitted_by = Some(caller.principal.as_str().to_owned());
    let (job, created) = sh.store.submit(spec).await?;
    sh.wake.notify_one();
    tracing::info!(code = "PATCH_CANDIDATE_JOB_SUBMITTED", job = %job.id, created, "submitted");
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        axum::Json(serde_json::json!({"job": job_view(&job), "created": created})),
    )
        .into_response())
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    state: Option<String>,
    limit: Option<usize>,
}

pub(super) async fn list(State(sh): State<Arc<Shared>>, request: Request) -> ApiResult {
    let query = request.uri().query().unwrap_or_default();
    let q: ListQuery = serde_urlencoded::from_str(query).map_err(|_| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "PATCH_CANDIDATE_SERVICE_QUERY",
            "PATCH_CANDIDATE_SERVICE_QUERY: expected ?state=queued|running|completed|failed|cancelled&limit=N",
        )
    })?;
    let state = q
        .state
        .as_deref()
        .map(JobState::parse)
        .transpose()
        .map_err(|_| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "PATCH_CANDIDATE_SERVICE_QUERY",
                "PATCH_CANDIDATE_SERVICE_QUERY: state must be queued, running, completed, failed or cancelled",
            )
        })?;
    let limit = q.limit.unwrap_or(100).clamp(1, MAX_LIST);
    let jobs = sh.store.list(state, limit).await?;
    Ok(axum::Json(serde_json::json!({
        "jobs": jobs.iter().map(job_view).collect::<Vec<_>>()
    }))
    .into_response())
}

pub(super) async fn show(
    State(sh): State<Arc<Shared>>,
    id: Result<UrlPath<String>, PathRejection>,
) -> ApiResult {
    let id = parse_id(id)?;
    match sh.store.get(&id).await? {
        Some(job) => {
            let evidence = sh.store.evidence(&id).await?;
            let decisions = sh.store.decisions(&id).await?;
            let publication = sh.store.publication(&id).await?;
            let later = sh.store.later_attempt(&id).await?.map(|j| j.id);
            let audit = sh.store.audit_of(id.as_str(), MAX_JOB_AUDIT).await?;
            let mut view = job_view_with_gates(&job, &evidence);
            if let Some(map) = view.as_object_mut() {
                map.insert(
                    "review".to_owned(),
                    review_summary(&decisions, publication.as_deref(), later.as_ref()),
                );
                map.insert("audit".to_owned(), serde_json::json!(audit));
            }
            Ok(axum::Json(serde_json::json!({"job": view})).into_response())
        }
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "PATCH_CANDIDATE_JOBS_NOT_FOUND",
            "PATCH_CANDIDATE_JOBS_NOT_FOUND: no such job",
        )),
    }
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AuditQuery {
    after: Option<i64>,
    limit: Option<usize>,
}

/// `GET /v1/audit?after=SEQ&limit=N`: the audit trail after entry `after` (default 0), oldest
/// first, at most `limit` entries (default 100, at most 1000); the next page starts after the
/// last entry's `seq`. Needs `admin` (the route table).
pub(super) async fn audit(State(sh): State<Arc<Shared>>, request: Request) -> ApiResult {
    let query = request.uri().query().unwrap_or_default();
    let q: AuditQuery = serde_urlencoded::from_str(query)
        .ok()
        .filter(|q: &AuditQuery| q.after.is_none_or(|a| a >= 0))
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "PATCH_CANDIDATE_SERVICE_QUERY",
                "PATCH_CANDIDATE_SERVICE_QUERY: expected ?after=SEQ&limit=N (SEQ at least 0)",
            )
        })?;
    let limit = q.limit.unwrap_or(100).clamp(1, jobs::MAX_AUDIT_LIST);
    let entries = sh.store.audit(q.after.unwrap_or(0), limit).await?;
    let next_after = entries.last().map(|e| e.seq);
    Ok(axum::Json(serde_json::json!({
        "audit": entries,
        "next_after": next_after,
    }))
    .into_response())
}

pub(super) async fn cancel(
    State(sh): State<Arc<Shared>>,
    id: Result<UrlPath<String>, PathRejection>,
) -> ApiResult {
    let id = parse_id(id)?;
    let job = sh.store.cancel(&id).await?;
    tracing::info!(code = "PATCH_CANDIDATE_JOB_CANCEL", job = %job.id, state = job.state.as_str(), "cancel requested");
    Ok(axum::Json(serde_json::json!({"job": job_view(&job)})).into_response())
}

pub(super) async fn retry(
    State(sh): State<Arc<Shared>>,
    id: Result<UrlPath<String>, PathRejection>,
) -> ApiResult {
    let id = parse_id(id)?;
    let job = sh.store.retry(&id).await?;
    sh.wake.notify_one();
    tracing::info!(code = "PATCH_CANDIDATE_JOB_RETRY", job = %job.id, "queued again");
    Ok(axum::Json(serde_json::json!({"job": job_view(&job)})).into_response())
}

pub(super) async fn candidate(
    State(sh): State<Arc<Shared>>,
    id: Result<UrlPath<String>, PathRejection>,
) -> ApiResult {
    let id = parse_id(id)?;
    match sh.store.candidate(&id).await? {
        Some(bytes) => Ok((
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            bytes,
        )
            .into_response()),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "PATCH_CANDIDATE_JOBS_NOT_FOUND",
            "PATCH_CANDIDATE_JOBS_NOT_FOUND: no candidate for this job (not completed, or no such job)",
        )),
    }
}
