//! `patch-candidate run`: snapshot → verify approval → select → Docker turn → stage → finalise →
//! digest → store. Prints a summary, the digest and the diffs (JSON with `--json`); progress
//! goes to stderr.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use finalizer::CandidateStore;
use service::{ChainEnd, ChainLimits, Step, follow_up_feedback, next_step};
use snapshot::{ApprovedExecutionContext, MAX_CONTEXT_JSON_BYTES, RepoPath};
use turn::{
    ImageKind, LiveContext, ParentCandidate, PipelineOutcome, ReviewFeedback, TurnPlan,
    UsageLedger, run_live_pipeline, run_pipeline, same_changes,
};

use super::docker_args::{DockerArgs, state_dir, tokio_runtime};
use super::live_args::{LiveArgs, live_setup, parse_agent, print_note};
use super::outcome::{OUTPUT_CODE, STATE_CODE, display_path};
use super::paths::{read_file, require_dir, require_parent};
use super::plan_args::{FollowUpArgs, ImageArgs, TurnArgs};
use super::signals::Interruptible;
use super::{CliError, Outcome, render};

/// `run` arguments.
#[derive(Debug, Clone, Args)]
pub(crate) struct RunArgs {
    /// Local Git repository (read only, at `--commit`).
    #[arg(long)]
    pub repo: PathBuf,
    /// The pinned commit (40 hex digits); must equal the approval's baseline commit. Default: the
    /// approval's `baseline_commit_sha`.
    #[arg(long)]
    pub commit: Option<String>,
    /// The approved execution context (`managed_refinement.execution_context.v1` JSON).
    #[arg(long)]
    pub approval: PathBuf,
    /// The task; must equal the approval's `raw_request` exactly. Default: the approval's
    /// `raw_request`.
    #[arg(long)]
    pub task: Option<String>,
    #[command(flatten)]
    pub image: ImageArgs,
    /// Candidate store directory (default: `<state dir>/candidates`).
    #[arg(long)]
    pub store: Option<PathBuf>,
    #[command(flatten)]
    pub turn: TurnArgs,
    /// Do not record token usage in the local ledger.
    #[arg(long)]
    pub no_ledger: bool,
    #[command(flatten)]
    pub docker: DockerArgs,
    #[command(flatten)]
    pub live: LiveArgs,
    /// Run the approval's required validation gates after the turn, with these operator gate
    /// definitions (docs/GATES.md): one verdict line per gate, evidence next to the candidate in
    /// the store. A required gate they do not define is refused before anything runs.
    #[arg(long = "gates", value_name = "FILE")]
    pub gates: Option<PathBuf>,
    #[command(flatten)]
    pub follow_ups: FollowUpArgs,
}

/// Parses an approval with the one approval parser (strict JSON, every validator).
pub(crate) fn load_approval(path: &Path) -> Result<ApprovedExecutionContext, CliError> {
    let bytes = read_file("--approval", path, MAX_CONTEXT_JSON_BYTES)?;
    Ok(ApprovedExecutionContext::from_slice(&bytes)?)
}

