//! `patch-candidate serve` with live jobs and usage rows: a live job (`jobs submit --live`) is
//! snoozed by a host without live settings (no attempt spent, nothing recorded) and then run by a
//! host with them (`serve --live-upstream <scripted> --credential-env …`): the real codex-acp in
//! the live image, its model requests through the tunnel and that host's gateway, one verified
//! candidate, one usage row with the upstream's token counts, and the credential nowhere but in
//! the upstream's requests. Offline, every attempt that started its turn leaves exactly one usage
//! row: rejected, cancelled while running, released at drain.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use gateway::testkit::{Reply, ScriptedUpstream};

use crate::live_container::{TEST_LIVE_IMAGE, live_fixture, live_image};
use crate::support::*;

const KEY: &str = "sk-service-live-5c7d1a";
const KEY_VAR: &str = "PC_SCENARIO_SERVICE_MODEL_KEY";
const MODEL: &str = "gpt-5.5";

/// The usage rows of job `id`, parsed, by attempt.
async fn usage_rows(state: &Path, id: &str) -> BTreeMap<String, serde_json::Value> {
    let store = open_store(state, None).await;
    let job_id = vocab::JobId::parse(id).unwrap();
    store
        .usage(&job_id)
        .await
        .unwrap()
        .into_iter()
        .map(|(a, text)| (a.as_str().to_owned(), serde_json::from_str(&text).unwrap()))
        .collect()
}

/// Runs a blocking step (CLI calls, waits) off the runtime the scripted upstream serves on.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

