//! The whole product path for one turn: snapshot the repository at the pinned commit → verify the
//! approval against it → select editable and read-only files → Docker turn → stage the returned
//! archive into a fresh private tree → finalise → digest → store. Nothing is written to the
//! repository.

use std::path::{Path, PathBuf};
use std::time::Instant;

use archive::StageLimits;
use finalizer::{CandidateStore, RepositoryPatchCandidate};
use snapshot::{
    ApprovedExecutionContext, ApprovedTurn, GitSnapshot, MAX_READ_ONLY_INSPECTION_FILES,
    MAX_REPOSITORY_FILES, PathGuard, ProposalStatus, RepoPath, RepositorySnapshotEvidence,
    is_repository_env_template_path, is_secret_contract_path, is_secret_sensitive_path,
    verify_snapshot_identity,
};
use vocab::Sha256;

use crate::acp_usage::IsolatedAcpUsage;
use crate::config::TurnConfig;
use crate::docker_turn::{execute_live_turn, execute_repository_docker_turn};
use crate::error::TurnError;
use crate::feedback::ReviewFeedback;
use crate::follow_up::{ParentCandidate, StartFrom};
use crate::ledger::{UsageIdentity, UsageLedger, record_isolated_acp_usage};
use crate::live_exchange::{LiveContext, LiveLog};
use crate::request::{CodingWorkerRequest, check_request_fields, verify_turn_request};
use crate::staged::StagedTree;
use container::ContainerName;
use container::ContainerRuntime;

/// Everything one `run` needs.
#[derive(Debug)]
pub struct PipelineRequest<'a> {
    pub repo: &'a Path,
    pub commit: &'a str,
    pub context: &'a ApprovedExecutionContext,
    pub task: &'a str,
    /// Explicit editable selection; `None` selects every approved editable file.
    pub selected: Option<Vec<RepoPath>>,
    /// Explicit read-only selection; `None` selects every approved read-only file (bounded).
    pub read_only: Option<Vec<RepoPath>>,
    pub policy: &'a dyn PathGuard,
    pub config: &'a TurnConfig,
    /// Directory under which a fresh staging tree is created (and removed) for this turn.
    pub staging_parent: &'a Path,
    pub store: Option<&'a CandidateStore>,
    pub ledger: Option<&'a UsageLedger>,
    pub user_id: &'a str,
    /// A follow-up turn's review feedback, given to the agent as untrusted context.
    pub review_feedback: Option<&'a ReviewFeedback>,
    /// The candidate a follow-up continues: the turn starts from its post-images (the review
    /// feedback must name it).
    pub parent: Option<&'a ParentCandidate>,
}

/// Wall time of each phase.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PhaseTimings {
    pub snapshot_ms: u128,
    pub turn_ms: u128,
    pub stage_finalize_ms: u128,
}

/// A finished run.
#[derive(Debug, Clone)]
pub struct PipelineOutcome {
    pub candidate: RepositoryPatchCandidate,
    pub digest: Sha256,
    pub usage: Option<IsolatedAcpUsage>,
    pub usage_recorded: bool,
    pub container_name: ContainerName,
    pub selected: Vec<RepoPath>,
    pub read_only: Vec<RepoPath>,
    pub timings: PhaseTimings,
    /// A live turn's tunnel record and the gateway's usage (`None` offline).
    pub live: Option<LiveLog>,
}

/// Whether `p` belongs in the default selection: allowed by the approval, editable (outside its
/// read-only paths) or, with `read_only`, read-only (inside them); never prohibited, secret or an
/// environment template; accepted by `policy`.
fn selectable(
    context: &ApprovedExecutionContext,
    policy: &dyn PathGuard,
    p: &RepoPath,
    read_only: bool,
) -> bool {
    let s = p.as_str();
    let in_read_only = if read_only {
        snapshot::in_scope(s, context.read_only_paths(), false)
    } else {
        !snapshot::in_scope(s, context.read_only_paths(), true)
    };
    snapshot::in_scope(s, context.allowed_paths(), false)
        && in_read_only
        && !snapshot::in_scope(s, context.prohibited_paths(), true)
        && !is_secret_sensitive_path(s)
        && !is_secret_contract_path(s)
        && !is_repository_env_template_path(s)
        && policy.validate_path(p).is_ok()
}

