//! Acted-on events parsed to exactly their typed values; ignored events; hostile payloads.

use std::num::NonZeroU64;

use forge::{
    CloneUrl, CommentTarget, Delivery, ForgeEvent, ForgeKind, ForgeUser, IssueRef, ProjectPath,
    RepositoryRef, parse_event,
};
use pretty_assertions::assert_eq;

use crate::support::{fixture, verify_fixture};

fn n(value: u64) -> NonZeroU64 {
    NonZeroU64::new(value).unwrap()
}

fn repo(kind: ForgeKind, path: &str, url: &str) -> RepositoryRef {
    RepositoryRef {
        path: ProjectPath::parse(kind, path).unwrap(),
        clone_url: CloneUrl::parse(url).unwrap(),
    }
}

fn user(kind: ForgeKind, name: &str) -> ForgeUser {
    ForgeUser::parse(kind, name).unwrap()
}

/// Verifies the fixture as `kind` sends it, then parses it.
fn parsed(kind: ForgeKind, name: &str, event: &str) -> Option<ForgeEvent> {
    let delivery = verify_fixture(kind, name, event).unwrap();
    parse_event(&delivery, &fixture(name)).unwrap()
}

/// A delivery as `verify` would give it, for payloads built here (verification is tested apart).
fn delivery(kind: ForgeKind, event: &str) -> Delivery {
    let body = b"{}";
    let map = match kind {
        ForgeKind::GitLab => crate::support::headers(&[
            ("X-Gitlab-Event", event),
            ("X-Gitlab-Event-UUID", "d-1"),
            ("X-Gitlab-Token", crate::support::SECRET),
        ]),
        _ => unreachable!(),
    };
    forge::verify(kind, &map, body, &crate::support::secret()).unwrap()
}

#[test]
fn github_issue_labeled() {
    let kind = ForgeKind::GitHub;
    assert_eq!(
        parsed(kind, "github-issues-labeled.json", "issues"),
        Some(ForgeEvent::IssueLabeled {
            repository: repo(
                kind,
                "Codertocat/Hello-World",
                "https://github.com/Codertocat/Hello-World.git"
            ),
            issue: IssueRef {
                number: n(1),
                title: "Spelling error in the README file".into(),
                body: "It looks like you accidentally spelled 'commit' with two 't's.".into(),
            },
            labels_added: vec!["bug".into()],
            sender: user(kind, "Codertocat"),
        })
    );
}

#[test]
fn github_comments_on_an_issue_and_a_pull_request() {
    let kind = ForgeKind::GitHub;
    let hello = || {
        repo(
            kind,
            "Codertocat/Hello-World",
            "https://github.com/Codertocat/Hello-World.git",
        )
    };
    assert_eq!(
        parsed(kind, "github-issue-comment-issue.json", "issue_comment"),
        Some(ForgeEvent::Comment {
            repository: hello(),
            target: CommentTarget::Issue(n(1)),
            comment_id: n(492_700_400),
            body: "You are totally right! I'll get this fixed right away.".into(),
            sender: user(kind, "Codertocat"),
        })
    );
    assert_eq!(
        parsed(kind, "github-issue-comment-pull.json", "issue_comment"),
        Some(ForgeEvent::Comment {
            repository: hello(),
            target: CommentTarget::PullRequest(n(2)),
            comment_id: n(492_700_401),
            body: "/patch-candidate please rebase\r\nthanks".into(),
            sender: user(kind, "octocat"),
        })
    );
}

#[test]
fn gitea_label_updated_and_pull_request_comment() {
    let kind = ForgeKind::Gitea;
    let webhooks = || {
        repo(
            kind,
            "gitea/webhooks",
            "http://localhost:3000/gitea/webhooks.git",
        )
    };
    assert_eq!(
        parsed(kind, "gitea-issue-label-updated.json", "issue_label"),
        Some(ForgeEvent::IssueLabeled {
            repository: webhooks(),
            issue: IssueRef {
                number: n(3),
                title: "Crash on start".into(),
                body: "The service crashes on start.\n\nSteps: run it.".into(),
            },
            labels_added: vec!["bug".into(), "patch-candidate".into()],
            sender: user(kind, "gitea"),
        })
    );
    assert_eq!(
        parsed(kind, "gitea-issue-comment.json", "pull_request_comment"),
        Some(ForgeEvent::Comment {
            repository: webhooks(),
            target: CommentTarget::PullRequest(n(4)),
            comment_id: n(42),
            body: "Looks good, please publish.".into(),
            sender: user(kind, "alice"),
        })
    );
}

