//! Live turns with Gemini CLI end to end: the real `gemini --acp` (the pinned npm bundle on the
//! build host's Node) in its real live image (built from the runner under test, `images/build.sh
//! --live --agent gemini`), the worker's pipeline with the real tunnel and the model gateway's
//! Gemini provider, and a scripted `streamGenerateContent` upstream on the host's loopback
//! (`data:` SSE chunks with cumulative `usageMetadata`). The runner hands Gemini the gateway
//! through ACP `authenticate` (method `gateway`) and advertises no `fs`/`terminal` capability, so
//! Gemini writes with its own tools inside the container; the candidate is finalized, stored and
//! verified against the repository.
//!
//! With `PATCH_CANDIDATE_REQUIRE_DOCKER=1` a missing daemon or a failed image build fails these
//! tests.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

use gateway::GatewayConfig;
use gateway::testkit::{DEFAULT_USAGE, ScriptedUpstream, Usage, gemini};
use serde_json::json;
use snapshot::FileOp;
use turn::{Agent, LiveNote, PipelineOutcome, TurnError};

use crate::support::*;

const MODEL: &str = "gemini-2.5-flash";
const KEY: &str = "AIzaSy-live-gemini-credential-4b7e10d9";
const TASK: &str = "Make answer return 2 and add app/new.py.";
const TEST_GEMINI_IMAGE: &str = "patch-candidate-live-gemini:selftest";

static IMAGE: OnceLock<Result<String, String>> = OnceLock::new();

/// Builds the Gemini live image with a throwaway tag from the runner under test.
fn gemini_image() -> String {
    IMAGE
        .get_or_init(|| build_live_image(Agent::Gemini, TEST_GEMINI_IMAGE, "gemini-cli", "0.61.0"))
        .clone()
        .expect("Gemini live image build failed")
}

/// Gemini CLI in its live image, with the model and key of these tests.
fn gemini_agent() -> LiveAgentUnderTest {
    LiveAgentUnderTest {
        agent: Agent::Gemini,
        image: TEST_GEMINI_IMAGE,
        image_id: gemini_image(),
        model: MODEL,
        key: KEY,
        build_tmp_mib: None,
    }
}

/// A live turn of `agent` on a two-file repository (`app/service.py` to edit, `docs/readme.md`
/// read-only, `app/new.py` granted) through a real gateway to `upstream`, stored and ledgered.
pub(crate) async fn agent_pipeline(
    docker: &container::BollardRuntime,
    agent: &LiveAgentUnderTest,
    upstream: &ScriptedUpstream,
    gateway_config: GatewayConfig,
    wall: u64,
    runtime: Option<&str>,
) -> LiveRun {
    agent_pipeline_with(docker, agent, upstream, gateway_config, wall, runtime, &[]).await
}

/// [`agent_pipeline`] with the gateway allowing the agent's own model.
pub(crate) async fn agent_turn(
    docker: &container::BollardRuntime,
    agent: &LiveAgentUnderTest,
    upstream: &ScriptedUpstream,
    wall: u64,
    runtime: Option<&str>,
) -> LiveRun {
    let gateway_config = GatewayConfig::for_model(agent.model);
    agent_pipeline(docker, agent, upstream, gateway_config, wall, runtime).await
}

