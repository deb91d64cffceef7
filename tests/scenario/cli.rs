//! The `patch-candidate` binary: `run`, `demo` (the whole loop), `janitor`, `usage`, exit codes,
//! and a killed `run` whose container the janitor then removes.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::proof::{DASHBOARD, demo_files};
use crate::support::*;

struct Fixture {
    _repo: tempfile::TempDir,
    _approval_dir: tempfile::TempDir,
    repo: PathBuf,
    commit: String,
    approval: PathBuf,
    task: String,
}

fn fixture(task: &str) -> Fixture {
    let (repo_dir, commit) = git_repo(&demo_files());
    let context = app_approval(repo_dir.path(), &commit, task);
    let approval_dir = tempfile::tempdir().unwrap();
    let approval_path = write_approval(approval_dir.path(), &context);
    Fixture {
        repo: repo_dir.path().to_path_buf(),
        _repo: repo_dir,
        _approval_dir: approval_dir,
        commit,
        approval: approval_path,
        task: task.to_owned(),
    }
}

/// `patch-candidate --json run` of the fixture's task, with `state` as the state directory.
fn run_cmd(f: &Fixture, state: &Path) -> Command {
    let mut cmd = bin();
    cmd.args(["--json", "run", "--repo"])
        .arg(&f.repo)
        .args(["--commit", &f.commit, "--approval"])
        .arg(&f.approval)
        .args(["--task", &f.task])
        .env("PATCH_CANDIDATE_STATE_DIR", state);
    cmd
}

