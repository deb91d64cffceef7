//! From a verified forge delivery to a job.
//!
//! [`accept`] runs in the webhook request: the delivery is parsed and judged against the forge's
//! entry in the repository policy, with no store access, then recorded (a redelivery answers
//! with what was recorded and changes nothing). A trigger is a label or a command word, from a
//! forge user the policy maps to a principal, on a project the policy has a template for.
//! Anything else is recorded as ignored with a reason. A trigger is recorded as queued with a
//! small trigger document (never the payload) and a subject key, so the forge hears back within
//! milliseconds and a replay under another delivery id is a duplicate too.
//!
//! [`intake_loop`] (one per host) works the queued deliveries off under a lease: it checks that
//! the principal's live token has the `submit` role (else the delivery is refused), fetches the
//! project's base branch, pins its tip in the delivery's row (first host wins, so a retry builds
//! the same job), writes the approval from the template ([`snapshot::approval_document`]) and
//! submits the job through the same checks as `POST /v1/jobs` (repository policy, quotas,
//! gates), as the mapped principal. The issue's text is the task: untrusted, bounded by the
//! forge crate, with every line the content policy flags withheld; it widens nothing.

use std::sync::Arc;
use std::time::Duration;

use forge::{CommentTarget, Delivery, ForgeEvent};
use jobs::{DeliveryOutcome, DeliveryState, ForgeDelivery, NewForgeDelivery};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::forge_policy::{ForgeConfig, ProjectTemplate};
use crate::{Locator, Phase, ServiceError, Shared, Submission};

/// How long a host holds a queued delivery (a fetch and a snapshot fit well inside).
const INTAKE_LEASE: Duration = Duration::from_secs(600);
/// Attempts at a delivery whose failure is the environment's (repository unreachable, store
/// away) before it is refused.
const MAX_INTAKE_ATTEMPTS: u32 = 5;
/// The trigger kind of a command on one of our pull requests: a follow-up of the job whose
/// publication it shows, published as a new commit on the same branch.
pub(crate) const REVIEW_COMMENT: &str = "review_comment";
/// `execution_strategy_id` of approvals written for forge triggers.
const STRATEGY: &str = "patch-candidate.forge-trigger";
/// Identity digests nothing computes for a forge trigger.
const NOT_COMPUTED: &str = "not-computed:patch-candidate-forge";

/// What a queued delivery's job is built from: host-checked values only (also what its report
/// back to the forge reads).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Trigger {
    /// `label`, `comment` (on an issue) or [`REVIEW_COMMENT`] (on one of our pull requests).
    pub kind: String,
    /// The forge's project path (a key of the forge's templates).
    pub project: String,
    /// The issue's number on the forge (for a review comment: the pull request's).
    pub issue: u64,
    /// The forge login that triggered it.
    pub sender: String,
    /// The principal the policy maps it to.
    pub principal: String,
    /// The task: the issue's title and body, or the comment after the command word, with the
    /// lines the content policy flags withheld.
    pub task: String,
}

/// What the policy makes of a parsed event.
#[derive(Debug, PartialEq, Eq)]
enum Decision {
    Ignore(&'static str),
    Queue { subject: String, trigger: Trigger },
}

/// The subject key of a trigger: SHA-256 over its length-prefixed parts.
fn subject(parts: &[&str]) -> String {
    let mut bytes = Vec::new();
    for p in parts {
        bytes.extend_from_slice(&(p.len() as u64).to_be_bytes());
        bytes.extend_from_slice(p.as_bytes());
    }
    vocab::sha256_bare_hex(&bytes)
}

/// The command's argument when `text` starts with `command` as a whole word.
fn after_command<'a>(text: &'a str, command: &str) -> Option<&'a str> {
    let rest = text.trim_start().strip_prefix(command)?;
    match rest.chars().next() {
        None => Some(""),
        Some(c) if c.is_whitespace() => Some(rest.trim()),
        Some(_) => None,
    }
}

