//! The pull request against a scripted forge speaking GitHub's and Gitea's documented shapes,
//! and the hostile answers.

use std::io::{BufReader, Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt as _;
use std::sync::mpsc;

use pretty_assertions::assert_eq;
use publish::{
    BranchName, ForgeEndpoint, ForgeKind, PublicationRecord, PublishError, open_pull_request,
};

use crate::support::{AGENT_MARKER, RequestHead, read_request_head, secret};

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
            body: serde_json::from_slice(&raw).unwrap(),
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
    open_pull_request(endpoint, token_file, &record(), &base, digest)
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
