//! Live turns end to end: the real codex-acp in the live image (built from the binaries under
//! test), the worker's pipeline with the real tunnel and model gateway, and a scripted
//! Responses-API upstream on the host's loopback holding the script of the model. The candidate
//! is finalized, stored and verified against the repository; the credential reaches the upstream
//! on every forwarded request and never the container (its environment and files are searched
//! from inside by the agent's own shell, and every tunnelled byte is checked).

use std::collections::BTreeMap;

use gateway::GatewayConfig;
use gateway::testkit::{Reply, ScriptedUpstream};
use snapshot::{FileOp, RepoPath};
use turn::{Agent, LiveNote, PipelineOutcome, TurnError};

use crate::live_container::{TEST_LIVE_IMAGE, live_image};
use crate::support::*;

const MODEL: &str = "gpt-5.5";
const KEY: &str = "sk-live-e2e-credential-7f3a91c2";
const TASK: &str = "Edit app/a.txt and create app/new.txt.";

async fn live_pipeline(
    docker: &container::BollardRuntime,
    upstream: &ScriptedUpstream,
    gateway_config: GatewayConfig,
    wall: u64,
) -> LiveRun {
    let agent = LiveAgentUnderTest {
        agent: Agent::Codex,
        image: TEST_LIVE_IMAGE,
        image_id: live_image(),
        model: MODEL,
        key: KEY,
        build_tmp_mib: None,
    };
    let repo = LiveRepo {
        files: BTreeMap::from([
            ("app/a.txt", "one\n".to_owned()),
            ("app/b.txt", "two\n".to_owned()),
            ("docs/readme.md", "read me\n".to_owned()),
        ]),
        task: TASK,
        allowed: &["app/", "docs/"],
        read_only: &["docs/"],
        create: &["app/new.txt"],
    };
    crate::support::live_pipeline(docker, &agent, repo, upstream, gateway_config, wall, None).await
}

/// Every forwarded request carried the credential; no request body (the container's tunnelled
/// bytes as the upstream received them) contains it.
fn assert_key_only_upstream(upstream: &ScriptedUpstream) {
    assert_each_request_hides_key(upstream, KEY, |r| {
        assert_eq!(r.target, "/v1/responses");
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {KEY}").as_str())
        );
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_live_e2e_codex_edits_and_creates_through_the_gateway() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    // The agent's own shell searches the container for the key: the environment of the agent's
    // shell and of the container's init, the workspace and /etc; the output goes back to the
    // model in the next request.
    // The pattern matches the key without containing it (the command text travels back to the
    // model in the next request).
    let pattern = KEY.replacen("7f3a9", "7f3a[9]", 1);
    let probe = format!(
        "grep -rslE '{pattern}' /proc/self/environ /proc/1/environ /workspace /etc; echo probe-done"
    );
    let upstream = ScriptedUpstream::start([
        Reply::exec_command(&probe),
        Reply::apply_patch(
            "*** Begin Patch\n*** Update File: app/a.txt\n@@\n-one\n+one edited\n*** Add File: app/new.txt\n+created\n*** End Patch\n",
        ),
        Reply::message("Edited app/a.txt and created app/new.txt."),
    ])
    .await
    .unwrap();
    let run = live_pipeline(&docker, &upstream, GatewayConfig::for_model(MODEL), 120).await;
    let log = log_of(&run);
    let outcome = run.outcome.unwrap();
    let ops = ops(&outcome.candidate);
    assert_eq!(
        ops,
        vec![
            ("app/a.txt".to_owned(), FileOp::Update),
            ("app/new.txt".to_owned(), FileOp::Create)
        ]
    );
    // The digest is the candidate's own, and the candidate holds against the repository.
    assert_eq!(
        finalizer::repository_patch_digest(&outcome.candidate).unwrap(),
        outcome.digest
    );
    finalizer::verify_against_repository(&outcome.candidate, run.repo.path()).unwrap();
    assert_eq!(
        outcome.selected,
        vec![
            RepoPath::parse("app/a.txt").unwrap(),
            RepoPath::parse("app/b.txt").unwrap()
        ]
    );
    // Three model requests, all forwarded with the key; the probe found nothing inside.
    let requests = upstream.requests();
    assert_eq!(requests.len(), 3);
    assert_key_only_upstream(&upstream);
    let second: serde_json::Value = serde_json::from_slice(&requests[1].body).unwrap();
    let output = second["input"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "function_call_output")
        .and_then(|i| i["output"].as_str())
        .expect("the probe's output")
        .to_owned();
    let found: Vec<&str> = output
        .split_once("Output:\n")
        .expect("output section")
        .1
        .lines()
        .collect();
    assert_eq!(
        found,
        vec!["probe-done"],
        "the key was found inside: {output}"
    );
    let log = log.expect("live log");
    assert_eq!(log.gateway.requests, 3);
    assert_eq!(log.gateway.forwarded, 3);
    assert!(log.events.is_empty(), "{:?}", log.events);
    assert!(log.agent_events > 0);
    assert!(
        run.notes
            .iter()
            .any(|n| matches!(n, LiveNote::ModelRequest { .. }))
    );
    assert_clean_and_tally(
        &docker,
        "docker_live_e2e_codex_edits_and_creates_through_the_gateway",
    )
    .await;
}

/// One turn whose model requests the gateway may refuse: its outcome, the container gone, and
/// the key reached only the upstream. A refusal before any edit ends the turn without a
/// candidate, with the gateway's own refusal code as the turn's error (not the generic proposal
/// status).
async fn refused_case(
    name: &str,
    config: GatewayConfig,
    script: Vec<Reply>,
    wall: u64,
) -> (Result<PipelineOutcome, TurnError>, ScriptedUpstream) {
    let Some(docker) = docker().await else {
        panic!("unreachable: checked by the caller")
    };
    let upstream = ScriptedUpstream::start(script).await.unwrap();
    let run = live_pipeline(&docker, &upstream, config, wall).await;
    for r in upstream.requests() {
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {KEY}").as_str()),
            "{name}"
        );
        assert!(!String::from_utf8_lossy(&r.body).contains(KEY));
    }
    assert_no_turn_containers(&docker).await;
    (run.outcome, upstream)
}

