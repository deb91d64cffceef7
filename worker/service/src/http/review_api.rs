//! The review and publication part of the API: the review document of a job's candidate
//! (`GET /v1/jobs/{id}/review`), decisions (`POST /v1/jobs/{id}/review`) and publication
//! (`POST /v1/jobs/{id}/publish`). [`decide`] and [`publish`] are the actions themselves, for
//! every front end of this service (the JSON API here, the review page).
//!
//! Everything is re-established from the store on each request: the candidate re-validated and
//! digested (against the digest the job records) with its content-policy scan — kept by digest
//! in the review cache once done, see `review_cache.rs` — its evidence parsed strictly, the
//! history parsed strictly. A decision or publication names the candidate digest it was made against
//! and is refused for any other.

use std::sync::Arc;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use vocab::JobId;

use super::{ApiError, ApiResult, Caller, JobJson, parse_id};
use crate::Shared;
use crate::error::PUBLISH_DISABLED_CODE;
use crate::mirror::Locator;

/// Everything a review view or decision of one job's candidate is built from, established
/// from the store's bytes on each request: the candidate re-validated and digested, its gate
/// evidence parsed strictly, the content policy scanned, the history parsed strictly.
pub(crate) struct ReviewContext {
    pub candidate: Arc<finalizer::RepositoryPatchCandidate>,
    pub facts: review::ReviewFacts,
    pub findings: Vec<review::PolicyFinding>,
    pub history: Vec<review::StoredDecision>,
    pub publication: Option<serde_json::Value>,
    /// The job the candidate belongs to.
    pub job: jobs::Job,
    /// The follow-up jobs its `retry` decisions queued, oldest first, each once.
    pub follow_ups: Vec<JobId>,
}

impl ReviewContext {
    /// The review document of this context.
    pub(crate) fn package(&self) -> Result<review::ReviewPackage, ApiError> {
        Ok(review::build_package(
            &self.candidate,
            &self.facts,
            &self.findings,
            self.history.clone(),
            self.publication.clone(),
        )?)
    }
}

/// Builds the review context of job `id`'s candidate from the store.
pub(crate) async fn review_context(sh: &Shared, id: &JobId) -> Result<ReviewContext, ApiError> {
    let no_candidate = || {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "PATCH_CANDIDATE_JOBS_NOT_FOUND",
            "PATCH_CANDIDATE_JOBS_NOT_FOUND: no candidate for this job (not completed, or no such job)",
        )
    };
    let job = sh.store.get(id).await?.ok_or_else(no_candidate)?;
    let checked = checked_candidate(sh, id, &job).await?;
    let candidate = Arc::clone(&checked.candidate);
    let digest = checked.digest;
    let mut gates = Vec::new();
    for doc in sh.store.evidence(id).await? {
        let file = gate::parse_evidence(doc.bytes())?;
        if let Some(bound) = file.evidence.candidate_digest {
            gates.push(review::GateFact {
                gate: file.evidence.gate.clone(),
                outcome: file.evidence.outcome,
                evidence_digest: file.digest,
                candidate_digest: bound,
            });
        }
    }
    let findings = checked.findings.clone();
    let mut history = Vec::new();
    let mut follow_ups: Vec<JobId> = Vec::new();
    for row in sh.store.decisions(id).await? {
        if let Some(f) = &row.follow_up_job_id
            && !follow_ups.contains(f)
        {
            follow_ups.push(f.clone());
        }
        history.push(review::StoredDecision {
            seq: u64::try_from(row.seq).map_err(|_| jobs::JobsError::Corrupt {
                field: "review_decisions.seq",
            })?,
            record: review::parse_record(row.row.record(), &digest)?,
        });
    }
    let publication = sh
        .store
        .publication(id)
        .await?
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
    let mut facts = review::ReviewFacts::assemble(
        &candidate,
        digest,
        gates,
        checked.policy.clone(),
        publication.is_some(),
    );
    facts.continues = job.spec.follow_up.as_ref().and_then(|f| {
        Some(review::Continues {
            job: f.supersedes_job.to_string(),
            candidate_digest: f.supersedes_candidate.parse().ok()?,
        })
    });
    facts.superseded_by = sh.store.later_attempt(id).await?.map(|j| j.id.to_string());
    // The job's required gates: the approval's and those its repository policy added.
    facts.required_gates = job.spec.required_gates(&facts.required_gates);
    Ok(ReviewContext {
        candidate,
        facts,
        findings,
        history,
        publication,
        job,
        follow_ups,
    })
}

