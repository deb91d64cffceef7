//! The pull / merge request, comments and commit statuses against a scripted forge speaking
//! GitHub's, Gitea's and GitLab's documented shapes, and the hostile answers.

use std::io::{BufReader, Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt as _;
use std::sync::mpsc;

use pretty_assertions::assert_eq;
use publish::{
    BranchName, CommentTarget, CommitStatus, ForgeEndpoint, ForgeKind, PublicationRecord,
    PublishError, StatusState, find_pull_request, open_pull_request, post_comment,
    set_commit_status,
};

use crate::server::{RequestHead, read_request_head};
use crate::support::{AGENT_MARKER, secret};

/// One request as the scripted forge saw it.
#[derive(Debug)]
struct Seen {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: serde_json::Value,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Answers one request with `status` and `body`; reports what it received.
fn scripted_forge(status: u16, body: Vec<u8>) -> (u16, mpsc::Receiver<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let RequestHead {
            method,
            target: path,
            headers,
        } = read_request_head(&mut reader).unwrap();
        let len: usize = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .map_or(0, |(_, v)| v.parse().unwrap());
        let mut raw = vec![0; len];
        reader.read_exact(&mut raw).unwrap();
        let mut out = stream;
        let head = format!(
            "HTTP/1.1 {status} Scripted\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        let _ = out.write_all(head.as_bytes());
        let _ = out.write_all(&body);
        let _ = tx.send(Seen {
            method,
            path,
            headers,
            body: serde_json::from_slice(&raw).unwrap_or(serde_json::Value::Null),
        });
    });
    (port, rx)
}

fn record() -> PublicationRecord {
    PublicationRecord {
        remote: "https://forge.example/o/r.git".into(),
        branch: BranchName::parse("patch-candidate/abc").unwrap(),
        commit_id: "c".repeat(40),
        base_tip_seen: "b".repeat(40),
        pushed_at: "2026-01-01T00:00:00Z".into(),
        rebased: false,
        created: true,
        extends: None,
    }
}

fn token_file(dir: &std::path::Path, token: &str) -> std::path::PathBuf {
    let path = dir.join("forge-token");
    std::fs::write(&path, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

/// The endpoint of `o/r` on the forge at `base_url`.
fn forge_at(kind: ForgeKind, base_url: &str) -> ForgeEndpoint {
    ForgeEndpoint::new(kind, base_url, "o", "r").unwrap()
}

/// Opens the pull request of [`record`] onto `main`; the number and address the forge gave.
async fn open(
    endpoint: &ForgeEndpoint,
    token_file: &std::path::Path,
    digest: &str,
) -> Result<(u64, String), PublishError> {
    let base = BranchName::parse("main").unwrap();
    open_pull_request(endpoint, token_file, &record(), &base, digest, "")
        .await
        .map(|pr| (pr.number, pr.url))
}

/// The code [`open`] refuses with.
async fn refusal(
    endpoint: &ForgeEndpoint,
    token_file: &std::path::Path,
    digest: &str,
) -> &'static str {
    open(endpoint, token_file, digest).await.unwrap_err().code()
}

const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

#[tokio::test]
async fn github_pull_request_in_the_documented_shape() {
    let dir = tempfile::tempdir().unwrap();
    let token = secret("gh-token");
    let answer = serde_json::json!({
        "id": 1, "number": 7, "state": "open",
        "html_url": "https://github.example/o/r/pull/7",
        "user": {"login": "bot"}, "head": {"ref": "patch-candidate/abc"}
    });
    let (port, seen) = scripted_forge(201, serde_json::to_vec(&answer).unwrap());
    let endpoint = forge_at(ForgeKind::GitHub, &format!("http://127.0.0.1:{port}"));
    let (number, url) = open(&endpoint, &token_file(dir.path(), &token), DIGEST)
        .await
        .unwrap();
    assert_eq!(
        (number, url.as_str()),
        (7, "https://github.example/o/r/pull/7")
    );
    let seen = seen.recv().unwrap();
    assert_eq!(seen.method, "POST");
    assert_eq!(seen.path, "/repos/o/r/pulls");
    assert_eq!(
        seen.header("authorization"),
        Some(format!("Bearer {token}").as_str())
    );
    assert_eq!(seen.header("accept"), Some("application/vnd.github+json"));
    assert_eq!(seen.header("x-github-api-version"), Some("2022-11-28"));
    assert!(seen.header("user-agent").is_some());
    assert_eq!(seen.body["head"], "patch-candidate/abc");
    assert_eq!(seen.body["base"], "main");
    assert_eq!(seen.body["title"], "Patch candidate 0123456789ab");
    let body = seen.body["body"].as_str().unwrap();
    assert!(
        body.contains(DIGEST) && body.contains(&"c".repeat(40)),
        "{body}"
    );
    assert!(!body.contains(AGENT_MARKER));
    // As a set: the key order of a parsed map depends on serde_json's features in the build.
    let mut keys: Vec<_> = seen.body.as_object().unwrap().keys().cloned().collect();
    keys.sort();
    assert_eq!(keys, ["base", "body", "head", "title"]);
}

#[tokio::test]
async fn gitea_pull_request_in_the_documented_shape() {
    let dir = tempfile::tempdir().unwrap();
    let token = secret("gitea-token");
    let answer =
        serde_json::json!({"id": 3, "number": 12, "html_url": "http://127.0.0.1/o/r/pulls/12"});
    let (port, seen) = scripted_forge(201, serde_json::to_vec(&answer).unwrap());
    let endpoint = forge_at(ForgeKind::Gitea, &format!("http://127.0.0.1:{port}/"));
    let (number, _) = open(&endpoint, &token_file(dir.path(), &token), DIGEST)
        .await
        .unwrap();
    assert_eq!(number, 12);
    let seen = seen.recv().unwrap();
    assert_eq!(seen.path, "/api/v1/repos/o/r/pulls");
    assert_eq!(
        seen.header("authorization"),
        Some(format!("token {token}").as_str())
    );
}

#[tokio::test]
async fn hostile_or_refusing_forges_are_clean_refusals_that_quote_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let token = secret("hostile-token");
    let file = token_file(dir.path(), &token);
    let huge = format!(
        "{{\"number\": 1, \"html_url\": \"https://x/1\", \"pad\": \"{}\"}}",
        "a".repeat(2 * 1024 * 1024)
    );
    let cases: Vec<(u16, Vec<u8>, &str)> = vec![
        (
            401,
            b"{\"message\":\"Bad credentials\"}".to_vec(),
            "PATCH_CANDIDATE_PUBLISH_AUTH",
        ),
        (403, b"{}".to_vec(), "PATCH_CANDIDATE_PUBLISH_AUTH"),
        (
            422,
            b"{\"message\":\"A pull request already exists\"}".to_vec(),
            "PATCH_CANDIDATE_PUBLISH_FORGE",
        ),
        (500, b"oops".to_vec(), "PATCH_CANDIDATE_PUBLISH_FORGE"),
        (201, b"not json".to_vec(), "PATCH_CANDIDATE_PUBLISH_FORGE"),
        (
            201,
            b"{\"number\": \"7\", \"html_url\": \"https://x/7\"}".to_vec(),
            "PATCH_CANDIDATE_PUBLISH_FORGE",
        ),
        (
            201,
            b"{\"number\": 0, \"html_url\": \"https://x/0\"}".to_vec(),
            "PATCH_CANDIDATE_PUBLISH_FORGE",
        ),
        (
            201,
            b"{\"number\": 7, \"html_url\": \"javascript:alert(1)\"}".to_vec(),
            "PATCH_CANDIDATE_PUBLISH_FORGE",
        ),
        (
            201,
            b"{\"number\": 7, \"html_url\": \"https://x/\\u001b[2J\"}".to_vec(),
            "PATCH_CANDIDATE_PUBLISH_FORGE",
        ),
        (201, huge.into_bytes(), "PATCH_CANDIDATE_PUBLISH_FORGE"),
    ];
    for (status, body, code) in cases {
        let (port, _seen) = scripted_forge(status, body);
        let endpoint = forge_at(ForgeKind::GitHub, &format!("http://127.0.0.1:{port}"));
        let err = open(&endpoint, &file, DIGEST).await.unwrap_err();
        assert_eq!(err.code(), code, "status {status}");
        let shown = format!("{err} {err:?}");
        assert!(
            !shown.contains(&token) && !shown.contains("Bad credentials"),
            "{shown}"
        );
    }
    // A forge that is not there.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let endpoint = forge_at(ForgeKind::GitHub, &format!("http://127.0.0.1:{port}"));
    assert_eq!(
        refusal(&endpoint, &file, DIGEST).await,
        "PATCH_CANDIDATE_PUBLISH_FORGE"
    );
    // Not a digest; a token file with a user part.
    assert_eq!(
        refusal(&endpoint, &file, "sha256:xyz").await,
        "PATCH_CANDIDATE_PUBLISH_INPUT"
    );
    std::fs::write(&file, "user:pw\n").unwrap();
    assert_eq!(
        refusal(&endpoint, &file, DIGEST).await,
        "PATCH_CANDIDATE_PUBLISH_CREDENTIAL"
    );
}

#[tokio::test]
async fn gitlab_merge_request_on_a_nested_project() {
    let dir = tempfile::tempdir().unwrap();
    let token = secret("gitlab-token");
    let answer = serde_json::json!({
        "id": 99, "iid": 4, "state": "opened",
        "web_url": "https://gitlab.example/g/sub/p/-/merge_requests/4"
    });
    let (port, seen) = scripted_forge(201, serde_json::to_vec(&answer).unwrap());
    let project = forge::ProjectPath::parse(ForgeKind::GitLab, "g/sub/p").unwrap();
    let endpoint = ForgeEndpoint::for_project(
        ForgeKind::GitLab,
        &format!("http://127.0.0.1:{port}"),
        &project,
    )
    .unwrap();
    let (number, url) = open(&endpoint, &token_file(dir.path(), &token), DIGEST)
        .await
        .unwrap();
    assert_eq!(
        (number, url.as_str()),
        (4, "https://gitlab.example/g/sub/p/-/merge_requests/4")
    );
    let seen = seen.recv().unwrap();
    assert_eq!(seen.method, "POST");
    assert_eq!(seen.path, "/api/v4/projects/g%2Fsub%2Fp/merge_requests");
    assert_eq!(seen.header("private-token"), Some(token.as_str()));
    assert_eq!(seen.header("authorization"), None);
    assert_eq!(seen.body["source_branch"], "patch-candidate/abc");
    assert_eq!(seen.body["target_branch"], "main");
    assert_eq!(seen.body["title"], "Patch candidate 0123456789ab");
    assert!(seen.body["description"].as_str().unwrap().contains(DIGEST));
    let mut keys: Vec<_> = seen.body.as_object().unwrap().keys().cloned().collect();
    keys.sort();
    assert_eq!(
        keys,
        ["description", "source_branch", "target_branch", "title"]
    );
}

fn endpoint_of(kind: ForgeKind, port: u16) -> ForgeEndpoint {
    let path = if kind == ForgeKind::GitLab {
        "grp/sub/proj"
    } else {
        "o/r"
    };
    let project = forge::ProjectPath::parse(kind, path).unwrap();
    ForgeEndpoint::for_project(kind, &format!("http://127.0.0.1:{port}"), &project).unwrap()
}

/// The token header each forge is sent.
fn token_header(kind: ForgeKind, token: &str) -> (&'static str, String) {
    match kind {
        ForgeKind::GitHub => ("authorization", format!("Bearer {token}")),
        ForgeKind::Gitea => ("authorization", format!("token {token}")),
        _ => ("private-token", token.to_owned()),
    }
}

#[tokio::test]
async fn comments_on_issues_and_pull_requests_of_every_forge() {
    let dir = tempfile::tempdir().unwrap();
    let token = secret("comment-token");
    let file = token_file(dir.path(), &token);
    let n = |v| std::num::NonZeroU64::new(v).unwrap();
    for (kind, target, path) in [
        (
            ForgeKind::GitHub,
            CommentTarget::Issue(n(7)),
            "/repos/o/r/issues/7/comments",
        ),
        (
            ForgeKind::GitHub,
            CommentTarget::PullRequest(n(8)),
            "/repos/o/r/issues/8/comments",
        ),
        (
            ForgeKind::Gitea,
            CommentTarget::Issue(n(7)),
            "/api/v1/repos/o/r/issues/7/comments",
        ),
        (
            ForgeKind::Gitea,
            CommentTarget::PullRequest(n(8)),
            "/api/v1/repos/o/r/issues/8/comments",
        ),
        (
            ForgeKind::GitLab,
            CommentTarget::Issue(n(7)),
            "/api/v4/projects/grp%2Fsub%2Fproj/issues/7/notes",
        ),
        (
            ForgeKind::GitLab,
            CommentTarget::PullRequest(n(8)),
            "/api/v4/projects/grp%2Fsub%2Fproj/merge_requests/8/notes",
        ),
    ] {
        let answer = serde_json::json!({"id": 1234, "body": "ignored"});
        let (port, seen) = scripted_forge(201, serde_json::to_vec(&answer).unwrap());
        let id = post_comment(
            &endpoint_of(kind, port),
            &file,
            target,
            "Job queued.\nDetails follow.",
        )
        .await
        .unwrap();
        assert_eq!(id.get(), 1234);
        let seen = seen.recv().unwrap();
        assert_eq!(
            (seen.method.as_str(), seen.path.as_str()),
            ("POST", path),
            "{kind:?}"
        );
        let (name, value) = token_header(kind, &token);
        assert_eq!(seen.header(name), Some(value.as_str()), "{kind:?}");
        assert_eq!(seen.header("content-type"), Some("application/json"));
        assert_eq!(
            seen.body,
            serde_json::json!({"body": "Job queued.\nDetails follow."})
        );
    }
}

#[tokio::test]
async fn commit_statuses_of_every_forge_in_their_words() {
    let dir = tempfile::tempdir().unwrap();
    let token = secret("status-token");
    let file = token_file(dir.path(), &token);
    let commit = "a".repeat(40);
    let status = |state| CommitStatus {
        state,
        context: "patch-candidate/gates".into(),
        description: "2 of 3 gates passed".into(),
        target_url: Some("https://host.example/ui/jobs/1".into()),
    };
    for (kind, state, word) in [
        (ForgeKind::GitHub, StatusState::Running, "pending"),
        (ForgeKind::GitHub, StatusState::Failure, "failure"),
        (ForgeKind::Gitea, StatusState::Error, "error"),
        (ForgeKind::Gitea, StatusState::Success, "success"),
        (ForgeKind::GitLab, StatusState::Running, "running"),
        (ForgeKind::GitLab, StatusState::Error, "failed"),
    ] {
        let (port, seen) = scripted_forge(201, b"{\"id\": 77, \"state\": \"x\"}".to_vec());
        set_commit_status(&endpoint_of(kind, port), &file, &commit, &status(state))
            .await
            .unwrap();
        let seen = seen.recv().unwrap();
        let (path, name_field) = match kind {
            ForgeKind::GitHub => (format!("/repos/o/r/statuses/{commit}"), "context"),
            ForgeKind::Gitea => (format!("/api/v1/repos/o/r/statuses/{commit}"), "context"),
            _ => (
                format!("/api/v4/projects/grp%2Fsub%2Fproj/statuses/{commit}"),
                "name",
            ),
        };
        assert_eq!(seen.path, path);
        let (name, value) = token_header(kind, &token);
        assert_eq!(seen.header(name), Some(value.as_str()));
        let mut expected = serde_json::json!({
            "state": word,
            "description": "2 of 3 gates passed",
            "target_url": "https://host.example/ui/jobs/1",
        });
        expected[name_field] = "patch-candidate/gates".into();
        assert_eq!(seen.body, expected, "{kind:?} {state:?}");
    }
    // Refused before any request: a short commit, a bad context, a long description, a bad URL.
    let endpoint = forge_at(ForgeKind::GitHub, "http://127.0.0.1:9");
    let bad = [
        ("abc".to_owned(), status(StatusState::Success)),
        ("A".repeat(40), status(StatusState::Success)),
        (
            commit.clone(),
            CommitStatus {
                context: String::new(),
                ..status(StatusState::Success)
            },
        ),
        (
            commit.clone(),
            CommitStatus {
                context: "a\nb".into(),
                ..status(StatusState::Success)
            },
        ),
        (
            commit.clone(),
            CommitStatus {
                description: "d".repeat(141),
                ..status(StatusState::Success)
            },
        ),
        (
            commit.clone(),
            CommitStatus {
                target_url: Some("javascript:alert(1)".into()),
                ..status(StatusState::Success)
            },
        ),
    ];
    for (commit, status) in bad {
        let err = set_commit_status(&endpoint, &file, &commit, &status)
            .await
            .unwrap_err();
        assert_eq!(err.code(), "PATCH_CANDIDATE_PUBLISH_INPUT", "{status:?}");
    }
    for body in ["", "a\u{1b}[2J", &"x".repeat(64 * 1024 + 1)] {
        let n = std::num::NonZeroU64::new(1).unwrap();
        let err = post_comment(&endpoint, &file, CommentTarget::Issue(n), body)
            .await
            .unwrap_err();
        assert_eq!(err.code(), "PATCH_CANDIDATE_PUBLISH_INPUT");
    }
}

#[tokio::test]
async fn hostile_answers_to_comments_statuses_and_merge_requests() {
    let dir = tempfile::tempdir().unwrap();
    let token = secret("hostile-rest-token");
    let file = token_file(dir.path(), &token);
    let huge = format!(
        "{{\"id\": 1, \"iid\": 1, \"pad\": \"{}\"}}",
        "a".repeat(2 * 1024 * 1024)
    );
    let cases: Vec<(u16, Vec<u8>, &str)> = vec![
        (
            401,
            b"{\"message\":\"401 Unauthorized\"}".to_vec(),
            "PATCH_CANDIDATE_PUBLISH_AUTH",
        ),
        (403, b"{}".to_vec(), "PATCH_CANDIDATE_PUBLISH_AUTH"),
        (
            422,
            b"{\"message\":\"No commit found for SHA\"}".to_vec(),
            "PATCH_CANDIDATE_PUBLISH_FORGE",
        ),
        (404, b"{}".to_vec(), "PATCH_CANDIDATE_PUBLISH_FORGE"),
        (201, b"[]".to_vec(), "PATCH_CANDIDATE_PUBLISH_FORGE"),
        (
            201,
            b"{\"id\": 0}".to_vec(),
            "PATCH_CANDIDATE_PUBLISH_FORGE",
        ),
        (
            201,
            b"{\"id\": \"5\"}".to_vec(),
            "PATCH_CANDIDATE_PUBLISH_FORGE",
        ),
        (201, huge.into_bytes(), "PATCH_CANDIDATE_PUBLISH_FORGE"),
    ];
    let n = std::num::NonZeroU64::new(3).unwrap();
    let status = CommitStatus {
        state: StatusState::Pending,
        context: "ctx".into(),
        description: String::new(),
        target_url: None,
    };
    for kind in [ForgeKind::GitHub, ForgeKind::Gitea, ForgeKind::GitLab] {
        for (code, body, expected) in &cases {
            let (port, _seen) = scripted_forge(*code, body.clone());
            let err = post_comment(
                &endpoint_of(kind, port),
                &file,
                CommentTarget::Issue(n),
                "hi",
            )
            .await
            .unwrap_err();
            assert_eq!(err.code(), *expected, "{kind:?} comment {code}");
            let shown = format!("{err} {err:?}");
            assert!(
                !shown.contains(&token) && !shown.contains("Unauthorized"),
                "{shown}"
            );
            let (port, _seen) = scripted_forge(*code, body.clone());
            let err = set_commit_status(&endpoint_of(kind, port), &file, &"b".repeat(64), &status)
                .await
                .unwrap_err();
            assert_eq!(err.code(), *expected, "{kind:?} status {code}");
        }
    }
    // A GitLab merge request answer in GitHub's shape, or with a zero iid.
    for answer in [
        serde_json::json!({"number": 4, "html_url": "https://x/4"}),
        serde_json::json!({"iid": 0, "web_url": "https://x/0"}),
        serde_json::json!({"iid": 4, "web_url": "ftp://x/4"}),
    ] {
        let (port, _seen) = scripted_forge(201, serde_json::to_vec(&answer).unwrap());
        let err = open(&endpoint_of(ForgeKind::GitLab, port), &file, DIGEST)
            .await
            .unwrap_err();
        assert_eq!(err.code(), "PATCH_CANDIDATE_PUBLISH_FORGE", "{answer}");
    }
}

/// The lookup before a pull request is opened: by branch and base, in each forge's documented
/// list shape (Gitea's, which has no branch filter, read page by page); none is `None`; an answer
/// outside the shape is a clean refusal.
#[tokio::test]
async fn pull_requests_are_found_by_branch_and_base_on_every_forge() {
    let dir = tempfile::tempdir().unwrap();
    let token = secret("lookup-token");
    let file = token_file(dir.path(), &token);
    let branch = BranchName::parse("agent/gh-1.x").unwrap();
    let base = BranchName::parse("main").unwrap();
    let gitea_page = serde_json::json!([
        {"number": 4, "html_url": "https://forge.example/o/r/pulls/4",
         "head": {"ref": "other"}, "base": {"ref": "main"}},
        {"number": 5, "html_url": "https://forge.example/o/r/pulls/5",
         "head": {"ref": "agent/gh-1.x"}, "base": {"ref": "release"}},
        {"number": 6, "html_url": "https://forge.example/o/r/pulls/6", "state": "closed",
         "head": {"ref": "agent/gh-1.x", "sha": "x"}, "base": {"ref": "main"}}
    ]);
    for (kind, answer, path, found) in [
        (
            ForgeKind::GitHub,
            serde_json::json!([{"number": 7, "html_url": "https://forge.example/o/r/pull/7", "state": "open"}]),
            "/repos/o/r/pulls?head=o%3Aagent/gh-1.x&base=main&state=all",
            Some(7),
        ),
        (
            ForgeKind::GitHub,
            serde_json::json!([]),
            "/repos/o/r/pulls?head=o%3Aagent/gh-1.x&base=main&state=all",
            None,
        ),
        (
            ForgeKind::Gitea,
            gitea_page,
            "/api/v1/repos/o/r/pulls?state=all&sort=newest&limit=50&page=1",
            Some(6),
        ),
        (
            ForgeKind::GitLab,
            serde_json::json!([{"iid": 3, "web_url": "https://gitlab.example/grp/sub/proj/-/merge_requests/3"}]),
            "/api/v4/projects/grp%2Fsub%2Fproj/merge_requests?source_branch=agent/gh-1.x&target_branch=main&state=all",
            Some(3),
        ),
    ] {
        let (port, seen) = scripted_forge(200, serde_json::to_vec(&answer).unwrap());
        let got = find_pull_request(&endpoint_of(kind, port), &file, &branch, &base)
            .await
            .unwrap();
        assert_eq!(got.map(|p| p.number), found, "{kind:?}");
        let seen = seen.recv().unwrap();
        assert_eq!((seen.method.as_str(), seen.path.as_str()), ("GET", path));
        let (name, value) = token_header(kind, &token);
        assert_eq!(seen.header(name), Some(value.as_str()));
    }
    // Not a list, a pull request without a web address, a refusal: clean errors.
    for (status, answer, code) in [
        (
            200,
            serde_json::json!({"number": 1}),
            "PATCH_CANDIDATE_PUBLISH_FORGE",
        ),
        (
            200,
            serde_json::json!([{"number": 1, "html_url": "javascript:alert(1)"}]),
            "PATCH_CANDIDATE_PUBLISH_FORGE",
        ),
        (
            401,
            serde_json::json!({"message": "Bad credentials"}),
            "PATCH_CANDIDATE_PUBLISH_AUTH",
        ),
        (
            500,
            serde_json::json!({"message": "boom"}),
            "PATCH_CANDIDATE_PUBLISH_FORGE",
        ),
    ] {
        let (port, _seen) = scripted_forge(status, serde_json::to_vec(&answer).unwrap());
        let err = find_pull_request(&endpoint_of(ForgeKind::GitHub, port), &file, &branch, &base)
            .await
            .unwrap_err();
        assert_eq!(vocab::Coded::code(&err), code, "{answer}");
        assert!(!err.to_string().contains("boom"), "{err}");
    }
}
