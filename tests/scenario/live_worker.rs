//! The worker side of a live turn against the real daemon: the fixture image's live modes speak
//! the framed protocol over the real attached stdin and stdout, the model gateway forwards to a
//! scripted upstream on the host's loopback. (The real agent in the live image is exercised by
//! the live scenario suite.)

use std::collections::BTreeMap;
use std::sync::Arc;

use container::BollardRuntime;
use gateway::GatewayConfig;
use gateway::testkit::{Reply, ScriptedUpstream};
use snapshot::{ApprovedTurn, DefaultPathGuard, GitSnapshot, RepoPath};
use turn::{
    Agent, CodingWorkerRequest, LiveContext, LiveLog, LiveNote, LiveProgress, LiveSettings,
    RepositoryDockerTurn, TurnConfig, TurnError, execute_live_turn,
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
    live_turn_with(
        docker,
        mode,
        wall,
        upstream,
        GatewayConfig::for_model(MODEL),
        &|_| {},
    )
    .await
}

/// [`live_turn`] under a gateway `config`, with every progress note passed to `progress`.
async fn live_turn_with(
    docker: &BollardRuntime,
    mode: &str,
    wall: u64,
    upstream: &ScriptedUpstream,
    gateway_config: GatewayConfig,
    progress: &LiveProgress,
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
    let policy = DefaultPathGuard::default();
    let approval = ApprovedTurn::new(
        &context,
        &evidence,
        &policy,
        Some(&snap),
        request.files.keys().cloned().collect(),
        &request.files,
    )
    .unwrap();
    let gateway = scripted_gateway(Agent::Codex, gateway_config, KEY, upstream);
    let turn_gateway = gateway.start_turn();
    let settings = LiveSettings::codex(MODEL);
    let live = LiveContext {
        settings: &settings,
        gateway: &turn_gateway,
        progress,
    };
    execute_live_turn(docker, &request, &approval, &config, &live).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_live_turn_tunnels_a_model_request_over_the_attached_stdio() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
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
    assert_eq!(upstream.authorizations(), [Some(format!("Bearer {KEY}"))]);
    assert_clean_and_tally(
        &docker,
        "docker_live_turn_tunnels_a_model_request_over_the_attached_stdio",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_live_turn_sends_stop_at_the_wall_budget() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let upstream = ScriptedUpstream::start([]).await.unwrap();
    let (turn, log) = live_turn(&docker, "live-stop", 2, &upstream).await.unwrap();
    assert!(log.stopped);
    assert!(
        turn.proposal
            .owned_paths
            .contains(&"stop-received".to_owned())
    );
    assert_clean_and_tally(&docker, "docker_live_turn_sends_stop_at_the_wall_budget").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_live_protocol_violation_fails_the_turn_and_removes_the_container() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let upstream = ScriptedUpstream::start([]).await.unwrap();
    let err = live_turn(&docker, "live-hostile", 60, &upstream)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "PATCH_CANDIDATE_TUNNEL_CHANNEL_UNKNOWN");
    assert!(upstream.requests().is_empty());
    assert_clean_and_tally(
        &docker,
        "docker_live_protocol_violation_fails_the_turn_and_removes_the_container",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_live_turn_ends_at_budget_plus_grace_when_the_container_stops_reading_stdin() {
    // The container sends one model request whose answer (16 MiB) overfills every buffer on the
    // way back, and never reads its stdin again: STOP cannot be written, yet the turn must end at
    // the wall budget plus the grace (2 s + 5 s), not at the outer deadline (2 s + 10 s + 5 s).
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
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
    assert_clean_and_tally(
        &docker,
        "docker_live_turn_ends_at_budget_plus_grace_when_the_container_stops_reading_stdin",
    )
    .await;
}

// ---- Issue 22's findings through a real container ----

/// How a flooded channel may end: the gateway's cut for bytes past its request, or the worker's
/// reset of a backlog whose consumer fell behind.
fn flood_cut(code: &str) -> bool {
    code == "PATCH_CANDIDATE_GATEWAY_INCOMPLETE" || code == "PATCH_CANDIDATE_TUNNEL_CHANNEL_BACKLOG"
}

/// The most allocated backlog one channel may hold (docs/LIVE.md): its 1 MiB of 16 KiB blocks,
/// plus the block being filled and the one in flight.
const ONE_CHANNEL_BACKLOG_BOUND: u64 = 1_048_576 + 2 * 16 * 1024;

/// The fact of `turn` after `prefix`, if the container reported one.
fn fact<'a>(turn: &'a RepositoryDockerTurn, prefix: &str) -> Option<&'a str> {
    turn.proposal
        .owned_paths
        .iter()
        .find_map(|f| f.strip_prefix(prefix))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_live_one_byte_frames_on_a_held_channel_are_cut_within_the_backlog_bound() {
    // Finding 1: the upstream holds the request; the container then sends about 8 M one-byte
    // DATA frames on that channel (the per-channel byte cap less the request, so no tunnel cap
    // fires). The channel is cut, the host holds at most one channel's backlog, the turn ends.
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let upstream =
        ScriptedUpstream::start([Reply::Stall(vec![gateway::testkit::events::created("r")])])
            .await
            .unwrap();
    let (turn, log) = live_turn(&docker, "live-flood", 300, &upstream)
        .await
        .unwrap();
    let sent: u64 = fact(&turn, "flood-frames-").unwrap().parse().unwrap();
    assert!(sent > 8_000_000, "{sent} frames sent");
    let reset = fact(&turn, "reset-").unwrap();
    assert!(flood_cut(reset), "{:?}", turn.proposal.owned_paths);
    assert_eq!(log.channels, 1);
    assert_eq!(log.events.len(), 1, "{:?}", log.events);
    assert_eq!(log.events[0].channel, 1);
    assert!(flood_cut(log.events[0].code), "{:?}", log.events);
    assert!(log.backlog_peak_bytes > 0);
    assert!(
        log.backlog_peak_bytes <= ONE_CHANNEL_BACKLOG_BOUND,
        "peak {} above {ONE_CHANNEL_BACKLOG_BOUND}",
        log.backlog_peak_bytes
    );
    assert_eq!(upstream.requests().len(), 1);
    assert_clean_and_tally(
        &docker,
        "docker_live_one_byte_frames_on_a_held_channel_are_cut_within_the_backlog_bound",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_live_resetting_each_channel_as_text_starts_does_not_dodge_the_token_budget() {
    // Finding 4: five requests, each answered with 1.5 M tokens under a 2 M budget; the container
    // resets every channel as soon as the answer's text starts. Every forwarded answer is still
    // drained to its usage and charged, and the next request's budget check waits for the
    // drains it knows of, so the first two are forwarded (1.5 M, then 3 M charged) and the
    // budget refuses the rest (a third may pass if its check raced the second's reset).
    const TOKENS: u64 = 1_500_000;
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let upstream = ScriptedUpstream::start([]).await.unwrap();
    // Room for the container's RESET to land before the usage event, however slow it is.
    upstream.set_fallback(Reply::paced_partial_answer(TOKENS, 1_000));
    let mut config = GatewayConfig::for_model(MODEL);
    config.budgets.tokens = 2_000_000;
    let (turn, log) = live_turn_with(
        &docker,
        "live-reset-on-text",
        120,
        &upstream,
        config,
        &|_| {},
    )
    .await
    .unwrap();
    // Two, or three when a reset was still crossing the next request when that request's
    // budget check ran (its answer was not yet known to be orphaned); never more, and every
    // forwarded answer is charged in full.
    let forwarded = log.gateway.forwarded;
    assert!((2..=3).contains(&forwarded), "{forwarded} forwarded");
    assert_eq!(u64::try_from(upstream.requests().len()).unwrap(), forwarded);
    assert_eq!(log.gateway.requests, 5);
    assert_eq!(
        (
            log.gateway.total_tokens,
            log.gateway.drained,
            log.gateway.usage_missing
        ),
        (forwarded * TOKENS, forwarded, 0)
    );
    let refused = usize::try_from(5 - forwarded).unwrap();
    let codes: Vec<&str> = log.events.iter().map(|e| e.code).collect();
    assert_eq!(
        codes,
        vec!["PATCH_CANDIDATE_GATEWAY_BUDGET_TOKENS"; refused]
    );
    // What the container saw: its own resets on the forwarded answers, 429 on the others.
    let forwarded = usize::try_from(forwarded).unwrap();
    let expected: Vec<String> = (1..=5)
        .map(|n| {
            if n <= forwarded {
                format!("channel-{n}-reset-sent")
            } else {
                format!("channel-{n}-status-429")
            }
        })
        .collect();
    assert_eq!(turn.proposal.owned_paths[1..], expected[..]);
    assert_clean_and_tally(
        &docker,
        "docker_live_resetting_each_channel_as_text_starts_does_not_dodge_the_token_budget",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_live_event_flood_reaches_the_progress_sink_within_the_cap_then_one_summary() {
    // Finding 6: the tunnel's whole EVENT allowance (10,000 of 4,000 bytes, 40 MB): the operator's
    // progress sink sees at most the per-turn byte cap (256 KiB), then one summary of the rest.
    const EVENTS: u32 = 10_000;
    const LEN: u64 = 4_000;
    const SHOWN_CAP: u64 = 256 * 1024;
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let upstream = ScriptedUpstream::start([]).await.unwrap();
    let notes = Arc::new(std::sync::Mutex::new(Vec::<LiveNote>::new()));
    let sink = Arc::clone(&notes);
    let progress = move |n: &LiveNote| sink.lock().unwrap().push(n.clone());
    let (turn, log) = live_turn_with(
        &docker,
        "live-event-flood",
        120,
        &upstream,
        GatewayConfig::for_model(MODEL),
        &progress,
    )
    .await
    .unwrap();
    assert_eq!(fact(&turn, "events-sent-"), Some("10000"));
    let notes = notes.lock().unwrap().clone();
    let shown: Vec<u64> = notes
        .iter()
        .filter_map(|n| match n {
            LiveNote::AgentEvent(map) => Some(serde_json::to_vec(map).unwrap().len() as u64),
            _ => None,
        })
        .collect();
    assert!(!shown.is_empty());
    assert!(shown.iter().all(|len| *len == LEN), "{shown:?}");
    let shown = u32::try_from(shown.len()).unwrap();
    assert!(u64::from(shown) * LEN <= SHOWN_CAP, "{shown} events shown");
    let rest = EVENTS - shown;
    let summaries: Vec<(u32, u64)> = notes
        .iter()
        .filter_map(|n| match n {
            LiveNote::AgentEventsSuppressed { events, bytes } => Some((*events, *bytes)),
            _ => None,
        })
        .collect();
    assert_eq!(summaries, vec![(rest, u64::from(rest) * LEN)]);
    assert_eq!(
        (log.agent_events, log.agent_events_suppressed),
        (EVENTS, rest)
    );
    assert!(upstream.requests().is_empty());
    assert_clean_and_tally(
        &docker,
        "docker_live_event_flood_reaches_the_progress_sink_within_the_cap_then_one_summary",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_live_request_pipelined_across_frames_is_refused_and_never_forwarded() {
    // Finding 7: once the first request's answer streams, a second request on the same channel,
    // split across two DATA frames sent apart: the channel is cut with `_INCOMPLETE`, only the
    // first request reached the upstream, and its answer is still drained and charged.
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let upstream = ScriptedUpstream::start([Reply::Paced {
        events: vec![
            gateway::testkit::events::created("r"),
            gateway::testkit::events::text_delta("partial answer"),
            gateway::testkit::events::completed("r", gateway::testkit::DEFAULT_USAGE),
        ],
        pause_ms: 1_000,
    }])
    .await
    .unwrap();
    let (turn, log) = live_turn(&docker, "live-pipeline", 60, &upstream)
        .await
        .unwrap();
    assert_eq!(
        fact(&turn, "closing-"),
        Some("reset-PATCH_CANDIDATE_GATEWAY_INCOMPLETE"),
        "{:?}",
        turn.proposal.owned_paths
    );
    assert_eq!(log.channels, 1);
    let codes: Vec<(u32, &str)> = log.events.iter().map(|e| (e.channel, e.code)).collect();
    assert_eq!(codes, vec![(1, "PATCH_CANDIDATE_GATEWAY_INCOMPLETE")]);
    assert_eq!(upstream.requests().len(), 1);
    assert_eq!(
        (
            log.gateway.requests,
            log.gateway.forwarded,
            log.gateway.total_tokens
        ),
        (1, 1, 120)
    );
    assert_clean_and_tally(
        &docker,
        "docker_live_request_pipelined_across_frames_is_refused_and_never_forwarded",
    )
    .await;
}
