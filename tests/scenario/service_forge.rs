//! Forge webhooks against a real `serve` (SQLite and PostgreSQL): deliveries shaped as GitHub,
//! Gitea and GitLab document them (the forge crate's fixtures), signed by an independent
//! implementation (Python's `hmac`), become jobs under the repository policy's forge entries;
//! redeliveries and replays change nothing; bad signatures, oversized bodies, unknown forges,
//! unmapped users and principals without `submit` start nothing.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;

const SECRET: &str = "it's a Secret to Everybody";

fn fixture(name: &str) -> serde_json::Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../worker/forge/tests/fixtures")
        .join(name);
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// HMAC-SHA256 of `body` under [`SECRET`], lower hex, by Python's `hmac`.
fn python_hmac(body: &[u8]) -> String {
    use std::io::Write as _;
    let mut child = Command::new("python3")
        .args([
            "-c",
            "import hashlib, hmac, sys; \
             print(hmac.new(sys.argv[1].encode(), sys.stdin.buffer.read(), hashlib.sha256).hexdigest())",
            SECRET,
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(body).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Posts one delivery to `/v1/forge/{forge}` with `headers`; the status and the JSON answer.
fn deliver(service: &Service, forge: &str, headers: &str, body: &[u8]) -> (u16, serde_json::Value) {
    let raw = exchange(
        service.addr,
        "POST",
        &format!("/v1/forge/{forge}"),
        headers,
        Some(("application/json", body)),
        Duration::from_secs(60),
    );
    let (status, _, answer) = parse_answer(&raw);
    let json = serde_json::from_slice(&answer).unwrap_or(serde_json::Value::Null);
    (status, json)
}

fn github_headers(event: &str, delivery: &str, body: &[u8]) -> String {
    format!(
        "X-GitHub-Event: {event}\r\nX-GitHub-Delivery: {delivery}\r\nX-Hub-Signature-256: sha256={}\r\n",
        python_hmac(body)
    )
}

fn write_secret(path: &Path) {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .unwrap();
    f.write_all(SECRET.as_bytes()).unwrap();
}

fn write_policy(path: &Path, secrets: &Path, repo: &str) {
    let forge = |name: &str, kind: &str, login: &str, project: &str, trigger: &str| {
        format!(
            r#"
[[forge]]
name = "{name}"
kind = "{kind}"
secret_file = "{secret}"
{trigger}
users = {{ "{login}" = "forger", "mallory" = "reviewer" }}

[[forge.project]]
path = "{project}"
repository = "{repo}"
base = "main"
allowed_paths = ["app/"]
read_only_paths = ["tests/"]
"#,
            secret = secrets.join(format!("{name}.secret")).display(),
        )
    };
    let text = format!(
        "version = 1\n\n[[repository]]\nmatch = \"{repo}\"\n{}{}{}",
        forge(
            "github",
            "github",
            "Codertocat",
            "Codertocat/Hello-World",
            "label = \"bug\""
        ),
        forge(
            "gitea",
            "gitea",
            "alice",
            "gitea/webhooks",
            "command = \"/agent\""
        ),
        forge(
            "lab",
            "gitlab",
            "root",
            "gitlab-org/gitlab-test",
            "command = \"Hello\""
        ),
    );
    std::fs::write(path, text).unwrap();
}

fn token_with_roles(state: &Path, database: Option<&str>, name: &str, roles: &[&str]) {
    let mut cmd = bin();
    cmd.env("PATCH_CANDIDATE_STATE_DIR", state)
        .args(["tokens", "create", name]);
    if let Some(db) = database {
        cmd.args(["--database", db]);
    }
    for role in roles {
        cmd.args(["--role", role]);
    }
    run_ok(&mut cmd);
}

/// Waits until the delivery left the queue; its row.
async fn wait_delivery(store: &jobs::JobStore, forge: &str, id: &str) -> jobs::ForgeDelivery {
    let started = Instant::now();
    loop {
        let row = store.forge_delivery(forge, id).await.unwrap().unwrap();
        if row.state != jobs::DeliveryState::Queued {
            return row;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "delivery {id} still queued: {row:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn forge_webhooks(database: Option<&str>) {
    let state = state_with_images();
    let st = state.path();
    let f = Fixture::new();
    git_out(f.repo.path(), &["branch", "-M", "main"]);
    let repo = f.repo.path().to_str().unwrap().to_owned();
    let secrets = tempfile::tempdir().unwrap();
    for name in ["github", "gitea", "lab"] {
        write_secret(&secrets.path().join(format!("{name}.secret")));
    }
    let policy: PathBuf = st.join("repository-policy.toml");
    write_policy(&policy, secrets.path(), &repo);
    let service = Service::start(
        st,
        &ServeOpts {
            database,
            extra: vec!["--repository-policy", policy.to_str().unwrap()],
            ..ServeOpts::default()
        },
    );
    token_with_roles(st, database, "forger", &["submit"]);
    token_with_roles(st, database, "reviewer", &["review"]);
    let store = open_store(st, database).await;

    // GitHub: the issue gets the operator's label from a mapped user with `submit`: a job.
    let mut labeled = fixture("github-issues-labeled.json");
    labeled["issue"]["title"] = "Update the dashboard.".into();
    labeled["issue"]["body"] = "mode: edit".into();
    let body = serde_json::to_vec(&labeled).unwrap();
    let delivery = "72d3162e-cc78-11e3-81ab-4c9367dc0958";
    let (status, answer) = deliver(
        &service,
        "github",
        &github_headers("issues", delivery, &body),
        &body,
    );
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer["state"], "queued", "{answer}");
    assert_eq!(answer["duplicate"], false);
    let row = wait_delivery(&store, "github", delivery).await;
    assert_eq!(row.state, jobs::DeliveryState::Submitted, "{row:?}");
    let job = row.job_id.clone().unwrap();
    let done = wait_finished(st, database, job.as_str(), Duration::from_secs(180));
    assert_eq!(done["state"], "completed", "{done}");
    let spec = store.get(&job).await.unwrap().unwrap().spec;
    assert_eq!(spec.submitted_by.as_deref(), Some("forger"));
    assert_eq!(spec.repository, repo);
    assert_eq!(row.base_commit.as_deref(), Some(f.commit.as_str()));
    assert_eq!(spec.commit, f.commit);
    assert!(spec.admitted_under.is_some(), "admitted under the policy");

    // The same delivery again, and the same label replayed under a new delivery id: nothing new.
    let (status, again) = deliver(
        &service,
        "github",
        &github_headers("issues", delivery, &body),
        &body,
    );
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["duplicate"], true);
    assert_eq!(again["job"], job.as_str());
    let (status, replay) = deliver(
        &service,
        "github",
        &github_headers("issues", "replayed-1", &body),
        &body,
    );
    assert_eq!(status, 200, "{replay}");
    assert_eq!(replay["job"], job.as_str());
    assert_eq!(store.list(None, 100).await.unwrap().len(), 1);

    // Refusals: no echo of the payload, nothing recorded.
    let cases: [(&str, String, u16, &str); 4] = [
        (
            "github",
            format!(
                "X-GitHub-Event: issues\r\nX-GitHub-Delivery: d-sig\r\nX-Hub-Signature-256: sha256={}\r\n",
                "0".repeat(64)
            ),
            401,
            "PATCH_CANDIDATE_FORGE_SIGNATURE_WRONG",
        ),
        (
            "github",
            "X-GitHub-Event: issues\r\nX-GitHub-Delivery: d-none\r\n".to_owned(),
            401,
            "PATCH_CANDIDATE_FORGE_SIGNATURE_MISSING",
        ),
        (
            "nowhere",
            github_headers("issues", "d-unknown", &body),
            404,
            "PATCH_CANDIDATE_SERVICE_FORGE_UNKNOWN",
        ),
        (
            "lab",
            "X-Gitlab-Event: Issue Hook\r\nX-Gitlab-Event-UUID: d-lab\r\nX-Gitlab-Token: guess\r\n"
                .to_owned(),
            401,
            "PATCH_CANDIDATE_FORGE_SIGNATURE_WRONG",
        ),
    ];
    for (forge, headers, want, code) in cases {
        let (status, answer) = deliver(&service, forge, &headers, &body);
        assert_eq!(status, want, "{forge} {answer}");
        assert_eq!(answer["error"]["code"], code, "{answer}");
        assert!(!answer.to_string().contains("dashboard"), "{answer}");
    }
    let huge = vec![b' '; forge::MAX_WEBHOOK_BODY_BYTES + 1];
    let (status, answer) = deliver(
        &service,
        "github",
        &github_headers("issues", "d-huge", &huge),
        &huge,
    );
    assert_eq!(status, 413, "{answer}");
    assert_eq!(
        answer["error"]["code"],
        "PATCH_CANDIDATE_FORGE_BODY_TOO_LARGE"
    );
    for id in ["d-sig", "d-none", "d-lab", "d-huge"] {
        assert_eq!(store.forge_delivery("github", id).await.unwrap(), None);
    }

    // An unmapped user, another label: ignored.
    for (id, login, label, reason) in [
        ("d-unmapped", "octo-stranger", "bug", "unmapped_user"),
        ("d-label", "Codertocat", "wontfix", "other_label"),
    ] {
        let mut other = labeled.clone();
        other["sender"]["login"] = login.into();
        other["label"]["name"] = label.into();
        let body = serde_json::to_vec(&other).unwrap();
        let (status, answer) = deliver(
            &service,
            "github",
            &github_headers("issues", id, &body),
            &body,
        );
        assert_eq!(status, 202, "{answer}");
        assert_eq!(answer["state"], "ignored", "{answer}");
        assert_eq!(answer["reason"], reason, "{answer}");
    }
    // A mapped principal without `submit`: queued, then refused when its job would be built.
    let mut other = labeled.clone();
    other["sender"]["login"] = "mallory".into();
    other["issue"]["number"] = 2.into();
    let body = serde_json::to_vec(&other).unwrap();
    let (status, answer) = deliver(
        &service,
        "github",
        &github_headers("issues", "d-reviewer", &body),
        &body,
    );
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer["state"], "queued", "{answer}");
    let row = wait_delivery(&store, "github", "d-reviewer").await;
    assert_eq!(row.state, jobs::DeliveryState::Refused, "{row:?}");
    assert_eq!(row.reason, "PATCH_CANDIDATE_SERVICE_FORBIDDEN");
    assert_eq!(row.job_id, None);
    // An event we do not act on: acknowledged and ignored.
    let ping = br#"{"zen": "Keep it logically awesome.", "hook_id": 1}"#;
    let (status, answer) = deliver(
        &service,
        "github",
        &github_headers("ping", "d-ping", ping),
        ping,
    );
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer["reason"], "event");
    assert_eq!(store.list(None, 100).await.unwrap().len(), 1);

    // Gitea: an issue comment with the command word; GitLab: a note on an issue.
    let mut comment = fixture("gitea-issue-comment.json");
    comment["is_pull"] = false.into();
    comment["issue"]
        .as_object_mut()
        .unwrap()
        .remove("pull_request");
    comment["comment"]["body"] = "/agent Update the dashboard.\nmode: edit".into();
    let body = serde_json::to_vec(&comment).unwrap();
    let headers = format!(
        "X-Gitea-Event: issue_comment\r\nX-Gitea-Event-Type: issue_comment\r\nX-Gitea-Delivery: gitea-1\r\nX-Gitea-Signature: {}\r\n",
        python_hmac(&body)
    );
    let (status, answer) = deliver(&service, "gitea", &headers, &body);
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer["state"], "queued", "{answer}");
    let mut note = fixture("gitlab-note-issue.json");
    note["object_attributes"]["note"] = "Hello please update the dashboard.\nmode: edit".into();
    let body = serde_json::to_vec(&note).unwrap();
    let headers = format!(
        "X-Gitlab-Event: Note Hook\r\nX-Gitlab-Event-UUID: lab-1\r\nX-Gitlab-Token: {SECRET}\r\n"
    );
    let (status, answer) = deliver(&service, "lab", &headers, &body);
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer["state"], "queued", "{answer}");
    for (forge, id) in [("gitea", "gitea-1"), ("lab", "lab-1")] {
        let row = wait_delivery(&store, forge, id).await;
        assert_eq!(row.state, jobs::DeliveryState::Submitted, "{row:?}");
        let job = store.get(&row.job_id.unwrap()).await.unwrap().unwrap();
        assert_eq!(job.spec.submitted_by.as_deref(), Some("forger"));
    }
    assert_eq!(store.list(None, 100).await.unwrap().len(), 3);
    let metrics = metrics_text(service.addr, &service.token());
    assert!(
        metrics.contains("patch_candidate_forge_deliveries_total{state=\"queued\"} 4"),
        "{metrics}"
    );
    assert!(
        metrics.contains("patch_candidate_forge_redeliveries_total 2"),
        "{metrics}"
    );
    service.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_forge_webhooks_start_jobs_under_the_policy() {
    let Some((_docker, _guard)) = locked_docker().await else {
        return;
    };
    forge_webhooks(None).await;
    tally("docker_forge_webhooks_start_jobs_under_the_policy");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_forge_webhooks_on_postgres() {
    let Some(_docker) = docker().await else {
        return;
    };
    let Some(url) = postgres_url_or_skip().await else {
        return;
    };
    let _guard = docker_lock().lock().await;
    forge_webhooks(Some(&url)).await;
    tally("docker_forge_webhooks_on_postgres");
}

/// One request the scripted forge received.
#[derive(Clone, Debug)]
struct ForgeRequest {
    method: String,
    path: String,
    authorization: Option<String>,
    body: serde_json::Value,
}

/// The scripted forge's state: what it received, the pull requests it holds, and whether the
/// next pull request lookup is held until the test lets it go.
#[derive(Default)]
struct ForgeState {
    requests: Vec<ForgeRequest>,
    /// (number, head, base)
    pulls: Vec<(u64, String, String)>,
    next_id: u64,
    hold_next_lookup: bool,
    lookup_held: bool,
    released: bool,
}

/// A scripted GitHub and GitLab REST API on loopback (std only, one thread per connection,
/// `Connection: close`), speaking the documented shapes of the calls the service makes: issue
/// comments (GitLab: notes), pull (merge) request lookup and creation, commit statuses.
struct ScriptedGitHub {
    port: u16,
    state: std::sync::Arc<(std::sync::Mutex<ForgeState>, std::sync::Condvar)>,
}

impl ScriptedGitHub {
    fn start() -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = std::sync::Arc::new((
            std::sync::Mutex::new(ForgeState {
                next_id: 100,
                ..ForgeState::default()
            }),
            std::sync::Condvar::new(),
        ));
        let shared = std::sync::Arc::clone(&state);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let shared = std::sync::Arc::clone(&shared);
                std::thread::spawn(move || serve_forge(stream, &shared, port));
            }
        });
        Self { port, state }
    }

    fn requests(&self) -> Vec<ForgeRequest> {
        self.state.0.lock().unwrap().requests.clone()
    }

    fn matching(&self, method: &str, fragment: &str) -> Vec<ForgeRequest> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == method && r.path.contains(fragment))
            .collect()
    }

    fn hold_next_lookup(&self) {
        self.state.0.lock().unwrap().hold_next_lookup = true;
    }

    fn wait_lookup_held(&self) {
        let (lock, cvar) = &*self.state;
        let guard = lock.lock().unwrap();
        let (guard, timeout) = cvar
            .wait_timeout_while(guard, Duration::from_secs(180), |s| !s.lookup_held)
            .unwrap();
        assert!(!timeout.timed_out(), "no pull request lookup arrived");
        drop(guard);
    }

    fn release(&self) {
        let (lock, cvar) = &*self.state;
        lock.lock().unwrap().released = true;
        cvar.notify_all();
    }
}

