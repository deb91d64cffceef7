//! A job's required gates, run by the service after its turn as part of the same attempt: the
//! operator's definitions (`serve --gates FILE`), a pre-check before the turn (this host knows
//! every required gate and has its approved image, else the job is snoozed), then each gate
//! through the gate crate ([`gate::evaluate_gate`]), its evidence handed to the one fenced
//! completion that also stores the candidate.
//!
//! The gates run inside the attempt's work future: a cancel, a lost lease or a drain drops it,
//! and the gate container's guard removes the container, exactly like the turn's.

use std::path::Path;
use std::time::{Duration, Instant};

use container::{ContainerError, ContainerRuntime, ImageReference};
use finalizer::RepositoryPatchCandidate;
use gate::{BaselineCache, BaselineTree, GateDefinitions, RunContext, evaluate_gate};
use jobs::EvidenceDocument;

use crate::error::ServiceError;

/// One gate's result, for the completion and the metrics.
pub(crate) struct GateRan {
    pub document: EvidenceDocument,
    /// The same evidence, parsed: what the next step of a chain reads.
    pub evidence: Box<gate::GateEvidence>,
    pub elapsed: Duration,
}

/// Before the turn: every gate in `required` is defined on this host and its approved image is
/// present (by ID). Nothing runs when a check fails.
///
/// # Errors
/// `PATCH_CANDIDATE_SERVICE_GATES_UNAVAILABLE` (no definitions, or a required gate this host does
/// not define), `REPOSITORY_DOCKER_IMAGE_MISSING` / `REPOSITORY_DOCKER_IMAGE_ID_MISMATCH` for a
/// gate image this host lacks: all three snooze the job. Docker failures pass through.
pub(crate) async fn precheck<R: ContainerRuntime>(
    runtime: &R,
    definitions: Option<&GateDefinitions>,
    required: &[String],
) -> Result<(), ServiceError> {
    if required.is_empty() {
        return Ok(());
    }
    let defs = definitions.ok_or(ServiceError::GatesUnavailable)?;
    let chosen = defs
        .require(required)
        .map_err(|_| ServiceError::GatesUnavailable)?;
    for def in chosen {
        let reference: ImageReference =
            def.image().as_str().parse().map_err(ContainerError::from)?;
        let facts = container::docker_call("image inspect", runtime.inspect_image(&reference))
            .await
            .map_err(|e| match e {
                ContainerError::CommandFailed { .. } => ContainerError::ImageMissing,
                other => other,
            })?;
        if facts.id.trim() != def.image().as_str() {
            return Err(ContainerError::ImageIdMismatch.into());
        }
    }
    Ok(())
}

/// After the turn: runs every gate of `required` (the candidate's and those the job's repository
/// policy added) over the tree of `repo` at its baseline commit, in that order; returns one
/// evidence document per gate.
///
/// # Errors
/// As [`precheck`], and the gate crate's host-side failures ([`gate::GateError`]): a run that
/// happened always ends in evidence (`error` included), never in an error here.
///
/// # Security
/// Each gate container is sealed like a turn and removed on every path, cancellation included.
pub(crate) async fn run_required<R: ContainerRuntime + Clone + 'static>(
    runtime: &R,
    definitions: Option<&GateDefinitions>,
    state_dir: &Path,
    repo: &Path,
    candidate: &RepositoryPatchCandidate,
    required: &[String],
    ctx: RunContext<'_>,
) -> Result<Vec<GateRan>, ServiceError> {
    if required.is_empty() {
        return Ok(Vec::new());
    }
    let defs = definitions.ok_or(ServiceError::GatesUnavailable)?;
    let chosen = defs
        .require(required)
        .map_err(|_| ServiceError::GatesUnavailable)?;
    let cache = BaselineCache::open(state_dir)?;
    let repo = repo.to_owned();
    let commit = candidate.baseline_commit_sha().to_owned();
    let base = tokio::task::spawn_blocking(move || BaselineTree::load(&repo, &commit))
        .await
        .map_err(|_| ServiceError::State {
            detail: "the gate tree reader failed",
        })??;
    let mut ran = Vec::with_capacity(chosen.len());
    turn::fault::point(turn::fault::BEFORE_GATES).await;
    for def in chosen {
        let started = Instant::now();
        let result = evaluate_gate(runtime, def, &base, candidate, &cache, ctx).await?;
        let document = EvidenceDocument::new(
            def.name().as_str(),
            result.evidence.outcome,
            &result.digest.to_string(),
            result.evidence.wall_ms,
            result.file,
        )?;
        tracing::info!(
            code = "PATCH_CANDIDATE_SERVICE_GATE_FINISHED",
            outcome = document.outcome().as_str(),
            wall_ms = document.wall_ms(),
            "gate finished"
        );
        ran.push(GateRan {
            document,
            evidence: Box::new(result.evidence),
            elapsed: started.elapsed(),
        });
    }
    Ok(ran)
}
