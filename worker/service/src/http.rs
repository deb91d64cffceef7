//! The HTTP API (axum, HTTP/1.1): `/healthz`, `/readyz` for probes; `/metrics` and `/v1/jobs…`
//! behind a bearer token read from `<state dir>/api-token` (0600, generated on first start) and
//! compared in constant time. Bodies are bounded and parsed strictly (unknown fields refused);
//! ids in paths go through the store's fallible id types. Every connection has a header-read
//! timeout, every body a read deadline, and each class of route its own bounded slots (see
//! `http_limits.rs`), so unauthenticated clients cannot starve the API or the probes. Every error
//! is `{"error": {"code", "message"}}`.

use std::io::{Read as _, Write as _};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path as UrlPath, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use jobs::{Job, JobState};
use subtle::ConstantTimeEq as _;
use tokio::net::TcpListener;
use vocab::JobId;
use vocab::{Coded, FailureClass};

use super::submission::{Submission, prepare};

#[path = "http_limits.rs"]
mod limits;
#[path = "review_api.rs"]
pub(crate) mod review_api;
#[path = "ui_routes.rs"]
mod ui_routes;
use super::{ServiceError, Shared};
pub use review_api::PublishTarget;

/// The token file in the state directory.
pub const TOKEN_FILE: &str = state::API_TOKEN.name;
/// Largest request body: an approval (1 MiB) and a policy (1 MiB) as JSON strings, escaped.
const MAX_BODY_BYTES: usize = 5 * 1024 * 1024;
/// Most jobs one list returns.
const MAX_LIST: usize = 1000;

/// The API token of this state directory: read, or generated (256 random bits, hex, 0600,
/// exclusively created) on first start.
///
/// # Errors
/// `PATCH_CANDIDATE_SERVICE_STATE` when the file cannot be read or created, is not 0600, or is
/// malformed.
pub fn load_or_create_token(state: &Path) -> Result<Vec<u8>, ServiceError> {
    use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
    let path = state::API_TOKEN.path_in(state);
    let bad = |detail: &'static str| ServiceError::State { detail };
    match std::fs::File::open(&path) {
        Ok(f) => {
            let meta = f.metadata().map_err(|_| bad("cannot read the API token"))?;
            if meta.mode() & 0o077 != 0 {
                return Err(bad("the API token file is readable by others (want 0600)"));
            }
            let mut text = String::new();
            f.take(256)
                .read_to_string(&mut text)
                .map_err(|_| bad("cannot read the API token"))?;
            let token = text.trim_end_matches('\n');
            if token.len() < 32 || !token.bytes().all(|b| b.is_ascii_alphanumeric()) {
                return Err(bad("the API token file is malformed"));
            }
            Ok(token.as_bytes().to_vec())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            super::create_private_dir(state)?;
            let mut raw = [0_u8; 32];
            getrandom::fill(&mut raw).map_err(|_| bad("no randomness for the API token"))?;
            let token = hex::encode(raw);
            let written = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .and_then(|mut f| f.write_all(format!("{token}\n").as_bytes()));
            match written {
                Ok(()) => Ok(token.into_bytes()),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    load_or_create_token(state)
                }
                Err(_) => Err(bad("cannot write the API token")),
            }
        }
        Err(_) => Err(bad("cannot read the API token")),
    }
}

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
fn class_status(class: FailureClass) -> StatusCode {
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
            Self::Vocab(_) | Self::Input { .. } => StatusCode::BAD_REQUEST,
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
            | Self::NotAccepted { .. } => StatusCode::CONFLICT,
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

/// The public view of a job (no approval bytes; `spec` is the store's serialised spec).
pub fn job_view(job: &Job) -> serde_json::Value {
    serde_json::json!({
        "id": job.id.as_str(),
        "state": job.state.as_str(),
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "run_at_ms": job.run_at_ms,
        "created_at_ms": job.created_at_ms,
        "updated_at_ms": job.updated_at_ms,
        "attempt_id": job.attempt_id.as_ref().map(vocab::AttemptId::as_str),
        "host": job.host.as_ref().map(vocab::HostId::as_str),
        "lease_until_ms": job.lease_until_ms,
        "cancel_requested": job.cancel_requested,
        "last_error": job.last_error.as_ref().map(|f| serde_json::json!({"code": f.code, "message": f.message})),
        "candidate_digest": job.candidate_digest,
        "spec": job.spec,
    })
}

/// [`job_view`] with the job's gate results (`gates`: name, outcome, evidence digest, wall time;
/// the evidence documents themselves stay in the store).
pub fn job_view_with_gates(job: &Job, evidence: &[jobs::EvidenceDocument]) -> serde_json::Value {
    let mut view = job_view(job);
    if let Some(map) = view.as_object_mut() {
        let gates: Vec<serde_json::Value> = evidence
            .iter()
            .map(|d| {
                serde_json::json!({
                    "gate": d.gate(),
                    "outcome": d.outcome().as_str(),
                    "evidence_digest": d.digest(),
                    "wall_ms": d.wall_ms(),
                })
            })
            .collect();
        map.insert("gates".to_owned(), serde_json::Value::Array(gates));
    }
    view
}

/// The job id of a path: a segment axum cannot decode (invalid UTF-8 after percent-decoding) is
/// refused like any other malformed id, with the API's JSON error rather than axum's text.
fn parse_id(raw: Result<UrlPath<String>, PathRejection>) -> Result<JobId, ApiError> {
    let parsed = raw.ok().and_then(|UrlPath(id)| JobId::parse(&id).ok());
    parsed.ok_or_else(|| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "PATCH_CANDIDATE_JOBS_ID",
            "PATCH_CANDIDATE_JOBS_ID: not a job id (job_ and 32 lowercase hex digits)",
        )
    })
}