/// The diff from the attempt a follow-up continues to the follow-up's own candidate.
pub(crate) struct AttemptDiff {
    /// The previous attempt's job.
    pub earlier_job: JobId,
    /// The previous attempt's candidate (checked against the digest its job records, and
    /// against the digest the follow-up names).
    pub earlier_candidate: vocab::Sha256,
    pub files: Vec<review::AttemptFileDiff>,
}

/// [`AttemptDiff`] of `context`'s candidate, or `None` when its job continues no earlier
/// attempt. The earlier candidate is read and checked like any reviewed candidate (the review
/// cache keeps it by digest); the diffs are computed off the async runtime.
///
/// # Errors
/// `PATCH_CANDIDATE_JOBS_CORRUPT` when the earlier job or its candidate is not what the
/// follow-up names; `PATCH_CANDIDATE_REVIEW_CHAIN` when the two are not attempts of one
/// approval; the candidate checks' codes; store errors.
pub(crate) async fn attempt_diff(
    sh: &Shared,
    context: &ReviewContext,
) -> Result<Option<AttemptDiff>, ApiError> {
    let Some(f) = context.job.spec.follow_up.as_ref() else {
        return Ok(None);
    };
    let corrupt = |field| -> ApiError { jobs::JobsError::Corrupt { field }.into() };
    let earlier_job = f.supersedes_job.clone();
    let job = sh
        .store
        .get(&earlier_job)
        .await?
        .ok_or_else(|| corrupt("follow_up.supersedes_job"))?;
    let earlier = checked_candidate(sh, &earlier_job, &job).await?;
    if earlier.digest.to_string() != f.supersedes_candidate {
        return Err(corrupt("follow_up.supersedes_candidate"));
    }
    let (before, after) = (
        Arc::clone(&earlier.candidate),
        Arc::clone(&context.candidate),
    );
    let files = tokio::task::spawn_blocking(move || review::attempt_diff(&before, &after))
        .await
        .map_err(|_| blocking_failed())??;
    Ok(Some(AttemptDiff {
        earlier_job,
        earlier_candidate: earlier.digest,
        files,
    }))
}

/// `GET /v1/jobs/{id}/review/attempt-diff`: what changed from the previous attempt.
async fn attempt_diff_show(
    State(sh): State<Arc<Shared>>,
    id: Result<UrlPath<String>, PathRejection>,
) -> ApiResult {
    let id = parse_id(id)?;
    let context = review_context(&sh, &id).await?;
    let Some(d) = attempt_diff(&sh, &context).await? else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "PATCH_CANDIDATE_JOBS_NOT_FOUND",
            "PATCH_CANDIDATE_JOBS_NOT_FOUND: this job continues no earlier attempt",
        ));
    };
    Ok(axum::Json(serde_json::json!({
        "candidate_digest": context.facts.candidate_digest,
        "earlier_job": d.earlier_job.as_str(),
        "earlier_candidate": d.earlier_candidate,
        "files": d.files,
    }))
    .into_response())
}

/// Publication needs the last candidate of its chain, accepted: a superseded candidate is
/// refused (`PATCH_CANDIDATE_REVIEW_SUPERSEDED`) even when its last decision is an accept (a
/// retry and an accept raced), then `PATCH_CANDIDATE_REVIEW_NOT_ACCEPTED`.
fn require_publishable(context: &ReviewContext) -> Result<(), ApiError> {
    if let Some(by) = &context.facts.superseded_by {
        return Err(review::ReviewError::Superseded { by: by.clone() }.into());
    }
    review::require_accepted(&context.history)?;
    Ok(())
}

/// The job's candidate checked against the digest it records, with its policy scan: from the
/// review cache when that digest was checked before, else from the store's bytes (off the async
/// runtime) and then kept.
async fn checked_candidate(
    sh: &Shared,
    id: &JobId,
    job: &jobs::Job,
) -> Result<Arc<crate::review_cache::Checked>, ApiError> {
    use crate::review_cache::CheckError;
    if let Some(recorded) = job.candidate_digest.as_deref()
        && let Some(hit) = sh.review_cache.get(recorded)
    {
        return Ok(hit);
    }
    let bytes = sh.store.candidate(id).await?.ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "PATCH_CANDIDATE_JOBS_NOT_FOUND",
            "PATCH_CANDIDATE_JOBS_NOT_FOUND: no candidate for this job (not completed, or no such job)",
        )
    })?;
    let corrupt = || -> ApiError {
        jobs::JobsError::Corrupt {
            field: "candidate_digest",
        }
        .into()
    };
    let recorded = job.candidate_digest.clone().ok_or_else(corrupt)?;
    let weight = bytes.len();
    let checked =
        tokio::task::spawn_blocking(move || crate::review_cache::check(&bytes, &recorded))
            .await
            .map_err(|_| {
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "PATCH_CANDIDATE_SERVICE_STATE",
                    "PATCH_CANDIDATE_SERVICE_STATE: the candidate check task failed",
                )
            })?
            .map_err(|e| match e {
                CheckError::Candidate(e) => ApiError::from(e),
                CheckError::Policy(e) => ApiError::from(e),
                CheckError::DigestMismatch => corrupt(),
            })?;
    let checked = Arc::new(checked);
    sh.review_cache.insert(Arc::clone(&checked), weight);
    Ok(checked)
}

