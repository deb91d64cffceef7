//! Signatures, tokens, sizes and delivery headers.

use forge::{ForgeKind, MAX_WEBHOOK_BODY_BYTES, verify};
use pretty_assertions::assert_eq;

use crate::support::{
    DELIVERY_ID, SECRET, fixture, fixtures, headers, secret, secret_from, signature,
    signed_headers, verify_fixture,
};

/// The code of a refused delivery; its message must quote neither the secret nor the body.
fn refusal(kind: ForgeKind, map: &http::HeaderMap, body: &[u8]) -> &'static str {
    let err = verify(kind, map, body, &secret()).unwrap_err();
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains(SECRET), "{shown}");
    assert!(
        !shown.contains("Codertocat") && !shown.contains(DELIVERY_ID),
        "{shown}"
    );
    err.code()
}

#[test]
fn the_committed_signatures_are_what_sign_py_computes() {
    let status = std::process::Command::new("python3")
        .arg(fixtures().join("sign.py"))
        .arg("--check")
        .status()
        .unwrap();
    assert!(status.success(), "signatures.txt is stale: run sign.py");
}

#[test]
fn signed_fixtures_of_every_forge_verify() {
    for (kind, name, event) in [
        (ForgeKind::GitHub, "github-issues-labeled.json", "issues"),
        (
            ForgeKind::GitHub,
            "github-issue-comment-issue.json",
            "issue_comment",
        ),
        (
            ForgeKind::Gitea,
            "gitea-issue-label-updated.json",
            "issue_label",
        ),
        (
            ForgeKind::Gitea,
            "gitea-issue-comment.json",
            "pull_request_comment",
        ),
        (
            ForgeKind::GitLab,
            "gitlab-issue-hook-labels.json",
            "Issue Hook",
        ),
        (ForgeKind::GitLab, "gitlab-note-issue.json", "Note Hook"),
    ] {
        let delivery = verify_fixture(kind, name, event).unwrap();
        assert_eq!(
            (delivery.kind, delivery.id.as_str(), delivery.event.as_str()),
            (kind, DELIVERY_ID, event),
            "{name}"
        );
    }
}

#[test]
fn forgejo_headers_verify_and_must_agree_with_gitea_ones() {
    let name = "gitea-issue-comment.json";
    let body = fixture(name);
    let sig = signature(name);
    let forgejo = headers(&[
        ("X-Forgejo-Delivery", DELIVERY_ID),
        ("X-Forgejo-Event", "issue_comment"),
        ("X-Forgejo-Event-Type", "issue_comment"),
        ("X-Forgejo-Signature", &sig),
        ("X-Gitea-Signature", &sig),
    ]);
    let delivery = verify(ForgeKind::Gitea, &forgejo, &body, &secret()).unwrap();
    assert_eq!(delivery.event.as_str(), "issue_comment");
    // Only X-*-Event (older Gitea has no Event-Type).
    let plain = headers(&[
        ("X-Gitea-Delivery", DELIVERY_ID),
        ("X-Gitea-Event", "issue_comment"),
        ("X-Gitea-Signature", &sig),
    ]);
    let delivery = verify(ForgeKind::Gitea, &plain, &body, &secret()).unwrap();
    assert_eq!(delivery.event.as_str(), "issue_comment");
    let mut flipped = sig.clone().into_bytes();
    flipped[0] = if flipped[0] == b'0' { b'1' } else { b'0' };
    let differ = headers(&[
        ("X-Forgejo-Delivery", DELIVERY_ID),
        ("X-Forgejo-Event", "issue_comment"),
        ("X-Forgejo-Signature", &sig),
        ("X-Gitea-Signature", std::str::from_utf8(&flipped).unwrap()),
    ]);
    assert_eq!(
        refusal(ForgeKind::Gitea, &differ, &body),
        "PATCH_CANDIDATE_FORGE_SIGNATURE_MALFORMED"
    );
}

/// `map` without `name`, or with `name` set to `value`.
fn with(mut map: http::HeaderMap, name: &'static str, value: Option<&str>) -> http::HeaderMap {
    map.remove(name);
    if let Some(value) = value {
        map.insert(name, http::HeaderValue::from_str(value).unwrap());
    }
    map
}