/// Runs the pipeline with already-resolved inputs (shared with `demo`).
pub(crate) fn execute(
    args: &RunArgs,
    progress: bool,
    follow_up: Option<(ReviewFeedback, ParentCandidate)>,
) -> Result<(PipelineOutcome, PathBuf), CliError> {
    let state = state_dir()?;
    require_dir("--repo", &args.repo)?;
    if let Some(store) = &args.store {
        require_parent("--store", store)?;
    }
    let context = load_approval(&args.approval)?;
    // The gates' commands become a live agent's validation hints: the approval's required gates,
    // or every gate of the file when it requires none.
    let mut hints = Vec::new();
    if let Some(gates) = &args.gates {
        let defs = super::gate_cmd::load_definitions(gates)?;
        gate::check_required_gates(context.required_validation_gates(), &defs)?;
        hints = defs.command_hints(context.required_validation_gates());
    }
    let agent = args
        .live
        .live
        .then(|| parse_agent(args.live.agent.as_deref()))
        .transpose()?;
    let (image, environment) = turn::resolve_image_environment(
        ImageKind::for_live(agent),
        args.image.image.as_deref(),
        args.image.image_id.as_deref(),
        &state,
    )?;
    // The gateway (and the credential it holds) exists only for a live turn.
    let live = if args.live.live {
        Some(live_setup(&args.live)?)
    } else {
        None
    };
    let policy = args.turn.policy_text()?;
    let inputs = args.turn.plan_inputs(
        args.commit.as_deref(),
        args.task.as_deref(),
        policy.as_deref(),
        live.as_ref()
            .map(|(settings, _)| (settings.model.as_str(), settings.agent)),
    );
    let (feedback, parent) = follow_up.unzip();
    let plan = TurnPlan::lower(context, image, &inputs)?
        .with_validation_hints(hints)
        .with_build_tmp_mib(environment.and_then(|e| e.build_tmp_mib))
        .with_review_feedback(feedback)
        .with_parent(parent);
    let store_dir = args
        .store
        .clone()
        .unwrap_or_else(|| state::CANDIDATES.path_in(&state));
    let store = CandidateStore::open(&store_dir)?;
    let ledger = if args.no_ledger {
        None
    } else {
        create_private_dir(&state)?;
        match UsageLedger::open(&state::USAGE_LEDGER.path_in(&state)) {
            Ok(l) => Some(l),
            Err(e) => {
                tracing::warn!("{}: usage will not be recorded", e.code());
                None
            }
        }
    };
    let user = std::env::var("USER").unwrap_or_else(|_| "local".to_owned());
    let staging_parent = std::env::temp_dir();

    let rt = tokio_runtime()?;
    let outcome = rt.block_on(async {
        // From here on SIGINT / SIGTERM cancel the work below, remove what it created and end
        // the process with 130 / 143.
        let interruptible = Interruptible::install()?;
        let request = plan.pipeline_request(
            &args.repo,
            &staging_parent,
            Some(&store),
            ledger.as_ref(),
            &user,
        );
        interruptible
            .run(turn_with_sweep(
                &args.docker,
                progress,
                &plan,
                request,
                live.as_ref().map(|(_, gateway)| gateway),
            ))
            .await
    })?;
    if progress {
        tracing::info!(
            "done: snapshot {} ms, turn {} ms, stage+finalize {} ms",
            outcome.timings.snapshot_ms,
            outcome.timings.turn_ms,
            outcome.timings.stage_finalize_ms
        );
    }
    Ok((outcome, store_dir))
}

/// Connect, sweep abandoned turns (the janitor's rule: never a live turn of anyone), run.
async fn turn_with_sweep(
    docker_args: &DockerArgs,
    progress: bool,
    plan: &TurnPlan,
    request: turn::PipelineRequest<'_>,
    gateway: Option<&std::sync::Arc<gateway::Gateway>>,
) -> Result<PipelineOutcome, CliError> {
    let docker = docker_args.connect().await?;
    if progress {
        tracing::info!(
            "docker: API {} on {}",
            render::name(&docker.api_version()),
            display_path(docker.socket())
        );
    }
    match container::sweep_abandoned_turns(&docker, container::DEFAULT_GRACE, vocab::now_unix())
        .await
    {
        Ok(report) if !report.removed.is_empty() => {
            tracing::info!(
                "janitor: removed {} abandoned turn container(s)",
                report.removed.len()
            );
        }
        Ok(_) => {}
        Err(e) => tracing::warn!("janitor: {}", e.code()),
    }
    if progress {
        let config = plan.config();
        tracing::info!(
            "turn: image {} ({})",
            render::name(&config.image().to_string()),
            render::name(&config.expected_image_id().to_string())
        );
    }
    let live = plan.live().zip(gateway);
    match live {
        None => run_pipeline(&docker, request).await.map_err(CliError::from),
        Some((settings, gateway)) => {
            if progress {
                tracing::info!(
                    "live: agent {} with model {}",
                    settings.agent,
                    render::name(&settings.model)
                );
            }
            let turn_gateway = gateway.start_turn();
            let quiet = |_: &turn::LiveNote| {};
            let sink: &turn::LiveProgress = if progress { &print_note } else { &quiet };
            let live = LiveContext {
                settings,
                gateway: &turn_gateway,
                progress: sink,
            };
            let outcome = run_live_pipeline(&docker, request, &live).await;
            if progress {
                let usage = turn_gateway.usage();
                tracing::info!(
                    "gateway: {} request(s), {} refused, {} tokens ({} in, {} out)",
                    usage.requests,
                    usage.refused,
                    usage.total_tokens,
                    usage.input_tokens,
                    usage.output_tokens
                );
            }
            outcome.map_err(CliError::from)
        }
    }
}

