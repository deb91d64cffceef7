//! Commands in a live turn, end to end, for each agent (Codex, Claude Code, Gemini CLI): the
//! agent in a live image layered onto the python environment (`images/build.sh --live --agent A
//! --env python`, the python gate image underneath: python3, pytest, bash) runs the repository's
//! test command with its own shell tool, the runner allowing it (the container is the sandbox);
//! the scripted model sees the real pytest output naming the failing test in the tool result,
//! fixes the code, runs the tests again and sees them pass; the candidate verifies, its build
//! byproducts are not in it, and the same gate passes in the same environment image. A shell
//! write to a file outside the grants fails the turn at the harvest, as any other write would.
//!
//! With `PATCH_CANDIDATE_REQUIRE_DOCKER=1` a missing daemon or a failed image build fails these
//! tests.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

use gateway::testkit::{DEFAULT_USAGE, Reply, ScriptedUpstream, anthropic, gemini};
use serde_json::json;
use snapshot::FileOp;
use turn::{Agent, TurnError};
use vocab::GateVerdict;

use crate::live_gemini::gemini_script;
use crate::support::*;

const TASK: &str = "Make the failing test pass.";
const GATE_TAG: &str = "patch-candidate-gate-python:live-commands";
const CALC_BROKEN: &str =
    "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a + b\n";
const TESTS: &str = "from app.calc import add, mul\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n";
/// The repository's test command, as the gate runs it (`crate::gates::definitions_text`).
const TEST_COMMAND: &str = "python3 -m pytest -q -p no:cacheprovider tests";
/// The first run also leaves byproducts: bytecode compiled on purpose and a pytest cache. The
/// bytecode is checked by the source's hash: a timestamp-checked .pyc written in the same second
/// as a same-size fix would be taken as current, and the second run would test the old code.
const TEST_AND_LITTER: &str = "python3 -m pytest -q -p no:cacheprovider tests; python3 -m compileall -q --invalidation-mode checked-hash app tests; mkdir -p .pytest_cache/v && echo x > .pytest_cache/v/x";

/// Each agent's model and key in these tests.
fn model_and_key(agent: Agent) -> (&'static str, &'static str) {
    match agent {
        Agent::Codex => ("gpt-5.5", "sk-live-commands-codex-credential-6d02b1"),
        Agent::Claude => (
            "claude-sonnet-4-5",
            "sk-ant-live-commands-credential-0b4f93",
        ),
        Agent::Gemini => (
            "gemini-2.5-flash",
            "AIzaSy-live-commands-credential-93c1e7a2",
        ),
    }
}

fn live_tag(agent: Agent) -> &'static str {
    match agent {
        Agent::Codex => "patch-candidate-live-python:live-commands",
        Agent::Claude => "patch-candidate-live-claude-python:live-commands",
        Agent::Gemini => "patch-candidate-live-gemini-python:live-commands",
    }
}

/// The state directory the environment is recorded in, and the environment's ID.
static ENV: OnceLock<Result<(tempfile::TempDir, String), String>> = OnceLock::new();
static LIVE: [OnceLock<Result<String, String>>; 3] =
    [OnceLock::new(), OnceLock::new(), OnceLock::new()];

fn build_script(state: &Path, tag: &str, args: &[&str]) -> Result<(), String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../images/build.sh");
    let out = Command::new("bash")
        .arg(&script)
        .args(args)
        .arg("--bin-dir")
        .arg(target_dir())
        .env("PATCH_CANDIDATE_STATE_DIR", state)
        .env("GATE_IMAGE_TAG", GATE_TAG)
        .env("LIVE_IMAGE_TAG", tag)
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The python environment (the python gate image, recorded in a state directory of its own),
/// built once per test process from the binaries under test.
fn environment() -> &'static (tempfile::TempDir, String) {
    ENV.get_or_init(|| {
        let state = tempfile::tempdir().unwrap();
        build_script(state.path(), "unused:live-commands", &["--gate", "python"])?;
        let id = gate::GateImagesState::load(state.path())
            .unwrap()
            .unwrap()
            .get(&gate::GateImageName::parse("python").unwrap())
            .unwrap()
            .image_id()
            .as_str()
            .to_owned();
        Ok((state, id))
    })
    .as_ref()
    .expect("environment build failed")
}

