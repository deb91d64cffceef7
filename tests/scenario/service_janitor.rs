//! Two `patch-candidate serve` processes with different job stores (each its own state directory
//! and SQLite file) on one Docker daemon: each janitor judges only its own store's turn
//! containers, so neither removes the other's live turn.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::support::*;

/// The proof agent sleeps this long, then edits: the turn outlives dozens of janitor passes of
/// the other service (every heartbeat interval).
const SLOW_TASK: &str = "Update the dashboard.\nmode: sleep=10\nmode: edit\n";
/// Short, so each service's janitor runs about five times a second.
const HEARTBEAT: &str = "200ms";

/// The live turn containers carrying a job label: job id → (container name, store label).
async fn job_turns(docker: &container::BollardRuntime) -> BTreeMap<String, (String, String)> {
    container::ContainerRuntime::list_turns(docker)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|c| {
            let job = c.labels.get(container::JOB_LABEL_KEY)?.clone();
            let store = c
                .labels
                .get(container::JOB_STORE_LABEL_KEY)
                .cloned()
                .unwrap_or_default();
            Some((job, (c.names.first().cloned().unwrap_or_default(), store)))
        })
        .collect()
}

/// `patch_candidate_janitor_removed_total` of a running service.
fn janitor_removed_total(service: &Service) -> u64 {
    let token = service.token();
    let text = metrics_text(service.addr, &token);
    text.lines()
        .find_map(|l| l.strip_prefix("patch_candidate_janitor_removed_total "))
        .unwrap_or_else(|| panic!("no janitor counter in {text}"))
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_service_janitors_of_two_stores_keep_each_others_live_turns() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let opts = ServeOpts {
        heartbeat: HEARTBEAT,
        max_turns: 1,
        ..ServeOpts::default()
    };
    // Two services, two stores (each the default SQLite file of its own state directory).
    let state_a = state_with_images();
    let state_b = state_with_images();
    let a = Service::start(state_a.path(), &opts);
    let b = Service::start(state_b.path(), &opts);
    let store_a = open_store(state_a.path(), None).await.store_id().clone();
    let store_b = open_store(state_b.path(), None).await.store_id().clone();
    assert_ne!(store_a, store_b);

    let f = Fixture::new();
    let id_a = submit_id(state_a.path(), None, &f, SLOW_TASK);
    let id_b = submit_id(state_b.path(), None, &f, SLOW_TASK);

    // Both turns run at once, each container labelled with its own store.
    let started = Instant::now();
    let both = loop {
        let turns = job_turns(&docker).await;
        if turns.contains_key(&id_a) && turns.contains_key(&id_b) {
            break turns;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the two turns did not start: {turns:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(both[&id_a].1, store_a.as_str());
    assert_eq!(both[&id_b].1, store_b.as_str());
    // Each service's janitor passes (every 200 ms) see the other's container, whose attempt is
    // none of their store's: both containers are still there two seconds later.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let later = job_turns(&docker).await;
    for id in [&id_a, &id_b] {
        assert_eq!(
            later.get(id).map(|t| &t.0),
            Some(&both[id].0),
            "the live turn of {id} was removed: {later:?}"
        );
    }

    for (state, id) in [(&state_a, &id_a), (&state_b, &id_b)] {
        let job = wait_finished(state.path(), None, id, Duration::from_secs(120));
        assert_eq!(job["state"], "completed", "{job}");
        assert_eq!(job["attempts"], 1, "{job}");
        let store = open_store(state.path(), None).await;
        let job_id = vocab::JobId::parse(id).unwrap();
        assert!(store.candidate(&job_id).await.unwrap().is_some());
        assert_eq!(store.usage(&job_id).await.unwrap().len(), 1);
        let completed = event_codes(state.path(), None, id)
            .iter()
            .filter(|c| *c == "PATCH_CANDIDATE_JOB_COMPLETED")
            .count();
        assert_eq!(completed, 1);
    }
    // Neither janitor removed anything: no removal logged, the counters are zero.
    for service in [&a, &b] {
        assert!(!service.logged("PATCH_CANDIDATE_JANITOR_REMOVED"));
        assert_eq!(janitor_removed_total(service), 0);
    }
    assert_eq!(a.stop().code(), Some(0));
    assert_eq!(b.stop().code(), Some(0));
    assert_no_turn_containers(&docker).await;
    assert!(staging_left(state_a.path()).is_empty());
    assert!(staging_left(state_b.path()).is_empty());
    tally("docker_service_janitors_of_two_stores_keep_each_others_live_turns");
}
