//! `patch-candidate serve` end to end: the built binary, the real Docker daemon with the proof
//! image, a real SQLite job store in a fresh state directory (and PostgreSQL for many hosts).
//! Jobs go in through `jobs submit` (and the HTTP API), come out as candidates in the store.

use std::time::{Duration, Instant};

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_service_runs_submitted_jobs_on_sqlite() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let state = state_with_images();
    let f = Fixture::new();
    let service = Service::start(state.path(), &ServeOpts::default());

    let first = submit(state.path(), None, &f, "Update the dashboard.");
    assert_eq!(first["created"], true);
    let id = job_id(&first);
    // The same inputs again: the existing job, not a second one.
    let again = submit(state.path(), None, &f, "Update the dashboard.");
    assert_eq!(again["created"], false);
    assert_eq!(again["job"]["id"], id.as_str());
    let id2 = submit_id(state.path(), None, &f, "Update the dashboard again.");

    for id in [&id, &id2] {
        let job = wait_finished(state.path(), None, id, Duration::from_secs(120));
        assert_eq!(job["state"], "completed", "{job}");
        assert_eq!(job["attempts"], 1);
        let digest = job["candidate_digest"].as_str().unwrap().to_owned();
        let store = open_store(state.path(), None).await;
        let job_id = vocab::JobId::parse(id).unwrap();
        let bytes = store.candidate(&job_id).await.unwrap().unwrap();
        let candidate = finalizer::validate_candidate_json(&bytes).unwrap();
        assert_eq!(
            finalizer::repository_patch_digest(&candidate)
                .unwrap()
                .to_string(),
            digest
        );
        assert_eq!(store.usage(&job_id).await.unwrap().len(), 1);
    }
    let listed = json_of(&jobs(state.path(), None, &["list", "--state", "completed"]));
    assert_eq!(listed["jobs"].as_array().unwrap().len(), 2);
    let logs = json_of(&jobs(state.path(), None, &["logs", &id]));
    let codes = field_strs(&logs["events"], "code");
    assert!(
        codes.contains(&"PATCH_CANDIDATE_JOB_COMPLETED"),
        "{codes:?}"
    );
    let workers = bin()
        .args(["--json", "workers"])
        .env("PATCH_CANDIDATE_STATE_DIR", state.path())
        .output()
        .unwrap();
    assert_eq!(json_of(&workers)["hosts"].as_array().unwrap().len(), 1);

    // Every log line is one JSON object; a job's lines carry its job, attempt and host ids.
    let lines = service.lines.lock().unwrap().clone();
    for l in &lines {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|_| panic!("not JSON: {l}"));
        if v["fields"]["code"] == "PATCH_CANDIDATE_JOB_COMPLETED" {
            assert!(
                v["span"]["job"].is_string()
                    && v["span"]["attempt"].is_string()
                    && v["span"]["host"].is_string(),
                "{l}"
            );
        }
    }
    assert!(
        !lines.iter().any(|l| l.contains("Dashboard()")),
        "source text in the log"
    );

    let status = service.stop();
    assert_eq!(status.code(), Some(0));
    assert_no_turn_containers(&docker).await;
    assert!(staging_left(state.path()).is_empty());
    tally("docker_service_runs_submitted_jobs_on_sqlite");
}