/// `agent`'s live image on the environment; its record names the environment.
fn live_image(agent: Agent) -> String {
    let slot = match agent {
        Agent::Codex => 0,
        Agent::Claude => 1,
        Agent::Gemini => 2,
    };
    LIVE[slot]
        .get_or_init(|| {
            let (state, env) = environment();
            build_script(
                state.path(),
                live_tag(agent),
                &["--live", "--agent", agent.name(), "--env", "python"],
            )?;
            let live = turn::LiveImageState::load_for(state.path(), agent)
                .unwrap()
                .expect("the live record");
            let recorded = live
                .environment
                .expect("the live record names its environment");
            assert_eq!(
                (recorded.name.as_str(), recorded.image_id.as_str()),
                ("python", env.as_str())
            );
            Ok(live.image_id.as_str().to_owned())
        })
        .clone()
        .expect("live image build failed")
}

fn agent_under_test(agent: Agent) -> LiveAgentUnderTest {
    let (model, key) = model_and_key(agent);
    LiveAgentUnderTest {
        agent,
        image: live_tag(agent),
        image_id: live_image(agent),
        model,
        key,
        build_tmp_mib: None,
    }
}

/// A live turn on `app/calc.py` (editable, `mul` broken) and `tests/test_calc.py` (read-only).
async fn turn(
    docker: &container::BollardRuntime,
    agent: Agent,
    upstream: &ScriptedUpstream,
    runtime: Option<&str>,
) -> LiveRun {
    turn_within(docker, agent, upstream, runtime, 300).await
}

/// [`turn`] with the worker's wall deadline `wall` (seconds).
async fn turn_within(
    docker: &container::BollardRuntime,
    agent: Agent,
    upstream: &ScriptedUpstream,
    runtime: Option<&str>,
    wall: u64,
) -> LiveRun {
    let repo = LiveRepo {
        files: BTreeMap::from([
            ("app/calc.py", CALC_BROKEN.to_owned()),
            ("tests/test_calc.py", TESTS.to_owned()),
        ]),
        task: TASK,
        allowed: &["app/", "tests/"],
        read_only: &["tests/"],
        create: &[],
    };
    let (model, _) = model_and_key(agent);
    let config = gateway::GatewayConfig::for_model(model);
    live_pipeline(
        docker,
        &agent_under_test(agent),
        repo,
        upstream,
        config,
        wall,
        runtime,
    )
    .await
}

/// A scripted model for `agent` that runs `first`, fixes `mul`, runs the tests, and ends.
async fn fixing_upstream(agent: Agent, first: &str) -> ScriptedUpstream {
    scripted_fix(agent, Some(first)).await
}

