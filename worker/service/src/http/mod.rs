//! The HTTP API (axum, HTTP/1.1): `/healthz`, `/readyz` for probes; `/metrics` and `/v1/jobs…`
//! behind a bearer token read from `<state dir>/api-token` (0600, generated on first start) and
//! compared in constant time. Bodies are bounded and parsed strictly (unknown fields refused);
//! ids in paths go through the store's fallible id types. Every connection has a header-read
//! timeout, every body a read deadline, and each class of route its own bounded slots (see
//! `limits.rs`), so unauthenticated clients cannot starve the API or the probes. Every error
//! is `{"error": {"code", "message"}}`.
//!
//! The submodules: `routing` (the routers and serving loops), `limits` (connection and body
//! deadlines, route slots), `auth` (tokens and the authentication middleware), `errors` (the
//! error body and each code's status), `body` (ids in paths, strict JSON bodies), `views` (job
//! and review JSON views), `job_routes` (probes, metrics, `/v1/jobs…`), `review_api` (review,
//! decisions, publication), `usage_routes` (the spend ledger's report) and `ui_routes` (the review
//! web UI).

mod auth;
mod body;
mod errors;
mod forge_routes;
mod job_routes;
mod limits;
pub(crate) mod review_api;
mod routing;
mod ui_routes;
mod usage_routes;
mod views;

use crate::{ServiceError, Shared};
pub(crate) use auth::Caller;
use auth::*;
pub use auth::{load_or_create_token, mint_token};
use body::*;
pub(crate) use errors::ApiError;
use errors::*;
use job_routes::*;
pub use review_api::PublishTarget;
pub(crate) use routing::{serve_api, serve_waiting};
use usage_routes::usage;
pub use views::{job_view, job_view_with_gates, review_summary};

/// Largest request body: an approval (1 MiB) and a policy (1 MiB) as JSON strings, escaped.
const MAX_BODY_BYTES: usize = 5 * 1024 * 1024;
/// Most jobs one list returns.
const MAX_LIST: usize = 1000;
/// Most audit entries a job's view carries (its latest acts).
pub(crate) const MAX_JOB_AUDIT: usize = 100;
#[cfg(test)]
mod tests {
    use super::routing::*;
    use super::*;

    use std::sync::Arc;

    use axum::Router;

    use axum::http::{HeaderMap, HeaderValue, StatusCode, header};

    use axum::routing::get;

    use tokio::net::TcpListener;
    use vocab::FailureClass;

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
            | "PATCH_CANDIDATE_PUBLISH_BRANCH_MOVED"
            | "PATCH_CANDIDATE_PUBLISH_REBASE_CONFLICT"
            | "PATCH_CANDIDATE_PUBLISH_REGATE_FAILED" => StatusCode::CONFLICT,
            "PATCH_CANDIDATE_SERVICE_FORBIDDEN" | "PATCH_CANDIDATE_SERVICE_TWO_PERSON" => {
                StatusCode::FORBIDDEN
            }
            "PATCH_CANDIDATE_REVIEW_REASON_REQUIRED"
            | "PATCH_CANDIDATE_REVIEW_REASON"
            | "PATCH_CANDIDATE_REVIEW_INPUT"
            | "PATCH_CANDIDATE_JOBS_ID"
            | "PATCH_CANDIDATE_JOBS_INPUT"
            | "PATCH_CANDIDATE_JOBS_DAY"
            | "PATCH_CANDIDATE_JOBS_ROLLUP_LIMIT"
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
            J::Day { detail: "x" },
            J::RollupLimit { limit: 1 },
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
            publish::PublishError::BranchMoved,
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
        assert_documented(ServiceError::Forbidden {
            role: jobs::Role::Publish,
        });
        assert_documented(ServiceError::TwoPerson { detail: "x" });
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

    /// The route table of docs/SERVICE.md ("Roles"): reads need no role, submissions and
    /// their cancel and re-queue `submit`, decisions `review`, publication `publish`, the audit
    /// trail and any path the table does not know `admin`.
    #[test]
    fn every_route_needs_its_documented_role() {
        use axum::http::Method;
        use jobs::Role;
        let id = "job_00000000000000000000000000000000";
        let table = [
            (Method::GET, "/metrics".to_owned(), None),
            (Method::GET, "/v1/jobs".to_owned(), None),
            (Method::GET, format!("/v1/jobs/{id}"), None),
            (Method::GET, format!("/v1/jobs/{id}/candidate"), None),
            (Method::GET, format!("/v1/jobs/{id}/review"), None),
            (
                Method::GET,
                format!("/v1/jobs/{id}/review/attempt-diff"),
                None,
            ),
            (Method::POST, "/v1/jobs".to_owned(), Some(Role::Submit)),
            (
                Method::POST,
                format!("/v1/jobs/{id}/cancel"),
                Some(Role::Submit),
            ),
            (
                Method::POST,
                format!("/v1/jobs/{id}/retry"),
                Some(Role::Submit),
            ),
            (
                Method::POST,
                format!("/v1/jobs/{id}/review"),
                Some(Role::Review),
            ),
            (
                Method::POST,
                format!("/v1/jobs/{id}/publish"),
                Some(Role::Publish),
            ),
            (Method::GET, "/v1/audit".to_owned(), Some(Role::Admin)),
            (Method::GET, "/v1/usage".to_owned(), None),
            (Method::POST, "/v1/usage".to_owned(), Some(Role::Admin)),
            (Method::GET, "/v1/tokens".to_owned(), Some(Role::Admin)),
            (Method::DELETE, format!("/v1/jobs/{id}"), Some(Role::Admin)),
            (Method::POST, "/metrics".to_owned(), Some(Role::Admin)),
        ];
        for (method, path, role) in table {
            assert_eq!(required_role(&method, &path), role, "{method} {path}");
        }
    }

    #[test]
    fn route_names_are_templates_never_ids() {
        assert_eq!(route_name("/v1/jobs/job_0123/cancel"), "job_cancel");
        assert_eq!(route_name("/v1/jobs/../../etc"), "other");
        assert_eq!(route_name("/v1/jobs"), "jobs");
        assert_eq!(route_name("/v1/usage"), "usage");
    }
}
