use super::*;
use crate::diff::{DiffOptions, render};

const HOSTILE: &str =
    "<script>window.__xss=1</script>\"><img src=x onerror=alert(1)></textarea>&amp;\u{202E}";

/// A hostile file item (path and diff lines), rendered unified or split.
fn hostile_item(split: bool, operation: &'static str, new_bytes: Option<u64>) -> FileItem {
    let diff = format!("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-{HOSTILE}\n+{HOSTILE}x\n");
    let r = render(
        &diff,
        DiffOptions {
            split,
            ignore_whitespace: false,
        },
    );
    FileItem {
        index: 0,
        path: short(HOSTILE),
        operation,
        new_bytes,
        diff_bytes: diff.len() as u64,
        added: r.added,
        removed: r.removed,
        hidden: r.hidden,
        cut_lines: r.cut_lines,
        body: r.body,
    }
}

fn page(split: bool) -> CandidatePage {
    CandidatePage {
        principal: Some(SignedIn {
            name: short(HOSTILE),
            sign_out_csrf: "ab".repeat(32),
        }),
        job_id: "job_0".into(),
        digest: "sha256:00".into(),
        repository: short(HOSTILE),
        baseline: short("c"),
        summary: short(HOSTILE),
        rationale: lines(HOSTILE, 100),
        validation_state: "pending".into(),
        review_state: "pending".into(),
        route: "review".into(),
        policy_clean: false,
        policy_digest: None,
        findings: vec![FindingItem {
            rule: short(HOSTILE),
            path: Some(short(HOSTILE)),
            line: Some(1),
        }],
        hidden_total: hostile_item(split, "update", Some(1)).hidden,
        hidden_files: 1,
        gates: vec![GateItem {
            gate: short(HOSTILE),
            required: true,
            outcome: "failed".into(),
            code: None,
            tests: Some("1 passed".into()),
            new_failures: vec![short(HOSTILE)],
            new_failures_count: 1,
            fixed: vec![],
            fixed_count: 0,
            log_tail: lines(HOSTILE, 100),
            log_total_bytes: 3,
            wall_ms: 1,
            evidence_digest: None,
        }],
        files: vec![hostile_item(split, "update", Some(1))],
        split,
        ignore_ws: false,
        unified_href: "?view=unified".into(),
        split_href: "?view=split".into(),
        ws_href: "?ws=ignore".into(),
        csrf: "t".into(),
        actions: vec!["accept_forced"],
        can_decide: true,
        can_force: true,
        can_publish: true,
        published: vec![],
        decisions: vec![DecisionItem {
            seq: 1,
            decision: "reject",
            principal: short(HOSTILE),
            at: utc(0),
            reason: Some(short(HOSTILE)),
            forced: false,
        }],
        supersedes: Some(format!("job_{}", "a".repeat(32))),
        follow_ups: vec![format!("job_{}", "b".repeat(32))],
        round: 1,
        superseded_by: Some(format!("job_{}", "c".repeat(32))),
        attempt_files: vec![hostile_item(split, "changed", None)],
        can_accept: false,
        notice: Some(short(HOSTILE)),
        notice_error: true,
    }
}

#[test]
fn agent_text_never_reaches_the_page_as_markup() {
    for split in [false, true] {
        let html = page(split).render().unwrap();
        assert!(!html.contains("<script"), "split={split}");
        assert!(!html.contains("<img"), "split={split}");
        assert!(!html.contains("</textarea>&"), "split={split}");
        assert!(!html.contains('\u{202E}'), "split={split}");
        assert!(html.contains("&#60;script&#62;"), "split={split}");
        assert!(
            html.contains("<span class=\"esc\" title=\"hidden character\">&#60;U+202E&#62;</span>")
        );
        // The lineage links both ways.
        let parent = format!("job_{}", "a".repeat(32));
        assert!(html.contains(&format!(
            "href=\"/ui/jobs/{parent}/candidate\" id=\"supersedes\""
        )));
        assert!(html.contains(&format!("<a href=\"/ui/jobs/job_{}\">", "b".repeat(32))));
        // The chain: the later attempt, no accept on a superseded candidate, and the diff from
        // the previous attempt under its own anchors, escaped like the baseline diff.
        assert!(html.contains(&format!(
            "href=\"/ui/jobs/job_{}/candidate\" id=\"superseded-by\"",
            "c".repeat(32)
        )));
        assert!(!html.contains("id=\"accept\""), "split={split}");
        assert!(html.contains("id=\"reject\""), "split={split}");
        assert!(html.contains("id=\"attempt-diff\""), "split={split}");
        assert!(html.contains("id=\"a0\""), "split={split}");
        assert!(html.contains("automatic follow-up 1"), "split={split}");
        // No inline script or style anywhere in the document.
        assert!(!html.contains("style="));
        assert!(!html.contains("<style"));
        // No tag carries an event handler attribute (the payload's `onerror=` is text).
        for tag in html.split('<').skip(1) {
            let tag = tag.split('>').next().unwrap();
            assert!(
                !tag.contains(" on"),
                "an event handler attribute in <{tag}>"
            );
        }
    }
}

#[test]
fn timestamps_are_utc() {
    assert_eq!(utc(0), "1970-01-01 00:00:00Z");
    assert_eq!(utc(1_796_083_200_000), "2026-12-01 00:00:00Z");
}

#[test]
fn the_usage_page_escapes_principals_and_repositories_and_links_from_the_navigation() {
    let item = |principal: Option<&str>, n: u64| UsageItem {
        day: "2026-12-07".into(),
        principal: principal.map(short),
        repository: short(HOSTILE),
        attempts: n,
        requests: n,
        input_tokens: 10 * n,
        output_tokens: n,
        total_tokens: 11 * n,
    };
    let view = UsagePage {
        principal: Some(SignedIn {
            name: short("alice"),
            sign_out_csrf: "ab".repeat(32),
        }),
        from: "2026-11-08".into(),
        to: "2026-12-07".into(),
        everyone: true,
        rows: vec![item(Some(HOSTILE), 2), item(None, 1)],
        totals: item(None, 3),
    };
    let html = view.render().unwrap();
    assert!(!html.contains("<script"));
    assert!(!html.contains("<img"));
    assert!(html.contains("&#60;script&#62;"));
    assert!(html.contains("<a href=\"/ui/usage\">Usage</a>"));
    assert!(html.contains("<td>33</td>"), "the totals row");
    assert!(html.contains("unknown"), "a job without a principal");
    assert!(html.contains("value=\"2026-11-08\""));
    let empty = UsagePage {
        rows: Vec::new(),
        everyone: false,
        ..view
    };
    let html = empty.render().unwrap();
    assert!(html.contains("No usage from 2026-11-08 to 2026-12-07."));
    assert!(html.contains("Your spend"));
}