async fn review_show(
    State(sh): State<Arc<Shared>>,
    id: Result<UrlPath<String>, PathRejection>,
) -> ApiResult {
    let id = parse_id(id)?;
    let context = review_context(&sh, &id).await?;
    Ok(axum::Json(serde_json::json!({"review": context.package()?})).into_response())
}

/// A decision as a client sends it: the decision, the candidate digest it was made against
/// (required), a reason, and `force` for an override.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct DecisionBody {
    decision: String,
    candidate_digest: String,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    force: bool,
}

/// A `sha256:` digest a client named.
pub(crate) fn named_digest(text: &str) -> Result<vocab::Sha256, ApiError> {
    text.parse().map_err(|_| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "PATCH_CANDIDATE_REVIEW_INPUT",
            "PATCH_CANDIDATE_REVIEW_INPUT: candidate_digest must be sha256: and 64 lowercase hex digits",
        )
    })
}

/// A recorded decision.
#[derive(Debug)]
pub(crate) struct Decided {
    /// Its sequence number in the candidate's history (1, 2, …).
    pub seq: i64,
    pub record: review::DecisionRecord,
    /// The follow-up job a `retry` queued.
    pub follow_up: Option<JobId>,
}

/// Who may record `request` on `job`: the `review` role; for a forced accept also the role
/// `serve --force-role` names (`admin` by default); under `serve --two-person-review`, an accept
/// (forced or not) only by another principal than the job's submitter.
///
/// # Errors
/// `PATCH_CANDIDATE_SERVICE_FORBIDDEN` naming the missing role;
/// `PATCH_CANDIDATE_SERVICE_TWO_PERSON`.
pub(crate) fn may_decide(
    opts: &crate::ServeOptions,
    caller: &Caller,
    job: &jobs::Job,
    decision: review::Decision,
    force: bool,
) -> Result<(), crate::ServiceError> {
    may_decide_under(
        (opts.force_role, opts.two_person_review),
        caller,
        job.spec.submitted_by.as_deref(),
        decision,
        force,
    )
}

/// [`may_decide`] under `(force_role, two_person_review)` for a job submitted by
/// `submitted_by`.
fn may_decide_under(
    (force_role, two_person_review): (jobs::Role, bool),
    caller: &Caller,
    submitted_by: Option<&str>,
    decision: review::Decision,
    force: bool,
) -> Result<(), crate::ServiceError> {
    caller.require(jobs::Role::Review)?;
    if decision != review::Decision::Accept {
        return Ok(());
    }
    if force {
        caller.require(force_role)?;
    }
    if two_person_review {
        match submitted_by {
            Some(by) if by == caller.principal.as_str() => {
                return Err(crate::ServiceError::TwoPerson {
                    detail: "the principal who submitted the job may not accept its candidate",
                });
            }
            Some(_) => {}
            None => {
                return Err(crate::ServiceError::TwoPerson {
                    detail: "the job has no recorded submitter (queued before schema version 7), so no one may accept it",
                });
            }
        }
    }
    Ok(())
}

