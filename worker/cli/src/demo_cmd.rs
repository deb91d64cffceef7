//! `patch-candidate demo`: the whole loop on a built-in fixture. It builds the proof image and the
//! python gate image if needed, creates a fixture repository, an approval (one update, one create,
//! one delete grant, one read-only test file, gates `pytest` and `secret_scan`), the operator's
//! gate definitions and a bare repository to publish to; then runs the turn with its gates and
//! follow-ups (`run --gates --max-follow-ups 2`: the first attempt fails a repository test, the
//! follow-up passes), shows that `git apply --check` accepts the last candidate, accepts it in the
//! local review store (`review accept --gates`), publishes it to a new branch of the bare
//! repository (`publish`), and says how to open the review page. Each step is the command's own
//! function, called in this process.

use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Args;
use container::{ContainerRuntime as _, ImageId, ImageReference};
use gate::{GateImageName, GateImagesState, GateKind, init_definitions};
use service::ChainEnd;
use turn::ImagesState;

use super::docker_args::{DockerArgs, state_dir, tokio_runtime};
use super::image_cmd::{GateBuild, GateStack, build_gate_image, build_images, source_dir};
use super::outcome::{DEMO_APPLY_CODE, DEMO_CHAIN_CODE, DEMO_CODE, OUTPUT_CODE, display_path};
use super::paths::{require_dir, require_parent};
use super::plan_args::{FollowUpArgs, ImageArgs, TurnArgs};
use super::publish_cmd::PublishArgs;
use super::review_cmd::{CandidateArgs, DecideArgs, EvidenceArgs, ReviewCommand};
use super::run_cmd::{RunArgs, end_text, execute, run_chain};
use super::{CliError, Outcome, render};
use turn::PipelineOutcome;

/// The fixture script, embedded so the demo needs no source checkout for it.
const MAKE_DEMO: &str = include_str!("../../../fixtures/demo/make-demo.sh");
/// The follow-ups the demo's chain may run (it needs one).
const MAX_FOLLOW_UPS: u32 = 2;
/// The gate image the demo's gates run in (`image build --gate python`).
const GATE_IMAGE: &str = "python";

/// `demo` arguments.
#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Where to create the fixture repository (must not exist; default: a fresh temp directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Source checkout holding `images/build.sh`, used when the proof image must be built.
    #[arg(long)]
    source: Option<PathBuf>,
    /// OCI runtime to run the turn under (`runsc` for gVisor), verified before start.
    #[arg(long)]
    runtime: Option<String>,
    #[command(flatten)]
    docker: DockerArgs,
}

fn env_err(message: impl Into<String>) -> CliError {
    CliError::environment(DEMO_CODE, message)
}

/// The recorded images when they are still present on the daemon under their approved IDs.
pub(crate) fn recorded_images_present(
    docker: &DockerArgs,
    state: &Path,
) -> Result<Option<ImagesState>, CliError> {
    let Some(images) = ImagesState::load(state)? else {
        return Ok(None);
    };
    let present = daemon_holds(docker, &images.image, images.image_id.as_str())?;
    Ok(present.then_some(images))
}

/// Whether the daemon holds `reference` as exactly the image `id`.
fn daemon_holds(
    docker: &DockerArgs,
    reference: &ImageReference,
    id: &str,
) -> Result<bool, CliError> {
    tokio_runtime()?.block_on(async {
        let docker = docker.connect().await?;
        Ok(docker
            .inspect_image(reference)
            .await
            .is_ok_and(|i| i.id == id))
    })
}

/// The recorded images, built first when missing or no longer present on the daemon.
fn ensure_images(args: &DemoArgs, state: &Path) -> Result<ImagesState, CliError> {
    match recorded_images_present(&args.docker, state)? {
        Some(images) => Ok(images),
        None => build_images(&source_dir(args.source.as_deref())?, state),
    }
}

