//! Gate evidence (`patch_candidate.gate_evidence.v1`): one strict, versioned document per gate
//! run, bound to the candidate's digest, the gate definition's digest and the image ID, with the
//! outcome, the counts, the bounded comparison lists, a bounded escaped log tail and its digest,
//! and the baseline run's evidence digest. The file is the canonical JSON of the document (sorted
//! keys, compact) with `evidence_digest` over everything else, computed the way the candidate's
//! digest is (a `digest_schema` wrapper, canonical bytes, sha256).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
pub(crate) use vocab::GateVerdict;
use vocab::Sha256;

use finalizer::RepositoryPatchCandidate;

use crate::error::GateError;
use gate_runner::ExitStatus as ChildExit;
use vocab::{canonical_bytes, domain_digest};

/// The evidence schema id.
pub const EVIDENCE_SCHEMA: &str = "patch_candidate.gate_evidence.v1";
/// The digest schema id of evidence documents.
pub const EVIDENCE_DIGEST_SCHEMA: &str = "patch_candidate.gate_evidence_digest.v1";
/// Most ids one list of the evidence carries (the count is always exact).
pub const MAX_LISTED_IDS: usize = 500;
/// Most passing ids a baseline run's evidence lists: the runner's case cap, so a baseline run
/// below the cap lists every passing test (what the candidate's run is checked against).
pub const MAX_PASSING_IDS: usize = 1500;
/// Largest evidence file accepted.
pub const MAX_EVIDENCE_BYTES: usize = 4 * 1024 * 1024;
/// The candidate's run must run (pass, fail or error) at least this many per mille of the test
/// cases its baseline ran (the cases of files the candidate deleted excepted); below it the
/// comparison carries `too_few_ran` and is a regression.
pub const MIN_RAN_PER_MILLE: u64 = 900;

/// What was run: the candidate's tree, or the unmodified baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EvidenceSubject {
    Candidate,
    Baseline,
}

/// A bounded list of test ids with its exact count.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdList {
    pub count: u64,
    pub ids: Vec<String>,
    pub truncated: bool,
}

impl IdList {
    /// The sorted set, capped at `MAX_LISTED_IDS`.
    #[must_use]
    pub fn from_set(set: &BTreeSet<String>) -> Self {
        Self::from_set_capped(set, MAX_LISTED_IDS)
    }

    /// The sorted set, capped at `cap`.
    #[must_use]
    pub fn from_set_capped(set: &BTreeSet<String>, cap: usize) -> Self {
        Self {
            count: set.len() as u64,
            ids: set.iter().take(cap).cloned().collect(),
            truncated: set.len() > cap,
        }
    }

    /// No id at all (count 0).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    fn consistent(&self) -> bool {
        self.consistent_capped(MAX_LISTED_IDS)
    }

    fn consistent_capped(&self, cap: usize) -> bool {
        let sorted = self.ids.windows(2).all(|w| matches!(w, [a, b] if a < b));
        sorted
            && self.ids.len() <= cap
            && (self.ids.len() as u64) <= self.count
            && self.truncated == ((self.ids.len() as u64) < self.count)
    }
}

/// JUnit counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestCounts {
    pub total: u64,
    pub passed: u64,
    pub failed: u64,
    pub error: u64,
    pub skipped: u64,
    /// The runner capped the case list.
    pub truncated: bool,
}

/// The comparison with the baseline run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Comparison {
    /// How the runs were compared: by JUnit test id, or by exit status.
    pub by: ComparisonBasis,
    pub new_failures: IdList,
    pub fixed: IdList,
    pub still_failing: IdList,
    /// Test ids that passed on the baseline and are missing, skipped or deselected in the
    /// candidate's run (neither passed nor failed there), the tests of files the candidate
    /// deleted excepted. By test id only; omitted from the document when empty.
    #[serde(default, skip_serializing_if = "IdList::is_empty")]
    pub vanished: IdList,
    /// Present when the candidate's run ran fewer than `MIN_RAN_PER_MILLE` per mille of the
    /// cases the baseline ran (by test id only; omitted when not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub too_few_ran: Option<RanCounts>,
    /// The candidate fails where the baseline did not: new failing ids, vanished ids or too few
    /// tests run; or, by exit status, a failing candidate over a passing baseline.
    pub regression: bool,
}

impl Comparison {
    /// Tests the baseline passed are gone from the candidate's run (`vanished` or
    /// `too_few_ran`): the run is `failed` even if its exit status is 0.
    #[must_use]
    pub fn lost_tests(&self) -> bool {
        !self.vanished.is_empty() || self.too_few_ran.is_some()
    }
}

/// How many test cases ran (passed, failed or error) in the baseline's and the candidate's run,
/// and how many of the baseline's belonged to files the candidate deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RanCounts {
    pub baseline: u64,
    pub candidate: u64,
    pub deleted: u64,
}

/// The comparison basis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ComparisonBasis {
    TestId,
    ExitStatus,
}

