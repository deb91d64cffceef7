//! `RepositoryPatchFile` and `RepositoryPatchCandidate` (`mozaiks.refinement.repository_patch.v2`,
//! reference §9.1–§9.2). Field order is the JSON order. Values are built only by the finalizer or by
//! strict parsing ([`validate_candidate_json`]), which checks literals, the per-operation presence
//! rule, the file count, canonical paths and hash spelling.

use serde::{Deserialize, Serialize};
use snapshot::{FileOp, RepoPath, SnapshotError};
use vocab::{Sha256, from_slice_strict};

use crate::error::FinalizeError;

/// The candidate schema id.
pub const REPOSITORY_PATCH_SCHEMA_VERSION: &str = "mozaiks.refinement.repository_patch.v2";
/// The only write-back mode: the candidate is an external patch, never applied here.
pub const WRITE_BACK_MODE: &str = "external_patch";
/// Candidates are always produced unvalidated.
pub const VALIDATION_STATE: &str = "pending";
/// The host-derived rationale of every candidate.
pub const CANDIDATE_RATIONALE: &str =
    "Derived from approved snapshot and host-verified workspace bytes; validation pending.";

/// Most changed files one candidate may carry (the repository budget).
pub const MAX_CANDIDATE_FILES: usize = 50;
/// Largest candidate JSON document accepted by [`validate_candidate_json`]: the 64 MiB digest
/// budget plus room for pretty-printing whitespace.
pub const MAX_CANDIDATE_JSON_BYTES: usize = 96 * 1024 * 1024;

/// One changed file. Presence rule: `create` has (new hash, content), `update` has (previous hash,
/// new hash, content), `delete` has only the previous hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawPatchFile")]
pub struct RepositoryPatchFile {
    path: RepoPath,
    op: FileOp,
    previous_sha256: Option<Sha256>,
    new_sha256: Option<Sha256>,
    content: Option<String>,
    diff: String,
}

fn presence_matches(op: FileOp, previous: bool, new: bool, content: bool) -> bool {
    matches!(
        (op, previous, new, content),
        (FileOp::Create, false, true, true)
            | (FileOp::Update, true, true, true)
            | (FileOp::Delete, true, false, false)
    )
}

const PRESENCE: &str = "repository patch hashes and content do not match operation";

impl RepositoryPatchFile {
    /// Builds a file entry, enforcing the presence rule.
    ///
    /// # Errors
    /// `REPOSITORY_PATCH_DIGEST_INPUT` when hashes and content do not match the operation.
    pub fn new(
        path: RepoPath,
        op: FileOp,
        previous_sha256: Option<Sha256>,
        new_sha256: Option<Sha256>,
        content: Option<String>,
        diff: String,
    ) -> Result<Self, FinalizeError> {
        if !presence_matches(
            op,
            previous_sha256.is_some(),
            new_sha256.is_some(),
            content.is_some(),
        ) {
            return Err(FinalizeError::input(PRESENCE));
        }
        Ok(Self {
            path,
            op,
            previous_sha256,
            new_sha256,
            content,
            diff,
        })
    }

    #[must_use]
    pub fn path(&self) -> &RepoPath {
        &self.path
    }
    #[must_use]
    pub fn op(&self) -> FileOp {
        self.op
    }
    #[must_use]
    pub fn previous_sha256(&self) -> Option<&Sha256> {
        self.previous_sha256.as_ref()
    }
    #[must_use]
    pub fn new_sha256(&self) -> Option<&Sha256> {
        self.new_sha256.as_ref()
    }
    #[must_use]
    pub fn content(&self) -> Option<&str> {
        self.content.as_deref()
    }
    #[must_use]
    pub fn diff(&self) -> &str {
        &self.diff
    }
}