/// The python gate image's ID as `gate-images.json` records it, when the daemon still holds an
/// image with exactly that ID.
fn recorded_gate_image_present(
    docker: &DockerArgs,
    state: &Path,
) -> Result<Option<ImageId>, CliError> {
    let Some(name) = GateImageName::parse(GATE_IMAGE) else {
        return Ok(None);
    };
    let Some(id) = GateImagesState::load(state)?
        .and_then(|records| records.get(&name).map(|r| r.image_id().clone()))
    else {
        return Ok(None);
    };
    let Ok(reference) = id.as_str().parse::<ImageReference>() else {
        return Ok(None);
    };
    let present = daemon_holds(docker, &reference, id.as_str())?;
    Ok(present.then_some(id))
}

/// The python gate image, built first (`images/build.sh --gate python`) when missing.
fn ensure_gate_image(args: &DemoArgs, state: &Path) -> Result<ImageId, CliError> {
    if let Some(id) = recorded_gate_image_present(&args.docker, state)? {
        return Ok(id);
    }
    let build = GateBuild {
        stack: GateStack::Python,
        environment: None,
    };
    let (_, record) = build_gate_image(&source_dir(args.source.as_deref())?, state, build)?;
    Ok(record.image_id().clone())
}

/// The operator's gate definitions of the demo: `gate init python`'s `pytest`, and a
/// `secret_scan` gate whose whole program is in its argv (the operator's, never the tree's): it
/// reads every file of the candidate's tree and names the file and line of each match, never the
/// value.
fn gate_definitions(image: &ImageId) -> String {
    let mut text = init_definitions(GateKind::Python, image);
    text.push_str(&format!(
        r#"
[gates.secret_scan]
image = "{image}"
argv = ["python3", "-P", "-s", "-c", "{program}"]
cwd = "."
wall_seconds = 60
kill_grace_ms = 1000
memory_mib = 256
pids = 64
cpu_millis = 1000
workspace_mib = 64
tmp_mib = 16
log_tail_bytes = 16384
pinned = []

[gates.secret_scan.env]
HOME = "/tmp/home"
PATH = "/usr/bin:/bin"
PYTHONDONTWRITEBYTECODE = "1"
"#,
        image = image.as_str(),
        program = toml_basic(SECRET_SCAN)
    ));
    text
}

/// The `secret_scan` gate's program (`python3 -c`).
const SECRET_SCAN: &str = r"import os, re, sys

pattern = re.compile(
    rb'AKIA[0-9A-Z]{16}|-----BEGIN [A-Z ]*PRIVATE KEY-----|gh[pousr]_[A-Za-z0-9]{36}'
    rb'|xox[abposr]-[A-Za-z0-9-]{10,}'
)
found = 0
for root, dirs, files in os.walk('.'):
    dirs.sort()
    for name in sorted(files):
        path = os.path.join(root, name)
        with open(path, 'rb') as f:
            for number, line in enumerate(f, 1):
                if pattern.search(line):
                    found += 1
                    print(f'{path[2:]}:{number}: looks like a credential')
print(f'secret_scan: {found} finding(s)')
sys.exit(1 if found else 0)
";

/// `text` as the body of a TOML basic string.
fn toml_basic(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn make_fixture(dir: &Path) -> Result<(String, String), CliError> {
    use std::os::unix::fs::DirBuilderExt as _;
    require_parent("--dir", dir)?;
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(dir)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => CliError::usage(
                DEMO_CODE,
                format!("--dir must name a new directory: {}", display_path(dir)),
            ),
            _ => env_err(format!("cannot create {}", display_path(dir))),
        })?;
    let bin = std::env::current_exe().map_err(|_| env_err("cannot locate this binary"))?;
    let status = Command::new("bash")
        .arg("-c")
        .arg(MAKE_DEMO)
        .arg("make-demo.sh")
        .arg(dir)
        .arg(&bin)
        .stdout(std::process::Stdio::from(std::io::stderr()))
        .status()
        .map_err(|_| env_err("cannot run bash"))?;
    if !status.success() {
        return Err(env_err("fixture script failed"));
    }
    let read = |name: &str| {
        std::fs::read_to_string(dir.join(name))
            .map_err(|_| env_err(format!("fixture lacks {name}")))
    };
    Ok((read("commit")?, read("task")?))
}