/// Every byte of the SQLite store (the main file and its write-ahead log).
fn database_bytes(state: &Path) -> Vec<u8> {
    let mut bytes = Vec::new();
    for name in ["jobs.sqlite3", "jobs.sqlite3-wal"] {
        if let Ok(b) = std::fs::read(state.join(name)) {
            bytes.extend_from_slice(&b);
        }
    }
    assert!(!bytes.is_empty(), "no SQLite store in the state directory");
    bytes
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn docker_service_live_job_snoozes_without_live_settings_then_completes_through_the_gateway()
{
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let image_id = live_image();
    let (repo, approvals, approval_path) = live_fixture();
    let state = state_with_images();
    let repo_str = repo.path().to_str().unwrap().to_owned();

    // The state directory records only the proof image: a live job never falls back to it.
    let out = submit_raw(
        state.path(),
        None,
        &repo_str,
        &approval_path,
        &["--live", "--model", MODEL],
    );
    assert!(!out.status.success());
    assert_eq!(
        json_of(&out)["error"]["code"],
        "REPOSITORY_DOCKER_EXPECTED_IMAGE_ID"
    );
    // --live needs --model, as for run --live; a model the runner would refuse never queues.
    let out = submit_raw(state.path(), None, &repo_str, &approval_path, &["--live"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(json_of(&out)["error"]["code"], "PATCH_CANDIDATE_LIVE_MODEL");
    let live_image_args = ["--image", TEST_LIVE_IMAGE, "--image-id", image_id.as_str()];
    let mut bad = vec!["--live", "--model", "a/b"];
    bad.extend(live_image_args);
    let out = submit_raw(state.path(), None, &repo_str, &approval_path, &bad);
    assert_eq!(json_of(&out)["error"]["code"], "PATCH_CANDIDATE_JOBS_SPEC");

    let mut live_args = vec!["--live", "--model", MODEL];
    live_args.extend(live_image_args);
    let out = submit_raw(state.path(), None, &repo_str, &approval_path, &live_args);
    assert_ok(&out);
    let submitted = json_of(&out);
    let id = job_id(&submitted);
    assert_eq!(
        submitted["job"]["spec"]["live"],
        serde_json::json!({"model": MODEL})
    );
    assert_eq!(submitted["job"]["spec"]["image_id"], image_id.as_str());
    // The same live submission is the same job; the same inputs offline are another job.
    let again = json_of(&submit_raw(
        state.path(),
        None,
        &repo_str,
        &approval_path,
        &live_args,
    ));
    assert_eq!(
        (again["created"].clone(), again["job"]["id"].clone()),
        (false.into(), id.clone().into())
    );

    // A host without live settings claims it and snoozes it: no attempt spent, no usage row.
    let plain = Service::start(state.path(), &ServeOpts::default());
    plain.wait_logged(
        "PATCH_CANDIDATE_SERVICE_LIVE_UNAVAILABLE",
        Duration::from_secs(60),
    );
    let codes = event_codes(state.path(), None, &id);
    assert!(
        codes.iter().any(|c| c == "PATCH_CANDIDATE_JOB_SNOOZED"),
        "{codes:?}"
    );
    assert!(
        !codes.iter().any(|c| c == "PATCH_CANDIDATE_JOB_STARTED"),
        "{codes:?}"
    );
    assert_eq!(plain.stop().code(), Some(0));
    let job = show(state.path(), None, &id);
    assert_eq!(job["state"], "queued", "{job}");
    assert_eq!(job["attempts"], 0, "{job}");
    assert_eq!(
        job["last_error"]["code"],
        "PATCH_CANDIDATE_SERVICE_LIVE_UNAVAILABLE"
    );
    assert!(usage_rows(state.path(), &id).await.is_empty());

    // A host with live settings runs it through its gateway to the scripted upstream.
    let upstream = ScriptedUpstream::start([
        Reply::edit_file("app/service.py", "    return 1", "    return 2"),
        Reply::create_file("app/new.py", "VALUE = 1"),
    ])
    .await
    .unwrap();
    let url = upstream.base_url();
    let state_path = state.path().to_path_buf();
    let (service, job) = blocking(move || {
        let opts = ServeOpts {
            extra: vec!["--live-upstream", &url, "--credential-env", KEY_VAR],
            env: vec![(KEY_VAR, KEY)],
            ..ServeOpts::default()
        };
        let service = Service::start(&state_path, &opts);
        let job = wait_finished(&state_path, None, &id, Duration::from_secs(180));
        (service, (job, id))
    })
    .await;
    let (job, id) = job;
    assert_eq!(
        job["state"],
        "completed",
        "{job} {:?}",
        service.lines.lock().unwrap()
    );
    assert_eq!(job["attempts"], 1);
    assert_eq!(job["spec"]["live"]["model"], MODEL);

    // One candidate, verified against its digest and the repository.
    let store = open_store(state.path(), None).await;
    let job_id = vocab::JobId::parse(&id).unwrap();
    let bytes = store.candidate(&job_id).await.unwrap().unwrap();
    let candidate = finalizer::validate_candidate_json(&bytes).unwrap();
    let paths: Vec<String> = candidate
        .changed_files()
        .iter()
        .map(|f| f.path().as_str().to_owned())
        .collect();
    assert_eq!(paths.len(), 2, "{paths:?}");
    let candidate_file = approvals.path().join("candidate.json");
    std::fs::write(&candidate_file, &bytes).unwrap();
    verify_ok(
        &candidate_file,
        job["candidate_digest"].as_str().unwrap(),
        repo.path(),
    );

    // One usage row: the gateway's trusted count (three answers of 120 tokens) and the model.
    let rows = usage_rows(state.path(), &id).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    let row = rows.values().next().unwrap();
    assert_eq!(row["outcome"], "completed", "{row}");
    assert_eq!(row["live"]["model"], MODEL, "{row}");
    assert_eq!(row["live"]["requests"], 3, "{row}");
    assert_eq!(row["live"]["forwarded"], 3, "{row}");
    assert_eq!(row["live"]["total_tokens"], 360, "{row}");
    assert_eq!(row["usage"]["total_tokens"], 360, "{row}");
    assert!(row["wall_ms"].as_u64().unwrap() > 0, "{row}");
    // The worker's count of the agent's commands (this script only edits): recorded, none run.
    assert_eq!(
        row["live"]["commands"],
        serde_json::json!({"commands": 0, "failed": 0, "command_ms": 0}),
        "{row}"
    );
    assert_eq!(
        rows.keys().next().unwrap(),
        job["attempt_id"].as_str().unwrap()
    );

    // The spend ledger's report is that row, under the job's repository and today's UTC day, and
    // the host's spend counters moved by the gateway's counts (the snooze recorded nothing).
    let usage = get_json_ok(service.addr, "/v1/usage", &service.token());
    let today = jobs::UtcDay::today().to_string();
    let rows = usage["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{usage}");
    assert_eq!(
        (&rows[0]["day"], &rows[0]["repository"]),
        (&today.clone().into(), &repo_str.clone().into()),
        "{usage}"
    );
    for (field, want) in [
        ("attempts", 1),
        ("requests", 3),
        (
            "input_tokens",
            row["live"]["input_tokens"].as_u64().unwrap(),
        ),
        (
            "output_tokens",
            row["live"]["output_tokens"].as_u64().unwrap(),
        ),
        ("total_tokens", 360),
    ] {
        assert_eq!(rows[0][field].as_u64(), Some(want), "{field}: {usage}");
        assert_eq!(
            usage["totals"][field].as_u64(),
            Some(want),
            "{field}: {usage}"
        );
    }
    let metrics = metrics_text(service.addr, &service.token());
    for line in [
        "patch_candidate_spend_tokens_total{kind=\"total\"} 360\n",
        "patch_candidate_spend_requests_total 3\n",
        "patch_candidate_agent_commands_total 0\n",
        "patch_candidate_agent_commands_failed_total 0\n",
        "patch_candidate_agent_command_seconds_total 0.000\n",
    ] {
        assert!(metrics.contains(line), "{line}: {metrics}");
    }

    // The upstream saw the key on every request; nothing else ever held it.
    bearer_requests(&upstream, 3, KEY);
    let (status, view) = http(
        service.addr,
        "GET",
        &format!("/v1/jobs/{id}"),
        Some(&service.token()),
        None,
    );
    assert_eq!(status, 200);
    assert!(!contains(&view, KEY));
    let shown = jobs(state.path(), None, &["show", &id]);
    assert!(!contains(&shown.stdout, KEY) && !contains(&shown.stderr, KEY));
    let text = bin()
        .args(["jobs", "show", &id])
        .env("PATCH_CANDIDATE_STATE_DIR", state.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(text.contains(&format!("live: model '{MODEL}'")), "{text}");
    let attempt = job["attempt_id"].as_str().unwrap();
    assert!(
        text.contains(&format!("attempt {attempt}: completed in "))
            && text.contains(&format!(
                "; model {MODEL}, 3 requests, 360 tokens; 0 commands (0 failed, 0.0 s)"
            )),
        "{text}"
    );
    let shown: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(
        shown["job"]["attempt_usage"][0]["commands"]["commands"], 0,
        "{shown}"
    );
    assert_eq!(
        shown["job"]["attempt_usage"][0]["total_tokens"], 360,
        "{shown}"
    );
    // The review UI's job page lists the attempt with the same numbers.
    let session =
        crate::service_hostile_clients::sign_in_as_a_browser(service.addr, &service.token());
    let (status, page) = crate::service_hostile_clients::browser_get(
        service.addr,
        &format!("/ui/jobs/{id}"),
        &session,
    );
    assert_eq!(status, 200, "{page}");
    let table = page
        .split("id=\"attempts\"")
        .nth(1)
        .expect("an attempts table");
    let row = table.split("</tr>").nth(1).unwrap_or_default();
    for cell in [
        format!("<code>{attempt}</code>"),
        "<td>completed</td>".to_owned(),
        format!("<td>{MODEL}</td>"),
        "<td>3</td><td>360</td><td>0</td><td>0</td><td>0.0 s</td>".to_owned(),
    ] {
        assert!(row.contains(&cell), "{cell}: {row}");
    }
    assert!(service.logged("PATCH_CANDIDATE_GATEWAY_REQUEST"));
    let log = std::sync::Arc::clone(&service.lines);
    assert_eq!(service.stop().code(), Some(0));
    let lines = log.lock().unwrap().join("\n");
    assert!(!lines.contains(KEY), "the key is in serve's log");
    assert!(
        !contains(&database_bytes(state.path()), KEY),
        "the key is in the job store"
    );
    assert_no_turn_containers(&docker).await;
    assert!(staging_left(state.path()).is_empty());
    tally(
        "docker_service_live_job_snoozes_without_live_settings_then_completes_through_the_gateway",
    );
}

/// Submits `task` and waits until its job runs and its turn container is there; the job's id.
async fn submit_running(
    docker: &container::BollardRuntime,
    state: &std::path::Path,
    f: &Fixture,
    task: &str,
) -> String {
    let id = submit_id(state, None, f, task);
    wait_state(state, None, &id, &["running"], Duration::from_secs(60));
    wait_for_container(docker).await;
    id
}

/// Waits until a turn container exists.
async fn wait_for_container(docker: &container::BollardRuntime) {
    wait_turn_container(docker, 60, "no turn container").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_service_records_one_usage_row_per_attempt_that_ran() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let state = state_with_images();
    let f = Fixture::new();
    let service = Service::start(
        state.path(),
        &ServeOpts {
            max_turns: 1,
            drain_timeout: "2s",
            ..ServeOpts::default()
        },
    );

    // Rejected: the agent writes a file the approval does not grant; one attempt, one row.
    let rejected = submit(
        state.path(),
        None,
        &f,
        "Update the dashboard.\nmode: create-ungranted\n",
    );
    let rejected_id = job_id(&rejected);
    let job = wait_finished(state.path(), None, &rejected_id, Duration::from_secs(120));
    assert_eq!(job["state"], "failed", "{job}");
    assert_eq!(job["attempts"], 1);
    let code = job["last_error"]["code"].as_str().unwrap().to_owned();
    assert!(code.starts_with("REPOSITORY_"), "{job}");
    let rows = usage_rows(state.path(), &rejected_id).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    let row = &rows[job["attempt_id"].as_str().unwrap()];
    assert_eq!(row["outcome"], "failed", "{row}");
    assert_eq!(row["class"], "rejected", "{row}");
    assert_eq!(row["code"], code.as_str(), "{row}");
    assert!(row.get("live").is_none(), "{row}");

    // Cancelled while running: one row.
    let slow_id = submit_running(
        &docker,
        state.path(),
        &f,
        "Update the dashboard.\nmode: sleep=60\n",
    )
    .await;
    assert!(
        jobs(state.path(), None, &["cancel", &slow_id])
            .status
            .success()
    );
    let job = wait_state(
        state.path(),
        None,
        &slow_id,
        &["cancelled"],
        Duration::from_secs(10),
    );
    let rows = usage_rows(state.path(), &slow_id).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    let row = &rows[job["attempt_id"].as_str().unwrap()];
    assert_eq!(row["outcome"], "cancelled", "{row}");
    assert_eq!(row["code"], "PATCH_CANDIDATE_SERVICE_CANCELLED", "{row}");

    // Released at drain: one row for that attempt too, the attempt given back.
    let slower_id = submit_running(
        &docker,
        state.path(),
        &f,
        "Update the dashboard.\nmode: sleep=61\n",
    )
    .await;
    assert_eq!(service.stop().code(), Some(0));
    let job = show(state.path(), None, &slower_id);
    assert_eq!(
        (job["state"].as_str(), job["attempts"].as_u64()),
        (Some("queued"), Some(0))
    );
    let rows = usage_rows(state.path(), &slower_id).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    let row = &rows[job["attempt_id"].as_str().unwrap()];
    assert_eq!(row["outcome"], "released", "{row}");
    assert_no_turn_containers(&docker).await;
    assert!(staging_left(state.path()).is_empty());
    tally("docker_service_records_one_usage_row_per_attempt_that_ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn docker_service_cancels_a_live_turn_mid_stream_and_keeps_its_spent_tokens() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let image_id = live_image();
    let (repo, _approvals, approval_path) = live_fixture();
    let state = state_with_images();
    let out = submit_raw(
        state.path(),
        None,
        repo.path().to_str().unwrap(),
        &approval_path,
        &[
            "--live",
            "--model",
            MODEL,
            "--image",
            TEST_LIVE_IMAGE,
            "--image-id",
            image_id.as_str(),
        ],
    );
    assert_ok(&out);
    let id = json_of(&out)["job"]["id"].as_str().unwrap().to_owned();

    // One answered request (an edit, 120 tokens), then a stream that opens and goes silent: the
    // agent is mid-request when the job is cancelled.
    let upstream = ScriptedUpstream::start([
        Reply::edit_file("app/service.py", "    return 1", "    return 2"),
        Reply::Stall(vec![gateway::testkit::events::created("resp_stalled")]),
    ])
    .await
    .unwrap();
    let url = upstream.base_url();
    let state_path = state.path().to_path_buf();
    let service = blocking(move || {
        Service::start(
            &state_path,
            &ServeOpts {
                max_turns: 1,
                extra: vec!["--live-upstream", &url, "--credential-env", KEY_VAR],
                env: vec![(KEY_VAR, KEY)],
                ..ServeOpts::default()
            },
        )
    })
    .await;
    let started = Instant::now();
    while upstream.requests().len() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the agent never reached its second model request: {:?}",
            service.lines.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        own_turns(&docker).await.unwrap().len(),
        1,
        "the live turn is running"
    );

    let state_path = state.path().to_path_buf();
    let cancel_id = id.clone();
    let cancelled = blocking(move || {
        assert!(
            jobs(&state_path, None, &["cancel", &cancel_id])
                .status
                .success()
        );
        let sent = Instant::now();
        let job = wait_state(
            &state_path,
            None,
            &cancel_id,
            &["cancelled", "completed", "failed"],
            Duration::from_secs(20),
        );
        (job, sent.elapsed())
    })
    .await;
    let (job, took) = cancelled;
    assert_eq!(job["state"], "cancelled", "{job}");
    assert!(job["candidate_digest"].is_null(), "{job}");
    // The container (and with it the tunnel and every gateway channel) goes: its guard's forced
    // removal runs as the turn is dropped, next to the cancelled write. No third request is made.
    let dropped = Instant::now();
    wait_own_turns_gone(
        &docker,
        Duration::from_secs(10),
        Duration::from_millis(20),
        "the cancelled live turn's container is still there",
    )
    .await;
    eprintln!(
        "live turn cancelled: recorded {took:?} after the cancel, container gone {:?} later",
        dropped.elapsed()
    );
    assert_eq!(upstream.requests().len(), 2);

    // One usage row: the tokens of the request the upstream answered, the model, the outcome.
    let rows = usage_rows(state.path(), &id).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    let row = &rows[job["attempt_id"].as_str().unwrap()];
    assert_eq!(row["outcome"], "cancelled", "{row}");
    assert_eq!(row["live"]["model"], MODEL, "{row}");
    assert_eq!(row["live"]["total_tokens"], 120, "{row}");
    let log = std::sync::Arc::clone(&service.lines);
    assert_eq!(service.stop().code(), Some(0));
    assert!(!log.lock().unwrap().join("\n").contains(KEY));
    assert!(staging_left(state.path()).is_empty());
    tally("docker_service_cancels_a_live_turn_mid_stream_and_keeps_its_spent_tokens");
}