fn create_private_dir(dir: &Path) -> Result<(), CliError> {
    // The state directory holds the operator's records; the one ambient path of this command.
    state::create_private_dir(dir)
        .map_err(|_| CliError::environment(STATE_CODE, "cannot create the state directory"))
}

/// The human text of a pipeline outcome (shared with `demo`): the one candidate summary, where it
/// is stored, then the diffs.
pub(crate) fn outcome_text(outcome: &PipelineOutcome, store: &Path) -> String {
    let mut text = render::summary(&outcome.candidate, &outcome.digest.to_string());
    let _ = writeln!(text, "stored in: {}", display_path(store));
    if let Some(live) = &outcome.live {
        let c = live.commands;
        let _ = writeln!(
            text,
            "commands: {} run, {} failed, {:.1} s (the agent's reports, timed by the worker)",
            c.commands,
            c.failed,
            Duration::from_millis(c.command_ms).as_secs_f64()
        );
    }
    text.push_str(&render::diffs(&outcome.candidate, render::colour_wanted()));
    text
}

pub(crate) fn outcome_json(
    outcome: &PipelineOutcome,
    store: &Path,
) -> Result<serde_json::Value, CliError> {
    let candidate = serde_json::to_value(&outcome.candidate)
        .map_err(|_| CliError::environment(OUTPUT_CODE, "candidate serialisation failed"))?;
    let mut doc = serde_json::json!({
        "digest": outcome.digest.to_string(),
        "store": store.display().to_string(),
        "container_name": outcome.container_name.as_str(),
        "selected_paths": outcome.selected.iter().map(RepoPath::as_str).collect::<Vec<_>>(),
        "read_only_paths": outcome.read_only.iter().map(RepoPath::as_str).collect::<Vec<_>>(),
        "usage": outcome.usage,
        "usage_recorded": outcome.usage_recorded,
        "timings_ms": outcome.timings,
        "candidate": candidate,
    });
    // A live turn adds the gateway's trusted usage and its refusals; the offline shape is as it
    // was.
    if let (Some(live), Some(map)) = (&outcome.live, doc.as_object_mut()) {
        let gateway = serde_json::to_value(live).map_err(|_| {
            CliError::environment(OUTPUT_CODE, "gateway usage serialisation failed")
        })?;
        map.insert("gateway".to_owned(), gateway);
    }
    Ok(doc)
}

/// The gateway's trusted token count of a live attempt (0 offline).
fn tokens_of(outcome: &PipelineOutcome) -> u64 {
    outcome.live.as_ref().map_or(0, |l| l.gateway.total_tokens)
}

pub(crate) fn run(args: &RunArgs) -> Result<Outcome, CliError> {
    Ok(run_chain(args)?.shown)
}

/// What `run` did: its output, the last candidate of the chain and where it is stored, and how
/// the chain ended (shared with `demo`).
pub(crate) struct ChainRun {
    /// The output `run` prints.
    pub shown: Outcome,
    /// The last attempt (the only one without follow-ups).
    pub last: PipelineOutcome,
    /// The candidate store, where the gate evidence is too.
    pub store: PathBuf,
    /// How the chain ended; `None` when no gate ran (no `--gates`, or none required).
    pub end: Option<ChainEnd>,
}

