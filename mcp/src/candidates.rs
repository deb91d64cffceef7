//! Pipeline reads: candidates from the store bound at startup (digest-verified by the finalizer),
//! candidate files and workspace archives inside the workspace (strict readers only; nothing is
//! extracted, staged or written).

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use vocab::Sha256;

use std::path::Path;

use cap_std::fs::Dir;

use crate::budget::{self, Work};
use crate::envelope::Diagnostic;
use crate::error::McpError;
use crate::workspace::{self, RequestPath, Workspace};

/// Largest stored candidate `list_patch_candidates` verifies inline; larger ones are listed with
/// `error_code: "not_verified"` (`get_patch_candidate` verifies them).
pub const MAX_LIST_VERIFY_BYTES: u64 = 256 * 1024;
/// Most candidate bytes one `list_patch_candidates` answer reads in total; the rest are listed
/// with `error_code: "not_verified"`.
pub const MAX_LIST_VERIFY_TOTAL_BYTES: u64 = 16 * 1024 * 1024;
/// Largest stored candidate `get_patch_candidate` serves (its answer carries the diffs twice).
pub const MAX_SERVED_CANDIDATE_BYTES: u64 = 1024 * 1024;
/// Largest candidate file `verify_patch_candidate` reads from the workspace.
pub const MAX_VERIFIED_CANDIDATE_BYTES: u64 = 8 * 1024 * 1024;
/// Most store entries scanned before listing is refused (`too_large`).
pub const MAX_STORE_SCAN: u64 = 1_000_000;

/// The candidate store bound at startup, read-only: listing reads directory entries only, and
/// every candidate is opened once with `O_NOFOLLOW | O_NONBLOCK` and checked on the handle
/// (regular file, size) before a byte is read.
#[derive(Debug)]
pub struct Store {
    dir: Dir,
}

/// One listed store entry (from the directory entry, nothing opened).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct StoreEntry {
    digest: Sha256,
    regular: bool,
}

impl Store {
    /// Opens an existing store directory; never creates anything. A symbolic link at `dir` is
    /// refused.
    ///
    /// # Errors
    /// `candidate_store_not_configured` when `dir` is not an existing directory.
    pub fn open_existing(dir: &Path) -> Result<Self, McpError> {
        if !std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) {
            return Err(McpError::CandidateStoreNotConfigured);
        }
        let dir = Dir::open_ambient_dir(dir, cap_std::ambient_authority())
            .map_err(|_| McpError::CandidateStoreNotConfigured)?;
        Ok(Self { dir })
    }

    /// The first `max` entries named `<64 hex>.json` after `after`, by digest, and how many such
    /// entries the store holds. Reads directory entries only.
    fn entries(&self, max: usize) -> Result<(Vec<StoreEntry>, u64), McpError> {
        let mut kept = std::collections::BinaryHeap::new();
        let mut total = 0u64;
        let mut scanned = 0u64;
        for entry in self.dir.entries().map_err(|e| McpError::io(&e))? {
            scanned += 1;
            if scanned > MAX_STORE_SCAN {
                return Err(McpError::TooLarge {
                    what: "candidate store entries".into(),
                    limit: MAX_STORE_SCAN,
                });
            }
            let entry = entry.map_err(|e| McpError::io(&e))?;
            let name = entry.file_name();
            let Some(digest) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".json"))
                .and_then(|hex| Sha256::from_bare_hex(hex).ok())
            else {
                continue;
            };
            let regular = entry.file_type().is_ok_and(|t| t.is_file());
            total += 1;
            kept.push(StoreEntry { digest, regular });
            if kept.len() > max {
                kept.pop();
            }
        }
        Ok((kept.into_sorted_vec(), total))
    }

    fn name(digest: &Sha256) -> String {
        format!("{}.json", digest.bare_hex())
    }

    /// Whether a candidate is filed under `digest` (one lookup, nothing opened).
    fn contains(&self, digest: &Sha256) -> bool {
        self.dir.symlink_metadata(Self::name(digest)).is_ok()
    }

    /// Reads, re-validates and digest-checks the candidate filed under `digest`, refusing files
    /// over `max` bytes before reading them.
    fn get(
        &self,
        digest: &Sha256,
        max: u64,
    ) -> Result<(finalizer::RepositoryPatchCandidate, u64), McpError> {
        let name = Self::name(digest);
        let file = workspace::open_regular(&self.dir, &name, true).map_err(|e| match e {
            McpError::NotFound { .. } => McpError::NotFound {
                path: digest.to_string(),
            },
            McpError::NotAFile { .. } => McpError::NotAFile {
                path: digest.to_string(),
            },
            McpError::PermissionDenied { .. } => McpError::PermissionDenied {
                path: digest.to_string(),
            },
            other => other,
        })?;
        let bytes = workspace::read_bounded(file, &digest.to_string(), max)?;
        let size = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        let _budget = budget::reserve(Work::Candidate, size);
        let candidate =
            finalizer::validate_candidate_json(&bytes).map_err(|e| candidate_error(&e))?;
        let actual =
            finalizer::repository_patch_digest(&candidate).map_err(|e| candidate_error(&e))?;
        if actual != *digest {
            return Err(McpError::InvalidCandidate {
                upstream_code: "REPOSITORY_PATCH_STORE_DIGEST".into(),
            });
        }
        Ok((candidate, size))
    }
}

