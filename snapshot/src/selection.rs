//! Selection checks shared by staging, finalisation and the Docker turn (reference §4.2, §4.3).

use std::collections::{BTreeMap, BTreeSet};

use crate::classify::{
    is_secret_contract_path, is_secret_sensitive_path, reject_env_template_path,
};
use crate::context::{
    ApprovedExecutionContext, RepositorySnapshotEvidence, verify_snapshot_identity,
};
use crate::error::SnapshotError;
use crate::guard::{CreateAbsence, PathGuard};
use crate::path::{RepoPath, has_casefold_duplicates, in_scope};
use vocab::Sha256;

/// Most editable paths (selected + create grants) one turn may carry.
pub const MAX_REPOSITORY_FILES: usize = 50;
/// Most read-only inspection files one turn may carry. The reference never published its value;
/// 45 covers the test directory and configuration of a real project (the agent runs its tests
/// in the turn), and leaves room under the archive's cap of 50 staged files, which counts
/// editable, created and read-only files together.
pub const MAX_READ_ONLY_INSPECTION_FILES: usize = 45;
/// Most bytes (UTF-8) of read-only inspection content one turn may carry: 8 MiB (within the
/// 20 MiB request budget and the workspace's 64 MiB tmpfs).
pub const MAX_READ_ONLY_INSPECTION_BYTES: usize = 8 * 1_048_576;

/// Baseline contents keyed by path (exact UTF-8 text at the pinned commit).
pub type BaselineFiles = BTreeMap<RepoPath, String>;

/// Reference `_verify_selected_baseline`: every check in the reference order. Returns the
/// expected hash of each selected path.
///
/// # Errors
/// The first failing check's `REPOSITORY_PATCH_*` error; policy errors propagate unchanged.
pub fn verify_selected_baseline(
    context: &ApprovedExecutionContext,
    snapshot: &RepositorySnapshotEvidence,
    selected_paths: &[RepoPath],
    baseline_files: &BaselineFiles,
    policy: &dyn PathGuard,
    create_absence: Option<&dyn CreateAbsence>,
) -> Result<BTreeMap<RepoPath, Sha256>, SnapshotError> {
    verify_snapshot_identity(context, snapshot)?;
    if (selected_paths.is_empty() && context.create_paths().is_empty())
        || has_casefold_duplicates(selected_paths.iter().map(RepoPath::as_str))
    {
        return Err(SnapshotError::Selection {
            detail: "selected paths must be unique and nonempty",
        });
    }
    if selected_paths.len() + context.create_paths().len() > MAX_REPOSITORY_FILES {
        return Err(SnapshotError::Selection {
            detail: "selected paths exceed repository budget",
        });
    }
    let selected: BTreeSet<&RepoPath> = selected_paths.iter().collect();
    if !context.delete_paths().iter().all(|d| selected.contains(d)) {
        return Err(SnapshotError::Grants {
            detail: "delete paths must be selected baseline files",
        });
    }
    for path in baseline_files.keys() {
        policy.validate_path(path)?;
    }
    let baseline_keys: BTreeSet<&RepoPath> = baseline_files.keys().collect();
    if baseline_keys != selected {
        return Err(SnapshotError::BaselineSet);
    }
    let manifest = snapshot.file_manifest();
    let occupied: BTreeSet<String> = manifest.keys().map(RepoPath::collision_key).collect();
    if occupied.len() < manifest.len() {
        return Err(SnapshotError::ManifestCollision);
    }
    for path in context.create_paths() {
        let p = path.as_str();
        if is_secret_sensitive_path(p) || is_secret_contract_path(p) {
            return Err(SnapshotError::SecretPath { path: p.to_owned() });
        }
        reject_env_template_path(p)?;
        if occupied.contains(&path.collision_key()) {
            return Err(SnapshotError::CreateExists { path: p.to_owned() });
        }
        policy.validate_path(path)?;
        let proof = create_absence.ok_or_else(|| SnapshotError::CreateProof {
            detail: "complete baseline tree proof is required".to_owned(),
        })?;
        proof.prove_absent(path)?;
    }
    let mut expected = BTreeMap::new();
    for path in selected_paths {
        let p = path.as_str();
        if is_secret_sensitive_path(p) {
            return Err(SnapshotError::SecretPath { path: p.to_owned() });
        }
        reject_env_template_path(p)?;
        if !in_scope(p, context.allowed_paths(), false)
            || in_scope(p, context.prohibited_paths(), true)
            || in_scope(p, context.read_only_paths(), true)
        {
            return Err(SnapshotError::Scope { path: p.to_owned() });
        }
        policy.validate_path(path)?;
        let content = baseline_files.get(path).ok_or(SnapshotError::BaselineSet)?;
        let actual = Sha256::of(content.as_bytes());
        if manifest.get(path) != Some(&actual) {
            return Err(SnapshotError::BaselineHash { path: p.to_owned() });
        }
        expected.insert(path.clone(), actual);
    }
    Ok(expected)
}

/// Reference `select_repository_read_only_files`: approved read-only inspection context. The
/// paths must lie inside an allowed **and** a read-only scope, outside prohibited scopes, pass the
/// host policy and match the snapshot; files and bytes are bounded by `max_files` / `max_bytes`
/// (each at most the module constants).
///
/// # Errors
/// `REPOSITORY_PATCH_INSPECTION_*`, `SECRET_PATH`, `ENV_TEMPLATE`, `BASELINE_HASH`, identity
/// errors, or the policy's error.
pub fn select_read_only_files(
    context: &ApprovedExecutionContext,
    snapshot: &RepositorySnapshotEvidence,
    selected_paths: &[RepoPath],
    baseline_files: &BaselineFiles,
    policy: &dyn PathGuard,
    max_files: usize,
    max_bytes: usize,
) -> Result<BaselineFiles, SnapshotError> {
    verify_snapshot_identity(context, snapshot)?;
    if !(1..=MAX_READ_ONLY_INSPECTION_FILES).contains(&max_files)
        || !(1..=MAX_READ_ONLY_INSPECTION_BYTES).contains(&max_bytes)
    {
        return Err(SnapshotError::InspectionBudget {
            detail: "invalid file or byte limit",
        });
    }
    let unique: BTreeSet<&RepoPath> = selected_paths.iter().collect();
    if selected_paths.len() > max_files || unique.len() != selected_paths.len() {
        return Err(SnapshotError::InspectionSelection);
    }
    let baseline_keys: BTreeSet<&RepoPath> = baseline_files.keys().collect();
    if baseline_keys != unique {
        return Err(SnapshotError::InspectionSet);
    }
    let mut total = 0_usize;
    for path in selected_paths {
        let p = path.as_str();
        if is_secret_sensitive_path(p) || is_secret_contract_path(p) {
            return Err(SnapshotError::SecretPath { path: p.to_owned() });
        }
        reject_env_template_path(p)?;
        if !in_scope(p, context.allowed_paths(), false)
            || !in_scope(p, context.read_only_paths(), false)
            || in_scope(p, context.prohibited_paths(), true)
        {
            return Err(SnapshotError::InspectionScope { path: p.to_owned() });
        }
        policy.validate_path(path)?;
        let content = baseline_files
            .get(path)
            .ok_or(SnapshotError::InspectionSet)?;
        if snapshot.file_manifest().get(path) != Some(&Sha256::of(content.as_bytes())) {
            return Err(SnapshotError::BaselineHash { path: p.to_owned() });
        }
        total = total.saturating_add(content.len());
        if total > max_bytes {
            return Err(SnapshotError::InspectionBudget {
                detail: "contents exceed limit",
            });
        }
    }
    Ok(baseline_files.clone())
}
