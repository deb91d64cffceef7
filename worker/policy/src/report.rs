//! The policy report (`patch_candidate.policy_report.v1`): one strict, versioned document per
//! scan, bound to the candidate's digest and to the rule file (version and SHA-256), with exact
//! counts per kind, the bounded findings and `clean`. The file is the canonical JSON of the
//! document (sorted keys, compact) with `report_digest` over everything else, computed the way
//! gate evidence and the candidate digest are (a `digest_schema` wrapper, canonical bytes,
//! sha256).
//!
//! A finding names a rule, a kind, the changed file (its index in `changed_files` and its path)
//! and a 1-based post-image line; it never carries the matched value. When a secret rule matched
//! a created file's *name*, that file's path is withheld from every one of its findings.

use serde::{Deserialize, Serialize};
use snapshot::RepoPath;
use vocab::{Sha256, canonical_bytes, domain_digest};

use crate::error::PolicyError;

/// The report schema id.
pub const POLICY_REPORT_SCHEMA: &str = "patch_candidate.policy_report.v1";
/// The digest schema id of policy reports.
pub const POLICY_REPORT_DIGEST_SCHEMA: &str = "patch_candidate.policy_report_digest.v1";
/// Most findings one report lists (the counts are always exact).
pub const MAX_FINDINGS: usize = 1000;
/// Most findings listed for one changed file.
pub const MAX_FINDINGS_PER_FILE: usize = 100;
/// Largest report file accepted by [`parse_report`].
const MAX_REPORT_BYTES: usize = 1024 * 1024;

/// What a finding is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// A secret rule matched an added line or a created file's name.
    Secret,
    /// A default-ignorable code point (bidi, zero-width, tag, variation selector, other invisible)
    /// or a terminal escape in an added line or a name.
    HiddenText,
    /// A created file that is an executable or script (by name or by its first bytes).
    Executable,
    /// A created file that is binary (by name) or content carrying NUL.
    Binary,
    /// A change (any operation) to CI or build configuration.
    CiConfig,
}

impl FindingKind {
    /// The wire name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Secret => "secret",
            Self::HiddenText => "hidden_text",
            Self::Executable => "executable",
            Self::Binary => "binary",
            Self::CiConfig => "ci_config",
        }
    }

    /// The fixed severity of the kind: secrets and hidden text are `high`, the rest `medium`.
    #[must_use]
    pub fn severity(self) -> Severity {
        match self {
            Self::Secret | Self::HiddenText => Severity::High,
            Self::Executable | Self::Binary | Self::CiConfig => Severity::Medium,
        }
    }
}

/// How much a finding matters to a reviewer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    High,
    Medium,
}

/// One finding: rule, kind, file, line, severity; never the matched value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Finding {
    pub rule_id: String,
    pub kind: FindingKind,
    /// Index of the file in the candidate's `changed_files`.
    pub file_index: u32,
    /// The file's path; `None` when a secret rule matched the name itself (withheld).
    pub path: Option<String>,
    /// 1-based line in the post-image; `None` for a finding about the file (its name, its
    /// operation on a CI path).
    pub line: Option<u64>,
    pub severity: Severity,
}

/// Exact finding counts per kind (listed or not).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KindCounts {
    pub secret: u64,
    pub hidden_text: u64,
    pub executable: u64,
    pub binary: u64,
    pub ci_config: u64,
}

impl KindCounts {
    /// The sum over every kind.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.secret
            .saturating_add(self.hidden_text)
            .saturating_add(self.executable)
            .saturating_add(self.binary)
            .saturating_add(self.ci_config)
    }

    pub(crate) fn bump(&mut self, kind: FindingKind) {
        let slot = match kind {
            FindingKind::Secret => &mut self.secret,
            FindingKind::HiddenText => &mut self.hidden_text,
            FindingKind::Executable => &mut self.executable,
            FindingKind::Binary => &mut self.binary,
            FindingKind::CiConfig => &mut self.ci_config,
        };
        *slot = slot.saturating_add(1);
    }
}

/// One policy report (everything but its own digest).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyReport {
    pub schema: String,
    /// The digest of the scanned candidate (`repository_patch_digest`).
    pub candidate_digest: Sha256,
    /// The rule file's `version`.
    pub rules_version: String,
    /// SHA-256 of the rule file's exact bytes.
    pub rules_sha256: Sha256,
    /// Changed files looked at (every file: deletes are checked against the CI list).
    pub files_scanned: u64,
    /// Added lines scanned, over every file.
    pub added_lines_scanned: u64,
    pub counts: KindCounts,
    /// Findings in all, listed or not (equals `counts.total()`).
    pub findings_total: u64,
    /// At most [`MAX_FINDINGS`] findings, at most [`MAX_FINDINGS_PER_FILE`] per file, in file
    /// order, then file-level findings before line findings, lines ascending.
    pub findings: Vec<Finding>,
    /// Some findings are counted but not listed.
    pub truncated: bool,
    /// No finding of any kind.
    pub clean: bool,
}

/// A parsed report file: the document and its checked digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyReportFile {
    pub report: PolicyReport,
    pub digest: Sha256,
}

