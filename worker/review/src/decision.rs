//! Decisions (`patch_candidate.review_decision.v1`): what a reviewer decided about one candidate
//! digest, who, when (the host's clock), why, and the digests the decision was made against.
//!
//! [`decide`] applies the rules and returns the record to append; [`ReviewState::of`] folds a
//! candidate's history (the last decision wins). A record's bytes are its compact JSON; the
//! stores keep them as written and read them back through [`parse_record`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
pub(crate) use vocab::GateVerdict;
use vocab::Sha256;

use crate::error::ReviewError;

/// The decision record's schema id.
pub const DECISION_SCHEMA: &str = "patch_candidate.review_decision.v1";
/// The longest reason, in characters.
pub const MAX_REASON_CHARS: usize = 2000;
/// The longest principal name, in characters.
pub const MAX_PRINCIPAL_CHARS: usize = 64;
/// The largest record accepted back from a store.
const MAX_RECORD_BYTES: usize = 256 * 1024;
/// The most gate digests one record names (as many as a job stores evidence documents).
const MAX_RECORD_GATES: usize = 64;

/// What a reviewer decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Accept,
    Reject,
    Retry,
}

impl Decision {
    /// Every decision, in a fixed order (bounded metric labels).
    pub const ALL: [Self; 3] = [Self::Accept, Self::Reject, Self::Retry];

    /// The wire name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Accept => "accept",
            Self::Reject => "reject",
            Self::Retry => "retry",
        }
    }

    /// Parses the wire name.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_REVIEW_INPUT` for any other text.
    pub fn parse(text: &str) -> Result<Self, ReviewError> {
        Self::ALL
            .into_iter()
            .find(|d| d.as_str() == text)
            .ok_or_else(|| ReviewError::Input {
                field: "decision",
                detail: text.to_owned(),
            })
    }
}

/// A principal: the name of an API token (`operator` for the first-start token) or a local
/// user. 1 to 64 of `A-Z a-z 0-9 . _ @ -`, starting with a letter or digit.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Principal(String);

/// `as_str`, and a `Deserialize` that goes through the type's own `parse`, for a checked text
/// newtype.
macro_rules! checked_text {
    ($name:ident) => {
        impl $name {
            #[must_use]
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = String::deserialize(d)?;
                Self::parse(&text).map_err(serde::de::Error::custom)
            }
        }
    };
}

impl Principal {
    /// Checks a principal name.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_REVIEW_PRINCIPAL`.
    pub fn parse(text: &str) -> Result<Self, ReviewError> {
        let mut chars = text.chars();
        let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
        let rest_ok =
            chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '@' | '-'));
        if text.len() > MAX_PRINCIPAL_CHARS || !first_ok || !rest_ok {
            return Err(ReviewError::Principal {
                detail: "must be 1-64 of A-Z a-z 0-9 . _ @ -, starting with a letter or digit",
            });
        }
        Ok(Self(text.to_owned()))
    }
}

checked_text!(Principal);

/// How the actor was authenticated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActorKind {
    /// A named API token of the service (the first-start token is `operator`).
    ApiToken,
    /// The local user of a one-shot command line.
    LocalUser,
}

/// Who made a decision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Actor {
    pub kind: ActorKind,
    pub principal: Principal,
}

/// A reviewer's reason: 1 to `MAX_REASON_CHARS` characters, not only whitespace, no control
/// characters other than newline and tab.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Reason(String);

