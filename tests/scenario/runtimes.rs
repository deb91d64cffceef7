//! Every limit of a turn, proven under both supported runtimes (`runc` and gVisor's `runsc`)
//! through the real worker pipeline: the container is created with the runtime profile's spec,
//! verified by the pre-start inspection (under runsc after the daemon's registration), and each
//! hostile mode must end contained — with the code the runtime's enforcement gives — and leave no
//! container behind.
//!
//! With `PATCH_CANDIDATE_REQUIRE_DOCKER=1` a daemon without the expected `runsc` registration
//! fails the runsc cases (`infra/ci/ensure-docker.sh` installs and registers it).

use std::time::{Duration, Instant};

use container::{BollardRuntime, RuntimeProfile};

use crate::hostile::hostile_image_turn;
use crate::proof::{DASHBOARD, assert_applies, proof_turn_under};
use crate::support::*;

/// The daemon, when `runtime` is usable on it. A daemon without the expected `runsc`
/// registration fails the test when Docker is required, else the test says it skipped.
pub(crate) async fn docker_for(runtime: &str) -> Option<BollardRuntime> {
    let docker = docker().await?;
    if runtime == "runsc" {
        let facts = docker.daemon_facts().await.unwrap();
        if let Err(e) = RuntimeProfile::Runsc.verify_registration(&facts.runtimes) {
            assert!(
                !docker_required(),
                "runsc is required (PATCH_CANDIDATE_REQUIRE_DOCKER=1) but unusable: {e}"
            );
            eprintln!("SKIPPED (runsc unusable, PATCH_CANDIDATE_REQUIRE_DOCKER unset): {e}");
            return None;
        }
    }
    Some(docker)
}

/// Runs `task` with the proof image under `runtime`; `expected` is `"ok"` (a candidate that
/// updates the dashboard and applies) or the error code (alternatives separated by `|`).
async fn proof_case(runtime: &str, task: &str, expected: &str, test: &str) {
    let Some(docker) = docker_for(runtime).await else {
        return;
    };
    let _guard = docker_lock().lock().await;
    let started = Instant::now();
    let run = proof_turn_under(Some(runtime), &docker, task, &[], &[], Some(&[DASHBOARD])).await;
    let elapsed = started.elapsed();
    match (expected, run.outcome) {
        ("ok", Ok(outcome)) => {
            assert_eq!(outcome.candidate.changed_files().len(), 1);
            assert_eq!(outcome.candidate.validation_state(), "pending");
            assert_applies(run.repo.path(), &outcome.candidate);
        }
        ("ok", Err(err)) => panic!("{test}: {err}"),
        (codes, Err(err)) => {
            assert!(
                codes.split('|').any(|c| c == err.code()),
                "{test}: expected {codes}, got {err}"
            );
            assert!(!err.to_string().contains("export default"), "{test}");
        }
        (code, Ok(_)) => panic!("{test} produced a candidate, expected {code}"),
    }
    eprintln!("{test}: {elapsed:?}");
    assert_clean_and_tally(&docker, test).await;
}

/// Runs a hostile image mode (the container's own output contract broken) under `runtime`.
async fn image_case(runtime: &str, mode: &str, wall: u64, expected: &str, test: &str) {
    let Some(docker) = docker_for(runtime).await else {
        return;
    };
    let _guard = docker_lock().lock().await;
    let started = Instant::now();
    let run = hostile_image_turn(Some(runtime), &docker, mode, wall).await;
    let err = match run.outcome {
        Ok(_) => panic!("{test}: hostile image mode {mode} was accepted"),
        Err(err) => err,
    };
    assert_eq!(err.code(), expected, "{test}: {err}");
    // The wall deadline plus slack bounds every mode, the timeout included.
    assert!(
        started.elapsed() < Duration::from_secs(wall + 40),
        "{test}: {:?}",
        started.elapsed()
    );
    assert_clean_and_tally(&docker, test).await;
}

const PROBES: &str = "Update the dashboard.\nprobe: isolation\nprobe-tcp: 1.1.1.1:443\nprobe-tcp: 127.0.0.1:22\nprobe-env: MOZAIKS_ACP_HOST_SECRET\nprobe-file: /workspace/.host_sentinel\nprobe-file: /etc/shadow";

macro_rules! proof_cases {
    ($($name:ident => ($runtime:literal, $task:expr, $code:literal);)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() { proof_case($runtime, $task, $code, stringify!($name)).await; }
    )*};
}

macro_rules! image_cases {
    ($($name:ident => ($runtime:literal, $mode:literal, $wall:literal, $code:literal);)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() { image_case($runtime, $mode, $wall, $code, stringify!($name)).await; }
    )*};
}

