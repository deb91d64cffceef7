//! `ApprovedExecutionContext` (`managed_refinement.execution_context.v1`) and
//! `RepositorySnapshotEvidence`: the approval a host signs off and the snapshot it is bound to.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::error::SnapshotError;
use crate::path::{RepoPath, casefold, path_is_allowed, safe_artifact_relpath};
use vocab::Sha256;
use vocab::from_slice_strict;
use vocab::quote;

/// The only execution-context schema this implementation accepts.
pub const EXECUTION_CONTEXT_SCHEMA_VERSION: &str = "managed_refinement.execution_context.v1";

/// Largest approval document accepted, in bytes.
pub const MAX_CONTEXT_JSON_BYTES: usize = 1_048_576;
/// Largest snapshot evidence document accepted, in bytes (a manifest line per repository file).
pub const MAX_SNAPSHOT_JSON_BYTES: usize = 64 * 1_048_576;

fn default_schema_version() -> String {
    EXECUTION_CONTEXT_SCHEMA_VERSION.to_owned()
}

/// The wire form, before validation. Unknown keys are rejected.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExecutionContext {
    #[serde(default = "default_schema_version")]
    schema_version: String,
    handoff_id: String,
    request_id: String,
    plan_id: String,
    app_id: String,
    build_registry_id: String,
    repository_full_name: String,
    baseline_commit_sha: String,
    raw_request: String,
    request_type: String,
    approved_plan_digest: String,
    snapshot_digest: String,
    graph_identity_digest: String,
    impact_report_digest: String,
    execution_strategy_id: String,
    rationale: String,
    #[serde(default)]
    allowed_paths: Vec<String>,
    #[serde(default)]
    prohibited_paths: Vec<String>,
    #[serde(default)]
    read_only_paths: Vec<String>,
    #[serde(default)]
    create_paths: Vec<String>,
    #[serde(default)]
    delete_paths: Vec<String>,
    #[serde(default)]
    required_validation_gates: Vec<String>,
    #[serde(default)]
    required_security_gates: Vec<String>,
    #[serde(default)]
    required_ci_checks: Vec<String>,
}

/// A validated approval. Fields are private; construct with [`ApprovedExecutionContext::from_json`]
/// or `serde` deserialisation, both of which run every reference validator. Serialising gives the
/// normalised form (scopes sorted and unique), which parses back to an equal value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawExecutionContext")]
pub struct ApprovedExecutionContext {
    schema_version: String,
    handoff_id: String,
    request_id: String,
    plan_id: String,
    app_id: String,
    build_registry_id: String,
    repository_full_name: String,
    baseline_commit_sha: String,
    raw_request: String,
    request_type: String,
    approved_plan_digest: String,
    snapshot_digest: String,
    graph_identity_digest: String,
    impact_report_digest: String,
    execution_strategy_id: String,
    rationale: String,
    allowed_paths: Vec<String>,
    prohibited_paths: Vec<String>,
    read_only_paths: Vec<String>,
    create_paths: Vec<RepoPath>,
    delete_paths: Vec<RepoPath>,
    required_validation_gates: Vec<String>,
    required_security_gates: Vec<String>,
    required_ci_checks: Vec<String>,
}

fn invalid(detail: impl Into<String>) -> SnapshotError {
    SnapshotError::ContextInvalid {
        detail: detail.into(),
    }
}

fn non_empty(name: &str, value: String) -> Result<String, SnapshotError> {
    if value.is_empty() {
        return Err(invalid(format!("{name} must not be empty")));
    }
    Ok(value)
}

fn scope_list(values: Vec<String>) -> Result<Vec<String>, SnapshotError> {
    let mut out = BTreeSet::new();
    for v in values {
        let n = safe_artifact_relpath(&v)
            .ok_or_else(|| invalid(format!("unsafe execution path: {}", quote(&v))))?;
        out.insert(n);
    }
    Ok(out.into_iter().collect())
}

fn exact_list(values: Vec<String>) -> Result<Vec<RepoPath>, SnapshotError> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(values.len());
    for v in values {
        let p = RepoPath::parse(&v)
            .map_err(|_| invalid(format!("unsafe exact execution path: {}", quote(&v))))?;
        if !seen.insert(casefold(&v)) {
            return Err(invalid(format!(
                "duplicate exact execution path: {}",
                quote(&v)
            )));
        }
        out.push(p);
    }
    out.sort();
    Ok(out)
}