/// As [`agent_pipeline`], with `extra` files (path, content) in the repository too.
pub(crate) async fn agent_pipeline_with(
    docker: &container::BollardRuntime,
    agent: &LiveAgentUnderTest,
    upstream: &ScriptedUpstream,
    gateway_config: GatewayConfig,
    wall: u64,
    runtime: Option<&str>,
    extra: &[(&'static str, &str)],
) -> LiveRun {
    let mut files = BTreeMap::from([
        ("app/service.py", "def answer():\n    return 1\n".to_owned()),
        ("docs/readme.md", "read me\n".to_owned()),
    ]);
    files.extend(extra.iter().map(|(p, c)| (*p, (*c).to_owned())));
    let repo = LiveRepo {
        files,
        task: TASK,
        allowed: &["app/", "docs/"],
        read_only: &["docs/"],
        create: &["app/new.py"],
    };
    live_pipeline(docker, agent, repo, upstream, gateway_config, wall, runtime).await
}

/// A scripted Gemini model answering with `replies`, then `Done.` to anything more.
pub(crate) async fn gemini_script(
    replies: impl IntoIterator<Item = gateway::testkit::Reply>,
) -> ScriptedUpstream {
    let upstream = ScriptedUpstream::start(replies).await.unwrap();
    upstream.set_fallback(gemini::text("Done.", DEFAULT_USAGE));
    upstream
}

/// Every forwarded request went to the model's path (Gemini CLI sent
/// `/v1beta/models/{model}:streamGenerateContent?alt=sse`) with the SSE query and carried the key in
/// Gemini's own header (and no other credential header); no tunnelled byte contains the key.
fn assert_key_only_upstream(upstream: &ScriptedUpstream) {
    assert_each_request_hides_key(upstream, KEY, |r| {
        assert_eq!(r.method, "POST");
        // The scripted upstream's base URL ends in /v1; the gateway joins the route to it.
        assert_eq!(
            r.target,
            format!("/v1/models/{MODEL}:streamGenerateContent?alt=sse")
        );
        assert_eq!(r.header("x-goog-api-key"), Some(KEY));
        assert_eq!(r.header("authorization"), None);
    });
}

runc_and_runsc_tests!(
    edits_and_creates,
    docker_live_gemini_edits_and_creates_through_the_gateway,
    /// The same turn under gVisor's runsc (its own turn seccomp profile): Node starts its
    /// threads, Gemini edits and creates through the tunnelled gateway, and the candidate
    /// verifies.
    docker_live_gemini_runsc_edits_and_creates_through_the_gateway,
);

async fn edits_and_creates(docker: &container::BollardRuntime, runtime: Option<&str>) {
    let usages = [
        Usage {
            input: 900,
            output: 40,
            total: 940,
        },
        Usage {
            input: 1000,
            output: 30,
            total: 1030,
        },
        DEFAULT_USAGE,
    ];
    let upstream = ScriptedUpstream::start([
        edit_service(usages[0]),
        create_new_py("X = 1\n", usages[1]),
        gemini::text("Changed answer and added app/new.py.", usages[2]),
    ])
    .await
    .unwrap();
    let run = agent_turn(docker, &gemini_agent(), &upstream, 180, runtime).await;
    let log = log_of(&run);
    let outcome = match run.outcome {
        Ok(o) => o,
        Err(e) => panic!(
            "turn failed: {} ({} model requests)",
            e.code(),
            upstream.requests().len()
        ),
    };
    assert_edited_and_created(&outcome, run.repo.path());
    // Three model requests, each forwarded with the key in x-goog-api-key only.
    let requests = upstream.requests();
    assert_eq!(requests.len(), 3);
    assert_key_only_upstream(&upstream);
    // The second request carries the first edit's result back to the model.
    let second = String::from_utf8_lossy(&requests[1].body).into_owned();
    assert!(second.contains("functionResponse"), "no tool result sent");
    let log = log.expect("live log");
    assert_eq!(log.gateway.requests, 3);
    assert_eq!(log.gateway.forwarded, 3);
    assert!(log.events.is_empty(), "{:?}", log.events);
    // The gateway's count is what the upstream reported: the last (cumulative) usageMetadata of
    // each answer, summed over the answers.
    let sum = |f: fn(&Usage) -> u64| usages.iter().map(f).sum::<u64>();
    assert_eq!(log.gateway.input_tokens, sum(|u| u.input));
    assert_eq!(log.gateway.output_tokens, sum(|u| u.output));
    assert_eq!(log.gateway.total_tokens, sum(|u| u.total));
    assert_eq!(log.gateway.usage_missing, 0);
    assert!(
        run.notes
            .iter()
            .any(|n| matches!(n, LiveNote::ModelRequest { .. }))
    );
    assert_no_turn_containers(docker).await;
}

/// The model Gemini names in its request path is not in the allowlist: the gateway refuses it
/// (nothing reaches the upstream) and the turn fails with the gateway's own code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_live_gemini_a_disallowed_path_model_is_refused_with_the_gateway_code() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let upstream = ScriptedUpstream::start([gemini::text("never", DEFAULT_USAGE)])
        .await
        .unwrap();
    assert_disallowed_model_refused(
        &docker,
        &gemini_agent(),
        &upstream,
        "gemini-2.5-pro",
        180,
        "docker_live_gemini_a_disallowed_path_model_is_refused_with_the_gateway_code",
    )
    .await;
}

/// An ungranted create and an edit of a read-only file: the runner refuses both permission
/// requests, Gemini goes on after each refusal, nothing outside the grants reaches a candidate,
/// and the turn ends with the proposal-status code (an empty proposal).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_live_gemini_an_ungranted_create_and_a_read_only_edit_are_refused() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let upstream = gemini_script([
        gemini::function_call(
            "write_file",
            &json!({"file_path": "app/other.py", "content": "Y = 1\n"}),
            DEFAULT_USAGE,
        ),
        gemini::function_call(
            "replace",
            &json!({"file_path": "docs/readme.md", "old_string": "read me",
                    "new_string": "changed", "instruction": "x"}),
            DEFAULT_USAGE,
        ),
        gemini::text("Done.", DEFAULT_USAGE),
    ])
    .await;
    let run = agent_turn(&docker, &gemini_agent(), &upstream, 180, None).await;
    // Unlike Codex, Gemini survives a refused permission: the refusal goes back to the model
    // and the turn goes on; with both writes refused the workspace is unchanged, so the
    // proposal is empty and there is nothing to stage.
    assert_empty_proposal(&run);
    let requests = upstream.requests().len();
    assert!(
        requests >= 2,
        "the turn ended at the first refusal ({requests} requests)"
    );
    assert_key_only_upstream(&upstream);
    assert_clean_and_tally(
        &docker,
        "docker_live_gemini_an_ungranted_create_and_a_read_only_edit_are_refused",
    )
    .await;
}

