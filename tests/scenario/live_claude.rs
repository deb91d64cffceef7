//! Live turns with Claude Code end to end: the real native `claude` driven by
//! `claude-agent-acp` (the locked npm tree on the build host's Node) in its real live image
//! (built from the runner under test, `images/build.sh --live --agent claude`), the worker's
//! pipeline with the real tunnel and the gateway's Anthropic Messages provider, and a scripted
//! `POST /v1/messages?beta=true` upstream on the host's loopback (`event:`/`data:` SSE with
//! `message_start` and cumulative `message_delta` usage). The runner hands Claude Code the
//! gateway through ACP `authenticate` (method `gateway`) and advertises no `fs`/`terminal`
//! capability, so Claude Code writes with its own tools inside the container.
//!
//! The image holds Anthropic's proprietary `claude`: it is built here, from the registry, and
//! never published. With `PATCH_CANDIDATE_REQUIRE_DOCKER=1` a missing daemon or a failed image
//! build fails these tests.

use std::sync::OnceLock;

use gateway::GatewayConfig;
use gateway::testkit::{RecordedRequest, Reply, ScriptedUpstream, Usage, anthropic};
use serde_json::json;
use turn::{Agent, LiveNote};

use crate::live_gemini::{
    agent_pipeline_with, agent_turn, assert_disallowed_model_refused, assert_edited_and_created,
    assert_refused_and_empty, assert_service_updated_only, search_container_for_key,
};
use crate::support::*;

const MODEL: &str = "claude-sonnet-4-5";
const KEY: &str = "sk-ant-live-claude-credential-51c0e2a7";
const TEST_CLAUDE_IMAGE: &str = "patch-candidate-live-claude:selftest";

static IMAGE: OnceLock<Result<String, String>> = OnceLock::new();

/// Builds the Claude live image with a throwaway tag from the runner under test.
fn claude_image() -> String {
    IMAGE
        .get_or_init(|| {
            build_live_image(
                Agent::Claude,
                TEST_CLAUDE_IMAGE,
                "claude-agent-acp",
                "0.101.0",
            )
        })
        .clone()
        .expect("Claude live image build failed")
}

/// Claude Code in its live image, with the model and key of these tests.
fn claude_agent() -> LiveAgentUnderTest {
    LiveAgentUnderTest {
        agent: Agent::Claude,
        image: TEST_CLAUDE_IMAGE,
        image_id: claude_image(),
        model: MODEL,
        key: KEY,
        build_tmp_mib: None,
    }
}

/// Every forwarded request went to a Messages route with Anthropic's fixed query and carried the
/// key in `x-api-key` only (the adapter's `Bearer acp-proxy` never reaches the upstream); no
/// tunnelled byte contains the key.
fn assert_key_only_upstream(upstream: &ScriptedUpstream) {
    assert_each_request_hides_key(upstream, KEY, |r| {
        assert_eq!(r.method, "POST");
        assert!(
            r.target == "/v1/messages?beta=true"
                || r.target == "/v1/messages/count_tokens?beta=true",
            "{}",
            r.target
        );
        assert_eq!(r.header("x-api-key"), Some(KEY));
        assert_eq!(r.header("authorization"), None);
    });
}

/// The upstream's agent-loop Messages requests (title requests and count_tokens left out).
fn messages(upstream: &ScriptedUpstream) -> Vec<RecordedRequest> {
    upstream
        .requests()
        .into_iter()
        .filter(|r| r.target == "/v1/messages?beta=true" && !anthropic::is_title_request(r))
        .collect()
}

const TITLE_USAGE: Usage = Usage {
    input: 500,
    output: 9,
    total: 509,
};

const USAGES: [Usage; 4] = [
    Usage {
        input: 3000,
        output: 40,
        total: 3040,
    },
    Usage {
        input: 3100,
        output: 50,
        total: 3150,
    },
    Usage {
        input: 3200,
        output: 30,
        total: 3230,
    },
    Usage {
        input: 3300,
        output: 20,
        total: 3320,
    },
];

/// A scripted Claude model ([`anthropic::claude_code`]) answering the agent loop with `steps`.
async fn claude_upstream(steps: Vec<Reply>) -> ScriptedUpstream {
    let upstream = ScriptedUpstream::start([]).await.unwrap();
    anthropic::claude_code(
        &upstream,
        MODEL,
        steps,
        TITLE_USAGE,
        anthropic::text(MODEL, "Done.", USAGES[3]),
    );
    upstream
}

