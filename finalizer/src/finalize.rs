//! `finalize_repository_patch` (reference §8): every check in the reference order, over a staged
//! workspace the host verified. It reads the staged tree and writes nothing; it runs no commands,
//! Git operations or model calls. Summary and rationale are host text.

use std::collections::{BTreeMap, BTreeSet};

use archive::{HarvestOptions, StagedWorkspace};
use snapshot::{
    ApprovedTurn, FileOp, ProposalStatus, RepoPath, SnapshotError, StagedPatchProposal,
    validate_output_text,
};
use vocab::Sha256;

use crate::derived::derived_summary;
use crate::diff::unified_diff;
use crate::error::FinalizeError;
use crate::model::{
    CANDIDATE_RATIONALE, CandidateFields, RepositoryPatchCandidate, RepositoryPatchFile,
};
use crate::parallel::map_ordered;

fn canonical(path: &str) -> Result<RepoPath, FinalizeError> {
    RepoPath::parse(path).map_err(|r| FinalizeError::Snapshot(SnapshotError::unsafe_path(path, r)))
}

/// An observed change: the operation and, unless it is a delete, the content and its hash.
/// Most violations named in a `WORKSPACE_SCOPE` message; the rest are counted.
const MAX_REPORTED_VIOLATIONS: usize = 20;

/// `kind:path, …` as in the reference, bounded in length; (possibly hostile, non-portable) names
/// are shown through [`vocab::Untrusted::bare`], so a message cannot drive a terminal, reorder
/// text with bidi controls or forge log lines.
///
/// An `outside_allowlist` path that the host's own snapshot holds is followed by why it is not
/// editable: an entry the snapshot excluded (`committed executable (100755)`, `symlink`, …) can
/// never be edited, a manifest file outside the selection is simply not granted. The kind and
/// its `kind:path` prefix stay as they were; only the host's snapshot is consulted, never the
/// staged tree's claims.
fn describe_violations(approved: &ApprovedTurn<'_>, violations: &[archive::Violation]) -> String {
    let mut parts: Vec<String> = violations
        .iter()
        .take(MAX_REPORTED_VIOLATIONS)
        .map(|v| {
            let named = format!("{}:{}", v.kind, vocab::Untrusted::bare(&v.path));
            match why_not_editable(approved, v) {
                Some(why) => format!("{named} ({why})"),
                None => named,
            }
        })
        .collect();
    if violations.len() > MAX_REPORTED_VIOLATIONS {
        parts.push(format!(
            "and {} more",
            violations.len() - MAX_REPORTED_VIOLATIONS
        ));
    }
    parts.join(", ")
}

/// Why an `outside_allowlist` path is not editable, when the host's snapshot knows the path.
fn why_not_editable(approved: &ApprovedTurn<'_>, violation: &archive::Violation) -> Option<String> {
    if violation.kind != archive::ViolationKind::OutsideAllowlist {
        return None;
    }
    if let Some(reason) = approved
        .create_absence()
        .and_then(|tree| tree.excluded_reason(&violation.path))
    {
        return Some(format!(
            "{reason}, excluded from the snapshot, never editable"
        ));
    }
    let path = RepoPath::parse(&violation.path).ok()?;
    approved
        .snapshot()
        .file_manifest()
        .contains_key(&path)
        .then(|| "in the snapshot but not editable under this approval".to_owned())
}

type Observed = (FileOp, Option<(String, Sha256)>);

