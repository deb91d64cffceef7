//! `turn-runner` + `fake-agent` as host processes against a temporary workspace, one test per mode.

use pretty_assertions::assert_eq;
use snapshot::{FileOp, ProposalStatus};

use crate::common::{
    RUNNER, archive_entries, outcomes, payload, run_turn, run_turn_env, run_with, standard,
};

const DASH: &str = "app/ui/pages/Dashboard.jsx";
const APP: &str = "app/app.json";
const DASH_BODY: &str = "export default function Dashboard() {}\n";

#[test]
fn default_turn_updates_one_file_and_exports_every_editable_file() {
    let (run, root) = run_turn(&standard("Make the dashboard say hello."), &[]);
    let out = run.output();
    let p = &out.proposal;
    assert_eq!(p.status, ProposalStatus::Completed);
    assert_eq!(p.provider_id, "acp");
    assert!(p.needs_human_review);
    // The agent edits the first editable file in prompt (sorted) order.
    assert_eq!(p.changed_files.len(), 1);
    assert_eq!(p.changed_files[0].path, APP);
    assert_eq!(p.changed_files[0].op, FileOp::Update);
    let edited = format!("{{}}\n// fake-agent: edited {APP}\n");
    assert_eq!(p.changed_files[0].content.as_deref(), Some(edited.as_str()));
    assert_eq!(p.owned_paths, vec![APP.to_owned()]);
    let usage = p.usage.as_ref().unwrap();
    let (pt, ct, tt) = (
        usage["prompt_tokens"].as_u64().unwrap(),
        usage["completion_tokens"].as_u64().unwrap(),
        usage["total_tokens"].as_u64().unwrap(),
    );
    assert!(pt > 0 && ct > 0 && tt == pt + ct);
    // Unchanged editable files are exported too; read-only files never are.
    assert_eq!(
        archive_entries(&out),
        vec![
            (APP.to_owned(), edited),
            (DASH.to_owned(), DASH_BODY.to_owned())
        ]
    );
    // The turn directory is removed afterwards.
    assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0);
}

#[test]
fn granted_create_and_delete_complete() {
    let input = payload(
        "Replace the dashboard with a new page.",
        &[(DASH, DASH_BODY), ("app/app.json", "{}\n")],
        &[],
        Some((&["app/ui/pages/New.jsx"], &[DASH])),
    );
    let (run, _root) = run_turn(&input, &[]);
    let out = run.output();
    assert_eq!(out.proposal.status, ProposalStatus::Completed);
    let ops: Vec<(String, FileOp, bool)> = out
        .proposal
        .changed_files
        .iter()
        .map(|c| (c.path.clone(), c.op, c.content.is_some()))
        .collect();
    assert_eq!(
        ops,
        vec![
            ("app/ui/pages/New.jsx".to_owned(), FileOp::Create, true),
            (DASH.to_owned(), FileOp::Delete, false),
        ]
    );
    let paths: Vec<String> = archive_entries(&out).into_iter().map(|(p, _)| p).collect();
    assert_eq!(
        paths,
        vec!["app/app.json".to_owned(), "app/ui/pages/New.jsx".to_owned()]
    );
}

#[test]
fn no_change_is_empty_without_archive() {
    let (run, _root) = run_turn(&standard("mode: noop"), &[]);
    let out = run.output();
    assert_eq!(out.proposal.status, ProposalStatus::Empty);
    assert_eq!(out.workspace_archive_base64, None);
    assert!(out.proposal.changed_files.is_empty());
}

/// A turn rejected with `violation` whose one provider event is `event` (the refused request).
fn refused_and_rejected(task: &str, violation: &str, event: &str) {
    let out = rejected(task, violation);
    let events: Vec<&str> = out
        .proposal
        .provider_events
        .iter()
        .map(|e| e.summary.as_str())
        .collect();
    assert_eq!(events, vec![event], "{task}");
}

/// Runs a turn that must end with `status` and the error `code`; its output and workspace root.
fn ended_with(
    task: &str,
    extra: &[&str],
    status: ProposalStatus,
    code: &str,
) -> (turn_runner::TurnOutput, tempfile::TempDir) {
    let (run, root) = run_turn(&standard(task), extra);
    let out = run.output();
    assert_eq!(out.proposal.status, status, "{task}");
    assert_eq!(out.proposal.error.as_deref(), Some(code), "{task}");
    (out, root)
}

