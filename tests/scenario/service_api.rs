//! The HTTP API of `patch-candidate serve` under hostile and careless clients: a real `serve`
//! process on a fresh SQLite state directory, spoken to over raw TCP so that every header and
//! byte is the test's choice. No turn runs here (no job is ever accepted), but `serve` negotiates
//! with the Docker daemon at start-up, so the tests that start it are `docker_*` tests.
//!
//! What they prove: every protected route needs the bearer token; a public bind needs
//! `--listen-public`; the token file is private and reused; bad bodies, bad ids and unknown routes
//! are refused with `{"error": {"code", "message"}}` and a stable code; a refused submission writes
//! nothing; 1,000 concurrent requests are all answered while the process stays small.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::time::Duration;

use crate::support::*;

/// One answer: status, lower-cased head, body.
struct Answer {
    status: u16,
    head: String,
    body: Vec<u8>,
}

impl Answer {
    /// The body as the API's error document; returns its code after checking the shape.
    fn error_code(&self) -> String {
        let v: serde_json::Value = serde_json::from_slice(&self.body).unwrap_or_else(|_| {
            panic!(
                "error body is not JSON (status {}): {:?}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        });
        let obj = v.as_object().unwrap();
        assert_eq!(obj.len(), 1, "only the error member: {v}");
        let err = v["error"]
            .as_object()
            .unwrap_or_else(|| panic!("no error object: {v}"));
        assert_eq!(err.len(), 2, "error has code and message only: {v}");
        let code = err["code"].as_str().unwrap().to_owned();
        let message = err["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!("{code}: ")),
            "message starts with its code: {v}"
        );
        assert!(
            self.head.contains("content-type: application/json"),
            "error content type: {}",
            self.head
        );
        code
    }

    fn expect_error(&self, status: u16, code: &str, what: &str) {
        assert_eq!(
            self.status,
            status,
            "{what}: {:?}",
            String::from_utf8_lossy(&self.body)
        );
        assert_eq!(self.error_code(), code, "{what}");
    }
}

/// Sends `head` (the request line and headers, without the blank line) and `body`; reads the
/// whole answer (the request says `Connection: close`).
fn request(addr: SocketAddr, head: &str, body: &[u8]) -> Answer {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    let mut raw_head = head.to_owned();
    if !raw_head.to_ascii_lowercase().contains("\r\nconnection:") {
        raw_head.push_str("\r\nConnection: close");
    }
    raw_head.push_str("\r\n\r\n");
    stream.write_all(raw_head.as_bytes()).unwrap();
    // The server may answer (401, 413) and close before it has read everything.
    let _ = stream.write_all(body);
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let (status, head, body) = parse_answer(&raw);
    Answer {
        status,
        head: head.to_ascii_lowercase(),
        body,
    }
}

/// `method path` with the token (when given) and no body.
fn call(addr: SocketAddr, method: &str, path: &str, token: Option<&str>) -> Answer {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: localhost");
    if let Some(t) = token {
        head.push_str(&format!("\r\nAuthorization: Bearer {t}"));
    }
    if method == "POST" {
        head.push_str("\r\nContent-Length: 0");
    }
    request(addr, &head, b"")
}

/// `POST /v1/jobs` with `content_type` (when given) and `body`.
fn post_jobs(addr: SocketAddr, token: &str, content_type: Option<&str>, body: &[u8]) -> Answer {
    let mut head = format!(
        "POST /v1/jobs HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\nContent-Length: {}",
        body.len()
    );
    if let Some(ct) = content_type {
        head.push_str(&format!("\r\nContent-Type: {ct}"));
    }
    request(addr, &head, body)
}

/// Jobs in the store, read directly (not through the API under test).
fn stored_jobs(state: &Path) -> usize {
    with_store(state, None, async |store| {
        store.list(None, 1000).await.unwrap().len()
    })
}

/// The peak resident set of process `pid` in KiB (`VmHWM`).
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

const SOME_ID: &str = "job_0123456789abcdef0123456789abcdef";

#[test]
fn service_api_refuses_a_public_listen_address_without_listen_public() {
    for listen in ["0.0.0.0:0", "[::]:0", "192.0.2.1:8080"] {
        let state = tempfile::tempdir().unwrap();
        let out = bin()
            .args(["--json", "serve", "--listen", listen])
            .env("PATCH_CANDIDATE_STATE_DIR", state.path())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{listen}: {out:?}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            v["error"]["code"], "PATCH_CANDIDATE_SERVICE_LISTEN",
            "{listen}"
        );
        assert!(error_message(&v).contains("--listen-public"));
        // Refused before anything was written: no token, no store.
        assert!(!state.path().join("api-token").exists(), "{listen}");
        assert!(!state.path().join("jobs.sqlite3").exists(), "{listen}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_service_api_needs_the_bearer_token_on_every_protected_route() {
    let Some((_guard, _state, service, addr, token)) = serve_fresh().await else {
        return;
    };
    let wrong_same_length: String = token
        .chars()
        .map(|c| if c == 'a' { 'b' } else { 'a' })
        .collect();
    let routes = [
        ("GET", "/metrics".to_owned()),
        ("GET", "/v1/jobs".to_owned()),
        ("POST", "/v1/jobs".to_owned()),
        ("GET", format!("/v1/jobs/{SOME_ID}")),
        ("POST", format!("/v1/jobs/{SOME_ID}/cancel")),
        ("POST", format!("/v1/jobs/{SOME_ID}/retry")),
        ("GET", format!("/v1/jobs/{SOME_ID}/candidate")),
        ("GET", format!("/v1/jobs/{SOME_ID}/review")),
        ("GET", format!("/v1/jobs/{SOME_ID}/review/attempt-diff")),
        ("POST", format!("/v1/jobs/{SOME_ID}/review")),
        ("POST", format!("/v1/jobs/{SOME_ID}/publish")),
        ("GET", "/v1/audit".to_owned()),
    ];
    let bad_headers = [
        None,
        Some(String::new()),
        Some(format!("Authorization: Bearer {wrong_same_length}")),
        Some(format!(
            "Authorization: Bearer {}",
            &token[..token.len() - 1]
        )),
        Some(format!("Authorization: Bearer {token}0")),
        Some(format!("Authorization: Bearer {}", "0".repeat(4096))),
        Some(format!("Authorization: bearer {token}")),
        Some(format!("Authorization: Basic {token}")),
        Some(format!("Authorization: Bearer  {token}")),
        Some(format!("Authorization: {token}")),
        Some("Authorization: Bearer".to_owned()),
    ];
    for (method, path) in &routes {
        for header in &bad_headers {
            let mut head = format!("{method} {path} HTTP/1.1\r\nHost: localhost");
            if let Some(h) = header.as_ref().filter(|h| !h.is_empty()) {
                head.push_str("\r\n");
                head.push_str(h);
            }
            let body: &[u8] = if *method == "POST" { b"{}" } else { b"" };
            if *method == "POST" {
                head.push_str("\r\nContent-Type: application/json\r\nContent-Length: 2");
            }
            let answer = request(addr, &head, body);
            let what = format!("{method} {path} with {header:?}");
            answer.expect_error(401, "PATCH_CANDIDATE_SERVICE_UNAUTHORIZED", &what);
            assert!(
                answer.head.contains("www-authenticate: bearer"),
                "{what}: {}",
                answer.head
            );
        }
    }
    // The token is never echoed back.
    let answer = call(addr, "GET", "/v1/jobs", Some(&wrong_same_length));
    assert!(!String::from_utf8_lossy(&answer.body).contains(&wrong_same_length));
    // Probes need no token; the right token opens the rest.
    assert_eq!(call(addr, "GET", "/healthz", None).status, 200);
    assert_eq!(call(addr, "GET", "/readyz", None).status, 200);
    let (status, body) = http(addr, "GET", "/v1/jobs", Some(&token), None);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let metrics = call(addr, "GET", "/metrics", Some(&token));
    assert_eq!(metrics.status, 200);
    assert!(metrics.head.contains("content-type: text/plain"));
    call(addr, "GET", &format!("/v1/jobs/{SOME_ID}"), Some(&token)).expect_error(
        404,
        "PATCH_CANDIDATE_JOBS_NOT_FOUND",
        "a well-formed id that does not exist",
    );
    drop(service);
    tally("docker_service_api_needs_the_bearer_token_on_every_protected_route");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_service_api_token_file_is_private_and_reused() {
    let Some((_docker, _guard)) = locked_docker().await else {
        return;
    };
    let state = tempfile::tempdir().unwrap();
    let path = state.path().join("api-token");
    assert!(!path.exists());

    let first = Service::start(state.path(), &ServeOpts::default());
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600, "created 0600");
    let token = first.token();
    assert_eq!(token.len(), 64, "256 random bits as hex");
    assert!(token.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(
        call(first.addr, "GET", "/v1/jobs", Some(&token)).status,
        200
    );
    assert_eq!(first.stop().code(), Some(0));

    // A second start reuses the file: the same token still works.
    let second = Service::start(state.path(), &ServeOpts::default());
    assert_eq!(second.token(), token);
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        call(second.addr, "GET", "/v1/jobs", Some(&token)).status,
        200
    );
    assert_eq!(second.stop().code(), Some(0));

    // A token file others can read is refused, not repaired or replaced.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = bin()
        .args(["--json", "serve", "--listen", "127.0.0.1:0"])
        .env("PATCH_CANDIDATE_STATE_DIR", state.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["code"], "PATCH_CANDIDATE_SERVICE_STATE");
    assert_eq!(std::fs::read_to_string(&path).unwrap().trim(), token);
    tally("docker_service_api_token_file_is_private_and_reused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_service_api_refuses_bad_bodies_and_writes_nothing() {
    let Some((_guard, state, service, addr, token)) = serve_fresh().await else {
        return;
    };
    let json = Some("application/json");
    let shaped = |extra: &str| {
        format!(r#"{{"repository":"/nonexistent/repo","approval":"{{}}"{extra}}}"#).into_bytes()
    };

    // Oversized: declared and streamed without a length.
    let big = vec![b' '; 6 * 1024 * 1024];
    post_jobs(addr, &token, json, &big).expect_error(
        413,
        "PATCH_CANDIDATE_SERVICE_BODY",
        "6 MiB body",
    );
    let mut chunked = Vec::new();
    for _ in 0..6 {
        chunked.extend_from_slice(format!("{:x}\r\n", 1024 * 1024).as_bytes());
        chunked.extend_from_slice(&vec![b' '; 1024 * 1024]);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    request(
        addr,
        &format!(
            "POST /v1/jobs HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked"
        ),
        &chunked,
    )
    .expect_error(413, "PATCH_CANDIDATE_SERVICE_BODY", "6 MiB chunked body");

    // Not JSON, or not the submission's shape.
    for (body, what) in [
        (b"".to_vec(), "empty body"),
        (b"{".to_vec(), "truncated object"),
        (b"{\"repository\": }".to_vec(), "syntax error"),
        (b"[]".to_vec(), "an array"),
        (b"null".to_vec(), "null"),
        (b"\"text\"".to_vec(), "a string"),
        (b"{}".to_vec(), "missing fields"),
        (b"\xff\xfe{}".to_vec(), "not UTF-8"),
        (shaped(r#","admin":true"#), "an unknown field"),
        (shaped(r#","Repository":"x""#), "a field in another case"),
        (shaped(r#","max_attempts":"3""#), "a number as a string"),
        (shaped(r#","max_attempts":-1"#), "a negative number"),
        (shaped(r#","files":"app/""#), "a string for a list"),
        (shaped(r#","repository":"/other""#), "a duplicate field"),
        ([shaped(""), b"{}".to_vec()].concat(), "trailing document"),
        ([shaped(""), b"\x00".to_vec()].concat(), "trailing NUL"),
    ] {
        post_jobs(addr, &token, json, &body).expect_error(
            400,
            "PATCH_CANDIDATE_SERVICE_BODY",
            what,
        );
    }

    // The wrong media type, or none: refused before the body is read.
    for ct in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        Some("application/jsonx"),
    ] {
        post_jobs(addr, &token, ct, &shaped("")).expect_error(
            415,
            "PATCH_CANDIDATE_SERVICE_CONTENT_TYPE",
            &format!("content type {ct:?}"),
        );
    }
    // Parameters and case are allowed on the right one.
    post_jobs(
        addr,
        &token,
        Some("Application/JSON; charset=utf-8"),
        &shaped(""),
    )
    .expect_error(
        422,
        "REPOSITORY_PATCH_CONTEXT_INVALID",
        "well-formed, with an approval that is not one",
    );

    // Nothing entered the store, and the API agrees.
    assert_eq!(stored_jobs(state.path()), 0);
    let listed = call(addr, "GET", "/v1/jobs", Some(&token));
    assert_eq!(listed.status, 200);
    let v: serde_json::Value = serde_json::from_slice(&listed.body).unwrap();
    assert_eq!(v["jobs"].as_array().unwrap().len(), 0);
    // Bad list queries.
    for query in [
        "?state=done",
        "?limit=-1",
        "?limit=x",
        "?colour=red",
        "?state=queued&state=failed",
    ] {
        let answer = call(addr, "GET", &format!("/v1/jobs{query}"), Some(&token));
        assert_eq!(answer.status, 400, "{query}");
        let code = answer.error_code();
        assert!(
            code == "PATCH_CANDIDATE_SERVICE_QUERY" || code.starts_with("PATCH_CANDIDATE_JOBS_"),
            "{query}: {code}"
        );
    }
    // Still serving.
    assert_eq!(call(addr, "GET", "/healthz", None).status, 200);
    drop(service);
    tally("docker_service_api_refuses_bad_bodies_and_writes_nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_service_api_refuses_path_tricks_and_unknown_routes() {
    let Some((_guard, state, service, addr, token)) = serve_fresh().await else {
        return;
    };
    let overlong = format!("job_{}", "a".repeat(10_000));
    let tricks = [
        "..".to_owned(),
        "%2e%2e".to_owned(),
        "%2E%2E".to_owned(),
        "..%2f..%2fetc%2fpasswd".to_owned(),
        "%2e%2e%2f%2e%2e%2fjobs.sqlite3".to_owned(),
        "job_0123456789abcdef0123456789abcdeg".to_owned(),
        "job_0123456789ABCDEF0123456789ABCDEF".to_owned(),
        "job_0123456789abcdef0123456789abcde".to_owned(),
        "job_0123456789abcdef0123456789abcdef0".to_owned(),
        "JOB_0123456789abcdef0123456789abcdef".to_owned(),
        "job_0123456789abcdef0123456789abcde%00".to_owned(),
        "%00".to_owned(),
        "job_%ff%fe".to_owned(),
        "%c0%ae%c0%ae".to_owned(),
        "job_0123456789abcdef0123456789abcdef%20".to_owned(),
        "job_0123456789abcdef0123456789abcdef%0a".to_owned(),
        "~".to_owned(),
        overlong,
    ];
    for id in &tricks {
        for (method, suffix) in [
            ("GET", ""),
            ("POST", "/cancel"),
            ("POST", "/retry"),
            ("GET", "/candidate"),
        ] {
            let path = format!("/v1/jobs/{id}{suffix}");
            let answer = call(addr, method, &path, Some(&token));
            let shown: String = path.chars().take(80).collect();
            answer.expect_error(400, "PATCH_CANDIDATE_JOBS_ID", &format!("{method} {shown}"));
            assert!(
                answer.body.len() < 1024,
                "the refused id is not echoed in full: {shown}"
            );
        }
    }
    // Paths that are not routes: 404 with the route code, tokens or not.
    for path in [
        "/",
        "/v1",
        "/v1/",
        "/v1/jobs/",
        "/v2/jobs",
        "/v1/jobs/../../etc/passwd",
        "/v1/jobs/%2e%2e/%2e%2e/metrics",
        &format!("/v1/jobs/{SOME_ID}/candidate/extra"),
        &format!("/v1/jobs/{SOME_ID}/delete"),
        "/V1/JOBS",
        "/healthz/",
        "/metrics.txt",
    ] {
        for token in [Some(token.as_str()), None] {
            call(addr, "GET", path, token).expect_error(
                404,
                "PATCH_CANDIDATE_SERVICE_ROUTE",
                &format!("GET {path}"),
            );
        }
    }
    for (method, path) in [
        ("DELETE", "/v1/jobs".to_owned()),
        ("PUT", format!("/v1/jobs/{SOME_ID}")),
        ("GET", format!("/v1/jobs/{SOME_ID}/cancel")),
        ("POST", "/healthz".to_owned()),
        ("PATCH", "/metrics".to_owned()),
    ] {
        call(addr, method, &path, Some(&token)).expect_error(
            405,
            "PATCH_CANDIDATE_SERVICE_METHOD",
            &format!("{method} {path}"),
        );
    }
    // Well-formed ids that do not exist.
    call(
        addr,
        "POST",
        &format!("/v1/jobs/{SOME_ID}/cancel"),
        Some(&token),
    )
    .expect_error(
        404,
        "PATCH_CANDIDATE_JOBS_NOT_FOUND",
        "cancel of an unknown job",
    );
    call(
        addr,
        "GET",
        &format!("/v1/jobs/{SOME_ID}/candidate"),
        Some(&token),
    )
    .expect_error(
        404,
        "PATCH_CANDIDATE_JOBS_NOT_FOUND",
        "candidate of an unknown job",
    );
    assert_eq!(stored_jobs(state.path()), 0);
    drop(service);
    tally("docker_service_api_refuses_path_tricks_and_unknown_routes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_service_api_answers_1000_concurrent_requests_in_bounded_memory() {
    let Some((_guard, state, service, addr, token)) = serve_fresh().await else {
        return;
    };
    let pid = service.child.id();

    let barrier = std::sync::Arc::new(std::sync::Barrier::new(1000));
    let handles: Vec<_> = (0..1000_usize)
        .map(|i| {
            let token = token.clone();
            let barrier = std::sync::Arc::clone(&barrier);
            std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || {
                    barrier.wait();
                    match i % 5 {
                        0 => {
                            let a = call(addr, "GET", "/v1/jobs", Some(&token));
                            assert_eq!(a.status, 200);
                            let v: serde_json::Value = serde_json::from_slice(&a.body).unwrap();
                            assert!(v["jobs"].is_array());
                        }
                        1 => call(addr, "GET", "/v1/jobs", None).expect_error(
                            401,
                            "PATCH_CANDIDATE_SERVICE_UNAUTHORIZED",
                            "no token",
                        ),
                        2 => post_jobs(addr, &token, Some("application/json"), b"{\"x\":")
                            .expect_error(400, "PATCH_CANDIDATE_SERVICE_BODY", "malformed"),
                        3 => call(addr, "GET", &format!("/v1/jobs/{SOME_ID}"), Some(&token))
                            .expect_error(404, "PATCH_CANDIDATE_JOBS_NOT_FOUND", "unknown id"),
                        _ => call(addr, "GET", "/v1/jobs/%2e%2e", Some(&token)).expect_error(
                            400,
                            "PATCH_CANDIDATE_JOBS_ID",
                            "path trick",
                        ),
                    }
                })
                .unwrap()
        })
        .collect();
    let mut failed = 0;
    for h in handles {
        if h.join().is_err() {
            failed += 1;
        }
    }
    assert_eq!(
        failed, 0,
        "every one of the 1,000 requests got its expected answer"
    );

    let peak = peak_rss_kib(pid);
    eprintln!("serve peak RSS after 1,000 concurrent requests: {peak} KiB");
    assert!(peak < 256 * 1024, "peak RSS {peak} KiB");
    // The requests were counted by route template and status, never by id.
    let metrics = call(addr, "GET", "/metrics", Some(&token));
    let text = String::from_utf8(metrics.body).unwrap();
    assert!(!text.contains(SOME_ID));
    assert!(!text.contains("%2e"));
    assert_eq!(stored_jobs(state.path()), 0);
    assert_eq!(call(addr, "GET", "/healthz", None).status, 200);
    drop(service);
    tally("docker_service_api_answers_1000_concurrent_requests_in_bounded_memory");
}
