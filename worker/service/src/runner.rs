//! The claim loop and one job attempt: first lease renewal before any container, the turn with
//! the existing pipeline, heartbeats racing it (lost lease or cancel ⇒ the turn is dropped and its
//! container removed at once), and one fenced write at the end.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jobs::{Claimed, Fenced, Heartbeat, JobsError, Retry};
use tokio::sync::watch;
use tracing::Instrument as _;
use vocab::{Coded, FailureClass};

use super::follow_up::{ChainEnd, ChainLimits, Step, follow_up_feedback, next_step};
use super::gates::{GateRan, precheck, run_required};
use super::live_host::{LiveTurn, log_note};
use super::metrics::AttemptOutcome;
use super::submission::{chain_follow_up_spec, readmit, reverify};
use super::{Phase, ServiceError, Shared};
use container::{ContainerError, JobBinding};
use turn::fault;
use turn::{
    IsolatedAcpUsage, LiveContext, LiveProgress, TurnError, run_live_pipeline, run_pipeline,
};

/// Longest pause between retries of a store write while the database is unavailable: the same
/// bound as the claim loop's ([`super::MAX_LOOP_BACKOFF`]), so a result is written within a few
/// seconds of the database's return.
const MAX_STORE_BACKOFF: Duration = super::MAX_LOOP_BACKOFF;
/// How long a store write is retried before the attempt is left to its lease.
const STORE_WRITE_PATIENCE: Duration = Duration::from_secs(600);
/// Longest event message stored (codes and short texts only).
const MAX_EVENT_MESSAGE_CHARS: usize = 200;

/// How an attempt's turn ended, before anything is written.
enum Ended {
    Done(Box<Result<Finished, ServiceError>>),
    Cancelled,
    Lost,
    Drained,
}

/// A turn that ended with a candidate, and the evidence of the gates it requires.
struct Finished {
    outcome: turn::PipelineOutcome,
    gates: Vec<GateRan>,
}

/// What an attempt that started its turn leaves in its one usage row: the turn's wall time and,
/// for a live turn, the model and the gateway's trusted counters (read after the turn ended,
/// however it ended).
struct Ran {
    wall: Duration,
    live: Option<(String, gateway::GatewayUsage)>,
    /// The agent's commands as the worker counted them, for a live attempt that produced its
    /// candidate and ran its gates (the live log comes back with the candidate; a failed turn
    /// leaves none).
    commands: Option<turn::CommandCounts>,
}

impl Ran {
    /// The usage row: codes and numbers only, never agent output. `usage` is the completed
    /// turn's token count (the gateway's own count for a live turn).
    fn row(
        &self,
        outcome: &'static str,
        code: Option<&str>,
        class: Option<&'static str>,
        usage: Option<&IsolatedAcpUsage>,
    ) -> serde_json::Value {
        let mut row = serde_json::json!({
            "outcome": outcome,
            "code": code,
            "class": class,
            "wall_ms": u64::try_from(self.wall.as_millis()).unwrap_or(u64::MAX),
            "usage": usage,
        });
        if let (Some((model, counters)), Some(map)) = (&self.live, row.as_object_mut()) {
            let mut live = serde_json::to_value(counters).unwrap_or_default();
            if let Some(live) = live.as_object_mut() {
                live.insert("model".to_owned(), serde_json::Value::from(model.as_str()));
                if let Some(commands) = &self.commands {
                    live.insert(
                        "commands".to_owned(),
                        serde_json::to_value(commands).unwrap_or_default(),
                    );
                }
            }
            map.insert("live".to_owned(), live);
        }
        row
    }
}

fn short(message: &str) -> String {
    message.chars().take(MAX_EVENT_MESSAGE_CHARS).collect()
}