/// Records `request` for job `id`'s candidate on behalf of `caller`, once [`may_decide`]
/// allows it, under the review rules ([`review::decide`]): refused for another digest, an
/// `accept` refused without passing gates and a clean policy unless forced with a reason. The
/// store audits the decision in the same transaction.
///
/// # Errors
/// `PATCH_CANDIDATE_SERVICE_FORBIDDEN`, `PATCH_CANDIDATE_SERVICE_TWO_PERSON`; the review crate's
/// refusals; `PATCH_CANDIDATE_JOBS_NOT_FOUND` without a candidate; store errors.
pub(crate) async fn decide(
    sh: &Shared,
    id: &JobId,
    caller: &Caller,
    request: &review::DecisionRequest,
) -> Result<Decided, ApiError> {
    caller.require(jobs::Role::Review)?;
    let context = review_context(sh, id).await?;
    may_decide(
        &sh.opts,
        caller,
        &context.job,
        request.decision,
        request.force,
    )?;
    let actor = review::Actor {
        kind: review::ActorKind::ApiToken,
        principal: caller.principal.clone(),
    };
    let record = review::decide(&context.facts, request, actor, vocab::now_unix_ms())?;
    let row = jobs::DecisionRow::new(
        &record.candidate_digest.to_string(),
        record.decision.as_str(),
        record.actor.principal.as_str(),
        record.forced,
        record.at_ms,
        record.to_bytes()?,
    )?;
    // A retry queues its follow-up first (idempotently: the same retry again is the same job),
    // so the decision row can name it; a store failure in between leaves a queued job that the
    // repeated request finds again, never a decision without its job.
    let follow_up = if record.decision == review::Decision::Retry {
        let gates = context
            .facts
            .gates
            .iter()
            .filter(|g| g.candidate_digest == context.facts.candidate_digest)
            .map(|g| {
                Ok(jobs::FollowUpGate {
                    gate: g.gate.clone(),
                    verdict: g.outcome,
                    new_failures: Vec::new(),
                    excerpt: None,
                })
            })
            .collect::<Result<Vec<_>, jobs::JobsError>>()?;
        let spec = crate::submission::follow_up_spec(
            &context.job,
            &context.facts.candidate_digest,
            record.reason.as_ref().map(review::Reason::as_str),
            gates,
        )?;
        let (job, created) = sh.store.submit(spec).await?;
        sh.wake.notify_one();
        tracing::info!(
            code = "PATCH_CANDIDATE_REVIEW_FOLLOW_UP",
            job = %id,
            follow_up = %job.id,
            created,
            "follow-up job queued"
        );
        Some(job.id)
    } else {
        None
    };
    let seq = sh
        .store
        .record_decision(id, row, follow_up.as_ref())
        .await?;
    sh.metrics.decision(record.decision.as_str(), record.forced);
    tracing::info!(
        code = "PATCH_CANDIDATE_REVIEW_DECISION",
        job = %id,
        decision = record.decision.as_str(),
        forced = record.forced,
        principal = record.actor.principal.as_str(),
        seq,
        "review decision recorded"
    );
    Ok(Decided {
        seq,
        record,
        follow_up,
    })
}

async fn review_decide(
    State(sh): State<Arc<Shared>>,
    axum::Extension(caller): axum::Extension<Caller>,
    JobJson { id, body }: JobJson<DecisionBody>,
) -> ApiResult {
    let request = review::DecisionRequest {
        candidate_digest: named_digest(&body.candidate_digest)?,
        decision: review::Decision::parse(&body.decision)?,
        reason: body
            .reason
            .as_deref()
            .map(review::Reason::parse)
            .transpose()?,
        force: body.force,
    };
    let decided = decide(&sh, &id, &caller, &request).await?;
    let context = review_context(&sh, &id).await?;
    Ok((
        StatusCode::CREATED,
        axum::Json(serde_json::json!({
            "seq": decided.seq,
            "decision": decided.record,
            "follow_up_job": decided.follow_up.as_ref().map(JobId::as_str),
            "review": context.package()?,
        })),
    )
        .into_response())
}

/// Where and how this host publishes (`serve --publish-remote …`): the operator's choice, never
/// a client's. A client names only the branch to create and the base branch.
#[derive(Debug, Clone)]
pub struct PublishTarget {
    /// The destination repository.
    pub remote: publish::Remote,
    /// Where git gets the remote's credential.
    pub credential: publish::CredentialSource,
    /// Author and committer name of published commits.
    pub identity_name: String,
    /// Author and committer e-mail of published commits.
    pub identity_email: String,
}

/// A publish request as a client sends it.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PublishBody {
    /// The digest of the candidate the client reviewed (required).
    pub candidate_digest: String,
    /// The new branch.
    pub branch: String,
    /// The base branch whose tip must still be the baseline commit (default `main`).
    #[serde(default)]
    pub base: Option<String>,
    /// Merge onto a moved base and re-run the required gates on the merged tree.
    #[serde(default)]
    pub rebase: bool,
}

fn blocking_failed() -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "PATCH_CANDIDATE_SERVICE_STATE",
        "PATCH_CANDIDATE_SERVICE_STATE: the publication task failed",
    )
}

