//! `patch-candidate demo`: builds the proof image if needed, creates a fixture repository and an
//! approval (one update, one create, one delete grant, one read-only test file), runs one turn,
//! prints the candidate, and shows that `git apply --check` accepts it.

use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Args;
use container::ContainerRuntime as _;
use turn::ImagesState;

use super::docker_args::{DockerArgs, state_dir, tokio_runtime};
use super::image_cmd::{build_images, source_dir};
use super::outcome::{DEMO_APPLY_CODE, DEMO_CODE, display_path};
use super::paths::{require_dir, require_parent};
use super::plan_args::{ImageArgs, TurnArgs};
use super::run_cmd::{RunArgs, execute, outcome_json, outcome_text};
use super::{CliError, Outcome, render};
use turn::PipelineOutcome;

/// The fixture script, embedded so the demo needs no source checkout for it.
const MAKE_DEMO: &str = include_str!("../../../fixtures/demo/make-demo.sh");

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
    let rt = tokio_runtime()?;
    let present = rt.block_on(async {
        let docker = docker.connect().await?;
        Ok::<_, CliError>(
            docker
                .inspect_image(&images.image)
                .await
                .is_ok_and(|i| i.id == images.image_id.as_str()),
        )
    })?;
    Ok(present.then_some(images))
}

/// The recorded images, built first when missing or no longer present on the daemon.
fn ensure_images(args: &DemoArgs, state: &Path) -> Result<ImagesState, CliError> {
    match recorded_images_present(&args.docker, state)? {
        Some(images) => Ok(images),
        None => build_images(&source_dir(args.source.as_deref())?, state),
    }
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
    let dir = args.dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!(
            "patch-candidate-demo-{}",
            uuid::Uuid::new_v4().simple()
        ))
    });
    let (outcome, store, patch_path) = demo_in(&dir, &images, &args.docker, args.runtime.clone())?;
    let mut text = outcome_text(&outcome, &store);
    text.push_str(&format!(
        "\ngit apply --check: ok ({})\nrepository untouched: {}\n",
        display_path(&patch_path),
        display_path(&dir.join("repo"))
    ));
    let mut json = outcome_json(&outcome, &store)?;
    if let Some(obj) = json.as_object_mut() {
        obj.insert("git_apply_check".to_owned(), serde_json::Value::Bool(true));
        obj.insert("runtime".to_owned(), serde_json::json!(args.runtime));
        obj.insert(
            "fixture_dir".to_owned(),
            serde_json::Value::String(dir.display().to_string()),
        );
    }
    Ok(Outcome { json, text })
}

/// Creates the fixture in `dir` (which must not exist), runs one turn on it under `runtime`,
/// writes `candidate.patch` and checks that `git apply --check` accepts it (shared with `doctor`'s
/// smoke turn).
pub(crate) fn demo_in(
    dir: &Path,
    images: &ImagesState,
    docker: &DockerArgs,
    runtime: Option<String>,
) -> Result<(PipelineOutcome, PathBuf, PathBuf), CliError> {
    let (commit, task) = make_fixture(dir)?;
    tracing::info!(
        "demo: fixture repository {} at {}",
        display_path(&dir.join("repo")),
        render::name(&commit)
    );
    let run_args = RunArgs {
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
        follow_ups: super::plan_args::FollowUpArgs::default(),
    };
    let (outcome, store) = execute(&run_args, true, None)?;
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
    Ok((outcome, store, patch_path))
}