proof_cases! {
    // The proof turn itself, and the network / host-secret probes: a verified candidate only
    // when every probe reports confinement (any exposure makes the runner exit 4).
    docker_runtime_runc_proof_round_trip => ("runc", "Update the dashboard.", "ok");
    docker_runtime_runsc_proof_round_trip => ("runsc", "Update the dashboard.", "ok");
    docker_runtime_runc_network_and_secret_probes => ("runc", PROBES, "ok");
    docker_runtime_runsc_network_and_secret_probes => ("runsc", PROBES, "ok");
    // Fork bomb. runc: the pids cgroup refuses the 64th task, the agent reports, the turn ends
    // with no edit. runsc: every sandboxed process costs host stub threads in the same cgroup
    // (256); the agent's next fork is refused and the turn ends with no edit — or, when the
    // refusal lands on the Sentry's own thread creation, the whole sandbox exits non-zero. Either
    // way no candidate and nothing left behind.
    docker_runtime_runc_fork_bomb => ("runc", "Update the dashboard.\nmode: fork-bomb", "REPOSITORY_PATCH_PROPOSAL_STATUS");
    docker_runtime_runsc_fork_bomb => ("runsc", "Update the dashboard.\nmode: fork-bomb", "REPOSITORY_PATCH_PROPOSAL_STATUS|REPOSITORY_DOCKER_WORKER_FAILED");
    // Thread bomb: the same pids cgroup counts threads. runsc (its own profile lets threads start
    // there): the Sentry's per-thread memory can reach the memory cgroup first, an OOM kill.
    docker_runtime_runc_thread_bomb => ("runc", "Update the dashboard.\nmode: thread-bomb", "REPOSITORY_PATCH_PROPOSAL_STATUS");
    docker_runtime_runsc_thread_bomb => ("runsc", "Update the dashboard.\nmode: thread-bomb", "REPOSITORY_PATCH_PROPOSAL_STATUS|REPOSITORY_DOCKER_WORKER_FAILED|REPOSITORY_DOCKER_OOM");
    // Memory balloon: the memory cgroup (768 MiB, no swap) kills. Under runsc the sandbox's
    // memory is charged to the same cgroup and the kernel's OOM killer ends the sandbox: the
    // daemon reports `OOMKilled` when it saw the event, otherwise only the SIGKILL exit (137).
    docker_runtime_runc_memory_balloon => ("runc", "Update the dashboard.\nmode: memory-bomb", "REPOSITORY_DOCKER_OOM");
    docker_runtime_runsc_memory_balloon => ("runsc", "Update the dashboard.\nmode: memory-bomb", "REPOSITORY_DOCKER_OOM|REPOSITORY_DOCKER_WORKER_FAILED");
    // tmpfs fill: the 64 MiB /workspace refuses the write; the stray file is outside the grants.
    docker_runtime_runc_tmpfs_fill => ("runc", "Update the dashboard.\nmode: fill-tmpfs", "REPOSITORY_PATCH_PROPOSAL_STATUS");
    docker_runtime_runsc_tmpfs_fill => ("runsc", "Update the dashboard.\nmode: fill-tmpfs", "REPOSITORY_PATCH_PROPOSAL_STATUS");
    // Agent channel flood: the runner's inbound budget ends the turn.
    docker_runtime_runc_channel_flood => ("runc", "Update the dashboard.\nmode: flood", "REPOSITORY_PATCH_PROPOSAL_STATUS");
    docker_runtime_runsc_channel_flood => ("runsc", "Update the dashboard.\nmode: flood", "REPOSITORY_PATCH_PROPOSAL_STATUS");
}

image_cases! {
    // stdout flood past the 40 MB cap, and a stderr flood past 1 MiB: cut while streaming.
    docker_runtime_runc_stdout_flood => ("runc", "oversized-output", 60, "REPOSITORY_DOCKER_OUTPUT_LIMIT");
    docker_runtime_runsc_stdout_flood => ("runsc", "oversized-output", 60, "REPOSITORY_DOCKER_OUTPUT_LIMIT");
    docker_runtime_runc_stderr_flood => ("runc", "flood-stderr", 60, "REPOSITORY_DOCKER_OUTPUT_LIMIT");
    docker_runtime_runsc_stderr_flood => ("runsc", "flood-stderr", 60, "REPOSITORY_DOCKER_OUTPUT_LIMIT");
    // Wall timeout: killed and removed at the deadline.
    docker_runtime_runc_wall_timeout => ("runc", "sleep-forever", 2, "REPOSITORY_DOCKER_TIMEOUT");
    docker_runtime_runsc_wall_timeout => ("runsc", "sleep-forever", 2, "REPOSITORY_DOCKER_TIMEOUT");
}