#[test]
fn gitlab_issue_hook_and_notes_on_an_issue_and_a_merge_request() {
    let kind = ForgeKind::GitLab;
    assert_eq!(
        parsed(kind, "gitlab-issue-hook-labels.json", "Issue Hook"),
        Some(ForgeEvent::IssueLabeled {
            repository: repo(
                kind,
                "gitlabhq/tools/gitlab-test",
                "http://example.com/gitlabhq/tools/gitlab-test.git"
            ),
            issue: IssueRef {
                number: n(23),
                title: "New API: create/update/delete file".into(),
                body: "Create new API for manipulations with repository".into(),
            },
            labels_added: vec!["patch-candidate".into()],
            sender: user(kind, "root"),
        })
    );
    let test = || {
        repo(
            kind,
            "gitlab-org/gitlab-test",
            "http://example.com/gitlab-org/gitlab-test.git",
        )
    };
    assert_eq!(
        parsed(kind, "gitlab-note-issue.json", "Note Hook"),
        Some(ForgeEvent::Comment {
            repository: test(),
            target: CommentTarget::Issue(n(17)),
            comment_id: n(1241),
            body: "Hello world".into(),
            sender: user(kind, "root"),
        })
    );
    assert_eq!(
        parsed(kind, "gitlab-note-merge-request.json", "Note Hook"),
        Some(ForgeEvent::Comment {
            repository: test(),
            target: CommentTarget::PullRequest(n(1)),
            comment_id: n(1244),
            body: "This MR needs work.".into(),
            sender: user(kind, "root"),
        })
    );
}

/// The GitLab issue fixture as a JSON value, to be edited.
fn gitlab_issue() -> serde_json::Value {
    serde_json::from_slice(&fixture("gitlab-issue-hook-labels.json")).unwrap()
}

fn parse_value(
    kind: ForgeKind,
    event: &str,
    value: &serde_json::Value,
) -> Result<Option<ForgeEvent>, &'static str> {
    let body = serde_json::to_vec(value).unwrap();
    parse_event(&delivery(kind, event), &body).map_err(|e| {
        let shown = format!("{e} {e:?}");
        assert!(
            !shown.contains("New API") && !shown.contains("gitlabhq"),
            "{shown}"
        );
        e.code()
    })
}

#[test]
fn events_and_actions_not_acted_on_are_ignored() {
    let kind = ForgeKind::GitLab;
    // Other events, even with bodies that are not JSON.
    for event in [
        "Push Hook",
        "Merge Request Hook",
        "Pipeline Hook",
        "Confidential Issue Hook",
    ] {
        assert_eq!(
            parse_event(&delivery(kind, event), b"not json").unwrap(),
            None,
            "{event}"
        );
    }
    // An update without a label change, a removal, a close.
    let mut no_change = gitlab_issue();
    no_change["changes"]
        .as_object_mut()
        .unwrap()
        .remove("labels");
    assert_eq!(parse_value(kind, "Issue Hook", &no_change), Ok(None));
    let mut removed = gitlab_issue();
    removed["changes"]["labels"]["current"] = serde_json::json!([]);
    assert_eq!(parse_value(kind, "Issue Hook", &removed), Ok(None));
    let mut closed = gitlab_issue();
    closed["object_attributes"]["action"] = "close".into();
    assert_eq!(parse_value(kind, "Issue Hook", &closed), Ok(None));
    // Opened with labels: the issue's labels.
    let mut opened = gitlab_issue();
    opened["object_attributes"]["action"] = "open".into();
    opened.as_object_mut().unwrap().remove("changes");
    let Ok(Some(ForgeEvent::IssueLabeled { labels_added, .. })) =
        parse_value(kind, "Issue Hook", &opened)
    else {
        panic!("an opened, labeled issue is acted on");
    };
    assert_eq!(labels_added, ["API", "patch-candidate"]);
    // Notes on commits and snippets, and edited notes.
    let note: serde_json::Value =
        serde_json::from_slice(&fixture("gitlab-note-issue.json")).unwrap();
    for (field, value) in [
        ("noteable_type", "Commit"),
        ("noteable_type", "Snippet"),
        ("action", "update"),
    ] {
        let mut changed = note.clone();
        changed["object_attributes"][field] = value.into();
        assert_eq!(
            parse_value(kind, "Note Hook", &changed),
            Ok(None),
            "{value}"
        );
    }
    // GitHub: other actions and events; an `issues` event on a pull request.
    let gh = ForgeKind::GitHub;
    let body = fixture("github-issues-labeled.json");
    let map = crate::support::signed_headers(gh, "github-issues-labeled.json", "issues");
    let labeled = forge::verify(gh, &map, &body, &crate::support::secret()).unwrap();
    let mut value: serde_json::Value = serde_json::from_slice(&body).unwrap();
    value["action"] = "unlabeled".into();
    assert_eq!(
        parse_event(&labeled, &serde_json::to_vec(&value).unwrap()).unwrap(),
        None
    );
    let star = crate::support::signed_headers(gh, "github-issues-labeled.json", "star");
    let star = forge::verify(gh, &star, &body, &crate::support::secret()).unwrap();
    assert_eq!(parse_event(&star, &body).unwrap(), None);
}