/// Like [`ended_with`], and the turn exported no workspace archive; its workspace root.
fn ended_without_archive(
    task: &str,
    extra: &[&str],
    status: ProposalStatus,
    code: &str,
) -> tempfile::TempDir {
    let (out, root) = ended_with(task, extra, status, code);
    assert_eq!(out.workspace_archive_base64, None, "{task}");
    root
}

fn rejected(task: &str, expected_violation: &str) -> turn_runner::TurnOutput {
    let (run, _root) = run_turn(&standard(task), &[]);
    let out = run.output();
    assert_eq!(out.proposal.status, ProposalStatus::RejectedScope, "{task}");
    assert_eq!(out.workspace_archive_base64, None, "{task}");
    assert!(out.proposal.changed_files.is_empty());
    assert!(
        out.proposal.summary.contains(expected_violation),
        "{task}: {}",
        out.proposal.summary
    );
    out
}

#[test]
fn read_only_edit_is_refused_over_acp_and_rejected_when_done_directly() {
    refused_and_rejected(
        "mode: edit-read-only",
        "tests/test_dashboard.py (read_only_modified)",
        "refused fs request: FS_READ_ONLY",
    );
}

#[test]
fn read_only_delete_is_rejected() {
    rejected(
        "mode: delete-read-only",
        "tests/test_dashboard.py (read_only_missing)",
    );
}

#[test]
fn ungranted_create_is_refused_and_rejected() {
    refused_and_rejected(
        "mode: create-ungranted",
        "unapproved.txt (outside_allowlist)",
        "refused fs request: FS_NOT_IN_SCOPE",
    );
}

#[test]
fn ungranted_delete_is_rejected() {
    rejected("mode: delete-ungranted", &format!("{APP} (delete_denied)"));
}

#[test]
fn symlink_is_rejected_and_never_followed() {
    // The link is not a granted path, so the write is refused before it could be followed.
    refused_and_rejected(
        "mode: symlink",
        "link-to-passwd (symlink)",
        "refused fs request: FS_NOT_IN_SCOPE",
    );
}

#[test]
fn invalid_utf8_is_rejected_by_the_export() {
    ended_without_archive(
        "mode: invalid-utf8",
        &[],
        ProposalStatus::RejectedScope,
        "REPOSITORY_PATCH_ARCHIVE_UTF8",
    );
}

#[test]
fn acp_escapes_are_all_refused() {
    let (run, root) = run_turn(&standard("mode: escape-acp"), &[]);
    let report = run.report();
    let out = run.output();
    assert_eq!(out.proposal.status, ProposalStatus::Empty);
    let all = outcomes(&report, "acp_");
    assert_eq!(all.len(), 6);
    assert!(all.iter().all(|o| o.starts_with("refused: FS_")), "{all:?}");
    assert!(!root.path().join("acp-escape.txt").exists());
    assert!(!std::path::Path::new("/etc/acp-escape.txt").exists());
}

#[test]
fn filesystem_escapes_never_reach_the_output() {
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("escape.txt");
    let task = format!("mode: escape-fs\nescape-target: {}", target.display());
    let (run, _root) = run_turn(&standard(&task), &[]);
    let out = run.output();
    // A host process has no container around it, so the writes land; the runner still exports
    // nothing from outside the staged tree.
    assert_eq!(out.proposal.status, ProposalStatus::Empty);
    assert_eq!(out.workspace_archive_base64, None);
    assert!(target.exists());
}

#[test]
fn terminal_requests_are_refused() {
    let (run, _root) = run_turn(&standard("mode: terminal"), &[]);
    let report = run.report();
    let out = run.output();
    let terminal = outcomes(&report, "terminal_create");
    assert_eq!(terminal.len(), 1);
    assert!(terminal[0].starts_with("refused:"), "{terminal:?}");
    assert_eq!(
        out.proposal.provider_events[0].summary,
        "refused terminal/create"
    );
}

#[test]
fn permission_requests_get_the_fixed_reject_policy() {
    let (run, _root) = run_turn(&standard("mode: permission"), &[]);
    assert_eq!(
        outcomes(&run.report(), "permission"),
        vec!["selected: reject"]
    );
}

#[test]
fn bounded_fork_and_memory_bombs_and_disk_fill_end() {
    let (run, _root) = run_turn(&standard("mode: fork-bomb=16\nmode: memory-bomb=64"), &[]);
    let report = run.report();
    assert_eq!(
        outcomes(&report, "fork_bomb"),
        vec!["spawned 16, cap reached"]
    );
    assert_eq!(
        outcomes(&report, "memory_bomb"),
        vec!["allocated 64 MiB, cap reached"]
    );
    assert_eq!(run.output().proposal.status, ProposalStatus::Empty);
    rejected("mode: fill-tmpfs=4", "fill.bin (outside_allowlist)");
}