/// The required gates re-run on exactly a merged commit's tree (the rebase of a publication):
/// `passed` only when every gate's run passed outright; an environment failure, or a gate this
/// host does not define, is `unavailable` (nothing is published).
fn regate(
    sh: &Arc<Shared>,
    handle: &tokio::runtime::Handle,
    required: &[String],
    runtime: Option<&str>,
    merged: &publish::MergedCommit<'_>,
) -> publish::RegateVerdict {
    if required.is_empty() {
        return publish::RegateVerdict::Passed;
    }
    let Some(defs) = sh.opts.gates.as_ref() else {
        return publish::RegateVerdict::Unavailable;
    };
    let Ok(chosen) = defs.require(required) else {
        return publish::RegateVerdict::Unavailable;
    };
    let Ok(runtime) = runtime
        .map(str::parse::<container::RuntimeName>)
        .transpose()
    else {
        return publish::RegateVerdict::Unavailable;
    };
    handle.block_on(async {
        let ctx = gate::RunContext {
            runtime: runtime.as_ref(),
            job: None,
        };
        let run = gate::evaluate_commit_all(
            &sh.docker,
            &chosen,
            merged.git_dir(),
            merged.commit_id(),
            ctx,
            |evidence, digest| {
                tracing::info!(
                    code = "PATCH_CANDIDATE_PUBLISH_REGATE",
                    gate = evidence.gate.as_str(),
                    outcome = evidence.outcome.as_str(),
                    evidence = %digest,
                    "gate re-run on the merged tree"
                );
            },
        )
        .await;
        match run {
            Ok(true) => publish::RegateVerdict::Passed,
            Ok(false) => publish::RegateVerdict::Failed,
            Err(e) => {
                tracing::warn!(code = vocab::Coded::code(&e), "gate re-run failed");
                publish::RegateVerdict::Unavailable
            }
        }
    })
}

/// How long a publication claim lasts unrenewed: a host that dies mid-publish blocks the job's
/// publication for at most this long.
const CLAIM_LEASE: std::time::Duration = std::time::Duration::from_secs(120);
/// How often a running publish renews its claim.
const CLAIM_RENEW_EVERY: std::time::Duration = std::time::Duration::from_secs(30);
/// More tries at recording a pushed publication when the store fails for a moment (0.5, 1, 2 s
/// apart), before the push is withdrawn.
const RECORD_RETRIES: u32 = 3;

/// Aborts a task when dropped (the claim's renewal, once the publish is over).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What one publish needs, checked from the request before anything runs.
struct PublishJob {
    id: JobId,
    principal: review::Principal,
    target: PublishTarget,
    named: vocab::Sha256,
    branch: publish::BranchName,
    base: publish::BranchName,
    rebase: bool,
    /// The commit our previous publication pushed to `branch`: the candidate goes on it as a
    /// new fast-forward commit (a follow-up from a pull request comment).
    extends: Option<String>,
}

/// Publishes job `id`'s accepted candidate to this host's [`PublishTarget`] as one
/// deterministic commit on the new branch `body.branch`, after the base branch is rechecked
/// (`publish::prepare`), and records the publication once.
///
/// Decisions and the publication of a job are one serialised sequence in the job store: the
/// publish takes the job's publication claim first (refused while another publish, on any host,
/// holds it: `PATCH_CANDIDATE_JOBS_PUBLISHING` names its host and branch), renews it while it
/// runs and once more right before the push (a `reject` recorded meanwhile stops it there), and
/// records the push's outcome only while the last decision still accepts the digest. A push
/// whose record is refused because the decision changed is withdrawn (the branch deleted while it
/// holds the pushed commit). The publish runs in a task of its own, holding this host's
/// publication lock and the claim: a client that goes away does not stop it or release either.
///
/// The caller needs the `publish` role; the store audits the publication in the transaction
/// that records it.
///
/// # Errors
/// `PATCH_CANDIDATE_SERVICE_FORBIDDEN`;
/// `PATCH_CANDIDATE_SERVICE_PUBLISH_DISABLED`; `PATCH_CANDIDATE_REVIEW_DIGEST_MISMATCH`,
/// `…_NOT_ACCEPTED`, `…_PUBLISHED`; `PATCH_CANDIDATE_JOBS_PUBLISHING`, `…_NOT_ACCEPTED`,
/// `…_PUBLISHED`, `…_CLAIM_LOST`; the publish crate's codes (`…_BASE_MOVED`,
/// `…_BRANCH_EXISTS`, `…_REGATE_FAILED`, …); store errors.
pub(crate) async fn publish(
    sh: &Arc<Shared>,
    id: &JobId,
    caller: &Caller,
    body: &PublishBody,
) -> Result<publish::PublicationRecord, ApiError> {
    publish_extending(sh, id, caller, body, None).await
}