/// Judges an event against the forge's policy entry (no store access: the principal's role is
/// checked when the job is built).
fn decide(forge: &ForgeConfig, event: ForgeEvent) -> Result<Decision, ServiceError> {
    let (repository, issue, sender, kind, text, subject_key) = match event {
        ForgeEvent::IssueLabeled {
            repository,
            issue,
            labels_added,
            sender,
        } => {
            let Some(label) = forge.label() else {
                return Ok(Decision::Ignore("labels_not_used"));
            };
            if !labels_added.iter().any(|l| l == label) {
                return Ok(Decision::Ignore("other_label"));
            }
            let key = subject(&[
                "label",
                repository.path.as_str(),
                &issue.number.to_string(),
                label,
            ]);
            let text = if issue.body.trim().is_empty() {
                issue.title.clone()
            } else {
                format!("{}\n\n{}", issue.title, issue.body)
            };
            (repository, issue.number.get(), sender, "label", text, key)
        }
        ForgeEvent::Comment {
            repository,
            target,
            comment_id,
            body,
            sender,
        } => {
            let (number, kind) = match target {
                CommentTarget::Issue(n) => (n, "comment"),
                // A comment on a pull request continues the work of the job whose publication
                // the pull request shows (checked when the job is built: ours or refused).
                CommentTarget::PullRequest(n) => (n, REVIEW_COMMENT),
            };
            let Some(command) = forge.command() else {
                return Ok(Decision::Ignore("commands_not_used"));
            };
            let Some(argument) = after_command(&body, command) else {
                return Ok(Decision::Ignore("no_command"));
            };
            if argument.is_empty() {
                return Ok(Decision::Ignore("empty_command"));
            }
            let key = subject(&["comment", repository.path.as_str(), &comment_id.to_string()]);
            (
                repository,
                number.get(),
                sender,
                kind,
                argument.to_owned(),
                key,
            )
        }
        _ => return Ok(Decision::Ignore("event")),
    };
    let Some(principal) = forge.principal_of(&sender) else {
        return Ok(Decision::Ignore("unmapped_user"));
    };
    if forge.project(repository.path.as_str()).is_none() {
        return Ok(Decision::Ignore("no_project"));
    }
    // The content policy: lines that hold a secret, hidden text or an escape never reach the
    // agent, the job store or a log.
    let task = policy::withhold_flagged_lines(&text)
        .map_err(|_| ServiceError::ForgeTrigger {
            detail: "the content policy cannot run",
        })?
        .text;
    Ok(Decision::Queue {
        subject: subject_key,
        trigger: Trigger {
            kind: kind.to_owned(),
            project: repository.path.as_str().to_owned(),
            issue,
            sender: sender.as_str().to_owned(),
            principal: principal.to_owned(),
            task,
        },
    })
}

/// Whether `principal` names a live token with `role`.
async fn holds(sh: &Shared, principal: &str, role: jobs::Role) -> Result<bool, ServiceError> {
    Ok(sh
        .store
        .tokens()
        .await?
        .iter()
        .any(|t| t.name == principal && t.revoked_at_ms.is_none() && t.roles.contains(role)))
}