/// The scripted fix of `mul`: with `first`, the agent runs it before the fix and the test
/// command after it; without, it only fixes `mul` and ends (no command: the benchmark's
/// baseline).
async fn scripted_fix(agent: Agent, first: Option<&str>) -> ScriptedUpstream {
    let (model, _) = model_and_key(agent);
    // The fix between the commands, as each agent's tools make it.
    let around = |fix: Vec<Reply>, run: &dyn Fn(&str) -> Reply| -> Vec<Reply> {
        let mut steps: Vec<Reply> = first.map(run).into_iter().collect();
        steps.extend(fix);
        steps.extend(first.map(|_| run(TEST_COMMAND)));
        steps
    };
    match agent {
        Agent::Gemini => {
            let mut steps = around(vec![fix_mul()], &|c: &str| shell(c));
            steps.push(gemini::text("Fixed mul; the tests pass.", DEFAULT_USAGE));
            gemini_script(steps).await
        }
        Agent::Claude => {
            let bash = |command: &str| {
                anthropic::tool_use(
                    model,
                    "Bash",
                    &json!({"command": command, "description": "run the tests"}),
                    DEFAULT_USAGE,
                )
            };
            let fix = vec![
                anthropic::tool_use(
                    model,
                    "Read",
                    &json!({"file_path": "{workdir}/app/calc.py"}),
                    DEFAULT_USAGE,
                ),
                anthropic::tool_use(
                    model,
                    "Edit",
                    &json!({"file_path": "{workdir}/app/calc.py",
                            "old_string": "def mul(a, b):\n    return a + b",
                            "new_string": "def mul(a, b):\n    return a * b"}),
                    DEFAULT_USAGE,
                ),
            ];
            let mut steps = around(fix, &bash);
            steps.push(anthropic::text(
                model,
                "Fixed mul; the tests pass.",
                DEFAULT_USAGE,
            ));
            let upstream = ScriptedUpstream::start([]).await.unwrap();
            anthropic::claude_code(
                &upstream,
                model,
                steps,
                DEFAULT_USAGE,
                anthropic::text(model, "Done.", DEFAULT_USAGE),
            );
            upstream
        }
        Agent::Codex => {
            let fix = vec![Reply::apply_patch(
                "*** Begin Patch\n*** Update File: app/calc.py\n@@ def mul(a, b):\n-    return a + b\n+    return a * b\n*** End Patch\n",
            )];
            let mut steps = around(fix, &|c: &str| Reply::exec_command(c));
            steps.push(Reply::message("Fixed mul; the tests pass."));
            let upstream = ScriptedUpstream::start(steps).await.unwrap();
            upstream.set_fallback(Reply::message("Done."));
            upstream
        }
    }
}

/// The agent-loop requests the model received, in order, as text (Claude Code's title,
/// prompt-suggestion and token-count requests left out).
fn loop_bodies(upstream: &ScriptedUpstream) -> Vec<String> {
    upstream
        .requests()
        .iter()
        .filter(|r| {
            !anthropic::is_title_request(r)
                && !anthropic::is_suggestion_request(r)
                && !r.target.starts_with("/v1/messages/count_tokens")
        })
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .collect()
}

fn shell(command: &str) -> gateway::testkit::Reply {
    gemini::function_call(
        "run_shell_command",
        &json!({"command": command, "description": "run"}),
        DEFAULT_USAGE,
    )
}

runc_and_runsc_tests!(
    gemini_runs_the_tests_and_fixes,
    docker_live_gemini_runs_the_tests_fixes_the_code_and_the_gate_passes,
    /// The same turn under gVisor's runsc.
    docker_live_gemini_runsc_runs_the_tests_fixes_the_code_and_the_gate_passes,
);

runc_and_runsc_tests!(
    claude_runs_the_tests_and_fixes,
    docker_live_claude_runs_the_tests_fixes_the_code_and_the_gate_passes,
    /// The same turn under gVisor's runsc.
    docker_live_claude_runsc_runs_the_tests_fixes_the_code_and_the_gate_passes,
);

runc_and_runsc_tests!(
    codex_runs_the_tests_and_fixes,
    docker_live_codex_runs_the_tests_fixes_the_code_and_the_gate_passes,
    /// The same turn under gVisor's runsc.
    docker_live_codex_runsc_runs_the_tests_fixes_the_code_and_the_gate_passes,
);

async fn gemini_runs_the_tests_and_fixes(
    docker: &container::BollardRuntime,
    runtime: Option<&str>,
) {
    runs_the_tests_and_fixes(docker, Agent::Gemini, runtime).await;
}

async fn claude_runs_the_tests_and_fixes(
    docker: &container::BollardRuntime,
    runtime: Option<&str>,
) {
    runs_the_tests_and_fixes(docker, Agent::Claude, runtime).await;
}

async fn codex_runs_the_tests_and_fixes(docker: &container::BollardRuntime, runtime: Option<&str>) {
    runs_the_tests_and_fixes(docker, Agent::Codex, runtime).await;
}

/// The index of the first request whose text holds `needle`.
fn first_holding(bodies: &[String], needle: &str) -> Option<usize> {
    bodies.iter().position(|b| b.contains(needle))
}

