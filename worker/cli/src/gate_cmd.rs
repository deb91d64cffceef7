//! `patch-candidate gate`: runs a candidate's validation gates (the operator's `--gates`
//! definitions) in sealed containers, each against a cached baseline run, writes one evidence
//! file per gate and prints one verdict line per gate. `gate init python|rust` prints a working
//! definition file for the gate images `image build --gate` records.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand, ValueEnum};
use container::{ContainerRuntime, ImageId, RuntimeName};
use finalizer::{RepositoryPatchCandidate, repository_patch_digest};
use gate::{
    BaselineCache, BaselineTree, BaselineUse, GateDefinitions, GateKind, GateResult, RunContext,
    evaluate_gate, init_definitions, store_evidence, verdict_line,
};

use super::docker_args::{DockerArgs, state_dir, tokio_runtime};
use super::finalize_cmd::read_candidate;
use super::outcome::{GATE_IMAGE_CODE, GATE_NONE_CODE, display_path};
use super::paths::{require_dir, require_parent};
use super::signals::Interruptible;
use super::{CliError, Outcome};

/// `gate` arguments.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub(crate) struct GateArgs {
    #[command(subcommand)]
    command: Option<GateCommand>,
    /// The candidate JSON file (e.g. from the candidate store).
    #[arg(value_name = "CANDIDATE", required = true)]
    candidate: Option<PathBuf>,
    #[command(flatten)]
    gates: GateRunArgs,
    /// Write the evidence files here (default: the candidate file's folder).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

/// The options `gate` and `run --gates` share.
#[derive(Debug, Clone, Args)]
pub(crate) struct GateRunArgs {
    /// Local Git repository the candidate is for (read only, at the candidate's baseline commit;
    /// the work tree is never read).
    #[arg(long, value_name = "DIR")]
    pub repo: Option<PathBuf>,
    /// The operator's gate definitions (TOML, docs/GATES.md). Trusted input: never a file from
    /// the repository the gates check.
    #[arg(long = "gates", value_name = "FILE")]
    pub gates: Option<PathBuf>,
    /// Run only these gates (repeatable; default: the candidate's required_validation_gates).
    #[arg(long = "gate", value_name = "NAME")]
    pub gate: Vec<String>,
    /// OCI runtime for the gate containers (e.g. `runsc`), verified before start.
    #[arg(long = "gate-runtime", value_name = "NAME")]
    pub runtime: Option<String>,
    #[command(flatten)]
    pub docker: DockerArgs,
}

#[derive(Debug, Subcommand)]
enum GateCommand {
    /// Print a working gate definition file for the image `image build --gate KIND` recorded
    /// (or `--image`), to edit and pass as `--gates`.
    Init(InitArgs),
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum InitKind {
    /// A `pytest` gate (JUnit through `--junitxml`).
    Python,
    /// A `cargo-test` gate (`--offline --frozen`, `CARGO_TARGET_DIR` in `/tmp`).
    Rust,
}

#[derive(Debug, Args)]
struct InitArgs {
    kind: InitKind,
    /// The gate image's immutable ID (default: the one `image build --gate KIND` recorded in
    /// `<state dir>/gate-images.json`).
    #[arg(long, value_name = "sha256:ID")]
    image: Option<String>,
}

/// The image ID `image build --gate` recorded for `kind` (`gate::GateImagesState`).
fn recorded_gate_image(state: &Path, kind: &str) -> Result<Option<ImageId>, CliError> {
    let Some(records) = gate::GateImagesState::load(state)? else {
        return Ok(None);
    };
    let Some(name) = gate::GateImageName::parse(kind) else {
        return Ok(None);
    };
    Ok(records.get(&name).map(|r| r.image_id().clone()))
}

fn init(args: &InitArgs) -> Result<Outcome, CliError> {
    let (kind, name) = match args.kind {
        InitKind::Python => (GateKind::Python, "python"),
        InitKind::Rust => (GateKind::Rust, "rust"),
    };
    let image: ImageId = match &args.image {
        Some(id) => id.parse().map_err(container::ContainerError::from)?,
        None => recorded_gate_image(&state_dir()?, name)?.ok_or_else(|| {
            CliError::environment(
                GATE_IMAGE_CODE,
                "no gate image recorded for this kind: run `patch-candidate image build --gate KIND` or pass --image",
            )
        })?,
    };
    let text = init_definitions(kind, &image);
    Ok(Outcome {
        json: serde_json::json!({"kind": name, "image_id": image.as_str(), "definitions": text}),
        text,
    })
}

/// The result of running a candidate's gates.
pub(crate) struct GatesRun {
    pub results: Vec<GateResult>,
    pub files: Vec<PathBuf>,
}

/// Loads the definitions and checks every name (before anything runs).
pub(crate) fn load_definitions(path: &Path) -> Result<GateDefinitions, CliError> {
    Ok(GateDefinitions::load(path)?)
}

/// Which gates to run for `candidate`: `--gate` names, else the candidate's required gates.
fn selected(
    args: &GateRunArgs,
    candidate: &RepositoryPatchCandidate,
) -> Result<Vec<String>, CliError> {
    let names: Vec<String> = if args.gate.is_empty() {
        candidate.required_validation_gates().to_vec()
    } else {
        args.gate.clone()
    };
    if names.is_empty() {
        return Err(CliError::usage(
            GATE_NONE_CODE,
            "the candidate requires no validation gate; name one with --gate",
        ));
    }
    Ok(names)
}

/// Runs the selected gates of `candidate` and writes their evidence into `out` (async part).
async fn run_all<R: ContainerRuntime + Clone + 'static>(
    runtime: &R,
    defs: &GateDefinitions,
    names: &[String],
    repo: &Path,
    candidate: &RepositoryPatchCandidate,
    out: &Path,
    runtime_name: Option<&RuntimeName>,
) -> Result<GatesRun, CliError> {
    let digest = repository_patch_digest(candidate)?;
    let chosen = defs.require(names)?;
    let state = state_dir()?;
    let cache = BaselineCache::open(&state)?;
    let repo = repo.to_owned();
    let commit = candidate.baseline_commit_sha().to_owned();
    let base = tokio::task::spawn_blocking(move || BaselineTree::load(&repo, &commit))
        .await
        .map_err(|_| {
            CliError::environment(super::outcome::RUNTIME_CODE, "the tree reader failed")
        })??;
    let ctx = RunContext {
        runtime: runtime_name,
        job: None,
    };
    let mut results = Vec::new();
    let mut files = Vec::new();
    for def in chosen {
        tracing::info!("gate {}: running", def.name());
        let result = evaluate_gate(runtime, def, &base, candidate, &cache, ctx).await?;
        files.push(store_evidence(out, &digest, &result)?);
        results.push(result);
    }
    Ok(GatesRun { results, files })
}