/// The default selection: every snapshot file the approval makes editable, and every file it
/// makes read-only (both bounded; too many is an error, never a silent truncation).
///
/// # Errors
/// `REPOSITORY_PATCH_SELECTION` when the approval selects nothing or too much.
pub fn default_selection(
    snapshot: &GitSnapshot,
    context: &ApprovedExecutionContext,
    policy: &dyn PathGuard,
) -> Result<(Vec<RepoPath>, Vec<RepoPath>), TurnError> {
    let manifest = snapshot.manifest();
    let editable: Vec<RepoPath> = manifest
        .keys()
        .filter(|p| selectable(context, policy, p, false))
        .cloned()
        .collect();
    let read_only: Vec<RepoPath> = manifest
        .keys()
        .filter(|p| selectable(context, policy, p, true))
        .cloned()
        .collect();
    if editable.len() + context.create_paths().len() > MAX_REPOSITORY_FILES {
        return Err(TurnError::Selection {
            detail: "approved scopes select more than 50 files",
        });
    }
    if read_only.len() > MAX_READ_ONLY_INSPECTION_FILES {
        return Err(TurnError::Selection {
            detail: "approved read-only scopes select too many files",
        });
    }
    Ok((editable, read_only))
}

/// A fresh, not-yet-existing staging root under `parent`.
#[must_use]
pub fn staging_root(parent: &Path) -> PathBuf {
    parent.join(format!(
        "patch-candidate-stage-{}",
        uuid::Uuid::new_v4().simple()
    ))
}

/// The snapshot evidence, selection and request of one turn at a loaded snapshot, checked
/// against the approval's snapshot identity; [`Self::approve`] binds it.
#[derive(Debug)]
pub struct PreparedTurn<'a> {
    snap: &'a GitSnapshot,
    context: &'a ApprovedExecutionContext,
    policy: &'a dyn PathGuard,
    evidence: RepositorySnapshotEvidence,
    selected: Vec<RepoPath>,
    read_only: Vec<RepoPath>,
    request: CodingWorkerRequest,
}

/// The snapshot evidence of `snap` for `context`, its identity checked against the approval.
///
/// # Errors
/// `REPOSITORY_SNAPSHOT_*`, `REPOSITORY_PATCH_SNAPSHOT_IDENTITY`.
pub fn verified_evidence(
    snap: &GitSnapshot,
    context: &ApprovedExecutionContext,
) -> Result<RepositorySnapshotEvidence, TurnError> {
    let evidence = snap.evidence(
        context.plan_id(),
        context.request_id(),
        context.app_id(),
        context.repository_full_name(),
    )?;
    verify_snapshot_identity(context, &evidence)?;
    Ok(evidence)
}

impl<'a> PreparedTurn<'a> {
    /// The snapshot evidence of `snap` for `context` (its identity checked), the selection
    /// (`None`: the approval's default, see [`default_selection`]) and the turn request for
    /// `task` with the selected files' baseline text.
    ///
    /// # Errors
    /// `REPOSITORY_SNAPSHOT_*`, `REPOSITORY_PATCH_SNAPSHOT_IDENTITY`, `REPOSITORY_PATCH_SELECTION`.
    pub fn new(
        snap: &'a GitSnapshot,
        context: &'a ApprovedExecutionContext,
        policy: &'a dyn PathGuard,
        task: &str,
        selected: Option<Vec<RepoPath>>,
        read_only: Option<Vec<RepoPath>>,
    ) -> Result<Self, TurnError> {
        let evidence = verified_evidence(snap, context)?;
        let (default_editable, default_read_only) = match (&selected, &read_only) {
            (Some(_), Some(_)) => (Vec::new(), Vec::new()),
            _ => default_selection(snap, context, policy)?,
        };
        let selected = selected.unwrap_or(default_editable);
        let read_only = read_only.unwrap_or(default_read_only);
        // The container's archive export counts every staged file (editable, created and
        // read-only) against one cap: refused here, before any file is read, not in the turn.
        if selected.len() + context.create_paths().len() + read_only.len()
            > archive::MAX_ARCHIVE_FILES
        {
            return Err(TurnError::Selection {
                detail: "editable, created and read-only files together exceed the 50 a turn stages",
            });
        }
        let baseline = snap.read_files(&selected)?;
        let read_only_files = snap.read_files(&read_only)?;
        let request = CodingWorkerRequest::for_context(context, task, baseline, read_only_files);
        Ok(Self {
            snap,
            context,
            policy,
            evidence,
            selected,
            read_only,
            request,
        })
    }

