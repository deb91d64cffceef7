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