impl TryFrom<RawExecutionContext> for ApprovedExecutionContext {
    type Error = SnapshotError;

    fn try_from(raw: RawExecutionContext) -> Result<Self, Self::Error> {
        let sha = &raw.baseline_commit_sha;
        if sha.len() != 40 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(invalid("baseline_commit_sha must be hexadecimal"));
        }
        let pd = &raw.approved_plan_digest;
        if pd.len() != 64 || !pd.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(invalid("approved_plan_digest must be hexadecimal"));
        }
        let ctx = Self {
            schema_version: raw.schema_version,
            handoff_id: non_empty("handoff_id", raw.handoff_id)?,
            request_id: non_empty("request_id", raw.request_id)?,
            plan_id: non_empty("plan_id", raw.plan_id)?,
            app_id: non_empty("app_id", raw.app_id)?,
            build_registry_id: non_empty("build_registry_id", raw.build_registry_id)?,
            repository_full_name: non_empty("repository_full_name", raw.repository_full_name)?,
            baseline_commit_sha: raw.baseline_commit_sha,
            raw_request: non_empty("raw_request", raw.raw_request)?,
            request_type: non_empty("request_type", raw.request_type)?,
            approved_plan_digest: raw.approved_plan_digest,
            snapshot_digest: non_empty("snapshot_digest", raw.snapshot_digest)?,
            graph_identity_digest: non_empty("graph_identity_digest", raw.graph_identity_digest)?,
            impact_report_digest: non_empty("impact_report_digest", raw.impact_report_digest)?,
            execution_strategy_id: non_empty("execution_strategy_id", raw.execution_strategy_id)?,
            rationale: non_empty("rationale", raw.rationale)?,
            allowed_paths: scope_list(raw.allowed_paths)?,
            prohibited_paths: scope_list(raw.prohibited_paths)?,
            read_only_paths: scope_list(raw.read_only_paths)?,
            create_paths: exact_list(raw.create_paths)?,
            delete_paths: exact_list(raw.delete_paths)?,
            required_validation_gates: raw.required_validation_gates,
            required_security_gates: raw.required_security_gates,
            required_ci_checks: raw.required_ci_checks,
        };
        ctx.check_grants()?;
        Ok(ctx)
    }
}

impl ApprovedExecutionContext {
    /// Parses and validates an approval document: the one parser every consumer uses. The JSON is
    /// read strictly ([`vocab::from_slice_strict`]: duplicate keys, a BOM, trailing data and
    /// documents over [`MAX_CONTEXT_JSON_BYTES`] are refused), then every reference validator runs.
    ///
    /// # Errors
    /// `REPOSITORY_PATCH_CONTEXT_INVALID` with the reference validator message, or a JSON path and
    /// error kind for a malformed document (input values are never quoted).
    pub fn from_json(text: &str) -> Result<Self, SnapshotError> {
        Self::from_slice(text.as_bytes())
    }

    /// [`Self::from_json`] over bytes (a file as read).
    ///
    /// # Errors
    /// As [`Self::from_json`]; bytes that are not UTF-8 are refused.
    pub fn from_slice(bytes: &[u8]) -> Result<Self, SnapshotError> {
        let raw: RawExecutionContext = from_slice_strict(bytes, MAX_CONTEXT_JSON_BYTES)
            .map_err(|e| invalid(format!("approval: {e}")))?;
        Self::try_from(raw)
    }

    /// Grants over creates + deletes: case-fold unique, no grant a `/`-prefix of another, each
    /// allowed by the scopes.
    fn check_grants(&self) -> Result<(), SnapshotError> {
        let grants: Vec<&RepoPath> = self.create_paths.iter().chain(&self.delete_paths).collect();
        let folded: Vec<String> = grants.iter().map(|p| p.collision_key()).collect();
        let unique: BTreeSet<&String> = folded.iter().collect();
        if unique.len() != folded.len() {
            return Err(invalid("exact operation grants overlap"));
        }
        for a in &folded {
            for b in &folded {
                if a != b
                    && b.strip_prefix(a.as_str())
                        .is_some_and(|r| r.starts_with('/'))
                {
                    return Err(invalid("exact operation grants overlap"));
                }
            }
        }
        for g in grants {
            if !path_is_allowed(
                g.as_str(),
                &self.allowed_paths,
                &self.prohibited_paths,
                &self.read_only_paths,
            ) {
                return Err(invalid(format!(
                    "exact operation path is outside approved scope: {}",
                    quote(g.as_str())
                )));
            }
        }
        Ok(())
    }