fn git_apply_check(repo: &Path, patch: &Path) -> Result<(), CliError> {
    // The launcher's isolated git (no host config), under its deadline, output discarded.
    let output = snapshot::Git::isolated(None)
        .arg("-C")
        .arg(repo)
        .args(["apply", "--check", "--verbose"])
        .arg(patch)
        .run(None)
        .map_err(|_| env_err("cannot run git"))?;
    if !output.success() {
        return Err(CliError::rejected(
            DEMO_APPLY_CODE,
            "git apply --check refused the candidate",
        ));
    }
    Ok(())
}

pub(crate) fn run(args: &DemoArgs) -> Result<Outcome, CliError> {
    let state = state_dir()?;
    // The named paths first, before any build or Docker call.
    if let Some(dir) = &args.dir {
        require_parent("--dir", dir)?;
    }
    if let Some(source) = &args.source {
        require_dir("--source", source)?;
    }
    let images = ensure_images(args, &state)?;
    tracing::info!(
        "demo: image {} = {}",
        render::name(images.image.as_str()),
        render::name(images.image_id.as_str())
    );
    let gate_image = ensure_gate_image(args, &state)?;
    tracing::info!(
        "demo: gate image {GATE_IMAGE} = {}",
        render::name(gate_image.as_str())
    );
    let dir = args.dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!(
            "patch-candidate-demo-{}",
            uuid::Uuid::new_v4().simple()
        ))
    });
    let (commit, task) = fixture(&dir)?;
    // The remote and the operator's files by absolute path: they are printed and passed on.
    let dir = std::path::absolute(&dir).map_err(|_| env_err("cannot resolve --dir"))?;
    let gates = dir.join("gates.toml");
    std::fs::write(&gates, gate_definitions(&gate_image))
        .map_err(|_| env_err("cannot write gates.toml"))?;

    // 1. The turn, its gates and the follow-ups, as `run --gates --max-follow-ups` runs them.
    let mut run_args = turn_args(
        &dir,
        commit,
        task,
        &images,
        &args.docker,
        args.runtime.clone(),
    );
    run_args.gates = Some(gates.clone());
    run_args.follow_ups = FollowUpArgs {
        max_follow_ups: MAX_FOLLOW_UPS,
        follow_up_token_budget: None,
    };
    let chain = run_chain(&run_args)?;
    let end = chain.end.unwrap_or(ChainEnd::GateError);
    if end != ChainEnd::Green {
        return Err(CliError::rejected(
            DEMO_CHAIN_CODE,
            format!(
                "the chain of the demo ended {} ({}), not green: see the gate evidence in {}",
                end.as_str(),
                end_text(end),
                display_path(&chain.store)
            ),
        ));
    }
    let digest = chain.last.digest.to_string();
    let patch_path = apply_check(&dir, &chain.last)?;
    let mut text = String::from("== 1. the turn, its gates and the follow-up ==\n");
    text.push_str(&chain.shown.text);
    text.push_str(&format!(
        "git apply --check: ok ({})\nrepository untouched: {}\n",
        display_path(&patch_path),
        display_path(&dir.join("repo"))
    ));

    // 2. The review decision on the last candidate, against the gate evidence of its digest.
    let which = CandidateArgs {
        candidate: digest.clone(),
        store: Some(chain.store.clone()),
    };
    let accept = super::review_cmd::run(&ReviewCommand::Accept(DecideArgs {
        which: which.clone(),
        evidence: EvidenceArgs {
            gates: Some(gates.clone()),
            evidence_dir: None,
        },
        digest: None,
        reason: None,
        force: false,
    }))?;
    tracing::info!("demo: accepted {digest}");
    text.push_str("\n== 2. review ==\n");
    text.push_str(&accept.text);

    // 3. Publication to a new branch of the bare repository, then the branch read back.
    let remote = dir.join("remote.git");
    let branch = format!(
        "patch-candidate/demo-{}",
        digest
            .trim_start_matches("sha256:")
            .get(..12)
            .unwrap_or("candidate")
    );
    let published = super::publish_cmd::run(&PublishArgs {
        which,
        remote: remote
            .to_str()
            .ok_or_else(|| env_err("--dir must be a UTF-8 path"))?
            .to_owned(),
        branch: branch.clone(),
        base: "main".to_owned(),
        repo: Some(dir.join("repo")),
        credential_file: None,
        credential_helper: None,
        identity_name: "patch-candidate".to_owned(),
        identity_email: "patch-candidate@localhost".to_owned(),
        rebase: false,
        gates: None,
        gate_runtime: None,
        docker: args.docker.clone(),
    })?;
    let tip = branch_tip(&remote, &branch)?;
    text.push_str("\n== 3. publication ==\n");
    text.push_str(&published.text);
    text.push_str(&format!(
        "branch {} of {} is at {tip}\n",
        render::name(&branch),
        display_path(&remote)
    ));

    // 4. Where the same loop has a page: the service's review UI.
    let page = review_page(&dir, &state);
    text.push_str("\n== 4. the review page ==\n");
    text.push_str(&page.text);

    let mut json = chain.shown.json;
    if let Some(obj) = json.as_object_mut() {
        obj.insert("git_apply_check".to_owned(), serde_json::Value::Bool(true));
        obj.insert("runtime".to_owned(), serde_json::json!(args.runtime));
        obj.insert(
            "fixture_dir".to_owned(),
            serde_json::Value::String(dir.display().to_string()),
        );
        obj.insert(
            "gates_file".to_owned(),
            serde_json::Value::String(gates.display().to_string()),
        );
        obj.insert("review".to_owned(), accept.json);
        obj.insert(
            "publication".to_owned(),
            serde_json::json!({
                "record": published.json,
                "remote": remote.display().to_string(),
                "branch": branch,
                "branch_tip": tip,
            }),
        );
        obj.insert("review_page".to_owned(), page.json);
    }
    Ok(Outcome { json, text })
}

