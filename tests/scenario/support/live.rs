//! Live turns through the real model gateway to a scripted upstream on the host's loopback: the
//! agent under test, the gateway, and one pipeline run on a fresh repository.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use gateway::testkit::{RecordedRequest, ScriptedUpstream};
use gateway::{Credential, Gateway, GatewayConfig};
use turn::{
    Agent, LiveContext, LiveLog, LiveNote, LiveSettings, PipelineOutcome, TurnConfig, TurnError,
    run_live_pipeline,
};

use super::cli::{target_dir, workspace_bin};
use super::git::git_repo;
use super::pipeline::PipelineSinks;
use super::state::approval;

/// One agent's live image under test, and the model and key its turns use.
pub struct LiveAgentUnderTest {
    pub agent: Agent,
    pub image: &'static str,
    pub image_id: String,
    pub model: &'static str,
    pub key: &'static str,
    /// The build `/tmp` its live record asks for (a rust environment's).
    pub build_tmp_mib: Option<u64>,
}

/// A live pipeline's outcome, its repository and the progress notes it sent.
pub struct LiveRun {
    pub outcome: Result<PipelineOutcome, TurnError>,
    pub repo: tempfile::TempDir,
    pub notes: Vec<LiveNote>,
}

/// The live log of a run that produced a candidate.
pub fn log_of(run: &LiveRun) -> Option<LiveLog> {
    run.outcome.as_ref().ok().and_then(|o| o.live.clone())
}

/// The repository of a live run, its task and its grants.
pub struct LiveRepo<'a> {
    pub files: BTreeMap<&'a str, String>,
    pub task: &'a str,
    pub allowed: &'a [&'a str],
    pub read_only: &'a [&'a str],
    pub create: &'a [&'a str],
}

/// A gateway with `agent`'s provider and the credential `key`, forwarding to `upstream`.
pub fn scripted_gateway(
    agent: Agent,
    config: GatewayConfig,
    key: &str,
    upstream: &ScriptedUpstream,
) -> Arc<Gateway> {
    let gateway = Arc::new(
        Gateway::new(
            config,
            agent.provider().provider(),
            Credential::from_value(key).unwrap(),
            upstream.base_url().parse().unwrap(),
        )
        .unwrap(),
    );
    assert_eq!(gateway.provider_name(), agent.provider().name());
    gateway
}

/// A live turn of `agent` on `repo` through a real gateway to `upstream`, under `runtime`
/// (`None`: the daemon default), stored and ledgered; no staging tree is left.
pub async fn live_pipeline(
    docker: &container::BollardRuntime,
    agent: &LiveAgentUnderTest,
    repo: LiveRepo<'_>,
    upstream: &ScriptedUpstream,
    gateway_config: GatewayConfig,
    wall: u64,
    runtime: Option<&str>,
) -> LiveRun {
    let task = repo.task;
    let (dir, commit) = git_repo(&repo.files);
    let context = approval(
        dir.path(),
        &commit,
        task,
        repo.allowed,
        repo.read_only,
        repo.create,
        &[],
    );
    let config = TurnConfig::parse(agent.image, &agent.image_id, wall, 700_000)
        .unwrap()
        .with_runtime(runtime.map(|r| r.parse().unwrap()))
        .with_build_tmp_mib(agent.build_tmp_mib);
    let sinks = PipelineSinks::fresh();
    let gateway = scripted_gateway(agent.agent, gateway_config, agent.key, upstream);
    let turn_gateway = gateway.start_turn();
    let settings = LiveSettings::new(agent.agent, agent.model);
    let notes = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = notes.clone();
    let progress = move |n: &LiveNote| sink.lock().unwrap().push(n.clone());
    let live = LiveContext {
        settings: &settings,
        gateway: &turn_gateway,
        progress: &progress,
    };
    let outcome = run_live_pipeline(
        docker,
        sinks.request(dir.path(), &commit, &context, task, &config),
        &live,
    )
    .await;
    sinks.assert_staging_removed();
    let notes = notes.lock().unwrap().clone();
    LiveRun {
        outcome,
        repo: dir,
        notes,
    }
}

/// The requests `upstream` received: `count` of them, each carrying the credential `key` as a
/// bearer token.
pub fn bearer_requests(
    upstream: &ScriptedUpstream,
    count: usize,
    key: &str,
) -> Vec<RecordedRequest> {
    let requests = upstream.requests();
    assert_eq!(requests.len(), count);
    for r in &requests {
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {key}").as_str())
        );
    }
    requests
}

/// Asserts that `upstream` received requests, that each passes `check` (its route and
/// credential headers), and that no request body (the container's tunnelled bytes as the
/// upstream received them) contains the credential `key`.
pub fn assert_each_request_hides_key(
    upstream: &ScriptedUpstream,
    key: &str,
    check: impl Fn(&RecordedRequest),
) {
    let requests = upstream.requests();
    assert!(!requests.is_empty());
    for r in &requests {
        check(r);
        let body = String::from_utf8_lossy(&r.body);
        assert!(
            !body.contains(key),
            "the credential came back from the container"
        );
    }
}

/// Builds `agent`'s live image tagged `tag` from the runner under test (`images/build.sh --live
/// --agent A`, into a fresh state directory), checks its record names `adapter` at `version`
/// and that no other agent's record was written, and returns the image ID (or the build's
/// stderr).
pub fn build_live_image(
    agent: Agent,
    tag: &str,
    adapter: &str,
    version: &str,
) -> Result<String, String> {
    workspace_bin("turn-runner");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../images/build.sh");
    let state = tempfile::tempdir().unwrap();
    let out = Command::new("bash")
        .arg(&script)
        .args(["--live", "--agent", agent.name(), "--bin-dir"])
        .arg(target_dir())
        .env("PATCH_CANDIDATE_STATE_DIR", state.path())
        .env("LIVE_IMAGE_TAG", tag)
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let live = turn::LiveImageState::load_for(state.path(), agent)
        .unwrap()
        .expect("the agent's live image record");
    assert_eq!(live.image.as_str(), tag);
    assert_eq!(live.agent, adapter);
    assert_eq!(live.agent_version, version);
    for other in Agent::ALL.into_iter().filter(|a| *a != agent) {
        assert!(
            turn::LiveImageState::load_for(state.path(), other)
                .unwrap()
                .is_none(),
            "another agent's record was written"
        );
    }
    Ok(live.image_id.as_str().to_owned())
}
