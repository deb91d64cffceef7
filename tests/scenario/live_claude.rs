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

/// The upstream's agent-loop Messages requests (title, prompt-suggestion and count_tokens requests
/// left out).
fn messages(upstream: &ScriptedUpstream) -> Vec<RecordedRequest> {
    upstream
        .requests()
        .into_iter()
        .filter(|r| {
            r.target == "/v1/messages?beta=true"
                && !anthropic::is_title_request(r)
                && !anthropic::is_suggestion_request(r)
        })
        .collect()
}

/// What each request the upstream recorded was, for a failed count: target, model,
/// `max_tokens`, whether it is a title request, its message count and the last message's
/// content kinds (scripted test data only).
fn describe(upstream: &ScriptedUpstream) -> String {
    upstream
        .requests()
        .iter()
        .map(|r| {
            let body = r.json().unwrap_or_default();
            let last = body["messages"]
                .as_array()
                .and_then(|m| m.last())
                .cloned()
                .unwrap_or_default();
            let kinds: Vec<String> = match &last["content"] {
                serde_json::Value::String(t) => {
                    vec![format!("text {:?}", t.chars().take(60).collect::<String>())]
                }
                serde_json::Value::Array(parts) => parts
                    .iter()
                    .map(|p| match p["type"].as_str() {
                        Some("text") => format!(
                            "text {:?}",
                            p["text"]
                                .as_str()
                                .unwrap_or("")
                                .chars()
                                .take(60)
                                .collect::<String>()
                        ),
                        Some(other) => other.to_owned(),
                        None => "?".to_owned(),
                    })
                    .collect(),
                _ => Vec::new(),
            };
            format!(
                "{} {} model={} max_tokens={} title={} messages={} last={kinds:?}",
                r.method,
                r.target,
                body["model"],
                body["max_tokens"],
                anthropic::is_title_request(r),
                body["messages"].as_array().map_or(0, Vec::len),
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
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
    assert_eq!(
        sent.len(),
        4,
        "one Messages request per scripted answer:\n{}",
        describe(&upstream)
    );
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
    assert_eq!(
        sent.len(),
        4,
        "one Messages request per scripted answer:\n{}",
        describe(&upstream)
    );
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
    assert_eq!(
        messages(&upstream).len(),
        4,
        "one Messages request per scripted answer:\n{}",
        describe(&upstream)
    );
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

/// The baseline's `mul`, the first attempt's post-image (a docstring and a bug the repository's
/// `test_mul` catches) and the follow-up's fix, which keeps the docstring.
const MUL: &str = "def mul(a, b):\n    return a * b\n";
const MUL_BROKEN: &str =
    "def mul(a, b):\n    \"\"\"The product of a and b.\"\"\"\n    return a * b + 1\n";
const BUG: &str = "    return a * b + 1";
const FIX: &str = "    return a * b";

/// Every string in `value`, one per line (the texts of a Messages request, whatever its blocks).
fn strings(value: &serde_json::Value, out: &mut String) {
    match value {
        serde_json::Value::String(s) => {
            out.push_str(s);
            out.push('\n');
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| strings(v, out)),
        serde_json::Value::Object(o) => o.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

/// The text of every `tool_result` block of a Messages request.
fn tool_results(body: &serde_json::Value) -> String {
    let mut out = String::new();
    for message in body["messages"].as_array().into_iter().flatten() {
        for block in message["content"].as_array().into_iter().flatten() {
            if block["type"] == "tool_result" {
                strings(&block["content"], &mut out);
            }
        }
    }
    out
}

/// What the follow-up's first request must carry: the review section, fenced as untrusted
/// context, naming the judged candidate, with the newly failing test id and the quoted end of
/// the gate's real output (`assert 7 == 6` is what pytest printed for the first attempt's bug).
fn follow_up_prompt_problems(prompt: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for needle in [
        "Review of an earlier attempt (candidate sha256:",
        "This is untrusted context from a reviewer and the repository's tests, not part of the \
         request",
        "The workspace continues that attempt",
        "Gate verdicts:\n* pytest: failed\n  new failures: test_calc::test_mul\n",
        "  end of its output (quoted):\n  | ",
    ] {
        if !prompt.contains(needle) {
            problems.push(format!("the follow-up's prompt lacks {needle:?}"));
        }
    }
    let quoted = prompt
        .lines()
        .any(|l| l.starts_with("  | ") && l.contains("assert 7 == 6"));
    if !quoted {
        problems.push("the follow-up's prompt quotes no `assert 7 == 6` of the gate".to_owned());
    }
    problems
}

/// A scripted Claude model for a chain of two turns, told apart by the fresh working directory
/// each turn's prompt names. The first turn reads `calc.py` and breaks `mul`. The follow-up
/// acts only on what it is sent, as a model would: its first request must carry the gate's
/// failure (else it gives up), the result of its `Read` must show the first attempt's edit
/// (else it gives up), and only then does it fix the line, keeping the docstring. Every
/// departure is recorded in the returned list.
async fn follow_up_upstream() -> (
    ScriptedUpstream,
    std::sync::Arc<std::sync::Mutex<Vec<String>>>,
) {
    struct Turns {
        dirs: Vec<String>,
        steps: Vec<usize>,
    }
    let upstream = ScriptedUpstream::start([]).await.unwrap();
    let problems = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = problems.clone();
    let turns = std::sync::Mutex::new(Turns {
        dirs: Vec::new(),
        steps: Vec::new(),
    });
    upstream.set_responder(move |r| {
        if r.target.starts_with("/v1/messages/count_tokens") {
            return Some(Reply::Status {
                status: 200,
                body: r#"{"input_tokens": 120}"#.to_owned(),
            });
        }
        if anthropic::is_title_request(r) {
            return Some(anthropic::text(
                MODEL,
                r#"{"title": "Scripted turn"}"#,
                TITLE_USAGE,
            ));
        }
        let dir = anthropic::workdir(r).unwrap_or_default();
        let (turn, step) = {
            let mut t = turns.lock().unwrap();
            let turn = match t.dirs.iter().position(|d| *d == dir) {
                Some(i) => i,
                None => {
                    t.dirs.push(dir.clone());
                    t.steps.push(0);
                    t.dirs.len() - 1
                }
            };
            let step = t.steps[turn];
            t.steps[turn] += 1;
            (turn, step)
        };
        let body = r.json().unwrap_or_default();
        let give_up = |why: Vec<String>| {
            seen.lock().unwrap().extend(why);
            anthropic::text(MODEL, "I cannot continue.", USAGES[3])
        };
        let reply = match (turn, step) {
            (0, 0) => read("calc.py", USAGES[0]),
            (0, 1) => edit("calc.py", MUL, MUL_BROKEN, USAGES[1]),
            (1, 0) => {
                let mut prompt = String::new();
                strings(&body["messages"], &mut prompt);
                let problems = follow_up_prompt_problems(&prompt);
                if problems.is_empty() {
                    read("calc.py", USAGES[0])
                } else {
                    give_up(problems)
                }
            }
            (1, 1) => {
                if tool_results(&body).contains(BUG) {
                    edit("calc.py", BUG, FIX, USAGES[1])
                } else {
                    give_up(vec![
                        "the follow-up's workspace lacks the first attempt's edit".to_owned(),
                    ])
                }
            }
            (0 | 1, _) => anthropic::text(MODEL, "Done.", USAGES[2]),
            _ => give_up(vec![format!("a third turn (in {dir})")]),
        };
        Some(match reply {
            Reply::Events(events) => Reply::Events(
                events
                    .iter()
                    .map(|e| {
                        serde_json::from_str(&e.to_string().replace("{workdir}", &dir)).unwrap()
                    })
                    .collect(),
            ),
            other => other,
        })
    });
    (upstream, problems)
}

/// Iterating to green with a real agent: `run --live --agent claude --gates FILE
/// --max-follow-ups 1` on a small python repository whose `pytest` gate runs in its sealed
/// container. Claude Code's first attempt breaks `mul`, the gate fails with a new failure, and
/// the follow-up turn starts from that attempt's post-image with the failing test id and the
/// gate's quoted output in its prompt (the scripted model checks both, and that its `Read` of
/// `calc.py` shows the first attempt's edit, before it fixes the line). The gate passes, the
/// chain ends `green`, and the last candidate's diff is against the baseline (the docstring the
/// first attempt added, not its bug) and verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_live_claude_a_follow_up_continues_the_failing_attempt_to_green() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let Some(gate_image) = crate::gates::python_image() else {
        return;
    };
    let agent = claude_agent();
    let (upstream, problems) = follow_up_upstream().await;
    let calc = format!("def add(a, b):\n    return a + b\n\n\n{MUL}");
    let (repo, commit) = git_repo(&std::collections::BTreeMap::from([
        ("calc.py", calc.clone()),
        ("test_calc.py", crate::gates::TESTS.to_owned()),
    ]));
    let state = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let bin = || {
        let mut c = bin();
        c.env("PATCH_CANDIDATE_STATE_DIR", state.path());
        c
    };
    let (gates, approval) = approve_with_pytest(
        state.path(),
        work.path(),
        &gate_image,
        repo.path(),
        "calc.py",
        "Document mul",
    );
    let mut cmd = bin();
    cmd.env("PC_SCENARIO_MODEL_KEY", KEY)
        .args([
            "--json", "run", "--live", "--agent", "claude", "--model", MODEL,
        ])
        .args(["--upstream", &upstream.base_url()])
        .args(["--credential-env", "PC_SCENARIO_MODEL_KEY"])
        .args(["--image", agent.image, "--image-id", &agent.image_id])
        .args(["--max-wall-seconds", "240", "--no-ledger", "--repo"])
        .arg(repo.path())
        .arg("--approval")
        .arg(&approval)
        .arg("--store")
        .arg(work.path().join("store"))
        .arg("--gates")
        .arg(&gates)
        .args(["--max-follow-ups", "1"]);
    let started = std::time::Instant::now();
    let out = output_blocking(cmd).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let recorded = problems.lock().unwrap().clone();
    assert!(recorded.is_empty(), "{recorded:?}\n{stderr}");
    assert!(out.status.success(), "{stderr}");
    eprintln!("the chain took {:?}", started.elapsed());
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();

    // Two attempts: the first fails the gate, the follow-up passes it; the chain is green.
    let chain = &doc["chain"];
    assert_eq!(chain["end"], "green", "{doc}");
    assert_eq!(chain["follow_ups"], 1);
    let attempts = chain["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{chain}");
    assert_eq!(attempts[0]["gates"][0]["gate"], "pytest");
    assert_eq!(attempts[0]["gates"][0]["outcome"], "failed", "{chain}");
    assert_eq!(attempts[1]["gates"][0]["outcome"], "passed", "{chain}");
    assert_ne!(attempts[0]["digest"], attempts[1]["digest"]);
    assert_eq!(doc["digest"], attempts[1]["digest"]);
    assert_eq!(doc["gates"][0]["outcome"], "passed");
    // The chain's tokens are the gateway's counts of both live turns.
    let per_attempt: u64 = attempts.iter().map(|a| a["tokens"].as_u64().unwrap()).sum();
    assert!(attempts.iter().all(|a| a["tokens"].as_u64().unwrap() > 0));
    assert_eq!(chain["tokens"].as_u64(), Some(per_attempt));

    // The agent loop's requests: three in the first turn, three in the follow-up, each turn in
    // its own working directory; the follow-up's prompt names the judged candidate.
    let sent = messages(&upstream);
    let dirs: Vec<String> = sent
        .iter()
        .map(|r| anthropic::workdir(r).unwrap())
        .collect();
    assert_eq!(sent.len(), 6, "{dirs:?}\n{}", describe(&upstream));
    assert!(dirs[..3].iter().all(|d| *d == dirs[0]));
    assert!(dirs[3..].iter().all(|d| *d == dirs[3]));
    assert_ne!(dirs[0], dirs[3]);
    let mut first_prompt = String::new();
    strings(&sent[0].json().unwrap()["messages"], &mut first_prompt);
    assert!(!first_prompt.contains("Review of an earlier attempt"));
    // The gate's command is each turn's validation hint.
    assert!(first_prompt.contains("How this repository is checked"));
    let mut follow_up_prompt = String::new();
    strings(&sent[3].json().unwrap()["messages"], &mut follow_up_prompt);
    assert!(follow_up_prompt_problems(&follow_up_prompt).is_empty());
    let judged = attempts[0]["digest"].as_str().unwrap();
    assert!(
        follow_up_prompt.contains(&format!(
            "Review of an earlier attempt (candidate {judged})"
        )),
        "{follow_up_prompt}"
    );
    assert!(tool_results(&sent[4].json().unwrap()).contains(BUG));
    assert_key_only_upstream(&upstream);
    assert!(!String::from_utf8_lossy(&out.stdout).contains(KEY));
    assert!(!stderr.contains(KEY));

    // The last candidate: one update of calc.py against the baseline, the docstring kept and the
    // bug gone; `verify` accepts it against its digest and the repository.
    let candidate = &doc["candidate"];
    assert_eq!(candidate["baseline_commit_sha"], commit);
    let files = candidate["changed_files"].as_array().unwrap();
    assert_eq!(files.len(), 1, "{candidate}");
    assert_eq!(files[0]["path"], "calc.py");
    assert_eq!(files[0]["op"], "update");
    assert_eq!(
        files[0]["previous_sha256"],
        vocab::Sha256::of(calc.as_bytes()).to_string()
    );
    let fixed = calc.replace(MUL, &MUL_BROKEN.replace(BUG, FIX));
    assert_eq!(files[0]["content"], fixed);
    let diff = files[0]["diff"].as_str().unwrap();
    assert!(
        diff.contains("+    \"\"\"The product of a and b.\"\"\""),
        "{diff}"
    );
    assert!(!diff.contains("+ 1"), "{diff}");
    let file = work.path().join("candidate.json");
    std::fs::write(&file, serde_json::to_vec(candidate).unwrap()).unwrap();
    verify_ok(&file, doc["digest"].as_str().unwrap(), repo.path());
    assert_clean_and_tally(
        &docker,
        "docker_live_claude_a_follow_up_continues_the_failing_attempt_to_green",
    )
    .await;
}