/// Retries `op` while the store reports an environment failure (database unavailable), with
/// exponential backoff, for at most [`STORE_WRITE_PATIENCE`].
pub(crate) async fn retrying<T, F, Fut>(
    sh: &Shared,
    what: &'static str,
    mut op: F,
) -> Result<T, JobsError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, JobsError>>,
{
    let started = Instant::now();
    let mut pause = Duration::from_millis(100);
    loop {
        match op().await {
            Ok(v) => {
                sh.metrics.store_ok();
                return Ok(v);
            }
            Err(e)
                if Coded::class(&e) == FailureClass::Environment
                    && started.elapsed() < STORE_WRITE_PATIENCE =>
            {
                sh.metrics.store_error();
                tracing::warn!(
                    code = e.code(),
                    op = what,
                    "job store unavailable: retrying"
                );
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(MAX_STORE_BACKOFF);
            }
            Err(e) => return Err(e),
        }
    }
}

/// Runs one claimed attempt to its single recorded outcome (or to nothing, when its lease is lost).
pub(crate) async fn run_attempt(sh: Arc<Shared>, claimed: Claimed, phase: watch::Receiver<Phase>) {
    let span = tracing::info_span!(
        "job",
        job = %claimed.job.id,
        attempt = %claimed.attempt_id,
        host = %sh.opts.host_id,
        n = claimed.attempt,
    );
    let started = Instant::now();
    attempt(&sh, &claimed, phase).instrument(span).await;
    sh.metrics.turn_finished(started.elapsed());
}

async fn event(sh: &Shared, claimed: &Claimed, code: &str, message: &str) {
    if let Err(e) = sh
        .store
        .append_event(
            &claimed.job.id,
            Some(&claimed.attempt_id),
            code,
            &short(message),
        )
        .await
    {
        tracing::debug!(code = e.code(), "event not recorded");
    }
}

