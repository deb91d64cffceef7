//! The facts a review is checked against, assembled one way for every front end (the CLI's
//! `review` commands and the service's review API): the content policy report's fact and its
//! redacted findings ([`policy_facts`]), and the candidate's part of the facts
//! ([`ReviewFacts::assemble`]). Where the gate evidence comes from differs per front end (files
//! matched to the operator's definitions, or the job store's rows); what the facts hold does not.

use finalizer::RepositoryPatchCandidate;
use vocab::Sha256;

use crate::decision::{GateFact, PolicyFact, ReviewFacts};
use crate::document::PolicyFinding;

/// The fact of a content policy report (its file digest, the candidate digest it is bound to,
/// its verdict) and its findings, redacted: the rule, the path and the line, never the value.
///
/// # Errors
/// The policy crate's error when the report cannot be serialized for its digest.
pub fn policy_facts(
    report: &policy::PolicyReport,
) -> Result<(PolicyFact, Vec<PolicyFinding>), policy::PolicyError> {
    let (_, report_digest) = report.to_file_bytes()?;
    let findings = report
        .findings
        .iter()
        .map(|f| PolicyFinding {
            rule: f.rule_id.clone(),
            path: f.path.clone(),
            line: f.line,
        })
        .collect();
    Ok((
        PolicyFact {
            report_digest,
            candidate_digest: report.candidate_digest,
            clean: report.clean,
        },
        findings,
    ))
}

impl ReviewFacts {
    /// The facts of `candidate` (whose digest is `digest`): its approval and required gates,
    /// the gate evidence found for it, its policy report's fact, and whether it is published.
    #[must_use]
    pub fn assemble(
        candidate: &RepositoryPatchCandidate,
        digest: Sha256,
        gates: Vec<GateFact>,
        policy: PolicyFact,
        published: bool,
    ) -> Self {
        Self {
            candidate_digest: digest,
            approval_digest: candidate.approved_plan_digest().to_owned(),
            required_gates: candidate.required_validation_gates().to_vec(),
            gates,
            policy: Some(policy),
            published,
            continues: None,
            superseded_by: None,
        }
    }
}