async fn healthz() -> Response {
    axum::Json(serde_json::json!({"status": "ok"})).into_response()
}

/// 503 `PATCH_CANDIDATE_SERVICE_NOT_READY`: the service runs but cannot serve jobs now.
fn not_ready(why: &str) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "PATCH_CANDIDATE_SERVICE_NOT_READY",
        format!("PATCH_CANDIDATE_SERVICE_NOT_READY: {why}"),
    )
}

fn unauthorized() -> ApiError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "PATCH_CANDIDATE_SERVICE_UNAUTHORIZED",
        "PATCH_CANDIDATE_SERVICE_UNAUTHORIZED: a valid bearer token is required",
    )
}

/// 200 while the host claims work; 503 while it drains (whatever the store's health) or while
/// its job store is unreachable.
async fn readyz(State(sh): State<Arc<Shared>>) -> Response {
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

async fn metrics(State(sh): State<Arc<Shared>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4"),
        )],
        sh.metrics.render(),
    )
        .into_response()
}

/// Whether the request says its body is JSON (`application/json`, any case, parameters allowed).
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
}

/// A strict JSON body: `application/json`, at most [`MAX_BODY_BYTES`], unknown fields and
/// trailing bytes refused; errors name the JSON path, never the value.
async fn json_body<T: serde::de::DeserializeOwned>(
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

async fn submit(State(sh): State<Arc<Shared>>, headers: HeaderMap, body: Body) -> ApiResult {
    let sub: Submission = json_body(&headers, body).await?;
    let spec = prepare(
        sub,
        &sh.opts.state_dir,
        &sh.mirrors,
        sh.opts.gates.as_deref(),
    )
    .await?;
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
struct ListQuery {
    state: Option<String>,
    limit: Option<usize>,
}

async fn list(State(sh): State<Arc<Shared>>, request: Request) -> ApiResult {
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

async fn show(
    State(sh): State<Arc<Shared>>,
    id: Result<UrlPath<String>, PathRejection>,
) -> ApiResult {
    let id = parse_id(id)?;
    match sh.store.get(&id).await? {
        Some(job) => {
            let evidence = sh.store.evidence(&id).await?;
            let decisions = sh.store.decisions(&id).await?;
            let publication = sh.store.publication(&id).await?;
            let mut view = job_view_with_gates(&job, &evidence);
            if let Some(map) = view.as_object_mut() {
                map.insert(
                    "review".to_owned(),
                    review_summary(&decisions, publication.as_deref()),
                );
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

async fn cancel(
    State(sh): State<Arc<Shared>>,
    id: Result<UrlPath<String>, PathRejection>,
) -> ApiResult {
    let id = parse_id(id)?;
    let job = sh.store.cancel(&id).await?;
    tracing::info!(code = "PATCH_CANDIDATE_JOB_CANCEL", job = %job.id, state = job.state.as_str(), "cancel requested");
    Ok(axum::Json(serde_json::json!({"job": job_view(&job)})).into_response())
}

async fn retry(
    State(sh): State<Arc<Shared>>,
    id: Result<UrlPath<String>, PathRejection>,
) -> ApiResult {
    let id = parse_id(id)?;
    let job = sh.store.retry(&id).await?;
    sh.wake.notify_one();
    tracing::info!(code = "PATCH_CANDIDATE_JOB_RETRY", job = %job.id, "queued again");
    Ok(axum::Json(serde_json::json!({"job": job_view(&job)})).into_response())
}

async fn candidate(
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

/// The review part of a job view: the state (the last decision wins), the number of
/// decisions, whether one was forced, the follow-up jobs retries queued (each once, oldest first)
/// and the publication record.
pub fn review_summary(
    decisions: &[jobs::StoredDecisionRow],
    publication: Option<&[u8]>,
) -> serde_json::Value {
    let state = match decisions.last().map(|d| d.row.decision()) {
        None => "pending",
        Some("accept") => "accepted",
        Some("reject") => "rejected",
        Some(_) => "retry_requested",
    };
    serde_json::json!({
        "state": state,
        "decisions": decisions.len(),
        "forced": decisions.iter().any(|d| d.row.forced()),
        "follow_up_jobs": decisions
            .iter()
            .filter_map(|d| d.follow_up_job_id.as_ref().map(JobId::as_str))
            .fold(Vec::new(), |mut seen, id| {
                if !seen.contains(&id) {
                    seen.push(id);
                }
                seen
            }),
        "publication": publication.and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok()),
    })
}

async fn not_found() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "PATCH_CANDIDATE_SERVICE_ROUTE",
        "PATCH_CANDIDATE_SERVICE_ROUTE: no such route",
    )
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "PATCH_CANDIDATE_SERVICE_METHOD",
        "PATCH_CANDIDATE_SERVICE_METHOD: method not allowed on this route",
    )
}

/// Requires `Authorization: Bearer <token>`: the first-start token (compared in constant time)
/// is the principal `operator`; any other token is looked up by its SHA-256 among the live
/// named tokens of the job store. The principal rides in the request's extensions.
async fn require_token(
    State(sh): State<Arc<Shared>>,
    mut request: Request,
    next: Next,
) -> Response {
    match authenticate(&sh, request.headers()).await {
        Ok(Some(principal)) => {
            request.extensions_mut().insert(Caller(principal));
            next.run(request).await
        }
        Ok(None) => unauthorized().into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// The authenticated principal of a request.
#[derive(Clone, Debug)]
pub(crate) struct Caller(pub(crate) review::Principal);

/// The principal of the request's bearer token, `None` when it has none or an unknown or
/// revoked one.
async fn authenticate(
    sh: &Shared,
    headers: &HeaderMap,
) -> Result<Option<review::Principal>, jobs::JobsError> {
    if authorized(headers, &sh.token) {
        return Ok(review::Principal::parse(jobs::OPERATOR_PRINCIPAL).ok());
    }
    let Some(given) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
    else {
        return Ok(None);
    };
    named_token_principal(sh, given).await
}

/// The principal of a token given in a request (the bearer token, or the UI's sign-in form):
/// the first-start token is `operator`, any other is looked up by its SHA-256 among the live
/// named tokens.
pub(crate) async fn token_principal(
    sh: &Shared,
    given: &[u8],
) -> Result<Option<review::Principal>, jobs::JobsError> {
    if given.len() == sh.token.len() && bool::from(given.ct_eq(&sh.token)) {
        return Ok(review::Principal::parse(jobs::OPERATOR_PRINCIPAL).ok());
    }
    named_token_principal(sh, given).await
}

async fn named_token_principal(
    sh: &Shared,
    given: &[u8],
) -> Result<Option<review::Principal>, jobs::JobsError> {
    if !(32..=256).contains(&given.len()) || !given.iter().all(u8::is_ascii_alphanumeric) {
        return Ok(None);
    }
    // The lookup is by hash: equality of SHA-256 digests reveals nothing usable about a token.
    let hash = jobs::TokenHash::parse(&vocab::sha256_bare_hex(given))?;
    let name = sh.store.token_principal(&hash).await?;
    Ok(name.and_then(|n| review::Principal::parse(&n).ok()))
}

/// A new named token: 256 random bits as 64 hex digits (shown once), and the hash the store
/// keeps. SHA-256 rather than a password hash (argon2): the token is high-entropy random, so a
/// slow hash adds nothing against guessing while costing every request.
///
/// # Errors
/// `PATCH_CANDIDATE_SERVICE_STATE` when no randomness is available.
pub fn mint_token() -> Result<(String, jobs::TokenHash), ServiceError> {
    let mut raw = [0_u8; 32];
    getrandom::fill(&mut raw).map_err(|_| ServiceError::State {
        detail: "no randomness for a token",
    })?;
    let token = hex::encode(raw);
    let hash = jobs::TokenHash::parse(&vocab::sha256_bare_hex(token.as_bytes())).map_err(|_| {
        ServiceError::State {
            detail: "a token hash failed its check",
        }
    })?;
    Ok((token, hash))
}

fn authorized(headers: &HeaderMap, token: &[u8]) -> bool {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return false;
    };
    let Some(given) = value.as_bytes().strip_prefix(b"Bearer ") else {
        return false;
    };
    // Lengths are not secret (the token's length is fixed); the bytes are compared in constant
    // time.
    given.len() == token.len() && bool::from(given.ct_eq(token))
}

fn route_name(path: &str) -> &'static str {
    match path.split('/').collect::<Vec<_>>().as_slice() {
        ["", "healthz"] => "healthz",
        ["", "readyz"] => "readyz",
        ["", "metrics"] => "metrics",
        ["", "v1", "jobs"] => "jobs",
        ["", "v1", "jobs", _] => "job",
        ["", "v1", "jobs", _, "cancel"] => "job_cancel",
        ["", "v1", "jobs", _, "retry"] => "job_retry",
        ["", "v1", "jobs", _, "candidate"] => "job_candidate",
        ["", "v1", "jobs", _, "review"] => "job_review",
        ["", "v1", "jobs", _, "publish"] => "job_publish",
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
        .merge(review_api::routes())
        .route_layer(middleware::from_fn_with_state(
            Arc::clone(&sh),
            require_token,
        ));
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
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
fn waiting_router(token: Arc<Vec<u8>>) -> Router {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The statuses by code the API documents (docs/SERVICE.md, docs/REVIEW.md); any other code
    /// answers by its failure class.
    fn documented_status(code: &str, class: FailureClass) -> StatusCode {
        match code {
            "PATCH_CANDIDATE_JOBS_NOT_FOUND" => StatusCode::NOT_FOUND,
            "PATCH_CANDIDATE_JOBS_STATE"
            | "PATCH_CANDIDATE_JOBS_CONFLICT"
            | "PATCH_CANDIDATE_JOBS_PUBLISHED"
            | "PATCH_CANDIDATE_JOBS_NOT_ACCEPTED"
            | "PATCH_CANDIDATE_JOBS_PUBLISHING"
            | "PATCH_CANDIDATE_JOBS_CLAIM_LOST"
            | "PATCH_CANDIDATE_REVIEW_DIGEST_MISMATCH"
            | "PATCH_CANDIDATE_REVIEW_GATES_UNMET"
            | "PATCH_CANDIDATE_REVIEW_POLICY_UNCLEAN"
            | "PATCH_CANDIDATE_REVIEW_PUBLISHED"
            | "PATCH_CANDIDATE_REVIEW_NOT_ACCEPTED"
            | "PATCH_CANDIDATE_PUBLISH_BASE_MOVED"
            | "PATCH_CANDIDATE_PUBLISH_BRANCH_EXISTS"
            | "PATCH_CANDIDATE_PUBLISH_REBASE_CONFLICT"
            | "PATCH_CANDIDATE_PUBLISH_REGATE_FAILED" => StatusCode::CONFLICT,
            "PATCH_CANDIDATE_REVIEW_REASON_REQUIRED"
            | "PATCH_CANDIDATE_REVIEW_REASON"
            | "PATCH_CANDIDATE_REVIEW_INPUT"
            | "PATCH_CANDIDATE_JOBS_ID"
            | "PATCH_CANDIDATE_JOBS_INPUT"
            | "PATCH_CANDIDATE_PUBLISH_INPUT" => StatusCode::BAD_REQUEST,
            _ => class_status(class),
        }
    }

    fn jobs_errors() -> Vec<jobs::JobsError> {
        use jobs::{Backend, JobsError as J};
        let id = || "job_00000000000000000000000000000000".to_owned();
        vec![
            J::from(vocab::JobId::parse("x").unwrap_err()),
            J::Spec {
                field: "commit",
                detail: "x",
            },
            J::Input {
                field: "code",
                detail: "x",
            },
            J::DatabaseUrl { detail: "x".into() },
            J::NotFound { id: id() },
            J::State {
                id: id(),
                state: "completed",
                detail: "x",
            },
            J::Unavailable {
                backend: Backend::Postgres,
                detail: "x".into(),
            },
            J::Database {
                backend: Backend::Sqlite,
                detail: "x".into(),
            },
            J::Schema {
                found: 9,
                supported: 1,
            },
            J::Corrupt { field: "state" },
            J::Conflict { what: "x" },
            J::Published { id: id() },
            J::NotAccepted { id: id() },
            J::Publishing {
                id: id(),
                holder: "h".into(),
                branch: "b".into(),
            },
            J::ClaimLost { id: id() },
            J::Io {
                what: "x",
                detail: "x".into(),
            },
        ]
    }

    /// The answer to `e`: its own code and message, and the documented status of its code.
    fn assert_documented<E: ApiStatus>(e: E) {
        let (code, message) = (e.code(), e.to_string());
        let status = documented_status(code, e.class());
        let answer = ApiError::from(e);
        assert_eq!(
            (answer.status, answer.code, answer.message),
            (status, code, message)
        );
    }

    /// The status comes from the error's type and variant, and is the documented one for every
    /// code of the job store, review and publication, wrapped in a service error or not.
    #[test]
    fn statuses_follow_the_error_type() {
        for e in jobs_errors() {
            assert_documented(e);
        }
        for e in jobs_errors() {
            assert_documented(ServiceError::Jobs(e));
        }
        let digest = vocab::Sha256::of(b"a");
        let review = [
            review::ReviewError::DigestMismatch {
                named: digest,
                actual: vocab::Sha256::of(b"b"),
            },
            review::ReviewError::ReasonRequired { what: "reject" },
            review::ReviewError::Reason { detail: "x" },
            review::ReviewError::Principal { detail: "x" },
            review::ReviewError::GatesUnmet { gates: "g".into() },
            review::ReviewError::PolicyUnclean { state: "missing" },
            review::ReviewError::Published,
            review::ReviewError::NotAccepted { state: "pending" },
            review::ReviewError::Record { detail: "x" },
            review::ReviewError::Input {
                field: "decision",
                detail: "x".into(),
            },
            review::ReviewError::State { detail: "x" },
        ];
        for e in review {
            assert_documented(e);
        }
        let snapshot_usage = || {
            finalizer::FinalizeError::Snapshot(snapshot::SnapshotError::ApproveValue {
                flag: "--task",
                reason: "x",
            })
        };
        let publish = [
            publish::PublishError::Input { detail: "x" },
            publish::PublishError::CandidateMismatch { detail: "x" },
            publish::PublishError::BaselineMissing,
            publish::PublishError::BaseMissing,
            publish::PublishError::BaseMoved {
                expected: "a".repeat(40),
                seen: "b".repeat(40),
            },
            publish::PublishError::GitVersion { need: "2.38" },
            publish::PublishError::RebaseConflict,
            publish::PublishError::RegateFailed,
            publish::PublishError::RegateUnavailable,
            publish::PublishError::BranchExists,
            publish::PublishError::PushRejected { detail: "x" },
            publish::PublishError::Auth,
            publish::PublishError::Unreachable { detail: "x" },
            publish::PublishError::Credential { detail: "x" },
            publish::PublishError::Mirror { detail: "x" },
            publish::PublishError::Git { detail: "x" },
            publish::PublishError::Forge { detail: "x" },
            publish::PublishError::Finalize(snapshot_usage()),
        ];
        for e in publish {
            assert_documented(e);
        }
        // Errors without statuses of their own answer by their class (400, 422, 503).
        assert_documented(snapshot_usage());
        assert_documented(finalizer::FinalizeError::VerifyApply);
        assert_documented(finalizer::FinalizeError::StoreIo { detail: "x".into() });
        assert_documented(policy::PolicyError::RulesVersion);
        assert_documented(gate::GateError::Runner);
        assert_documented(ServiceError::Repository { detail: "x" });
        assert_documented(ServiceError::Locked);
        assert_documented(ServiceError::Finalize(snapshot_usage()));
    }

    #[test]
    fn bearer_tokens_compare_whole() {
        let token = b"abcdef0123456789abcdef0123456789";
        let mut h = HeaderMap::new();
        assert!(!authorized(&h, token));
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer abcdef0123456789abcdef0123456789"),
        );
        assert!(authorized(&h, token));
        for bad in [
            "Bearer abcdef0123456789abcdef012345678",
            "Bearer abcdef0123456789abcdef01234567899",
            "bearer abcdef0123456789abcdef0123456789",
            "Basic abcdef0123456789abcdef0123456789",
            "Bearer  abcdef0123456789abcdef0123456789",
        ] {
            h.insert(header::AUTHORIZATION, HeaderValue::from_static(bad));
            assert!(!authorized(&h, token), "{bad}");
        }
    }

    /// One HTTP/1.1 request on a fresh connection; the status and the body.
    async fn call(
        addr: std::net::SocketAddr,
        method: &str,
        path: &str,
        token: Option<&str>,
    ) -> (u16, String) {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let auth = token
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        let head =
            format!("{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{auth}\r\n");
        stream.write_all(head.as_bytes()).await.unwrap();
        let mut raw = String::new();
        stream.read_to_string(&mut raw).await.unwrap();
        let status = raw.split(' ').nth(1).unwrap().parse().unwrap();
        let body = raw.split_once("\r\n\r\n").unwrap().1.to_owned();
        (status, body)
    }

    fn code_of(body: &str) -> String {
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with(v["error"]["code"].as_str().unwrap())
        );
        v["error"]["code"].as_str().unwrap().to_owned()
    }

    #[tokio::test]
    async fn the_waiting_api_answers_probes_then_hands_the_socket_over() {
        let token = "abcdef0123456789abcdef0123456789";
        let listener = Arc::new(TcpListener::bind("127.0.0.1:0").await.unwrap());
        let addr = listener.local_addr().unwrap();
        let (opened, done) = tokio::sync::oneshot::channel::<()>();
        let waiting = tokio::spawn(serve_waiting(
            Arc::clone(&listener),
            token.as_bytes().to_vec(),
            async move {
                let _ = done.await;
            },
        ));
        assert_eq!(call(addr, "GET", "/healthz", None).await.0, 200);
        let (status, body) = call(addr, "GET", "/readyz", None).await;
        assert_eq!(
            (status, code_of(&body).as_str()),
            (503, "PATCH_CANDIDATE_SERVICE_NOT_READY")
        );
        for path in [
            "/v1/jobs",
            "/metrics",
            "/v1/jobs/job_0/candidate",
            "/nowhere",
        ] {
            let (status, body) = call(addr, "GET", path, None).await;
            assert_eq!(
                (status, code_of(&body).as_str()),
                (401, "PATCH_CANDIDATE_SERVICE_UNAUTHORIZED"),
                "{path}"
            );
            let (status, body) =
                call(addr, "GET", path, Some("abcdef0123456789abcdef0123456788")).await;
            assert_eq!(status, 401, "{path}: {body}");
            let (status, body) = call(addr, "POST", path, Some(token)).await;
            assert_eq!(
                (status, code_of(&body).as_str()),
                (503, "PATCH_CANDIDATE_SERVICE_NOT_READY"),
                "{path}"
            );
        }
        let (status, body) = call(addr, "POST", "/readyz", None).await;
        assert_eq!(
            (status, code_of(&body).as_str()),
            (405, "PATCH_CANDIDATE_SERVICE_METHOD")
        );

        // The store is open: the waiting API stops, and the next server on the same listener
        // answers every connection, including those made while it was starting.
        opened.send(()).unwrap();
        waiting.await.unwrap();
        let early = tokio::spawn(call(addr, "GET", "/readyz", None));
        tokio::task::yield_now().await;
        let next = Router::new().route("/readyz", get(|| async { "ready" }));
        tokio::spawn(limits::serve_on(listener, next, std::future::pending()));
        assert_eq!(early.await.unwrap(), (200, "ready".to_owned()));
        assert_eq!(
            call(addr, "GET", "/readyz", None).await,
            (200, "ready".to_owned())
        );
    }

    #[test]
    fn route_names_are_templates_never_ids() {
        assert_eq!(route_name("/v1/jobs/job_0123/cancel"), "job_cancel");
        assert_eq!(route_name("/v1/jobs/../../etc"), "other");
        assert_eq!(route_name("/v1/jobs"), "jobs");
    }
}