/// `run`: the turn, then with `--gates` the required gates and up to `--max-follow-ups`
/// follow-ups.
pub(crate) fn run_chain(args: &RunArgs) -> Result<ChainRun, CliError> {
    let (mut outcome, store) = execute(args, true, None)?;
    let mut text = outcome_text(&outcome, &store);
    // The turn alone: no gate ran.
    let ungated = |outcome: PipelineOutcome, store: PathBuf, text: String| {
        let json = outcome_json(&outcome, &store)?;
        Ok(ChainRun {
            shown: Outcome { json, text },
            last: outcome,
            store,
            end: None,
        })
    };
    let Some(gates) = &args.gates else {
        return ungated(outcome, store, text);
    };
    if outcome.candidate.required_validation_gates().is_empty() {
        text.push_str("gates: the approval requires none\n");
        return ungated(outcome, store, text);
    }
    let gate_args = super::gate_cmd::GateRunArgs {
        repo: Some(args.repo.clone()),
        gates: Some(gates.clone()),
        gate: Vec::new(),
        runtime: args.turn.runtime.clone(),
        docker: args.docker.clone(),
    };
    // `--max-follow-ups 0` (no policy): the default bounds, no follow-up.
    let limits = args
        .follow_ups
        .policy()
        .map_or_else(ChainLimits::default, ChainLimits::from);
    let (mut follow_ups, mut tokens) = (0_u32, tokens_of(&outcome));
    let mut attempts = Vec::new();
    let (last_gates, end) = loop {
        let run = super::gate_cmd::execute(&gate_args, &outcome.candidate, &store)?;
        text.push_str(&super::gate_cmd::verdict_text(&run));
        let verdicts = super::gate_cmd::verdict_json(&run);
        attempts.push(serde_json::json!({
            "attempt": follow_ups + 1,
            "digest": outcome.digest.to_string(),
            "gates": verdicts,
            "tokens": tokens_of(&outcome),
        }));
        let evidence: Vec<&gate::GateEvidence> = run.results.iter().map(|r| &r.evidence).collect();
        if let Step::End(end) = next_step(&evidence, limits, follow_ups, tokens) {
            break (Some(verdicts), end);
        }
        let parent = ParentCandidate::new(outcome.candidate.clone())?;
        let feedback = follow_up_feedback(parent.digest(), None, &evidence)?;
        follow_ups += 1;
        let _ = writeln!(
            text,
            "follow-up {follow_ups} of {}: continuing {} with the failing gates as context",
            limits.max_follow_ups,
            parent.digest()
        );
        let (next, _) = execute(args, true, Some((feedback, parent.clone())))?;
        tokens = tokens.saturating_add(tokens_of(&next));
        text.push_str(&outcome_text(&next, &store));
        let unchanged = same_changes(parent.candidate(), &next.candidate);
        outcome = next;
        if unchanged {
            attempts.push(serde_json::json!({
                "attempt": follow_ups + 1,
                "digest": outcome.digest.to_string(),
                "gates": null,
                "tokens": tokens_of(&outcome),
            }));
            break (None, ChainEnd::NoChange);
        }
    };
    let mut json = outcome_json(&outcome, &store)?;
    if let Some(map) = json.as_object_mut() {
        if let Some(gates) = last_gates {
            map.insert("gates".to_owned(), gates);
        }
        // `chain` only when follow-ups were allowed: `run --gates` alone keeps its shape.
        if limits.max_follow_ups > 0 {
            map.insert(
                "chain".to_owned(),
                serde_json::json!({
                    "end": end.as_str(),
                    "follow_ups": follow_ups,
                    "tokens": tokens,
                    "attempts": attempts,
                }),
            );
        }
    }
    if limits.max_follow_ups > 0 {
        let _ = writeln!(
            text,
            "chain: {} after {follow_ups} follow-up(s); last candidate {}",
            end_text(end),
            outcome.digest
        );
    }
    Ok(ChainRun {
        shown: Outcome { json, text },
        last: outcome,
        store,
        end: Some(end),
    })
}

pub(crate) fn end_text(end: ChainEnd) -> &'static str {
    match end {
        ChainEnd::Green => "green",
        ChainEnd::Cap => "stopped at the follow-up cap",
        ChainEnd::Budget => "stopped at the token budget",
        ChainEnd::NoChange => "stopped: the last follow-up changed nothing",
        ChainEnd::GateError => "stopped: a gate could not judge the candidate",
        ChainEnd::PolicyRefused => "stopped: the content policy refused the candidate",
        ChainEnd::NoNewFailure => "stopped: no new failure against the baseline",
        ChainEnd::FollowUpRefused => "stopped: the follow-up could not be made",
    }
}