/// The commit `branch` of the bare repository `remote` holds, read back with the isolated git.
fn branch_tip(remote: &Path, branch: &str) -> Result<String, CliError> {
    let output = snapshot::Git::isolated(None)
        .arg("-C")
        .arg(remote)
        .args(["rev-parse", "--verify", "--end-of-options"])
        .arg(format!("refs/heads/{branch}^{{commit}}"))
        .capture_stdout(256)
        .run(None)
        .map_err(|_| env_err("cannot run git"))?;
    let tip = String::from_utf8(output.stdout)
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    if !output.status.success() || tip.len() != 40 || !tip.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(CliError::environment(
            OUTPUT_CODE,
            "the published branch cannot be read back from the bare repository",
        ));
    }
    Ok(tip)
}

/// How to see the demo's loop in the service's review UI: the commands, the URL and where the
/// sign-in token is.
fn review_page(dir: &Path, state: &Path) -> Outcome {
    let show = |p: &Path| display_path(p);
    let serve = format!(
        "patch-candidate serve --gates {} --max-follow-ups {MAX_FOLLOW_UPS} --publish-remote {}",
        show(&dir.join("gates.toml")),
        show(&dir.join("remote.git"))
    );
    let submit = format!(
        "patch-candidate jobs submit --repo {} --approval {} --gates {} --max-follow-ups {MAX_FOLLOW_UPS}",
        show(&dir.join("repo")),
        show(&dir.join("approval.json")),
        show(&dir.join("gates.toml"))
    );
    let url = format!("http://{}/ui/", service::DEFAULT_LISTEN);
    let token = state::API_TOKEN.path_in(state);
    let text = format!(
        "to review this loop in the browser, start the service and queue the demo as a job:\n  \
         {serve}\n  {submit}\nthen open {url} and sign in with the token in {} (written at the \
         service's first start)\n",
        show(&token)
    );
    let json = serde_json::json!({
        "url": url,
        "serve": serve,
        "submit": submit,
        "token_file": token.display().to_string(),
    });
    Outcome { json, text }
}