runc_and_runsc_tests!(
    cli_round_trip,
    /// `patch-candidate run --live --agent gemini` end to end (runc): a verified candidate from
    /// the real Gemini CLI, the key only in `x-goog-api-key`, the CLI's gateway count the
    /// upstream's.
    docker_cli_run_live_gemini_produces_a_verified_candidate,
    /// The same `run --live --agent gemini` with `--runtime runsc`.
    docker_cli_run_live_gemini_runsc_produces_a_verified_candidate,
);

async fn cli_round_trip(docker: &container::BollardRuntime, runtime: Option<&'static str>) {
    let upstream = ScriptedUpstream::start([
        edit_service(DEFAULT_USAGE),
        create_new_py("VALUE = 1\n", DEFAULT_USAGE),
        gemini::text("Done.", DEFAULT_USAGE),
    ])
    .await
    .unwrap();
    let doc = crate::cli_live::run_live_cli(docker, &gemini_agent(), &upstream, runtime).await;
    let requests = upstream.requests();
    assert_eq!(requests.len(), 3);
    assert_key_only_upstream(&upstream);
    // Each answer's last usageMetadata, summed: the gateway's own count.
    assert_eq!(doc["gateway"]["gateway"]["requests"], 3);
    assert_eq!(
        doc["gateway"]["gateway"]["total_tokens"],
        3 * DEFAULT_USAGE.total
    );
}

/// A shell command in the image `FROM scratch`: the runner allows the command (the container is
/// the sandbox), but that image holds no `bash`, which Gemini's shell tool runs, so nothing runs,
/// nothing is written, and the proposal is empty. (With a toolchain, in a live image on an
/// environment, commands run: `live_commands.rs`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_live_gemini_a_shell_command_without_a_shell_changes_nothing() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let upstream = gemini_script([
        gemini::function_call(
            "run_shell_command",
            &json!({"command": "echo owned > /tmp/outside && echo owned > app/service.py",
                    "description": "write outside"}),
            DEFAULT_USAGE,
        ),
        gemini::text("Done.", DEFAULT_USAGE),
    ])
    .await;
    let run = agent_turn(&docker, &gemini_agent(), &upstream, 180, None).await;
    assert_refused_and_empty(&run, 0);
    let requests = upstream.requests();
    assert!(requests.len() >= 2, "the turn ended at the command");
    let second = String::from_utf8_lossy(&requests[1].body).into_owned();
    assert!(second.contains("functionResponse"), "no tool result sent");
    assert_key_only_upstream(&upstream);
    assert_clean_and_tally(
        &docker,
        "docker_live_gemini_a_shell_command_without_a_shell_changes_nothing",
    )
    .await;
}