fn serve_forge(
    mut stream: std::net::TcpStream,
    shared: &std::sync::Arc<(std::sync::Mutex<ForgeState>, std::sync::Condvar)>,
    port: u16,
) {
    use std::io::{BufRead as _, Read as _, Write as _};
    let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let target = parts.next().unwrap_or_default().to_owned();
    let (mut length, mut authorization) = (0usize, None);
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).unwrap_or(0) == 0 || header == "\r\n" {
            break;
        }
        let (name, value) = header.split_once(':').unwrap_or_default();
        match name.to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse().unwrap_or(0),
            "authorization" => authorization = Some(value.trim().to_owned()),
            _ => {}
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
    let (lock, cvar) = &**shared;
    let mut s = lock.lock().unwrap();
    s.requests.push(ForgeRequest {
        method: method.clone(),
        path: target.clone(),
        authorization,
        body: body.clone(),
    });
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (status, answer) = match (method.as_str(), segments.as_slice()) {
        ("POST", ["repos", _, _, "issues", _, "comments"])
        | ("POST", ["repos", _, _, "statuses", _]) => {
            s.next_id += 1;
            (201, serde_json::json!({"id": s.next_id}))
        }
        ("GET", ["repos", owner, repo, "pulls"]) => {
            if s.hold_next_lookup {
                s.hold_next_lookup = false;
                s.lookup_held = true;
                cvar.notify_all();
                s = cvar
                    .wait_timeout_while(s, Duration::from_secs(180), |s| !s.released)
                    .unwrap()
                    .0;
            }
            let field = |name: &str| {
                query
                    .split('&')
                    .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
                    .unwrap_or_default()
                    .replace("%3A", ":")
            };
            let head = field("head");
            let base = field("base");
            let list: Vec<serde_json::Value> = s
                .pulls
                .iter()
                .filter(|(_, h, b)| format!("{owner}:{h}") == head && *b == base)
                .map(|(n, _, _)| {
                    serde_json::json!({"number": n,
                        "html_url": format!("http://127.0.0.1:{port}/{owner}/{repo}/pull/{n}")})
                })
                .collect();
            (200, serde_json::Value::Array(list))
        }
        ("POST", ["repos", owner, repo, "pulls"]) => {
            let n = u64::try_from(s.pulls.len()).unwrap() + 2;
            s.pulls.push((
                n,
                body["head"].as_str().unwrap_or_default().to_owned(),
                body["base"].as_str().unwrap_or_default().to_owned(),
            ));
            (
                201,
                serde_json::json!({"number": n,
                    "html_url": format!("http://127.0.0.1:{port}/{owner}/{repo}/pull/{n}")}),
            )
        }
        // GitLab: notes, statuses and merge requests of a project named by its encoded path.
        ("POST", ["api", "v4", "projects", _, "issues", _, "notes"])
        | ("POST", ["api", "v4", "projects", _, "merge_requests", _, "notes"])
        | ("POST", ["api", "v4", "projects", _, "statuses", _]) => {
            s.next_id += 1;
            (201, serde_json::json!({"id": s.next_id}))
        }
        ("GET", ["api", "v4", "projects", _, "merge_requests"]) => {
            let field = |name: &str| {
                query
                    .split('&')
                    .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
                    .unwrap_or_default()
                    .to_owned()
            };
            let (head, base) = (field("source_branch"), field("target_branch"));
            let list: Vec<serde_json::Value> = s
                .pulls
                .iter()
                .filter(|(_, h, b)| *h == head && *b == base)
                .map(|(n, _, _)| {
                    serde_json::json!({"iid": n,
                        "web_url": format!("http://127.0.0.1:{port}/-/merge_requests/{n}")})
                })
                .collect();
            (200, serde_json::Value::Array(list))
        }
        ("POST", ["api", "v4", "projects", _, "merge_requests"]) => {
            let n = u64::try_from(s.pulls.len()).unwrap() + 2;
            s.pulls.push((
                n,
                body["source_branch"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                body["target_branch"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            ));
            (
                201,
                serde_json::json!({"iid": n, "id": 1000 + n,
                    "web_url": format!("http://127.0.0.1:{port}/-/merge_requests/{n}")}),
            )
        }
        _ => (404, serde_json::json!({"message": "Not Found"})),
    };
    drop(s);
    let text = answer.to_string();
    let _ = write!(
        stream,
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    );
}

fn write_private(path: &Path, text: &str) {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

/// Waits until the report of a delivery closed; its reason.
async fn wait_report_closed(store: &jobs::JobStore, id: &str) -> String {
    let started = Instant::now();
    loop {
        let row = store.forge_delivery("github", id).await.unwrap().unwrap();
        if !row.report_open
            && let Some(reason) = &row.report_reason
        {
            return reason.clone();
        }
        assert!(
            started.elapsed() < Duration::from_secs(240),
            "report of {id} still open: {row:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The digest of a job's candidate, and an accept of it through the API.
fn accept(service: &Service, job: &str) -> String {
    let review = get_json_ok(
        service.addr,
        &format!("/v1/jobs/{job}/review"),
        &service.token(),
    );
    let digest = review["review"]["candidate_digest"]
        .as_str()
        .unwrap_or_else(|| panic!("no digest in {review}"))
        .to_owned();
    let (status, answer) = http_json(
        service.addr,
        "POST",
        &format!("/v1/jobs/{job}/review"),
        Some(&service.token()),
        Some(&serde_json::json!({"candidate_digest": digest, "decision": "accept"})),
    );
    assert_eq!(status, 201, "{answer}");
    digest
}

/// The commit `branch` of the bare `remote` points at, if any.
fn branch_tip(remote: &Path, branch: &str) -> Option<String> {
    let out = git_output(
        remote,
        &[
            "rev-parse",
            "--verify",
            "-q",
            &format!("refs/heads/{branch}"),
        ],
    );
    out.status
        .success()
        .then(|| String::from_utf8(out.stdout).unwrap().trim().to_owned())
}

/// Delivers a comment with the command word on pull request `number` by the mapped reviewer;
/// the follow-up job it queued.
async fn comment_on_pull(
    service: &Service,
    store: &jobs::JobStore,
    number: u64,
    id: &str,
    comment_id: u64,
) -> String {
    let mut comment = fixture("github-issue-comment-pull.json");
    comment["issue"]["number"] = number.into();
    comment["comment"]["id"] = comment_id.into();
    comment["comment"]["body"] = "/agent Please also handle the empty case.".into();
    let body = serde_json::to_vec(&comment).unwrap();
    let (status, answer) = deliver(
        service,
        "github",
        &github_headers("issue_comment", id, &body),
        &body,
    );
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer["state"], "queued", "{answer}");
    let row = wait_delivery(store, "github", id).await;
    assert_eq!(row.state, jobs::DeliveryState::Submitted, "{row:?}");
    row.job_id.unwrap().to_string()
}

/// Results back on a (scripted) GitHub: a labelled issue's job is accepted by a reviewer, then
/// published on the operator's remote and a pull request opened exactly once — also when the
/// service is SIGKILLed between the push and the forge call —, with a host-owned body, comments
/// on the issue and a success status on the commit. A reviewer's command on the pull request
/// queues a follow-up whose accepted candidate becomes a new fast-forward commit on the same
/// branch; once someone else pushed to the branch, the next one is refused with a failure
/// status and nothing is overwritten.
async fn forge_results_back(database: Option<&str>) {
    let state = state_with_images();
    let st = state.path();
    let f = Fixture::new();
    git_out(f.repo.path(), &["branch", "-M", "main"]);
    let repo = f.repo.path().to_str().unwrap().to_owned();
    let tmp = tempfile::tempdir().unwrap();
    let remote = tmp.path().join("remote.git");
    bare_clone(f.repo.path(), &remote);
    let secrets = tempfile::tempdir().unwrap();
    write_secret(&secrets.path().join("github.secret"));
    let token_file = secrets.path().join("github.token");
    write_private(&token_file, "forge-api-token-0123456789");
    let github = ScriptedGitHub::start();
    // The operator's remote over smart HTTP (`git http-backend` behind basic auth).
    let password = "publisher-password-0123456789";
    let server_credentials = secrets.path().join("server-credentials");
    write_private(&server_credentials, &format!("publisher:{password}\n"));
    let git_server =
        crate::support::git_http::GitHttpServer::start(tmp.path(), &server_credentials);
    let push_credentials = secrets.path().join("push-credentials");
    write_private(&push_credentials, &format!("publisher:{password}\n"));
    let policy: PathBuf = st.join("repository-policy.toml");
    std::fs::write(
        &policy,
        format!(
            r#"version = 1

[[repository]]
match = "{repo}"

[[forge]]
name = "github"
kind = "github"
secret_file = "{secret}"
label = "bug"
command = "/agent"
users = {{ "Codertocat" = "forger", "octocat" = "reviewer" }}
api_base = "http://127.0.0.1:{port}"
token_file = "{token}"
review_url = "https://review.example"

[[forge.project]]
path = "Codertocat/Hello-World"
repository = "{repo}"
base = "main"
allowed_paths = ["app/"]
read_only_paths = ["tests/"]
"#,
            secret = secrets.path().join("github.secret").display(),
            port = github.port,
            token = token_file.display(),
        ),
    )
    .unwrap();
    let remote_arg = remote.display().to_string();
    let remote_url = git_server.url("remote.git");
    let opts = ServeOpts {
        database,
        extra: vec![
            "--repository-policy",
            policy.to_str().unwrap(),
            "--publish-remote",
            &remote_url,
            "--publish-credential-file",
            push_credentials.to_str().unwrap(),
        ],
        ..ServeOpts::default()
    };
    let service = Service::start(st, &opts);
    token_with_roles(st, database, "forger", &["submit"]);
    token_with_roles(st, database, "reviewer", &["review"]);
    let store = open_store(st, database).await;

    let mut labeled = fixture("github-issues-labeled.json");
    labeled["issue"]["title"] = "Update the dashboard.".into();
    labeled["issue"]["body"] = "mode: answer\nsecret-looking words stay on the forge".into();
    let body = serde_json::to_vec(&labeled).unwrap();
    let delivery = "a1b2c3d4-0000-4000-8000-000000000001";
    let (status, answer) = deliver(
        &service,
        "github",
        &github_headers("issues", delivery, &body),
        &body,
    );
    assert_eq!(status, 202, "{answer}");
    let row = wait_delivery(&store, "github", delivery).await;
    let job = row.job_id.clone().unwrap().to_string();
    let done = wait_finished(st, database, &job, Duration::from_secs(180));
    assert_eq!(done["state"], "completed", "{done}");
    // Nothing is published before a reviewer accepts; the issue heard about the job.
    let started = Instant::now();
    while github.matching("POST", "/issues/1/comments").len() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{:?}",
            github.requests()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(github.matching("POST", "/pulls").is_empty());
    assert_eq!(branch_tip(&remote, "agent/github-1-x"), None);

    // Accepted; the service is killed while the forge holds its pull request lookup (the
    // branch is pushed and recorded by then), and started again.
    github.hold_next_lookup();
    let digest = accept(&service, &job);
    github.wait_lookup_held();
    let publication = store
        .publication(&row.job_id.clone().unwrap())
        .await
        .unwrap();
    let record: serde_json::Value = serde_json::from_slice(&publication.unwrap()).unwrap();
    let branch = record["branch"].as_str().unwrap().to_owned();
    let first_commit = record["commit_id"].as_str().unwrap().to_owned();
    assert!(branch.starts_with("agent/github-1-"), "{branch}");
    assert_eq!(
        branch_tip(&remote, &branch).as_deref(),
        Some(first_commit.as_str())
    );
    service.kill();
    github.release();
    let service = Service::start(st, &opts);
    assert_eq!(wait_report_closed(&store, delivery).await, "published");

    // Exactly one pull request, with a host-owned body; a success status on the commit;
    // comments on the issue, none holding the issue's text; the API token sent each time.
    let opened = github.matching("POST", "/repos/Codertocat/Hello-World/pulls");
    assert_eq!(opened.len(), 1, "{:?}", github.requests());
    let pr = &opened[0].body;
    assert_eq!(pr["head"], branch.as_str());
    assert_eq!(pr["base"], "main");
    let text = pr["body"].as_str().unwrap();
    assert!(
        text.contains(&digest) && text.contains(&first_commit),
        "{text}"
    );
    assert!(
        text.contains("Resolves #1")
            && text.contains(&format!("https://review.example/ui/jobs/{job}")),
        "{text}"
    );
    let statuses = github.matching("POST", &format!("/statuses/{first_commit}"));
    assert!(!statuses.is_empty());
    assert_eq!(statuses[0].body["state"], "success");
    assert_eq!(statuses[0].body["context"], "patch-candidate");
    let comments = github.matching("POST", "/issues/1/comments");
    assert_eq!(comments.len(), 3, "queued, ready, published: {comments:?}");
    assert!(
        comments[2].body["body"]
            .as_str()
            .unwrap()
            .contains("pull request #2")
    );
    for r in github.requests() {
        assert_eq!(
            r.authorization.as_deref(),
            Some("Bearer forge-api-token-0123456789")
        );
        assert!(!r.body.to_string().contains("secret-looking"), "{r:?}");
    }
    assert_eq!(
        store
            .forge_pull("github", "Codertocat/Hello-World", 2)
            .await
            .unwrap()
            .unwrap()
            .head,
        first_commit
    );

    // A reviewer's command on the pull request: a follow-up, accepted, pushed as a new commit
    // on the same branch, fast-forward from ours.
    let follow = comment_on_pull(
        &service,
        &store,
        2,
        "a1b2c3d4-0000-4000-8000-000000000002",
        9001,
    )
    .await;
    let spec = store
        .get(&vocab::JobId::parse(&follow).unwrap())
        .await
        .unwrap()
        .unwrap()
        .spec;
    assert_eq!(
        spec.follow_up.as_ref().unwrap().supersedes_job.as_str(),
        job
    );
    assert_eq!(spec.submitted_by.as_deref(), Some("reviewer"));
    let done = wait_finished(st, database, &follow, Duration::from_secs(180));
    assert_eq!(done["state"], "completed", "{done}");
    accept(&service, &follow);
    assert_eq!(
        wait_report_closed(&store, "a1b2c3d4-0000-4000-8000-000000000002").await,
        "published"
    );
    let second_commit = branch_tip(&remote, &branch).unwrap();
    assert_ne!(second_commit, first_commit);
    let parent = git_out(&remote, &["rev-parse", &format!("{second_commit}^")]);
    assert_eq!(
        parent, first_commit,
        "fast-forward from the commit we pushed"
    );
    assert_eq!(
        github
            .matching("POST", "/repos/Codertocat/Hello-World/pulls")
            .len(),
        1
    );
    let statuses = github.matching("POST", &format!("/statuses/{second_commit}"));
    assert_eq!(statuses[0].body["state"], "success");
    // While the follow-up ran, the pull request's head showed it pending.
    let pending = github.matching("POST", &format!("/statuses/{first_commit}"));
    assert!(
        pending.iter().any(|s| s.body["state"] == "pending"),
        "{pending:?}"
    );
    assert!(
        github
            .matching("POST", "/issues/2/comments")
            .iter()
            .any(|c| c.body["body"].as_str().unwrap().contains(&second_commit))
    );

    // Someone else pushes to the branch: the next follow-up is refused with a failure status
    // on our head, and their commit stays.
    let work = tempfile::tempdir().unwrap();
    git_out(
        work.path(),
        &["clone", "-q", "-b", &branch, &remote_arg, "."],
    );
    std::fs::write(work.path().join("theirs.txt"), "theirs\n").unwrap();
    git_out(work.path(), &["add", "theirs.txt"]);
    git_out(
        work.path(),
        &[
            "-c",
            "user.name=Them",
            "-c",
            "user.email=them@example.com",
            "commit",
            "-q",
            "-m",
            "theirs",
        ],
    );
    git_out(work.path(), &["push", "-q", "origin", &branch]);
    let theirs = branch_tip(&remote, &branch).unwrap();
    let third = comment_on_pull(
        &service,
        &store,
        2,
        "a1b2c3d4-0000-4000-8000-000000000003",
        9002,
    )
    .await;
    let done = wait_finished(st, database, &third, Duration::from_secs(180));
    assert_eq!(done["state"], "completed", "{done}");
    accept(&service, &third);
    assert_eq!(
        wait_report_closed(&store, "a1b2c3d4-0000-4000-8000-000000000003").await,
        "branch_moved"
    );
    assert_eq!(
        branch_tip(&remote, &branch).as_deref(),
        Some(theirs.as_str())
    );
    let refused = github.matching("POST", &format!("/statuses/{second_commit}"));
    assert!(
        refused.iter().any(|s| s.body["state"] == "failure"),
        "{refused:?}"
    );
    assert!(
        git_server
            .authorized
            .load(std::sync::atomic::Ordering::SeqCst)
            > 0,
        "the pushes went over smart HTTP"
    );
    service.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_forge_results_go_back_as_pull_requests_and_commits() {
    let Some((_docker, _guard)) = locked_docker().await else {
        return;
    };
    forge_results_back(None).await;
    tally("docker_forge_results_go_back_as_pull_requests_and_commits");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_forge_results_on_postgres() {
    let Some(_docker) = docker().await else {
        return;
    };
    let Some(url) = postgres_url_or_skip().await else {
        return;
    };
    let _guard = docker_lock().lock().await;
    forge_results_back(Some(&url)).await;
    tally("docker_forge_results_on_postgres");
}

/// GitLab, with the policy's auto-accept: a labelled issue's job whose required gate passes is
/// accepted by the forge's own principal (`forge-lab`, recorded in the history), published, and
/// a merge request opened once, with notes on the issue and a `success` status named
/// `patch-candidate`.
async fn gitlab_auto_accept(database: Option<&str>) {
    let image = crate::service_gates::GateImage::build("forge");
    let state = state_with_images();
    let st = state.path();
    let defs = crate::service_gates::definitions(st, &image.id, &["python3", "-c", "pass"]);
    let f = Fixture::new();
    git_out(f.repo.path(), &["branch", "-M", "main"]);
    let repo = f.repo.path().to_str().unwrap().to_owned();
    let tmp = tempfile::tempdir().unwrap();
    let remote = tmp.path().join("remote.git");
    bare_clone(f.repo.path(), &remote);
    let secrets = tempfile::tempdir().unwrap();
    write_secret(&secrets.path().join("lab.secret"));
    let token_file = secrets.path().join("lab.token");
    write_private(&token_file, "glpat-scripted-0123456789");
    let lab = ScriptedGitHub::start();
    let policy: PathBuf = st.join("repository-policy.toml");
    std::fs::write(
        &policy,
        format!(
            r#"version = 1

[[repository]]
match = "{repo}"

[[forge]]
name = "lab"
kind = "gitlab"
secret_file = "{secret}"
label = "patch-candidate"
users = {{ "root" = "forger" }}
api_base = "http://127.0.0.1:{port}"
token_file = "{token}"
branch_prefix = "bot/"
auto_accept = true

[[forge.project]]
path = "gitlabhq/tools/gitlab-test"
repository = "{repo}"
base = "main"
allowed_paths = ["app/"]
read_only_paths = ["tests/"]
required_gates = ["check"]
"#,
            secret = secrets.path().join("lab.secret").display(),
            port = lab.port,
            token = token_file.display(),
        ),
    )
    .unwrap();
    let remote_arg = remote.display().to_string();
    let service = Service::start(
        st,
        &ServeOpts {
            database,
            extra: vec![
                "--repository-policy",
                policy.to_str().unwrap(),
                "--publish-remote",
                &remote_arg,
                "--gates",
                defs.to_str().unwrap(),
            ],
            ..ServeOpts::default()
        },
    );
    token_with_roles(st, database, "forger", &["submit"]);
    let store = open_store(st, database).await;
    let mut hook = fixture("gitlab-issue-hook-labels.json");
    hook["object_attributes"]["title"] = "Update the dashboard.".into();
    hook["object_attributes"]["description"] = "mode: edit".into();
    let body = serde_json::to_vec(&hook).unwrap();
    let headers = format!(
        "X-Gitlab-Event: Issue Hook\r\nX-Gitlab-Event-UUID: lab-auto-1\r\nX-Gitlab-Token: {SECRET}\r\n"
    );
    let (status, answer) = deliver(&service, "lab", &headers, &body);
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer["state"], "queued", "{answer}");
    let row = wait_delivery(&store, "lab", "lab-auto-1").await;
    assert_eq!(row.state, jobs::DeliveryState::Submitted, "{row:?}");
    let job = row.job_id.clone().unwrap();
    let started = Instant::now();
    let reason = loop {
        let row = store
            .forge_delivery("lab", "lab-auto-1")
            .await
            .unwrap()
            .unwrap();
        if !row.report_open
            && let Some(reason) = row.report_reason
        {
            break reason;
        }
        assert!(started.elapsed() < Duration::from_secs(240), "{row:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(reason, "published");
    let decisions = store.decisions(&job).await.unwrap();
    assert_eq!(decisions.len(), 1);
    assert_eq!(decisions[0].row.actor(), "forge-lab");
    let record: serde_json::Value =
        serde_json::from_slice(&store.publication(&job).await.unwrap().unwrap()).unwrap();
    let commit = record["commit_id"].as_str().unwrap();
    let branch = record["branch"].as_str().unwrap();
    assert!(branch.starts_with("bot/lab-23-"), "{branch}");
    assert_eq!(branch_tip(&remote, branch).as_deref(), Some(commit));
    let project = "/api/v4/projects/gitlabhq%2Ftools%2Fgitlab-test";
    let opened = lab.matching("POST", &format!("{project}/merge_requests"));
    assert_eq!(opened.len(), 1, "{:?}", lab.requests());
    assert_eq!(opened[0].body["source_branch"], branch);
    assert_eq!(opened[0].body["target_branch"], "main");
    assert!(
        opened[0].body["description"]
            .as_str()
            .unwrap()
            .contains("- Gate `check`: passed")
    );
    let statuses = lab.matching("POST", &format!("{project}/statuses/{commit}"));
    assert_eq!(statuses.len(), 1);
    assert_eq!(statuses[0].body["state"], "success");
    assert_eq!(statuses[0].body["name"], "patch-candidate");
    assert_eq!(
        lab.matching("POST", &format!("{project}/issues/23/notes"))
            .len(),
        3
    );
    for r in lab.requests() {
        assert_eq!(
            r.authorization, None,
            "GitLab's token goes in PRIVATE-TOKEN"
        );
    }
    service.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_forge_gitlab_auto_accept_opens_a_merge_request() {
    let Some((_docker, _guard)) = locked_docker().await else {
        return;
    };
    gitlab_auto_accept(None).await;
    tally("docker_forge_gitlab_auto_accept_opens_a_merge_request");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_forge_gitlab_auto_accept_on_postgres() {
    let Some(_docker) = docker().await else {
        return;
    };
    let Some(url) = postgres_url_or_skip().await else {
        return;
    };
    let _guard = docker_lock().lock().await;
    gitlab_auto_accept(Some(&url)).await;
    tally("docker_forge_gitlab_auto_accept_on_postgres");
}