async fn attempt(sh: &Shared, claimed: &Claimed, mut phase: watch::Receiver<Phase>) {
    let id = &claimed.job.id;
    let attempt_id = &claimed.attempt_id;
    fault::point(fault::AFTER_CLAIM).await;
    tracing::info!(code = "PATCH_CANDIDATE_JOB_CLAIMED", "claimed");
    // No container before the first renewal succeeds.
    let renewed_at = Instant::now();
    let first = sh.store.heartbeat(id, attempt_id, sh.opts.lease).await;
    if first.is_ok() {
        sh.metrics.store_ok();
    }
    match first {
        Ok(Heartbeat::Renewed {
            cancel_requested: false,
        }) => {}
        Ok(Heartbeat::Renewed {
            cancel_requested: true,
        }) => {
            finish(sh, claimed, Ended::Cancelled, None).await;
            return;
        }
        Ok(Heartbeat::Lost) => {
            finish(sh, claimed, Ended::Lost, None).await;
            return;
        }
        Err(e) => {
            // Nothing was created; the lease expires and the job returns to the queue.
            sh.metrics.store_error();
            tracing::warn!(
                code = e.code(),
                "first lease renewal failed: leaving the attempt"
            );
            return;
        }
    }
    // A live job needs this host's gateway; a host without live settings (or whose gateway
    // cannot serve this job now) snoozes it without spending the attempt.
    let mut live: Option<LiveTurn> = match (&claimed.job.spec.live, &sh.opts.live) {
        (None, _) => None,
        (Some(_), None) => {
            let e = ServiceError::LiveUnavailable;
            finish(sh, claimed, Ended::Done(Box::new(Err(e))), None).await;
            return;
        }
        (Some(job), Some(host)) => match host.turn(job) {
            Ok(turn) => Some(turn),
            Err(e) => {
                finish(sh, claimed, Ended::Done(Box::new(Err(e))), None).await;
                return;
            }
        },
    };
    event(
        sh,
        claimed,
        "PATCH_CANDIDATE_JOB_STARTED",
        "attempt started",
    )
    .await;
    let mut lease_until = renewed_at + sh.opts.lease;

    let mut inputs = match reverify(&claimed.job.spec) {
        Ok(inputs) => inputs,
        Err(e) => {
            finish(sh, claimed, Ended::Done(Box::new(Err(e))), None).await;
            return;
        }
    };
    let binding = match JobBinding::new(
        sh.store.store_id(),
        sh.opts.host_id.as_str(),
        id.as_str(),
        attempt_id.as_str(),
    ) {
        Ok(b) => b,
        Err(e) => {
            finish(sh, claimed, Ended::Done(Box::new(Err(e.into()))), None).await;
            return;
        }
    };
    // The repository policy in force now admits the job again (it may have changed since the job
    // was queued: a job it no longer admits fails, never half-runs), and its quotas must not be
    // spent (a job over quota waits: snoozed, attempt not spent).
    if let Some(policy) = sh.policy() {
        let spec = &claimed.job.spec;
        let checked = match readmit(&policy, spec, &inputs) {
            Ok(()) => {
                let principal = spec.submitted_by.as_deref().unwrap_or_default();
                sh.check_quota(
                    &policy,
                    principal,
                    &spec.repository,
                    "claim",
                    claimed.spend_today,
                )
                .await
            }
            Err(e) => Err(e),
        };
        if let Err(e) = checked {
            finish(sh, claimed, Ended::Done(Box::new(Err(e))), None).await;
            return;
        }
    }
    // A job whose gates this host cannot run (no definition, no approved gate image) is snoozed
    // before its turn starts. The job's gates are its approval's and those its repository
    // policy added when it was admitted.
    let required = claimed
        .job
        .spec
        .required_gates(inputs.plan.context().required_validation_gates());
    if let Err(e) = precheck(&sh.docker, sh.opts.gates.as_deref(), &required).await {
        finish(sh, claimed, Ended::Done(Box::new(Err(e))), None).await;
        return;
    }
    inputs.plan = inputs.plan.with_job(Some(binding.clone()));
    // A follow-up continues the candidate it supersedes, read from this host's candidate store
    // (which re-checks its digest) or, when another host made it, from the job store; the
    // pipeline checks it against the approval and the baseline.
    let parent = match super::submission::parent_of(&inputs.plan, &sh.candidates) {
        Ok(parent) => Ok(parent),
        Err(local) => parent_from_jobs(sh, &claimed.job)
            .await
            .map(Some)
            .ok_or(local),
    };
    match parent {
        Ok(parent) => inputs.plan = inputs.plan.with_parent(parent),
        Err(e) => {
            finish(sh, claimed, Ended::Done(Box::new(Err(e))), None).await;
            return;
        }
    }
    // The agent learns how the repository is checked: the operator's commands of the required
    // gates, as `run --live --gates` gives them.
    if let (Some(turn), Some(defs)) = (live.as_mut(), sh.opts.gates.as_deref()) {
        turn.settings = turn
            .settings
            .clone()
            .with_validation_hints(defs.command_hints(&required));
    }

    // The turn starts here: from now on the attempt ends with one usage row, unless its lease is
    // lost or it is snoozed (both give nothing to record).
    let turn_started = Instant::now();
    let live_turn = live.as_ref();
    let work = async {
        let repo = sh
            .mirrors
            .ensure(&inputs.locator, inputs.plan.commit())
            .await?;
        let request = inputs.pipeline_request(&repo, &sh.staging, Some(&sh.candidates), "service");
        let outcome = match live_turn {
            None => run_pipeline(&sh.docker, request).await?,
            Some(turn) => {
                let progress: &LiveProgress = &log_note;
                let context = LiveContext {
                    settings: &turn.settings,
                    gateway: &turn.gateway,
                    progress,
                };
                run_live_pipeline(&sh.docker, request, &context).await?
            }
        };
        fault::point(fault::AFTER_CANDIDATE_STORED).await;
        // The gates run here, inside the attempt's work: a cancel, a lost lease or a drain drops
        // them with the turn's future, and their containers are removed the same way.
        fault::point(fault::BEFORE_GATES).await;
        let gates = run_required(
            &sh.docker,
            sh.opts.gates.as_deref(),
            &sh.opts.state_dir,
            &repo,
            &outcome.candidate,
            &required,
            gate::RunContext {
                runtime: inputs.plan.config().runtime(),
                job: Some(&binding),
            },
        )
        .await?;
        Ok::<_, ServiceError>(Finished { outcome, gates })
    };
    // Boxed, so that dropping it below really drops the turn (and its container guard).
    let mut work = Box::pin(work);
    let mut next_beat = tokio::time::Instant::now() + sh.opts.heartbeat;
    let mut phase_open = true;
    let ended = loop {
        tokio::select! {
            done = &mut work => break Ended::Done(Box::new(done)),
            () = tokio::time::sleep_until(next_beat) => {
                let sent = Instant::now();
                let beat = tokio::time::timeout(
                    sh.opts.heartbeat,
                    sh.store.heartbeat(id, attempt_id, sh.opts.lease),
                )
                .await;
                if matches!(beat, Ok(Ok(_))) {
                    sh.metrics.store_ok();
                }
                match beat {
                    Ok(Ok(Heartbeat::Renewed { cancel_requested })) => {
                        lease_until = sent + sh.opts.lease;
                        if cancel_requested {
                            break Ended::Cancelled;
                        }
                    }
                    Ok(Ok(Heartbeat::Lost)) => break Ended::Lost,
                    Ok(Err(_)) | Err(_) => {
                        sh.metrics.store_error();
                        tracing::warn!(code = "PATCH_CANDIDATE_JOBS_UNAVAILABLE", "lease renewal failed");
                        // Without a renewal before the lease ends, the attempt is no longer ours.
                        if Instant::now() + sh.opts.heartbeat >= lease_until {
                            break Ended::Lost;
                        }
                    }
                }
                next_beat = tokio::time::Instant::now() + sh.opts.heartbeat;
            }
            changed = phase.changed(), if phase_open => {
                if changed.is_err() {
                    phase_open = false;
                } else if *phase.borrow() == Phase::Kill {
                    break Ended::Drained;
                }
            }
        }
    };
    // Anything but a finished turn: the turn is dropped here, its container guard removes the
    // container (force: killed at once) and its staging tree removes itself.
    drop(work);
    // The gateway's channels went with the turn; its counters stay readable here.
    let commands = match &ended {
        Ended::Done(done) => done
            .as_ref()
            .as_ref()
            .ok()
            .and_then(|f| f.outcome.live.as_ref()),
        _ => None,
    }
    .map(|log| log.commands);
    let ran = Ran {
        wall: turn_started.elapsed(),
        live: live.map(|turn| (turn.settings.model, turn.gateway.usage())),
        commands,
    };
    finish(sh, claimed, ended, Some(ran)).await;
}