/// The bounded, escaped log tail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogTail {
    /// Bytes the child wrote in total (stdout and stderr).
    pub total_bytes: u64,
    /// The kept tail, every byte outside printable ASCII, `\n` and `\t` written as `\xNN`.
    pub tail: String,
    /// Raw bytes of the tail.
    pub tail_bytes: u64,
    /// `sha256:` of the raw tail bytes.
    pub tail_sha256: Sha256,
}

impl LogTail {
    /// The tail of `raw` as evidence text.
    #[must_use]
    pub fn new(total_bytes: u64, raw: &[u8]) -> Self {
        Self {
            total_bytes,
            tail: escape_log(raw),
            tail_bytes: raw.len() as u64,
            tail_sha256: Sha256::of(raw),
        }
    }

    /// No output.
    #[must_use]
    pub fn empty() -> Self {
        Self::new(0, b"")
    }
}

/// Escapes log bytes for a terminal and a JSON document: printable ASCII, `\n` and `\t` kept,
/// `\` and every other byte as `\xNN`.
#[must_use]
pub fn escape_log(raw: &[u8]) -> String {
    let mut out = String::with_capacity(raw.len());
    for &b in raw {
        match b {
            b'\\' => out.push_str("\\x5c"),
            b'\n' | b'\t' | 0x20..=0x7e => out.push(char::from(b)),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    out
}

/// The tree the run received.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TreeFacts {
    pub entries: u64,
    pub bytes: u64,
}

/// One gate evidence document (everything but its own digest).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateEvidence {
    pub schema: String,
    pub subject: EvidenceSubject,
    /// `None` for a baseline run.
    pub candidate_digest: Option<Sha256>,
    pub baseline_commit_sha: String,
    pub gate: String,
    pub definition_digest: Sha256,
    pub image_id: String,
    /// `default` (the daemon's default runtime) or the configured runtime's name.
    pub runtime: String,
    pub outcome: GateVerdict,
    /// The stable code of an `error`, `timed_out` or `policy_refused` outcome.
    pub code: Option<String>,
    pub exit: Option<ChildExit>,
    /// The runner's measured wall time of the child (host-measured when there is no report).
    pub wall_ms: u64,
    pub tree: Option<TreeFacts>,
    pub tests: Option<TestCounts>,
    /// The failing (failed or error) test ids of this run.
    pub failing: IdList,
    /// The passing test ids of a baseline-subject run with JUnit cases (at most
    /// `MAX_PASSING_IDS`): what a candidate's run is checked against for vanished tests.
    /// Omitted otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passing: Option<IdList>,
    /// Candidate runs only.
    pub comparison: Option<Comparison>,
    /// Pinned paths the candidate changed (`policy_refused`).
    pub pinned_changed: Vec<String>,
    pub log: LogTail,
    /// The baseline run's evidence digest (candidate runs that ran).
    pub baseline_evidence_digest: Option<Sha256>,
}

/// A parsed evidence file: the document and its checked digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvidenceFile {
    pub evidence: GateEvidence,
    pub digest: Sha256,
}

fn evidence_error(detail: &str) -> GateError {
    GateError::Evidence {
        detail: detail.to_owned(),
    }
}

impl GateEvidence {
    fn value(&self) -> Result<serde_json::Value, GateError> {
        serde_json::to_value(self).map_err(|_| evidence_error("evidence does not encode"))
    }

    /// The evidence digest (`patch_candidate.gate_evidence_digest.v1`).
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_GATE_EVIDENCE` when the document does not encode.
    pub fn digest(&self) -> Result<Sha256, GateError> {
        Ok(domain_digest(
            EVIDENCE_DIGEST_SCHEMA,
            "evidence",
            &self.value()?,
        ))
    }

    /// The file bytes: canonical JSON with `evidence_digest`.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_GATE_EVIDENCE` when the document does not encode.
    pub fn to_file_bytes(&self) -> Result<(Vec<u8>, Sha256), GateError> {
        let digest = self.digest()?;
        let mut value = self.value()?;
        if let serde_json::Value::Object(map) = &mut value {
            map.insert(
                "evidence_digest".to_owned(),
                serde_json::Value::String(digest.to_string()),
            );
        }
        Ok((canonical_bytes(&value), digest))
    }