fn codes(outcome: &Result<PipelineOutcome, TurnError>) -> String {
    match outcome {
        Ok(o) => format!(
            "ok: {:?}",
            o.live
                .as_ref()
                .map(|l| l.events.iter().map(|e| e.code).collect::<Vec<_>>())
        ),
        Err(e) => format!("err: {}", e.code()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_live_e2e_gateway_refusals() {
    if docker().await.is_none() {
        return;
    }
    let _guard = docker_lock().lock().await;
    // A model outside the allowlist.
    let (outcome, upstream) = refused_case(
        "model",
        GatewayConfig::for_model("some-other-model"),
        vec![Reply::message("never")],
        120,
    )
    .await;
    assert_eq!(codes(&outcome), "err: PATCH_CANDIDATE_GATEWAY_MODEL");
    assert!(upstream.requests().is_empty());

    // An oversized body.
    let mut small = GatewayConfig::for_model(MODEL);
    small.max_request_body_bytes = 1024;
    let (outcome, upstream) = refused_case("body", small, vec![Reply::message("never")], 120).await;
    assert_eq!(codes(&outcome), "err: PATCH_CANDIDATE_GATEWAY_BODY_SIZE");
    assert!(upstream.requests().is_empty());

    // A body deeper than the pre-scan allows (Codex's bodies nest a few levels): refused from
    // its bytes before any parse, nothing forwarded.
    let mut shallow = GatewayConfig::for_model(MODEL);
    shallow.max_request_body_depth = 2;
    let (outcome, upstream) =
        refused_case("depth", shallow, vec![Reply::message("never")], 120).await;
    assert_eq!(codes(&outcome), "err: PATCH_CANDIDATE_GATEWAY_BODY_DEPTH");
    assert!(upstream.requests().is_empty());

    // Too many requests: the budget allows one, the script needs two. Codex takes the refusal of
    // its second request as the end of its turn; the edit its first answer made is harvested
    // (as at the wall budget's STOP) and the refusal is on the turn's record.
    let mut one = GatewayConfig::for_model(MODEL);
    one.budgets.requests = 1;
    let (outcome, upstream) = refused_case(
        "requests",
        one,
        vec![
            Reply::edit_file("app/a.txt", "one", "one edited"),
            Reply::message("done"),
        ],
        120,
    )
    .await;
    assert_eq!(
        codes(&outcome),
        "ok: Some([\"PATCH_CANDIDATE_GATEWAY_BUDGET_REQUESTS\"])"
    );
    let outcome = outcome.unwrap();
    assert_eq!(
        ops(&outcome.candidate),
        vec![("app/a.txt".to_owned(), FileOp::Update)]
    );
    assert_eq!(outcome.live.as_ref().map(|l| l.gateway.refused), Some(1));
    assert_eq!(upstream.requests().len(), 1);
    tally("docker_live_e2e_gateway_refusals");
}

/// An upstream that reflects the request's headers (a debug proxy, a careless error page) into
/// its answer — here into an `apply_patch` that Codex applies — cannot get the key into the
/// container: the gateway scrubs the raw key, its base64 and the masked form from the answer in
/// transit, so the file the agent writes (and the candidate) holds the marker instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_live_e2e_a_reflecting_upstream_is_scrubbed_before_the_container() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let upstream = ScriptedUpstream::start([
        Reply::ReflectPatch {
            path: "app/new.txt".to_owned(),
        },
        Reply::message("Created app/new.txt."),
    ])
    .await
    .unwrap();
    let run = live_pipeline(&docker, &upstream, GatewayConfig::for_model(MODEL), 120).await;
    let log = log_of(&run).expect("live log");
    let outcome = run.outcome.unwrap();
    let files = outcome.candidate.changed_files();
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].path().as_str(), "app/new.txt");
    let content = files[0].content().expect("the created file").to_owned();
    let masked = format!("****{}", &KEY[KEY.len() - 4..]);
    assert!(!content.contains(KEY), "the key reached the workspace");
    assert!(!content.contains(&masked));
    assert!(content.contains(gateway::SCRUB_MARKER), "{content}");
    // The reflection itself went through (the other headers are there).
    assert!(
        content.contains("content-type: application/json"),
        "{content}"
    );
    // Raw key, its base64 and the masked form.
    assert!(log.gateway.scrubbed >= 3, "{:?}", log.gateway);
    assert!(
        log.events
            .iter()
            .any(|e| e.code == gateway::CREDENTIAL_SCRUBBED),
        "{:?}",
        log.events
    );
    assert_key_only_upstream(&upstream);
    assert_clean_and_tally(
        &docker,
        "docker_live_e2e_a_reflecting_upstream_is_scrubbed_before_the_container",
    )
    .await;
}