impl Reason {
    /// Checks a reason (never trims or repairs it).
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_REVIEW_REASON`.
    pub fn parse(text: &str) -> Result<Self, ReviewError> {
        if text.trim().is_empty() {
            return Err(ReviewError::Reason {
                detail: "a reason must not be empty",
            });
        }
        if text.chars().count() > MAX_REASON_CHARS {
            return Err(ReviewError::Reason {
                detail: "a reason is at most 2000 characters",
            });
        }
        if text
            .chars()
            .any(|c| c.is_control() && c != '\n' && c != '\t')
        {
            return Err(ReviewError::Reason {
                detail: "a reason must not contain control characters other than newline and tab",
            });
        }
        Ok(Self(text.to_owned()))
    }
}

checked_text!(Reason);

/// One gate evidence document found for the candidate (already parsed and digest-checked by
/// the gate crate or the job store).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GateFact {
    pub gate: String,
    pub outcome: GateVerdict,
    /// The evidence document's own digest.
    pub evidence_digest: Sha256,
    /// The candidate digest the evidence is bound to.
    pub candidate_digest: Sha256,
}

/// The content policy report of the candidate (its digest and whether it has no finding).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyFact {
    pub report_digest: Sha256,
    /// The candidate digest the report is bound to.
    pub candidate_digest: Sha256,
    pub clean: bool,
}

/// Everything a decision is checked against: facts the host established, never the client's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReviewFacts {
    pub candidate_digest: Sha256,
    /// The approval's digest (the candidate's `approved_plan_digest`).
    pub approval_digest: String,
    /// The candidate's `required_validation_gates`.
    pub required_gates: Vec<String>,
    pub gates: Vec<GateFact>,
    pub policy: Option<PolicyFact>,
    /// The candidate is already published.
    pub published: bool,
    /// The attempt this candidate continues, when it is a follow-up (its job and candidate).
    pub continues: Option<Continues>,
    /// The later attempt that continues this candidate (its job), when there is one: the
    /// candidate's route is then `superseded` and it cannot be accepted (a reject, or a retry that starts
    /// a new chain from it, still can be recorded).
    pub superseded_by: Option<String>,
}

/// The earlier attempt a follow-up's candidate continues.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Continues {
    /// The earlier attempt's job.
    pub job: String,
    /// The earlier attempt's candidate digest.
    pub candidate_digest: Sha256,
}

/// A decision as a reviewer asks for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecisionRequest {
    /// The candidate digest the reviewer looked at.
    pub candidate_digest: Sha256,
    pub decision: Decision,
    pub reason: Option<Reason>,
    /// Override unmet gates or an unclean policy (needs a reason; recorded as forced).
    pub force: bool,
}

/// One requirement an accept did not meet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Unmet {
    /// A required gate without passed evidence for this digest (`state`: `missing` or the
    /// evidence's outcome).
    Gate { gate: String, state: String },
    /// The content policy report is `missing` or `unclean`.
    Policy { state: String },
}

/// The digests a decision was made against.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Against {
    pub candidate_digest: Sha256,
    pub approval_digest: String,
    /// Every gate evidence bound to this candidate, by gate name.
    pub gate_evidence: BTreeMap<String, Sha256>,
    pub policy_report_digest: Option<Sha256>,
}

/// One decision record, as appended to a candidate's history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionRecord {
    pub schema: String,
    pub candidate_digest: Sha256,
    pub decision: Decision,
    pub actor: Actor,
    /// The host's clock when the decision was recorded, in Unix milliseconds.
    pub at_ms: i64,
    pub reason: Option<Reason>,
    /// An accept that overrode unmet requirements (listed in `overridden`).
    pub forced: bool,
    pub overridden: Vec<Unmet>,
    pub against: Against,
}

impl DecisionRecord {
    /// The record's bytes as stored: compact JSON.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_REVIEW_RECORD` if serialisation fails (it cannot for valid values).
    pub fn to_bytes(&self) -> Result<Vec<u8>, ReviewError> {
        serde_json::to_vec(self).map_err(|_| ReviewError::Record {
            detail: "the record cannot be serialised",
        })
    }

