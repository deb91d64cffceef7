//! The JSON views of jobs and of their review.

use jobs::Job;
use vocab::JobId;

/// The public view of a job (no approval bytes; `spec` is the store's serialised spec).
pub fn job_view(job: &Job) -> serde_json::Value {
    serde_json::json!({
        "id": job.id.as_str(),
        "state": job.state.as_str(),
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "run_at_ms": job.run_at_ms,
        "created_at_ms": job.created_at_ms,
        "updated_at_ms": job.updated_at_ms,
        "attempt_id": job.attempt_id.as_ref().map(vocab::AttemptId::as_str),
        "host": job.host.as_ref().map(vocab::HostId::as_str),
        "lease_until_ms": job.lease_until_ms,
        "cancel_requested": job.cancel_requested,
        "last_error": job.last_error.as_ref().map(|f| serde_json::json!({"code": f.code, "message": f.message})),
        "candidate_digest": job.candidate_digest,
        "chain": chain_view(job),
        "spec": job.spec,
    })
}

/// A job's place in its chain of follow-ups: `round` (0 for a first turn or a reviewer's retry),
/// the job and candidate it continues, the chain's bounds and the tokens spent before it; `null`
/// for a job that is neither a follow-up nor allowed any.
fn chain_view(job: &Job) -> serde_json::Value {
    let (follow_up, policy) = (job.spec.follow_up.as_ref(), job.spec.follow_ups);
    if follow_up.is_none() && policy.is_none() {
        return serde_json::Value::Null;
    }
    serde_json::json!({
        "round": follow_up.map_or(0, |f| f.round),
        "continues_job": follow_up.map(|f| f.supersedes_job.as_str()),
        "continues_candidate": follow_up.map(|f| f.supersedes_candidate.as_str()),
        "chain_tokens": follow_up.map_or(0, |f| f.chain_tokens),
        "max_follow_ups": policy.map_or(0, |p| p.max_follow_ups),
        "token_budget": policy.and_then(|p| p.token_budget),
    })
}

/// [`job_view`] with the job's gate results (`gates`: name, outcome, evidence digest, wall time;
/// the evidence documents themselves stay in the store).
pub fn job_view_with_gates(job: &Job, evidence: &[jobs::EvidenceDocument]) -> serde_json::Value {
    let mut view = job_view(job);
    if let Some(map) = view.as_object_mut() {
        let gates: Vec<serde_json::Value> = evidence
            .iter()
            .map(|d| {
                serde_json::json!({
                    "gate": d.gate(),
                    "outcome": d.outcome().as_str(),
                    "evidence_digest": d.digest(),
                    "wall_ms": d.wall_ms(),
                })
            })
            .collect();
        map.insert("gates".to_owned(), serde_json::Value::Array(gates));
    }
    view
}

/// The review part of a job view: the state (the last decision wins), the number of decisions, whether
/// one was forced, the follow-up jobs retries queued (each once, oldest first), the later
/// attempt (`superseded_by`, from [`jobs::JobStore::later_attempt`]) and the publication
/// record.
pub fn review_summary(
    decisions: &[jobs::StoredDecisionRow],
    publication: Option<&[u8]>,
    later: Option<&JobId>,
) -> serde_json::Value {
    let superseded_by = later.filter(|_| publication.is_none());
    let state = match decisions.last().map(|d| d.row.decision()) {
        None => "pending",
        Some("accept") => "accepted",
        Some("reject") => "rejected",
        Some(_) => "retry_requested",
    };
    serde_json::json!({
        "state": state,
        "superseded_by": superseded_by.map(JobId::as_str),
        "decisions": decisions.len(),
        "forced": decisions.iter().any(|d| d.row.forced()),
        "follow_up_jobs": decisions
            .iter()
            .filter_map(|d| d.follow_up_job_id.as_ref().map(JobId::as_str))
            .fold(Vec::new(), |mut seen, id| {
                if !seen.contains(&id) {
                    seen.push(id);
                }
                seen
            }),
        "publication": publication.and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok()),
    })
}