/// `gate` and `run --gates`: checks, then runs the gates under the signal guard.
pub(crate) fn execute(
    args: &GateRunArgs,
    candidate: &RepositoryPatchCandidate,
    out: &Path,
) -> Result<GatesRun, CliError> {
    let (Some(repo), Some(gates)) = (&args.repo, &args.gates) else {
        return Err(CliError::usage(
            super::outcome::INPUT_CODE,
            "gates need --repo DIR and --gates FILE",
        ));
    };
    require_dir("--repo", repo)?;
    let defs = load_definitions(gates)?;
    let names = selected(args, candidate)?;
    // Unknown gates fail here, before anything runs.
    defs.require(&names)?;
    let runtime_name = args
        .runtime
        .as_deref()
        .map(str::parse::<RuntimeName>)
        .transpose()
        .map_err(container::ContainerError::from)?;
    let rt = tokio_runtime()?;
    rt.block_on(async {
        let interruptible = Interruptible::install()?;
        let docker = args.docker.connect().await?;
        interruptible
            .run(run_all(
                &docker,
                &defs,
                &names,
                repo,
                candidate,
                out,
                runtime_name.as_ref(),
            ))
            .await
    })
}

/// One verdict line per gate, and where each evidence file went.
pub(crate) fn verdict_text(run: &GatesRun) -> String {
    let mut text = String::new();
    for (result, file) in run.results.iter().zip(&run.files) {
        let _ = writeln!(text, "{}", verdict_line(&result.evidence, &result.digest));
        let baseline = match result.baseline {
            BaselineUse::Cached => "baseline: cached",
            BaselineUse::Ran => "baseline: ran",
            BaselineUse::NotNeeded => "baseline: not needed",
        };
        let _ = writeln!(text, "  {baseline}; evidence file {}", display_path(file));
    }
    text
}

pub(crate) fn verdict_json(run: &GatesRun) -> serde_json::Value {
    serde_json::Value::Array(
        run.results
            .iter()
            .zip(&run.files)
            .map(|(r, f)| {
                serde_json::json!({
                    "gate": r.evidence.gate,
                    "outcome": r.evidence.outcome.as_str(),
                    "code": r.evidence.code,
                    "regression": r.evidence.comparison.as_ref().map(|c| c.regression),
                    "evidence_digest": r.digest.to_string(),
                    "evidence_file": f.display().to_string(),
                    "baseline_cached": r.baseline == BaselineUse::Cached,
                    "containers_run": r.containers_run,
                })
            })
            .collect(),
    )
}

pub(crate) fn run(args: &GateArgs) -> Result<Outcome, CliError> {
    if let Some(GateCommand::Init(init_args)) = &args.command {
        return init(init_args);
    }
    let Some(path) = &args.candidate else {
        return Err(CliError::usage(
            super::outcome::INPUT_CODE,
            "gate needs a CANDIDATE file",
        ));
    };
    if let Some(out) = &args.out {
        require_parent("--out", out)?;
    }
    let candidate = read_candidate(path)?;
    let out = match &args.out {
        Some(out) => out.clone(),
        None => path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf),
    };
    let run = execute(&args.gates, &candidate, &out)?;
    Ok(Outcome {
        json: serde_json::json!({
            "candidate_digest": repository_patch_digest(&candidate)?.to_string(),
            "gates": verdict_json(&run),
        }),
        text: verdict_text(&run),
    })
}