/// SIGKILL the service at each point of a job's life, restart it: exactly one recorded result,
/// one candidate, one usage row (the attempt that ran to the end), no container, no staging tree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_service_crash_matrix_records_exactly_one_result() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    for point in turn::fault::POINTS {
        let state = state_with_images();
        let f = Fixture::new();
        let fault = format!("{point}:pause");
        let opts = ServeOpts {
            lease: "2s",
            heartbeat: "300ms",
            fault: Some(&fault),
            ..ServeOpts::default()
        };
        let crashing = Service::start(state.path(), &opts);
        let id = submit_id(state.path(), None, &f, "Update the dashboard.");
        crashing.wait_logged("PATCH_CANDIDATE_FAULT", Duration::from_secs(60));
        crashing.kill();
        assert_eq!(show(state.path(), None, &id)["state"], "running", "{point}");

        let restarted = Service::start(
            state.path(),
            &ServeOpts {
                lease: "2s",
                heartbeat: "300ms",
                ..ServeOpts::default()
            },
        );
        let job = wait_finished(state.path(), None, &id, Duration::from_secs(120));
        assert_eq!(job["state"], "completed", "{point}: {job}");
        assert_eq!(
            job["attempts"], 2,
            "{point}: the killed attempt is spent, the second completes"
        );
        let store = open_store(state.path(), None).await;
        let job_id = vocab::JobId::parse(&id).unwrap();
        assert!(store.candidate(&job_id).await.unwrap().is_some());
        let usage = store.usage(&job_id).await.unwrap();
        assert_eq!(
            usage.len(),
            1,
            "{point}: one usage row, of the attempt that ran to the end"
        );
        let codes = event_codes(state.path(), None, &id);
        let completed = codes
            .iter()
            .filter(|c| *c == "PATCH_CANDIDATE_JOB_COMPLETED")
            .count();
        assert_eq!(completed, 1, "{point}: {codes:?}");
        // The janitor removes the killed attempt's container once that attempt is over.
        wait_own_turns_gone(
            &docker,
            Duration::from_secs(30),
            Duration::from_millis(200),
            &format!("{point}: containers left"),
        )
        .await;
        assert_eq!(restarted.stop().code(), Some(0));
        assert!(staging_left(state.path()).is_empty(), "{point}");
        assert_no_turn_containers(&docker).await;
    }
    tally("docker_service_crash_matrix_records_exactly_one_result");
}

fn error_code(status_body: &(u16, Vec<u8>)) -> String {
    let v: serde_json::Value = serde_json::from_slice(&status_body.1).unwrap_or_else(|_| {
        panic!(
            "error body is not JSON: {}",
            String::from_utf8_lossy(&status_body.1)
        )
    });
    assert!(v["error"]["message"].is_string(), "{v}");
    v["error"]["code"].as_str().unwrap().to_owned()
}