async fn runs_the_tests_and_fixes(
    docker: &container::BollardRuntime,
    agent: Agent,
    runtime: Option<&str>,
) {
    let upstream = fixing_upstream(agent, TEST_AND_LITTER).await;
    let run = turn(docker, agent, &upstream, runtime).await;
    let bodies = loop_bodies(&upstream);
    // The worker counted both commands and timed them (pytest takes more than a millisecond).
    if run.outcome.is_ok() {
        let log = log_of(&run).expect("a live turn's log");
        assert_eq!(log.commands.commands, 2, "{:?}", log.commands);
        assert!(
            log.commands.command_ms > 0,
            "{:?} {:?}",
            log.commands,
            run.notes
        );
    }
    let outcome = match run.outcome {
        Ok(o) => o,
        Err(e) => panic!(
            "{} turn failed: {} ({} model requests; notes {:?})",
            agent.name(),
            e.code(),
            bodies.len(),
            run.notes
        ),
    };
    // The command ran in the container: a later request's tool result holds the real pytest
    // output, the failing test named; after the fix, the same command reports both passing
    // (each agent words its tool results its own way; the runner's output is the same).
    let failed = first_holding(&bodies, "1 failed, 1 passed")
        .unwrap_or_else(|| panic!("no request carried the failing run: {bodies:?}"));
    assert!(
        bodies[failed].contains("test_calc.py::test_mul"),
        "{}",
        bodies[failed]
    );
    let passed = first_holding(&bodies, "2 passed")
        .unwrap_or_else(|| panic!("no request carried the passing run: {bodies:?}"));
    assert!(passed > failed);
    // The candidate: the fix only, no byproduct, verified against the repository.
    assert_eq!(
        ops(&outcome.candidate),
        vec![("app/calc.py".to_owned(), FileOp::Update)]
    );
    finalizer::verify_against_repository(&outcome.candidate, run.repo.path()).unwrap();
    let permissions: Vec<_> = run
        .notes
        .iter()
        .filter_map(|n| match n {
            turn::LiveNote::AgentEvent(e) if e["event"] == "permission" => {
                Some(e["decision"].as_str().unwrap_or_default().to_owned())
            }
            _ => None,
        })
        .collect();
    assert!(
        permissions.iter().all(|d| d == "allowed"),
        "{permissions:?}"
    );

    // The repository's gate, in the same environment image: the baseline fails test_mul, the
    // candidate passes, test_mul fixed.
    let env_image = environment().1.clone();
    let gate_env = crate::gates::Env {
        docker: docker.clone(),
        image: env_image.clone(),
        state: tempfile::tempdir().unwrap(),
    };
    let defs = crate::gates::definitions(&env_image, 300, "");
    let result = crate::gates::run(&gate_env, &defs, run.repo.path(), &outcome.candidate).await;
    assert_eq!(
        result.evidence.outcome,
        GateVerdict::Passed,
        "{:?}",
        result.evidence.code
    );
    let comparison = result.evidence.comparison.clone().unwrap();
    assert_eq!(
        comparison.fixed.ids,
        vec!["tests.test_calc::test_mul".to_owned()]
    );
    assert_key_hidden(agent, &upstream);
    assert_no_turn_containers(docker).await;
}

/// No forwarded request or tunnelled byte carried the key back from the container.
fn assert_key_hidden(agent: Agent, upstream: &ScriptedUpstream) {
    let (_, key) = model_and_key(agent);
    assert_each_request_hides_key(upstream, key, |_| {});
}

/// A command that writes a file outside the grants fails the turn at the harvest, exactly as an
/// edit tool's write would; its write outside the workspace (`/tmp`) is not harvested at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_live_gemini_a_shell_write_to_an_ungranted_file_fails_the_turn() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let upstream = gemini_script([
        shell("echo owned > /tmp/outside && echo owned > app/other.py"),
        gemini::text("Done.", DEFAULT_USAGE),
    ])
    .await;
    let run = turn(&docker, Agent::Gemini, &upstream, None).await;
    match &run.outcome {
        Err(TurnError::TurnNotCompleted { status }) => {
            assert_eq!(*status, "rejected_scope", "{:?}", run.notes);
        }
        Err(e) => panic!("unexpected error {}", e.code()),
        Ok(o) => panic!("a candidate: {:?}", ops(&o.candidate)),
    }
    assert_key_hidden(Agent::Gemini, &upstream);
    assert_clean_and_tally(
        &docker,
        "docker_live_gemini_a_shell_write_to_an_ungranted_file_fails_the_turn",
    )
    .await;
}