/// The candidate a follow-up continues, read from the job store (another host made it): parsed
/// by the one candidate parser, its digest the one the follow-up names, then kept in this host's
/// candidate store. `None` when any of that fails (the caller reports the local store's error).
async fn parent_from_jobs(sh: &Shared, job: &jobs::Job) -> Option<turn::ParentCandidate> {
    let follow_up = job.spec.follow_up.as_ref()?;
    let bytes = sh.store.candidate(&follow_up.supersedes_job).await.ok()??;
    let candidate = finalizer::validate_candidate_json(&bytes).ok()?;
    let parent = turn::ParentCandidate::new(candidate).ok()?;
    if parent.digest().to_string() != follow_up.supersedes_candidate {
        return None;
    }
    sh.candidates.put(parent.candidate()).ok()?;
    Some(parent)
}

/// The retry delay of an environment failure: exponential with jitter, from the store's rule.
fn retry_delay(sh: &Shared, attempt: u32) -> Duration {
    let d = jobs::backoff(attempt);
    match sh.opts.retry_scale {
        Some(scale) => scale
            .mul_f64(d.as_secs_f64() / 2.0)
            .max(Duration::from_millis(1)),
        None => d,
    }
}

/// Records the attempt's one outcome. `ran` is `Some` once the turn started: the outcome write
/// then carries the attempt's usage row in the same fenced transaction (a snooze and a lost lease
/// record none).
async fn finish(sh: &Shared, claimed: &Claimed, ended: Ended, ran: Option<Ran>) {
    let id = &claimed.job.id;
    let attempt_id = &claimed.attempt_id;
    let (outcome, write) = match ended {
        Ended::Done(done) => match *done {
            Ok(outcome) => completed(sh, claimed, outcome, ran.as_ref()).await,
            Err(e) => failed(sh, claimed, e, ran.as_ref()).await,
        },
        Ended::Lost => {
            tracing::warn!(
                code = "PATCH_CANDIDATE_JOB_LEASE_LOST",
                "lease lost: turn stopped, nothing recorded"
            );
            sh.metrics.outcome(AttemptOutcome::LeaseLost);
            return;
        }
        Ended::Drained => {
            tracing::info!(
                code = "PATCH_CANDIDATE_JOB_RELEASED",
                "drain timeout: turn stopped, job released"
            );
            let usage = ran.as_ref().map(|r| r.row("released", None, None, None));
            let w = retrying(sh, "release", || {
                sh.store.release(id, attempt_id, usage.as_ref())
            })
            .await;
            (AttemptOutcome::Released, w)
        }
        Ended::Cancelled => {
            tracing::info!(
                code = "PATCH_CANDIDATE_SERVICE_CANCELLED",
                "cancelled while running: turn stopped"
            );
            event(
                sh,
                claimed,
                "PATCH_CANDIDATE_SERVICE_CANCELLED",
                "cancelled while running",
            )
            .await;
            let usage = ran.as_ref().map(|r| {
                r.row(
                    "cancelled",
                    Some("PATCH_CANDIDATE_SERVICE_CANCELLED"),
                    None,
                    None,
                )
            });
            let w = retrying(sh, "finish_cancelled", || {
                sh.store.finish_cancelled(id, attempt_id, usage.as_ref())
            })
            .await;
            (AttemptOutcome::Cancelled, w)
        }
    };
    match write {
        Ok(Fenced::Applied) => {
            sh.metrics.outcome(outcome);
            // The usage row just written carries the gateway's counts of a live turn and the
            // agent's commands (a snooze writes none): the host's counters follow the ledger.
            if outcome != AttemptOutcome::Snoozed
                && let Some(ran) = &ran
            {
                if let Some((_, counts)) = &ran.live {
                    sh.metrics.spend_recorded(
                        counts.requests,
                        counts.input_tokens,
                        counts.output_tokens,
                        counts.total_tokens,
                    );
                }
                if let Some(c) = ran.commands {
                    sh.metrics.agent_commands(
                        u64::from(c.commands),
                        u64::from(c.failed),
                        c.command_ms,
                    );
                }
            }
        }
        Ok(Fenced::Lost) => {
            tracing::warn!(
                code = "PATCH_CANDIDATE_JOB_LEASE_LOST",
                "attempt no longer current: nothing recorded"
            );
            sh.metrics.outcome(AttemptOutcome::LeaseLost);
        }
        Err(e) => {
            sh.metrics.store_error();
            tracing::error!(
                code = e.code(),
                "outcome not recorded: the lease will expire and the job return to the queue"
            );
        }
    }
}

