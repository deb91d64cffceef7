//! Review decisions, publications and named API tokens in the job store (schema version 4;
//! publication claims, version 5).
//!
//! Decisions are append-only (triggers refuse `UPDATE` and `DELETE` on both backends); each
//! belongs to a completed job and names that job's candidate digest, checked in the same
//! transaction that assigns its sequence number. Decisions and the publication of one job are
//! one serialised sequence: a publish first takes the job's publication claim (one live claim
//! per job, across hosts, while the last decision accepts the candidate), and the publication is
//! recorded, in one transaction, only with the current claim and while the last decision still
//! accepts that digest; once it is recorded, no decision is appended. The store keeps a decision's record bytes as
//! given (the review crate's `patch_candidate.review_decision.v1` JSON) and the few fields the
//! views and metrics need; it does not interpret the record.
//!
//! Tokens are stored as the SHA-256 of the token (hex), never the token; a name is unique for
//! ever (a revoked name is not reused, so every principal in a history means one token).

use serde::Serialize;

use crate::error::{JobsError, Result};
use vocab::{HostId, JobId};

/// The largest decision record, in bytes.
pub const MAX_DECISION_RECORD_BYTES: usize = 256 * 1024;
/// The largest publication record, in bytes.
pub const MAX_PUBLICATION_RECORD_BYTES: usize = 64 * 1024;
/// The principal of the first-start token; no named token may take it.
pub const OPERATOR_PRINCIPAL: &str = "operator";

/// One decision to append. Built only through [`DecisionRow::new`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DecisionRow {
    candidate_digest: String,
    decision: String,
    actor: String,
    forced: bool,
    at_ms: i64,
    #[serde(skip)]
    record: Vec<u8>,
}

impl DecisionRow {
    /// Checks one decision: `candidate_digest` a `sha256:` digest, `decision` one of `accept`,
    /// `reject`, `retry`, `actor` a principal name, `record` a JSON document of at most
    /// 256 KiB.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_INPUT` naming the field.
    pub fn new(
        candidate_digest: &str,
        decision: &str,
        actor: &str,
        forced: bool,
        at_ms: i64,
        record: Vec<u8>,
    ) -> Result<Self> {
        if !vocab::is_typed_sha256(candidate_digest) {
            return Err(JobsError::input(
                "candidate_digest",
                "must be sha256: and 64 lowercase hex digits",
            ));
        }
        if !matches!(decision, "accept" | "reject" | "retry") {
            return Err(JobsError::input(
                "decision",
                "must be accept, reject or retry",
            ));
        }
        if !crate::access::is_principal(actor) {
            return Err(JobsError::input(
                "actor",
                "must be 1-64 of A-Z a-z 0-9 . _ @ -, starting with a letter or digit",
            ));
        }
        if forced && decision != "accept" {
            return Err(JobsError::input("forced", "only an accept can be forced"));
        }
        if record.is_empty() || record.len() > MAX_DECISION_RECORD_BYTES {
            return Err(JobsError::input("record", "must be 1..=262144 bytes"));
        }
        if serde_json::from_slice::<serde::de::IgnoredAny>(&record).is_err() {
            return Err(JobsError::input("record", "not a JSON document"));
        }
        Ok(Self {
            candidate_digest: candidate_digest.to_owned(),
            decision: decision.to_owned(),
            actor: actor.to_owned(),
            forced,
            at_ms,
            record,
        })
    }

    #[must_use]
    pub fn candidate_digest(&self) -> &str {
        &self.candidate_digest
    }

    #[must_use]
    pub fn decision(&self) -> &str {
        &self.decision
    }

    #[must_use]
    pub fn actor(&self) -> &str {
        &self.actor
    }

    #[must_use]
    pub fn forced(&self) -> bool {
        self.forced
    }

    #[must_use]
    pub fn at_ms(&self) -> i64 {
        self.at_ms
    }

    /// The decision record, byte for byte.
    #[must_use]
    pub fn record(&self) -> &[u8] {
        &self.record
    }
}

/// A decision as stored: its row, its place in the job's history, and the follow-up job a
/// retry queued.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StoredDecisionRow {
    pub job_id: JobId,
    pub seq: i64,
    #[serde(flatten)]
    pub row: DecisionRow,
    pub follow_up_job_id: Option<JobId>,
}