/// Reference `finalize_repository_patch`, over the staged `workspace` of the turn `approved`
/// binds (its step 1, the selection checks, ran when `approved` was bound) and the provider's
/// `proposal`.
///
/// # Errors
/// The first failing check's code: `REPOSITORY_PATCH_WORKSPACE_BASELINE`, harvest
/// errors (`REPOSITORY_PATCH_ARCHIVE_*`), `REPOSITORY_PATCH_UNSAFE_PATH` / host policy errors,
/// `…_WORKSPACE_SCOPE`, `…_WORKSPACE_SET`, `…_WORKSPACE_OP`, `…_WORKSPACE_HASH`, content gates
/// (`…_ENV_TEMPLATE`, `…_SECRET_CONTRACT`), `…_PROPOSAL_STATUS`, `…_PROPOSAL_SCOPE`,
/// `…_PROPOSAL_MISMATCH`, `…_OWNERSHIP`.
///
/// # Security
/// Every byte of the candidate comes from the staged tree, checked against the approval; the
/// proposal only has to agree with it. Messages name paths and kinds, never content.
pub fn finalize_repository_patch(
    approved: &ApprovedTurn<'_>,
    workspace: &StagedWorkspace,
    proposal: &StagedPatchProposal,
) -> Result<RepositoryPatchCandidate, FinalizeError> {
    let context = approved.context();
    let policy = approved.policy();
    let baseline_files = approved.baseline();
    // 1. Approval, snapshot and baseline: checked when `approved` was bound.
    let expected = approved.expected();
    // 2. The staged tree was materialised from exactly this baseline.
    if workspace.editable_manifest() != expected {
        return Err(FinalizeError::WorkspaceBaseline);
    }
    let creates: BTreeSet<&RepoPath> = context.create_paths().iter().collect();
    let deletes: BTreeSet<&RepoPath> = context.delete_paths().iter().collect();
    let selected: BTreeSet<&RepoPath> = approved.selected().iter().collect();
    // 3. Harvest.
    let harvest = workspace.harvest(HarvestOptions {
        allow_new_files: !creates.is_empty(),
        allow_deletes: !deletes.is_empty(),
    })?;
    // 4. Every harvested and violating path is canonical and passes the host policy.
    for file in &harvest.files {
        policy.validate_path(&file.path)?;
    }
    for violation in &harvest.violations {
        policy.validate_path(&canonical(&violation.path)?)?;
    }
    // 5. No violations.
    if !harvest.violations.is_empty() {
        return Err(FinalizeError::WorkspaceScope {
            violations: describe_violations(approved, &harvest.violations),
        });
    }
    // 6. Nothing outside the selection and the create grants.
    if harvest
        .files
        .iter()
        .any(|f| !selected.contains(&f.path) && !creates.contains(&f.path))
    {
        return Err(FinalizeError::WorkspaceSet);
    }
    // 7. Per-file operation and hash rules.
    let mut recorded: BTreeMap<RepoPath, Observed> = BTreeMap::new();
    for file in harvest.files {
        let path = &file.path;
        let hash_err = || FinalizeError::WorkspaceHash {
            path: path.as_str().to_owned(),
        };
        let op_err = || FinalizeError::WorkspaceOp {
            path: path.as_str().to_owned(),
        };
        match file.op {
            FileOp::Create if !creates.contains(path) => return Err(op_err()),
            FileOp::Delete if !deletes.contains(path) => return Err(op_err()),
            _ => {}
        }
        if file.op == FileOp::Delete {
            if file.previous_sha256.as_ref() != expected.get(path)
                || file.previous_sha256.is_none()
                || file.new_sha256.is_some()
                || file.content.is_some()
                || !file.modified
            {
                return Err(hash_err());
            }
            recorded.insert(path.clone(), (FileOp::Delete, None));
            continue;
        }
        let Some(raw) = file.content else {
            return Err(op_err());
        };
        // As in the reference, bytes are decoded with replacement characters: invalid UTF-8
        // then fails the hash comparison below (`WORKSPACE_HASH`), after the content gates. A
        // lossless decode keeps the exact bytes the harvest just hashed into `new_sha256` (and
        // reuses the buffer); only a lossy one changes them and needs a fresh hash.
        let (content, h) = match String::from_utf8(raw) {
            Ok(text) => {
                let h = file
                    .new_sha256
                    .unwrap_or_else(|| Sha256::of(text.as_bytes()));
                (text, h)
            }
            Err(e) => {
                let text = String::from_utf8_lossy(e.as_bytes()).into_owned();
                let h = Sha256::of(text.as_bytes());
                (text, h)
            }
        };
        validate_output_text(path.as_str(), &content)?;
        let consistent = match file.op {
            FileOp::Create => {
                file.previous_sha256.is_none() && file.new_sha256 == Some(h) && file.modified
            }
            _ => {
                let previous = expected.get(path);
                previous.is_some()
                    && file.previous_sha256.as_ref() == previous
                    && file.new_sha256 == Some(h)
                    && file.modified == (Some(&h) != previous)
            }
        };
        if !consistent {
            return Err(hash_err());
        }
        if file.modified {
            recorded.insert(path.clone(), (file.op, Some((content, h))));
        }
    }
    // 8. A completed, non-empty edit.
    if proposal.status != ProposalStatus::Completed || recorded.is_empty() {
        return Err(FinalizeError::ProposalStatus);
    }
    // 9. The provider's claims stay inside the grants.
    let mut proposed: BTreeMap<RepoPath, (FileOp, Option<&str>)> = BTreeMap::new();
    for change in &proposal.changed_files {
        let path = canonical(&change.path)?;
        policy.validate_path(&path)?;
        let allowed = match change.op {
            FileOp::Update => expected.contains_key(&path),
            FileOp::Create => creates.contains(&path),
            FileOp::Delete => deletes.contains(&path),
        };
        if proposed.contains_key(&path) || !allowed {
            return Err(FinalizeError::ProposalScope {
                path: change.path.clone(),
            });
        }
        proposed.insert(path, (change.op, change.content.as_deref()));
    }
    // 10. The claims equal the observed bytes.
    let agrees = proposed.len() == recorded.len()
        && proposed
            .iter()
            .zip(&recorded)
            .all(|((pp, (pop, pc)), (rp, (rop, rc)))| {
                pp == rp && pop == rop && *pc == rc.as_ref().map(|(c, _)| c.as_str())
            });
    if !agrees {
        return Err(FinalizeError::ProposalMismatch);
    }
    // 11–12. Ownership claims.
    let claimed = proposal
        .owned_paths
        .iter()
        .map(|p| canonical(p))
        .collect::<Result<Vec<_>, _>>()?;
    let owned: BTreeSet<&RepoPath> = claimed.iter().collect();
    if owned.len() != claimed.len()
        || !owned
            .iter()
            .all(|p| selected.contains(p) || creates.contains(p))
    {
        return Err(FinalizeError::Ownership {
            detail: "provider claimed an unselected path",
        });
    }
    if !proposed.keys().all(|p| owned.contains(p)) {
        return Err(FinalizeError::Ownership {
            detail: "changed paths were not claimed",
        });
    }
    // 13. Changed files, sorted by path, derived from host bytes only. Diffs are independent
    // per file and computed in parallel for large turns.
    let count = recorded.len();
    let entries: Vec<(RepoPath, Observed)> = recorded.into_iter().collect();
    let work: usize = entries
        .iter()
        .map(|(p, (_, o))| {
            o.as_ref().map_or(0, |(c, _)| c.len()) + baseline_files.get(p).map_or(0, String::len)
        })
        .sum();
    let diffs = map_ordered(&entries, work, |(path, (_, observed))| {
        unified_diff(
            path.as_str(),
            baseline_files.get(path).map(String::as_str),
            observed.as_ref().map(|(c, _)| c.as_str()),
        )
    });
    let mut files = Vec::with_capacity(count);
    for ((path, (op, observed)), diff) in entries.into_iter().zip(diffs) {
        let previous = if op == FileOp::Create {
            None
        } else {
            expected.get(&path).copied()
        };
        let (content, new) = observed.map_or((None, None), |(c, h)| (Some(c), Some(h)));
        files.push(RepositoryPatchFile::new(
            path, op, previous, new, content, diff,
        )?);
    }
    // 14. The candidate.
    RepositoryPatchCandidate::new(
        CandidateFields {
            handoff_id: context.handoff_id().to_owned(),
            request_id: context.request_id().to_owned(),
            plan_id: context.plan_id().to_owned(),
            app_id: context.app_id().to_owned(),
            build_registry_id: context.build_registry_id().to_owned(),
            repository_full_name: context.repository_full_name().to_owned(),
            baseline_commit_sha: context.baseline_commit_sha().to_owned(),
            approved_plan_digest: context.approved_plan_digest().to_owned(),
            snapshot_digest: context.snapshot_digest().to_owned(),
            proposal_id: proposal.proposal_id.clone(),
            provider_id: proposal.provider_id.clone(),
            summary: derived_summary(count),
            rationale: CANDIDATE_RATIONALE.to_owned(),
            required_validation_gates: context.required_validation_gates().to_vec(),
            required_security_gates: context.required_security_gates().to_vec(),
            required_ci_checks: context.required_ci_checks().to_vec(),
        },
        files,
    )
    .map(RepositoryPatchCandidate::with_derived_hashes)
}

#[cfg(test)]
#[path = "finalize_tests.rs"]
mod tests;