    /// `schema_version` as given (consumers check it).
    #[must_use]
    pub fn schema_version(&self) -> &str {
        &self.schema_version
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
    pub fn raw_request(&self) -> &str {
        &self.raw_request
    }
    #[must_use]
    pub fn request_type(&self) -> &str {
        &self.request_type
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
    pub fn graph_identity_digest(&self) -> &str {
        &self.graph_identity_digest
    }
    #[must_use]
    pub fn impact_report_digest(&self) -> &str {
        &self.impact_report_digest
    }
    #[must_use]
    pub fn execution_strategy_id(&self) -> &str {
        &self.execution_strategy_id
    }
    #[must_use]
    pub fn rationale(&self) -> &str {
        &self.rationale
    }
    /// Allowed scopes, normalised, sorted and unique.
    #[must_use]
    pub fn allowed_paths(&self) -> &[String] {
        &self.allowed_paths
    }
    #[must_use]
    pub fn prohibited_paths(&self) -> &[String] {
        &self.prohibited_paths
    }
    #[must_use]
    pub fn read_only_paths(&self) -> &[String] {
        &self.read_only_paths
    }
    /// Exact create grants, sorted.
    #[must_use]
    pub fn create_paths(&self) -> &[RepoPath] {
        &self.create_paths
    }
    /// Exact delete grants, sorted.
    #[must_use]
    pub fn delete_paths(&self) -> &[RepoPath] {
        &self.delete_paths
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

    /// Reference `_path_is_allowed` against this approval's scopes.
    #[must_use]
    pub fn path_is_allowed(&self, path: &str) -> bool {
        path_is_allowed(
            path,
            &self.allowed_paths,
            &self.prohibited_paths,
            &self.read_only_paths,
        )
    }
}

/// Test and tooling constructor: the validated context from a JSON value, through the same
/// parser as [`ApprovedExecutionContext::from_json`].
///
/// # Errors
/// As [`ApprovedExecutionContext::from_json`].
pub fn context_from_value(
    value: serde_json::Value,
) -> Result<ApprovedExecutionContext, SnapshotError> {
    let bytes = serde_json::to_vec(&value).map_err(|_| invalid("approval is not serialisable"))?;
    ApprovedExecutionContext::from_slice(&bytes)
}

/// The wire form of snapshot evidence, before validation. `excluded` is the optional list
/// `patch-candidate snapshot --json` adds (the tree entries left out of the manifest): it is
/// checked entry by entry and then dropped, so evidence never carries it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSnapshotEvidence {
    plan_id: String,
    request_id: String,
    app_id: String,
    repository_full_name: String,
    baseline_commit_sha: String,
    snapshot_digest: String,
    file_manifest: BTreeMap<String, String>,
    #[serde(default)]
    excluded: Option<Vec<RawExcludedEntry>>,
}

/// The wire names of the tree-entry kinds that are left out of a manifest (every kind but
/// `file`; the Git loader's test keeps this list equal to its `EntryKind`).
pub const EXCLUDED_ENTRY_KINDS: [&str; 8] = [
    "non_utf8_path",
    "non_portable_path",
    "submodule",
    "symlink",
    "executable",
    "unsupported_mode",
    "case_fold_collision",
    "non_utf8_content",
];

/// One excluded tree entry as `snapshot --json` prints it (the canonical entry form of
/// `docs/SNAPSHOT.md`); unknown keys are refused.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExcludedEntry {
    content_sha256: Option<String>,
    kind: String,
    mode: String,
    object_id: String,
    path: Option<String>,
    path_hex: String,
    size: Option<u64>,
}

/// Longest git object id (SHA-256 repositories).
const MAX_OBJECT_ID_CHARS: usize = 64;

impl RawExcludedEntry {
    /// The shape rules of an excluded entry: a known excluded kind, an octal mode, a lowercase
    /// hex object id of 40 or 64 digits, a canonical `sha256:` when present, and a lowercase hex
    /// name whose text form (when present) is exactly those bytes. Values are never quoted.
    fn check(&self, index: usize) -> Result<(), SnapshotError> {
        let bad = |what: &str| SnapshotError::SnapshotInvalid {
            detail: format!("snapshot: $.excluded[{index}]: {what}"),
        };
        if !EXCLUDED_ENTRY_KINDS.contains(&self.kind.as_str()) {
            return Err(bad("kind is not an excluded entry kind"));
        }
        if self.mode.is_empty()
            || self.mode.len() > 6
            || !self.mode.bytes().all(|b| (b'0'..=b'7').contains(&b))
        {
            return Err(bad("mode is not an octal git mode"));
        }
        let id = &self.object_id;
        if !(id.len() == 40 || id.len() == MAX_OBJECT_ID_CHARS)
            || !id.bytes().all(vocab::is_lower_hex)
        {
            return Err(bad("object_id is not a git object id"));
        }
        if let Some(hash) = &self.content_sha256 {
            hash.parse::<Sha256>()
                .map_err(|_| bad("content_sha256 is not a sha256 digest"))?;
        }
        // A blob has both; a gitlink (whose object is not in the repository) has neither.
        if self.size.is_some() != self.content_sha256.is_some() {
            return Err(bad("size and content_sha256 must be given together"));
        }
        let hex = &self.path_hex;
        if hex.is_empty() || !hex.len().is_multiple_of(2) || !hex.bytes().all(vocab::is_lower_hex) {
            return Err(bad("path_hex is not lowercase hex"));
        }
        if let Some(path) = &self.path
            && !path_hex_matches(path, hex)
        {
            return Err(bad("path differs from path_hex"));
        }
        Ok(())
    }
}

/// True when `hex` is the lowercase hex spelling of `text`'s bytes.
fn path_hex_matches(text: &str, hex: &str) -> bool {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    hex.len() == text.len() * 2
        && text
            .bytes()
            .zip(hex.as_bytes().chunks_exact(2))
            .all(|(b, pair)| {
                pair.first() == DIGITS.get(usize::from(b >> 4))
                    && pair.get(1) == DIGITS.get(usize::from(b & 0x0f))
            })
}

/// `RepositorySnapshotEvidence`: the approved snapshot's identity and its file manifest
/// (`path → sha256:` of the exact UTF-8 bytes at the pinned commit).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawSnapshotEvidence")]
pub struct RepositorySnapshotEvidence {
    plan_id: String,
    request_id: String,
    app_id: String,
    repository_full_name: String,
    baseline_commit_sha: String,
    snapshot_digest: String,
    file_manifest: BTreeMap<RepoPath, Sha256>,
}

impl TryFrom<RawSnapshotEvidence> for RepositorySnapshotEvidence {
    type Error = SnapshotError;