impl StoredDecisionRow {
    #[allow(
        clippy::too_many_arguments,
        reason = "one stored row, column by column"
    )]
    pub(crate) fn from_row(
        job_id: &str,
        seq: i64,
        candidate_digest: &str,
        decision: &str,
        actor: &str,
        forced: bool,
        at_ms: i64,
        record: Vec<u8>,
        follow_up: Option<&str>,
    ) -> Result<Self> {
        let corrupt = |field| JobsError::Corrupt { field };
        Ok(Self {
            job_id: JobId::parse(job_id).map_err(|_| corrupt("review_decisions.job_id"))?,
            seq,
            row: DecisionRow::new(candidate_digest, decision, actor, forced, at_ms, record)
                .map_err(|_| corrupt("review_decisions"))?,
            follow_up_job_id: follow_up
                .map(JobId::parse)
                .transpose()
                .map_err(|_| corrupt("review_decisions.follow_up_job_id"))?,
        })
    }
}

/// A decision's job (its state and candidate digest as read, `None` when there is no such job):
/// completed, with the candidate the decision names.
pub(crate) fn check_target(
    id: &JobId,
    found: Option<(String, Option<String>)>,
    row: &DecisionRow,
) -> Result<()> {
    let Some((state, digest)) = found else {
        return Err(JobsError::NotFound { id: id.to_string() });
    };
    let digest = digest.as_deref();
    if state != "completed" {
        return Err(JobsError::State {
            id: id.to_string(),
            state: crate::model::JobState::parse(&state).map_or("other", |s| s.as_str()),
            detail: "only a completed job's candidate takes review decisions",
        });
    }
    if digest != Some(row.candidate_digest()) {
        return Err(JobsError::State {
            id: id.to_string(),
            state: "completed",
            detail: "the decision names another candidate digest than the job's",
        });
    }
    Ok(())
}

/// The longest branch name a publication claim names.
pub const MAX_CLAIM_BRANCH_BYTES: usize = 200;
/// The longest lease of a publication claim.
pub const MAX_CLAIM_LEASE: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// A held publication claim: the fencing token of one publish of one job's candidate. Only the
/// store makes one ([`crate::JobStore::claim_publication`]); the publication is recorded only
/// with the claim that is current when the push's outcome is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublicationClaim {
    job_id: JobId,
    candidate_digest: String,
    token: String,
    holder: HostId,
    branch: String,
}

impl PublicationClaim {
    pub(crate) fn new(
        job_id: JobId,
        candidate_digest: String,
        holder: HostId,
        branch: String,
    ) -> Result<Self> {
        let mut bytes = [0_u8; 16];
        getrandom::fill(&mut bytes).map_err(|e| JobsError::Io {
            what: "random claim token",
            detail: e.to_string(),
        })?;
        Ok(Self {
            job_id,
            candidate_digest,
            token: hex::encode(bytes),
            holder,
            branch,
        })
    }

    /// The job whose candidate is being published.
    #[must_use]
    pub fn job_id(&self) -> &JobId {
        &self.job_id
    }

    /// The candidate digest the claim was taken for.
    #[must_use]
    pub fn candidate_digest(&self) -> &str {
        &self.candidate_digest
    }

    /// The host holding the claim.
    #[must_use]
    pub fn holder(&self) -> &HostId {
        &self.holder
    }

    /// The branch this publish creates.
    #[must_use]
    pub fn branch(&self) -> &str {
        &self.branch
    }

    pub(crate) fn token(&self) -> &str {
        &self.token
    }
}

/// Checks the branch a claim names: 1..=200 bytes, no control characters (the service passes a
/// name its branch check accepted; this keeps the stored text printable).
pub(crate) fn check_claim_branch(branch: &str) -> Result<()> {
    if branch.is_empty()
        || branch.len() > MAX_CLAIM_BRANCH_BYTES
        || branch.chars().any(char::is_control)
    {
        return Err(JobsError::input(
            "branch",
            "must be 1..=200 bytes without control characters",
        ));
    }
    Ok(())
}

/// What a publication step reads of one job, in the transaction that then writes.
pub(crate) struct PublishFacts {
    /// The job's state and candidate digest; `None`: no such job.
    pub job: Option<(String, Option<String>)>,
    pub published: bool,
    /// The last decision and the digest it names.
    pub last: Option<(String, String)>,
}

impl PublishFacts {
    /// The job holds `digest`, is not published, and its last decision accepts `digest`.
    pub(crate) fn check(&self, id: &JobId, digest: &str) -> Result<()> {
        let Some((state, held)) = &self.job else {
            return Err(JobsError::NotFound { id: id.to_string() });
        };
        if state != "completed" || held.as_deref() != Some(digest) {
            return Err(JobsError::State {
                id: id.to_string(),
                state: crate::model::JobState::parse(state).map_or("other", |s| s.as_str()),
                detail: "no completed job with this candidate digest",
            });
        }
        if self.published {
            return Err(JobsError::Published { id: id.to_string() });
        }
        match &self.last {
            Some((decision, named)) if decision == "accept" && named == digest => Ok(()),
            _ => Err(JobsError::NotAccepted { id: id.to_string() }),
        }
    }

