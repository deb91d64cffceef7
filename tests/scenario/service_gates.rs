//! `patch-candidate serve --gates FILE`: a job's required gates run after its turn in the same
//! attempt, and the result is the candidate plus its evidence, written once. A failing gate is
//! recorded (the job completes with `failed` evidence); a gate whose image this host lacks
//! snoozes the job before its turn; a cancel reaches a running gate; a SIGKILL during the gate
//! leaves exactly one result with its evidence after the restart. `jobs submit` refuses a
//! required gate the definitions do not know.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::*;

/// The locally built Python gate image (`image build --gate python`).
const GATE_BASE_IMAGE: &str = "patch-candidate-gate-python:local";

/// A private copy of the gate image (its own label, so its own ID and tag); removed on drop.
pub(crate) struct GateImage {
    tag: String,
    pub(crate) id: String,
}

impl GateImage {
    pub(crate) fn build(name: &str) -> Self {
        // Never pulled: the base image is built here (`images/build.sh --gate python`).
        let present = std::process::Command::new("docker")
            .args(["image", "inspect", GATE_BASE_IMAGE])
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(
            present,
            "{GATE_BASE_IMAGE} missing: run images/build.sh --gate python"
        );
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let tag = format!(
            "patch-candidate-gate-svc-{name}:t{}-{nanos}",
            crate::support::process_tag()
        );
        let ctx = tempfile::tempdir().unwrap();
        std::fs::write(
            ctx.path().join("Dockerfile"),
            format!("FROM {GATE_BASE_IMAGE}\nLABEL patch-candidate.test.variant=\"{tag}\"\n"),
        )
        .unwrap();
        docker_cli(
            &["build", "-q", "-t", &tag, ctx.path().to_str().unwrap()],
            None,
        );
        let id = docker_cli(&["image", "inspect", "--format", "{{.Id}}", &tag], None);
        Self { tag, id }
    }
}

impl Drop for GateImage {
    fn drop(&mut self) {
        let _ = std::process::Command::new("docker")
            .args(["rmi", "-f", &self.tag])
            .output();
    }
}