/// One changed file of a candidate, without its content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CandidateFileSummary {
    /// Repository path.
    pub path: String,
    /// `create`, `update` or `delete`.
    pub op: String,
    /// `sha256:` of the baseline bytes (update, delete).
    pub previous_sha256: Option<String>,
    /// `sha256:` of the new bytes (create, update).
    pub new_sha256: Option<String>,
}

/// The reviewable facts of a candidate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CandidateSummary {
    /// `sha256:` canonical candidate digest.
    pub digest: String,
    /// `mozaiks.refinement.repository_patch.v2`.
    pub schema_version: String,
    /// Always `pending` for candidates made here.
    pub validation_state: String,
    /// Always false.
    pub mutation_allowed: bool,
    /// App id.
    pub app_id: String,
    /// `owner/name`.
    pub repository_full_name: String,
    /// Pinned baseline commit.
    pub baseline_commit_sha: String,
    /// Plan id.
    pub plan_id: String,
    /// Request id.
    pub request_id: String,
    /// Host-written summary.
    pub summary: String,
    /// Changed files.
    pub changed_files: Vec<CandidateFileSummary>,
}

/// One row of `list_patch_candidates`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CandidateListEntry {
    /// The digest the candidate is filed under.
    pub digest: String,
    /// Whether it re-validated and its content still matches the digest.
    pub verified: bool,
    /// Stable finalizer code when not verified.
    pub error_code: Option<String>,
    /// Summary when verified.
    pub candidate: Option<CandidateSummary>,
}

/// Most candidates `list_patch_candidates` verifies and returns in one answer.
pub const MAX_LISTED_CANDIDATES: usize = 200;

/// `list_patch_candidates`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CandidateList {
    /// Candidates sorted by digest (the first [`MAX_LISTED_CANDIDATES`]).
    pub candidates: Vec<CandidateListEntry>,
    /// How many candidates the store holds.
    pub total: u64,
    /// Whether `candidates` stops short of `total`.
    pub truncated: bool,
}

/// One changed file with its unified diff.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CandidateFileDiff {
    /// Repository path.
    pub path: String,
    /// `create`, `update` or `delete`.
    pub op: String,
    /// Unified diff (`git apply` accepts it).
    pub diff: String,
}

/// `get_patch_candidate`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CandidateDetail {
    /// Summary (digest verified).
    pub summary: CandidateSummary,
    /// Per-file diffs.
    pub diffs: Vec<CandidateFileDiff>,
    /// The full candidate document (`mozaiks.refinement.repository_patch.v2`).
    pub candidate: Value,
}

/// `verify_patch_candidate`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CandidateVerification {
    /// The checked workspace-relative path.
    pub path: String,
    /// Structure valid and digest computed (failures are error envelopes).
    pub valid: bool,
    /// Canonical digest.
    pub digest: String,
    /// When the file is named `<hex>.json`: whether the name equals the digest.
    pub file_name_matches_digest: Option<bool>,
    /// When a store is bound: whether it holds this digest.
    pub stored: Option<bool>,
    /// Summary.
    pub candidate: CandidateSummary,
}

/// One archive entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ArchiveEntryInfo {
    /// Entry path (portable, canonical).
    pub path: String,
    /// Size in bytes.
    pub size_bytes: u64,
    /// `sha256:` of the entry bytes.
    pub content_sha256: String,
}

/// `inspect_workspace_archive`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ArchiveInspection {
    /// The checked workspace-relative path.
    pub path: String,
    /// `mozaiks.deterministic_archive.v1`.
    pub schema_version: String,
    /// Whether the file is the empty transport marker instead of a ZIP.
    pub empty_marker: bool,
    /// `sha256:` of the file.
    pub archive_sha256: String,
    /// File size.
    pub size_bytes: u64,
    /// Entries in archive order (empty for the marker).
    pub entries: Vec<ArchiveEntryInfo>,
    /// Sum of entry sizes.
    pub total_content_bytes: u64,
}