/// Hostile commands in a turn, Gemini CLI on the python environment: a socket to the outside, a
/// write that fills the tmpfs, a background process left running and a fork bomb. Each is bounded
/// by the container (network, tmpfs size, pids, the wall deadline): the fork bomb holds the
/// agent's shell tool until the worker's deadline sends STOP, the edit made before is harvested
/// into a verified candidate, and no container is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_live_gemini_hostile_commands_stay_inside_the_turn() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let upstream = gemini_script([
        fix_mul(),
        shell(
            "python3 -c \"import socket; socket.create_connection(('192.0.2.1', 80), timeout=5)\"",
        ),
        shell("head -c 512M /dev/zero > /tmp/fill; df -k /tmp | tail -n 1"),
        shell("nohup sleep 3600 >/dev/null 2>&1 &"),
        shell(":(){ :|:& };:"),
        gemini::text("Done.", DEFAULT_USAGE),
    ])
    .await;
    let started = std::time::Instant::now();
    let run = turn_within(&docker, Agent::Gemini, &upstream, None, 90).await;
    let bodies = loop_bodies(&upstream);
    let outcome = match run.outcome {
        Ok(o) => o,
        Err(e) => panic!("turn failed: {} ({} requests)", e.code(), bodies.len()),
    };
    assert_eq!(
        ops(&outcome.candidate),
        vec![("app/calc.py".to_owned(), FileOp::Update)]
    );
    finalizer::verify_against_repository(&outcome.candidate, run.repo.path()).unwrap();
    // The socket found no way out: the container has no route but loopback.
    assert!(
        first_holding(&bodies, "Network is unreachable").is_some(),
        "{bodies:?}"
    );
    // The worker's deadline bounds the turn, whatever the commands left running.
    assert!(started.elapsed() < std::time::Duration::from_secs(150));
    assert_key_hidden(Agent::Gemini, &upstream);
    assert_clean_and_tally(
        &docker,
        "docker_live_gemini_hostile_commands_stay_inside_the_turn",
    )
    .await;
}

/// A command that exhausts the container's memory: the kernel's OOM killer ends it inside the
/// container's cgroup, and the worker, which cannot tell an agent's command from the agent, ends
/// the turn as `REPOSITORY_DOCKER_OOM` (no candidate from a turn whose container ran out of
/// memory); no container is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_live_gemini_a_memory_balloon_ends_the_turn_as_oom() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let upstream = gemini_script([
        fix_mul(),
        shell("python3 -c 'b = bytearray(2 << 30); print(len(b))'"),
        gemini::text("Done.", DEFAULT_USAGE),
    ])
    .await;
    let run = turn_within(&docker, Agent::Gemini, &upstream, None, 120).await;
    match &run.outcome {
        Err(e) => assert_eq!(e.code(), "REPOSITORY_DOCKER_OOM"),
        Ok(o) => panic!("a candidate: {:?}", ops(&o.candidate)),
    }
    assert_key_hidden(Agent::Gemini, &upstream);
    assert_clean_and_tally(
        &docker,
        "docker_live_gemini_a_memory_balloon_ends_the_turn_as_oom",
    )
    .await;
}

/// Gemini's `replace` fixing `mul`.
fn fix_mul() -> gateway::testkit::Reply {
    gemini::function_call(
        "replace",
        &json!({"file_path": "app/calc.py", "old_string": "def mul(a, b):\n    return a + b",
                "new_string": "def mul(a, b):\n    return a * b", "instruction": "multiply"}),
        DEFAULT_USAGE,
    )
}