/// The `run` arguments of one turn on the fixture in `dir`.
fn turn_args(
    dir: &Path,
    commit: String,
    task: String,
    images: &ImagesState,
    docker: &DockerArgs,
    runtime: Option<String>,
) -> RunArgs {
    RunArgs {
        repo: dir.join("repo"),
        commit: Some(commit),
        approval: dir.join("approval.json"),
        task: Some(task),
        image: ImageArgs {
            image: Some(images.image.to_string()),
            image_id: Some(images.image_id.to_string()),
        },
        store: Some(dir.join("candidates")),
        turn: TurnArgs {
            runtime,
            ..TurnArgs::default()
        },
        no_ledger: false,
        docker: docker.clone(),
        live: super::live_args::LiveArgs::default(),
        gates: None,
        follow_ups: FollowUpArgs::default(),
    }
}

/// Creates the fixture in `dir` (which must not exist): the commit and the task.
fn fixture(dir: &Path) -> Result<(String, String), CliError> {
    let (commit, task) = make_fixture(dir)?;
    tracing::info!(
        "demo: fixture repository {} at {}",
        display_path(&dir.join("repo")),
        render::name(&commit)
    );
    Ok((commit, task))
}

/// Writes the candidate's diffs to `dir/candidate.patch` and checks that `git apply --check`
/// accepts them on the fixture repository.
fn apply_check(dir: &Path, outcome: &PipelineOutcome) -> Result<PathBuf, CliError> {
    let patch_path = dir.join("candidate.patch");
    let patch: String = outcome
        .candidate
        .changed_files()
        .iter()
        .map(|f| f.diff())
        .collect();
    std::fs::write(&patch_path, &patch).map_err(|_| env_err("cannot write candidate.patch"))?;
    git_apply_check(&dir.join("repo"), &patch_path)?;
    tracing::info!(
        "demo: git apply --check accepts {}",
        display_path(&patch_path)
    );
    Ok(patch_path)
}

/// Creates the fixture in `dir` (which must not exist), runs one turn on it under `runtime`
/// (no gates), writes `candidate.patch` and checks that `git apply --check` accepts it
/// (`doctor`'s smoke turn).
pub(crate) fn demo_in(
    dir: &Path,
    images: &ImagesState,
    docker: &DockerArgs,
    runtime: Option<String>,
) -> Result<(PipelineOutcome, PathBuf, PathBuf), CliError> {
    let (commit, task) = fixture(dir)?;
    let run_args = turn_args(dir, commit, task, images, docker, runtime);
    let (outcome, store) = execute(&run_args, true, None)?;
    let patch_path = apply_check(dir, &outcome)?;
    Ok((outcome, store, patch_path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_gates_parse_and_the_scan_program_survives_toml() {
        let image: ImageId = format!("sha256:{}", "a".repeat(64)).parse().unwrap();
        let defs = gate::GateDefinitions::parse(gate_definitions(&image).as_bytes()).unwrap();
        defs.require(&["pytest", "secret_scan"]).unwrap();
        let scan = defs.get("secret_scan").unwrap();
        assert_eq!(scan.argv().last().map(String::as_str), Some(SECRET_SCAN));
        assert_eq!(toml_basic("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