/// [`publish`], or with `extends` (the commit our previous publication pushed to
/// `body.branch`) a new fast-forward commit on that branch (`…_BRANCH_MOVED` when the branch
/// holds anything else: nothing is overwritten). The forge report's publication.
pub(crate) async fn publish_extending(
    sh: &Arc<Shared>,
    id: &JobId,
    caller: &Caller,
    body: &PublishBody,
    extends: Option<String>,
) -> Result<publish::PublicationRecord, ApiError> {
    caller.require(jobs::Role::Publish)?;
    let principal = &caller.principal;
    let Some(target) = sh.opts.publish.clone() else {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            PUBLISH_DISABLED_CODE,
            format!(
                "{PUBLISH_DISABLED_CODE}: this host publishes nothing (start serve with --publish-remote)"
            ),
        ));
    };
    let job = PublishJob {
        id: id.clone(),
        principal: principal.clone(),
        target,
        named: named_digest(&body.candidate_digest)?,
        branch: publish::BranchName::parse(&body.branch)?,
        base: publish::BranchName::parse(body.base.as_deref().unwrap_or("main"))?,
        rebase: body.rebase,
        extends,
    };
    // Detached from the request: dropping this future (the client went away) leaves the task
    // running with its lock and claim until its outcome is recorded or it gives up.
    tokio::spawn(publish_detached(Arc::clone(sh), job))
        .await
        .map_err(|_| blocking_failed())?
}

/// The publish itself, in its own task (see [`publish`]).
async fn publish_detached(
    sh: Arc<Shared>,
    job: PublishJob,
) -> Result<publish::PublicationRecord, ApiError> {
    let context = review_context(&sh, &job.id).await?;
    if job.named != context.facts.candidate_digest {
        return Err(review::ReviewError::DigestMismatch {
            named: job.named,
            actual: context.facts.candidate_digest,
        }
        .into());
    }
    if context.publication.is_some() {
        return Err(review::ReviewError::Published.into());
    }
    require_publishable(&context)?;
    // The operator's repository policy decides where a branch may go, whatever the client asks.
    if let Some(policy) = sh.policy() {
        policy.check_publication(&crate::repository_policy::PublicationAsk {
            repository: &context.job.spec.repository,
            remote: job.target.remote.as_str(),
            base: job.base.as_str(),
            branch: job.branch.as_str(),
        })?;
    }
    let claim = sh
        .store
        .claim_publication(
            &job.id,
            &job.named.to_string(),
            &sh.opts.host_id,
            job.branch.as_str(),
            CLAIM_LEASE,
        )
        .await?;
    let renewal = AbortOnDrop(tokio::spawn({
        let (sh, claim) = (Arc::clone(&sh), claim.clone());
        async move {
            loop {
                tokio::time::sleep(CLAIM_RENEW_EVERY).await;
                if let Err(e) = sh.store.renew_publication_claim(&claim, CLAIM_LEASE).await {
                    tracing::warn!(
                        code = e.code(),
                        job = %claim.job_id(),
                        "publication claim not renewed"
                    );
                }
            }
        }
    }));
    // The claim first, then this host's turn: a second publish of the job (from a client that
    // went away and came back, or another host) is refused at once, not queued behind the push.
    let outcome = async {
        let _one_at_a_time = sh.publishing.lock().await;
        // The history as it is now that this host's turn has come (the commit is dated at the
        // last accept).
        let context = review_context(&sh, &job.id).await?;
        require_publishable(&context)?;
        push_under_claim(&sh, &job, &claim, context).await
    }
    .await;
    drop(renewal);
    if outcome.is_err()
        && let Err(e) = sh.store.release_publication_claim(&claim).await
    {
        tracing::warn!(
            code = e.code(),
            job = %job.id,
            "publication claim not released; it lapses with its lease"
        );
    }
    outcome
}