    /// Internal consistency: literals, the subject rules, lists, outcome against exit and code.
    fn check(&self) -> Result<(), GateError> {
        if self.schema != EVIDENCE_SCHEMA {
            return Err(evidence_error("unknown schema"));
        }
        if self.baseline_commit_sha.len() != 40
            || !self.baseline_commit_sha.bytes().all(vocab::is_lower_hex)
        {
            return Err(evidence_error("baseline_commit_sha is not a commit id"));
        }
        if self.gate.parse::<crate::definition::GateName>().is_err() {
            return Err(evidence_error("gate is not a gate name"));
        }
        if self.image_id.parse::<container::ImageId>().is_err() {
            return Err(evidence_error("image_id is not an image id"));
        }
        match (
            self.subject,
            &self.candidate_digest,
            &self.comparison,
            &self.baseline_evidence_digest,
        ) {
            (EvidenceSubject::Baseline, None, None, None) => {}
            (EvidenceSubject::Candidate, Some(_), _, _) => {}
            _ => return Err(evidence_error("subject and bindings disagree")),
        }
        if !self.failing.consistent() {
            return Err(evidence_error("failing list is inconsistent"));
        }
        if let Some(c) = &self.comparison
            && ![&c.new_failures, &c.fixed, &c.still_failing, &c.vanished]
                .iter()
                .all(|l| l.consistent())
        {
            return Err(evidence_error("comparison list is inconsistent"));
        }
        if let Some(c) = &self.comparison
            && c.lost_tests()
            && !(c.regression && c.by == ComparisonBasis::TestId)
        {
            return Err(evidence_error("lost tests without a regression"));
        }
        if let Some(p) = &self.passing {
            let passed = self.tests.map_or(0, |t| t.passed);
            if self.subject != EvidenceSubject::Baseline
                || !p.consistent_capped(MAX_PASSING_IDS)
                || p.count > passed
            {
                return Err(evidence_error("passing list is inconsistent"));
            }
        }
        let code_ok = match self.outcome {
            GateVerdict::Passed | GateVerdict::Failed => self.code.is_none(),
            _ => self.code.is_some(),
        };
        if !code_ok {
            return Err(evidence_error("outcome and code disagree"));
        }
        let lost = self.comparison.as_ref().is_some_and(Comparison::lost_tests);
        let exit_ok = match self.outcome {
            GateVerdict::Passed => {
                self.exit == Some(ChildExit::Code(0)) && self.failing.count == 0 && !lost
            }
            // A clean exit is `failed` only when tests the baseline passed are gone.
            GateVerdict::Failed => match self.exit {
                Some(ChildExit::Code(0)) => lost && self.failing.count == 0,
                Some(_) => true,
                None => false,
            },
            GateVerdict::PolicyRefused => self.exit.is_none(),
            GateVerdict::TimedOut | GateVerdict::Error => true,
        };
        if !exit_ok {
            return Err(evidence_error("outcome and exit status disagree"));
        }
        if self.outcome == GateVerdict::PolicyRefused && self.pinned_changed.is_empty() {
            return Err(evidence_error("policy_refused without a pinned path"));
        }
        if self.log.tail_bytes > self.log.total_bytes {
            return Err(evidence_error("log tail is inconsistent"));
        }
        Ok(())
    }
}

/// Parses an evidence file strictly: the canonical spelling only, the known fields only, a
/// recomputed `evidence_digest` equal to the recorded one, and the internal rules.
///
/// # Errors
/// `PATCH_CANDIDATE_GATE_EVIDENCE`.
pub fn parse_evidence(bytes: &[u8]) -> Result<EvidenceFile, GateError> {
    let mut map: serde_json::Map<String, serde_json::Value> =
        vocab::from_slice_strict(bytes, MAX_EVIDENCE_BYTES)
            .map_err(|e| evidence_error(&format!("not strict JSON ({e})")))?;
    let recorded = match map.remove("evidence_digest") {
        Some(serde_json::Value::String(s)) => s
            .parse::<Sha256>()
            .map_err(|_| evidence_error("evidence_digest is not a digest"))?,
        _ => return Err(evidence_error("evidence_digest is missing")),
    };
    let evidence: GateEvidence = serde_json::from_value(serde_json::Value::Object(map))
        .map_err(|_| evidence_error("the document does not match the schema"))?;
    evidence.check()?;
    let (again, digest) = evidence.to_file_bytes()?;
    if digest != recorded {
        return Err(GateError::EvidenceBinding {
            detail: "evidence_digest does not match the document",
        });
    }
    if again != bytes {
        return Err(evidence_error("the file is not in canonical form"));
    }
    Ok(EvidenceFile { evidence, digest })
}

/// `verify --evidence`: the evidence file is well-formed and bound to `candidate` (its digest and
/// baseline commit); when `expected` is given, the evidence digest must equal it.
///
/// # Errors
/// `PATCH_CANDIDATE_GATE_EVIDENCE`, `PATCH_CANDIDATE_GATE_EVIDENCE_BINDING`, and the candidate
/// digest's own codes.
pub fn verify_evidence(
    bytes: &[u8],
    candidate: &RepositoryPatchCandidate,
    expected: Option<&Sha256>,
) -> Result<EvidenceFile, GateError> {
    let file = parse_evidence(bytes)?;
    let digest = finalizer::repository_patch_digest(candidate)?;
    if file.evidence.subject != EvidenceSubject::Candidate
        || file.evidence.candidate_digest.as_ref() != Some(&digest)
    {
        return Err(GateError::EvidenceBinding {
            detail: "the evidence is for another candidate",
        });
    }
    if file.evidence.baseline_commit_sha != candidate.baseline_commit_sha() {
        return Err(GateError::EvidenceBinding {
            detail: "the evidence is for another baseline commit",
        });
    }
    if let Some(expected) = expected
        && *expected != file.digest
    {
        return Err(GateError::EvidenceBinding {
            detail: "the evidence digest differs from the expected one",
        });
    }
    Ok(file)
}

#[cfg(test)]
#[path = "evidence_tests.rs"]
mod tests;