    fn check(&self) -> Result<(), ReviewError> {
        let bad = |detail| Err(ReviewError::Record { detail });
        if self.schema != DECISION_SCHEMA {
            return bad("unknown schema");
        }
        if self.against.candidate_digest != self.candidate_digest {
            return bad("the record's digests disagree");
        }
        if self.against.gate_evidence.len() > MAX_RECORD_GATES {
            return bad("too many gate digests");
        }
        if self.forced == self.overridden.is_empty() {
            return bad("forced and overridden disagree");
        }
        if self.forced && (self.decision != Decision::Accept || self.reason.is_none()) {
            return bad("a forced record must be an accept with a reason");
        }
        if self.decision == Decision::Reject && self.reason.is_none() {
            return bad("a reject without a reason");
        }
        Ok(())
    }
}

/// Parses a stored record strictly (unknown fields refused, every check of [`decide`]'s output
/// made again) and checks it belongs to `candidate`.
///
/// # Errors
/// `PATCH_CANDIDATE_REVIEW_RECORD`.
pub fn parse_record(bytes: &[u8], candidate: &Sha256) -> Result<DecisionRecord, ReviewError> {
    if bytes.len() > MAX_RECORD_BYTES {
        return Err(ReviewError::Record {
            detail: "the record exceeds 256 KiB",
        });
    }
    let record: DecisionRecord =
        serde_json::from_slice(bytes).map_err(|_| ReviewError::Record {
            detail: "the record is not a valid decision document",
        })?;
    record.check()?;
    if record.candidate_digest != *candidate {
        return Err(ReviewError::Record {
            detail: "the record belongs to another candidate",
        });
    }
    Ok(record)
}

/// A record with its position in the candidate's history (1, 2, …).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StoredDecision {
    pub seq: u64,
    #[serde(flatten)]
    pub record: DecisionRecord,
}

/// The candidate's review state: its last decision, or `pending` without one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReviewState {
    Pending,
    Accepted,
    Rejected,
    RetryRequested,
}

impl ReviewState {
    /// The state after `history` (oldest first): the last decision wins.
    #[must_use]
    pub fn of(history: &[StoredDecision]) -> Self {
        match history
            .iter()
            .max_by_key(|d| d.seq)
            .map(|d| d.record.decision)
        {
            None => Self::Pending,
            Some(Decision::Accept) => Self::Accepted,
            Some(Decision::Reject) => Self::Rejected,
            Some(Decision::Retry) => Self::RetryRequested,
        }
    }

    /// The wire name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Accepted => "accepted",
            Self::Rejected => "rejected",
            Self::RetryRequested => "retry_requested",
        }
    }
}

/// Publication is allowed only for an accepted candidate.
///
/// # Errors
/// `PATCH_CANDIDATE_REVIEW_NOT_ACCEPTED`.
pub fn require_accepted(history: &[StoredDecision]) -> Result<(), ReviewError> {
    match ReviewState::of(history) {
        ReviewState::Accepted => Ok(()),
        other => Err(ReviewError::NotAccepted {
            state: other.as_str(),
        }),
    }
}

/// What an accept of this candidate would not meet now: each required gate without passed
/// evidence bound to this digest, and a missing or unclean policy report.
fn unmet(facts: &ReviewFacts) -> Vec<Unmet> {
    let mut out = Vec::new();
    let mut required: Vec<&String> = facts.required_gates.iter().collect();
    required.sort_unstable();
    required.dedup();
    for gate in required {
        let found = facts
            .gates
            .iter()
            .find(|g| &g.gate == gate && g.candidate_digest == facts.candidate_digest);
        match found {
            Some(g) if g.outcome == GateVerdict::Passed => {}
            Some(g) => out.push(Unmet::Gate {
                gate: gate.clone(),
                state: g.outcome.as_str().to_owned(),
            }),
            None => out.push(Unmet::Gate {
                gate: gate.clone(),
                state: "missing".to_owned(),
            }),
        }
    }
    match &facts.policy {
        Some(p) if p.candidate_digest == facts.candidate_digest && p.clean => {}
        Some(p) if p.candidate_digest == facts.candidate_digest => out.push(Unmet::Policy {
            state: "unclean".to_owned(),
        }),
        _ => out.push(Unmet::Policy {
            state: "missing".to_owned(),
        }),
    }
    out
}