/// A definitions file with one gate `check` running `argv` in `image`.
pub(crate) fn definitions(dir: &Path, image: &str, argv: &[&str]) -> PathBuf {
    let argv = serde_json::to_string(argv).unwrap();
    let text = format!(
        r#"version = 1

[gates.check]
image = "{image}"
argv = {argv}
cwd = "."
wall_seconds = 120
kill_grace_ms = 1000
memory_mib = 256
pids = 64
cpu_millis = 1000
workspace_mib = 64
tmp_mib = 64
log_tail_bytes = 4096
pinned = []

[gates.check.env]
HOME = "/tmp/home"
PATH = "/usr/local/bin:/usr/bin:/bin"
"#
    );
    let path = dir.join("gates.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `jobs submit --gates DEFS --max-follow-ups MAX` of `approval` on the fixture's repository,
/// which must succeed; the job's id.
fn submit_chain(
    state: &Path,
    database: Option<&str>,
    f: &Fixture,
    approval: &Path,
    defs: &Path,
    max: u32,
) -> String {
    let max = max.to_string();
    let out = submit_raw(
        state,
        database,
        f.repo.path().to_str().unwrap(),
        approval,
        &["--gates", defs.to_str().unwrap(), "--max-follow-ups", &max],
    );
    assert_ok(&out);
    job_id(&json_of(&out))
}

/// The fixture's approval of `task`, requiring `gates`.
fn gated_approval(f: &Fixture, task: &str, gates: &[&str]) -> PathBuf {
    let path = f.approval(task);
    let mut doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    doc["required_validation_gates"] = serde_json::json!(gates);
    std::fs::write(&path, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    path
}

fn submit_gated(state: &Path, f: &Fixture, task: &str, gates_file: &Path) -> String {
    submit_gated_to(state, None, f, task, gates_file)
}

fn submit_gated_to(
    state: &Path,
    database: Option<&str>,
    f: &Fixture,
    task: &str,
    gates_file: &Path,
) -> String {
    let approval = gated_approval(f, task, &["check"]);
    let out = submit_raw(
        state,
        database,
        f.repo.path().to_str().unwrap(),
        &approval,
        &["--gates", gates_file.to_str().unwrap()],
    );
    assert_ok(&out);
    json_of(&out)["job"]["id"].as_str().unwrap().to_owned()
}

fn serve_with(gates_file: &Path) -> ServeOpts<'_> {
    ServeOpts {
        extra: vec!["--gates", gates_file.to_str().unwrap()],
        ..ServeOpts::default()
    }
}

/// Waits until job `id` has a running container of image `image` (found by the job's label).
fn running_gate_of(id: &str, image: &str, limit: Duration) -> String {
    let label = format!("label={}={id}", container::JOB_LABEL_KEY);
    let ancestor = format!("ancestor={image}");
    wait_running_container(&[&label, &ancestor], limit)
        .unwrap_or_else(|| panic!("job {id} has no running gate container after {limit:?}"))
}

async fn stored_evidence(state: &Path, id: &str) -> Vec<jobs::EvidenceDocument> {
    stored_evidence_in(state, None, id).await
}

async fn stored_evidence_in(
    state: &Path,
    database: Option<&str>,
    id: &str,
) -> Vec<jobs::EvidenceDocument> {
    let store = open_store(state, database).await;
    store
        .evidence(&vocab::JobId::parse(id).unwrap())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_service_gate_fails_and_unknown_gates_are_refused() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    gate_fails(&docker, None).await;
    tally("docker_service_gate_fails_and_unknown_gates_are_refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_service_gate_fails_on_postgres() {
    let Some(docker) = docker().await else { return };
    let Some(url) = postgres_url_or_skip().await else {
        return;
    };
    let _guard = docker_lock().lock().await;
    gate_fails(&docker, Some(&url)).await;
    tally("docker_service_gate_fails_on_postgres");
}

async fn gate_fails(docker: &container::BollardRuntime, database: Option<&str>) {
    let image = GateImage::build("fail");
    let state = state_with_images();
    let f = Fixture::new();
    let defs = definitions(
        state.path(),
        &image.id,
        &["python3", "-c", "raise SystemExit(3)"],
    );

    // `jobs submit` refuses a gate the definitions do not know, and a gated job without them.
    let unknown = gated_approval(&f, "Update the dashboard (unknown gate).", &["nope"]);
    let repo = f.repo.path().to_str().unwrap();
    let out = submit_raw(
        state.path(),
        database,
        repo,
        &unknown,
        &["--gates", defs.to_str().unwrap()],
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("PATCH_CANDIDATE_GATE_UNKNOWN")
            || String::from_utf8_lossy(&out.stdout).contains("PATCH_CANDIDATE_GATE_UNKNOWN"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let gated = gated_approval(&f, "Update the dashboard (no definitions).", &["check"]);
    let out = submit_raw(state.path(), database, repo, &gated, &[]);
    assert!(!out.status.success());

    let service = Service::start(
        state.path(),
        &ServeOpts {
            database,
            ..serve_with(&defs)
        },
    );
    let id = submit_gated_to(
        state.path(),
        database,
        &f,
        "Update the dashboard.\nmode: edit\n",
        &defs,
    );
    let done = wait_finished(state.path(), database, &id, Duration::from_secs(180));
    // The gate's verdict is evidence, not a failure of the job: the candidate and its evidence.
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["attempts"], 1, "{done}");
    let evidence = stored_evidence_in(state.path(), database, &id).await;
    assert_eq!(evidence.len(), 1, "{evidence:?}");
    assert_eq!(evidence[0].gate(), "check");
    assert_eq!(evidence[0].outcome(), vocab::GateVerdict::Failed);
    let doc: serde_json::Value = serde_json::from_slice(evidence[0].bytes()).unwrap();
    assert_eq!(doc["candidate_digest"], done["candidate_digest"], "{doc}");
    assert_eq!(doc["outcome"], "failed", "{doc}");
    // `jobs show` and the API's job view list it; /metrics counts it by outcome.
    let shown = show(state.path(), database, &id);
    assert_eq!(shown["gates"][0]["gate"], "check", "{shown}");
    assert_eq!(shown["gates"][0]["outcome"], "failed", "{shown}");
    assert_eq!(shown["gates"][0]["evidence_digest"], evidence[0].digest());
    let token = service.token();
    let view = get_json_ok(service.addr, &format!("/v1/jobs/{id}"), &token);
    assert_eq!(view["job"]["gates"][0]["outcome"], "failed", "{view}");
    let metrics = metrics_text(service.addr, &token);
    assert!(
        metrics.contains("patch_candidate_gate_seconds_count{outcome=\"failed\"} 1"),
        "{metrics}"
    );
    assert_eq!(service.stop().code(), Some(0));
    assert_no_turn_containers(docker).await;
    assert!(staging_left(state.path()).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_service_snoozes_a_job_whose_gate_image_is_missing() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let state = state_with_images();
    let f = Fixture::new();
    let absent = format!("sha256:{}", "0".repeat(64));
    let defs = definitions(state.path(), &absent, &["python3", "-c", "pass"]);
    let service = Service::start(state.path(), &serve_with(&defs));
    let id = submit_gated(
        state.path(),
        &f,
        "Update the dashboard.\nmode: edit\n",
        &defs,
    );
    let started = Instant::now();
    loop {
        let codes = event_codes(state.path(), None, &id);
        let snoozes = codes
            .iter()
            .filter(|c| *c == "REPOSITORY_DOCKER_IMAGE_MISSING")
            .count();
        if snoozes >= 2 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no snooze: {codes:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let waiting = show(state.path(), None, &id);
    assert_ne!(waiting["state"], "failed", "{waiting}");
    assert_ne!(waiting["state"], "completed", "{waiting}");
    assert_eq!(
        waiting["attempts"], 0,
        "a snooze spends no attempt: {waiting}"
    );
    // Snoozed before the turn: no turn ran, no usage row.
    let store = open_store(state.path(), None).await;
    let job_id = vocab::JobId::parse(&id).unwrap();
    assert!(store.usage(&job_id).await.unwrap().is_empty());
    assert_eq!(service.stop().code(), Some(0));
    assert_clean_and_tally(
        &docker,
        "docker_service_snoozes_a_job_whose_gate_image_is_missing",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_service_cancel_reaches_a_running_gate() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let image = GateImage::build("cancel");
    let state = state_with_images();
    let f = Fixture::new();
    let defs = definitions(
        state.path(),
        &image.id,
        &["python3", "-c", "import time; time.sleep(100)"],
    );
    let service = Service::start(state.path(), &serve_with(&defs));
    let id = submit_gated(
        state.path(),
        &f,
        "Update the dashboard.\nmode: edit\n",
        &defs,
    );
    let gate = running_gate_of(&id, &image.id, Duration::from_secs(120));
    let out = jobs(state.path(), None, &["cancel", &id]);
    assert!(out.status.success());
    let job = wait_state(
        state.path(),
        None,
        &id,
        &["cancelled", "completed", "failed"],
        Duration::from_secs(20),
    );
    assert_eq!(job["state"], "cancelled", "{job}");
    // The gate container is gone within a heartbeat or two, not after its 100 s.
    let started = Instant::now();
    loop {
        let left = docker_cli(
            &["ps", "-aq", "--no-trunc", "--filter", &format!("id={gate}")],
            None,
        );
        if left.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "the cancelled gate's container remains"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(stored_evidence(state.path(), &id).await.is_empty());
    assert_eq!(service.stop().code(), Some(0));
    assert_no_turn_containers(&docker).await;
    assert!(staging_left(state.path()).is_empty());
    tally("docker_service_cancel_reaches_a_running_gate");
}

/// SIGKILL the service while the gate runs, restart it: exactly one result, with its evidence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_service_sigkill_during_the_gate_records_one_result_with_evidence() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let image = GateImage::build("crash");
    let state = state_with_images();
    let f = Fixture::new();
    let defs = definitions(
        state.path(),
        &image.id,
        &["python3", "-c", "import time; time.sleep(3)"],
    );
    let opts = ServeOpts {
        lease: "2s",
        heartbeat: "300ms",
        ..serve_with(&defs)
    };
    let crashing = Service::start(state.path(), &opts);
    let id = submit_gated(
        state.path(),
        &f,
        "Update the dashboard.\nmode: edit\n",
        &defs,
    );
    let _gate = running_gate_of(&id, &image.id, Duration::from_secs(120));
    crashing.kill();
    assert_eq!(show(state.path(), None, &id)["state"], "running");

    let restarted = Service::start(state.path(), &opts);
    let job = wait_finished(state.path(), None, &id, Duration::from_secs(180));
    assert_eq!(job["state"], "completed", "{job}");
    assert_eq!(job["attempts"], 2, "the killed attempt is spent: {job}");
    let evidence = stored_evidence(state.path(), &id).await;
    assert_eq!(evidence.len(), 1, "{evidence:?}");
    assert_eq!(evidence[0].outcome(), vocab::GateVerdict::Passed);
    let doc: serde_json::Value = serde_json::from_slice(evidence[0].bytes()).unwrap();
    assert_eq!(doc["candidate_digest"], job["candidate_digest"], "{doc}");
    let codes = event_codes(state.path(), None, &id);
    let completed = codes
        .iter()
        .filter(|c| *c == "PATCH_CANDIDATE_JOB_COMPLETED")
        .count();
    assert_eq!(completed, 1, "{codes:?}");
    // The janitor removes the killed attempt's gate container.
    wait_own_turns_gone(
        &docker,
        Duration::from_secs(30),
        Duration::from_millis(200),
        "containers left",
    )
    .await;
    assert_eq!(restarted.stop().code(), Some(0));
    assert!(staging_left(state.path()).is_empty());
    assert_clean_and_tally(
        &docker,
        "docker_service_sigkill_during_the_gate_records_one_result_with_evidence",
    )
    .await;
}

/// The gate of the chain test: the dashboard's last agent edit must answer a review that
/// continued the earlier attempt. The baseline passes (no edit), a first attempt fails, a
/// follow-up that started from that attempt's tree with its verdict in the prompt passes.
const ANSWERS_THE_REVIEW: &str = "import sys\n\
edits = [l for l in open('app/ui/pages/Dashboard.jsx').read().splitlines() if 'fake-agent: edited' in l]\n\
sys.exit(0 if not edits or 'after review (continued; gates: check: failed' in edits[-1] else 1)\n";

/// The job whose follow-up `follow_up` is (by its stored spec), if any.
async fn follow_up_of(store: &jobs::JobStore, parent: &str) -> Option<jobs::Job> {
    for job in store.list(None, 100).await.unwrap() {
        let full = store.get(&job.id).await.unwrap().unwrap();
        if full
            .spec
            .follow_up
            .as_ref()
            .is_some_and(|f| f.supersedes_job.as_str() == parent)
        {
            return Some(full);
        }
    }
    None
}

/// Waits for job `parent`'s automatic follow-up to exist and finish; returns it.
async fn wait_follow_up(state: &Path, store: &jobs::JobStore, parent: &str) -> jobs::Job {
    wait_follow_up_in(state, None, store, parent).await
}

/// [`wait_follow_up`] against the job store `database` (`None`: the state directory's SQLite).
async fn wait_follow_up_in(
    state: &Path,
    database: Option<&str>,
    store: &jobs::JobStore,
    parent: &str,
) -> jobs::Job {
    let started = Instant::now();
    let child = loop {
        if let Some(child) = follow_up_of(store, parent).await {
            break child;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "job {parent} queued no follow-up"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let done = wait_finished(state, database, child.id.as_str(), Duration::from_secs(180));
    assert_eq!(done["state"], "completed", "{done}");
    store.get(&child.id).await.unwrap().unwrap()
}

/// `jobs ARGS…` in text form.
fn jobs_text(state: &Path, args: &[&str]) -> String {
    let out = bin()
        .arg("jobs")
        .args(args)
        .env("PATCH_CANDIDATE_STATE_DIR", state)
        .output()
        .unwrap();
    assert_ok(&out);
    String::from_utf8(out.stdout).unwrap()
}

fn log_lines(state: &Path, id: &str) -> Vec<(String, String)> {
    log_lines_in(state, None, id)
}

/// Job `id`'s events as (code, message), from the job store `database` (`None`: SQLite).
fn log_lines_in(state: &Path, database: Option<&str>, id: &str) -> Vec<(String, String)> {
    let logs = json_of(&jobs(state, database, &["logs", id]));
    field_pairs(&logs["events"], "code", "message")
}

fn dashboard_of(candidate: &[u8]) -> String {
    let doc: serde_json::Value = serde_json::from_slice(candidate).unwrap();
    let files = doc["changed_files"].as_array().unwrap();
    assert_eq!(files.len(), 1, "{doc}");
    assert_eq!(files[0]["path"], crate::proof::DASHBOARD);
    files[0]["content"].as_str().unwrap().to_owned()
}

/// `serve --gates --max-follow-ups`: a job whose required gate fails with a new failure queues
/// its follow-up in the same write as its result; the follow-up continues the judged candidate
/// with the verdict in its prompt and the chain ends green. `jobs submit --max-follow-ups 1` of a
/// job that never goes green stops at the cap. Every job ends with its own candidate and
/// evidence, and nothing more is queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_service_follow_ups_continue_until_the_gate_is_green() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let image = GateImage::build("chain");
    let state = state_with_images();
    let f = Fixture::new();
    let defs = definitions(
        state.path(),
        &image.id,
        &["python3", "-c", ANSWERS_THE_REVIEW],
    );
    let service = Service::start(
        state.path(),
        &ServeOpts {
            extra: vec!["--gates", defs.to_str().unwrap(), "--max-follow-ups", "2"],
            ..ServeOpts::default()
        },
    );
    let store = open_store(state.path(), None).await;

    // Over HTTP: the host's bounds are stored with the job.
    let approval =
        std::fs::read_to_string(gated_approval(&f, "Tidy the dashboard.", &["check"])).unwrap();
    let body = serde_json::to_vec(&serde_json::json!({
        "repository": f.repo.path().to_str().unwrap(),
        "approval": approval,
    }))
    .unwrap();
    let token = service.token();
    let r = http(service.addr, "POST", "/v1/jobs", Some(&token), Some(&body));
    assert_eq!(r.0, 201, "{}", String::from_utf8_lossy(&r.1));
    let first = job_id(&serde_json::from_slice(&r.1).unwrap());
    let done = wait_finished(state.path(), None, &first, Duration::from_secs(180));
    assert_eq!(done["state"], "completed", "{done}");
    let first_id = vocab::JobId::parse(&first).unwrap();
    let stored = store.get(&first_id).await.unwrap().unwrap();
    assert_eq!(
        stored.spec.follow_ups,
        Some(jobs::FollowUpPolicy {
            max_follow_ups: 2,
            token_budget: None
        })
    );
    let evidence = stored_evidence(state.path(), &first).await;
    assert_eq!(evidence[0].outcome(), vocab::GateVerdict::Failed);

    let second = wait_follow_up(state.path(), &store, &first).await;
    let chain = second.spec.follow_up.as_ref().unwrap();
    assert_eq!(chain.round, 1);
    assert_eq!(chain.chain_tokens, 0, "the proof agent spends no tokens");
    assert_eq!(
        Some(chain.supersedes_candidate.as_str()),
        done["candidate_digest"].as_str()
    );
    assert_eq!(chain.gates.len(), 1);
    assert_eq!(chain.gates[0].verdict, vocab::GateVerdict::Failed);
    assert_eq!(second.spec.follow_ups, stored.spec.follow_ups);
    // The job view, `jobs show` and the API show its place in the chain.
    let shown = show(state.path(), None, second.id.as_str());
    assert_eq!(shown["chain"]["round"], 1, "{shown}");
    assert_eq!(shown["chain"]["continues_job"], first.as_str(), "{shown}");
    assert_eq!(shown["chain"]["max_follow_ups"], 2, "{shown}");
    let view = get_json_ok(service.addr, &format!("/v1/jobs/{}", second.id), &token);
    assert_eq!(view["job"]["chain"], shown["chain"], "{view}");
    let text = jobs_text(state.path(), &["show", second.id.as_str()]);
    assert!(
        text.contains("chain: automatic follow-up 1 of at most 2 (0 tokens spent before it"),
        "{text}"
    );
    let evidence = stored_evidence(state.path(), second.id.as_str()).await;
    assert_eq!(evidence[0].outcome(), vocab::GateVerdict::Passed);
    // The follow-up started from the judged tree: both edits, the second one answering.
    let bytes = store.candidate(&second.id).await.unwrap().unwrap();
    let dashboard = dashboard_of(&bytes);
    let edits: Vec<&str> = dashboard
        .lines()
        .filter(|l| l.contains("fake-agent: edited"))
        .collect();
    assert_eq!(edits.len(), 2, "{dashboard}");
    assert!(
        edits[1].contains("after review (continued; gates: check: failed"),
        "{}",
        edits[1]
    );
    let codes = log_lines(state.path(), &first);
    assert!(
        codes.contains(&(
            "PATCH_CANDIDATE_CHAIN_FOLLOW_UP".to_owned(),
            "follow-up 1 of 2 queued".to_owned()
        )),
        "{codes:?}"
    );
    let codes = log_lines(state.path(), second.id.as_str());
    assert!(
        codes.contains(&("PATCH_CANDIDATE_CHAIN_END".to_owned(), "green".to_owned())),
        "{codes:?}"
    );
    assert!(follow_up_of(&store, second.id.as_str()).await.is_none());

    // `jobs submit --max-follow-ups 1`, an agent that never answers the review: one follow-up,
    // then the cap.
    let never = gated_approval(&f, "Tidy the dashboard.\nmode: edit\n", &["check"]);
    let third = submit_chain(state.path(), None, &f, &never, &defs, 1);
    let done = wait_finished(state.path(), None, &third, Duration::from_secs(180));
    assert_eq!(done["state"], "completed", "{done}");
    let fourth = wait_follow_up(state.path(), &store, &third).await;
    assert_eq!(fourth.spec.follow_up.as_ref().unwrap().round, 1);
    let evidence = stored_evidence(state.path(), fourth.id.as_str()).await;
    assert_eq!(evidence[0].outcome(), vocab::GateVerdict::Failed);
    let codes = log_lines(state.path(), fourth.id.as_str());
    assert!(
        codes.contains(&(
            "PATCH_CANDIDATE_CHAIN_END".to_owned(),
            "follow_up_cap".to_owned()
        )),
        "{codes:?}"
    );
    // Four jobs in all, every one completed: no chain queued more than its bounds.
    let all = store.list(None, 100).await.unwrap();
    assert_eq!(all.len(), 4, "{all:?}");
    assert!(all.iter().all(|j| j.state == jobs::JobState::Completed));
    assert_eq!(service.stop().code(), Some(0));
    assert_no_turn_containers(&docker).await;
    assert!(staging_left(state.path()).is_empty());
    tally("docker_service_follow_ups_continue_until_the_gate_is_green");
}

/// The crash points of [`crash_before_the_follow_up_write`]: before the gates, and right
/// before the write of the completion and its follow-up.
const FOLLOW_UP_CRASH_POINTS: [&str; 2] = [turn::fault::BEFORE_GATES, turn::fault::BEFORE_COMPLETE];

/// SIGKILL the service between a red gate and the write that queues the follow-up (before the
/// gates, and right before the completion write), restart it: the job completes once and its
/// chain has exactly one follow-up, which ends green.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_service_crash_before_the_follow_up_write_queues_exactly_one() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let image = GateImage::build("chain-crash");
    for point in FOLLOW_UP_CRASH_POINTS {
        crash_before_the_follow_up_write(&docker, &image, point, None).await;
    }
    assert_no_turn_containers(&docker).await;
    tally("docker_service_crash_before_the_follow_up_write_queues_exactly_one");
}

/// [`docker_service_crash_before_the_follow_up_write_queues_exactly_one`] with the job store on
/// PostgreSQL (a fresh database for each crash point): the completion and its follow-up are one
/// transaction there too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_service_crash_before_the_follow_up_write_queues_exactly_one_on_postgres() {
    let Some(docker) = docker().await else { return };
    let mut urls = Vec::new();
    for _ in FOLLOW_UP_CRASH_POINTS {
        let Some(url) = postgres_url_or_skip().await else {
            return;
        };
        urls.push(url);
    }
    let _guard = docker_lock().lock().await;
    let image = GateImage::build("chain-crash-pg");
    for (point, url) in FOLLOW_UP_CRASH_POINTS.into_iter().zip(&urls) {
        crash_before_the_follow_up_write(&docker, &image, point, Some(url)).await;
    }
    assert_no_turn_containers(&docker).await;
    tally("docker_service_crash_before_the_follow_up_write_queues_exactly_one_on_postgres");
}

/// One crash point of the follow-up crash test with the gate image `image`, against the job
/// store `database` (`None`: the state directory's SQLite file; a PostgreSQL database must be
/// empty).
async fn crash_before_the_follow_up_write(
    docker: &container::BollardRuntime,
    image: &GateImage,
    point: &str,
    database: Option<&str>,
) {
    let state = state_with_images();
    let f = Fixture::new();
    let defs = definitions(
        state.path(),
        &image.id,
        &["python3", "-c", ANSWERS_THE_REVIEW],
    );
    let fault = format!("{point}:pause");
    let extra = vec!["--gates", defs.to_str().unwrap()];
    let crashing = Service::start(
        state.path(),
        &ServeOpts {
            database,
            lease: "2s",
            heartbeat: "300ms",
            fault: Some(&fault),
            extra: extra.clone(),
            ..ServeOpts::default()
        },
    );
    let approval = gated_approval(&f, "Tidy the dashboard.", &["check"]);
    let first = submit_chain(state.path(), database, &f, &approval, &defs, 2);
    crashing.wait_logged("PATCH_CANDIDATE_FAULT", Duration::from_secs(60));
    crashing.kill();
    let store = open_store(state.path(), database).await;
    assert_eq!(store.list(None, 100).await.unwrap().len(), 1, "{point}");

    let restarted = Service::start(
        state.path(),
        &ServeOpts {
            database,
            lease: "2s",
            heartbeat: "300ms",
            extra,
            ..ServeOpts::default()
        },
    );
    let done = wait_finished(state.path(), database, &first, Duration::from_secs(120));
    assert_eq!(done["state"], "completed", "{point}: {done}");
    assert_eq!(done["attempts"], 2, "{point}: {done}");
    let second = wait_follow_up_in(state.path(), database, &store, &first).await;
    let evidence = stored_evidence_in(state.path(), database, second.id.as_str()).await;
    assert_eq!(evidence[0].outcome(), vocab::GateVerdict::Passed, "{point}");
    let all = store.list(None, 100).await.unwrap();
    assert_eq!(all.len(), 2, "{point}: exactly one follow-up: {all:?}");
    let queued = event_codes(state.path(), database, &first)
        .iter()
        .filter(|c| *c == "PATCH_CANDIDATE_CHAIN_FOLLOW_UP")
        .count();
    assert_eq!(queued, 1, "{point}");
    let codes = log_lines_in(state.path(), database, second.id.as_str());
    assert!(
        codes.contains(&("PATCH_CANDIDATE_CHAIN_END".to_owned(), "green".to_owned())),
        "{point}: {codes:?}"
    );
    wait_own_turns_gone(
        docker,
        Duration::from_secs(30),
        Duration::from_millis(200),
        &format!("{point}: containers left"),
    )
    .await;
    assert_eq!(restarted.stop().code(), Some(0));
    assert!(staging_left(state.path()).is_empty(), "{point}");
}

/// The operator's repository policy for the fixture's repository: approvals may grant at most
/// `ceiling`, every job must pass gate `check`, the operator may spend `operator_quota` tokens a
/// day, and branches go under `agent/`.
fn write_policy(path: &Path, repo: &str, ceiling: &str, operator_quota: u64) {
    let text = format!(
        r#"version = 1

[quotas]
principals = {{ operator = {operator_quota} }}

[[repository]]
match = "{repo}"
allowed_paths = [{ceiling}]
required_gates = ["check"]

[repository.publication]
branch_prefix = "agent/"
"#
    );
    std::fs::write(path, text).unwrap();
}

/// `POST /v1/jobs` of the fixture's approval of `task` (which names no gate); status and answer.
fn post_job(service: &Service, f: &Fixture, task: &str) -> (u16, serde_json::Value) {
    let approval = std::fs::read_to_string(f.approval(task)).unwrap();
    let body = serde_json::json!({
        "repository": f.repo.path().to_str().unwrap(),
        "approval": approval,
    });
    http_json(
        service.addr,
        "POST",
        "/v1/jobs",
        Some(&service.token()),
        Some(&body),
    )
}

/// SIGHUP, then waits for the `n`th reload line.
fn reload(service: &Service, n: usize) {
    service.signal("-HUP");
    let started = Instant::now();
    loop {
        let reloads = service
            .lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains("PATCH_CANDIDATE_SERVICE_POLICY_RELOAD"))
            .count();
        if reloads >= n {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "no reload {n}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_service_repository_policy_bounds_submissions_gates_and_quotas() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    repository_policy(&docker, None).await;
    tally("docker_service_repository_policy_bounds_submissions_gates_and_quotas");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_service_repository_policy_on_postgres() {
    let Some(docker) = docker().await else { return };
    let Some(url) = postgres_url_or_skip().await else {
        return;
    };
    let _guard = docker_lock().lock().await;
    repository_policy(&docker, Some(&url)).await;
    tally("docker_service_repository_policy_on_postgres");
}

/// Admission at submit (a ceiling refuses before anything is queued), the policy's gate run and
/// recorded for a job whose approval names none, a SIGHUP reload (audited), a daily quota
/// refusing a submission (429) and holding a queued job at claim until a reload raises it, and a
/// queued job the policy in force no longer admits failing at claim.
async fn repository_policy(docker: &container::BollardRuntime, database: Option<&str>) {
    let image = GateImage::build("policy");
    let state = state_with_images();
    let st = state.path();
    let f = Fixture::new();
    let repo = f.repo.path().to_str().unwrap().to_owned();
    let defs = definitions(st, &image.id, &["python3", "-c", "pass"]);
    let policy = st.join("repository-policy.toml");
    write_policy(&policy, &repo, r#""docs""#, 100);
    let service = Service::start(
        st,
        &ServeOpts {
            database,
            extra: vec![
                "--gates",
                defs.to_str().unwrap(),
                "--repository-policy",
                policy.to_str().unwrap(),
            ],
            ..ServeOpts::default()
        },
    );
    let store = open_store(st, database).await;

    // The fixture's approval grants app/ and tests/: outside the ceiling, refused before queueing.
    let (status, body) = post_job(&service, &f, "Update the dashboard.\nmode: edit\n");
    assert_eq!(status, 403, "{body}");
    assert_eq!(
        body["error"]["message"],
        "PATCH_CANDIDATE_SERVICE_POLICY: the repository policy does not allow this allowed_paths"
    );
    assert!(store.list(None, 10).await.unwrap().is_empty());

    // Reloaded with a ceiling that holds the grant: admitted, with the policy's gate.
    write_policy(&policy, &repo, r#""app", "tests""#, 100);
    reload(&service, 1);
    let (status, body) = post_job(&service, &f, "Update the dashboard.\nmode: edit\n");
    assert_eq!(status, 201, "{body}");
    let admitted = &body["job"]["spec"]["admitted_under"];
    assert_eq!(
        admitted["required_gates"],
        serde_json::json!(["check"]),
        "{body}"
    );
    let digest = admitted["digest"].as_str().unwrap().to_owned();
    let first = job_id(&body);
    let done = wait_finished(st, database, &first, Duration::from_secs(180));
    assert_eq!(done["state"], "completed", "{done}");
    let evidence = stored_evidence_in(st, database, &first).await;
    assert_eq!(evidence.len(), 1, "{evidence:?}");
    assert_eq!(evidence[0].gate(), "check");
    assert_eq!(evidence[0].outcome(), vocab::GateVerdict::Passed);
    let review = get_json_ok(
        service.addr,
        &format!("/v1/jobs/{first}/review"),
        &service.token(),
    );
    let text = review.to_string();
    assert!(
        text.contains(r#""gate":"check""#) && text.contains(r#""required":true"#),
        "{review}"
    );

    // The operator's spend today reaches its quota (a usage row of 150 trusted tokens).
    let mut spent = jobs::JobSpec::noop("policy-spend", 1);
    spent.repository.clone_from(&repo);
    spent.submitted_by = Some(jobs::OPERATOR_PRINCIPAL.to_owned());
    let (planted, _) = store.submit(spent).await.unwrap();
    store.cancel(&planted.id).await.unwrap();
    let usage = serde_json::json!({
        "outcome": "completed",
        "live": {"requests": 2, "input_tokens": 100, "output_tokens": 50, "total_tokens": 150},
    });
    let attempt = jobs::random_attempt_id().unwrap();
    store
        .record_usage(&planted.id, &attempt, &usage)
        .await
        .unwrap();
    let (status, body) = post_job(&service, &f, "Update the dashboard again.\nmode: edit\n");
    assert_eq!(status, 429, "{body}");
    assert_eq!(
        body["error"]["code"], "PATCH_CANDIDATE_SERVICE_QUOTA",
        "{body}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("principal")
    );
    if let Some(shared) = database {
        // A second host on the same database reads the same ledger: the same refusal, the same
        // usage report.
        let state_b = state_with_images();
        let host_b = Service::start(
            state_b.path(),
            &ServeOpts {
                database: Some(shared),
                host_id: Some("policy-host-b"),
                extra: vec![
                    "--gates",
                    defs.to_str().unwrap(),
                    "--repository-policy",
                    policy.to_str().unwrap(),
                ],
                ..ServeOpts::default()
            },
        );
        let (status, body) = post_job(&host_b, &f, "Update the dashboard on b.\nmode: edit\n");
        assert_eq!(status, 429, "{body}");
        assert_eq!(body["error"]["code"], "PATCH_CANDIDATE_SERVICE_QUOTA");
        let usage_a = get_json_ok(service.addr, "/v1/usage", &service.token());
        let usage_b = get_json_ok(host_b.addr, "/v1/usage", &host_b.token());
        assert_eq!(usage_a, usage_b);
        assert_eq!(usage_b["totals"]["total_tokens"], 150, "{usage_b}");
        assert_eq!(host_b.stop().code(), Some(0));
    }

    // The operator's own command queues without the quota check (admitted under the policy
    // file); the claim holds the job (snoozed, no attempt spent) until a reload raises the quota.
    let admit = [
        "--gates",
        defs.to_str().unwrap(),
        "--repository-policy",
        policy.to_str().unwrap(),
    ];
    let approval = f.approval("Update the dashboard, held.\nmode: edit\n");
    let out = submit_raw(st, database, &repo, &approval, &admit);
    assert_ok(&out);
    let held = job_id(&json_of(&out));
    let started = Instant::now();
    while !event_codes(st, database, &held)
        .iter()
        .any(|c| c == "PATCH_CANDIDATE_SERVICE_QUOTA")
    {
        assert!(started.elapsed() < Duration::from_secs(60), "no quota wait");
        std::thread::sleep(Duration::from_millis(100));
    }
    let waiting = show(st, database, &held);
    assert_eq!(waiting["state"], "queued", "{waiting}");
    assert_eq!(waiting["attempts"], 0, "{waiting}");
    let metrics = metrics_text(service.addr, &service.token());
    assert!(
        metrics
            .contains("patch_candidate_quota_refusals_total{scope=\"principal\",at=\"submit\"} 1"),
        "{metrics}"
    );
    assert!(
        !metrics
            .contains("patch_candidate_quota_refusals_total{scope=\"principal\",at=\"claim\"} 0"),
        "{metrics}"
    );
    write_policy(&policy, &repo, r#""app", "tests""#, 1_000_000);
    reload(&service, 2);
    let done = wait_finished(st, database, &held, Duration::from_secs(180));
    assert_eq!(done["state"], "completed", "{done}");
    let evidence = stored_evidence_in(st, database, &held).await;
    assert_eq!(evidence.len(), 1, "the policy's gate ran: {evidence:?}");

    // A job queued without an admission, under a policy that requires a gate: refused at claim
    // (`required_gates`), as is one admitted under a policy the one in force no longer matches.
    let bare = submit_id(
        st,
        database,
        &f,
        "Update the dashboard, bare.\nmode: edit\n",
    );
    let failed = wait_finished(st, database, &bare, Duration::from_secs(120));
    assert_eq!(failed["state"], "failed", "{failed}");
    assert_eq!(
        failed["last_error"]["code"],
        "PATCH_CANDIDATE_SERVICE_POLICY"
    );
    assert!(
        failed["last_error"]["message"]
            .as_str()
            .unwrap()
            .ends_with("required_gates"),
        "{failed}"
    );
    write_policy(&policy, &repo, r#""docs""#, 1_000_000);
    reload(&service, 3);
    let permissive = st.join("permissive-policy.toml");
    write_policy(&permissive, &repo, r#""app", "tests""#, 1_000_000);
    let admit = [
        "--gates",
        defs.to_str().unwrap(),
        "--repository-policy",
        permissive.to_str().unwrap(),
    ];
    let approval = f.approval("Update the dashboard, refused.\nmode: edit\n");
    let out = submit_raw(st, database, &repo, &approval, &admit);
    assert_ok(&out);
    let refused = job_id(&json_of(&out));
    let failed = wait_finished(st, database, &refused, Duration::from_secs(120));
    assert_eq!(failed["state"], "failed", "{failed}");
    assert_eq!(
        failed["last_error"]["code"], "PATCH_CANDIDATE_SERVICE_POLICY",
        "{failed}"
    );
    let job = store
        .get(&vocab::JobId::parse(&refused).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(
        store.usage(&job.id).await.unwrap().is_empty(),
        "no turn ran"
    );

    // Every load is audited with the policy's digest, by the host that loaded it (the second
    // host's start-up load too, on PostgreSQL).
    let audit = get_json_ok(service.addr, "/v1/audit", &service.token());
    let loads: Vec<&serde_json::Value> = audit["audit"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["act"] == "policy_loaded")
        .collect();
    let by_b = loads
        .iter()
        .filter(|e| e["principal"] == "policy-host-b")
        .count();
    assert_eq!(by_b, usize::from(database.is_some()), "{audit}");
    let loads: Vec<&&serde_json::Value> = loads
        .iter()
        .filter(|e| e["principal"] != "policy-host-b")
        .collect();
    assert_eq!(loads.len(), 4, "{audit}");
    assert_eq!(loads[1]["subject"], digest.as_str(), "{audit}");
    assert_eq!(service.stop().code(), Some(0));
    assert_no_turn_containers(docker).await;
}