/// Claude Code's `Read` of the workspace file `path`.
fn read(path: &str, usage: Usage) -> Reply {
    let input = json!({"file_path": format!("{{workdir}}/{path}")});
    anthropic::tool_use(MODEL, "Read", &input, usage)
}

/// Claude Code's `Edit` of the workspace file `path`: `old` becomes `new`.
fn edit(path: &str, old: &str, new: &str, usage: Usage) -> Reply {
    let input = json!({"file_path": format!("{{workdir}}/{path}"), "old_string": old,
                       "new_string": new});
    anthropic::tool_use(MODEL, "Edit", &input, usage)
}

/// Claude Code's `Write` of `content` to the workspace file `path`.
fn write(path: &str, content: &str, usage: Usage) -> Reply {
    let input = json!({"file_path": format!("{{workdir}}/{path}"), "content": content});
    anthropic::tool_use(MODEL, "Write", &input, usage)
}

/// Read, edit, create, done: Claude Code's own tools (it must read a file before it edits it).
async fn edit_and_create_upstream() -> ScriptedUpstream {
    claude_upstream(vec![
        read("app/service.py", USAGES[0]),
        edit("app/service.py", "return 1", "return 2", USAGES[1]),
        write("app/new.py", "X = 1\n", USAGES[2]),
        anthropic::text(MODEL, "Changed answer and added app/new.py.", USAGES[3]),
    ])
    .await
}

async fn edits_and_creates(docker: &container::BollardRuntime, runtime: Option<&str>) {
    let upstream = edit_and_create_upstream().await;
    let run = agent_turn(docker, &claude_agent(), &upstream, 240, runtime).await;
    let log = log_of(&run);
    let outcome = match run.outcome {
        Ok(o) => o,
        Err(e) => panic!(
            "turn failed: {e} ({} model requests; notes {:?})",
            upstream.requests().len(),
            run.notes
        ),
    };
    assert_edited_and_created(&outcome, run.repo.path());
    assert_key_only_upstream(&upstream);
    let sent = messages(&upstream);
    assert_eq!(sent.len(), 4, "one Messages request per scripted answer");
    for r in &sent {
        assert_eq!(r.json().unwrap()["model"], MODEL);
    }
    // The second request carries the read's result back to the model.
    let second = String::from_utf8_lossy(&sent[1].body).into_owned();
    assert!(second.contains("tool_result"), "no tool result sent");
    let log = log.expect("live log");
    assert_eq!(log.gateway.requests as usize, upstream.requests().len());
    assert!(log.events.is_empty(), "{:?}", log.events);
    // The gateway's count is what the upstream reported: message_start's input plus the last,
    // cumulative message_delta output, summed over the answers (count_tokens spends none).
    let titles = upstream
        .requests()
        .iter()
        .filter(|r| anthropic::is_title_request(r))
        .count();
    let answered = || {
        USAGES
            .iter()
            .chain(std::iter::repeat_n(&TITLE_USAGE, titles))
    };
    let input: u64 = answered().map(|u| u.input).sum();
    let output: u64 = answered().map(|u| u.output).sum();
    assert_eq!(log.gateway.input_tokens, input);
    assert_eq!(log.gateway.output_tokens, output);
    assert_eq!(log.gateway.total_tokens, input + output);
    assert_eq!(log.gateway.usage_missing, 0);
    assert_no_turn_containers(docker).await;
}

runc_and_runsc_tests!(
    edits_and_creates,
    docker_live_claude_edits_and_creates_through_the_gateway,
    /// The same turn under gVisor's runsc, with the runsc turn seccomp profile.
    docker_live_claude_runsc_edits_and_creates_through_the_gateway,
);

/// A model outside the allowlist: the gateway refuses the first request with its own code, and
/// the turn ends with that code, not a generic one; nothing reaches the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_live_claude_a_disallowed_model_is_refused_with_the_gateway_code() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let upstream = edit_and_create_upstream().await;
    assert_disallowed_model_refused(
        &docker,
        &claude_agent(),
        &upstream,
        "claude-opus-4-1",
        240,
        "docker_live_claude_a_disallowed_model_is_refused_with_the_gateway_code",
    )
    .await;
}