    /// Every check [`run_pipeline`] makes about the approval before its first Docker call: the
    /// request's budget and fields, the approval bound to the selection and its baseline (the
    /// snapshot as the create-absence proof), and the read-only selection.
    ///
    /// # Errors
    /// The first failing check's code (`REPOSITORY_DOCKER_FILE_BUDGET`, `…_CONTEXT_MISMATCH`,
    /// `REPOSITORY_PATCH_*`).
    pub fn approve(&self) -> Result<ApprovedTurn<'_>, TurnError> {
        check_request_fields(&self.request, self.context)?;
        let approved = ApprovedTurn::new(
            self.context,
            &self.evidence,
            self.policy,
            Some(self.snap),
            self.selected.clone(),
            &self.request.files,
        )?;
        verify_turn_request(&self.request, &approved)?;
        Ok(approved)
    }

    /// The selected editable paths.
    #[must_use]
    pub fn selected(&self) -> &[RepoPath] {
        &self.selected
    }

    /// The selected read-only paths.
    #[must_use]
    pub fn read_only(&self) -> &[RepoPath] {
        &self.read_only
    }

    /// The turn request.
    #[must_use]
    pub fn request(&self) -> &CodingWorkerRequest {
        &self.request
    }
}

fn prepare<'a>(
    req: &PipelineRequest<'a>,
    snap: &'a GitSnapshot,
) -> Result<PreparedTurn<'a>, TurnError> {
    let mut prepared = PreparedTurn::new(
        snap,
        req.context,
        req.policy,
        req.task,
        req.selected.clone(),
        req.read_only.clone(),
    )?;
    prepared.request.review_feedback = req.review_feedback.cloned();
    if let Some(parent) = req.parent {
        let named = req
            .review_feedback
            .is_some_and(|f| f.supersedes_candidate() == parent.digest().to_string());
        if !named {
            return Err(TurnError::FollowUpParent {
                detail: "the review does not name the candidate the turn continues",
            });
        }
        prepared.request.start_from = Some(StartFrom::of_parent(
            parent,
            req.context,
            &prepared.request.files,
        )?);
    }
    Ok(prepared)
}

/// Every check [`run_pipeline`] makes before its first Docker call — snapshot at the pinned
/// commit, the approval's snapshot identity, the selection, and the turn request against the
/// approval — without touching Docker. The job service runs it before a job enters the queue.
///
/// # Errors
/// The first failing check's code, as [`run_pipeline`] would report it.
pub fn verify_pipeline_request(req: &PipelineRequest<'_>) -> Result<(), TurnError> {
    let snap = GitSnapshot::load(req.repo, req.commit)?;
    let prepared = prepare(req, &snap)?;
    prepared.approve()?;
    crate::request::stdin_payload(&prepared.request, req.context).map(|_| ())
}

/// Runs the whole pipeline for one turn.
///
/// # Errors
/// The first failing step's code: snapshot/approval (`REPOSITORY_SNAPSHOT_*`,
/// `REPOSITORY_PATCH_*`), the Docker turn (`REPOSITORY_DOCKER_*`), staging and finalisation
/// (`REPOSITORY_PATCH_*`).
///
/// # Security
/// The repository is only read (its object database, at the pinned commit). The staging tree is
/// private (0700), created fresh and removed on every path, cancellation of this future included.
pub async fn run_pipeline<R: ContainerRuntime + Clone + 'static>(
    runtime: &R,
    req: PipelineRequest<'_>,
) -> Result<PipelineOutcome, TurnError> {
    run(runtime, req, None).await
}