fn report_error(detail: &'static str) -> PolicyError {
    PolicyError::Report { detail }
}

impl PolicyReport {
    fn value(&self) -> Result<serde_json::Value, PolicyError> {
        serde_json::to_value(self).map_err(|_| report_error("the report does not encode"))
    }

    /// The report digest (`patch_candidate.policy_report_digest.v1`).
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_POLICY_REPORT` when the document does not encode.
    pub fn digest(&self) -> Result<Sha256, PolicyError> {
        Ok(domain_digest(
            POLICY_REPORT_DIGEST_SCHEMA,
            "report",
            &self.value()?,
        ))
    }

    /// The file bytes: canonical JSON with `report_digest`, and that digest.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_POLICY_REPORT` when the document does not encode.
    pub fn to_file_bytes(&self) -> Result<(Vec<u8>, Sha256), PolicyError> {
        let digest = self.digest()?;
        let mut value = self.value()?;
        if let serde_json::Value::Object(map) = &mut value {
            map.insert(
                "report_digest".to_owned(),
                serde_json::Value::String(digest.to_string()),
            );
        }
        Ok((canonical_bytes(&value), digest))
    }

    /// Internal consistency: literals, counts against the list, bounds, order, severities.
    fn check(&self) -> Result<(), PolicyError> {
        if self.schema != POLICY_REPORT_SCHEMA {
            return Err(report_error("unknown schema"));
        }
        if self.rules_version.is_empty() {
            return Err(report_error("rules_version is empty"));
        }
        if self.findings_total != self.counts.total() {
            return Err(report_error("findings_total differs from the counts"));
        }
        if self.findings.len() > MAX_FINDINGS || self.findings.len() as u64 > self.findings_total {
            return Err(report_error("the finding list exceeds its bound"));
        }
        if self.truncated != ((self.findings.len() as u64) < self.findings_total) {
            return Err(report_error("truncated disagrees with the counts"));
        }
        if self.clean != (self.findings_total == 0) {
            return Err(report_error("clean disagrees with the counts"));
        }
        let mut listed = KindCounts::default();
        let mut per_file = 0_usize;
        let mut previous: Option<&Finding> = None;
        for finding in &self.findings {
            listed.bump(finding.kind);
            if finding.severity != finding.kind.severity() {
                return Err(report_error("a finding's severity differs from its kind's"));
            }
            if u64::from(finding.file_index) >= self.files_scanned
                || finding.line == Some(0)
                || finding.rule_id.is_empty()
            {
                return Err(report_error("a finding names no scanned file or line"));
            }
            if let Some(path) = &finding.path
                && RepoPath::parse(path).is_err()
            {
                return Err(report_error("a finding's path is not a repository path"));
            }
            match previous {
                Some(p) if p.file_index == finding.file_index => {
                    if p.line > finding.line || p.path != finding.path {
                        return Err(report_error("findings are out of order"));
                    }
                    per_file += 1;
                }
                Some(p) if p.file_index > finding.file_index => {
                    return Err(report_error("findings are out of order"));
                }
                _ => per_file = 1,
            }
            if per_file > MAX_FINDINGS_PER_FILE {
                return Err(report_error("a file lists more findings than its bound"));
            }
            previous = Some(finding);
        }
        let within = [
            (listed.secret, self.counts.secret),
            (listed.hidden_text, self.counts.hidden_text),
            (listed.executable, self.counts.executable),
            (listed.binary, self.counts.binary),
            (listed.ci_config, self.counts.ci_config),
        ];
        if within.iter().any(|(l, c)| l > c) {
            return Err(report_error("more findings listed than counted"));
        }
        Ok(())
    }
}

/// Parses a report file strictly: the canonical spelling only, the known fields only, a
/// recomputed `report_digest` equal to the recorded one, and the internal rules.
///
/// # Errors
/// `PATCH_CANDIDATE_POLICY_REPORT`; `PATCH_CANDIDATE_POLICY_BINDING` when the recorded digest
/// does not match the document.
pub fn parse_report(bytes: &[u8]) -> Result<PolicyReportFile, PolicyError> {
    let mut map: serde_json::Map<String, serde_json::Value> =
        vocab::from_slice_strict(bytes, MAX_REPORT_BYTES)
            .map_err(|_| report_error("the report is not strict JSON"))?;
    let recorded = match map.remove("report_digest") {
        Some(serde_json::Value::String(s)) => s
            .parse::<Sha256>()
            .map_err(|_| report_error("report_digest is not a digest"))?,
        _ => return Err(report_error("report_digest is missing")),
    };
    let report: PolicyReport = serde_json::from_value(serde_json::Value::Object(map))
        .map_err(|_| report_error("the document does not match the schema"))?;
    report.check()?;
    let (again, digest) = report.to_file_bytes()?;
    if digest != recorded {
        return Err(PolicyError::Binding {
            detail: "report_digest does not match the document",
        });
    }
    if again != bytes {
        return Err(report_error("the file is not in canonical form"));
    }
    Ok(PolicyReportFile { report, digest })
}
