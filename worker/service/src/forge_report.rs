//! From a forge-started job back to the forge: comments on the issue (queued, ready for review,
//! ended, published), the accepted candidate published as a branch, the pull request (GitLab:
//! merge request) opened with a host-owned title and body, and a commit status on the
//! published commit (for a follow-up, also `pending` on the pull request's head while it runs). A comment on one of our pull requests continues the work: its follow-up's
//! accepted candidate goes onto the same branch as a new fast-forward commit, refused with a
//! failure status when the branch holds anything else.
//!
//! [`report_loop`] (one per host) takes the open reports from the job store one at a time under
//! a lease ([`jobs::JobStore::claim_forge_report`]) and looks at each: it does every step whose
//! time has come, each call back recorded once in the store (`forge_calls`), then hands the
//! report back until the job moves on, or closes it. A call that fails for the forge's or the
//! network's sake is tried again with backoff (2 s doubling, at most 10 minutes apart, 8 times);
//! any other failure closes the report with its code. A host killed between a forge call and its
//! record makes the call again: the pull request is looked up by its branch before one is
//! opened, a status is set to the same value, so the only thing a kill can repeat is a comment.
//!
//! Nothing sent to the forge holds agent or issue text: job ids, digests, gate verdicts, codes,
//! commits and links, written here.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use forge::{CommentTarget, ProjectPath};
use jobs::{ForgeDelivery, JobState};
use tokio::sync::watch;
use vocab::JobId;

use crate::forge_intake::{REVIEW_COMMENT, Trigger};
use crate::forge_policy::{ForgeConfig, Reporting};
use crate::http::review_api::{self, PublishBody, ReviewContext};
use crate::http::{ApiError, Caller};
use crate::{Phase, Shared};

/// How long a host holds a report while it looks at it (a publication with re-run gates fits).
const REPORT_LEASE: Duration = Duration::from_secs(900);
/// Failures in a row before a report is closed.
const MAX_REPORT_FAILURES: u32 = 8;
/// The longest wait between tries.
const MAX_BACKOFF: Duration = Duration::from_secs(600);
/// The most attempts of a chain followed to its last one.
const MAX_CHAIN: usize = 64;
/// The commit status context.
const STATUS_CONTEXT: &str = "patch-candidate";

/// Why a look at a report stopped.
enum Next {
    /// Nothing more to do now: look again later.
    Wait,
    /// Done for good, with a short word or a code.
    Close(String),
}

/// A failed look: its code, and whether trying again may help.
struct Failure {
    code: String,
    retry: bool,
}

impl From<ApiError> for Failure {
    fn from(e: ApiError) -> Self {
        Self {
            code: e.code.to_owned(),
            retry: e.status.is_server_error(),
        }
    }
}

impl From<publish::PublishError> for Failure {
    fn from(e: publish::PublishError) -> Self {
        let retry = matches!(
            e,
            publish::PublishError::Forge { .. } | publish::PublishError::Unreachable { .. }
        );
        Self {
            code: e.code().to_owned(),
            retry,
        }
    }
}

impl From<jobs::JobsError> for Failure {
    fn from(e: jobs::JobsError) -> Self {
        Self {
            code: e.code().to_owned(),
            retry: e.is_environment(),
        }
    }
}

fn failure(code: &str) -> Failure {
    Failure {
        code: code.to_owned(),
        retry: false,
    }
}

/// The wait before the next try after `failures` failures in a row.
fn backoff(failures: u32) -> Duration {
    Duration::from_secs(2)
        .saturating_mul(1 << failures.min(12))
        .min(MAX_BACKOFF)
}