/// The digested, reviewable patch candidate. Literal fields (`schema_version`, `write_back_mode`,
/// `validation_state`, `mutation_allowed`) are fixed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawCandidate")]
pub struct RepositoryPatchCandidate {
    schema_version: &'static str,
    write_back_mode: &'static str,
    validation_state: &'static str,
    mutation_allowed: bool,
    handoff_id: String,
    request_id: String,
    plan_id: String,
    app_id: String,
    build_registry_id: String,
    repository_full_name: String,
    baseline_commit_sha: String,
    approved_plan_digest: String,
    snapshot_digest: String,
    proposal_id: String,
    provider_id: String,
    summary: String,
    rationale: String,
    changed_files: Vec<RepositoryPatchFile>,
    required_validation_gates: Vec<String>,
    required_security_gates: Vec<String>,
    required_ci_checks: Vec<String>,
    /// Set only by the finalizer, which derived every `new_sha256` from the very bytes in
    /// `content`; not serialised, and ignored by equality.
    #[serde(skip)]
    hashes_derived: HashesDerived,
}

/// Whether the content hashes were computed in this process from the content itself. Equality
/// ignores it: two candidates with the same fields are the same candidate.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct HashesDerived(pub(crate) bool);

impl PartialEq for HashesDerived {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for HashesDerived {}

/// The identity and text fields of a candidate, in schema order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CandidateFields {
    pub handoff_id: String,
    pub request_id: String,
    pub plan_id: String,
    pub app_id: String,
    pub build_registry_id: String,
    pub repository_full_name: String,
    pub baseline_commit_sha: String,
    pub approved_plan_digest: String,
    pub snapshot_digest: String,
    pub proposal_id: String,
    pub provider_id: String,
    pub summary: String,
    pub rationale: String,
    pub required_validation_gates: Vec<String>,
    pub required_security_gates: Vec<String>,
    pub required_ci_checks: Vec<String>,
}

impl RepositoryPatchCandidate {
    /// Assembles a candidate from typed files.
    ///
    /// # Errors
    /// `REPOSITORY_PATCH_DIGEST_INPUT` unless there are 1 to 50 changed files.
    pub fn new(
        fields: CandidateFields,
        changed_files: Vec<RepositoryPatchFile>,
    ) -> Result<Self, FinalizeError> {
        if !(1..=MAX_CANDIDATE_FILES).contains(&changed_files.len()) {
            return Err(FinalizeError::input("invalid candidate or file count"));
        }
        let CandidateFields {
            handoff_id,
            request_id,
            plan_id,
            app_id,
            build_registry_id,
            repository_full_name,
            baseline_commit_sha,
            approved_plan_digest,
            snapshot_digest,
            proposal_id,
            provider_id,
            summary,
            rationale,
            required_validation_gates,
            required_security_gates,
            required_ci_checks,
        } = fields;
        Ok(Self {
            schema_version: REPOSITORY_PATCH_SCHEMA_VERSION,
            write_back_mode: WRITE_BACK_MODE,
            validation_state: VALIDATION_STATE,
            mutation_allowed: false,
            handoff_id,
            request_id,
            plan_id,
            app_id,
            build_registry_id,
            repository_full_name,
            baseline_commit_sha,
            approved_plan_digest,
            snapshot_digest,
            proposal_id,
            provider_id,
            summary,
            rationale,
            changed_files,
            required_validation_gates,
            required_security_gates,
            required_ci_checks,
            hashes_derived: HashesDerived(false),
        })
    }

    /// Marks the content hashes as derived from the content in this process (finalizer only).
    #[cfg(feature = "effects")]
    pub(crate) fn with_derived_hashes(mut self) -> Self {
        self.hashes_derived = HashesDerived(true);
        self
    }

    pub(crate) fn hashes_derived(&self) -> bool {
        self.hashes_derived.0
    }