/// Runs `cmd`; asserts its exit status and the code of its JSON error.
fn assert_fails(cmd: &mut Command, status: i32, code: &str) {
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(status));
    assert_eq!(json_of(&out)["error"]["code"], code);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_cli_run_stores_a_candidate_and_records_usage() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let state = state_with_images();
    let f = fixture("Update the dashboard.");
    // Ambient Docker settings are ignored: the worker talks to the local socket only.
    let bogus_config = tempfile::tempdir().unwrap();
    std::fs::write(bogus_config.path().join("config.json"), "{not json").unwrap();
    let out = run_ok(
        run_cmd(&f, state.path())
            .env("DOCKER_HOST", "tcp://127.0.0.1:9")
            .env("DOCKER_CONTEXT", "no-such-context")
            .env("DOCKER_CONFIG", bogus_config.path()),
    );
    let doc = json_of(&out);
    let digest = doc["digest"].as_str().unwrap();
    assert!(digest.starts_with("sha256:"));
    assert_eq!(doc["candidate"]["changed_files"][0]["path"], DASHBOARD);
    assert_eq!(doc["candidate"]["mutation_allowed"], false);
    let stored = state.path().join("candidates");
    assert!(std::fs::read_dir(&stored).unwrap().count() >= 1);
    let usage = bin()
        .args(["--json", "usage"])
        .env("PATCH_CANDIDATE_STATE_DIR", state.path())
        .output()
        .unwrap();
    assert!(usage.status.success());
    let records = json_of(&usage)["records"].as_array().unwrap().len();
    assert_eq!(
        records,
        usize::from(doc["usage_recorded"].as_bool().unwrap())
    );
    assert_clean_and_tally(
        &docker,
        "docker_cli_run_stores_a_candidate_and_records_usage",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_cli_exit_codes() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let state = state_with_images();
    let f = fixture("Update the dashboard.");
    // Docker unreachable: environment failure, exit 3.
    assert_fails(
        run_cmd(&f, state.path()).args(["--docker-socket", "/nonexistent/docker.sock"]),
        3,
        "REPOSITORY_DOCKER_UNAVAILABLE",
    );
    // Wrong approved image ID: rejected, exit 1, before any container.
    let other = format!("sha256:{}", "0".repeat(64));
    assert_fails(
        run_cmd(&f, state.path()).args(["--image-id", &other]),
        1,
        "REPOSITORY_DOCKER_IMAGE_ID_MISMATCH",
    );
    // A task that differs from the approval: rejected before Docker.
    let other_task = Fixture {
        task: "Something else.".into(),
        ..fixture("Update the dashboard.")
    };
    assert_fails(
        &mut run_cmd(&other_task, state.path()),
        1,
        "REPOSITORY_DOCKER_CONTEXT_MISMATCH",
    );
    // Usage error: exit 2.
    let out = bin().args(["run", "--repo"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_clean_and_tally(&docker, "docker_cli_exit_codes").await;
}

/// `demo` runs the whole loop on its fixture: the turn, the gates (pytest red on the first
/// attempt, green after the follow-up; secret_scan green), `git apply --check`, the accept
/// decision in the local review store, the publication to the fixture's bare repository (the
/// branch holds the printed commit, whose tree is the candidate's), and the review page's
/// commands. Once as JSON, once as text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_cli_demo_runs_the_whole_loop() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let Some(state) = state_for_demo() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let demo_dir = dir.path().join("demo");
    let out = run_ok(
        bin()
            .args(["--json", "demo", "--dir"])
            .arg(&demo_dir)
            .env("PATCH_CANDIDATE_STATE_DIR", state.path()),
    );
    let doc = json_of(&out);
    assert_eq!(doc["git_apply_check"], true);
    let ops = changed_files(&doc);
    assert_eq!(
        ops,
        vec![
            ("app/ui/pages/Dashboard.jsx".to_owned(), "update".to_owned()),
            ("app/ui/pages/Legacy.jsx".to_owned(), "delete".to_owned()),
            ("app/ui/pages/New.jsx".to_owned(), "create".to_owned()),
        ]
    );

    // 1. The chain: red, one follow-up, green; the last candidate is the one reviewed.
    let chain = &doc["chain"];
    assert_eq!(chain["end"], "green", "{doc}");
    assert_eq!(chain["follow_ups"], 1);
    let verdicts = |attempt: &serde_json::Value| field_pairs(&attempt["gates"], "gate", "outcome");
    let attempts = chain["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{chain}");
    let pair = |a: &str, b: &str| (a.to_owned(), b.to_owned());
    assert_eq!(
        verdicts(&attempts[0]),
        vec![pair("pytest", "failed"), pair("secret_scan", "passed")]
    );
    assert_eq!(attempts[0]["gates"][0]["regression"], true);
    assert_eq!(
        verdicts(&attempts[1]),
        vec![pair("pytest", "passed"), pair("secret_scan", "passed")]
    );
    let digest = doc["digest"].as_str().unwrap();
    assert_eq!(attempts[1]["digest"], digest);
    assert_ne!(attempts[0]["digest"], digest);
    let dashboard = doc["candidate"]["changed_files"][0]["content"]
        .as_str()
        .unwrap();
    assert_eq!(
        dashboard.matches("fake-agent: edited").count(),
        2,
        "{dashboard}"
    );
    // The follow-up continued the first attempt, and the failing test's id reached the agent.
    let last = dashboard
        .lines()
        .rev()
        .find(|l| l.contains("fake-agent"))
        .unwrap();
    assert_contains_all(
        last,
        &[
            "after review (continued; gates: ",
            "pytest: failed",
            "new failures: ",
            "test_dashboard::test_the_last_edit_answers_this_test",
        ],
    );

    // 2. The review: accepted, not forced, against both gates' evidence of this digest.
    let review = &doc["review"];
    assert_eq!(review["decision"]["decision"], "accept", "{review}");
    assert_eq!(review["decision"]["candidate_digest"], digest);
    assert_eq!(review["decision"]["forced"], false);
    let against = review["decision"]["against"]["gate_evidence"]
        .as_object()
        .unwrap();
    assert_eq!(
        against.keys().collect::<Vec<_>>(),
        vec!["pytest", "secret_scan"]
    );
    assert_eq!(review["review"]["review_state"], "accepted");

    // 3. The publication: the bare repository's branch is the printed commit, on the baseline,
    // and its tree is the candidate's.
    let publication = &doc["publication"];
    let remote = std::path::PathBuf::from(publication["remote"].as_str().unwrap());
    assert_eq!(remote, demo_dir.join("remote.git"));
    let branch = publication["branch"].as_str().unwrap();
    let commit = publication["record"]["commit_id"].as_str().unwrap();
    assert_eq!(publication["record"]["branch"], branch);
    assert_eq!(publication["record"]["created"], true);
    assert_eq!(publication["branch_tip"], commit);
    let tip = git_out(&remote, &["rev-parse", &format!("refs/heads/{branch}")]);
    assert_eq!(tip, commit);
    let parent = git_out(&remote, &["rev-parse", &format!("{commit}^")]);
    assert_eq!(
        parent,
        doc["candidate"]["baseline_commit_sha"].as_str().unwrap()
    );
    for file in doc["candidate"]["changed_files"].as_array().unwrap() {
        let path = file["path"].as_str().unwrap();
        let shown = git_output(&remote, &["show", &format!("{commit}:{path}")]);
        if file["op"] == "delete" {
            assert!(!shown.status.success(), "{path} is still in {commit}");
        } else {
            assert!(shown.status.success(), "{path} is missing from {commit}");
            assert_eq!(
                String::from_utf8(shown.stdout).unwrap(),
                file["content"].as_str().unwrap()
            );
        }
    }
    // The local review store holds the decision and the publication of this digest.
    let shown = run_ok(
        bin()
            .args(["--json", "review", "show", digest, "--store"])
            .arg(demo_dir.join("candidates"))
            .env("PATCH_CANDIDATE_STATE_DIR", state.path()),
    );
    let shown = json_of(&shown);
    assert_eq!(shown["publication"]["commit_id"], commit, "{shown}");

    // 4. The review page.
    assert_eq!(doc["review_page"]["url"], "http://127.0.0.1:8787/ui/");
    let serve = doc["review_page"]["serve"].as_str().unwrap();
    assert!(
        serve.starts_with("patch-candidate serve --gates "),
        "{serve}"
    );

    let status = git_text(&demo_dir.join("repo"), &["status", "--porcelain"]);
    assert!(status.is_empty(), "demo modified its fixture repository");

    // The text form: the same steps, each under its heading, ending with the page.
    let text_dir = dir.path().join("demo-text");
    let out = run_ok(
        bin()
            .args(["demo", "--dir"])
            .arg(&text_dir)
            .env("PATCH_CANDIDATE_STATE_DIR", state.path()),
    );
    let text = stdout_text(&out);
    assert_contains_all(
        &text,
        &[
            "== 1. the turn, its gates and the follow-up ==",
            "gate pytest: failed",
            "follow-up 1 of 2: continuing sha256:",
            "gate pytest: passed",
            "chain: green after 1 follow-up(s); last candidate sha256:",
            "git apply --check: ok",
            "== 2. review ==",
            "review: accepted  validation: passed",
            "== 3. publication ==",
            "on branch patch-candidate/demo-",
            "== 4. the review page ==",
            "http://127.0.0.1:8787/ui/",
        ],
    );
    assert_clean_and_tally(&docker, "docker_cli_demo_runs_the_whole_loop").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_killed_run_leaves_a_container_the_janitor_removes() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let state = tempfile::tempdir().unwrap();
    let (tag, id) = fixture_mode_image("sleep");
    let f = fixture("Update the dashboard.");
    let mut child = run_cmd(&f, state.path())
        .args([
            "--image",
            &tag,
            "--image-id",
            &id,
            "--max-wall-seconds",
            "600",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_turn_container(&docker, 60, "the turn container never appeared").await;
    // Give the run time to start the container, then kill it without any chance to clean up.
    tokio::time::sleep(Duration::from_millis(500)).await;
    child.kill().unwrap();
    child.wait().unwrap();
    let left = own_turns(&docker).await.unwrap();
    assert_eq!(
        left.len(),
        1,
        "the killed run should leave its container behind"
    );
    // A live-owner check keeps fresh containers of running turns; the owner is dead here.
    let out = run_ok(bin().args(["--json", "janitor", "--grace-seconds", "0"]));
    let report = json_of(&out);
    assert_eq!(report["removed"].as_array().unwrap().len(), 1);
    assert_clean_and_tally(
        &docker,
        "docker_killed_run_leaves_a_container_the_janitor_removes",
    )
    .await;
}