/// Works off the open reports until the drain begins.
pub(crate) async fn report_loop(sh: Arc<Shared>, mut phase: watch::Receiver<Phase>) {
    loop {
        if *phase.borrow() != Phase::Run {
            return;
        }
        match sh
            .store
            .claim_forge_report(&sh.opts.host_id, REPORT_LEASE)
            .await
        {
            Ok(Some(delivery)) => {
                look(&sh, delivery).await;
                continue;
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(code = e.code(), "forge report: claim failed"),
        }
        tokio::select! {
            () = tokio::time::sleep(sh.opts.poll_interval) => {}
            changed = phase.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
    }
}

/// One look at a held report, and how it is handed back.
async fn look(sh: &Arc<Shared>, delivery: ForgeDelivery) {
    let (forge, id, host) = (&delivery.forge, &delivery.delivery, &sh.opts.host_id);
    let result = match step(sh, &delivery).await {
        Ok(Next::Wait) => {
            sh.store
                .defer_forge_report(forge, id, host, sh.opts.poll_interval, false)
                .await
        }
        Ok(Next::Close(reason)) => {
            tracing::info!(forge = %forge, delivery = %id, reason = %reason, "forge report closed");
            sh.store.close_forge_report(forge, id, host, &reason).await
        }
        Err(f) if f.retry && delivery.report_failures + 1 < MAX_REPORT_FAILURES => {
            tracing::warn!(
                code = %f.code,
                forge = %forge,
                delivery = %id,
                failures = delivery.report_failures + 1,
                "forge report: trying again later"
            );
            sh.store
                .defer_forge_report(forge, id, host, backoff(delivery.report_failures), true)
                .await
        }
        Err(f) => {
            tracing::warn!(code = %f.code, forge = %forge, delivery = %id, "forge report closed on a failure");
            sh.store.close_forge_report(forge, id, host, &f.code).await
        }
    };
    if let Err(e) = result {
        tracing::warn!(
            code = e.code(),
            "forge report: handing the report back failed"
        );
    }
}

/// What one look works with.
struct Report<'a> {
    sh: &'a Arc<Shared>,
    delivery: &'a ForgeDelivery,
    trigger: Trigger,
    forge: ForgeConfig,
    reporting: Reporting,
    endpoint: publish::ForgeEndpoint,
    target: CommentTarget,
    calls: BTreeMap<String, serde_json::Value>,
}

impl Report<'_> {
    /// Makes `call` once: `make` runs only when it is not recorded yet, and its result is
    /// recorded. The recorded result (the first record stands).
    async fn once<F, Fut>(&mut self, call: &str, make: F) -> Result<serde_json::Value, Failure>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<serde_json::Value, Failure>>,
    {
        if let Some(done) = self.calls.get(call) {
            return Ok(done.clone());
        }
        let result = make().await?;
        let stored = self
            .sh
            .store
            .record_forge_call(
                &self.delivery.forge,
                &self.delivery.delivery,
                &self.sh.opts.host_id,
                call,
                &result,
            )
            .await?
            .ok_or_else(|| failure("PATCH_CANDIDATE_JOBS_CLAIM_LOST"))?;
        self.calls.insert(call.to_owned(), stored.result.clone());
        Ok(stored.result)
    }

    /// Posts `text` on the issue (or pull request) once, as `call`.
    async fn comment(&mut self, call: &str, text: String) -> Result<(), Failure> {
        let (endpoint, token, target) = (
            self.endpoint.clone(),
            self.reporting.token_file.clone(),
            self.target,
        );
        self.once(call, || async move {
            let id = publish::post_comment(&endpoint, &token, target, &text).await?;
            Ok(serde_json::json!({ "id": id.get() }))
        })
        .await
        .map(drop)
    }

    /// Sets a commit status once, as `call`.
    async fn status(
        &mut self,
        call: &str,
        commit: &str,
        state: publish::StatusState,
        description: &str,
        job: &JobId,
    ) -> Result<(), Failure> {
        let status = publish::CommitStatus {
            state,
            context: STATUS_CONTEXT.to_owned(),
            description: description.to_owned(),
            target_url: self.link(job),
        };
        let (endpoint, token, commit) = (
            self.endpoint.clone(),
            self.reporting.token_file.clone(),
            commit.to_owned(),
        );
        self.once(call, || async move {
            publish::set_commit_status(&endpoint, &token, &commit, &status).await?;
            Ok(serde_json::json!({ "commit": commit }))
        })
        .await
        .map(drop)
    }

    /// The review page of `job` on this service, when the operator gave its address.
    fn link(&self, job: &JobId) -> Option<String> {
        self.reporting
            .review_url
            .as_ref()
            .map(|u| format!("{u}/ui/jobs/{job}"))
    }

    fn review_line(&self, job: &JobId) -> String {
        self.link(job)
            .map_or_else(String::new, |l| format!("\nReview: {l}\n"))
    }
}

