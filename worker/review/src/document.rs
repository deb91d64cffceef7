//! The review document (`patch_candidate.review_package.v1`): one per candidate digest, the one
//! thing every view renders (`review show`, the API, the review page). It is built, never
//! parsed: from the immutable candidate, the gate evidence and the policy report bound to its
//! digest, the decision history and the publication record. Its `validation_state` moves
//! (pending → passed / failed) as evidence arrives while the candidate itself stays
//! `validation_state: pending`, immutable and digested. Every field is always present (`null`
//! or empty when there is nothing); docs/REVIEW.md, "Review document", is its reference.

use serde::Serialize;
use vocab::Sha256;

use finalizer::{RepositoryPatchCandidate, repository_patch_digest};

use crate::decision::{
    Continues, GateVerdict, ReviewFacts, ReviewState, StoredDecision, accept_needs_force,
};
use crate::error::ReviewError;

/// The review document's schema id.
pub const PACKAGE_SCHEMA: &str = "patch_candidate.review_package.v1";

/// Where the candidate goes next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RouteDecision {
    /// Required gates have not all reported for this digest yet.
    AwaitingValidation,
    /// Ready for a reviewer's decision (gates reported; passed or not).
    Review,
    /// Accepted: publication is the next step.
    Publish,
    /// Published: the review is closed.
    Published,
    /// Rejected.
    Closed,
    /// A retry was requested, or a later attempt of the chain continues this candidate: the
    /// chain's last candidate is the one to decide on.
    Superseded,
}

/// The candidate's validation state, from the required gates' evidence for this digest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ValidationState {
    /// A required gate has no evidence yet (and none has failed).
    Pending,
    /// Every required gate passed (also when none is required).
    Passed,
    /// A required gate's evidence is not `passed`.
    Failed,
}

/// One changed file as the document lists it (sizes of the new content only: the candidate
/// carries the previous file's hash, not its bytes).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ChangedFileView {
    pub path: String,
    pub operation: &'static str,
    pub previous_sha256: Option<Sha256>,
    pub new_sha256: Option<Sha256>,
    pub new_bytes: Option<u64>,
    pub diff_bytes: u64,
}

/// One gate as the document lists it: every required gate, and any other gate with evidence.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GateView {
    pub gate: String,
    pub required: bool,
    /// The evidence's outcome, or `missing`.
    pub outcome: &'static str,
    pub evidence_digest: Option<Sha256>,
}

/// One content policy finding, redacted: the rule, the path and the line, never the value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PolicyFinding {
    pub rule: String,
    /// `None` when the policy withheld it (a created file whose name matched a secret rule).
    pub path: Option<String>,
    pub line: Option<u64>,
}

/// The content policy part of the document.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PolicyView {
    pub report_digest: Sha256,
    pub clean: bool,
    pub findings: Vec<PolicyFinding>,
}

/// A risk note: why a reviewer should look twice. From the policy findings (rule + path +
/// line), the required gates that did not pass, and forced accepts in the history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RiskNote {
    PolicyFinding {
        rule: String,
        path: Option<String>,
        line: Option<u64>,
    },
    GateNotPassed {
        gate: String,
        outcome: &'static str,
    },
    PolicyReportMissing,
    ForcedAccept {
        seq: u64,
    },
}

/// The review document.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReviewPackage {
    pub schema: &'static str,
    pub candidate_digest: Sha256,
    pub repository_full_name: String,
    pub baseline_commit_sha: String,
    pub approval_digest: String,
    pub snapshot_digest: String,
    pub route_decision: RouteDecision,
    pub write_back_mode: String,
    pub affected_paths: Vec<String>,
    pub changed_files: Vec<ChangedFileView>,
    pub validation_state: ValidationState,
    pub review_state: ReviewState,
    pub risk_notes: Vec<RiskNote>,
    pub available_actions: Vec<&'static str>,
    pub gates: Vec<GateView>,
    pub policy: Option<PolicyView>,
    pub decisions: Vec<StoredDecision>,
    pub publication: Option<serde_json::Value>,
    /// The earlier attempt this candidate continues (a follow-up's), or `null`.
    pub continues: Option<Continues>,
    /// The later attempt (its job) that continues this candidate, or `null`.
    pub superseded_by: Option<String>,
}