/// Builds, rechecks the claim, pushes and records, holding `claim`.
async fn push_under_claim(
    sh: &Arc<Shared>,
    job: &PublishJob,
    claim: &jobs::PublicationClaim,
    context: ReviewContext,
) -> Result<publish::PublicationRecord, ApiError> {
    let accepted_ms = context
        .history
        .iter()
        .rev()
        .find(|d| d.record.decision == review::Decision::Accept)
        .map_or(0, |d| d.record.at_ms);
    let identity = publish::CommitIdentity::new(
        &job.target.identity_name,
        &job.target.identity_email,
        accepted_ms.div_euclid(1000),
        0,
    )?;
    let locator = Locator::parse(&context.job.spec.repository)?;
    let source = sh
        .mirrors
        .ensure(&locator, context.candidate.baseline_commit_sha())
        .await?;
    let required = context.facts.required_gates.clone();
    let runtime = context.job.spec.runtime.clone();
    let candidate = context.candidate;
    let handle = tokio::runtime::Handle::current();
    let shared = Arc::clone(sh);
    let (target, branch, base, rebase, extends) = (
        job.target.clone(),
        job.branch.clone(),
        job.base.clone(),
        job.rebase,
        job.extends.clone(),
    );
    let claim_held = claim.clone();
    let (prepared, record) = tokio::task::spawn_blocking(move || {
        let gate = |merged: &publish::MergedCommit<'_>| {
            regate(&shared, &handle, &required, runtime.as_deref(), merged)
        };
        let request = publish::PublishRequest {
            candidate: &candidate,
            source: Some(&source),
            remote: &target.remote,
            branch: &branch,
            base: &base,
            identity: &identity,
            credential: &target.credential,
            rebase: if rebase { Some(&gate) } else { None },
            extends: extends.as_deref(),
        };
        let prepared = publish::prepare(&request)?;
        tracing::info!(
            code = "PATCH_CANDIDATE_PUBLISH_PREPARED",
            commit = prepared.commit_id(),
            base_tip = prepared.base_tip_seen(),
            "publication commit built; pushing"
        );
        // The last word before anything leaves the host: still this publish's claim, still
        // accepted (a reject recorded while the commit was built or the gates re-ran stops it).
        handle.block_on(
            shared
                .store
                .renew_publication_claim(&claim_held, CLAIM_LEASE),
        )?;
        // The mirror (and a credential copy in it) stays until the outcome is recorded: a
        // refused record withdraws the push. A failed push drops it here.
        let record = prepared.push_keeping_mirror()?;
        Ok::<_, ApiError>((prepared, record))
    })
    .await
    .map_err(|_| blocking_failed())??;
    let Ok(bytes) = serde_json::to_vec(&record) else {
        let e = jobs::JobsError::Corrupt {
            field: "publication record",
        };
        return Err(not_recorded(e, &job.id, &record, prepared).await);
    };
    // The branch is pushed: a store that fails for a moment (a lost connection, a busy SQLite
    // file) is asked again before the push is given up and withdrawn, so neither an unrecorded
    // branch nor a released claim lets a second publish push another one.
    let mut tries = 0;
    loop {
        match sh
            .store
            .record_publication(claim, job.principal.as_str(), bytes.clone())
            .await
        {
            Ok(()) => break,
            Err(e) if e.is_environment() && tries < RECORD_RETRIES => {
                tries += 1;
                tracing::warn!(code = e.code(), job = %job.id, tries, "recording the publication failed; trying again");
                tokio::time::sleep(std::time::Duration::from_millis(250 << tries)).await;
            }
            Err(e) => return Err(not_recorded(e, &job.id, &record, prepared).await),
        }
    }
    // Removing the private mirror is file-system work: off the async threads.
    drop(tokio::task::spawn_blocking(move || drop(prepared)));
    sh.metrics.published();
    tracing::info!(
        code = "PATCH_CANDIDATE_PUBLISHED",
        job = %job.id,
        commit = record.commit_id.as_str(),
        branch = record.branch.as_str(),
        created = record.created,
        rebased = record.rebased,
        principal = job.principal.as_str(),
        "candidate published"
    );
    Ok(record)
}

/// A push whose publication the store refused (or failed) to record. When the decision changed
/// while it ran (`…_NOT_ACCEPTED`), or the store could not record it after [`RECORD_RETRIES`]
/// more tries, a branch this push created is withdrawn; otherwise (another publish recorded, or
/// the claim was lost) it is left and reported. The answer says what the branch holds.
async fn not_recorded(
    e: jobs::JobsError,
    id: &JobId,
    record: &publish::PublicationRecord,
    prepared: publish::PreparedPublication,
) -> ApiError {
    let code = e.code();
    // Withdrawn when the decision changed while it ran, and when the store could not record it
    // at all (the claim is released next, so a branch left unrecorded could be followed by
    // another publish's branch); left when another publish recorded or took the claim.
    let withdraw = (matches!(e, jobs::JobsError::NotAccepted { .. })
        || e.is_environment()
        || matches!(e, jobs::JobsError::Corrupt { .. }))
        && record.created;
    let withdrawn =
        tokio::task::spawn_blocking(move || withdraw.then(|| prepared.withdraw())).await;
    let branch_now = match withdrawn {
        Ok(None) => "left at the pushed commit",
        Ok(Some(Ok(true))) => "withdrawn (deleted)",
        Ok(Some(Ok(false))) => "no longer at the pushed commit; left as it is",
        Ok(Some(Err(err))) => {
            tracing::warn!(code = err.code(), job = %id, "withdrawing the branch failed");
            "left at the pushed commit (withdrawing it failed)"
        }
        Err(_) => "left at the pushed commit (withdrawing it failed)",
    };
    tracing::warn!(
        code,
        job = %id,
        branch = record.branch.as_str(),
        commit = record.commit_id.as_str(),
        branch_now,
        "pushed, but the publication was not recorded"
    );
    let mut answer = ApiError::from(e);
    answer.message = format!(
        "{}; the push to branch {} (commit {}) is not recorded: the branch is {branch_now}",
        answer.message,
        record.branch.as_str(),
        record.commit_id
    );
    answer
}