    #[must_use]
    pub fn schema_version(&self) -> &str {
        self.schema_version
    }
    #[must_use]
    pub fn write_back_mode(&self) -> &str {
        self.write_back_mode
    }
    #[must_use]
    pub fn validation_state(&self) -> &str {
        self.validation_state
    }
    #[must_use]
    pub fn mutation_allowed(&self) -> bool {
        self.mutation_allowed
    }
    #[must_use]
    pub fn handoff_id(&self) -> &str {
        &self.handoff_id
    }
    #[must_use]
    pub fn request_id(&self) -> &str {
        &self.request_id
    }
    #[must_use]
    pub fn plan_id(&self) -> &str {
        &self.plan_id
    }
    #[must_use]
    pub fn app_id(&self) -> &str {
        &self.app_id
    }
    #[must_use]
    pub fn build_registry_id(&self) -> &str {
        &self.build_registry_id
    }
    #[must_use]
    pub fn repository_full_name(&self) -> &str {
        &self.repository_full_name
    }
    #[must_use]
    pub fn baseline_commit_sha(&self) -> &str {
        &self.baseline_commit_sha
    }
    #[must_use]
    pub fn approved_plan_digest(&self) -> &str {
        &self.approved_plan_digest
    }
    #[must_use]
    pub fn snapshot_digest(&self) -> &str {
        &self.snapshot_digest
    }
    #[must_use]
    pub fn proposal_id(&self) -> &str {
        &self.proposal_id
    }
    #[must_use]
    pub fn provider_id(&self) -> &str {
        &self.provider_id
    }
    #[must_use]
    pub fn summary(&self) -> &str {
        &self.summary
    }
    #[must_use]
    pub fn rationale(&self) -> &str {
        &self.rationale
    }
    #[must_use]
    pub fn changed_files(&self) -> &[RepositoryPatchFile] {
        &self.changed_files
    }
    #[must_use]
    pub fn required_validation_gates(&self) -> &[String] {
        &self.required_validation_gates
    }
    #[must_use]
    pub fn required_security_gates(&self) -> &[String] {
        &self.required_security_gates
    }
    #[must_use]
    pub fn required_ci_checks(&self) -> &[String] {
        &self.required_ci_checks
    }

    /// The candidate as pretty JSON in schema field order (the stored and printed form).
    ///
    /// # Errors
    /// `REPOSITORY_PATCH_DIGEST_INPUT` if serialisation fails (it cannot for valid values).
    pub fn to_json_pretty(&self) -> Result<Vec<u8>, FinalizeError> {
        let mut out = serde_json::to_vec_pretty(self)
            .map_err(|_| FinalizeError::input("candidate could not be serialised"))?;
        out.push(b'\n');
        Ok(out)
    }
}

/// Untyped form of [`RepositoryPatchFile`]: every check happens in the conversion.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPatchFile {
    path: String,
    #[serde(default = "default_op")]
    op: FileOp,
    #[serde(default)]
    previous_sha256: Option<String>,
    #[serde(default)]
    new_sha256: Option<String>,
    #[serde(default)]
    content: Option<String>,
    diff: String,
}

fn default_op() -> FileOp {
    FileOp::Update
}

impl TryFrom<RawPatchFile> for RepositoryPatchFile {
    type Error = FinalizeError;

    fn try_from(raw: RawPatchFile) -> Result<Self, Self::Error> {
        if !presence_matches(
            raw.op,
            raw.previous_sha256.is_some(),
            raw.new_sha256.is_some(),
            raw.content.is_some(),
        ) {
            return Err(FinalizeError::input(PRESENCE));
        }
        typed_file(raw)
    }
}

fn parse_hash(text: Option<String>) -> Result<Option<Sha256>, FinalizeError> {
    text.map(|t| t.parse::<Sha256>())
        .transpose()
        .map_err(|_| FinalizeError::DigestHash {
            detail: "invalid file hash",
        })
}

fn typed_file(raw: RawPatchFile) -> Result<RepositoryPatchFile, FinalizeError> {
    let path = RepoPath::parse(&raw.path)
        .map_err(|r| FinalizeError::Snapshot(SnapshotError::unsafe_path(&raw.path, r)))?;
    Ok(RepositoryPatchFile {
        path,
        op: raw.op,
        previous_sha256: parse_hash(raw.previous_sha256)?,
        new_sha256: parse_hash(raw.new_sha256)?,
        content: raw.content,
        diff: raw.diff,
    })
}