/// Whether an accept would need an override now (for the review document's actions).
#[must_use]
pub(crate) fn accept_needs_force(facts: &ReviewFacts) -> bool {
    !unmet(facts).is_empty()
}

/// Applies the rules to one request and returns the record to append:
///
/// 1. the request must name the candidate's own digest (`..._DIGEST_MISMATCH`);
/// 2. a published candidate takes no more decisions (`..._PUBLISHED`); a superseded one (a
///    later attempt of its chain continues it) is not accepted, forced or not
///    (`..._SUPERSEDED`): the chain's last candidate is;
/// 3. `reject` needs a reason (`..._REASON_REQUIRED`);
/// 4. `accept` needs every required gate passed for this digest and a clean policy report
///    (`..._GATES_UNMET`, `..._POLICY_UNCLEAN`), unless `force` with a reason: then the record
///    says `forced` and lists what it overrode.
///
/// `at_ms` is the host's clock; nothing of the record comes from the client but the decision,
/// the digest it names (checked) and the reason.
///
/// # Errors
/// The codes above.
pub fn decide(
    facts: &ReviewFacts,
    request: &DecisionRequest,
    actor: Actor,
    at_ms: i64,
) -> Result<DecisionRecord, ReviewError> {
    if request.candidate_digest != facts.candidate_digest {
        return Err(ReviewError::DigestMismatch {
            named: request.candidate_digest,
            actual: facts.candidate_digest,
        });
    }
    if facts.published {
        return Err(ReviewError::Published);
    }
    if let Some(by) = &facts.superseded_by
        && request.decision == Decision::Accept
    {
        return Err(ReviewError::Superseded { by: by.clone() });
    }
    if request.decision == Decision::Reject && request.reason.is_none() {
        return Err(ReviewError::ReasonRequired { what: "reject" });
    }
    let mut overridden = Vec::new();
    if request.decision == Decision::Accept {
        let missing = unmet(facts);
        if !missing.is_empty() {
            if !request.force {
                let gates: Vec<&str> = missing
                    .iter()
                    .filter_map(|u| match u {
                        Unmet::Gate { gate, .. } => Some(gate.as_str()),
                        Unmet::Policy { .. } => None,
                    })
                    .collect();
                if !gates.is_empty() {
                    return Err(ReviewError::GatesUnmet {
                        gates: gates.join(", "),
                    });
                }
                let unclean = missing
                    .iter()
                    .any(|u| matches!(u, Unmet::Policy { state } if state == "unclean"));
                let state = if unclean { "unclean" } else { "missing" };
                return Err(ReviewError::PolicyUnclean { state });
            }
            if request.reason.is_none() {
                return Err(ReviewError::ReasonRequired {
                    what: "an override",
                });
            }
            overridden = missing;
        }
    }
    let gate_evidence = facts
        .gates
        .iter()
        .filter(|g| g.candidate_digest == facts.candidate_digest)
        .map(|g| (g.gate.clone(), g.evidence_digest))
        .collect();
    let record = DecisionRecord {
        schema: DECISION_SCHEMA.to_owned(),
        candidate_digest: facts.candidate_digest,
        decision: request.decision,
        actor,
        at_ms,
        reason: request.reason.clone(),
        forced: !overridden.is_empty(),
        overridden,
        against: Against {
            candidate_digest: facts.candidate_digest,
            approval_digest: facts.approval_digest.clone(),
            gate_evidence,
            policy_report_digest: facts
                .policy
                .as_ref()
                .filter(|p| p.candidate_digest == facts.candidate_digest)
                .map(|p| p.report_digest),
        },
    };
    record.check()?;
    Ok(record)
}

#[cfg(test)]
#[path = "decision_tests.rs"]
mod tests;