/// Gemini's `:countTokens` side call, end to end. Gemini counts a request's tokens upstream only
/// when it carries media: here the model reads `docs/pixel.png` (a text file, but an image by its
/// name, so Gemini's `read_file` hands it back as `inlineData`), Gemini asks the gateway's
/// `countTokens` route before sending the tool result, the gateway forwards it (model checked in
/// the path, key in Gemini's header, charged to the request budgets and to no token count), and
/// the turn goes on to an edit that verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_live_gemini_a_count_tokens_side_call_is_forwarded_and_not_counted() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let usages = [
        Usage {
            input: 700,
            output: 20,
            total: 720,
        },
        Usage {
            input: 900,
            output: 30,
            total: 930,
        },
        DEFAULT_USAGE,
    ];
    let upstream = ScriptedUpstream::start([
        gemini::function_call(
            "read_file",
            &json!({"file_path": "docs/pixel.png"}),
            usages[0],
        ),
        edit_service(usages[1]),
        gemini::text("Read the image and changed answer.", usages[2]),
    ])
    .await
    .unwrap();
    upstream.set_responder(|r| {
        r.target
            .contains(":countTokens")
            .then(|| gateway::testkit::Reply::Status {
                status: 200,
                body: json!({"totalTokens": 321}).to_string(),
            })
    });
    let run = agent_pipeline_with(
        &docker,
        &gemini_agent(),
        &upstream,
        GatewayConfig::for_model(MODEL),
        180,
        None,
        &[("docs/pixel.png", "pixels\n")],
    )
    .await;
    let log = log_of(&run);
    let outcome = match run.outcome {
        Ok(o) => o,
        Err(e) => panic!(
            "turn failed: {} (requests {:?})",
            e.code(),
            upstream
                .requests()
                .iter()
                .map(|r| r.target.clone())
                .collect::<Vec<_>>()
        ),
    };
    let requests = upstream.requests();
    let targets: Vec<&str> = requests.iter().map(|r| r.target.as_str()).collect();
    let stream = format!("/v1/models/{MODEL}:streamGenerateContent?alt=sse");
    let count = format!("/v1/models/{MODEL}:countTokens");
    assert_eq!(
        targets,
        vec![
            stream.as_str(),
            count.as_str(),
            stream.as_str(),
            stream.as_str()
        ],
        "the side call comes between the image read and the tool result"
    );
    for r in &requests {
        assert_eq!(r.method, "POST");
        assert_eq!(r.header("x-goog-api-key"), Some(KEY));
        assert_eq!(r.header("authorization"), None);
        assert!(!String::from_utf8_lossy(&r.body).contains(KEY));
    }
    // The side call carried the image Gemini read, as inline data.
    let counted = String::from_utf8_lossy(&requests[1].body).into_owned();
    assert!(counted.contains("inlineData"), "no media in the side call");
    let log = log.expect("live log");
    assert_eq!(log.gateway.requests, 4);
    assert_eq!(log.gateway.forwarded, 4);
    assert_eq!(log.gateway.refused, 0);
    // Tokens are the three streamed answers' only: a token count spends none.
    let sum = |f: fn(&Usage) -> u64| usages.iter().map(f).sum::<u64>();
    assert_eq!(log.gateway.input_tokens, sum(|u| u.input));
    assert_eq!(log.gateway.output_tokens, sum(|u| u.output));
    assert_eq!(log.gateway.total_tokens, sum(|u| u.total));
    assert_eq!(log.gateway.usage_missing, 0);
    assert_service_updated_only(&outcome, run.repo.path());
    assert_clean_and_tally(
        &docker,
        "docker_live_gemini_a_count_tokens_side_call_is_forwarded_and_not_counted",
    )
    .await;
}