#[test]
fn hostile_payloads_are_refused_with_the_payload_code() {
    let kind = ForgeKind::GitLab;
    let payload = "PATCH_CANDIDATE_FORGE_PAYLOAD";
    type Edit = fn(&mut serde_json::Value);
    let edits: Vec<(&str, Edit)> = vec![
        ("huge title", |v| {
            v["object_attributes"]["title"] = "t".repeat(1025).into()
        }),
        ("title with a newline", |v| {
            v["object_attributes"]["title"] = "a\nb".into()
        }),
        ("title with ESC", |v| {
            v["object_attributes"]["title"] = "a\u{1b}[2Jb".into()
        }),
        ("huge body", |v| {
            v["object_attributes"]["description"] = "b".repeat(64 * 1024 + 1).into()
        }),
        ("body with NUL", |v| {
            v["object_attributes"]["description"] = "a\u{0}b".into()
        }),
        ("iid zero", |v| v["object_attributes"]["iid"] = 0.into()),
        ("iid negative", |v| {
            v["object_attributes"]["iid"] = (-1).into()
        }),
        ("iid a string", |v| {
            v["object_attributes"]["iid"] = "23".into()
        }),
        ("iid a float", |v| {
            v["object_attributes"]["iid"] = 23.5.into()
        }),
        ("title a number", |v| {
            v["object_attributes"]["title"] = 7.into()
        }),
        ("login with ESC", |v| {
            v["user"]["username"] = "root\u{1b}[31m".into()
        }),
        ("login with a space", |v| {
            v["user"]["username"] = "ro ot".into()
        }),
        ("login empty", |v| v["user"]["username"] = "".into()),
        ("no user", |v| {
            v.as_object_mut().unwrap().remove("user");
        }),
        ("path traversal", |v| {
            v["project"]["path_with_namespace"] = "../etc".into()
        }),
        ("path one segment", |v| {
            v["project"]["path_with_namespace"] = "gitlab-test".into()
        }),
        ("clone URL with user", |v| {
            v["project"]["git_http_url"] = "https://u:p@example.com/g/p.git".into();
        }),
        ("clone URL ssh", |v| {
            v["project"]["git_http_url"] = "git@example.com:g/p.git".into()
        }),
        ("label with control", |v| {
            v["changes"]["labels"]["current"][1]["title"] = "a\u{7}".into();
        }),
        ("label empty", |v| {
            v["changes"]["labels"]["current"][1]["title"] = "".into()
        }),
        ("labels not a list", |v| {
            v["changes"]["labels"]["current"] = "x".into()
        }),
        ("too many labels", |v| {
            let many: Vec<_> = (0..101)
                .map(|i| serde_json::json!({"title": format!("l{i}")}))
                .collect();
            v["changes"]["labels"]["current"] = many.into();
        }),
    ];
    for (what, edit) in edits {
        let mut value = gitlab_issue();
        edit(&mut value);
        assert_eq!(
            parse_value(kind, "Issue Hook", &value),
            Err(payload),
            "{what}"
        );
    }
    // Not JSON, JSON of another shape, a lone surrogate, trailing garbage.
    for body in [
        &b"not json"[..],
        b"[]",
        b"{\"object_attributes\": []}",
        b"{\"object_attributes\": {\"action\": \"update\", \"title\": \"\\ud800\"}}",
        b"{\"object_attributes\": {\"action\": \"open\"}} x",
    ] {
        let err = parse_event(&delivery(kind, "Issue Hook"), body).unwrap_err();
        assert_eq!(err.code(), payload, "{}", String::from_utf8_lossy(body));
    }
    // A note: zero id, missing issue, body too long.
    let note: serde_json::Value =
        serde_json::from_slice(&fixture("gitlab-note-issue.json")).unwrap();
    let note_edits: Vec<(&str, Edit)> = vec![
        ("id zero", |v| v["object_attributes"]["id"] = 0.into()),
        ("no issue", |v| {
            v.as_object_mut().unwrap().remove("issue");
        }),
        ("issue iid zero", |v| v["issue"]["iid"] = 0.into()),
        ("huge note", |v| {
            v["object_attributes"]["note"] = "n".repeat(64 * 1024 + 1).into()
        }),
    ];
    for (what, edit) in note_edits {
        let mut value = note.clone();
        edit(&mut value);
        assert_eq!(
            parse_value(kind, "Note Hook", &value),
            Err(payload),
            "{what}"
        );
    }
    // The limits themselves are accepted.
    let mut at_limit = gitlab_issue();
    at_limit["object_attributes"]["title"] = "t".repeat(1024).into();
    at_limit["object_attributes"]["description"] = "b".repeat(64 * 1024).into();
    assert!(matches!(
        parse_value(kind, "Issue Hook", &at_limit),
        Ok(Some(_))
    ));
    // A null description is an empty body.
    let mut null_body = gitlab_issue();
    null_body["object_attributes"]["description"] = serde_json::Value::Null;
    let Ok(Some(ForgeEvent::IssueLabeled { issue, .. })) =
        parse_value(kind, "Issue Hook", &null_body)
    else {
        panic!("a null description is acted on");
    };
    assert_eq!(issue.body, "");
}