#[test]
fn missing_malformed_and_wrong_signatures_have_their_codes() {
    let name = "github-issues-labeled.json";
    let body = fixture(name);
    let good = signed_headers(ForgeKind::GitHub, name, "issues");
    let sig = signature(name);
    let hdr = "x-hub-signature-256";
    let mut flipped_sig = sig.clone().into_bytes();
    let last = flipped_sig.len() - 1;
    flipped_sig[last] = if flipped_sig[last] == b'0' {
        b'1'
    } else {
        b'0'
    };
    let flipped_sig = format!("sha256={}", String::from_utf8(flipped_sig).unwrap());
    let cases: Vec<(Option<String>, &str)> = vec![
        (None, "PATCH_CANDIDATE_FORGE_SIGNATURE_MISSING"),
        (
            Some(sig.clone()),
            "PATCH_CANDIDATE_FORGE_SIGNATURE_MALFORMED",
        ),
        (
            Some(format!("sha1={sig}")),
            "PATCH_CANDIDATE_FORGE_SIGNATURE_MALFORMED",
        ),
        (
            Some(format!("sha256={}", sig.to_uppercase())),
            "PATCH_CANDIDATE_FORGE_SIGNATURE_MALFORMED",
        ),
        (
            Some(format!("sha256={}", &sig[..62])),
            "PATCH_CANDIDATE_FORGE_SIGNATURE_MALFORMED",
        ),
        (
            Some(format!("sha256={sig}00")),
            "PATCH_CANDIDATE_FORGE_SIGNATURE_MALFORMED",
        ),
        (
            Some(format!("sha256={}", "z".repeat(64))),
            "PATCH_CANDIDATE_FORGE_SIGNATURE_MALFORMED",
        ),
        (
            Some("sha256=".to_owned()),
            "PATCH_CANDIDATE_FORGE_SIGNATURE_MALFORMED",
        ),
        (Some(flipped_sig), "PATCH_CANDIDATE_FORGE_SIGNATURE_WRONG"),
        (
            Some(format!("sha256={}", "0".repeat(64))),
            "PATCH_CANDIDATE_FORGE_SIGNATURE_WRONG",
        ),
    ];
    for (value, code) in cases {
        let map = with(good.clone(), hdr, value.as_deref());
        assert_eq!(refusal(ForgeKind::GitHub, &map, &body), code, "{value:?}");
    }
    // A repeated signature header.
    let mut twice = good.clone();
    twice.append(
        hdr,
        http::HeaderValue::from_str(&format!("sha256={sig}")).unwrap(),
    );
    assert_eq!(
        refusal(ForgeKind::GitHub, &twice, &body),
        "PATCH_CANDIDATE_FORGE_SIGNATURE_MALFORMED"
    );
    // One bit of the body flipped, one byte appended, none.
    let mut flipped = body.clone();
    flipped[10] ^= 0x01;
    let mut longer = body.clone();
    longer.push(b'\n');
    for changed in [flipped, longer, Vec::new()] {
        assert_eq!(
            refusal(ForgeKind::GitHub, &good, &changed),
            "PATCH_CANDIDATE_FORGE_SIGNATURE_WRONG"
        );
    }
    // Another secret.
    let err = verify(
        ForgeKind::GitHub,
        &good,
        &body,
        &secret_from("another-secret"),
    )
    .unwrap_err();
    assert_eq!(err.code(), "PATCH_CANDIDATE_FORGE_SIGNATURE_WRONG");
    // Gitea's bare hex: a `sha256=` prefix is not its form.
    let gitea_name = "gitea-issue-label-updated.json";
    let gitea_body = fixture(gitea_name);
    let gitea = signed_headers(ForgeKind::Gitea, gitea_name, "issue_label");
    let prefixed = with(
        gitea.clone(),
        "x-gitea-signature",
        Some(&format!("sha256={}", signature(gitea_name))),
    );
    assert_eq!(
        refusal(ForgeKind::Gitea, &prefixed, &gitea_body),
        "PATCH_CANDIDATE_FORGE_SIGNATURE_MALFORMED"
    );
    // Gitea also sends X-Hub-Signature-256: it is not what a Gitea delivery is checked by.
    let only_hub = with(gitea, "x-gitea-signature", None);
    assert_eq!(
        refusal(ForgeKind::Gitea, &only_hub, &gitea_body),
        "PATCH_CANDIDATE_FORGE_SIGNATURE_MISSING"
    );
    // A delivery signed for GitHub is not a GitLab delivery.
    assert_eq!(
        refusal(ForgeKind::GitLab, &good, &body),
        "PATCH_CANDIDATE_FORGE_SIGNATURE_MISSING"
    );
}