/// Writing outside the approval (`app/other.py` is not granted, `docs/` is read-only): the
/// runner's policy refuses both of Claude Code's permission requests and nothing is proposed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_live_claude_an_ungranted_create_and_a_read_only_edit_are_refused() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let upstream = claude_upstream(vec![
        write("app/other.py", "Y = 2\n", USAGES[0]),
        read("docs/readme.md", USAGES[1]),
        edit("docs/readme.md", "read me", "changed", USAGES[2]),
        anthropic::text(MODEL, "Done.", USAGES[3]),
    ])
    .await;
    let run = agent_turn(&docker, &claude_agent(), &upstream, 240, None).await;
    assert_refused_and_empty(&run, 2);
    assert_eq!(
        messages(&upstream).len(),
        4,
        "the turn went on after each refusal"
    );
    assert_key_only_upstream(&upstream);
    assert_clean_and_tally(
        &docker,
        "docker_live_claude_an_ungranted_create_and_a_read_only_edit_are_refused",
    )
    .await;
}

/// A stream that goes silent after its first events: the worker's wall budget sends STOP, the
/// runner harvests what Claude Code wrote before the stall (the read and the edit), and the
/// candidate verifies; the turn ends within its budget. During the stall the running container
/// (every process's environment and command line, every file) holds no trace of the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_live_claude_a_stalled_stream_is_ended_by_the_wall_budget() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let upstream = claude_upstream(vec![
        read("app/service.py", USAGES[0]),
        edit("app/service.py", "return 1", "return 2", USAGES[1]),
        Reply::Stall(vec![anthropic::message_start(MODEL, 3200, 0)]),
    ])
    .await;
    let started = std::time::Instant::now();
    // While the stream stalls, the running container is searched for the key from outside.
    let agent = claude_agent();
    let (run, found) = tokio::join!(
        agent_turn(&docker, &agent, &upstream, 45, None),
        search_container_for_key(&docker, || messages(&upstream).len() >= 3, KEY)
    );
    let elapsed = started.elapsed();
    assert!(found.is_empty(), "the key was found inside: {found:?}");
    let log = log_of(&run).expect("a stopped turn still has its live log");
    assert!(log.stopped, "STOP was not sent");
    assert!(
        run.notes.iter().any(|n| matches!(n, LiveNote::Stopped)),
        "no STOP note"
    );
    assert!(
        elapsed < std::time::Duration::from_secs(120),
        "the turn outlived its wall budget by far: {elapsed:?}"
    );
    let outcome = match run.outcome {
        Ok(o) => o,
        Err(e) => panic!("the edit before the stall was not harvested: {e}"),
    };
    assert_service_updated_only(&outcome, run.repo.path());
    assert_eq!(messages(&upstream).len(), 3);
    assert_key_only_upstream(&upstream);
    assert_clean_and_tally(
        &docker,
        "docker_live_claude_a_stalled_stream_is_ended_by_the_wall_budget",
    )
    .await;
}