fn success_json(out: &std::process::Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `patch-candidate verify FILE --repo DIR` accepts the candidate of a `--json` document.
fn assert_verified(doc: &serde_json::Value, repo: &std::path::Path) {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), serde_json::to_vec(&doc["candidate"]).unwrap()).unwrap();
    let out = bin()
        .args(["--json", "verify"])
        .arg(file.path())
        .arg("--repo")
        .arg(repo)
        .output()
        .unwrap();
    success_json(&out);
}

/// `run --runtime runsc` produces a candidate that `verify --repo` accepts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_runtime_runsc_cli_run_produces_a_verified_candidate() {
    let Some(docker) = docker_for("runsc").await else {
        return;
    };
    let _guard = docker_lock().lock().await;
    let state = state_with_images();
    let task = "Update the dashboard.";
    let (repo, commit) = git_repo(&crate::proof::demo_files());
    let context = app_approval(repo.path(), &commit, task);
    let approval_dir = tempfile::tempdir().unwrap();
    let approval_path = write_approval(approval_dir.path(), &context);
    let out = bin()
        .args(["--json", "run", "--runtime", "runsc", "--repo"])
        .arg(repo.path())
        .args(["--commit", &commit, "--approval"])
        .arg(&approval_path)
        .args(["--task", task])
        .env("PATCH_CANDIDATE_STATE_DIR", state.path())
        .output()
        .unwrap();
    let doc = success_json(&out);
    assert!(doc["digest"].as_str().unwrap().starts_with("sha256:"));
    assert_eq!(doc["candidate"]["changed_files"][0]["path"], DASHBOARD);
    assert_verified(&doc, repo.path());
    assert_clean_and_tally(
        &docker,
        "docker_runtime_runsc_cli_run_produces_a_verified_candidate",
    )
    .await;
}

/// `demo --runtime runsc` (the turns and the gates under runsc) produces the demo's
/// three-operation candidate, `git apply --check` accepts it and `verify --repo` accepts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_runtime_runsc_cli_demo_produces_a_verified_candidate() {
    let Some(docker) = docker_for("runsc").await else {
        return;
    };
    let _guard = docker_lock().lock().await;
    let Some(state) = state_for_demo() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let demo_dir = dir.path().join("demo");
    let out = bin()
        .args(["--json", "demo", "--runtime", "runsc", "--dir"])
        .arg(&demo_dir)
        .env("PATCH_CANDIDATE_STATE_DIR", state.path())
        .output()
        .unwrap();
    let doc = success_json(&out);
    assert_eq!(doc["git_apply_check"], true);
    assert_eq!(doc["runtime"], "runsc");
    assert_eq!(doc["chain"]["end"], "green", "{doc}");
    assert_eq!(
        doc["candidate"]["changed_files"].as_array().unwrap().len(),
        3
    );
    assert_verified(&doc, &demo_dir.join("repo"));
    assert_clean_and_tally(
        &docker,
        "docker_runtime_runsc_cli_demo_produces_a_verified_candidate",
    )
    .await;
}

/// `doctor --json --require-runsc` reads the daemon (API, cgroups, seccomp, runtimes) and passes
/// the runsc smoke turn with the recorded proof image.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_runtime_doctor_reports_the_daemon_and_passes_the_runsc_smoke_turn() {
    let Some(docker) = docker_for("runsc").await else {
        return;
    };
    let _guard = docker_lock().lock().await;
    let state = state_with_images();
    let out = bin()
        .args(["--json", "doctor", "--require-runsc"])
        .env("PATCH_CANDIDATE_STATE_DIR", state.path())
        .output()
        .unwrap();
    let doc = success_json(&out);
    assert_eq!(doc["api_version"], docker.api_version());
    assert!(matches!(doc["cgroup_version"].as_str(), Some("1" | "2")));
    assert_eq!(doc["seccomp"], true);
    let names = field_strs(&doc["runtimes"], "name");
    assert!(
        names.contains(&"runc") && names.contains(&"runsc"),
        "{names:?}"
    );
    assert_eq!(doc["runsc"]["registration"]["ok"], true);
    assert_eq!(doc["runsc"]["pids_limit"], container::RUNSC_PIDS_LIMIT);
    assert_eq!(doc["runsc"]["smoke"]["ok"], true, "{doc}");
    assert!(
        doc["runsc"]["smoke"]["digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    // Without the smoke turn the requirement cannot be met: exit 1 with the doctor's code.
    let out = bin()
        .args(["--json", "doctor", "--no-smoke", "--require-runsc"])
        .env("PATCH_CANDIDATE_STATE_DIR", state.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(err["error"]["code"], "PATCH_CANDIDATE_DOCTOR_RUNSC");
    assert_clean_and_tally(
        &docker,
        "docker_runtime_doctor_reports_the_daemon_and_passes_the_runsc_smoke_turn",
    )
    .await;
}
