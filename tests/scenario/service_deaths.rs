//! `patch-candidate serve` when a turn's container dies: killed from outside (an operator's
//! `docker kill`: exit 137, no OOM, not the host's deadline or cancel) the job is retried within
//! its attempt budget and completes once; killed by the OOM killer inside its own memory limit it
//! stays the candidate's failure (the dead letter, one attempt).

use std::time::Duration;

use crate::support::*;

/// Waits until job `id` has a running turn container (found by the job's label); returns its ID.
fn running_container_of(id: &str, limit: Duration) -> String {
    let filter = format!("label={}={id}", container::JOB_LABEL_KEY);
    wait_running_container(&[&filter], limit)
        .unwrap_or_else(|| panic!("job {id} has no running turn container after {limit:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_service_retries_a_turn_killed_from_outside_and_fails_an_oom() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let state = state_with_images();
    let f = Fixture::new();
    let service = Service::start(state.path(), &ServeOpts::default());

    // 1. A good job whose first turn container is killed from outside while it works.
    let job = submit(
        state.path(),
        None,
        &f,
        "Update the dashboard.\nmode: sleep=5\nmode: edit\n",
    );
    let id = job_id(&job);
    assert!(
        job["job"]["max_attempts"].as_u64().unwrap() > 1,
        "the test needs a job that can retry"
    );
    let first = running_container_of(&id, Duration::from_secs(60));
    docker_cli(&["kill", &first], None);
    let done = wait_finished(state.path(), None, &id, Duration::from_secs(120));
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(
        done["attempts"], 2,
        "one retry after the outside kill: {done}"
    );
    let codes = event_codes(state.path(), None, &id);
    assert!(
        codes
            .iter()
            .any(|c| c == "REPOSITORY_DOCKER_KILLED_EXTERNALLY"),
        "{codes:?}"
    );
    assert!(
        !codes.iter().any(|c| c == "REPOSITORY_DOCKER_WORKER_FAILED"),
        "{codes:?}"
    );
    let store = open_store(state.path(), None).await;
    let job_id = vocab::JobId::parse(&id).unwrap();
    assert!(store.candidate(&job_id).await.unwrap().is_some());
    let usage = store.usage(&job_id).await.unwrap();
    assert_eq!(usage.len(), 2, "{usage:?}");
    let usage: String = usage.iter().map(|(_, row)| row.as_str()).collect();
    assert!(
        usage.contains("REPOSITORY_DOCKER_KILLED_EXTERNALLY") && usage.contains("environment"),
        "{usage}"
    );

    // 2. An OOM kill inside the turn's own memory limit stays the candidate's failure.
    let oom_id = submit_id(
        state.path(),
        None,
        &f,
        "Update the dashboard.\nmode: memory-bomb\n",
    );
    let failed = wait_finished(state.path(), None, &oom_id, Duration::from_secs(120));
    assert_eq!(failed["state"], "failed", "{failed}");
    assert_eq!(failed["attempts"], 1, "no retry of an OOM: {failed}");
    assert_eq!(
        failed["last_error"]["code"], "REPOSITORY_DOCKER_OOM",
        "{failed}"
    );
    let oom_job = vocab::JobId::parse(&oom_id).unwrap();
    assert!(store.candidate(&oom_job).await.unwrap().is_none());

    assert_eq!(service.stop().code(), Some(0));
    assert_no_turn_containers(&docker).await;
    assert!(staging_left(state.path()).is_empty());
    tally("docker_service_retries_a_turn_killed_from_outside_and_fails_an_oom");
}