/// The last attempt of the chain `first` starts (its follow-ups, in order).
async fn last_attempt(sh: &Shared, first: &JobId) -> Result<jobs::Job, Failure> {
    let mut job = sh
        .store
        .get(first)
        .await?
        .ok_or_else(|| failure(jobs::NOT_FOUND_CODE))?;
    for _ in 0..MAX_CHAIN {
        match sh.store.later_attempt(&job.id).await? {
            Some(next) => job = next,
            None => break,
        }
    }
    Ok(job)
}

/// The required gates' verdicts of a review context, one line each.
fn gate_lines(context: &ReviewContext) -> String {
    let mut out = String::new();
    for gate in &context.facts.required_gates {
        let outcome = context
            .facts
            .gates
            .iter()
            .rev()
            .find(|g| &g.gate == gate)
            .map_or("missing", |g| g.outcome.as_str());
        let _ = writeln!(out, "- Gate `{gate}`: {outcome}");
    }
    if out.is_empty() {
        out.push_str("- No gate is required.\n");
    }
    out
}

/// Whether every required gate (at least one) passed on the candidate.
fn all_gates_passed(context: &ReviewContext) -> bool {
    let facts = &context.facts;
    !facts.required_gates.is_empty()
        && facts.required_gates.iter().all(|gate| {
            facts
                .gates
                .iter()
                .rev()
                .find(|g| &g.gate == gate)
                .is_some_and(|g| g.outcome == vocab::GateVerdict::Passed)
        })
}

/// Looks at one report: every step whose time has come.
async fn step(sh: &Arc<Shared>, delivery: &ForgeDelivery) -> Result<Next, Failure> {
    let Some(trigger) = delivery
        .trigger
        .clone()
        .and_then(|t| serde_json::from_value::<Trigger>(t).ok())
    else {
        return Ok(Next::Close("trigger_unreadable".to_owned()));
    };
    let Some(policy) = sh.policy() else {
        return Ok(Next::Close("no_policy".to_owned()));
    };
    let Some(forge) = policy.forge(&delivery.forge).cloned() else {
        return Ok(Next::Close("forge_gone".to_owned()));
    };
    let Some(reporting) = forge.reporting().cloned() else {
        return Ok(Next::Close("reporting_off".to_owned()));
    };
    let Some(job0) = delivery.job_id.clone() else {
        return Ok(Next::Close("no_job".to_owned()));
    };
    let project = ProjectPath::parse(forge.kind(), &trigger.project)
        .map_err(|_| failure("PATCH_CANDIDATE_FORGE_PAYLOAD"))?;
    let endpoint =
        publish::ForgeEndpoint::for_project(forge.kind(), &reporting.api_base, &project)?;
    let number = std::num::NonZeroU64::new(trigger.issue)
        .ok_or_else(|| failure("PATCH_CANDIDATE_FORGE_PAYLOAD"))?;
    let review_comment = trigger.kind == REVIEW_COMMENT;
    let target = if review_comment {
        CommentTarget::PullRequest(number)
    } else {
        CommentTarget::Issue(number)
    };
    let calls = sh
        .store
        .forge_calls(&delivery.forge, &delivery.delivery)
        .await?
        .into_iter()
        .map(|c| (c.call, c.result))
        .collect();
    let mut r = Report {
        sh,
        delivery,
        trigger,
        forge,
        reporting,
        endpoint,
        target,
        calls,
    };
    let queued = format!(
        "Job `{job0}` is queued for this {}, as principal `{}`.\n{}",
        if review_comment {
            "pull request's follow-up"
        } else {
            "issue"
        },
        r.trigger.principal,
        r.review_line(&job0)
    );
    r.comment("comment:queued", queued).await?;
    // A follow-up's progress shows on the pull request's head too (looked up until recorded).
    let pending = format!("status:pending:{job0}");
    if review_comment
        && !r.calls.contains_key(&pending)
        && let Some(pull) = sh
            .store
            .forge_pull(&delivery.forge, &r.trigger.project, r.trigger.issue)
            .await?
    {
        r.status(
            &pending,
            &pull.head,
            publish::StatusState::Pending,
            "A follow-up of this commit is queued",
            &job0,
        )
        .await?;
    }

    let job = last_attempt(sh, &job0).await?;
    match job.state {
        JobState::Queued | JobState::Running => return Ok(Next::Wait),
        JobState::Failed | JobState::Cancelled => {
            let code = job
                .last_error
                .as_ref()
                .map_or("none", |e| e.code.as_str())
                .to_owned();
            let text = format!(
                "Job `{}` ended {} ({code}); nothing is published.\n{}",
                job.id,
                job.state.as_str(),
                r.review_line(&job.id)
            );
            r.comment(&format!("comment:ended:{}", job.id), text)
                .await?;
            return Ok(Next::Close(format!("job_{}", job.state.as_str())));
        }
        JobState::Completed => {}
    }
    let context = review_api::review_context(sh, &job.id).await?;
    let digest = context.facts.candidate_digest;
    let ready = format!(
        "Candidate `{digest}` of job `{}` is ready for review.\n\n{}{}",
        job.id,
        gate_lines(&context),
        r.review_line(&job.id)
    );
    r.comment(&format!("comment:ready:{}", job.id), ready)
        .await?;
    let caller = Caller {
        principal: review::Principal::parse(&format!("forge-{}", r.forge.name()))
            .map_err(|_| failure("PATCH_CANDIDATE_SERVICE_FORGE_TRIGGER"))?,
        roles: jobs::Roles::from_list(&[jobs::Role::Review, jobs::Role::Publish])
            .map_err(|_| failure("PATCH_CANDIDATE_SERVICE_STATE"))?,
    };
    let context = match context.history.last().map(|d| d.record.decision) {
        None if r.reporting.auto_accept && all_gates_passed(&context) => {
            let request = review::DecisionRequest {
                candidate_digest: digest,
                decision: review::Decision::Accept,
                reason: None,
                force: false,
            };
            review_api::decide(sh, &job.id, &caller, &request).await?;
            review_api::review_context(sh, &job.id).await?
        }
        None | Some(review::Decision::Retry) => return Ok(Next::Wait),
        Some(review::Decision::Reject) => {
            let text = format!(
                "Candidate `{digest}` of job `{}` was rejected; nothing is published.\n",
                job.id
            );
            r.comment(&format!("comment:rejected:{}", job.id), text)
                .await?;
            return Ok(Next::Close("rejected".to_owned()));
        }
        Some(_) => context,
    };
    publish_and_open(&mut r, &job, &context, &caller).await
}