/// The HTTP API: bearer token, strict bounded JSON, ids through their types, 1,000 concurrent
/// requests; a job submitted over HTTP runs and its candidate is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_service_api_auth_bad_input_and_a_job() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let state = state_with_images();
    let f = Fixture::new();
    let service = Service::start(state.path(), &ServeOpts::default());
    let addr = service.addr;
    let token = service.token();
    let mode = std::fs::metadata(state.path().join("api-token")).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
        0o600
    );

    assert_eq!(http(addr, "GET", "/healthz", None, None).0, 200);
    assert_eq!(http(addr, "GET", "/readyz", None, None).0, 200);
    for (path, method) in [
        ("/v1/jobs", "GET"),
        ("/metrics", "GET"),
        ("/v1/jobs", "POST"),
    ] {
        let r = http(addr, method, path, None, Some(b"{}"));
        assert_eq!(r.0, 401, "{method} {path}");
        assert_eq!(error_code(&r), "PATCH_CANDIDATE_SERVICE_UNAUTHORIZED");
        let wrong = format!("{}x", &token[..token.len() - 1]);
        let r = http(addr, method, path, Some(&wrong), Some(b"{}"));
        assert_eq!(r.0, 401, "{method} {path}");
    }
    let t = Some(token.as_str());
    let r = http(addr, "POST", "/v1/jobs", t, Some(b"{\"repository\": "));
    assert_eq!(
        (r.0, error_code(&r).as_str()),
        (400, "PATCH_CANDIDATE_SERVICE_BODY")
    );
    let r = http(
        addr,
        "POST",
        "/v1/jobs",
        t,
        Some(b"{\"repository\":\"/x\",\"approval\":\"{}\",\"sneaky\":1}"),
    );
    assert_eq!(
        (r.0, error_code(&r).as_str()),
        (400, "PATCH_CANDIDATE_SERVICE_BODY")
    );
    assert!(!String::from_utf8_lossy(&r.1).contains("sneaky\":1"));
    let r = http(addr, "POST", "/v1/jobs", t, Some(b"{} []"));
    assert_eq!(r.0, 400);
    let big = vec![b' '; 6 * 1024 * 1024];
    let r = http(addr, "POST", "/v1/jobs", t, Some(&big));
    assert_eq!(
        (r.0, error_code(&r).as_str()),
        (413, "PATCH_CANDIDATE_SERVICE_BODY")
    );
    for path in [
        "/v1/jobs/..%2F..%2Fetc%2Fpasswd",
        "/v1/jobs/job_..%2F",
        "/v1/jobs/JOB_0123456789abcdef0123456789abcdef",
        "/v1/jobs/job_0123456789abcdef0123456789abcdef%00",
        "/v1/jobs/job_0123456789abcdef0123456789abcdeg/candidate",
    ] {
        let r = http(addr, "GET", path, t, None);
        assert_eq!(
            (r.0, error_code(&r).as_str()),
            (400, "PATCH_CANDIDATE_JOBS_ID"),
            "{path}"
        );
    }
    let r = http(
        addr,
        "GET",
        "/v1/jobs/job_0123456789abcdef0123456789abcdef",
        t,
        None,
    );
    assert_eq!(
        (r.0, error_code(&r).as_str()),
        (404, "PATCH_CANDIDATE_JOBS_NOT_FOUND")
    );
    let r = http(addr, "GET", "/v1/jobs?state=bogus", t, None);
    assert_eq!(r.0, 400, "{}", String::from_utf8_lossy(&r.1));
    let r = http(addr, "GET", "/v1/nothing/../jobs", t, None);
    assert_ne!(r.0, 200);
    let r = http(addr, "DELETE", "/v1/jobs", t, None);
    assert_eq!(
        (r.0, error_code(&r).as_str()),
        (405, "PATCH_CANDIDATE_SERVICE_METHOD")
    );
    // Nothing half-written: the store is still empty.
    let r = http(addr, "GET", "/v1/jobs", t, None);
    let listed: serde_json::Value = serde_json::from_slice(&r.1).unwrap();
    assert_eq!(listed["jobs"].as_array().unwrap().len(), 0);

    // A job over HTTP: the approval as its JSON text.
    let approval = std::fs::read_to_string(f.approval("Update the dashboard.")).unwrap();
    let body = serde_json::to_vec(&serde_json::json!({
        "repository": f.repo.path().to_str().unwrap(),
        "approval": approval,
    }))
    .unwrap();
    let r = http(addr, "POST", "/v1/jobs", t, Some(&body));
    assert_eq!(r.0, 201, "{}", String::from_utf8_lossy(&r.1));
    let created: serde_json::Value = serde_json::from_slice(&r.1).unwrap();
    let id = job_id(&created);
    let r = http(addr, "POST", "/v1/jobs", t, Some(&body));
    assert_eq!(r.0, 200);
    let again: serde_json::Value = serde_json::from_slice(&r.1).unwrap();
    assert_eq!(again["job"]["id"], id.as_str());
    assert_eq!(again["created"], false);
    // A tampered approval never enters the queue.
    let tampered = approval.replace("Update the dashboard.", "Update the dashboard!");
    let bad = serde_json::to_vec(&serde_json::json!({
        "repository": f.repo.path().to_str().unwrap(),
        "approval": tampered,
        "task": "Update the dashboard.",
    }))
    .unwrap();
    let r = http(addr, "POST", "/v1/jobs", t, Some(&bad));
    assert!(
        r.0 == 422 || r.0 == 400,
        "{}",
        String::from_utf8_lossy(&r.1)
    );
    error_code(&r);

    let started = Instant::now();
    let job = loop {
        let r = http(addr, "GET", &format!("/v1/jobs/{id}"), t, None);
        let v: serde_json::Value = serde_json::from_slice(&r.1).unwrap();
        if v["job"]["state"] == "completed" || v["job"]["state"] == "failed" {
            break v["job"].clone();
        }
        assert!(started.elapsed() < Duration::from_secs(120), "{v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(job["state"], "completed", "{job}");
    let r = http(addr, "GET", &format!("/v1/jobs/{id}/candidate"), t, None);
    assert_eq!(r.0, 200);
    let candidate = finalizer::validate_candidate_json(&r.1).unwrap();
    assert_eq!(
        finalizer::repository_patch_digest(&candidate)
            .unwrap()
            .to_string(),
        job["candidate_digest"].as_str().unwrap()
    );
    let r = http(addr, "POST", &format!("/v1/jobs/{id}/retry"), t, None);
    assert_eq!(
        (r.0, error_code(&r).as_str()),
        (409, "PATCH_CANDIDATE_JOBS_STATE")
    );

    // 1,000 concurrent requests: every one answered, the service still healthy.
    let handles: Vec<_> = (0..1000)
        .map(|i| {
            let token = token.clone();
            std::thread::spawn(move || {
                let path = if i % 2 == 0 {
                    "/v1/jobs?state=completed"
                } else {
                    "/metrics"
                };
                http(addr, "GET", path, Some(&token), None).0
            })
        })
        .collect();
    let statuses: Vec<u16> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(
        statuses.iter().all(|s| *s == 200),
        "{:?}",
        statuses.iter().filter(|s| **s != 200).collect::<Vec<_>>()
    );
    let (status, metrics) = http(addr, "GET", "/metrics", t, None);
    assert_eq!(status, 200);
    let metrics = String::from_utf8(metrics).unwrap();
    assert!(
        metrics.contains("patch_candidate_job_attempts_total{outcome=\"completed\"} 1"),
        "{metrics}"
    );
    assert!(!metrics.contains(&id), "job ids never label a metric");

    assert_eq!(service.stop().code(), Some(0));
    assert_clean_and_tally(&docker, "docker_service_api_auth_bad_input_and_a_job").await;
}

/// Cancel a running turn (killed within a heartbeat), cancel and retry a queued job, drain on
/// SIGTERM (readyz 503, the running job released without spending an attempt).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_service_cancel_retry_and_drain() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let state = state_with_images();
    let f = Fixture::new();
    let opts = ServeOpts {
        max_turns: 1,
        drain_timeout: "2s",
        ..ServeOpts::default()
    };
    let service = Service::start(state.path(), &opts);
    let slow = submit(
        state.path(),
        None,
        &f,
        "Update the dashboard.\nmode: sleep=60\n",
    );
    let slow_id = job_id(&slow);
    wait_state(
        state.path(),
        None,
        &slow_id,
        &["running"],
        Duration::from_secs(60),
    );
    // Let the container start.
    wait_turn_container(&docker, 30, "no turn container").await;
    let out = jobs(state.path(), None, &["cancel", &slow_id]);
    assert!(out.status.success());
    assert_eq!(json_of(&out)["job"]["cancel_requested"], true);
    let job = wait_state(
        state.path(),
        None,
        &slow_id,
        &["cancelled"],
        Duration::from_secs(10),
    );
    assert_eq!(job["state"], "cancelled");
    wait_own_turns_gone(
        &docker,
        Duration::from_secs(10),
        Duration::from_millis(100),
        "cancelled turn's container remains",
    )
    .await;
    // Retry brings the cancelled job back with one more attempt; cancel it again while queued.
    let out = jobs(state.path(), None, &["retry", &slow_id]);
    assert_ok(&out);
    wait_state(
        state.path(),
        None,
        &slow_id,
        &["running"],
        Duration::from_secs(30),
    );

    // Drain: the running slow job is released after the drain timeout, attempt not spent.
    let before = show(state.path(), None, &slow_id)["attempts"]
        .as_u64()
        .unwrap();
    service.signal("-TERM");
    let started = Instant::now();
    loop {
        let (status, _) = http(service.addr, "GET", "/readyz", None, None);
        if status == 503 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "readyz still {status}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // One signal only: a second would stop at once.
    let status = service.wait();
    assert_eq!(status.code(), Some(0));
    let job = show(state.path(), None, &slow_id);
    assert_eq!(job["state"], "queued", "{job}");
    assert_eq!(
        job["attempts"].as_u64().unwrap(),
        before - 1,
        "release gives the attempt back"
    );
    assert_no_turn_containers(&docker).await;
    // A queued job is cancelled at once.
    let out = jobs(state.path(), None, &["cancel", &slow_id]);
    assert_eq!(json_of(&out)["job"]["state"], "cancelled");
    assert!(staging_left(state.path()).is_empty());
    tally("docker_service_cancel_retry_and_drain");
}

/// Three hosts on one PostgreSQL database, 60 jobs, one host SIGKILLed mid-run: every job
/// completes exactly once; a job is claimed twice only after its lease expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_service_three_hosts_on_postgres() {
    let Some(docker) = docker().await else { return };
    let Some(url) = postgres_url_or_skip().await else {
        return;
    };
    let _guard = docker_lock().lock().await;
    let db = Some(url.as_str());
    let f = Fixture::new();
    let states: Vec<_> = (0..3).map(|_| state_with_images()).collect();
    let mut ids = Vec::new();
    for i in 0..60 {
        let job = submit(
            states[0].path(),
            db,
            &f,
            &format!("Update the dashboard ({i})."),
        );
        ids.push(job_id(&job));
    }
    let hosts = ["host-a", "host-b", "host-c"];
    let mut services: Vec<Option<Service>> = states
        .iter()
        .zip(hosts)
        .map(|(s, h)| {
            Some(Service::start(
                s.path(),
                &ServeOpts {
                    database: db,
                    host_id: Some(h),
                    max_turns: 2,
                    lease: "2s",
                    heartbeat: "300ms",
                    ..ServeOpts::default()
                },
            ))
        })
        .collect();
    let store = open_store(states[0].path(), db).await;
    let started = Instant::now();
    loop {
        let done = count_in(&store, jobs::JobState::Completed, 1000).await;
        if done >= 10 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(300));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    services[1].take().unwrap().kill();
    loop {
        let done = count_in(&store, jobs::JobState::Completed, 1000).await;
        if done == 60 {
            break;
        }
        let failed = store
            .list(Some(jobs::JobState::Failed), 1000)
            .await
            .unwrap();
        assert!(failed.is_empty(), "{failed:?}");
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "{done} of 60 completed"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    for id in &ids {
        let id = vocab::JobId::parse(id).unwrap();
        assert!(store.candidate(&id).await.unwrap().is_some());
        let events = store.events(&id).await.unwrap();
        let count = |code: &str| events.iter().filter(|e| e.code == code).count();
        assert_eq!(count("PATCH_CANDIDATE_JOB_COMPLETED"), 1, "{id}");
        assert!(
            count("PATCH_CANDIDATE_JOB_CLAIMED")
                <= 1 + count("PATCH_CANDIDATE_JOBS_LEASE_EXPIRED")
                    + count("PATCH_CANDIDATE_JOB_RELEASED"),
            "{id}: claimed again without an expired lease: {events:?}"
        );
    }
    for s in services.iter_mut() {
        if let Some(s) = s.take() {
            assert_eq!(s.stop().code(), Some(0));
        }
    }
    wait_own_turns_gone(
        &docker,
        Duration::from_secs(30),
        Duration::from_millis(200),
        "containers left",
    )
    .await;
    tally("docker_service_three_hosts_on_postgres");
}
