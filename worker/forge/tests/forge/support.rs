//! The fixtures, their signatures (computed by `fixtures/sign.py`), the secret file and headers.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use forge::{Delivery, ForgeError, ForgeKind, WebhookSecret};
use http::{HeaderMap, HeaderName, HeaderValue};

/// The secret `sign.py` signs with.
pub const SECRET: &str = "fixture-webhook-secret-5d1c";

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// A fixture's exact bytes.
pub fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(fixtures().join(name)).unwrap()
}

/// The signature `sign.py` computed for a fixture.
pub fn signature(name: &str) -> String {
    let table = std::fs::read_to_string(fixtures().join("signatures.txt")).unwrap();
    table
        .lines()
        .find_map(|line| {
            let (file, hex) = line.split_once(' ')?;
            (file == name).then(|| hex.to_owned())
        })
        .unwrap_or_else(|| panic!("{name} is not in signatures.txt"))
}

/// A secret read from a 0600 file holding `text` and a newline.
pub fn secret_from(text: &str) -> WebhookSecret {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("webhook-secret");
    std::fs::write(&path, format!("{text}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    WebhookSecret::from_file(&path).unwrap()
}

pub fn secret() -> WebhookSecret {
    secret_from(SECRET)
}

pub fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    map
}

/// Gitea's `X-Gitea-Event` for an `X-Gitea-Event-Type`.
fn gitea_category(event_type: &str) -> &str {
    match event_type {
        "issue_label" | "issues" => "issues",
        "issue_comment" | "pull_request_comment" => "issue_comment",
        other => other,
    }
}

pub const DELIVERY_ID: &str = "72d3162e-cc78-11e3-81ab-4c9367dc0958";

/// The headers each forge sends with `fixture` as the event `event`, signed by `sign.py`.
pub fn signed_headers(kind: ForgeKind, fixture: &str, event: &str) -> HeaderMap {
    let sig = signature(fixture);
    match kind {
        ForgeKind::GitHub => headers(&[
            ("X-GitHub-Delivery", DELIVERY_ID),
            ("X-GitHub-Event", event),
            ("X-GitHub-Hook-ID", "292430182"),
            ("X-Hub-Signature-256", &format!("sha256={sig}")),
            ("Content-Type", "application/json"),
        ]),
        ForgeKind::Gitea => headers(&[
            ("X-Gitea-Delivery", DELIVERY_ID),
            ("X-Gitea-Event", gitea_category(event)),
            ("X-Gitea-Event-Type", event),
            ("X-Gitea-Signature", &sig),
            ("X-Gogs-Delivery", DELIVERY_ID),
            ("X-Hub-Signature-256", &format!("sha256={sig}")),
        ]),
        ForgeKind::GitLab => headers(&[
            ("X-Gitlab-Event", event),
            ("X-Gitlab-Event-UUID", DELIVERY_ID),
            ("X-Gitlab-Token", SECRET),
            ("Idempotency-Key", "f5b2e8a3-0000-4000-8000-000000000001"),
        ]),
        _ => unreachable!(),
    }
}

/// Verifies a fixture as `kind` sends it.
pub fn verify_fixture(
    kind: ForgeKind,
    fixture_name: &str,
    event: &str,
) -> Result<Delivery, ForgeError> {
    forge::verify(
        kind,
        &signed_headers(kind, fixture_name, event),
        &fixture(fixture_name),
        &secret(),
    )
}
