//! A proposal derived from a staged tree, for a change made by hand (`finalize --staged`): there
//! is no provider whose claims need checking, so the claims are read from the very bytes
//! [`crate::finalize_repository_patch`] then verifies. Nothing here is trusted more than a
//! provider's proposal: finalisation re-harvests the tree and runs every check.

use archive::{HarvestOptions, StagedWorkspace};
use snapshot::{
    ApprovedExecutionContext, FileOp, ProposalStatus, ProposedFileChange, StagedPatchProposal,
};
use vocab::Sha256;

use crate::error::FinalizeError;

/// The `provider_id` of every proposal derived from a staged tree.
pub const STAGED_TREE_PROVIDER_ID: &str = "patch-candidate.staged-tree";

/// The proposal that claims exactly what the staged tree holds against its manifests: every
/// modified, created or deleted file (with its content, decoded as finalisation decodes it), owned
/// and `completed`. Its `proposal_id` is `staged-` and 32 hex digits of a hash over the sorted
/// `(path, op, new sha256)` list, so the same tree always gives the same candidate.
///
/// Violations (links, files outside the selection, …) are left for finalisation to report with
/// its own codes; a tree without changes gives a proposal with none, which finalisation refuses
/// (`REPOSITORY_PATCH_PROPOSAL_STATUS`).
///
/// # Errors
/// The harvest's errors (`REPOSITORY_PATCH_ARCHIVE_WORKSPACE`, `REPOSITORY_PATCH_ARCHIVE_BUDGET`).
///
/// # Security
/// Reads the tree through the harvest only (no link followed, bounded in entries, depth and
/// bytes); writes nothing.
pub fn proposal_from_staged_tree(
    context: &ApprovedExecutionContext,
    workspace: &StagedWorkspace,
) -> Result<StagedPatchProposal, FinalizeError> {
    let harvest = workspace.harvest(HarvestOptions {
        allow_new_files: !context.create_paths().is_empty(),
        allow_deletes: !context.delete_paths().is_empty(),
    })?;
    let mut changed = Vec::new();
    let mut identity = String::new();
    for file in harvest.files.into_iter().filter(|f| f.modified) {
        let content = match file.op {
            FileOp::Delete => None,
            _ => file
                .content
                .map(|bytes| String::from_utf8_lossy(&bytes).into_owned()),
        };
        identity.push_str(file.path.as_str());
        identity.push('\0');
        identity.push_str(file.op.as_str());
        identity.push('\0');
        identity.push_str(&file.new_sha256.map(|h| h.to_string()).unwrap_or_default());
        identity.push('\n');
        changed.push(ProposedFileChange {
            path: file.path.as_str().to_owned(),
            op: file.op,
            content,
        });
    }
    changed.sort_by(|a, b| a.path.cmp(&b.path));
    let hex = Sha256::of(identity.as_bytes()).bare_hex();
    Ok(StagedPatchProposal {
        proposal_id: format!("staged-{}", hex.get(..32).unwrap_or(&hex)),
        provider_id: STAGED_TREE_PROVIDER_ID.to_owned(),
        provider_model: None,
        status: ProposalStatus::Completed,
        usage: None,
        summary: String::new(),
        rationale: String::new(),
        owned_paths: changed.iter().map(|c| c.path.clone()).collect(),
        changed_files: changed,
        validation_strategy_hint: None,
        validation_commands: Vec::new(),
        start_preview: false,
        needs_human_review: true,
        tool_context_loaded: false,
        error: None,
        provider_events: Vec::new(),
    })
}