/// The rust environment of the real crate either 1.13.0 (its Cargo.lock's crates vendored onto
/// the rust gate image) and Gemini's live image on it, built once per test process; the state
/// directory holds both records.
static RUST_ENV: OnceLock<Result<(tempfile::TempDir, String, String), String>> = OnceLock::new();
const RUST_GATE_TAG: &str = "patch-candidate-gate-rust:live-commands";
const RUST_LIVE_TAG: &str = "patch-candidate-live-gemini-either:live-commands";
/// The crate's test command as an agent runs it (the gate's is `cargo test --offline --frozen`).
const CARGO_TEST: &str = "cargo test --offline --frozen 2>&1 | tail -n 12";
const IS_LEFT_BROKEN: &str = "            Left(_) => false,\n            Right(_) => false,";
const IS_LEFT_FIXED: &str = "            Left(_) => true,\n            Right(_) => false,";

/// (state directory, environment image ID, live image ID).
fn rust_environment() -> &'static (tempfile::TempDir, String, String) {
    RUST_ENV
        .get_or_init(|| {
            let state = tempfile::tempdir().unwrap();
            let lock =
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/gates/either-Cargo.lock");
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../images/build.sh");
            let out = Command::new("bash")
                .arg(&script)
                .args(["--gate", "rust", "--cargo-lock"])
                .arg(&lock)
                .args(["--name", "either", "--bin-dir"])
                .arg(target_dir())
                .env("PATCH_CANDIDATE_STATE_DIR", state.path())
                .env("GATE_IMAGE_TAG", RUST_GATE_TAG)
                .env("ENV_IMAGE_TAG", "patch-candidate-env-either:live-commands")
                .output()
                .map_err(|e| e.to_string())?;
            if !out.status.success() {
                return Err(String::from_utf8_lossy(&out.stderr).into_owned());
            }
            let env_id = gate::GateImagesState::load(state.path())
                .unwrap()
                .unwrap()
                .get(&gate::GateImageName::parse("either").unwrap())
                .unwrap()
                .image_id()
                .as_str()
                .to_owned();
            build_script(
                state.path(),
                RUST_LIVE_TAG,
                &["--live", "--agent", "gemini", "--env", "either"],
            )?;
            let live = turn::LiveImageState::load_for(state.path(), Agent::Gemini)
                .unwrap()
                .expect("the live record");
            let recorded = live
                .environment
                .expect("the live record names its environment");
            assert_eq!(recorded.name, "either");
            assert_eq!(recorded.image_id.as_str(), env_id);
            // A rust environment compiles in the turn: its record asks for a build /tmp.
            assert_eq!(recorded.build_tmp_mib, Some(512));
            Ok((state, env_id, live.image_id.as_str().to_owned()))
        })
        .as_ref()
        .expect("rust environment build failed")
}