async fn publish_candidate(
    State(sh): State<Arc<Shared>>,
    axum::Extension(caller): axum::Extension<Caller>,
    JobJson { id, body }: JobJson<PublishBody>,
) -> ApiResult {
    let record = publish(&sh, &id, &caller, &body).await?;
    let context = review_context(&sh, &id).await?;
    Ok((
        StatusCode::CREATED,
        axum::Json(serde_json::json!({
            "publication": record,
            "review": context.package()?,
        })),
    )
        .into_response())
}

/// The review routes (behind the bearer token).
pub(crate) fn routes() -> axum::Router<Arc<Shared>> {
    use axum::routing::{get, post};
    axum::Router::new()
        .route("/v1/jobs/{id}/review", get(review_show).post(review_decide))
        .route("/v1/jobs/{id}/review/attempt-diff", get(attempt_diff_show))
        .route("/v1/jobs/{id}/publish", post(publish_candidate))
}

#[cfg(test)]
mod tests {
    use super::*;
    use jobs::{Role, Roles};
    use review::Decision::{Accept, Reject, Retry};

    fn caller(name: &str, roles: &[Role]) -> Caller {
        Caller {
            principal: review::Principal::parse(name).unwrap(),
            roles: Roles::from_list(roles).unwrap(),
        }
    }

    fn code(r: Result<(), crate::ServiceError>) -> Option<String> {
        r.err().map(|e| vocab::Coded::code(&e).to_owned())
    }

    /// Deciding needs `review`; forcing an accept also the force role; the two-person rule
    /// refuses the submitter's accept (forced or not) and an unrecorded submitter, never a
    /// reject or a retry.
    #[test]
    fn decisions_need_review_forced_accepts_the_force_role_and_two_persons() {
        let forbidden = Some("PATCH_CANDIDATE_SERVICE_FORBIDDEN".to_owned());
        let two = Some("PATCH_CANDIDATE_SERVICE_TWO_PERSON".to_owned());
        let submit = caller("sam", &[Role::Submit]);
        let reviewer = caller("rita", &[Role::Review]);
        let admin = caller("ada", &[Role::Review, Role::Admin]);
        let rules = (Role::Admin, false);
        for d in [Accept, Reject, Retry] {
            assert_eq!(
                code(may_decide_under(rules, &submit, Some("x"), d, false)),
                forbidden
            );
            assert_eq!(
                code(may_decide_under(rules, &reviewer, Some("x"), d, false)),
                None
            );
        }
        assert_eq!(
            code(may_decide_under(rules, &reviewer, None, Accept, true)),
            forbidden
        );
        assert_eq!(
            code(may_decide_under(rules, &admin, None, Accept, true)),
            None
        );
        // The operator names another role for forced accepts.
        assert_eq!(
            code(may_decide_under(
                (Role::Review, false),
                &reviewer,
                None,
                Accept,
                true
            )),
            None
        );
        let rules = (Role::Admin, true);
        assert_eq!(
            code(may_decide_under(
                rules,
                &reviewer,
                Some("rita"),
                Accept,
                false
            )),
            two
        );
        assert_eq!(
            code(may_decide_under(rules, &admin, Some("ada"), Accept, true)),
            two
        );
        assert_eq!(
            code(may_decide_under(rules, &reviewer, None, Accept, false)),
            two
        );
        assert_eq!(
            code(may_decide_under(
                rules,
                &reviewer,
                Some("sam"),
                Accept,
                false
            )),
            None
        );
        for d in [Reject, Retry] {
            assert_eq!(
                code(may_decide_under(rules, &reviewer, Some("rita"), d, false)),
                None
            );
        }
        let e = may_decide_under(rules, &submit, Some("sam"), Accept, false).unwrap_err();
        assert!(e.to_string().contains("'review'"), "{e}");
    }
}
