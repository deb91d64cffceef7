//! The worker side of a live turn against the real daemon: the fixture image's live modes speak
//! the framed protocol over the real attached stdin and stdout, the model gateway forwards to a
//! scripted upstream on the host's loopback. (The real agent in the live image is exercised by
//! the live scenario suite.)

use std::collections::BTreeMap;
use std::sync::Arc;

use container::BollardRuntime;
use gateway::testkit::{Reply, ScriptedUpstream};
use gateway::{Credential, Gateway, GatewayConfig, OpenAiResponses};
use snapshot::{ApprovedTurn, DefaultPathPolicy, GitSnapshot, RepoPath};
use turn::{
    CodingWorkerRequest, LiveContext, LiveLog, LiveNote, LiveSettings, RepositoryDockerTurn,
    TurnConfig, TurnError, execute_live_turn,
};

use crate::support::*;

const TASK: &str = "Change nothing; report.";
const MODEL: &str = "gpt-5.3-codex";
const KEY: &str = "sk-docker-live-credential-5d1e";

async fn live_turn(
    docker: &BollardRuntime,
    mode: &str,
    wall: u64,
    upstream: &ScriptedUpstream,
) -> Result<(RepositoryDockerTurn, LiveLog), TurnError> {
    let files = BTreeMap::from([("app/a.txt", "one\n".to_owned())]);
    let (dir, commit) = git_repo(&files);
    let context = approval(dir.path(), &commit, TASK, &["app/"], &[], &[], &[]);
    let snap = GitSnapshot::load(dir.path(), &commit).unwrap();
    let evidence = snap
        .evidence("plan-t", "request-t", "app-t", "acme/fixture")
        .unwrap();
    let editable = vec![RepoPath::parse("app/a.txt").unwrap()];
    let request = CodingWorkerRequest::for_context(
        &context,
        TASK,
        snap.read_files(&editable).unwrap(),
        snap.read_files(&[]).unwrap(),
    );
    let (tag, id) = fixture_mode_image(mode);
    let config = TurnConfig::parse(&tag, &id, wall, 700_000).unwrap();
    let policy = DefaultPathPolicy::default();
    let approval = ApprovedTurn::new(
        &context,
        &evidence,
        &policy,
        Some(&snap),
        request.files.keys().cloned().collect(),
        &request.files,
    )
    .unwrap();
    let gateway = Arc::new(
        Gateway::new(
            GatewayConfig::for_model(MODEL),
            Arc::new(OpenAiResponses),
            Credential::from_value(KEY).unwrap(),
            upstream.base_url().parse().unwrap(),
        )
        .unwrap(),
    );
    let turn_gateway = gateway.start_turn();
    let settings = LiveSettings::codex(MODEL);
    let progress = |_: &LiveNote| {};
    let live = LiveContext {
        settings: &settings,
        gateway: &turn_gateway,
        progress: &progress,
    };
    execute_live_turn(docker, &request, &approval, &config, &live).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_live_turn_tunnels_a_model_request_over_the_attached_stdio() {
    let Some(docker) = docker().await else { return };
    let _guard = docker_lock().lock().await;
    let upstream = ScriptedUpstream::start([Reply::message("ok")])
        .await
        .unwrap();
    let (turn, log) = live_turn(&docker, "live", 60, &upstream).await.unwrap();
    assert_eq!(
        turn.proposal.owned_paths,
        vec![
            format!("model-{MODEL}"),
            "closing-fin".to_owned(),
            "status-200".to_owned(),
            "completed-true".to_owned(),
            "credential-seen-false".to_owned(),
        ]
    );
    assert_eq!(log.channels, 1);
    assert_eq!((log.gateway.requests, log.gateway.total_tokens), (1, 120));
    let requests = upstream.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        requests[0].header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_no_turn_containers(&docker).await;
    tally("docker_live_turn_tunnels_a_model_request_over_the_attached_stdio");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_live_turn_sends_stop_at_the_wall_budget() {
    let Some(docker) = docker().await else { return };
    let _guard = docker_lock().lock().await;
    let upstream = ScriptedUpstream::start([]).await.unwrap();
    let (turn, log) = live_turn(&docker, "live-stop", 2, &upstream).await.unwrap();
    assert!(log.stopped);
    assert!(
        turn.proposal
            .owned_paths
            .contains(&"stop-received".to_owned())
    );
    assert_no_turn_containers(&docker).await;
    tally("docker_live_turn_sends_stop_at_the_wall_budget");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_live_protocol_violation_fails_the_turn_and_removes_the_container() {
    let Some(docker) = docker().await else { return };
    let _guard = docker_lock().lock().await;
    let upstream = ScriptedUpstream::start([]).await.unwrap();
    let err = live_turn(&docker, "live-hostile", 60, &upstream)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "PATCH_CANDIDATE_TUNNEL_CHANNEL_UNKNOWN");
    assert!(upstream.requests().is_empty());
    assert_no_turn_containers(&docker).await;
    tally("docker_live_protocol_violation_fails_the_turn_and_removes_the_container");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_live_turn_ends_at_budget_plus_grace_when_the_container_stops_reading_stdin() {
    // The container sends one model request whose answer (16 MiB) overfills every buffer on the
    // way back, and never reads its stdin again: STOP cannot be written, yet the turn must end at
    // the wall budget plus the grace (2 s + 5 s), not at the outer deadline (2 s + 10 s + 5 s).
    let Some(docker) = docker().await else { return };
    let _guard = docker_lock().lock().await;
    let upstream = ScriptedUpstream::start([Reply::Huge {
        bytes: 16 * 1_048_576,
    }])
    .await
    .unwrap();
    // Build the throwaway tag before the clock starts.
    let _ = fixture_mode_image("live-deaf");
    let started = std::time::Instant::now();
    let err = live_turn(&docker, "live-deaf", 2, &upstream)
        .await
        .unwrap_err();
    let elapsed = started.elapsed();
    assert_eq!(err.code(), "REPOSITORY_DOCKER_TIMEOUT");
    assert_eq!(upstream.requests().len(), 1);
    assert!(
        elapsed < std::time::Duration::from_secs(12),
        "the turn ended after {elapsed:?}"
    );
    assert_no_turn_containers(&docker).await;
    tally("docker_live_turn_ends_at_budget_plus_grace_when_the_container_stops_reading_stdin");
}