/// Records a verified delivery: the stored row and whether this call recorded it.
///
/// # Errors
/// `PATCH_CANDIDATE_FORGE_PAYLOAD` for a body outside the forge's documented shape (nothing is
/// recorded, so a fixed redelivery is judged afresh); store errors.
pub(crate) async fn accept(
    sh: &Shared,
    forge: &ForgeConfig,
    delivery: &Delivery,
    body: &[u8],
) -> Result<(ForgeDelivery, bool), ServiceError> {
    // No lookup first: the insert below is the dedupe (a known delivery id or subject inserts
    // nothing and returns the recorded row), and a new delivery, the common case, costs one
    // round trip less.
    let decision = match forge::parse_event(delivery, body)? {
        None => Decision::Ignore("event"),
        Some(event) => decide(forge, event)?,
    };
    let new = match decision {
        Decision::Ignore(reason) => NewForgeDelivery {
            forge: forge.name().to_owned(),
            delivery: delivery.id.as_str().to_owned(),
            state: DeliveryState::Ignored,
            reason: reason.to_owned(),
            subject: None,
            trigger: None,
        },
        Decision::Queue { subject, trigger } => NewForgeDelivery {
            forge: forge.name().to_owned(),
            delivery: delivery.id.as_str().to_owned(),
            state: DeliveryState::Queued,
            reason: trigger.kind.clone(),
            subject: Some(subject),
            trigger: Some(serde_json::to_value(&trigger).map_err(|_| {
                ServiceError::ForgeTrigger {
                    detail: "the trigger cannot be encoded",
                }
            })?),
        },
    };
    let (row, created) = sh.store.record_forge_delivery(new).await?;
    if created && row.state == DeliveryState::Queued {
        sh.forge_wake.notify_one();
    }
    Ok((row, created))
}