type Written = (AttemptOutcome, Result<Fenced, JobsError>);

async fn completed(
    sh: &Shared,
    claimed: &Claimed,
    finished: Finished,
    ran: Option<&Ran>,
) -> Written {
    let id = &claimed.job.id;
    let attempt_id = &claimed.attempt_id;
    let Finished { outcome, gates } = finished;
    for g in &gates {
        sh.metrics.gate_finished(g.document.outcome(), g.elapsed);
    }
    let (evidence, judged): (Vec<jobs::EvidenceDocument>, Vec<gate::GateEvidence>) =
        gates.into_iter().map(|g| (g.document, *g.evidence)).unzip();

    let bytes = match outcome.candidate.to_json_pretty() {
        Ok(b) => b,
        Err(e) => {
            let e: ServiceError = e.into();
            return Box::pin(failed(sh, claimed, e, ran)).await;
        }
    };
    let usage = match ran {
        Some(ran) => ran.row("completed", None, None, outcome.usage.as_ref()),
        // Unreachable in practice (a completion always ran its turn); the row is still written.
        None => serde_json::json!({ "outcome": "completed", "usage": outcome.usage }),
    };
    let digest = outcome.digest.to_string();
    let chain = chain_step(sh, claimed, &outcome, &judged, ran);
    let follow_up = match &chain {
        Some(Chained::FollowUp(spec)) => Some((**spec).clone()),
        _ => None,
    };
    fault::point(fault::BEFORE_COMPLETE).await;
    let w = retrying(sh, "complete", || {
        sh.store.complete_and_follow_up(
            id,
            attempt_id,
            (bytes.clone(), &digest),
            &usage,
            evidence.clone(),
            follow_up.clone(),
        )
    })
    .await;
    if matches!(w, Ok(Fenced::Applied)) {
        // The store records the completion event (and queues the follow-up) in the same
        // transaction; the chain's line follows it.
        tracing::info!(code = "PATCH_CANDIDATE_JOB_COMPLETED", digest = %digest, "completed");
        match chain {
            Some(Chained::FollowUp(spec)) => {
                sh.wake.notify_one();
                let round = spec.follow_up.as_ref().map_or(0, |f| f.round);
                let max = spec.follow_ups.map_or(0, |p| p.max_follow_ups);
                tracing::info!(code = CHAIN_FOLLOW_UP, round, max, "follow-up queued");
                let message = format!("follow-up {round} of {max} queued");
                event(sh, claimed, CHAIN_FOLLOW_UP, &message).await;
            }
            Some(Chained::End(end)) => {
                tracing::info!(code = CHAIN_END, end = end.as_str(), "chain ended");
                event(sh, claimed, CHAIN_END, end.as_str()).await;
            }
            None => {}
        }
    }
    (AttemptOutcome::Completed, w)
}

