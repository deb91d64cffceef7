//! The review web UI under `/ui/` (pages rendered by the `ui` crate): sign-in with the service
//! token exchanged for a session cookie, the jobs list, a job, its candidate (unified or split
//! diff, whitespace toggle, policy and hidden-character banners, gate evidence, decisions and
//! publication), raw diffs as sandboxed `text/plain`, and the decision and publish forms, each a
//! POST with a CSRF token bound to the session and the candidate digest. Sign-in's form is bound
//! to a pre-session cookie (double submit), sign-out's to the session; both cookies are
//! `__Host-` (`Secure`, `Path=/`, no `Domain`). Failed sign-ins are throttled per client address
//! and over all, but the right token always signs in (see `ui::Sessions`).
//!
//! Every response carries the security headers of [`ui::COMMON`] and a Content-Security-Policy
//! ([`ui::PAGE_CSP`], or [`ui::RAW_CSP`] for raw views); the UI ships no JavaScript. A signed-out
//! request for a page is redirected to the sign-in page; a signed-out POST is refused.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use askama::Template as _;
use axum::Router;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{ConnectInfo, Path as UrlPath, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use jobs::{Job, JobState};
use ui::{Sessions, Shown};
use vocab::JobId;

use super::review_api::{self, ReviewContext, attempt_diff, review_context};
use super::usage_routes::{usage_range, usage_report};
use super::{ApiError, Caller, named_hash_caller, operator_caller, token_caller};
use crate::Shared;

#[path = "publish_ui.rs"]
mod publish_ui;

/// The session cookie: `__Host-` (the browser keeps it only when it is `Secure`, has `Path=/` and
/// no `Domain`, so no other host or path can set or shadow it).
const COOKIE: &str = "__Host-pc_session";
/// The sign-in form's pre-session cookie (the double-submit half of its CSRF token).
const SIGN_IN_COOKIE: &str = "__Host-pc_sign_in";
/// Largest form body.
const MAX_FORM_BYTES: usize = 64 * 1024;
/// Largest CSP report body read (the rest is not read).
const MAX_REPORT_BYTES: usize = 16 * 1024;
/// Jobs the list looks at for its counts and pages (the newest).
const LIST_WINDOW: usize = 1000;

/// The UI's own state beside the service's.
struct UiState {
    sh: Arc<Shared>,
    sessions: Sessions,
    /// CSP violation reports received (an XSS that got as far as a blocked load shows up here).
    csp_reports: AtomicU64,
}

type St = State<Arc<UiState>>;

/// The UI's routes, mounted by the API router.
pub(crate) fn router<S: Clone + Send + Sync + 'static>(sh: Arc<Shared>) -> Router<S> {
    let sessions = match Sessions::new() {
        Ok(s) => s,
        Err(e) => {
            // No randomness: the UI is not served (every /ui/ path answers 503).
            tracing::error!(code = e.code(), "the review UI is off");
            return Router::new().route("/ui/{*rest}", get(unavailable).post(unavailable));
        }
    };
    let state = Arc::new(UiState {
        sh,
        sessions,
        csp_reports: AtomicU64::new(0),
    });
    Router::new()
        .route("/ui", get(to_jobs))
        .route("/ui/", get(to_jobs))
        .route("/ui/sign-in", get(sign_in_page).post(sign_in))
        .route("/ui/sign-out", post(sign_out))
        .route("/ui/jobs", get(jobs_page))
        .route("/ui/usage", get(usage_page))
        .route("/ui/jobs/{id}", get(job_page))
        .route("/ui/jobs/{id}/candidate", get(candidate_page))
        .route("/ui/jobs/{id}/raw/{n}", get(raw_diff))
        .route(
            "/ui/jobs/{id}/decide",
            post(candidate_action::<DecisionForm>),
        )
        .route(
            "/ui/jobs/{id}/publish",
            post(candidate_action::<PublishForm>),
        )
        .route("/ui/static/ui.css", get(stylesheet))
        .route(ui::CSP_REPORT_PATH, post(csp_report))
        .route("/ui/csp-reports", get(csp_report_count))
        .layer(middleware::from_fn(security_headers))
        .layer(tower_http::compression::CompressionLayer::new().gzip(true))
        .with_state(state)
}

async fn unavailable() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        "PATCH_CANDIDATE_UI_RANDOM: the review UI is unavailable",
    )
        .into_response()
}

/// Adds the security headers; a response that set its own CSP (raw views) keeps it.
async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    for (name, value) in ui::COMMON {
        headers.insert(name, HeaderValue::from_static(value));
    }
    if !headers.contains_key(header::CONTENT_SECURITY_POLICY) {
        headers.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(ui::PAGE_CSP),
        );
    }
    response
}

fn see_other(to: &str) -> Response {
    let mut r = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(to) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r
}

async fn to_jobs() -> Response {
    see_other("/ui/jobs")
}

fn html(status: StatusCode, page: Result<String, askama::Error>) -> Response {
    match page {
        Ok(body) => (
            status,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            )],
            body,
        )
            .into_response(),
        Err(_) => {
            tracing::error!(
                code = "PATCH_CANDIDATE_UI_RENDER",
                "a page failed to render"
            );
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "PATCH_CANDIDATE_UI_RENDER: a page failed to render",
            )
                .into_response()
        }
    }
}

fn message(
    session: Option<&ui::Session>,
    status: StatusCode,
    title: &'static str,
    code: Option<&'static str>,
    text: &str,
    back: Option<String>,
) -> Response {
    let page = ui::MessagePage {
        principal: session.map(signed_in),
        title,
        code,
        message: ui::short(text),
        back,
    };
    html(status, page.render())
}

/// 503 for a store (sessions, jobs) that cannot answer.
fn store_unavailable(code: &'static str, text: &str) -> Response {
    message(
        None,
        StatusCode::SERVICE_UNAVAILABLE,
        "Unavailable",
        Some(code),
        text,
        None,
    )
}