    fn try_from(raw: RawSnapshotEvidence) -> Result<Self, Self::Error> {
        let snap_invalid = |d: &str| SnapshotError::SnapshotInvalid {
            detail: d.to_owned(),
        };
        for (name, v) in [
            ("plan_id", &raw.plan_id),
            ("request_id", &raw.request_id),
            ("app_id", &raw.app_id),
            ("repository_full_name", &raw.repository_full_name),
            ("snapshot_digest", &raw.snapshot_digest),
        ] {
            if v.is_empty() {
                return Err(snap_invalid(&format!("{name} must not be empty")));
            }
        }
        if raw.baseline_commit_sha.chars().count() != 40 {
            return Err(snap_invalid("baseline_commit_sha must be 40 characters"));
        }
        let mut manifest = BTreeMap::new();
        for (path, hash) in raw.file_manifest {
            let p = RepoPath::parse(&path).map_err(|r| SnapshotError::unsafe_path(&path, r))?;
            let h: Sha256 = hash
                .parse()
                .map_err(|_| SnapshotError::ManifestHash { path: path.clone() })?;
            manifest.insert(p, h);
        }
        // A tree lists each path once: an excluded entry is never also a manifest file.
        for (index, entry) in raw.excluded.iter().flatten().enumerate() {
            entry.check(index)?;
            if entry
                .path
                .as_deref()
                .and_then(|p| RepoPath::parse(p).ok())
                .is_some_and(|p| manifest.contains_key(&p))
            {
                return Err(snap_invalid(&format!(
                    "snapshot: $.excluded[{index}]: path is also a manifest file"
                )));
            }
        }
        Ok(Self {
            plan_id: raw.plan_id,
            request_id: raw.request_id,
            app_id: raw.app_id,
            repository_full_name: raw.repository_full_name,
            baseline_commit_sha: raw.baseline_commit_sha,
            snapshot_digest: raw.snapshot_digest,
            file_manifest: manifest,
        })
    }
}

impl RepositorySnapshotEvidence {
    /// Builds evidence from already-typed parts (the Git snapshot loader uses this).
    ///
    /// # Errors
    /// `REPOSITORY_PATCH_SNAPSHOT_INVALID` when an identity field is empty or the commit is not
    /// 40 characters.
    pub fn new(
        plan_id: String,
        request_id: String,
        app_id: String,
        repository_full_name: String,
        baseline_commit_sha: String,
        snapshot_digest: String,
        file_manifest: BTreeMap<RepoPath, Sha256>,
    ) -> Result<Self, SnapshotError> {
        let raw = RawSnapshotEvidence {
            plan_id,
            request_id,
            app_id,
            repository_full_name,
            baseline_commit_sha,
            snapshot_digest,
            file_manifest: BTreeMap::new(),
            excluded: None,
        };
        let mut out = Self::try_from(raw)?;
        out.file_manifest = file_manifest;
        Ok(out)
    }