/// A stream that opens and goes silent, end to end: the wall budget sends STOP, the runner halts
/// Gemini mid-request and harvests the edit made before the stall, and the worker's candidate
/// holds it. During the stall the running container (every process's environment and command
/// line, every file) holds no trace of the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_live_gemini_a_stalled_stream_is_ended_by_the_wall_budget() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let upstream = ScriptedUpstream::start([
        edit_service(DEFAULT_USAGE),
        gateway::testkit::Reply::Stall(Vec::new()),
    ])
    .await
    .unwrap();
    let started = std::time::Instant::now();
    // While the stream stalls, the running container is searched for the key from outside.
    let agent = gemini_agent();
    let (run, found) = tokio::join!(
        agent_turn(&docker, &agent, &upstream, 45, None),
        search_container_for_key(&docker, || upstream.requests().len() >= 2, KEY)
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
        elapsed < std::time::Duration::from_secs(90),
        "the turn outlived its wall budget by far: {elapsed:?}"
    );
    let outcome = run.outcome.expect("the edit before the stall is harvested");
    assert_service_updated_only(&outcome, run.repo.path());
    assert_eq!(upstream.requests().len(), 2);
    assert_key_only_upstream(&upstream);
    assert_clean_and_tally(
        &docker,
        "docker_live_gemini_a_stalled_stream_is_ended_by_the_wall_budget",
    )
    .await;
}

/// A turn whose only writes were refused: exactly `refusals` permission refusals, and (Claude
/// Code and Gemini survive a refused permission: the refusal goes back to the model as a failed
/// tool call and the turn goes on) an unchanged workspace, so the proposal is empty.
pub(crate) fn assert_refused_and_empty(run: &LiveRun, refusals: usize) {
    assert_empty_proposal(run);
    let refused = run
        .notes
        .iter()
        .filter(|n| {
            matches!(n, LiveNote::AgentEvent(e)
                if e["event"] == "permission" && e["decision"] == "refused")
        })
        .count();
    assert_eq!(refused, refusals, "{:?}", run.notes);
}

/// A turn that ended with an empty proposal (nothing changed, so nothing to stage), not with a
/// candidate or another error.
fn assert_empty_proposal(run: &LiveRun) {
    match &run.outcome {
        Ok(o) => panic!(
            "a turn with only refused actions produced a candidate: {:?}",
            o.candidate
                .changed_files()
                .iter()
                .map(|f| f.path().as_str().to_owned())
                .collect::<Vec<_>>()
        ),
        Err(TurnError::TurnNotCompleted { status }) => assert_eq!(*status, "empty"),
        Err(e) => panic!("unexpected turn error {}", e.code()),
    }
}

/// A turn of `agent` through a gateway that allows only `allowed`, another model than the
/// agent's: the gateway refuses the first request with its own code, the turn ends with that
/// code, and nothing reaches the upstream; then no turn container is left and test `name` is
/// tallied.
pub(crate) async fn assert_disallowed_model_refused(
    docker: &container::BollardRuntime,
    agent: &LiveAgentUnderTest,
    upstream: &ScriptedUpstream,
    allowed: &str,
    wall: u64,
    name: &str,
) {
    let config = GatewayConfig::for_model(allowed);
    let run = agent_pipeline(docker, agent, upstream, config, wall, None).await;
    match &run.outcome {
        Err(e) => assert_eq!(e.code(), "PATCH_CANDIDATE_GATEWAY_MODEL"),
        Ok(o) => panic!(
            "a turn with a refused model produced a candidate: {:?}",
            o.live
        ),
    }
    assert!(upstream.requests().is_empty(), "a refused request went out");
    assert_clean_and_tally(docker, name).await;
}