fn api_error(session: &ui::Session, e: &ApiError, back: Option<String>) -> Response {
    // The API's messages name codes, paths and limits, never agent text; shown escaped anyway.
    message(
        Some(session),
        e.status,
        "Refused",
        Some(e.code),
        &e.message,
        back,
    )
}

/// Who is signed in, for a page's navigation (with the sign-out form's token).
fn signed_in(s: &ui::Session) -> ui::SignedIn {
    ui::SignedIn {
        name: ui::short(&s.principal),
        sign_out_csrf: s.sign_out_csrf.clone(),
    }
}

fn cookie_value<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|kv| {
            let (k, v) = kv.trim().split_once('=')?;
            (k == name).then_some(v)
        })
}

/// The signed-in session of a request and its caller: its cookie names a live session whose
/// token is still valid (a revoked named token ends its sessions at their next request), with
/// the token's roles as they are now (a role change applies at the next request).
async fn session(ui: &UiState, headers: &HeaderMap) -> Option<(ui::Session, Caller)> {
    let s = ui.sessions.get(cookie_value(headers, COOKIE)?)?;
    let caller = if s.principal == jobs::OPERATOR_PRINCIPAL {
        (s.credential == vocab::sha256_bare_hex(&ui.sh.token))
            .then(operator_caller)
            .flatten()
    } else {
        match jobs::TokenHash::parse(&s.credential) {
            Ok(hash) => named_hash_caller(&ui.sh, &hash).await.ok().flatten(),
            Err(_) => None,
        }
    };
    match caller.filter(|c| c.principal.as_str() == s.principal) {
        Some(caller) => Some((s, caller)),
        None => {
            ui.sessions.remove(&s.id);
            None
        }
    }
}

fn signed_out_redirect() -> Response {
    see_other("/ui/sign-in")
}

fn signed_out_post() -> Response {
    message(
        None,
        StatusCode::UNAUTHORIZED,
        "Signed out",
        Some("PATCH_CANDIDATE_UI_SIGNED_OUT"),
        "sign in first",
        Some("/ui/sign-in".to_owned()),
    )
}

async fn sign_in_page(State(ui): St, headers: HeaderMap) -> Response {
    if session(&ui, &headers).await.is_some() {
        return see_other("/ui/jobs");
    }
    sign_in_form_page(&ui, &headers, StatusCode::OK, None, None)
}

/// The sign-in page with `error`, its form bound to the browser's pre-session cookie (set here
/// when it has none); `retry_after_s` adds `Retry-After`.
fn sign_in_form_page(
    ui: &UiState,
    headers: &HeaderMap,
    status: StatusCode,
    error: Option<&'static str>,
    retry_after_s: Option<u64>,
) -> Response {
    let form = match ui
        .sessions
        .sign_in_form(cookie_value(headers, SIGN_IN_COOKIE))
    {
        Ok(f) => f,
        Err(e) => {
            return store_unavailable(e.code(), &e.to_string());
        }
    };
    let mut r = html(
        status,
        ui::SignInPage {
            error,
            csrf: form.csrf,
        }
        .render(),
    );
    let cookie = format!(
        "{SIGN_IN_COOKIE}={}; HttpOnly; Secure; SameSite=Strict; Path=/",
        form.cookie
    );
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
    if let Some(s) = retry_after_s
        && let Ok(v) = HeaderValue::from_str(&s.to_string())
    {
        r.headers_mut().insert(header::RETRY_AFTER, v);
    }
    r
}

/// A form body: `application/x-www-form-urlencoded`, bounded, unknown fields refused.
async fn form<T: serde::de::DeserializeOwned>(
    headers: &HeaderMap,
    body: Body,
) -> Result<T, ui::UiError> {
    let is_form = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| {
            m.trim()
                .eq_ignore_ascii_case("application/x-www-form-urlencoded")
        });
    if !is_form {
        return Err(ui::UiError::Form {
            detail: "the body must be a form (application/x-www-form-urlencoded)",
        });
    }
    let bytes = axum::body::to_bytes(body, MAX_FORM_BYTES)
        .await
        .map_err(|_| ui::UiError::Form {
            detail: "the form is too large",
        })?;
    serde_urlencoded::from_bytes(&bytes).map_err(|_| ui::UiError::Form {
        detail: "the form has unexpected or malformed fields",
    })
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SignInForm {
    /// Missing is refused like a wrong one (403), never as a malformed form.
    #[serde(default)]
    csrf: String,
    token: String,
}

/// The address a request came from (the listener puts it in every request); a request without
/// one (none reaches the UI that way) counts under the unspecified address.
fn client_ip(request: &Request) -> IpAddr {
    request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |ConnectInfo(a)| a.ip())
}

