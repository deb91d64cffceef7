//! `patch-candidate jobs …` and `workers`: the operator's view of the job store. These commands
//! open the store directly (`--database`, default the state directory's SQLite file), so they
//! work whether or not a `serve` process is running; the HTTP API is for clients without access
//! to the database.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use jobs::{Job, JobState, JobStore};
use service::{MirrorCache, Submission, job_view};
use snapshot::MAX_CONTEXT_JSON_BYTES;
use vocab::JobId;
use vocab::Untrusted;

use super::docker_args::{state_dir, tokio_runtime};
use super::live_args::{parse_agent, require_model};
use super::outcome::{INPUT_CODE, IO_CODE, JOBS_NOT_FOUND_CODE};
use super::paths::{read_text, require_dir};
use super::plan_args::{FollowUpArgs, ImageArgs, TurnArgs, submit_help};
use super::{CliError, Outcome, render};

/// The most audit entries `jobs show` lists (the job's latest acts).
const SHOWN_AUDIT: usize = 100;

/// Where the job store is.
#[derive(Debug, Clone, Args)]
pub(crate) struct StoreArgs {
    /// The job store: `postgres://…`, `sqlite:PATH` or a file path. Default: SQLite
    /// `jobs.sqlite3` in the state directory (the one `serve` uses by default).
    #[arg(long, value_name = "URL|PATH")]
    pub database: Option<String>,
}

/// `jobs` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum JobsCommand {
    /// Queue a turn: the inputs of `run`, verified fully (approval, snapshot at the commit,
    /// selection, every pre-Docker turn check) before anything enters the queue. Submitting the
    /// same inputs again returns the existing job.
    Submit(Box<SubmitArgs>),
    /// List jobs, newest first.
    List(ListArgs),
    /// Show one job: state, attempts, host, last error, candidate digest.
    Show(IdArgs),
    /// Cancel a job: a queued job at once, a running one within one heartbeat (its container is
    /// killed and removed).
    Cancel(IdArgs),
    /// Queue a failed or cancelled job again (one more attempt).
    Retry(IdArgs),
    /// Show a job's log: codes and short messages per attempt (never source text).
    Logs(IdArgs),
}