fn default_schema() -> String {
    REPOSITORY_PATCH_SCHEMA_VERSION.to_owned()
}
fn default_mode() -> String {
    WRITE_BACK_MODE.to_owned()
}
fn default_state() -> String {
    VALIDATION_STATE.to_owned()
}

/// Untyped form of [`RepositoryPatchCandidate`] (unknown keys rejected).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCandidate {
    #[serde(default = "default_schema")]
    schema_version: String,
    #[serde(default = "default_mode")]
    write_back_mode: String,
    #[serde(default = "default_state")]
    validation_state: String,
    #[serde(default)]
    mutation_allowed: bool,
    handoff_id: String,
    request_id: String,
    plan_id: String,
    app_id: String,
    build_registry_id: String,
    repository_full_name: String,
    baseline_commit_sha: String,
    approved_plan_digest: String,
    snapshot_digest: String,
    proposal_id: String,
    provider_id: String,
    summary: String,
    rationale: String,
    changed_files: Vec<RawPatchFile>,
    required_validation_gates: Vec<String>,
    required_security_gates: Vec<String>,
    required_ci_checks: Vec<String>,
}

impl TryFrom<RawCandidate> for RepositoryPatchCandidate {
    type Error = FinalizeError;

    /// Checks in the reference digest order: literals, the presence rule of every file, the file
    /// count, then each file's path and hash spelling.
    fn try_from(raw: RawCandidate) -> Result<Self, Self::Error> {
        if raw.schema_version != REPOSITORY_PATCH_SCHEMA_VERSION
            || raw.write_back_mode != WRITE_BACK_MODE
            || raw.validation_state != VALIDATION_STATE
            || raw.mutation_allowed
        {
            return Err(FinalizeError::input("invalid candidate"));
        }
        if !raw.changed_files.iter().all(|f| {
            presence_matches(
                f.op,
                f.previous_sha256.is_some(),
                f.new_sha256.is_some(),
                f.content.is_some(),
            )
        }) {
            return Err(FinalizeError::input(PRESENCE));
        }
        if !(1..=MAX_CANDIDATE_FILES).contains(&raw.changed_files.len()) {
            return Err(FinalizeError::input("invalid candidate or file count"));
        }
        let files = raw
            .changed_files
            .into_iter()
            .map(typed_file)
            .collect::<Result<Vec<_>, _>>()?;
        Self::new(
            CandidateFields {
                handoff_id: raw.handoff_id,
                request_id: raw.request_id,
                plan_id: raw.plan_id,
                app_id: raw.app_id,
                build_registry_id: raw.build_registry_id,
                repository_full_name: raw.repository_full_name,
                baseline_commit_sha: raw.baseline_commit_sha,
                approved_plan_digest: raw.approved_plan_digest,
                snapshot_digest: raw.snapshot_digest,
                proposal_id: raw.proposal_id,
                provider_id: raw.provider_id,
                summary: raw.summary,
                rationale: raw.rationale,
                required_validation_gates: raw.required_validation_gates,
                required_security_gates: raw.required_security_gates,
                required_ci_checks: raw.required_ci_checks,
            },
            files,
        )
    }
}

/// Parses a candidate document strictly (UTF-8, no BOM, no duplicate keys, no unknown fields,
/// bounded size) and checks its structure. Content hashes and path collisions are checked by
/// [`crate::repository_patch_digest`].
///
/// # Errors
/// `REPOSITORY_PATCH_DIGEST_INPUT` (malformed document, wrong literals, presence rule, file count),
/// `REPOSITORY_PATCH_UNSAFE_PATH`, `REPOSITORY_PATCH_DIGEST_HASH` (hash spelling).
pub fn validate_candidate_json(bytes: &[u8]) -> Result<RepositoryPatchCandidate, FinalizeError> {
    let raw: RawCandidate = from_slice_strict(bytes, MAX_CANDIDATE_JSON_BYTES)
        .map_err(|e| FinalizeError::input(format!("invalid candidate document: {e}")))?;
    RepositoryPatchCandidate::try_from(raw)
}

#[cfg(test)]
#[path = "model_tests.rs"]
mod tests;