/// Whether `outcome`'s candidate changes exactly what the candidate `follow_up` continued did
/// (read from this host's candidate store, where the attempt put it).
fn unchanged(sh: &Shared, follow_up: &jobs::FollowUp, outcome: &turn::PipelineOutcome) -> bool {
    follow_up
        .supersedes_candidate
        .parse::<vocab::Sha256>()
        .ok()
        .and_then(|d| sh.candidates.get(&d).ok())
        .is_some_and(|p| turn::same_changes(&p, &outcome.candidate))
}

/// The job log's line when a completion queued its automatic follow-up.
const CHAIN_FOLLOW_UP: &str = "PATCH_CANDIDATE_CHAIN_FOLLOW_UP";
/// The job log's line when a job with automatic follow-ups ends its chain (the message is
/// [`ChainEnd::as_str`]).
const CHAIN_END: &str = "PATCH_CANDIDATE_CHAIN_END";

/// What a completion means for a job's chain of automatic follow-ups.
enum Chained {
    /// Queue this follow-up with the completion.
    FollowUp(Box<jobs::JobSpec>),
    /// The chain ends here.
    End(ChainEnd),
}

/// The next step of the job's chain after its attempt produced `outcome` and its required gates
/// said `judged`: `None` when the job has no automatic follow-ups. The attempt's tokens are the
/// gateway's own count; the step is [`next_step`]'s rule, and a follow-up whose candidate
/// changes nothing its parent did not ends the chain instead of queuing another.
fn chain_step(
    sh: &Shared,
    claimed: &Claimed,
    outcome: &turn::PipelineOutcome,
    judged: &[gate::GateEvidence],
    ran: Option<&Ran>,
) -> Option<Chained> {
    let job = &claimed.job;
    let policy = job.spec.follow_ups?;
    let prior = job.spec.follow_up.as_ref();
    let round = prior.map_or(0, |f| f.round);
    let spent = ran
        .and_then(|r| r.live.as_ref())
        .map_or(0, |(_, usage)| usage.total_tokens);
    let tokens = prior.map_or(0, |f| f.chain_tokens).saturating_add(spent);
    let evidence: Vec<&gate::GateEvidence> = judged.iter().collect();
    let limits = ChainLimits::from(policy);
    match next_step(&evidence, limits, round, tokens) {
        Step::End(end) => Some(Chained::End(end)),
        // A follow-up that changed nothing its parent did not: another round would see the same.
        Step::FollowUp if prior.is_some_and(|f| unchanged(sh, f, outcome)) => {
            Some(Chained::End(ChainEnd::NoChange))
        }
        Step::FollowUp => {
            let spec = follow_up_feedback(&outcome.digest, None, &evidence)
                .map_err(ServiceError::from)
                .and_then(|feedback| {
                    chain_follow_up_spec(job, &feedback, round.saturating_add(1), tokens)
                });
            match spec {
                Ok(spec) => Some(Chained::FollowUp(Box::new(spec))),
                Err(e) => {
                    // The completion stands; only the chain stops (never a half-made job).
                    tracing::warn!(code = e.code(), "follow-up not queued: the chain ends");
                    Some(Chained::End(ChainEnd::FollowUpRefused))
                }
            }
        }
    }
}