/// Gemini CLI in the rust environment, on the real crate either with `is_left` broken: it runs
/// `cargo test --offline --frozen` (the crate's dependencies, serde_json among them, come from
/// the vendored crates; nothing is fetched), the next model request holds cargo's real output
/// naming the failing doctests, it fixes `is_left`, runs the tests again and sees them pass; the
/// candidate verifies, no build output is in it (the target directory is in the build /tmp), and
/// the repository's `cargo-test` gate passes in the same environment image.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_live_gemini_rust_environment_runs_cargo_test_fixes_and_the_gate_passes() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let (_, env_id, live_id) = rust_environment();
    let fixture = crate::gates::fixtures().join("either");
    let broken = crate::gates::rev(&fixture, "broken");
    let listing = git_text(&fixture, &["ls-tree", "-r", "--name-only", &broken]);
    // Its .gitignore names Cargo.lock, which the fixture commits on purpose: left out here, so
    // the test repository commits the lock too.
    let paths: Vec<&str> = listing.lines().filter(|p| *p != ".gitignore").collect();
    let files: BTreeMap<&str, String> = paths
        .iter()
        .map(|p| (*p, crate::gates::show(&fixture, &broken, p)))
        .collect();
    assert!(files["src/lib.rs"].contains(IS_LEFT_BROKEN));
    let upstream = gemini_script([
        shell(CARGO_TEST),
        gemini::function_call(
            "replace",
            &json!({"file_path": "src/lib.rs", "old_string": IS_LEFT_BROKEN,
                    "new_string": IS_LEFT_FIXED, "instruction": "a Left is left"}),
            DEFAULT_USAGE,
        ),
        shell(CARGO_TEST),
        gemini::text("Fixed is_left; the tests pass.", DEFAULT_USAGE),
    ])
    .await;
    let (model, key) = model_and_key(Agent::Gemini);
    let agent = LiveAgentUnderTest {
        agent: Agent::Gemini,
        image: RUST_LIVE_TAG,
        image_id: live_id.clone(),
        model,
        key,
        build_tmp_mib: Some(512),
    };
    let repo = LiveRepo {
        files,
        task: TASK,
        allowed: &["src/", "Cargo.toml", "Cargo.lock"],
        read_only: &["Cargo.toml", "Cargo.lock"],
        create: &[],
    };
    let run = live_pipeline(
        &docker,
        &agent,
        repo,
        &upstream,
        gateway::GatewayConfig::for_model(model),
        600,
        None,
    )
    .await;
    let bodies = loop_bodies(&upstream);
    if run.outcome.is_ok() {
        let log = log_of(&run).expect("a live turn's log");
        assert_eq!(log.commands.commands, 2, "{:?}", log.commands);
        assert!(log.commands.command_ms > 0, "{:?}", log.commands);
    }
    let outcome = match run.outcome {
        Ok(o) => o,
        Err(e) => panic!(
            "turn failed: {} ({} model requests; notes {:?})",
            e.code(),
            bodies.len(),
            run.notes
        ),
    };
    // cargo ran in the container, offline, with the vendored dependencies: the failing run names
    // the broken doctests, the second run passes them all.
    let failed = first_holding(&bodies, "2 failed;")
        .unwrap_or_else(|| panic!("no request carried the failing run: {bodies:?}"));
    assert!(
        bodies[failed].contains("::is_left (line"),
        "{}",
        bodies[failed]
    );
    let passed = first_holding(&bodies, "test result: ok. 47 passed")
        .unwrap_or_else(|| panic!("no request carried the passing run: {bodies:?}"));
    assert!(passed > failed);
    assert_eq!(
        ops(&outcome.candidate),
        vec![("src/lib.rs".to_owned(), FileOp::Update)]
    );
    finalizer::verify_against_repository(&outcome.candidate, run.repo.path()).unwrap();

    // The crate's gate (`gate init rust`'s cargo-test) in the same environment image.
    let image_id: container::ImageId = env_id.parse().unwrap();
    let defs = gate::GateDefinitions::parse(
        gate::init_definitions(gate::GateKind::Rust, &image_id).as_bytes(),
    )
    .unwrap();
    let gate_env = crate::gates::Env {
        docker: docker.clone(),
        image: env_id.clone(),
        state: tempfile::tempdir().unwrap(),
    };
    let result = crate::gates::run_gate(
        &gate_env,
        &defs,
        "cargo-test",
        run.repo.path(),
        &outcome.candidate,
    )
    .await;
    assert_eq!(
        result.evidence.outcome,
        GateVerdict::Passed,
        "{:?} {}",
        result.evidence.code,
        result.evidence.log.tail
    );
    assert_key_hidden(Agent::Gemini, &upstream);
    assert_clean_and_tally(
        &docker,
        "docker_live_gemini_rust_environment_runs_cargo_test_fixes_and_the_gate_passes",
    )
    .await;
}