/// `jobs submit` arguments: `run`'s flags where they mean the same (reworded for a queued job).
#[derive(Debug, Clone, Args)]
#[command(mut_args(submit_help))]
pub(crate) struct SubmitArgs {
    /// The repository: a local Git repository (its absolute path is recorded) or a Git URL
    /// every service host can fetch (https://, ssh://, git://, file://).
    #[arg(long, value_name = "PATH|URL")]
    pub repo: String,
    /// The approved execution context (`managed_refinement.execution_context.v1` JSON); its
    /// bytes are stored with the job and re-verified by the host that runs it.
    #[arg(long)]
    pub approval: PathBuf,
    /// The pinned commit; must equal the approval's baseline commit (default: that commit).
    #[arg(long)]
    pub commit: Option<String>,
    /// The task; must equal the approval's `raw_request` (default: it).
    #[arg(long)]
    pub task: Option<String>,
    #[command(flatten)]
    pub image: ImageArgs,
    #[command(flatten)]
    pub turn: TurnArgs,
    /// Attempts before the job is dead-lettered (environment failures and lost leases retry;
    /// rejections never do).
    #[arg(long, default_value_t = service::DEFAULT_MAX_ATTEMPTS)]
    pub max_attempts: u32,
    #[command(flatten)]
    pub follow_ups: FollowUpArgs,
    /// Queue a live turn: a real ACP agent (Codex unless --agent) in its live image (default: the
    /// one recorded by `image build --live [--agent A]`), its model requests served by the
    /// gateway of a host that runs that agent (`serve --live-upstream … --live-agent A`). The job
    /// binds the agent and the model name, never a credential.
    #[arg(long)]
    pub live: bool,
    /// The model of a live job (1-64 of `A-Z a-z 0-9 . _ : -`); part of the job's identity.
    #[arg(long, value_name = "NAME", requires = "live")]
    pub model: Option<String>,
    /// The agent of a live job: codex, claude or gemini (default codex); part of the job's
    /// identity (a Codex job's identity is what it was before agents were a choice).
    #[arg(long, value_name = "NAME", requires = "live")]
    pub agent: Option<String>,
    /// The operator's gate definitions: every gate the approval requires must be defined there
    /// (checked before the job is queued; a job that requires a gate needs it).
    #[arg(long, value_name = "FILE")]
    pub gates: Option<PathBuf>,
    /// The operator's repository policy (`serve --repository-policy`): the job is admitted under
    /// it before it is queued (refused outside it; its required gates are added to the job's).
    /// Without it the job records no admission, and a host holding a policy that requires a gate
    /// refuses it at claim.
    #[arg(long, value_name = "FILE")]
    pub repository_policy: Option<PathBuf>,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// `jobs list` arguments.
#[derive(Debug, Clone, Args)]
pub(crate) struct ListArgs {
    /// Only jobs in this state.
    #[arg(long, value_parser = ["queued", "running", "completed", "failed", "cancelled"])]
    pub state: Option<String>,
    /// Most jobs listed.
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// A job id argument.
#[derive(Debug, Clone, Args)]
pub(crate) struct IdArgs {
    /// The job id (`job_` and 32 hex digits).
    pub id: String,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// `workers` arguments.
#[derive(Debug, Clone, Args)]
pub(crate) struct WorkersArgs {
    #[command(flatten)]
    pub store: StoreArgs,
}

pub(crate) fn open(store: &StoreArgs) -> Result<(tokio::runtime::Runtime, JobStore), CliError> {
    let state = state_dir()?;
    let rt = tokio_runtime()?;
    let opened = rt.block_on(JobStore::open(store.database.as_deref(), &state))?;
    Ok((rt, opened))
}

fn job_line(job: &Job) -> String {
    let error = job
        .last_error
        .as_ref()
        .map(|e| format!("  {}", e.code))
        .unwrap_or_default();
    format!(
        "{}  {:<9}  attempts {}/{}{}",
        job.id, job.state, job.attempts, job.max_attempts, error
    )
}

fn job_text(job: &Job) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "job: {}", job.id);
    let _ = writeln!(t, "state: {}", job.state);
    let _ = writeln!(t, "attempts: {} of {}", job.attempts, job.max_attempts);
    let _ = writeln!(t, "repository: {}", Untrusted::quoted(&job.spec.repository));
    let _ = writeln!(t, "commit: {}", job.spec.commit);
    let _ = writeln!(t, "approval: {}", job.spec.approval_digest);
    let _ = writeln!(t, "image: {}", job.spec.image_id);
    if let Some(live) = &job.spec.live {
        // A checked plain token (the store refuses anything else), still shown as stored text.
        let _ = writeln!(t, "live: model {}", Untrusted::quoted(&live.model));
        if let Some(agent) = &live.agent {
            let _ = writeln!(t, "agent: {}", Untrusted::quoted(agent));
        }
    }
    if let Some(host) = &job.host {
        let _ = writeln!(t, "host: {host}");
    }
    if let Some(attempt) = &job.attempt_id {
        let _ = writeln!(t, "attempt: {attempt}");
    }
    if job.cancel_requested {
        let _ = writeln!(t, "cancel requested");
    }
    if let Some(e) = &job.last_error {
        let _ = writeln!(
            t,
            "last error: {}",
            Untrusted::quoted(&e.message).limit(400)
        );
    }
    if let Some(d) = &job.candidate_digest {
        let _ = writeln!(t, "candidate: {d}");
    }
    t
}

fn parse_id(raw: &str) -> Result<JobId, CliError> {
    Ok(JobId::parse(raw).map_err(jobs::JobsError::from)?)
}

pub(crate) fn run(command: &JobsCommand) -> Result<Outcome, CliError> {
    match command {
        JobsCommand::Submit(args) => submit(args),
        JobsCommand::List(args) => {
            let state = args.state.as_deref().map(JobState::parse).transpose()?;
            let (rt, store) = open(&args.store)?;
            let jobs = rt.block_on(store.list(state, args.limit))?;
            let mut text = format!("{} job(s)\n", jobs.len());
            for j in &jobs {
                let _ = writeln!(text, "  {}", job_line(j));
            }
            Ok(Outcome {
                json: serde_json::json!({"jobs": jobs.iter().map(job_view).collect::<Vec<_>>()}),
                text,
            })
        }
        JobsCommand::Show(args) => {
            let id = parse_id(&args.id)?;
            let (rt, store) = open(&args.store)?;
            let job = rt.block_on(store.get(&id))?.ok_or_else(not_found)?;
            let evidence = rt.block_on(store.evidence(&id))?;
            let mut text = job_text(&job);
            for d in &evidence {
                let _ = writeln!(
                    text,
                    "gate {}: {} in {} ms; evidence {}",
                    d.gate(),
                    d.outcome().as_str(),
                    d.wall_ms(),
                    d.digest()
                );
            }
            let decisions = rt.block_on(store.decisions(&id))?;
            let publication = rt.block_on(store.publication(&id))?;
            let later = rt.block_on(store.later_attempt(&id))?.map(|j| j.id);
            let review =
                service::review_summary(&decisions, publication.as_deref(), later.as_ref());
            let _ = writeln!(
                text,
                "review: {} ({} decision(s){})",
                review
                    .get("state")
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or("pending"),
                decisions.len(),
                if decisions.iter().any(|d| d.row.forced()) {
                    ", forced"
                } else {
                    ""
                }
            );
            if let Some(f) = &job.spec.follow_up {
                let given = if f.round > 0 {
                    "the failing gates' test ids and output given to the agent"
                } else {
                    "the reviewer's note and the gate verdicts given to the agent"
                };
                let _ = writeln!(
                    text,
                    "follow-up of job {} (its candidate {}; {} gate verdict(s), {given})",
                    f.supersedes_job,
                    f.supersedes_candidate,
                    f.gates.len()
                );
            }
            if let Some(p) = &job.spec.follow_ups {
                let round = job.spec.follow_up.as_ref().map_or(0, |f| f.round);
                let tokens = job.spec.follow_up.as_ref().map_or(0, |f| f.chain_tokens);
                let budget = p.token_budget.map_or_else(
                    || "no token budget".to_owned(),
                    |b| format!("budget {b} tokens"),
                );
                let _ = writeln!(
                    text,
                    "chain: automatic follow-up {round} of at most {} ({tokens} tokens spent before it, {budget})",
                    p.max_follow_ups
                );
            }
            for d in &decisions {
                if let Some(follow) = &d.follow_up_job_id {
                    let _ = writeln!(text, "superseded by job {follow} (retry {})", d.seq);
                }
            }
            if let Some(later) = later.as_ref().filter(|_| publication.is_none()) {
                let _ = writeln!(
                    text,
                    "superseded: job {later} continues this candidate (accept the chain's last candidate)"
                );
            }
            if publication.is_some() {
                let _ = writeln!(text, "published");
            }
            if let Some(by) = &job.spec.submitted_by {
                let _ = writeln!(text, "submitted by {}", render::name(by));
            }
            let audit = rt.block_on(store.audit_of(id.as_str(), SHOWN_AUDIT))?;
            for a in &audit {
                let _ = writeln!(
                    text,
                    "audit {}: {} by {} at {} ({})",
                    a.seq,
                    a.act.as_str(),
                    render::name(&a.principal),
                    a.at_ms,
                    Untrusted::lines(&a.detail)
                        .limit(jobs::MAX_AUDIT_DETAIL_BYTES)
                        .render()
                );
            }
            // Each attempt's usage row: outcome, wall time, a live turn's model requests and
            // tokens, and the commands the agent ran (counts and time only).
            let attempts: Vec<service::AttemptUsage> = rt
                .block_on(store.usage(&id))?
                .iter()
                .map(|(attempt, row)| service::AttemptUsage::read(attempt.as_str(), row))
                .collect();
            for a in &attempts {
                let _ = writeln!(text, "{}", a.line());
            }
            let mut view = service::job_view_with_gates(&job, &evidence);
            if let Some(map) = view.as_object_mut() {
                map.insert("review".to_owned(), review);
                map.insert("audit".to_owned(), serde_json::json!(audit));
                map.insert("attempt_usage".to_owned(), serde_json::json!(attempts));
            }
            Ok(Outcome {
                json: serde_json::json!({"job": view}),
                text,
            })
        }
        JobsCommand::Cancel(args) => {
            let id = parse_id(&args.id)?;
            let (rt, store) = open(&args.store)?;
            let job = rt.block_on(store.cancel(&id))?;
            let text = match (job.state, job.cancel_requested) {
                (JobState::Running, true) => {
                    format!(
                        "{}: cancel requested; the running turn stops within one heartbeat\n",
                        job.id
                    )
                }
                (state, _) => format!("{}: {state}\n", job.id),
            };
            Ok(Outcome {
                json: serde_json::json!({"job": job_view(&job)}),
                text,
            })
        }
        JobsCommand::Retry(args) => {
            let id = parse_id(&args.id)?;
            let (rt, store) = open(&args.store)?;
            let job = rt.block_on(store.retry(&id))?;
            Ok(Outcome {
                text: format!("{}: {}\n", job.id, job.state),
                json: serde_json::json!({"job": job_view(&job)}),
            })
        }
        JobsCommand::Logs(args) => {
            let id = parse_id(&args.id)?;
            let (rt, store) = open(&args.store)?;
            if rt.block_on(store.get(&id))?.is_none() {
                return Err(not_found());
            }
            let events = rt.block_on(store.events(&id))?;
            let mut text = String::new();
            for e in &events {
                let _ = writeln!(
                    text,
                    "{}  {}  {}  {}",
                    e.at_ms,
                    e.attempt_id.as_ref().map_or("-", vocab::AttemptId::as_str),
                    e.code,
                    Untrusted::quoted(&e.message)
                );
            }
            Ok(Outcome {
                json: serde_json::json!({"events": events}),
                text,
            })
        }
    }
}

fn not_found() -> CliError {
    CliError::rejected(
        JOBS_NOT_FOUND_CODE,
        format!("{JOBS_NOT_FOUND_CODE}: no such job"),
    )
}

fn submit(args: &SubmitArgs) -> Result<Outcome, CliError> {
    let state = state_dir()?;
    let url = ["https://", "http://", "ssh://", "git://", "file://"]
        .iter()
        .any(|s| args.repo.starts_with(s));
    let repository = if url {
        args.repo.clone()
    } else {
        let path = PathBuf::from(&args.repo);
        require_dir("--repo", &path)?;
        let absolute = std::path::absolute(&path)
            .map_err(|_| CliError::environment(IO_CODE, "cannot resolve the --repo path"))?;
        absolute
            .to_str()
            .ok_or_else(|| CliError::usage(INPUT_CODE, "--repo is not UTF-8"))?
            .to_owned()
    };
    let live = if args.live {
        let agent = parse_agent(args.agent.as_deref())?;
        Some(jobs::LiveJob {
            model: require_model(args.model.as_deref())?.to_owned(),
            agent: agent.stored().map(str::to_owned),
            environment: None,
        })
    } else {
        None
    };
    let approval = read_text("--approval", &args.approval, MAX_CONTEXT_JSON_BYTES)?;
    let policy = args.turn.policy_text()?;
    let sub = Submission {
        repository,
        approval,
        commit: args.commit.clone(),
        task: args.task.clone(),
        image: args.image.image.clone(),
        image_id: args.image.image_id.clone(),
        files: args.turn.files.clone(),
        read_only: args.turn.read_only.clone(),
        policy,
        runtime: args.turn.runtime.clone(),
        max_wall_seconds: Some(args.turn.max_wall_seconds),
        max_archive_bytes: Some(args.turn.max_archive_bytes),
        max_attempts: Some(args.max_attempts),
        live,
    };
    let gates = args
        .gates
        .as_deref()
        .map(super::gate_cmd::load_definitions)
        .transpose()?;
    let policy = args
        .repository_policy
        .as_deref()
        .map(service::RepositoryPolicy::load_rules)
        .transpose()?;
    let rt = tokio_runtime()?;
    let mirrors = MirrorCache::new(state::MIRRORS.path_in(&state));
    let (job, created) = rt.block_on(async {
        // Verified completely before the store is even opened.
        let mut spec =
            service::prepare(sub, &state, &mirrors, gates.as_ref(), policy.as_ref()).await?;
        spec.follow_ups = args.follow_ups.policy();
        // The command line opens the store itself: its acts are the operator's.
        spec.submitted_by = Some(jobs::OPERATOR_PRINCIPAL.to_owned());
        let store = JobStore::open(args.store.database.as_deref(), &state).await?;
        Ok::<_, CliError>(store.submit(spec).await?)
    })?;
    let text = if created {
        format!("{}: queued\n", job.id)
    } else {
        format!("{}: already submitted ({})\n", job.id, job.state)
    };
    Ok(Outcome {
        json: serde_json::json!({"job": job_view(&job), "created": created}),
        text,
    })
}

pub(crate) fn workers(args: &WorkersArgs) -> Result<Outcome, CliError> {
    let (rt, store) = open(&args.store)?;
    let hosts = rt.block_on(store.hosts())?;
    let mut text = format!("{} host(s)\n", hosts.len());
    for h in &hosts {
        let _ = writeln!(
            text,
            "  {}  max turns {}  started {}  seen {}",
            h.host, h.max_turns, h.started_at_ms, h.seen_at_ms
        );
    }
    Ok(Outcome {
        json: serde_json::json!({"hosts": hosts}),
        text,
    })
}