/// Claude Code's `count_tokens` side call, end to end. Claude Code's `Read` asks the API for a
/// file's exact token count when its own estimate is large: here the model reads a 48 KB
/// `docs/big.md`, Claude Code sends `POST /v1/messages/count_tokens?beta=true` with the file's
/// text, the gateway forwards it (model checked in the body, key in `x-api-key`, charged to the
/// request budgets and to no token count), the read's result goes back to the model, and the
/// turn goes on to an edit that verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_live_claude_a_count_tokens_side_call_is_forwarded_and_not_counted() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let big: String = (0..1600)
        .map(|i| format!("line {i:04} of the long read-me\n"))
        .collect();
    assert!(big.len() > 45_000);
    let upstream = claude_upstream(vec![
        read("docs/big.md", USAGES[0]),
        read("app/service.py", USAGES[1]),
        edit("app/service.py", "return 1", "return 2", USAGES[2]),
    ])
    .await;
    let run = agent_pipeline_with(
        &docker,
        &claude_agent(),
        &upstream,
        GatewayConfig::for_model(MODEL),
        240,
        None,
        &[("docs/big.md", &big)],
    )
    .await;
    let log = log_of(&run);
    let outcome = match run.outcome {
        Ok(o) => o,
        Err(e) => panic!("turn failed: {e} (notes {:?})", run.notes),
    };
    assert_key_only_upstream(&upstream);
    let requests = upstream.requests();
    let counts: Vec<&RecordedRequest> = requests
        .iter()
        .filter(|r| r.target == "/v1/messages/count_tokens?beta=true")
        .collect();
    assert!(!counts.is_empty(), "no count_tokens side call");
    assert!(
        counts.iter().any(|r| {
            String::from_utf8_lossy(&r.body).contains("line 1599 of the long read-me")
        }),
        "no side call carried the file's text"
    );
    for r in &counts {
        assert_eq!(r.json().unwrap()["model"], MODEL);
    }
    // The read's result reached the model after the count.
    let sent = messages(&upstream);
    assert_eq!(sent.len(), 4, "one Messages request per scripted answer");
    assert!(String::from_utf8_lossy(&sent[1].body).contains("line 1599 of the long read-me"));
    let log = log.expect("live log");
    assert_eq!(log.gateway.requests as usize, requests.len());
    assert_eq!(log.gateway.forwarded as usize, requests.len());
    assert_eq!(log.gateway.refused, 0);
    // Tokens are the Messages answers' only (title requests included): a count spends none.
    let titles = requests
        .iter()
        .filter(|r| anthropic::is_title_request(r))
        .count() as u64;
    let input = USAGES.iter().map(|u| u.input).sum::<u64>() + titles * TITLE_USAGE.input;
    let output = USAGES.iter().map(|u| u.output).sum::<u64>() + titles * TITLE_USAGE.output;
    assert_eq!(log.gateway.input_tokens, input);
    assert_eq!(log.gateway.output_tokens, output);
    assert_eq!(log.gateway.usage_missing, 0);
    assert_service_updated_only(&outcome, run.repo.path());
    assert_clean_and_tally(
        &docker,
        "docker_live_claude_a_count_tokens_side_call_is_forwarded_and_not_counted",
    )
    .await;
}

runc_and_runsc_tests!(
    cli_round_trip,
    /// `patch-candidate run --live --agent claude` end to end (runc): a verified candidate from
    /// the real Claude Code, the key only in `x-api-key`, the CLI's gateway count the upstream's.
    docker_cli_run_live_claude_produces_a_verified_candidate,
    /// The same `run --live --agent claude` with `--runtime runsc`.
    docker_cli_run_live_claude_runsc_produces_a_verified_candidate,
);

async fn cli_round_trip(docker: &container::BollardRuntime, runtime: Option<&'static str>) {
    let upstream = edit_and_create_upstream().await;
    let doc = crate::cli_live::run_live_cli(docker, &claude_agent(), &upstream, runtime).await;
    assert_key_only_upstream(&upstream);
    assert_eq!(messages(&upstream).len(), 4);
    // message_start's input plus the last message_delta output per answer, title included.
    let titles = upstream
        .requests()
        .iter()
        .filter(|r| anthropic::is_title_request(r))
        .count() as u64;
    let total: u64 = USAGES.iter().map(|u| u.input + u.output).sum::<u64>()
        + titles * (TITLE_USAGE.input + TITLE_USAGE.output);
    assert_eq!(
        doc["gateway"]["gateway"]["requests"],
        upstream.requests().len()
    );
    assert_eq!(doc["gateway"]["gateway"]["total_tokens"], total);
}

/// A shell command in the image `FROM scratch`: the runner allows Claude Code's `Bash`
/// permission request (the container is the sandbox), but that image holds no `bash`, so the
/// tool fails, nothing is written, and the proposal is empty. (With a toolchain, in a live image
/// on an environment, commands run: `live_commands.rs`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_live_claude_a_shell_command_without_bash_changes_nothing() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let upstream = claude_upstream(vec![
        anthropic::tool_use(
            MODEL,
            "Bash",
            &json!({"command": "echo owned > /tmp/outside && echo owned > {workdir}/app/service.py",
                    "description": "write outside"}),
            USAGES[0],
        ),
        anthropic::text(MODEL, "Done.", USAGES[1]),
    ])
    .await;
    let run = agent_turn(&docker, &claude_agent(), &upstream, 240, None).await;
    assert_refused_and_empty(&run, 0);
    let failed = run.notes.iter().any(|n| {
        matches!(n, LiveNote::AgentEvent(e) if e.get("event") == Some(&json!("tool_call"))
            && e.get("status") == Some(&json!("failed")))
    });
    assert!(failed, "{:?}", run.notes);
    assert_eq!(messages(&upstream).len(), 2);
    assert_key_only_upstream(&upstream);
    assert_clean_and_tally(
        &docker,
        "docker_live_claude_a_shell_command_without_bash_changes_nothing",
    )
    .await;
}