/// An operator's environment sets its own build /tmp: `--build-tmp-mib` on a live image built on
/// an environment replaces the stack's default in the live record (here 768 over the rust
/// environment's 512), and out-of-range values and a missing `--env` are refused before any build.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_live_image_on_an_environment_takes_the_operators_build_tmp() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let (rust_state, env_id, _) = rust_environment();
    let state = tempfile::tempdir().unwrap();
    std::fs::copy(
        rust_state.path().join("gate-images.json"),
        state.path().join("gate-images.json"),
    )
    .unwrap();
    let tag = "patch-candidate-live-gemini-either:build-tmp";
    let build_with = |mib: &str| {
        build_script(
            state.path(),
            tag,
            &[
                "--live",
                "--agent",
                "gemini",
                "--env",
                "either",
                "--build-tmp-mib",
                mib,
            ],
        )
    };
    build_with("768").unwrap();
    let live = turn::LiveImageState::load_for(state.path(), Agent::Gemini)
        .unwrap()
        .expect("the live record");
    let recorded = live.environment.expect("the record names its environment");
    assert_eq!(recorded.image_id.as_str(), env_id.as_str());
    assert_eq!(recorded.build_tmp_mib, Some(768));
    // The record's build /tmp is what a turn on the image gets.
    let (_, environment) = turn::resolve_image_environment(
        turn::ImageKind::Live(Agent::Gemini),
        None,
        None,
        state.path(),
    )
    .expect("the recorded image");
    assert_eq!(environment.and_then(|e| e.build_tmp_mib), Some(768));

    // Refused before anything is built: by the CLI (usage, exit 2) and by the script itself.
    for args in [
        &["--env", "either", "--build-tmp-mib", "0"][..],
        &["--env", "either", "--build-tmp-mib", "4097"],
        &["--build-tmp-mib", "256"],
    ] {
        let out = bin()
            .args(["image", "build", "--live", "--agent", "gemini"])
            .args(args)
            .env("PATCH_CANDIDATE_STATE_DIR", state.path())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
    for value in ["0", "4097", "12x", ""] {
        let e = build_with(value).unwrap_err();
        assert!(
            e.contains("--build-tmp-mib takes a whole number"),
            "{value}: {e}"
        );
    }
    let e = build_script(state.path(), tag, &["--live", "--build-tmp-mib", "64"]).unwrap_err();
    assert!(e.contains("--build-tmp-mib needs --live --env"), "{e}");
    let _ = std::process::Command::new("docker")
        .args(["image", "rm", tag])
        .output();
    assert_clean_and_tally(
        &docker,
        "docker_live_image_on_an_environment_takes_the_operators_build_tmp",
    )
    .await;
}

/// Rounds per agent and variant in [`bench_live_turn_running_the_tests_twice_vs_without_commands`].
const BENCH_ROUNDS: usize = 5;

/// The cost of running the tests in the turn: for each agent, the turn that runs the
/// repository's tests, fixes `mul` and runs them again ([`fixing_upstream`]) against the same
/// turn that only fixes `mul` ([`scripted_fix`] without commands), alternated, on the python environment
/// under runc; the wall time of the whole live pipeline (container start to verified
/// candidate). Run explicitly (a measurement, not a check): `cargo test --release --locked
/// --workspace --test scenario -- --ignored --nocapture bench_live_turn_running_the_tests`.
/// Prints `LIVE_COMMANDS_BENCH` lines (BENCHMARKS.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run explicitly with --ignored (BENCHMARKS.md)"]
async fn bench_live_turn_running_the_tests_twice_vs_without_commands() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    for agent in [Agent::Codex, Agent::Claude, Agent::Gemini] {
        // Built before anything is timed.
        let _ = live_image(agent);
        let (mut with, mut without) = (Vec::new(), Vec::new());
        for _ in 0..BENCH_ROUNDS {
            for commands in [true, false] {
                let upstream = if commands {
                    fixing_upstream(agent, TEST_COMMAND).await
                } else {
                    scripted_fix(agent, None).await
                };
                let started = std::time::Instant::now();
                let run = turn(&docker, agent, &upstream, None).await;
                let ms = started.elapsed().as_secs_f64() * 1000.0;
                let log = log_of(&run).unwrap_or_else(|| {
                    panic!("{} turn failed: {:?}", agent.name(), run.outcome.err())
                });
                assert_eq!(log.commands.commands, if commands { 2 } else { 0 });
                if commands {
                    with.push(ms);
                } else {
                    without.push(ms);
                }
            }
        }
        let (w, wo) = (median(with.clone()), median(without.clone()));
        println!(
            "LIVE_COMMANDS_BENCH agent={} rounds={BENCH_ROUNDS} with_tests_twice_p50_ms={w:.0} \
             without_commands_p50_ms={wo:.0} ratio={:.2} with_all={with:.0?} without_all={without:.0?}",
            agent.name(),
            w / wo
        );
    }
    assert_no_turn_containers(&docker).await;
}