fn summarize(digest: &Sha256, c: &finalizer::RepositoryPatchCandidate) -> CandidateSummary {
    CandidateSummary {
        digest: digest.to_string(),
        schema_version: c.schema_version().to_owned(),
        validation_state: c.validation_state().to_owned(),
        mutation_allowed: c.mutation_allowed(),
        app_id: c.app_id().to_owned(),
        repository_full_name: c.repository_full_name().to_owned(),
        baseline_commit_sha: c.baseline_commit_sha().to_owned(),
        plan_id: c.plan_id().to_owned(),
        request_id: c.request_id().to_owned(),
        summary: c.summary().to_owned(),
        changed_files: c
            .changed_files()
            .iter()
            .map(|f| CandidateFileSummary {
                path: f.path().as_str().to_owned(),
                op: f.op().as_str().to_owned(),
                previous_sha256: f.previous_sha256().map(ToString::to_string),
                new_sha256: f.new_sha256().map(ToString::to_string),
            })
            .collect(),
    }
}

fn candidate_error(e: &finalizer::FinalizeError) -> McpError {
    McpError::InvalidCandidate {
        upstream_code: e.code().to_owned(),
    }
}

fn require_store(store: Option<&Store>) -> Result<&Store, McpError> {
    store.ok_or(McpError::CandidateStoreNotConfigured)
}

/// `list_patch_candidates`.
///
/// # Errors
/// `candidate_store_not_configured`, `invalid_candidate` when the store cannot be listed.
pub fn list(store: Option<&Store>) -> Result<(CandidateList, Vec<Diagnostic>), McpError> {
    let store = require_store(store)?;
    let (entries, total) = store.entries(MAX_LISTED_CANDIDATES)?;
    let truncated = total > u64::try_from(entries.len()).unwrap_or(u64::MAX);
    let mut read_budget = MAX_LIST_VERIFY_TOTAL_BYTES;
    let unverified = |digest: &Sha256, code: &str| CandidateListEntry {
        digest: digest.to_string(),
        verified: false,
        error_code: Some(code.to_owned()),
        candidate: None,
    };
    let mut candidates = Vec::with_capacity(entries.len());
    for entry in &entries {
        let digest = &entry.digest;
        if !entry.regular {
            candidates.push(unverified(digest, "not_a_file"));
            continue;
        }
        let max = MAX_LIST_VERIFY_BYTES.min(read_budget);
        candidates.push(match store.get(digest, max) {
            Ok((c, size)) => {
                read_budget = read_budget.saturating_sub(size.max(1));
                CandidateListEntry {
                    digest: digest.to_string(),
                    verified: true,
                    error_code: None,
                    candidate: Some(summarize(digest, &c)),
                }
            }
            Err(McpError::TooLarge { .. }) => unverified(digest, "not_verified"),
            Err(McpError::InvalidCandidate { upstream_code }) => unverified(digest, &upstream_code),
            Err(e) => unverified(digest, e.code()),
        });
    }
    let mut diagnostics = Vec::new();
    if truncated {
        diagnostics.push(Diagnostic::warning(
            "truncated",
            None,
            &format!(
                "The store holds {total} candidates; the first {} by digest are listed.",
                entries.len()
            ),
        ));
    }
    if candidates
        .iter()
        .any(|c| c.error_code.as_deref() == Some("not_verified"))
    {
        diagnostics.push(Diagnostic::warning(
            "not_verified",
            None,
            "Some candidates are larger than the listing verifies inline; get_patch_candidate verifies them.",
        ));
    }
    Ok((
        CandidateList {
            candidates,
            total,
            truncated,
        },
        diagnostics,
    ))
}

/// `get_patch_candidate`.
///
/// # Errors
/// `candidate_store_not_configured`, `invalid_arguments` (digest form), `not_found`,
/// `invalid_candidate`.
pub fn get(
    store: Option<&Store>,
    digest: &str,
) -> Result<(CandidateDetail, Vec<Diagnostic>), McpError> {
    let store = require_store(store)?;
    let digest: Sha256 = digest.parse().map_err(|_| McpError::InvalidArguments {
        reason: "digest must be sha256:<64 lowercase hex>".into(),
    })?;
    let (candidate, _) = store.get(&digest, MAX_SERVED_CANDIDATE_BYTES)?;
    let diffs = candidate
        .changed_files()
        .iter()
        .map(|f| CandidateFileDiff {
            path: f.path().as_str().to_owned(),
            op: f.op().as_str().to_owned(),
            diff: f.diff().to_owned(),
        })
        .collect();
    let value = serde_json::to_value(&candidate).map_err(|_| McpError::Io {
        kind: "Serialize".into(),
    })?;
    Ok((
        CandidateDetail {
            summary: summarize(&digest, &candidate),
            diffs,
            candidate: value,
        },
        Vec::new(),
    ))
}