/// Builds the review document of `candidate` from the facts bound to its digest.
///
/// # Errors
/// `PATCH_CANDIDATE_REVIEW_DIGEST_MISMATCH` when `facts` (or a record of `history`) name
/// another digest than the candidate's own; `PATCH_CANDIDATE_REVIEW_RECORD` when the
/// candidate's digest cannot be computed.
pub fn build_package(
    candidate: &RepositoryPatchCandidate,
    facts: &ReviewFacts,
    findings: &[PolicyFinding],
    history: Vec<StoredDecision>,
    publication: Option<serde_json::Value>,
) -> Result<ReviewPackage, ReviewError> {
    let digest = repository_patch_digest(candidate).map_err(|_| ReviewError::Record {
        detail: "the candidate's digest cannot be computed",
    })?;
    if digest != facts.candidate_digest {
        return Err(ReviewError::DigestMismatch {
            named: facts.candidate_digest,
            actual: digest,
        });
    }
    if let Some(other) = history.iter().find(|d| d.record.candidate_digest != digest) {
        return Err(ReviewError::DigestMismatch {
            named: other.record.candidate_digest,
            actual: digest,
        });
    }
    let changed_files: Vec<ChangedFileView> = candidate
        .changed_files()
        .iter()
        .map(|f| ChangedFileView {
            path: f.path().as_str().to_owned(),
            operation: f.op().as_str(),
            previous_sha256: f.previous_sha256().copied(),
            new_sha256: f.new_sha256().copied(),
            new_bytes: f.content().map(|c| c.len() as u64),
            diff_bytes: f.diff().len() as u64,
        })
        .collect();
    let mut affected_paths: Vec<String> = changed_files.iter().map(|f| f.path.clone()).collect();
    affected_paths.sort();
    affected_paths.dedup();

    let bound = |gate: &str| {
        facts
            .gates
            .iter()
            .find(|g| g.gate == gate && g.candidate_digest == digest)
    };
    let mut required: Vec<String> = facts.required_gates.clone();
    required.sort();
    required.dedup();
    let mut gates: Vec<GateView> = required
        .iter()
        .map(|gate| GateView {
            gate: gate.clone(),
            required: true,
            outcome: bound(gate).map_or("missing", |g| g.outcome.as_str()),
            evidence_digest: bound(gate).map(|g| g.evidence_digest),
        })
        .collect();
    for g in &facts.gates {
        if g.candidate_digest == digest && !required.contains(&g.gate) {
            gates.push(GateView {
                gate: g.gate.clone(),
                required: false,
                outcome: g.outcome.as_str(),
                evidence_digest: Some(g.evidence_digest),
            });
        }
    }
    let required_views = || gates.iter().filter(|g| g.required);
    let validation_state = if required_views()
        .any(|g| g.outcome != "missing" && g.outcome != GateVerdict::Passed.as_str())
    {
        ValidationState::Failed
    } else if required_views().any(|g| g.outcome == "missing") {
        ValidationState::Pending
    } else {
        ValidationState::Passed
    };

    let policy = facts
        .policy
        .as_ref()
        .filter(|p| p.candidate_digest == digest)
        .map(|p| PolicyView {
            report_digest: p.report_digest,
            clean: p.clean,
            findings: findings.to_vec(),
        });

    let mut risk_notes: Vec<RiskNote> = Vec::new();
    if let Some(p) = &policy {
        risk_notes.extend(p.findings.iter().map(|f| RiskNote::PolicyFinding {
            rule: f.rule.clone(),
            path: f.path.clone(),
            line: f.line,
        }));
    } else {
        risk_notes.push(RiskNote::PolicyReportMissing);
    }
    risk_notes.extend(
        required_views()
            .filter(|g| g.outcome != GateVerdict::Passed.as_str())
            .map(|g| RiskNote::GateNotPassed {
                gate: g.gate.clone(),
                outcome: g.outcome,
            }),
    );
    risk_notes.extend(
        history
            .iter()
            .filter(|d| d.record.forced)
            .map(|d| RiskNote::ForcedAccept { seq: d.seq }),
    );

    let published = facts.published || publication.is_some();
    let superseded = !published && facts.superseded_by.is_some();
    let review_state = ReviewState::of(&history);
    let route_decision = match (published, review_state) {
        (true, _) => RouteDecision::Published,
        (false, _) if superseded => RouteDecision::Superseded,
        (false, ReviewState::Accepted) => RouteDecision::Publish,
        (false, ReviewState::Rejected) => RouteDecision::Closed,
        (false, ReviewState::RetryRequested) => RouteDecision::Superseded,
        (false, ReviewState::Pending) if validation_state == ValidationState::Pending => {
            RouteDecision::AwaitingValidation
        }
        (false, ReviewState::Pending) => RouteDecision::Review,
    };
    let available_actions = if published {
        Vec::new()
    } else if superseded {
        vec!["reject", "retry"]
    } else {
        let accept = if accept_needs_force(facts) {
            "accept_forced"
        } else {
            "accept"
        };
        let mut actions = vec![accept, "reject", "retry"];
        if review_state == ReviewState::Accepted {
            actions.push("publish");
        }
        actions
    };

    Ok(ReviewPackage {
        schema: PACKAGE_SCHEMA,
        candidate_digest: digest,
        repository_full_name: candidate.repository_full_name().to_owned(),
        baseline_commit_sha: candidate.baseline_commit_sha().to_owned(),
        approval_digest: candidate.approved_plan_digest().to_owned(),
        snapshot_digest: candidate.snapshot_digest().to_owned(),
        route_decision,
        write_back_mode: candidate.write_back_mode().to_owned(),
        affected_paths,
        changed_files,
        validation_state,
        review_state,
        risk_notes,
        available_actions,
        gates,
        policy,
        decisions: history,
        publication,
        continues: facts.continues.clone(),
        superseded_by: facts.superseded_by.clone().filter(|_| superseded),
    })
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use snapshot::{FileOp, RepoPath};

    use super::*;
    use crate::decision::{
        Actor, ActorKind, Decision, DecisionRequest, GateFact, PolicyFact, Principal, Reason,
        decide,
    };

    fn candidate() -> RepositoryPatchCandidate {
        let files = vec![
            finalizer::RepositoryPatchFile::new(
                RepoPath::parse("src/b.py").unwrap(),
                FileOp::Create,
                None,
                Some(Sha256::of(b"x\n")),
                Some("x\n".to_owned()),
                "+x\n".to_owned(),
            )
            .unwrap(),
            finalizer::RepositoryPatchFile::new(
                RepoPath::parse("src/a.py").unwrap(),
                FileOp::Delete,
                Some(Sha256::of(b"a\n")),
                None,
                None,
                "-a\n".to_owned(),
            )
            .unwrap(),
        ];
        let fields = finalizer::CandidateFields {
            repository_full_name: "o/n".into(),
            baseline_commit_sha: "c".repeat(40),
            approved_plan_digest: "0".repeat(64),
            required_validation_gates: vec!["pytest".into()],
            ..finalizer::CandidateFields::default()
        };
        RepositoryPatchCandidate::new(fields, files).unwrap()
    }

    fn facts(c: &RepositoryPatchCandidate) -> ReviewFacts {
        ReviewFacts {
            candidate_digest: repository_patch_digest(c).unwrap(),
            approval_digest: c.approved_plan_digest().to_owned(),
            required_gates: c.required_validation_gates().to_vec(),
            gates: vec![],
            policy: None,
            published: false,
            continues: None,
            superseded_by: None,
        }
    }

    #[test]
    fn validation_state_moves_with_the_evidence_while_the_candidate_stays_pending() {
        let c = candidate();
        let mut f = facts(&c);
        let p = build_package(&c, &f, &[], vec![], None).unwrap();
        assert_eq!(p.schema, PACKAGE_SCHEMA);
        assert_eq!(p.validation_state, ValidationState::Pending);
        assert_eq!(p.route_decision, RouteDecision::AwaitingValidation);
        assert_eq!(p.write_back_mode, "external_patch");
        assert_eq!(p.affected_paths, vec!["src/a.py", "src/b.py"]);
        assert_eq!(p.changed_files[0].new_bytes, Some(2));
        assert_eq!(p.changed_files[1].operation, "delete");
        assert_eq!(
            p.available_actions,
            vec!["accept_forced", "reject", "retry"]
        );
        assert_eq!(
            p.risk_notes,
            vec![
                RiskNote::PolicyReportMissing,
                RiskNote::GateNotPassed {
                    gate: "pytest".into(),
                    outcome: "missing"
                }
            ]
        );

        let gate = |outcome| GateFact {
            gate: "pytest".into(),
            outcome,
            evidence_digest: Sha256::of(b"e"),
            candidate_digest: f.candidate_digest,
        };
        f.gates = vec![gate(GateVerdict::Failed)];
        let p = build_package(&c, &f, &[], vec![], None).unwrap();
        assert_eq!(p.validation_state, ValidationState::Failed);
        assert_eq!(p.route_decision, RouteDecision::Review);

        f.gates = vec![gate(GateVerdict::Passed)];
        f.policy = Some(PolicyFact {
            report_digest: Sha256::of(b"p"),
            candidate_digest: f.candidate_digest,
            clean: true,
        });
        let p = build_package(&c, &f, &[], vec![], None).unwrap();
        assert_eq!(p.validation_state, ValidationState::Passed);
        assert_eq!(p.available_actions, vec!["accept", "reject", "retry"]);
        assert!(p.risk_notes.is_empty());
        assert_eq!(c.validation_state(), "pending");
    }

    #[test]
    fn decisions_findings_and_publication_shape_the_route_and_actions() {
        let c = candidate();
        let mut f = facts(&c);
        f.policy = Some(PolicyFact {
            report_digest: Sha256::of(b"p"),
            candidate_digest: f.candidate_digest,
            clean: false,
        });
        let findings = vec![PolicyFinding {
            rule: "aws-access-key".into(),
            path: Some("src/b.py".into()),
            line: Some(1),
        }];
        let req = DecisionRequest {
            candidate_digest: f.candidate_digest,
            decision: Decision::Accept,
            reason: Some(Reason::parse("known test key").unwrap()),
            force: true,
        };
        let actor = Actor {
            kind: ActorKind::LocalUser,
            principal: Principal::parse("alice").unwrap(),
        };
        let record = decide(&f, &req, actor, 5).unwrap();
        let history = vec![StoredDecision { seq: 1, record }];
        let p = build_package(&c, &f, &findings, history.clone(), None).unwrap();
        assert_eq!(p.review_state, ReviewState::Accepted);
        assert_eq!(p.route_decision, RouteDecision::Publish);
        assert_eq!(
            p.available_actions,
            vec!["accept_forced", "reject", "retry", "publish"]
        );
        assert!(p.risk_notes.contains(&RiskNote::ForcedAccept { seq: 1 }));
        assert!(p.risk_notes.contains(&RiskNote::PolicyFinding {
            rule: "aws-access-key".into(),
            path: Some("src/b.py".into()),
            line: Some(1)
        }));
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["decisions"][0]["seq"], 1);
        assert_eq!(json["decisions"][0]["forced"], true);
        assert_eq!(json["policy"]["findings"][0]["rule"], "aws-access-key");

        let p = build_package(
            &c,
            &f,
            &findings,
            history,
            Some(serde_json::json!({"branch": "x"})),
        )
        .unwrap();
        assert_eq!(p.route_decision, RouteDecision::Published);
        assert!(p.available_actions.is_empty());

        let mut other = f.clone();
        other.candidate_digest = Sha256::of(b"other");
        assert_eq!(
            build_package(&c, &other, &[], vec![], None)
                .unwrap_err()
                .code(),
            "PATCH_CANDIDATE_REVIEW_DIGEST_MISMATCH"
        );
    }

    /// A candidate a later attempt continues is routed `superseded`: its document names that attempt
    /// and offers no accept; an accept (forced or not) is refused, a reject or a retry (a new
    /// chain from here) is recorded. A follow-up's document names the attempt it continues.
    #[test]
    fn a_superseded_candidate_is_not_accepted() {
        let c = candidate();
        let later = "job_0123456789abcdef0123456789abcdef".to_owned();
        let f = ReviewFacts {
            superseded_by: Some(later.clone()),
            continues: Some(Continues {
                job: "job_00000000000000000000000000000000".into(),
                candidate_digest: Sha256::of(b"earlier"),
            }),
            ..facts(&c)
        };
        let p = build_package(&c, &f, &[], vec![], None).unwrap();
        assert_eq!(p.review_state, ReviewState::Pending);
        assert_eq!(p.route_decision, RouteDecision::Superseded);
        assert_eq!(p.available_actions, vec!["reject", "retry"]);
        assert_eq!(p.superseded_by.as_deref(), Some(later.as_str()));
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["route_decision"], "superseded");
        assert_eq!(
            json["continues"]["job"],
            "job_00000000000000000000000000000000"
        );
        let actor = Actor {
            kind: ActorKind::ApiToken,
            principal: Principal::parse("alice").unwrap(),
        };
        let ask = |decision, force| DecisionRequest {
            candidate_digest: f.candidate_digest,
            decision,
            reason: Some(Reason::parse("why").unwrap()),
            force,
        };
        for force in [false, true] {
            let e = decide(&f, &ask(Decision::Accept, force), actor.clone(), 1).unwrap_err();
            assert_eq!(e.code(), "PATCH_CANDIDATE_REVIEW_SUPERSEDED");
            assert!(e.to_string().contains(&later));
        }
        for decision in [Decision::Reject, Decision::Retry] {
            let record = decide(&f, &ask(decision, false), actor.clone(), 1).unwrap();
            assert_eq!(record.decision, decision);
        }
        // Published first: the publication stands and nothing is superseded.
        let p = build_package(&c, &f, &[], vec![], Some(serde_json::json!({}))).unwrap();
        assert_eq!(p.route_decision, RouteDecision::Published);
        assert_eq!(p.superseded_by, None);
    }
}