/// Works off queued deliveries until the drain begins: one at a time, each under a lease.
pub(crate) async fn intake_loop(sh: Arc<Shared>, mut phase: watch::Receiver<Phase>) {
    loop {
        if *phase.borrow() != Phase::Run {
            return;
        }
        match sh
            .store
            .claim_forge_delivery(&sh.opts.host_id, INTAKE_LEASE)
            .await
        {
            Ok(Some(delivery)) => {
                work(&sh, delivery).await;
                continue;
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(code = e.code(), "forge intake: claim failed"),
        }
        tokio::select! {
            () = tokio::time::sleep(sh.opts.poll_interval) => {}
            () = sh.forge_wake.notified() => {}
            changed = phase.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
    }
}

/// Builds and submits one delivery's job, then records how it ended. An environment failure
/// (repository unreachable, store away) leaves the delivery to its lease's end and another try,
/// up to [`MAX_INTAKE_ATTEMPTS`].
async fn work(sh: &Shared, delivery: ForgeDelivery) {
    use vocab::Coded as _;
    let built = build_job(sh, &delivery).await;
    let outcome = match built {
        Ok(job) => DeliveryOutcome::Submitted(job),
        Err(e)
            if e.class() == vocab::FailureClass::Environment
                && delivery.attempts < MAX_INTAKE_ATTEMPTS =>
        {
            tracing::warn!(
                code = e.code(),
                forge = %delivery.forge,
                delivery = %delivery.delivery,
                attempts = delivery.attempts,
                "forge intake: the job cannot be built now; trying again after the lease"
            );
            return;
        }
        Err(e) => DeliveryOutcome::Refused {
            code: e.code().to_owned(),
        },
    };
    let finished = sh
        .store
        .finish_forge_delivery(
            &delivery.forge,
            &delivery.delivery,
            &sh.opts.host_id,
            outcome.clone(),
        )
        .await;
    match (finished, outcome) {
        (Ok(jobs::Fenced::Applied), DeliveryOutcome::Submitted(job)) => tracing::info!(
            code = "PATCH_CANDIDATE_JOB_SUBMITTED",
            forge = %delivery.forge,
            delivery = %delivery.delivery,
            job = %job,
            "forge trigger queued a job"
        ),
        (Ok(jobs::Fenced::Applied), DeliveryOutcome::Refused { code }) => tracing::warn!(
            code = %code,
            forge = %delivery.forge,
            delivery = %delivery.delivery,
            "forge trigger refused"
        ),
        (Ok(_), _) => tracing::info!(
            forge = %delivery.forge,
            delivery = %delivery.delivery,
            "forge intake: the delivery was taken over by another host"
        ),
        (Err(e), _) => tracing::warn!(code = e.code(), "forge intake: finish failed"),
    }
}

fn trigger_error(detail: &'static str) -> ServiceError {
    ServiceError::ForgeTrigger { detail }
}

/// The job of a queued delivery, submitted (an existing one when a previous attempt submitted
/// it: the same pinned base gives the same approval and so the same idempotency key).
async fn build_job(sh: &Shared, delivery: &ForgeDelivery) -> Result<vocab::JobId, ServiceError> {
    let trigger: Trigger = delivery
        .trigger
        .clone()
        .and_then(|t| serde_json::from_value(t).ok())
        .ok_or_else(|| trigger_error("the delivery's trigger document is unreadable"))?;
    // The mapped principal must hold `submit` now, when its job is built (a revoked token or a
    // lost role refuses the delivery); a comment on a pull request is a reviewer's retry and
    // needs `review`.
    let role = if trigger.kind == REVIEW_COMMENT {
        jobs::Role::Review
    } else {
        jobs::Role::Submit
    };
    if !holds(sh, &trigger.principal, role).await? {
        return Err(ServiceError::Forbidden { role });
    }
    if trigger.kind == REVIEW_COMMENT {
        return build_follow_up(sh, delivery, &trigger).await;
    }
    let policy = sh
        .policy()
        .ok_or_else(|| trigger_error("no repository policy is in force"))?;
    let forge = policy
        .forge(&delivery.forge)
        .ok_or_else(|| trigger_error("the forge is no longer in the repository policy"))?;
    let template = forge
        .project(&trigger.project)
        .ok_or_else(|| trigger_error("the project is no longer in the repository policy"))?;
    let locator = Locator::parse(&template.repository)?;
    let base = publish::BranchName::parse(&template.base)
        .map_err(|_| trigger_error("the project's base is not a branch name"))?;
    let (mirror, tip) = sh.mirrors.fetch_branch(&locator, &base).await?;
    let commit = sh
        .store
        .pin_forge_base(&delivery.forge, &delivery.delivery, &sh.opts.host_id, &tip)
        .await?
        .ok_or_else(|| trigger_error("another host took the delivery over"))?;
    let mirror = if commit == tip {
        mirror
    } else {
        sh.mirrors.ensure(&locator, &commit).await?
    };
    let ids = Ids::of(forge, delivery, &trigger, policy.digest());
    let approval = {
        let (template, trigger, commit) = (template.clone(), trigger.clone(), commit.clone());
        tokio::task::spawn_blocking(move || approval(&mirror, &commit, &template, &trigger, &ids))
            .await
            .map_err(|_| trigger_error("the approval could not be written"))??
    };
    let sub = Submission {
        repository: locator.as_str().to_owned(),
        approval,
        commit: Some(commit),
        task: Some(trigger.task.clone()),
        image: None,
        image_id: None,
        files: Vec::new(),
        read_only: Vec::new(),
        policy: None,
        runtime: None,
        max_wall_seconds: template.max_wall_seconds,
        max_archive_bytes: None,
        max_attempts: template.max_attempts,
        live: None,
    };
    sh.check_quota(
        &policy,
        &trigger.principal,
        locator.as_str(),
        "submit",
        None,
    )
    .await?;
    let mut spec = crate::prepare(
        sub,
        &sh.opts.state_dir,
        &sh.mirrors,
        sh.opts.gates.as_deref(),
        Some(&policy),
    )
    .await?;
    spec.follow_ups = sh.opts.follow_ups;
    spec.submitted_by = Some(trigger.principal.clone());
    let (job, _) = sh.store.submit(spec).await?;
    sh.wake.notify_one();
    Ok(job.id)
}

/// The follow-up a command on one of our pull requests queues: the job whose publication the
/// pull request's branch holds, continued from its candidate with the comment as the
/// reviewer's note, under the same approval (so the same scope), as the mapped principal.
async fn build_follow_up(
    sh: &Shared,
    delivery: &ForgeDelivery,
    trigger: &Trigger,
) -> Result<vocab::JobId, ServiceError> {
    let policy = sh
        .policy()
        .ok_or_else(|| trigger_error("no repository policy is in force"))?;
    let pull = sh
        .store
        .forge_pull(&delivery.forge, &trigger.project, trigger.issue)
        .await?
        .ok_or_else(|| trigger_error("the pull request is not one this service opened"))?;
    let parent = sh
        .store
        .get(&pull.job_id)
        .await?
        .ok_or_else(|| trigger_error("the pull request's job is gone"))?;
    let digest: vocab::Sha256 = parent
        .candidate_digest
        .as_deref()
        .and_then(|d| d.parse().ok())
        .ok_or_else(|| trigger_error("the pull request's job has no candidate"))?;
    sh.check_quota(
        &policy,
        &trigger.principal,
        &parent.spec.repository,
        "submit",
        None,
    )
    .await?;
    let mut spec =
        crate::submission::follow_up_spec(&parent, &digest, Some(&trigger.task), Vec::new())?;
    spec.submitted_by = Some(trigger.principal.clone());
    let (job, _) = sh.store.submit(spec).await?;
    sh.wake.notify_one();
    Ok(job.id)
}

/// The approval's ids and host-owned rationale, all derived from the delivery (so a retry
/// writes the same approval).
struct Ids {
    /// The approval's `handoff_id` and `request_id`: the forge and its delivery id.
    delivery: String,
    plan: String,
    app: String,
    rationale: String,
}

impl Ids {
    fn of(
        forge: &ForgeConfig,
        delivery: &ForgeDelivery,
        trigger: &Trigger,
        policy: &vocab::Sha256,
    ) -> Self {
        let name = forge.name();
        Self {
            delivery: format!("forge-{name}-{}", delivery.delivery),
            plan: format!("forge-{name}-issue-{}", trigger.issue),
            app: format!("forge-{name}"),
            rationale: format!(
                "Started from {} issue {} of {} ({} by forge user {}, principal {}) under repository policy {policy}.",
                forge.kind().as_str(),
                trigger.issue,
                trigger.project,
                trigger.kind,
                trigger.sender,
                trigger.principal,
            ),
        }
    }
}

/// Writes the approval of the template's scopes at `commit` of the mirror: its JSON text.
fn approval(
    mirror: &std::path::Path,
    commit: &str,
    template: &ProjectTemplate,
    trigger: &Trigger,
    ids: &Ids,
) -> Result<String, ServiceError> {
    let snap = snapshot::GitSnapshot::load(mirror, commit)?;
    let grants = snapshot::Grants::check(
        &snapshot::GrantInput {
            allow: &template.allowed_paths,
            read_only: &template.read_only_paths,
            prohibit: &template.prohibited_paths,
            create: &template.create_paths,
            delete: &template.delete_paths,
        },
        &snap,
    )?;
    let document = snapshot::approval_document(
        &snap,
        &grants,
        &snapshot::ApprovalFields {
            handoff_id: &ids.delivery,
            request_id: &ids.delivery,
            plan_id: &ids.plan,
            app_id: &ids.app,
            build_registry_id: "patch-candidate",
            repository_full_name: &trigger.project,
            task: &trigger.task,
            strategy: STRATEGY,
            not_computed: NOT_COMPUTED,
            rationale: &ids.rationale,
            gates: &template.required_gates,
        },
    );
    let context = snapshot::context_from_value(document)?;
    serde_json::to_string(&context).map_err(|_| trigger_error("the approval cannot be encoded"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_is_a_whole_leading_word() {
        assert_eq!(after_command("/agent fix it", "/agent"), Some("fix it"));
        assert_eq!(
            after_command("  /agent\n fix it \n", "/agent"),
            Some("fix it")
        );
        assert_eq!(after_command("/agent", "/agent"), Some(""));
        assert_eq!(after_command("/agents fix", "/agent"), None);
        assert_eq!(after_command("please /agent fix", "/agent"), None);
    }

    #[test]
    fn subjects_are_length_prefixed() {
        assert_ne!(subject(&["ab", "c"]), subject(&["a", "bc"]));
        assert_eq!(subject(&["x"]).len(), 64);
    }
}