/// `verify_patch_candidate`: strict structure check and canonical digest of a file in the
/// workspace.
///
/// # Errors
/// Path and read errors, `invalid_candidate` with the finalizer code.
pub fn verify(
    ws: &Workspace,
    store: Option<&Store>,
    path: &RequestPath,
) -> Result<(CandidateVerification, Vec<Diagnostic>), McpError> {
    let max = u64::try_from(finalizer::MAX_CANDIDATE_JSON_BYTES)
        .unwrap_or(u64::MAX)
        .min(MAX_VERIFIED_CANDIDATE_BYTES);
    let bytes = ws.read_file(path, max)?;
    let _budget = budget::reserve(
        Work::Candidate,
        u64::try_from(bytes.len()).unwrap_or(u64::MAX),
    );
    let candidate = finalizer::validate_candidate_json(&bytes).map_err(|e| candidate_error(&e))?;
    let digest = finalizer::repository_patch_digest(&candidate).map_err(|e| candidate_error(&e))?;
    let file_name = path.as_str().rsplit('/').next().unwrap_or_default();
    let file_name_matches_digest = file_name
        .strip_suffix(".json")
        .filter(|stem| Sha256::from_bare_hex(stem).is_ok())
        .map(|stem| stem == digest.bare_hex());
    let stored = store.map(|store| store.contains(&digest));
    Ok((
        CandidateVerification {
            path: path.as_str().to_owned(),
            valid: true,
            digest: digest.to_string(),
            file_name_matches_digest,
            stored,
            candidate: summarize(&digest, &candidate),
        },
        Vec::new(),
    ))
}

/// `inspect_workspace_archive`: the strict reader over a file in the workspace.
///
/// # Errors
/// Path and read errors (`too_large` over the archive budget), `invalid_archive` with the archive
/// code.
pub fn inspect_archive(
    ws: &Workspace,
    path: &RequestPath,
) -> Result<(ArchiveInspection, Vec<Diagnostic>), McpError> {
    let max = u64::try_from(archive::MAX_ARCHIVE_BYTES).unwrap_or(u64::MAX);
    let bytes = ws.read_file(path, max)?;
    let _budget = budget::reserve(
        Work::Archive,
        u64::try_from(bytes.len()).unwrap_or(u64::MAX),
    );
    let size_bytes = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    let archive_sha256 = archive::archive_digest(&bytes).to_string();
    if bytes == archive::EMPTY_ARCHIVE_MARKER {
        return Ok((
            ArchiveInspection {
                path: path.as_str().to_owned(),
                schema_version: archive::ARCHIVE_SCHEMA_VERSION.to_owned(),
                empty_marker: true,
                archive_sha256,
                size_bytes,
                entries: Vec::new(),
                total_content_bytes: 0,
            },
            Vec::new(),
        ));
    }
    let archive_error = |e: archive::ArchiveError| McpError::InvalidArchive {
        upstream_code: e.code().to_owned(),
    };
    archive::preflight_archive_directory(
        &bytes,
        None,
        archive::MAX_ARCHIVE_BYTES,
        Some(archive::MAX_ARCHIVE_FILES),
    )
    .map_err(archive_error)?;
    let manifest = archive::read_archive_manifest(&bytes, &archive::ArchiveLimits::default())
        .map_err(archive_error)?;
    let total_content_bytes = manifest
        .entries
        .iter()
        .map(|e| e.size_bytes)
        .fold(0u64, u64::saturating_add);
    Ok((
        ArchiveInspection {
            path: path.as_str().to_owned(),
            schema_version: manifest.schema_version().to_owned(),
            empty_marker: false,
            archive_sha256: manifest.archive_sha256.to_string(),
            size_bytes,
            entries: manifest
                .entries
                .iter()
                .map(|e| ArchiveEntryInfo {
                    path: e.path.as_str().to_owned(),
                    size_bytes: e.size_bytes,
                    content_sha256: e.content_sha256.to_string(),
                })
                .collect(),
            total_content_bytes,
        },
        Vec::new(),
    ))
}