async fn failed(sh: &Shared, claimed: &Claimed, e: ServiceError, ran: Option<&Ran>) -> Written {
    let id = &claimed.job.id;
    let attempt_id = &claimed.attempt_id;

    let code = e.code();
    let message = e.to_string();
    // This host lacks what the job needs (the repository, the approved image: absent, or its tag
    // names another build; for a live job, live settings or a gateway that can serve it now),
    // which another host, or this one later, may have.
    let snooze = matches!(
        e,
        ServiceError::Unreachable
            | ServiceError::Turn(TurnError::Container(
                ContainerError::ImageMissing | ContainerError::ImageIdMismatch
            ))
            | ServiceError::Container(
                ContainerError::ImageMissing | ContainerError::ImageIdMismatch
            )
            | ServiceError::LiveUnavailable
            | ServiceError::LiveModel
            | ServiceError::LiveAgent
            | ServiceError::Gateway(_)
            | ServiceError::GatesUnavailable
            | ServiceError::Quota { .. }
            | ServiceError::Gate(gate::GateError::Container(
                ContainerError::ImageMissing | ContainerError::ImageIdMismatch
            ))
    );
    event(sh, claimed, code, &message).await;
    if snooze {
        tracing::warn!(
            code,
            "host cannot run this job now: snoozed, attempt not spent"
        );
        let w = retrying(sh, "snooze", || {
            sh.store.snooze(id, attempt_id, sh.opts.snooze, code)
        })
        .await;
        (AttemptOutcome::Snoozed, w)
    } else if Coded::class(&e) == FailureClass::Environment {
        let usage = ran.map(|r| r.row("failed", Some(code), Some("environment"), None));
        let delay = retry_delay(sh, claimed.attempt);
        tracing::warn!(
            code,
            delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            "environment failure: retry"
        );
        let text = short(&message);
        let w = retrying(sh, "fail", || {
            sh.store.fail(
                id,
                attempt_id,
                code,
                &text,
                Retry::After(delay),
                usage.as_ref(),
            )
        })
        .await;
        (AttemptOutcome::Retried, w)
    } else {
        tracing::warn!(code, "rejected: dead letter");
        let usage = ran.map(|r| r.row("failed", Some(code), Some("rejected"), None));
        let text = short(&message);
        let w = retrying(sh, "fail", || {
            sh.store
                .fail(id, attempt_id, code, &text, Retry::Never, usage.as_ref())
        })
        .await;
        (AttemptOutcome::Failed, w)
    }
}

/// One janitor pass: list the turn containers of THIS job store, THEN read the current attempts,
/// remove the containers whose attempt is over. Another store's turns (another service sharing
/// the daemon) are never listed, so never judged against this store's attempts.
pub(crate) async fn janitor_pass(sh: &Shared) {
    let listed = match container::list_job_turns(&sh.docker, sh.store.store_id()).await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(code = e.code(), "janitor: cannot list containers");
            return;
        }
    };
    if listed.is_empty() {
        return;
    }
    let current = match sh.store.current_attempts().await {
        // A read: its success does not end an outage (a SQLite file another process holds
        // locked still serves reads while every write fails), only its failure counts.
        Ok(c) => c,
        Err(e) => {
            sh.metrics.store_error();
            tracing::warn!(code = e.code(), "janitor: cannot read current attempts");
            return;
        }
    };
    let current: HashSet<(String, String)> = current
        .into_iter()
        .map(|(j, a)| (j.as_str().to_owned(), a.as_str().to_owned()))
        .collect();
    let report = container::remove_superseded_turns(&sh.docker, listed, &current).await;
    if !report.removed.is_empty() {
        tracing::info!(
            code = "PATCH_CANDIDATE_JANITOR_REMOVED",
            removed = report.removed.len(),
            "janitor: removed turn containers of attempts no longer current"
        );
        sh.metrics.janitor_removed(report.removed.len());
    }
}