#[test]
fn sleeping_past_the_deadline_times_out() {
    let (run, root) = run_turn(&standard("mode: sleep"), &["--turn-timeout-ms", "1500"]);
    let out = run.output();
    assert_eq!(out.proposal.status, ProposalStatus::Timeout);
    assert_eq!(out.workspace_archive_base64, None);
    assert!(run.elapsed.as_secs() < 20, "{:?}", run.elapsed);
    assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0);
}

#[test]
fn flooding_the_channel_exceeds_the_budget() {
    // Total inbound bytes (256 KiB here) reached before the 1 MiB reply cap.
    ended_without_archive(
        "mode: flood=16",
        &["--max-inbound-bytes", "262144"],
        ProposalStatus::BudgetExceeded,
        "PROOF_WORKER_CHANNEL_BUDGET",
    );
    // One message over the per-message cap.
    ended_with(
        "mode: giant-message",
        &["--max-message-bytes", "1048576"],
        ProposalStatus::BudgetExceeded,
        "PROOF_WORKER_CHANNEL_BUDGET",
    );
    // Reply text over 1 MiB with the default channel caps.
    ended_with(
        "mode: flood=4",
        &[],
        ProposalStatus::BudgetExceeded,
        "PROOF_WORKER_REPLY_BUDGET",
    );
}

#[test]
fn archive_budget_is_enforced() {
    ended_with(
        "edit it",
        &["--max-archive-bytes", "64"],
        ProposalStatus::BudgetExceeded,
        "REPOSITORY_PATCH_ARCHIVE_BUDGET",
    );
}

#[test]
fn probes_detect_a_reachable_listener_a_sentinel_file_and_a_leaked_variable() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let sentinel = tempfile::NamedTempFile::new().unwrap();
    let task = format!(
        "probe-tcp: {}\nprobe-file: {}\nprobe-env: PROOF_SENTINEL_SECRET",
        listener.local_addr().unwrap(),
        sentinel.path().display()
    );
    let (run, _root) = run_turn_env(&standard(&task), &[], &[("PROOF_SENTINEL_SECRET", "x")]);
    assert_eq!(run.code, Some(4), "{}", run.stderr);
    assert!(run.stdout.is_empty());
    for exposure in [
        "agent:tcp_reachable",
        "agent:sentinel_file",
        "runner:sentinel_env",
    ] {
        assert!(run.stderr.contains(exposure), "{exposure}: {}", run.stderr);
    }
    // The agent's environment is emptied: the variable the runner saw never reaches it.
    assert!(!run.stderr.contains("agent:sentinel_env"), "{}", run.stderr);
}

#[test]
fn strict_stdin_refuses_bad_payloads_with_nothing_on_stdout() {
    let good = String::from_utf8(standard("x")).unwrap();
    let cases: Vec<Vec<u8>> = vec![
        good.replacen(
            "{\"app_id\":\"app\"",
            "{\"app_id\":\"app\",\"app_id\":\"app\"",
            1,
        )
        .into_bytes(),
        good.replacen("{\"app_id\"", "{\"extra\":1,\"app_id\"", 1)
            .into_bytes(),
        good.replacen("\"x\"", "\"\u{0}x\"", 1)
            .replace('\u{0}', "\\u0000")
            .into_bytes(),
        [b"{\"app_id\":\"\xff\"".as_slice(), &good.as_bytes()[14..]].concat(),
        good.replacen("\"files\":{", "\"files\":{\"../escape\":\"x\",", 1)
            .into_bytes(),
        b"{\"app_id\":NaN}".to_vec(),
        format!("{good} trailing").into_bytes(),
        vec![b' '; turn_runner::MAX_REQUEST_BYTES + 1],
    ];
    for (i, input) in cases.into_iter().enumerate() {
        let root = tempfile::tempdir().unwrap();
        let args = [
            "--workspace-root",
            root.path().to_str().unwrap(),
            "--agent",
            crate::common::AGENT,
        ];
        let run = run_with(
            RUNNER,
            &args,
            &[],
            &input,
            std::time::Duration::from_secs(30),
        );
        if i == 2 {
            // A NUL inside the task text is valid JSON and a valid request.
            assert_eq!(run.code, Some(0), "case {i}: {}", run.stderr);
            continue;
        }
        assert_eq!(run.code, Some(2), "case {i}: {}", run.stderr);
        assert!(run.stdout.is_empty(), "case {i}");
        assert!(
            run.stderr.contains("PROOF_WORKER_REQUEST"),
            "case {i}: {}",
            run.stderr
        );
    }
}

