//! `patch-candidate run --live` end to end: the real codex-acp in the live image under the turn's
//! container spec, its model requests through the tunnel and the gateway in the CLI process to a
//! scripted upstream on the host's loopback, to a verified candidate. [`run_live_cli`] is the
//! same round trip for any agent (Gemini's and Claude's CLI turns live beside their other tests).

use gateway::testkit::{Reply, ScriptedUpstream};

use crate::live_container::{TEST_LIVE_IMAGE, live_fixture, live_image};
use crate::support::*;

const KEY: &str = "sk-cli-live-9b2f4e";

runc_and_runsc_tests!(
    live_round_trip,
    docker_cli_run_live_produces_a_verified_candidate_through_the_gateway,
    /// The same Codex turn with `--runtime runsc`: under gVisor, with the runsc turn profile.
    docker_cli_run_live_runsc_produces_a_verified_candidate_through_the_gateway,
);

async fn live_round_trip(docker: &container::BollardRuntime, runtime: Option<&'static str>) {
    let upstream = ScriptedUpstream::start([
        Reply::edit_file("app/service.py", "    return 1", "    return 2"),
        Reply::create_file("app/new.py", "VALUE = 1"),
    ])
    .await
    .unwrap();
    let turn = LiveAgentUnderTest {
        agent: turn::Agent::Codex,
        model: "gpt-5.5",
        image: TEST_LIVE_IMAGE,
        image_id: live_image(),
        key: KEY,
        build_tmp_mib: None,
    };
    let doc = run_live_cli(docker, &turn, &upstream, runtime).await;
    // The trusted count: three answers of 120 tokens each (two tool calls, then "Done.").
    assert_eq!(doc["gateway"]["gateway"]["requests"], 3);
    assert_eq!(doc["gateway"]["gateway"]["total_tokens"], 360);
    for r in &bearer_requests(&upstream, 3, KEY) {
        assert_eq!(r.json().unwrap()["model"], "gpt-5.5");
    }
}

/// Runs `patch-candidate --json run --live --agent A --model M` against `upstream` on the
/// one-file fixture (`app/service.py` editable, `app/new.py` granted), and checks what holds for
/// every agent: the CLI succeeds, the candidate changes exactly `app/service.py` and creates
/// `app/new.py`, `verify --digest --repo` accepts it, the gateway reports no refusal, the key is
/// in nothing the CLI printed, and no turn container is left. Returns the `--json` document.
pub(crate) async fn run_live_cli(
    docker: &container::BollardRuntime,
    turn: &LiveAgentUnderTest,
    upstream: &ScriptedUpstream,
    runtime: Option<&'static str>,
) -> serde_json::Value {
    let (repo, approval_dir, approval_path) = live_fixture();
    let state = tempfile::tempdir().unwrap();
    let url = upstream.base_url();
    let repo_path = repo.path().to_path_buf();
    let state_path = state.path().to_path_buf();
    let args: Vec<String> = [
        "--json",
        "run",
        "--live",
        "--agent",
        turn.agent.name(),
        "--model",
        turn.model,
        "--upstream",
        &url,
        "--credential-env",
        "PC_SCENARIO_MODEL_KEY",
        "--image",
        turn.image,
        "--image-id",
        &turn.image_id,
        "--no-ledger",
    ]
    .into_iter()
    .map(str::to_owned)
    .chain(
        runtime
            .into_iter()
            .flat_map(|r| ["--runtime".to_owned(), r.to_owned()]),
    )
    .collect();
    let key = turn.key.to_owned();
    let mut cmd = bin();
    cmd.env("PATCH_CANDIDATE_STATE_DIR", &state_path)
        .env("PC_SCENARIO_MODEL_KEY", key)
        .args(&args)
        .arg("--repo")
        .arg(&repo_path)
        .arg("--approval")
        .arg(&approval_path);
    let out = output_blocking(cmd).await;
    assert_ok(&out);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut changed: Vec<(String, String)> = doc["candidate"]["changed_files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_owned(),
                f["operation"]
                    .as_str()
                    .or(f["op"].as_str())
                    .unwrap_or("?")
                    .to_owned(),
            )
        })
        .collect();
    changed.sort();
    let paths: Vec<&str> = changed.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(paths, ["app/new.py", "app/service.py"], "{changed:?}");
    assert_eq!(doc["gateway"]["events"], serde_json::json!([]));
    // The key never appears in what the CLI printed.
    assert!(!String::from_utf8_lossy(&out.stdout).contains(turn.key));
    assert!(!String::from_utf8_lossy(&out.stderr).contains(turn.key));
    // The candidate verifies against its digest and the repository.
    let candidate_file = approval_dir.path().join("candidate.json");
    std::fs::write(
        &candidate_file,
        serde_json::to_vec(&doc["candidate"]).unwrap(),
    )
    .unwrap();
    verify_ok(
        &candidate_file,
        doc["digest"].as_str().unwrap(),
        repo.path(),
    );
    assert_no_turn_containers(docker).await;
    doc
}

/// A live turn whose agent names a model the gateway does not allow ends with the gateway's own
/// code in the CLI's `--json` error and exit status, not the generic proposal-status code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_cli_run_live_refused_model_ends_with_the_gateway_code() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let (tag, image_id) = fixture_mode_image("live-other-model");
    let (repo, _approval_dir, approval_path) = live_fixture();
    let state = tempfile::tempdir().unwrap();
    let upstream = ScriptedUpstream::start([]).await.unwrap();
    let url = upstream.base_url();
    let repo_path = repo.path().to_path_buf();
    let state_path = state.path().to_path_buf();
    let mut cmd = bin();
    cmd.env("PATCH_CANDIDATE_STATE_DIR", &state_path)
        .env("PC_SCENARIO_MODEL_KEY", KEY)
        .args(["--json", "run", "--live", "--model", "gpt-5.5"])
        .arg("--upstream")
        .arg(&url)
        .args(["--credential-env", "PC_SCENARIO_MODEL_KEY", "--image", &tag])
        .args(["--image-id", &image_id, "--no-ledger", "--repo"])
        .arg(&repo_path)
        .arg("--approval")
        .arg(&approval_path);
    let out = output_blocking(cmd).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc["error"]["code"], "PATCH_CANDIDATE_GATEWAY_MODEL",
        "{doc}"
    );
    assert!(stderr.contains("PATCH_CANDIDATE_GATEWAY_MODEL: "));
    assert!(
        upstream.requests().is_empty(),
        "the refused request was forwarded"
    );
    assert_clean_and_tally(
        &docker,
        "docker_cli_run_live_refused_model_ends_with_the_gateway_code",
    )
    .await;
}