#[test]
fn gitlab_tokens_are_compared_whole() {
    let name = "gitlab-note-issue.json";
    let body = fixture(name);
    let good = signed_headers(ForgeKind::GitLab, name, "Note Hook");
    let hdr = "x-gitlab-token";
    let cases = [
        (None, "PATCH_CANDIDATE_FORGE_SIGNATURE_MISSING"),
        (Some(""), "PATCH_CANDIDATE_FORGE_SIGNATURE_MALFORMED"),
        (
            Some("fixture-webhook-secret-5d1"),
            "PATCH_CANDIDATE_FORGE_SIGNATURE_WRONG",
        ),
        (
            Some("fixture-webhook-secret-5d1cX"),
            "PATCH_CANDIDATE_FORGE_SIGNATURE_WRONG",
        ),
        (
            Some("Fixture-webhook-secret-5d1c"),
            "PATCH_CANDIDATE_FORGE_SIGNATURE_WRONG",
        ),
    ];
    for (value, code) in cases {
        let map = with(good.clone(), hdr, value);
        assert_eq!(refusal(ForgeKind::GitLab, &map, &body), code, "{value:?}");
    }
    let mut binary = good.clone();
    binary.insert(hdr, http::HeaderValue::from_bytes(b"fixture\xff").unwrap());
    assert_eq!(
        refusal(ForgeKind::GitLab, &binary, &body),
        "PATCH_CANDIDATE_FORGE_SIGNATURE_MALFORMED"
    );
    // The token does not sign the body: any body passes the token check.
    assert!(verify(ForgeKind::GitLab, &good, b"{}", &secret()).is_ok());
}

#[test]
fn bodies_over_the_cap_are_refused_before_anything_else() {
    let big = vec![b' '; MAX_WEBHOOK_BODY_BYTES + 1];
    let err = verify(ForgeKind::GitHub, &http::HeaderMap::new(), &big, &secret()).unwrap_err();
    assert_eq!(err.code(), "PATCH_CANDIDATE_FORGE_BODY_TOO_LARGE");
    assert_eq!(MAX_WEBHOOK_BODY_BYTES, 1024 * 1024);
}

#[test]
fn delivery_ids_and_event_names_are_plain_tokens() {
    let name = "github-issues-labeled.json";
    let body = fixture(name);
    let good = signed_headers(ForgeKind::GitHub, name, "issues");
    let long = "a".repeat(129);
    for (header, value) in [
        ("x-github-delivery", None),
        ("x-github-delivery", Some("")),
        ("x-github-delivery", Some("../../etc/passwd")),
        ("x-github-delivery", Some("id with space")),
        ("x-github-delivery", Some("id;rm -rf")),
        ("x-github-delivery", Some(long.as_str())),
        ("x-github-event", None),
        ("x-github-event", Some("issues\tx")),
        ("x-github-event", Some("a  b")),
    ] {
        let map = with(good.clone(), header, value);
        assert_eq!(
            refusal(ForgeKind::GitHub, &map, &body),
            "PATCH_CANDIDATE_FORGE_DELIVERY",
            "{header} {value:?}"
        );
    }
    let mut control = good.clone();
    control.insert(
        "x-github-delivery",
        http::HeaderValue::from_bytes(b"id\xc3\xa9").unwrap(),
    );
    assert_eq!(
        refusal(ForgeKind::GitHub, &control, &body),
        "PATCH_CANDIDATE_FORGE_DELIVERY"
    );
    let max = "a".repeat(128);
    let map = with(good, "x-github-delivery", Some(&max));
    assert_eq!(
        verify(ForgeKind::GitHub, &map, &body, &secret())
            .unwrap()
            .id
            .as_str(),
        max
    );
    // GitLab: the UUID header, not Idempotency-Key.
    let gl = signed_headers(ForgeKind::GitLab, "gitlab-note-issue.json", "Note Hook");
    let map = with(gl, "x-gitlab-event-uuid", None);
    assert_eq!(
        refusal(ForgeKind::GitLab, &map, &fixture("gitlab-note-issue.json")),
        "PATCH_CANDIDATE_FORGE_DELIVERY"
    );
}