#[test]
fn an_agent_that_dies_mid_turn_fails_the_turn() {
    let root = ended_without_archive(
        "mode: exit",
        &[],
        ProposalStatus::Failed,
        "PROOF_WORKER_AGENT_FAILED",
    );
    assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0);
}

#[test]
fn python_zipfile_agrees_with_the_output_document() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/runner/check_output.py");
    let (run, _root) = run_turn(&standard("mode: edit-all"), &[]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let check = run_with(
        "python3",
        &[script, &format!("{APP},{DASH}")],
        &[],
        &run.stdout,
        std::time::Duration::from_secs(30),
    );
    assert_eq!(
        check.code,
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        check.stderr
    );
    assert_eq!(String::from_utf8_lossy(&check.stdout).trim(), "ok");
}

fn raw_agent_turn(scenario: &str, extra: &[&str]) -> crate::common::Run {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/runner/raw_agent.py");
    let mut args = vec![
        "--agent",
        "/usr/bin/python3",
        "--agent-arg",
        script,
        "--agent-arg",
        scenario,
    ];
    args.extend_from_slice(extra);
    let root = tempfile::tempdir().unwrap();
    let mut all = vec!["--workspace-root", root.path().to_str().unwrap()];
    all.extend_from_slice(&args);
    let input = payload("x", &[(APP, "{}\n")], &[], None);
    run_with(
        RUNNER,
        &all,
        &[],
        &input,
        std::time::Duration::from_secs(60),
    )
}

#[test]
fn a_raw_wire_agent_gets_refusals_and_the_fixed_permission_policy() {
    // The agent is a Python script speaking newline-delimited JSON-RPC, no ACP library: garbage
    // lines, an unsolicited response and unknown methods leave the runner standing.
    let run = raw_agent_turn("garbage", &[]);
    let out = run.output();
    assert_eq!(out.proposal.status, ProposalStatus::Completed);
    assert_eq!(
        out.proposal.changed_files[0].content.as_deref(),
        Some("{\"raw\": true}\n")
    );
    let seen: serde_json::Value = serde_json::from_str(&out.proposal.summary).unwrap();
    let expected = serde_json::json!([
        {"method": "x/unknown_method", "ok": false, "error": "Method not found"},
        {"method": "terminal/create", "ok": false, "error": "Method not found"},
        {"method": "fs/write_text_file", "ok": false, "error": "FS_OUTSIDE_WORKSPACE"},
        {"method": "fs/write_text_file", "ok": false, "error": "FS_UNSAFE_PATH"},
        {"method": "fs/read_text_file", "ok": true, "error": null},
        {"method": "fs/write_text_file", "ok": true, "error": null},
        {"method": "session/request_permission", "ok": true, "error": null,
         "outcome": {"outcome": "selected", "optionId": "no"}},
    ]);
    assert_eq!(seen, expected);
    assert!(!std::path::Path::new("/etc/raw-escape.txt").exists());
}

#[test]
fn a_raw_agent_that_refuses_initialize_or_stays_silent() {
    let run = raw_agent_turn("init-error", &[]);
    assert_eq!(run.output().proposal.status, ProposalStatus::Failed);
    let run = raw_agent_turn("silent", &["--turn-timeout-ms", "1500"]);
    assert_eq!(run.output().proposal.status, ProposalStatus::Timeout);
}

#[test]
fn environment_failures_exit_3_with_nothing_on_stdout() {
    let root = tempfile::tempdir().unwrap();
    let root_str = root.path().to_str().unwrap();
    let cases: [&[&str]; 2] = [
        &[
            "--workspace-root",
            root_str,
            "--agent",
            "/nonexistent/agent",
        ],
        &[
            "--workspace-root",
            "relative/root",
            "--agent",
            crate::common::AGENT,
        ],
    ];
    for args in cases {
        let run = run_with(
            RUNNER,
            args,
            &[],
            &standard("x"),
            std::time::Duration::from_secs(30),
        );
        assert_eq!(run.code, Some(3), "{args:?}: {}", run.stderr);
        assert!(run.stdout.is_empty());
    }
    // The failed spawn left no turn directory behind.
    assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0);
    let run = run_with(
        RUNNER,
        &["--bogus"],
        &[],
        b"{}",
        std::time::Duration::from_secs(30),
    );
    assert_eq!(run.code, Some(2));
}