/// Publishes an accepted candidate (unless it is already), opens or finds the pull request,
/// sets the status and says so on the issue.
async fn publish_and_open(
    r: &mut Report<'_>,
    job: &jobs::Job,
    context: &ReviewContext,
    caller: &Caller,
) -> Result<Next, Failure> {
    let sh = r.sh;
    let digest = context.facts.candidate_digest;
    let base = r
        .forge
        .project(&r.trigger.project)
        .map(|t| t.base.clone())
        .ok_or_else(|| failure("PATCH_CANDIDATE_SERVICE_FORGE_TRIGGER"))?;
    let review_comment = r.trigger.kind == REVIEW_COMMENT;
    let pull = if review_comment {
        let Some(pull) = sh
            .store
            .forge_pull(&r.delivery.forge, &r.trigger.project, r.trigger.issue)
            .await?
        else {
            return Ok(Next::Close("pull_request_gone".to_owned()));
        };
        Some(pull)
    } else {
        None
    };
    let record = match context
        .publication
        .clone()
        .and_then(|v| serde_json::from_value::<publish::PublicationRecord>(v).ok())
    {
        Some(record) => record,
        None => {
            let (branch, extends) = match &pull {
                Some(p) => (p.branch.clone(), Some(p.head.clone())),
                None => {
                    let short = job.id.as_str().rsplit('_').next().unwrap_or_default();
                    (
                        format!(
                            "{}{}-{}-{}",
                            r.reporting.branch_prefix,
                            r.forge.name(),
                            r.trigger.issue,
                            short.get(..12).unwrap_or(short)
                        ),
                        None,
                    )
                }
            };
            let body = PublishBody {
                candidate_digest: digest.to_string(),
                branch,
                base: Some(base.clone()),
                rebase: extends.is_none(),
            };
            match review_api::publish_extending(sh, &job.id, caller, &body, extends).await {
                Ok(record) => record,
                Err(e) if e.code == "PATCH_CANDIDATE_PUBLISH_BRANCH_MOVED" => {
                    if let Some(p) = &pull {
                        r.status(
                            &format!("status:moved:{}", job.id),
                            &p.head,
                            publish::StatusState::Failure,
                            "Follow-up not pushed: the branch holds commits this service did not push",
                            &job.id,
                        )
                        .await?;
                    }
                    let text = format!(
                        "Candidate `{digest}` of job `{}` was not pushed: the branch holds commits this service did not push, and nothing is overwritten.\n",
                        job.id
                    );
                    r.comment(&format!("comment:moved:{}", job.id), text)
                        .await?;
                    return Ok(Next::Close("branch_moved".to_owned()));
                }
                // A refusal (a conflict on a moved base, a publication rule, …) is said on the
                // issue once; a failure of the moment is tried again.
                Err(e) if !e.status.is_server_error() => {
                    let code = e.code;
                    let text = format!(
                        "Candidate `{digest}` of job `{}` was accepted but not published ({code}).\n{}",
                        job.id,
                        r.review_line(&job.id)
                    );
                    r.comment(&format!("comment:unpublished:{}", job.id), text)
                        .await?;
                    return Ok(Next::Close(code.to_owned()));
                }
                Err(e) => return Err(e.into()),
            }
        }
    };
    let base_name = publish::BranchName::parse(&base)
        .map_err(|_| failure("PATCH_CANDIDATE_SERVICE_FORGE_TRIGGER"))?;
    let number = match pull {
        Some(p) => {
            let moved = jobs::ForgePull {
                job_id: job.id.clone(),
                head: record.commit_id.clone(),
                ..p.clone()
            };
            let stored = sh.store.set_forge_pull(&moved, Some(&p.head)).await?;
            if stored.head != record.commit_id {
                tracing::warn!(
                    forge = %r.delivery.forge,
                    number = p.number,
                    "forge report: the pull request's recorded head moved on meanwhile"
                );
            }
            p.number
        }
        None => {
            let (endpoint, token) = (r.endpoint.clone(), r.reporting.token_file.clone());
            let extra = format!(
                "- Job: `{}`\n{}\nResolves #{}\n{}",
                job.id,
                gate_lines(context),
                r.trigger.issue,
                r.review_line(&job.id)
            );
            let (rec, base_for_pr) = (record.clone(), base_name.clone());
            let opened = r
                .once("pull_request", || async move {
                    let found =
                        publish::find_pull_request(&endpoint, &token, &rec.branch, &base_for_pr)
                            .await?;
                    let pr = match found {
                        Some(pr) => pr,
                        None => {
                            publish::open_pull_request(
                                &endpoint,
                                &token,
                                &rec,
                                &base_for_pr,
                                &digest.to_string(),
                                &extra,
                            )
                            .await?
                        }
                    };
                    Ok(serde_json::json!({ "number": pr.number, "url": pr.url }))
                })
                .await?;
            let number = opened
                .get("number")
                .and_then(serde_json::Value::as_u64)
                .ok_or_else(|| failure("PATCH_CANDIDATE_JOBS_CORRUPT"))?;
            sh.store
                .set_forge_pull(
                    &jobs::ForgePull {
                        forge: r.delivery.forge.clone(),
                        project: r.trigger.project.clone(),
                        number,
                        job_id: job.id.clone(),
                        branch: record.branch.as_str().to_owned(),
                        head: record.commit_id.clone(),
                    },
                    None,
                )
                .await?;
            number
        }
    };
    r.status(
        &format!("status:{}", record.commit_id),
        &record.commit_id,
        publish::StatusState::Success,
        "Accepted; every required gate passed on this candidate",
        &job.id,
    )
    .await?;
    let text = if review_comment {
        format!(
            "Pushed commit `{}` to `{}` with candidate `{digest}` of job `{}`.\n{}",
            record.commit_id,
            record.branch.as_str(),
            job.id,
            r.review_line(&job.id)
        )
    } else {
        let url = r
            .calls
            .get("pull_request")
            .and_then(|v| v.get("url"))
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_owned();
        format!(
            "Published candidate `{digest}` of job `{}` as commit `{}` on `{}`: pull request #{number} {url}\n",
            job.id,
            record.commit_id,
            record.branch.as_str()
        )
    };
    r.comment(&format!("comment:published:{}", job.id), text)
        .await?;
    Ok(Next::Close("published".to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_ten_minutes() {
        assert_eq!(backoff(0), Duration::from_secs(2));
        assert_eq!(backoff(1), Duration::from_secs(4));
        assert_eq!(backoff(5), Duration::from_secs(64));
        assert_eq!(backoff(9), MAX_BACKOFF);
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
    }
}