/// Searches the running live container from outside while its model stream stalls (once
/// `stalled()` holds): `docker exec` as the container's user runs the image's busybox over the
/// environment and command line of every process in the container and every file outside
/// `/proc`, `/sys` and `/dev`. It looks for `key` as a pattern that matches the key without
/// containing it (so the search's own command line cannot match) and, as a control that the
/// search sees what it should, for the runner's `HOME` in the processes' environments and for
/// the repository's `def answer` in the workspace. Returns what the key search found (one path
/// per line; empty when the key is absent); panics when the control finds nothing.
pub(crate) async fn search_container_for_key(
    docker: &container::BollardRuntime,
    stalled: impl Fn() -> bool,
    key: &str,
) -> Vec<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    while !stalled() {
        assert!(
            std::time::Instant::now() < deadline,
            "the model stream never stalled"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let turns = own_turns(docker).await.unwrap();
    assert_eq!(turns.len(), 1, "one live turn container expected");
    let id = turns[0].id.clone();
    let mut chars: Vec<char> = key.chars().collect();
    let last = chars.pop().unwrap();
    assert!(last.is_ascii_alphanumeric());
    let pattern = format!("{}[{last}]", chars.into_iter().collect::<String>());
    let script = format!(
        "search() {{ for d in /*; do case \"$d\" in /proc|/sys|/dev) ;; \
           *) grep -rlE -e \"$1\" \"$d\" 2>/dev/null ;; esac; done; \
           grep -lE -e \"$1\" /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null; }}; \
         search '{pattern}'; echo control; search 'HOME=/home/sandbo[x]|def answe[r]'; echo done"
    );
    let out = tokio::task::spawn_blocking(move || {
        Command::new("docker")
            .args(["exec", &id, "/bin/busybox", "sh", "-c", &script])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let (found, control) = stdout
        .split_once("control\n")
        .unwrap_or_else(|| panic!("the search did not run: {stdout:?}"));
    let control: Vec<&str> = control.lines().collect();
    assert_eq!(control.last(), Some(&"done"), "{stdout:?}");
    assert!(
        control
            .iter()
            .any(|l| l.starts_with("/proc/") && l.ends_with("/environ")),
        "the control found no process environment: {control:?}"
    );
    assert!(
        control.iter().any(|l| l.starts_with("/workspace/")),
        "the control found no workspace file: {control:?}"
    );
    found.lines().map(str::to_owned).collect()
}

/// Gemini's `replace` of `return 1` by `return 2` in `app/service.py`, answered with `usage`.
fn edit_service(usage: Usage) -> gateway::testkit::Reply {
    gemini::function_call(
        "replace",
        &json!({"file_path": "app/service.py", "old_string": "return 1",
                "new_string": "return 2", "instruction": "return 2"}),
        usage,
    )
}

/// Gemini's `write_file` creating the granted `app/new.py` with `content`.
fn create_new_py(content: &str, usage: Usage) -> gateway::testkit::Reply {
    gemini::function_call(
        "write_file",
        &json!({"file_path": "app/new.py", "content": content}),
        usage,
    )
}

/// The candidate changes `app/service.py` only (an update) and verifies against `repo`.
pub(crate) fn assert_service_updated_only(outcome: &PipelineOutcome, repo: &Path) {
    let ops = ops(&outcome.candidate);
    assert_eq!(ops, vec![("app/service.py".to_owned(), FileOp::Update)]);
    finalizer::verify_against_repository(&outcome.candidate, repo).unwrap();
}

/// The candidate of the edit-and-create turn: `app/new.py` created, `app/service.py` updated to
/// return 2, its digest recomputed and verified against the repository.
pub(crate) fn assert_edited_and_created(outcome: &PipelineOutcome, repo: &Path) {
    let ops = ops(&outcome.candidate);
    assert_eq!(
        ops,
        vec![
            ("app/new.py".to_owned(), FileOp::Create),
            ("app/service.py".to_owned(), FileOp::Update),
        ]
    );
    let service = outcome
        .candidate
        .changed_files()
        .iter()
        .find(|f| f.path().as_str() == "app/service.py")
        .and_then(|f| f.content())
        .expect("the edited file")
        .to_owned();
    assert_eq!(service, "def answer():\n    return 2\n");
    assert_eq!(
        finalizer::repository_patch_digest(&outcome.candidate).unwrap(),
        outcome.digest
    );
    finalizer::verify_against_repository(&outcome.candidate, repo).unwrap();
}