/// Runs the whole pipeline for one live turn: as [`run_pipeline`], with the turn's model requests
/// served by the gateway in `live`. The usage recorded (and reported) is the gateway's own token
/// count; the container's self-report is advisory and dropped.
///
/// # Errors
/// As [`run_pipeline`], plus the tunnel's `PATCH_CANDIDATE_TUNNEL_*` codes.
///
/// # Security
/// As [`run_pipeline`]; the credential stays in the gateway.
pub async fn run_live_pipeline<R: ContainerRuntime + Clone + 'static>(
    runtime: &R,
    req: PipelineRequest<'_>,
    live: &LiveContext<'_>,
) -> Result<PipelineOutcome, TurnError> {
    run(runtime, req, Some(live)).await
}

/// The error of a turn without a completed proposal: a live turn whose model requests the
/// gateway refused or cut carries the gateway's code.
fn not_completed(status: &'static str, live: Option<&LiveLog>) -> TurnError {
    match live.and_then(LiveLog::refusal_code) {
        Some(code) => TurnError::GatewayRefused { code, status },
        None => TurnError::TurnNotCompleted { status },
    }
}

async fn run<R: ContainerRuntime + Clone + 'static>(
    runtime: &R,
    req: PipelineRequest<'_>,
    live: Option<&LiveContext<'_>>,
) -> Result<PipelineOutcome, TurnError> {
    let started = Instant::now();
    let snap = GitSnapshot::load(req.repo, req.commit)?;
    let prepared = prepare(&req, &snap)?;
    let context = req.context;
    let snapshot_ms = started.elapsed().as_millis();

    let turn_started = Instant::now();
    let request = &prepared.request;
    let approved = prepared.approve()?;
    let (mut turn, live_log) = match live {
        None => (
            execute_repository_docker_turn(runtime, request, &approved, req.config).await?,
            None,
        ),
        Some(live) => {
            let (turn, log) =
                execute_live_turn(runtime, request, &approved, req.config, live).await?;
            (turn, Some(log))
        }
    };
    let model_name = live.map(|l| l.settings.model.as_str());
    if let Some(log) = &live_log {
        // The trusted count: what the upstream reported to the gateway.
        let g = &log.gateway;
        turn.usage = IsolatedAcpUsage::new(g.input_tokens, g.output_tokens, g.total_tokens);
    }
    let turn_ms = turn_started.elapsed().as_millis();

    let attempt_id = format!("attempt-{}", turn.attempt);
    let identity = UsageIdentity {
        app_id: context.app_id().to_owned(),
        user_id: req.user_id.to_owned(),
        tenant_id: "local".to_owned(),
        workspace_id: context.repository_full_name().to_owned(),
        chat_id: None,
        workflow_name: None,
        build_id: Some(context.build_registry_id().to_owned()),
    };
    let usage_recorded = record_isolated_acp_usage(
        req.ledger,
        turn.usage.as_ref(),
        &identity,
        &attempt_id,
        model_name,
    )
    .unwrap_or(false);

    if turn.proposal.status != ProposalStatus::Completed {
        return Err(not_completed(
            turn.proposal.status.as_str(),
            live_log.as_ref(),
        ));
    }
    let verified_archive = turn
        .workspace_archive
        .as_ref()
        .ok_or(TurnError::InvalidOutput {
            reason: "completed turn without an archive",
        })?;

    let stage_started = Instant::now();
    let root = staging_root(req.staging_parent);
    let limits = StageLimits {
        max_files: approved.selected().len() + context.create_paths().len(),
        max_archive_bytes: req.config.max_archive_bytes(),
    };
    let staged = StagedTree::new(archive::stage_verified_archive(
        &approved,
        verified_archive,
        &root,
        limits,
    )?);
    crate::fault::point(crate::fault::AFTER_STAGING).await;
    let finalized =
        finalizer::finalize_repository_patch(&approved, staged.workspace(), &turn.proposal);
    let cleaned = staged.remove();
    let candidate = finalized?;
    cleaned?;
    let digest = match req.store {
        Some(store) => store.put(&candidate)?,
        None => finalizer::repository_patch_digest(&candidate)?,
    };
    let stage_finalize_ms = stage_started.elapsed().as_millis();
    Ok(PipelineOutcome {
        candidate,
        digest,
        usage: turn.usage,
        usage_recorded,
        container_name: turn.container_name,
        selected: prepared.selected,
        read_only: prepared.read_only,
        timings: PhaseTimings {
            snapshot_ms,
            turn_ms,
            stage_finalize_ms,
        },
        live: live_log,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live_exchange::LiveEvent;
    use snapshot::DefaultPathGuard;

    #[test]
    fn a_live_turn_that_failed_after_a_gateway_refusal_carries_its_code() {
        let offline = not_completed("failed", None);
        assert_eq!(offline.code(), "REPOSITORY_PATCH_PROPOSAL_STATUS");
        let mut log = LiveLog::default();
        // No event, then a side call only: the status code still.
        let side_call = LiveEvent {
            channel: 1,
            code: "PATCH_CANDIDATE_GATEWAY_SIDE_CALL",
        };
        for event in [None, Some(side_call)] {
            log.events.extend(event);
            assert_eq!(
                not_completed("failed", Some(&log)).code(),
                "REPOSITORY_PATCH_PROPOSAL_STATUS"
            );
        }
        log.events.push(LiveEvent {
            channel: 3,
            code: "PATCH_CANDIDATE_GATEWAY_MODEL",
        });
        let e = not_completed("failed", Some(&log));
        assert_eq!(e.code(), "PATCH_CANDIDATE_GATEWAY_MODEL");
        assert_eq!(
            e.to_string(),
            "PATCH_CANDIDATE_GATEWAY_MODEL: the model gateway refused or cut a model request; the turn reported failed"
        );
        assert_eq!(vocab::Coded::class(&e), vocab::FailureClass::Rejected);
    }

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    #[test]
    fn default_selection_skips_secrets_templates_protected_and_out_of_scope() {
        let dir = tempfile::tempdir().unwrap();
        for (path, content) in [
            ("app/a.py", "a\n"),
            ("app/.env", "TOKEN=x\n"),
            ("app/.env.example", "TOKEN=\n"),
            ("app/private.pem", "key\n"),
            ("tests/test_a.py", "t\n"),
            (".github/workflows/ci.yml", "on: push\n"),
            ("docs/readme.md", "d\n"),
        ] {
            let full = dir.path().join(path);
            std::fs::DirBuilder::new()
                .recursive(true)
                .create(full.parent().unwrap())
                .unwrap();
            std::fs::write(full, content).unwrap();
        }
        git(dir.path(), &["init", "-q"]);
        git(dir.path(), &["add", "-A"]);
        git(
            dir.path(),
            &[
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@example.invalid",
                "commit",
                "-q",
                "-m",
                "x",
            ],
        );
        let commit = git(dir.path(), &["rev-parse", "HEAD"]);
        let snap = GitSnapshot::load(dir.path(), &commit).unwrap();
        let doc = serde_json::json!({
            "handoff_id": "h", "request_id": "r", "plan_id": "p", "app_id": "a",
            "build_registry_id": "b", "repository_full_name": "o/n", "baseline_commit_sha": commit,
            "raw_request": "t", "request_type": "change", "approved_plan_digest": "0".repeat(64),
            "snapshot_digest": "s", "graph_identity_digest": "g", "impact_report_digest": "i",
            "execution_strategy_id": "e", "rationale": "r",
            "allowed_paths": ["app/", "tests/", ".github/"], "read_only_paths": ["tests/"],
        });
        let context = ApprovedExecutionContext::from_json(&doc.to_string()).unwrap();
        let (editable, read_only) =
            default_selection(&snap, &context, &DefaultPathGuard::default()).unwrap();
        let names = |v: &[RepoPath]| v.iter().map(|p| p.as_str().to_owned()).collect::<Vec<_>>();
        assert_eq!(names(&editable), vec!["app/a.py"]);
        assert_eq!(names(&read_only), vec!["tests/test_a.py"]);
    }
}