    /// Recording a publication: the job is not published yet.
    pub(crate) fn check_unpublished(&self, id: &JobId) -> Result<()> {
        if self.published {
            return Err(JobsError::Published { id: id.to_string() });
        }
        Ok(())
    }

    /// Recording a publication: the claim is still `held`, then [`PublishFacts::check`].
    pub(crate) fn check_held(&self, id: &JobId, held: bool, digest: &str) -> Result<()> {
        if !held {
            return Err(JobsError::ClaimLost { id: id.to_string() });
        }
        self.check(id, digest)
    }
}

/// Checks a publication record: a JSON object of at most 64 KiB.
pub(crate) fn check_publication(record: &[u8]) -> Result<()> {
    if record.len() > MAX_PUBLICATION_RECORD_BYTES {
        return Err(JobsError::input("publication", "larger than 64 KiB"));
    }
    match serde_json::from_slice::<serde_json::Value>(record) {
        Ok(v) if v.is_object() => Ok(()),
        _ => Err(JobsError::input("publication", "not a JSON object")),
    }
}

/// A named API token's name: a principal, never `operator` (the first-start token's).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct TokenName(String);

impl TokenName {
    /// Checks a token name.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_INPUT`.
    pub fn parse(text: &str) -> Result<Self> {
        if !crate::access::is_principal(text) {
            return Err(JobsError::input(
                "token name",
                "must be 1-64 of A-Z a-z 0-9 . _ @ -, starting with a letter or digit",
            ));
        }
        if text.eq_ignore_ascii_case(OPERATOR_PRINCIPAL) {
            return Err(JobsError::input(
                "token name",
                "operator is the first-start token's principal",
            ));
        }
        Ok(Self(text.to_owned()))
    }

    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The SHA-256 of a token, as 64 lowercase hex digits (what the store keeps).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenHash(String);

impl TokenHash {
    /// Checks a token hash.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_INPUT`.
    pub fn parse(hex_text: &str) -> Result<Self> {
        if hex_text.len() != 64 || !hex_text.bytes().all(vocab::is_lower_hex) {
            return Err(JobsError::input(
                "token hash",
                "must be 64 lowercase hex digits",
            ));
        }
        Ok(Self(hex_text.to_owned()))
    }

    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The audit entry of decision `row`, number `seq` of job `id`.
pub(crate) fn decision_act(
    id: &vocab::JobId,
    row: &DecisionRow,
    seq: i64,
) -> Result<crate::access::NewAuditEntry> {
    crate::access::NewAuditEntry::new(
        row.actor(),
        crate::access::AuditAct::of_decision(row.decision(), row.forced())?,
        id.as_str(),
        format!("{} seq {seq}", row.candidate_digest()),
    )
}

/// A named token as listed (never its hash).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TokenInfo {
    pub name: String,
    pub created_at_ms: i64,
    pub revoked_at_ms: Option<i64>,
    pub roles: crate::access::Roles,
    /// The token predates roles (schema version 7) and was migrated to every role; false once
    /// its roles are set (`tokens roles`).
    pub roles_migrated: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_and_names_are_checked_before_storage() {
        let d = format!("sha256:{}", "a".repeat(64));
        assert!(DecisionRow::new(&d, "accept", "alice", true, 1, b"{}".to_vec()).is_ok());
        for (digest, decision, actor, forced, record) in [
            ("sha256:x", "accept", "alice", false, b"{}".to_vec()),
            (d.as_str(), "merge", "alice", false, b"{}".to_vec()),
            (d.as_str(), "accept", "a b", false, b"{}".to_vec()),
            (d.as_str(), "reject", "alice", true, b"{}".to_vec()),
            (d.as_str(), "accept", "alice", false, b"{".to_vec()),
            (d.as_str(), "accept", "alice", false, Vec::new()),
        ] {
            let e = DecisionRow::new(digest, decision, actor, forced, 1, record).unwrap_err();
            assert_eq!(e.code(), "PATCH_CANDIDATE_JOBS_INPUT");
        }
        assert!(TokenName::parse("ci-bot").is_ok());
        for bad in ["", "operator", "Operator", "a/b", &"a".repeat(65)] {
            assert!(TokenName::parse(bad).is_err(), "{bad}");
        }
        assert!(TokenHash::parse(&"0".repeat(64)).is_ok());
        assert!(TokenHash::parse(&"A".repeat(64)).is_err());
        assert!(check_publication(br#"{"branch":"b"}"#).is_ok());
        assert!(check_publication(b"[]").is_err());
    }
}