    /// Parses and validates an evidence document: strict JSON ([`vocab::from_slice_strict`],
    /// at most [`MAX_SNAPSHOT_JSON_BYTES`]), then every validator. The one parser every consumer
    /// uses.
    ///
    /// # Errors
    /// `REPOSITORY_PATCH_UNSAFE_PATH`, `REPOSITORY_PATCH_MANIFEST_HASH` or
    /// `REPOSITORY_PATCH_SNAPSHOT_INVALID` (a JSON path and error kind for a malformed document;
    /// input values are never quoted).
    pub fn from_json(text: &str) -> Result<Self, SnapshotError> {
        Self::from_slice(text.as_bytes())
    }

    /// [`Self::from_json`] over bytes (a file as read).
    ///
    /// # Errors
    /// As [`Self::from_json`].
    pub fn from_slice(bytes: &[u8]) -> Result<Self, SnapshotError> {
        // The raw form first, so typed errors (paths, hashes) keep their own codes.
        let raw: RawSnapshotEvidence =
            from_slice_strict(bytes, MAX_SNAPSHOT_JSON_BYTES).map_err(|e| {
                SnapshotError::SnapshotInvalid {
                    detail: format!("snapshot: {e}"),
                }
            })?;
        Self::try_from(raw)
    }

    #[must_use]
    pub fn plan_id(&self) -> &str {
        &self.plan_id
    }
    #[must_use]
    pub fn request_id(&self) -> &str {
        &self.request_id
    }
    #[must_use]
    pub fn app_id(&self) -> &str {
        &self.app_id
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
    pub fn snapshot_digest(&self) -> &str {
        &self.snapshot_digest
    }
    /// `path → sha256:` for every regular exact-UTF-8 file at the commit.
    #[must_use]
    pub fn file_manifest(&self) -> &BTreeMap<RepoPath, Sha256> {
        &self.file_manifest
    }
}

/// Reference `_verify_snapshot_identity`.
///
/// # Errors
/// `REPOSITORY_PATCH_CONTEXT_VERSION` or `REPOSITORY_PATCH_SNAPSHOT_IDENTITY`.
pub fn verify_snapshot_identity(
    context: &ApprovedExecutionContext,
    snapshot: &RepositorySnapshotEvidence,
) -> Result<(), SnapshotError> {
    if context.schema_version != EXECUTION_CONTEXT_SCHEMA_VERSION {
        return Err(SnapshotError::ContextVersion);
    }
    let same = context.plan_id == snapshot.plan_id
        && context.request_id == snapshot.request_id
        && context.app_id == snapshot.app_id
        && context.repository_full_name == snapshot.repository_full_name
        && context.baseline_commit_sha == snapshot.baseline_commit_sha
        && context.snapshot_digest == snapshot.snapshot_digest;
    if !same {
        return Err(SnapshotError::SnapshotIdentity);
    }
    Ok(())
}