/// Signs in: the form must carry the token bound to the browser's pre-session cookie (else 403
/// `PATCH_CANDIDATE_UI_CSRF`, not counted as a failed sign-in); the token is then always
/// verified, so the right one signs in whatever the failure counters say, and a wrong one is
/// refused with 401, or 429 `PATCH_CANDIDATE_UI_SIGN_IN_LIMIT` while its address (or every
/// address together) is past the failure limit.
async fn sign_in(State(ui): St, request: Request) -> Response {
    let client = client_ip(&request);
    let (parts, body) = request.into_parts();
    let headers = parts.headers;
    let f = match form::<SignInForm>(&headers, body).await {
        Ok(f) => f,
        Err(e) => {
            tracing::warn!(code = e.code(), "sign-in form refused");
            return sign_in_form_page(
                &ui,
                &headers,
                StatusCode::BAD_REQUEST,
                Some("The sign-in form was malformed (PATCH_CANDIDATE_UI_FORM): try again."),
                None,
            );
        }
    };
    if let Err(e) = ui
        .sessions
        .check_sign_in_form(cookie_value(&headers, SIGN_IN_COOKIE), &f.csrf)
    {
        tracing::warn!(code = e.code(), "sign-in refused: no valid form token");
        return sign_in_form_page(
            &ui,
            &headers,
            StatusCode::FORBIDDEN,
            Some(
                "The sign-in form expired or came from another page (PATCH_CANDIDATE_UI_CSRF): sign in again.",
            ),
            None,
        );
    }
    let throttled = ui.sessions.sign_in_throttled(client).err();
    let token = f.token.trim().as_bytes();
    let principal = match token_caller(&ui.sh, token).await {
        Ok(Some(c)) => c.principal,
        Ok(None) => {
            ui.sessions.sign_in_failed(client);
            return match throttled {
                Some(e) => {
                    let retry = match e {
                        ui::UiError::SignInLimit { retry_after_s } => retry_after_s,
                        _ => ui::FAILURE_WINDOW.as_secs(),
                    };
                    tracing::warn!(code = e.code(), client = %client, "sign-in refused: too many failures");
                    sign_in_form_page(
                        &ui,
                        &headers,
                        StatusCode::TOO_MANY_REQUESTS,
                        Some(
                            "That token does not sign in, and too many have failed lately: check it and try again in a minute.",
                        ),
                        Some(retry),
                    )
                }
                None => {
                    tracing::warn!(code = "PATCH_CANDIDATE_UI_SIGN_IN", client = %client, "sign-in failed");
                    sign_in_form_page(
                        &ui,
                        &headers,
                        StatusCode::UNAUTHORIZED,
                        Some("That token does not sign in."),
                        None,
                    )
                }
            };
        }
        Err(e) => {
            return store_unavailable(e.code(), &e.to_string());
        }
    };
    let credential = vocab::sha256_bare_hex(token);
    let s = match ui.sessions.create(principal.as_str(), &credential) {
        Ok(s) => s,
        Err(e) => {
            return store_unavailable(e.code(), &e.to_string());
        }
    };
    tracing::info!(
        code = "PATCH_CANDIDATE_UI_SIGNED_IN",
        principal = principal.as_str(),
        "signed in"
    );
    let cookie = format!(
        "{COOKIE}={}; HttpOnly; Secure; SameSite=Strict; Path=/; Max-Age={}",
        s.id,
        ui::SESSION_LIFETIME.as_secs()
    );
    let mut r = see_other("/ui/jobs");
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
    r.headers_mut().append(
        header::SET_COOKIE,
        HeaderValue::from_static(
            "__Host-pc_sign_in=; HttpOnly; Secure; SameSite=Strict; Path=/; Max-Age=0",
        ),
    );
    r
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SignOutForm {
    #[serde(default)]
    csrf: String,
}

/// Ends the session: the form must carry the session's sign-out token (else 403
/// `PATCH_CANDIDATE_UI_CSRF` and the session lives on). Without a live session there is nothing
/// to end: the cookie is cleared.
async fn sign_out(State(ui): St, headers: HeaderMap, body: Body) -> Response {
    let signed_out = || {
        let mut r = see_other("/ui/sign-in");
        r.headers_mut().insert(
            header::SET_COOKIE,
            HeaderValue::from_static(
                "__Host-pc_session=; HttpOnly; Secure; SameSite=Strict; Path=/; Max-Age=0",
            ),
        );
        r
    };
    let Some((s, _)) = session(&ui, &headers).await else {
        return signed_out();
    };
    let checked = match form::<SignOutForm>(&headers, body).await {
        Ok(f) => ui.sessions.check_sign_out(&s, &f.csrf),
        Err(e) => Err(e),
    };
    if let Err(e) = checked {
        tracing::warn!(code = e.code(), "sign-out refused");
        let status = if matches!(e, ui::UiError::Csrf) {
            StatusCode::FORBIDDEN
        } else {
            StatusCode::BAD_REQUEST
        };
        return message(
            Some(&s),
            status,
            "Refused",
            Some(e.code()),
            &e.to_string(),
            Some("/ui/jobs".to_owned()),
        );
    }
    ui.sessions.remove(&s.id);
    signed_out()
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct JobsQuery {
    state: Option<String>,
    page: Option<usize>,
}

fn review_state_of(decisions: &[jobs::StoredDecisionRow]) -> &'static str {
    match decisions.last().map(|d| d.row.decision()) {
        None => "pending",
        Some("accept") => "accepted",
        Some("reject") => "rejected",
        Some(_) => "retry requested",
    }
}

fn job_item(job: &Job) -> ui::JobItem {
    ui::JobItem {
        id: job.id.as_str().to_owned(),
        state: job.state.as_str(),
        kind: job.kind().as_str(),
        attempts: job.attempts,
        max_attempts: job.max_attempts,
        created: ui::utc(job.created_at_ms),
        updated: ui::utc(job.updated_at_ms),
        digest: job.candidate_digest.clone(),
        error_code: job.last_error.as_ref().map(|f| ui::short(&f.code)),
        review: if job.candidate_digest.is_some() {
            "candidate"
        } else {
            "—"
        },
    }
}

async fn jobs_page(State(ui): St, headers: HeaderMap, request: Request) -> Response {
    let Some((s, _)) = session(&ui, &headers).await else {
        return signed_out_redirect();
    };
    let q: JobsQuery =
        serde_urlencoded::from_str(request.uri().query().unwrap_or_default()).unwrap_or_default();
    let filter = q.state.as_deref().and_then(|t| JobState::parse(t).ok());
    let all = match ui.sh.store.list(None, LIST_WINDOW).await {
        Ok(j) => j,
        Err(e) => return api_error(&s, &ApiError::from(e), None),
    };
    let counts = JobState::ALL
        .iter()
        .map(|st| ui::StateCount {
            state: st.as_str(),
            count: all.iter().filter(|j| j.state == *st).count(),
            current: filter == Some(*st),
        })
        .collect();
    let mut selected: Vec<&Job> = all
        .iter()
        .filter(|j| filter.is_none_or(|f| j.state == f))
        .collect();
    // Newest first.
    selected.sort_by_key(|j| std::cmp::Reverse(j.seq));
    let pages = selected.len().div_ceil(ui::PAGE_SIZE).max(1);
    let page = q.page.unwrap_or(1).clamp(1, pages);
    let href = |p: usize| match filter {
        Some(f) => format!("/ui/jobs?state={}&page={p}", f.as_str()),
        None => format!("/ui/jobs?page={p}"),
    };
    let view = ui::JobsPage {
        principal: Some(signed_in(&s)),
        counts,
        total: all.len(),
        bounded: all.len() >= LIST_WINDOW,
        filter: filter.map(JobState::as_str),
        jobs: selected
            .iter()
            .skip((page - 1) * ui::PAGE_SIZE)
            .take(ui::PAGE_SIZE)
            .map(|j| job_item(j))
            .collect(),
        page,
        pages,
        prev: (page > 1).then(|| href(page - 1)),
        next: (page < pages).then(|| href(page + 1)),
    };
    html(StatusCode::OK, view.render())
}

/// One row of the usage page.
fn usage_item(row: &jobs::UsageRollupRow) -> ui::UsageItem {
    let mut item = usage_totals(row.spend);
    item.day = row.day.to_string();
    item.principal = (!row.principal.is_empty()).then(|| ui::short(&row.principal));
    item.repository = ui::short(&row.repository);
    item
}

/// The usage page's totals row.
fn usage_totals(spend: jobs::Spend) -> ui::UsageItem {
    ui::UsageItem {
        day: String::new(),
        principal: None,
        repository: ui::short(""),
        attempts: spend.attempts,
        requests: spend.requests,
        input_tokens: spend.input_tokens,
        output_tokens: spend.output_tokens,
        total_tokens: spend.total_tokens,
    }
}

/// `/ui/usage?from=YYYY-MM-DD&to=YYYY-MM-DD`: the report of `GET /v1/usage`, same range rules,
/// same role rule (`admin` sees every principal, any other caller its own).
async fn usage_page(State(ui): St, headers: HeaderMap, request: Request) -> Response {
    let Some((s, caller)) = session(&ui, &headers).await else {
        return signed_out_redirect();
    };
    let query = request.uri().query().unwrap_or_default();
    let report = match usage_range(query, jobs::UtcDay::today()) {
        Ok((from, to)) => usage_report(&ui.sh, &caller, from, to).await,
        Err(e) => Err(e),
    };
    let report = match report {
        Ok(r) => r,
        Err(e) => return api_error(&s, &e, Some("/ui/usage".to_owned())),
    };
    let view = ui::UsagePage {
        principal: Some(signed_in(&s)),
        from: report.from.to_string(),
        to: report.to.to_string(),
        everyone: report.principal.is_none(),
        rows: report.rows.iter().map(usage_item).collect(),
        totals: usage_totals(report.totals),
    };
    html(StatusCode::OK, view.render())
}

fn parse_id(raw: Result<UrlPath<String>, PathRejection>) -> Option<JobId> {
    raw.ok().and_then(|UrlPath(id)| JobId::parse(&id).ok())
}

fn not_found(s: &ui::Session) -> Response {
    message(
        Some(s),
        StatusCode::NOT_FOUND,
        "Not found",
        Some("PATCH_CANDIDATE_JOBS_NOT_FOUND"),
        "no such job",
        Some("/ui/jobs".to_owned()),
    )
}

/// The gates table rows of a job's evidence (`bound`: only evidence bound to that digest), in
/// the order of `required` first, then the rest by name.
fn gate_items(
    evidence: &[jobs::EvidenceDocument],
    required: &[String],
    bound: Option<&vocab::Sha256>,
) -> Vec<ui::GateItem> {
    let mut parsed: Vec<(gate::GateEvidence, vocab::Sha256)> = evidence
        .iter()
        .filter_map(|d| gate::parse_evidence(d.bytes()).ok())
        .filter(|f| bound.is_none_or(|b| f.evidence.candidate_digest.as_ref() == Some(b)))
        .map(|f| (f.evidence, f.digest))
        .collect();
    parsed.sort_by(|a, b| a.0.gate.cmp(&b.0.gate));
    let mut items = Vec::new();
    let item = |ev: &gate::GateEvidence, digest: &vocab::Sha256, required: bool| {
        let ids = |l: &gate::IdList| l.ids.iter().map(|i| ui::short(i)).collect::<Vec<_>>();
        ui::GateItem {
            gate: ui::short(&ev.gate),
            required,
            outcome: ev.outcome.as_str().to_owned(),
            code: ev.code.as_deref().map(ui::short),
            tests: ev.tests.as_ref().map(|t| {
                format!(
                    "{} total: {} passed, {} failed, {} errors, {} skipped{}",
                    t.total,
                    t.passed,
                    t.failed,
                    t.error,
                    t.skipped,
                    if t.truncated { " (list capped)" } else { "" }
                )
            }),
            new_failures: ev
                .comparison
                .as_ref()
                .map(|c| ids(&c.new_failures))
                .unwrap_or_default(),
            new_failures_count: ev.comparison.as_ref().map_or(0, |c| c.new_failures.count),
            fixed: ev
                .comparison
                .as_ref()
                .map(|c| ids(&c.fixed))
                .unwrap_or_default(),
            fixed_count: ev.comparison.as_ref().map_or(0, |c| c.fixed.count),
            log_tail: if ev.log.tail.is_empty() {
                Vec::new()
            } else {
                ui::lines(&ev.log.tail, ui::LONG_CHARS)
            },
            log_total_bytes: ev.log.total_bytes,
            wall_ms: ev.wall_ms,
            evidence_digest: Some(digest.to_string()),
        }
    };
    for name in required {
        match parsed.iter().find(|(e, _)| &e.gate == name) {
            Some((e, d)) => items.push(item(e, d, true)),
            None => items.push(ui::GateItem {
                gate: ui::short(name),
                required: true,
                outcome: "missing".to_owned(),
                code: None,
                tests: None,
                new_failures: Vec::new(),
                new_failures_count: 0,
                fixed: Vec::new(),
                fixed_count: 0,
                log_tail: Vec::new(),
                log_total_bytes: 0,
                wall_ms: 0,
                evidence_digest: None,
            }),
        }
    }
    for (e, d) in &parsed {
        if !required.contains(&e.gate) {
            items.push(item(e, d, false));
        }
    }
    items
}

fn decision_items(history: &[review::StoredDecision]) -> Vec<ui::DecisionItem> {
    history
        .iter()
        .map(|d| ui::DecisionItem {
            seq: d.seq,
            decision: d.record.decision.as_str(),
            principal: ui::short(d.record.actor.principal.as_str()),
            at: ui::utc(d.record.at_ms),
            reason: d.record.reason.as_ref().map(|r| ui::short(r.as_str())),
            forced: d.record.forced,
        })
        .collect()
}

fn publication_lines(p: Option<&serde_json::Value>) -> Vec<Shown> {
    p.and_then(|v| serde_json::to_string_pretty(v).ok())
        .map(|t| ui::lines(&t, ui::LONG_CHARS))
        .unwrap_or_default()
}

async fn job_page(
    State(ui): St,
    headers: HeaderMap,
    id: Result<UrlPath<String>, PathRejection>,
) -> Response {
    let Some((s, _)) = session(&ui, &headers).await else {
        return signed_out_redirect();
    };
    let Some(id) = parse_id(id) else {
        return not_found(&s);
    };
    let sh = &ui.sh;
    let loaded = async {
        let Some(job) = sh.store.get(&id).await? else {
            return Ok(None);
        };
        let events = sh.store.events(&id).await?;
        let evidence = sh.store.evidence(&id).await?;
        let decisions = sh.store.decisions(&id).await?;
        let publication = sh.store.publication(&id).await?;
        let audit = sh.store.audit_of(id.as_str(), super::MAX_JOB_AUDIT).await?;
        let usage = sh.store.usage(&id).await?;
        Ok::<_, jobs::JobsError>(Some((
            job,
            events,
            evidence,
            decisions,
            publication,
            audit,
            usage,
        )))
    };
    let (job, events, evidence, decisions, publication, audit, usage) = match loaded.await {
        Ok(Some(x)) => x,
        Ok(None) => return not_found(&s),
        Err(e) => return api_error(&s, &ApiError::from(e), None),
    };
    // The job's required gates (missing ones listed too): the approval's and its repository
    // policy's; none without a candidate.
    let required: Vec<String> = match sh.store.candidate(&id).await {
        Ok(Some(bytes)) => finalizer::validate_candidate_json(&bytes)
            .map(|c| job.spec.required_gates(c.required_validation_gates()))
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    let history: Vec<review::StoredDecision> = job
        .candidate_digest
        .as_deref()
        .and_then(|d| d.parse::<vocab::Sha256>().ok())
        .map(|digest| {
            decisions
                .iter()
                .filter_map(|row| {
                    Some(review::StoredDecision {
                        seq: u64::try_from(row.seq).ok()?,
                        record: review::parse_record(row.row.record(), &digest).ok()?,
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let publication =
        publication.and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
    let chain = match chain_items(sh, &job).await {
        Ok(c) => c,
        Err(e) => return api_error(&s, &ApiError::from(e), None),
    };
    let view = ui::JobPage {
        principal: Some(signed_in(&s)),
        id: job.id.as_str().to_owned(),
        state: job.state.as_str(),
        kind: job.kind().as_str(),
        attempts: job.attempts,
        max_attempts: job.max_attempts,
        created: ui::utc(job.created_at_ms),
        updated: ui::utc(job.updated_at_ms),
        host: job.host.as_ref().map(|h| h.as_str().to_owned()),
        attempt: job.attempt_id.as_ref().map(|a| a.as_str().to_owned()),
        error_code: job.last_error.as_ref().map(|f| ui::short(&f.code)),
        error_message: job.last_error.as_ref().map(|f| ui::short(&f.message)),
        digest: job.candidate_digest.clone(),
        running: job.state == JobState::Running || job.state == JobState::Queued,
        events: events
            .iter()
            .rev()
            .take(200)
            .map(|e| ui::EventItem {
                at: ui::utc(e.at_ms),
                code: ui::short(&e.code),
                message: ui::short(&e.message),
            })
            .collect(),
        gates: gate_items(&evidence, &required, None),
        review: review_state_of(&decisions),
        decisions: decision_items(&history),
        publication: publication_lines(publication.as_ref()),
        chain,
        submitted_by: job.spec.submitted_by.as_deref().map(ui::short),
        audit: audit
            .iter()
            .map(|a| ui::AuditItem {
                seq: a.seq,
                at: ui::utc(a.at_ms),
                principal: ui::short(&a.principal),
                act: a.act.as_str(),
                detail: ui::short(&a.detail),
            })
            .collect(),
        usage: usage
            .iter()
            .map(|(attempt, row)| attempt_item(&crate::AttemptUsage::read(attempt.as_str(), row)))
            .collect(),
    };
    html(StatusCode::OK, view.render())
}

/// One attempt's usage row for the job page.
fn attempt_item(u: &crate::AttemptUsage) -> ui::AttemptItem {
    let dash = || "—".to_owned();
    let number = |n: Option<u64>| n.map_or_else(dash, |n| n.to_string());
    ui::AttemptItem {
        attempt: u.attempt.clone(),
        outcome: u.outcome.clone().unwrap_or_else(dash),
        wall: u.wall_ms.map_or_else(dash, crate::ms_as_seconds),
        model: u.model.clone().unwrap_or_else(dash),
        requests: number(u.requests),
        tokens: number(u.total_tokens),
        commands: number(u.commands.map(|c| c.commands)),
        failed: number(u.commands.map(|c| c.failed)),
        command_time: u
            .commands
            .map_or_else(dash, |c| crate::ms_as_seconds(c.command_ms)),
    }
}

/// The most attempts the job page walks each way along a chain.
const MAX_CHAIN_SHOWN: usize = 32;

/// The attempts of `job`'s chain, oldest first: back through the jobs each follow-up continues,
/// forward through each one's later attempt (at most [`MAX_CHAIN_SHOWN`] each way); empty when
/// the job is alone.
async fn chain_items(sh: &Shared, job: &jobs::Job) -> Result<Vec<ui::ChainItem>, jobs::JobsError> {
    let mut earlier = Vec::new();
    let mut at = job.clone();
    while let Some(f) = at.spec.follow_up.as_ref() {
        if earlier.len() == MAX_CHAIN_SHOWN {
            break;
        }
        let Some(parent) = sh.store.get(&f.supersedes_job).await? else {
            break;
        };
        earlier.push(parent.clone());
        at = parent;
    }
    earlier.reverse();
    let mut later = Vec::new();
    let mut at = job.id.clone();
    while later.len() < MAX_CHAIN_SHOWN {
        let Some(next) = sh.store.later_attempt(&at).await? else {
            break;
        };
        at = next.id.clone();
        later.push(next);
    }
    if earlier.is_empty() && later.is_empty() {
        return Ok(Vec::new());
    }
    let mut items = Vec::new();
    for (i, j) in earlier
        .iter()
        .chain(std::iter::once(job))
        .chain(later.iter())
        .enumerate()
    {
        let gates = sh
            .store
            .evidence(&j.id)
            .await?
            .iter()
            .map(|d| format!("{}: {}", d.gate(), d.outcome().as_str()))
            .collect();
        let follow_up = j.spec.follow_up.as_ref();
        items.push(ui::ChainItem {
            attempt: i + 1,
            job: j.id.as_str().to_owned(),
            round: follow_up.map_or(0, |f| f.round),
            state: j.state.as_str(),
            digest: j.candidate_digest.clone(),
            gates,
            tokens_before: follow_up.map_or(0, |f| f.chain_tokens),
            current: j.id == job.id,
        });
    }
    Ok(items)
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct CandidateQuery {
    view: Option<String>,
    ws: Option<String>,
    done: Option<String>,
}

fn wire<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// The candidate page of `context`, with an optional notice (a fixed sentence or an error).
#[expect(clippy::too_many_lines, reason = "one view model, field by field")]
async fn render_candidate(
    ui: &UiState,
    (s, caller): (&ui::Session, &Caller),
    id: &JobId,
    context: &ReviewContext,
    opts: ui::DiffOptions,
    notice: Option<(String, bool)>,
    status: StatusCode,
) -> Response {
    let package = match context.package() {
        Ok(p) => p,
        Err(e) => return api_error(s, &e, None),
    };
    let evidence = match ui.sh.store.evidence(id).await {
        Ok(e) => e,
        Err(e) => return api_error(s, &ApiError::from(e), None),
    };
    let digest = package.candidate_digest.to_string();
    let mut page = PageDiffs::new(opts);
    let files: Vec<ui::FileItem> = context
        .candidate
        .changed_files()
        .iter()
        .zip(package.changed_files.iter())
        .enumerate()
        .map(|(index, (file, listed))| {
            page.item(
                index,
                file.path().as_str(),
                listed.operation,
                listed.new_bytes,
                file.diff(),
            )
        })
        .collect();
    // The diff from the previous attempt, on what is left of the page's budget.
    let attempt = match attempt_diff(&ui.sh, context).await {
        Ok(a) => a,
        Err(e) => return api_error(s, &e, None),
    };
    let attempt_files: Vec<ui::FileItem> = attempt
        .iter()
        .flat_map(|a| a.files.iter())
        .enumerate()
        .map(|(index, f)| {
            let change = match f.change {
                review::AttemptChange::Changed => "changed",
                review::AttemptChange::Added => "added",
                review::AttemptChange::Reverted => "reverted",
            };
            page.item(index, &f.path, change, None, &f.diff)
        })
        .collect();
    let PageDiffs {
        mut hidden_total,
        hidden_files,
        ..
    } = page;
    let summary = ui::short(context.candidate.summary());
    hidden_total += summary.hidden;
    let base = format!("/ui/jobs/{}/candidate", id.as_str());
    let href = |split: bool, ws: bool| {
        let mut q = vec![if split { "view=split" } else { "view=unified" }];
        if ws {
            q.push("ws=ignore");
        }
        format!("{base}?{}", q.join("&"))
    };
    let actions = package.available_actions.clone();
    // What the caller may do is what the server allows ([`review_api::may_decide`], the
    // `publish` role); the actions check it again when a form is posted.
    let reviewer = caller.roles.contains(jobs::Role::Review);
    let can_decide = reviewer
        && actions
            .iter()
            .any(|a| matches!(*a, "accept" | "accept_forced" | "reject" | "retry"));
    let may_accept = |force: bool| {
        review_api::may_decide(
            &ui.sh.opts,
            caller,
            &context.job,
            review::Decision::Accept,
            force,
        )
        .is_ok()
    };
    let can_accept = (actions.contains(&"accept") && may_accept(false))
        || (actions.contains(&"accept_forced") && may_accept(true));
    let can_force = reviewer && caller.roles.contains(ui.sh.opts.force_role);
    let accepted = matches!(package.review_state, review::ReviewState::Accepted)
        && package.superseded_by.is_none();
    let view = ui::CandidatePage {
        principal: Some(signed_in(s)),
        job_id: id.as_str().to_owned(),
        digest: digest.clone(),
        repository: ui::short(&package.repository_full_name),
        baseline: ui::short(&package.baseline_commit_sha),
        summary,
        rationale: ui::lines(context.candidate.rationale(), ui::LONG_CHARS),
        validation_state: wire(&package.validation_state),
        review_state: package.review_state.as_str().to_owned(),
        route: wire(&package.route_decision),
        policy_clean: package.policy.as_ref().is_some_and(|p| p.clean),
        policy_digest: package.policy.as_ref().map(|p| p.report_digest.to_string()),
        findings: context
            .findings
            .iter()
            .map(|f| ui::FindingItem {
                rule: ui::short(&f.rule),
                path: f.path.as_deref().map(ui::short),
                line: f.line,
            })
            .collect(),
        hidden_total,
        hidden_files,
        gates: gate_items(
            &evidence,
            &context.facts.required_gates,
            Some(&package.candidate_digest),
        ),
        files,
        split: opts.split,
        ignore_ws: opts.ignore_whitespace,
        unified_href: href(false, opts.ignore_whitespace),
        split_href: href(true, opts.ignore_whitespace),
        ws_href: href(opts.split, !opts.ignore_whitespace),
        csrf: ui.sessions.csrf_token(s, &digest),
        actions,
        can_decide,
        can_force,
        can_publish: accepted
            && context.publication.is_none()
            && publish_ui::configured(&ui.sh)
            && caller.roles.contains(jobs::Role::Publish),
        published: publication_lines(context.publication.as_ref()),
        decisions: decision_items(&context.history),
        supersedes: context
            .job
            .spec
            .follow_up
            .as_ref()
            .map(|f| f.supersedes_job.as_str().to_owned()),
        follow_ups: context
            .follow_ups
            .iter()
            .map(|j| j.as_str().to_owned())
            .collect(),
        round: context.job.spec.follow_up.as_ref().map_or(0, |f| f.round),
        superseded_by: package.superseded_by.clone(),
        attempt_files,
        can_accept,
        notice_error: notice.as_ref().is_some_and(|n| n.1),
        notice: notice.map(|n| ui::short(&n.0)),
    };
    html(status, view.render())
}

/// The diffs of one candidate page, rendered within one byte budget
/// ([`ui::MAX_PAGE_DIFF_BYTES`]: a diff past what is left is listed as too big), counting the
/// hidden characters of the diffs and of the paths.
struct PageDiffs {
    opts: ui::DiffOptions,
    budget: usize,
    hidden_total: usize,
    hidden_files: usize,
}

impl PageDiffs {
    fn new(opts: ui::DiffOptions) -> Self {
        Self {
            opts,
            budget: ui::MAX_PAGE_DIFF_BYTES,
            hidden_total: 0,
            hidden_files: 0,
        }
    }

    /// The page's item for one file's `diff`.
    fn item(
        &mut self,
        index: usize,
        path: &str,
        operation: &'static str,
        new_bytes: Option<u64>,
        diff: &str,
    ) -> ui::FileItem {
        let rendered = if diff.len() > self.budget {
            ui::Rendered {
                body: ui::Body::TooBig(diff.len() as u64),
                added: 0,
                removed: 0,
                hidden: 0,
                cut_lines: 0,
            }
        } else {
            self.budget -= diff.len();
            ui::render_diff(diff, self.opts)
        };
        let path = ui::short(path);
        let hidden = rendered.hidden + path.hidden;
        if hidden > 0 {
            self.hidden_total += hidden;
            self.hidden_files += 1;
        }
        ui::FileItem {
            index,
            path,
            operation,
            new_bytes,
            diff_bytes: diff.len() as u64,
            added: rendered.added,
            removed: rendered.removed,
            hidden,
            cut_lines: rendered.cut_lines,
            body: rendered.body,
        }
    }
}

fn diff_options(q: &CandidateQuery) -> ui::DiffOptions {
    ui::DiffOptions {
        split: q.view.as_deref() == Some("split"),
        ignore_whitespace: q.ws.as_deref() == Some("ignore"),
    }
}

async fn candidate_page(
    State(ui): St,
    headers: HeaderMap,
    id: Result<UrlPath<String>, PathRejection>,
    request: Request,
) -> Response {
    let Some((s, caller)) = session(&ui, &headers).await else {
        return signed_out_redirect();
    };
    let Some(id) = parse_id(id) else {
        return not_found(&s);
    };
    let q: CandidateQuery =
        serde_urlencoded::from_str(request.uri().query().unwrap_or_default()).unwrap_or_default();
    let context = match review_context(&ui.sh, &id).await {
        Ok(c) => c,
        Err(e) => return api_error(&s, &e, Some(format!("/ui/jobs/{}", id.as_str()))),
    };
    // Only fixed sentences: the query names which one, never its text.
    let notice = match q.done.as_deref() {
        Some("accept") => Some("Recorded: accept.".to_owned()),
        Some("reject") => Some("Recorded: reject.".to_owned()),
        Some("retry") => {
            Some("Recorded: retry. A follow-up job is queued under the same approval.".to_owned())
        }
        Some("publish") => Some("Published.".to_owned()),
        _ => None,
    };
    render_candidate(
        &ui,
        (&s, &caller),
        &id,
        &context,
        diff_options(&q),
        notice.map(|n| (n, false)),
        StatusCode::OK,
    )
    .await
}

async fn raw_diff(
    State(ui): St,
    headers: HeaderMap,
    UrlPath((id, n)): UrlPath<(String, String)>,
) -> Response {
    let Some((s, _)) = session(&ui, &headers).await else {
        return signed_out_redirect();
    };
    let (Ok(id), Ok(n)) = (JobId::parse(&id), n.parse::<usize>()) else {
        return not_found(&s);
    };
    let context = match review_context(&ui.sh, &id).await {
        Ok(c) => c,
        Err(e) => return api_error(&s, &e, None),
    };
    let Some(file) = context.candidate.changed_files().get(n) else {
        return not_found(&s);
    };
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            ),
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(ui::RAW_CSP),
            ),
            (
                header::CONTENT_DISPOSITION,
                HeaderValue::from_static("inline"),
            ),
        ],
        file.diff().to_owned(),
    )
        .into_response()
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct DecisionForm {
    /// Missing is refused like a wrong one (403), never as a malformed form.
    #[serde(default)]
    csrf: String,
    candidate_digest: String,
    decision: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    force: Option<String>,
}

/// Records a decision through the service's one decision action ([`review_api::decide`], which
/// checks the roles), with the session's caller (`api_token`: the session stands for the token).
async fn record_decision(
    sh: &Shared,
    id: &JobId,
    caller: &Caller,
    f: &DecisionForm,
) -> Result<(), ApiError> {
    let named = review_api::named_digest(&f.candidate_digest)?;
    let reason = f.reason.trim();
    let request = review::DecisionRequest {
        candidate_digest: named,
        decision: review::Decision::parse(&f.decision)?,
        reason: (!reason.is_empty())
            .then(|| review::Reason::parse(reason))
            .transpose()?,
        force: f.force.as_deref() == Some("true"),
    };
    let decided = review_api::decide(sh, id, caller, &request).await?;
    tracing::info!(
        code = "PATCH_CANDIDATE_UI_DECISION",
        job = %id,
        seq = decided.seq,
        "decision made in the review UI"
    );
    Ok(())
}

fn csrf_refused(s: &ui::Session, id: &JobId) -> Response {
    let e = ui::UiError::Csrf;
    tracing::warn!(code = e.code(), job = %id, "form refused");
    message(
        Some(s),
        StatusCode::FORBIDDEN,
        "Refused",
        Some(e.code()),
        &e.to_string(),
        Some(format!("/ui/jobs/{}/candidate", id.as_str())),
    )
}

/// The form of a POST that acts on a candidate: the CSRF token and the digest the page showed,
/// and the action itself.
trait CandidateForm: serde::de::DeserializeOwned {
    fn csrf(&self) -> &str;
    fn candidate_digest(&self) -> &str;
    /// Carries the action out for `caller` (the service's one action checks its roles); `Ok`
    /// is the notice the candidate page then shows (its `done`).
    fn act(
        &self,
        sh: &Arc<Shared>,
        id: &JobId,
        caller: &Caller,
    ) -> impl Future<Output = Result<&'static str, ApiError>> + Send;
}

impl CandidateForm for DecisionForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
    fn candidate_digest(&self) -> &str {
        &self.candidate_digest
    }
    async fn act(
        &self,
        sh: &Arc<Shared>,
        id: &JobId,
        caller: &Caller,
    ) -> Result<&'static str, ApiError> {
        record_decision(sh, id, caller, self).await?;
        Ok(match self.decision.as_str() {
            "accept" => "accept",
            "reject" => "reject",
            _ => "retry",
        })
    }
}

impl CandidateForm for PublishForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
    fn candidate_digest(&self) -> &str {
        &self.candidate_digest
    }
    async fn act(
        &self,
        sh: &Arc<Shared>,
        id: &JobId,
        caller: &Caller,
    ) -> Result<&'static str, ApiError> {
        publish_ui::publish(sh, id, caller, self).await?;
        Ok("publish")
    }
}

/// What every candidate action checks first: a session, a job id, a well-formed form, and a
/// CSRF token bound to the session and the digest the page showed (a stale page's digest is
/// then refused by the action itself: the job holds another digest). `Err` is the response.
async fn checked_post<F: CandidateForm>(
    ui: &UiState,
    headers: &HeaderMap,
    id: Result<UrlPath<String>, PathRejection>,
    body: Body,
) -> Result<(ui::Session, Caller, JobId, F), Response> {
    let Some((s, caller)) = session(ui, headers).await else {
        return Err(signed_out_post());
    };
    let Some(id) = parse_id(id) else {
        return Err(not_found(&s));
    };
    let f: F = match form(headers, body).await {
        Ok(f) => f,
        Err(e) => {
            return Err(message(
                Some(&s),
                StatusCode::BAD_REQUEST,
                "Refused",
                Some(e.code()),
                &e.to_string(),
                None,
            ));
        }
    };
    if ui
        .sessions
        .check_csrf(&s, f.candidate_digest(), f.csrf())
        .is_err()
    {
        return Err(csrf_refused(&s, &id));
    }
    Ok((s, caller, id, f))
}

/// A refused action: the candidate page again with the refusal on it (or the error page when
/// the candidate cannot be shown).
async fn refused_action(
    ui: &UiState,
    s: &ui::Session,
    caller: &Caller,
    id: &JobId,
    e: &ApiError,
) -> Response {
    match review_context(&ui.sh, id).await {
        Ok(context) => {
            render_candidate(
                ui,
                (s, caller),
                id,
                &context,
                ui::DiffOptions {
                    split: false,
                    ignore_whitespace: false,
                },
                Some((e.message.clone(), true)),
                e.status,
            )
            .await
        }
        Err(_) => api_error(s, e, None),
    }
}

/// A candidate action (decide, publish): the checks of [`checked_post`], the action, then the
/// candidate page with its notice, or with the refusal on it.
async fn candidate_action<F: CandidateForm>(
    State(ui): St,
    headers: HeaderMap,
    id: Result<UrlPath<String>, PathRejection>,
    body: Body,
) -> Response {
    let (s, caller, id, f) = match checked_post::<F>(&ui, &headers, id, body).await {
        Ok(checked) => checked,
        Err(refused) => return refused,
    };
    match f.act(&ui.sh, &id, &caller).await {
        Ok(done) => see_other(&format!(
            "/ui/jobs/{}/candidate?done={done}#notice",
            id.as_str()
        )),
        Err(e) => refused_action(&ui, &s, &caller, &id, &e).await,
    }
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PublishForm {
    #[serde(default)]
    pub(crate) csrf: String,
    pub(crate) candidate_digest: String,
    pub(crate) branch: String,
}

async fn stylesheet() -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/css; charset=utf-8"),
        )],
        ui::STYLESHEET,
    )
        .into_response()
}

/// Counts a CSP violation report (browsers send them without credentials; the body is read
/// only up to a bound and never logged).
async fn csp_report(State(ui): St, body: Body) -> Response {
    let _ = axum::body::to_bytes(body, MAX_REPORT_BYTES).await;
    let n = ui.csp_reports.fetch_add(1, Ordering::SeqCst) + 1;
    tracing::warn!(
        code = "PATCH_CANDIDATE_UI_CSP_REPORT",
        reports = n,
        "CSP violation reported"
    );
    StatusCode::NO_CONTENT.into_response()
}

/// The number of CSP reports received (signed in).
async fn csp_report_count(State(ui): St, headers: HeaderMap) -> Response {
    if session(&ui, &headers).await.is_none() {
        return signed_out_redirect();
    }
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        )],
        ui.csp_reports.load(Ordering::SeqCst).to_string(),
    )
        .into_response()
}
