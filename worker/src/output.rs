//! The container's output contract (reference §10.6): one strict JSON object with exactly
//! `proposal` and `workspace_archive_base64`. Every check here fails closed with
//! `REPOSITORY_DOCKER_INVALID_OUTPUT`, never quoting the cause (it may contain source). The
//! returned proposal is rebuilt from host-owned text; usage is kept apart.

use std::collections::BTreeSet;

use base64::Engine as _;
use snapshot::{
    ApprovedExecutionContext, FileOp, ProposalStatus, RepoPath, StagedPatchProposal,
    from_slice_strict,
};

use crate::error::WorkerError;
use crate::limits::MAX_STDOUT_BYTES;
use crate::request::CodingWorkerRequest;
use crate::usage::{IsolatedAcpUsage, parse_isolated_acp_usage};

/// The provider ID every sanitised proposal carries.
pub const PROVIDER_ID: &str = "acp_docker";
/// Fixed host summary of a turn.
pub const SANITIZED_SUMMARY: &str = "Isolated repository coding turn.";
/// Fixed host rationale of a turn.
pub const SANITIZED_RATIONALE: &str = "Pending host verification.";

/// What the output is checked against: the approved selection and grants and the archive budget.
#[derive(Debug, Clone)]
pub struct OutputLimits {
    pub max_archive_bytes: usize,
    pub selected: BTreeSet<RepoPath>,
    pub creates: BTreeSet<RepoPath>,
    pub deletes: BTreeSet<RepoPath>,
}

impl OutputLimits {
    /// The limits of one turn.
    #[must_use]
    pub fn for_turn(
        request: &CodingWorkerRequest,
        context: &ApprovedExecutionContext,
        max_archive_bytes: usize,
    ) -> Self {
        Self {
            max_archive_bytes,
            selected: request.files.keys().cloned().collect(),
            creates: context.create_paths().iter().cloned().collect(),
            deletes: context.delete_paths().iter().cloned().collect(),
        }
    }

    /// Longest accepted base64 text for the archive budget.
    #[must_use]
    pub fn max_base64_len(&self) -> usize {
        4 * self.max_archive_bytes.div_ceil(3)
    }
}

/// A parsed, sanitised turn output.
#[derive(Debug, Clone)]
pub struct TurnOutput {
    pub proposal: StagedPatchProposal,
    pub workspace_archive: Option<Vec<u8>>,
    pub usage: Option<IsolatedAcpUsage>,
}

fn invalid(reason: &'static str) -> WorkerError {
    WorkerError::InvalidOutput { reason }
}

/// Reference `_parse_turn_output`.
///
/// # Errors
/// `REPOSITORY_DOCKER_INVALID_OUTPUT` with a fixed reason.
pub fn parse_turn_output(stdout: &[u8], limits: &OutputLimits) -> Result<TurnOutput, WorkerError> {
    let mut top: serde_json::Map<String, serde_json::Value> =
        from_slice_strict(stdout, MAX_STDOUT_BYTES)
            .map_err(|_| invalid("output is not strict JSON"))?;
    if top.len() != 2
        || !top.contains_key("proposal")
        || !top.contains_key("workspace_archive_base64")
    {
        return Err(invalid("output keys differ from the contract"));
    }
    let mut proposal = match top.remove("proposal") {
        Some(serde_json::Value::Object(map)) => map,
        _ => return Err(invalid("proposal is not an object")),
    };
    let usage = parse_isolated_acp_usage(proposal.get("usage"));
    proposal.insert("usage".to_owned(), serde_json::Value::Null);
    let claimed: StagedPatchProposal = serde_json::from_value(serde_json::Value::Object(proposal))
        .map_err(|_| invalid("proposal does not match the model"))?;
    if !claimed.is_well_formed() {
        return Err(invalid("proposal does not match the model"));
    }
    let archive = match top.remove("workspace_archive_base64") {
        Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(text)) => {
            if text.len() > limits.max_base64_len() {
                return Err(invalid("archive exceeds the budget"));
            }
            // Standard alphabet, canonical padding required, no whitespace (reference §16.5).
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(text.as_bytes())
                .map_err(|_| invalid("archive is not strict base64"))?;
            Some(bytes)
        }
        _ => return Err(invalid("archive is neither null nor a string")),
    };
    if claimed.status == ProposalStatus::Completed {
        let data = archive
            .as_deref()
            .ok_or(invalid("completed turn without an archive"))?;
        if claimed.changed_files.is_empty() {
            return Err(invalid("completed turn without changes"));
        }
        check_archive(data, &claimed, limits)?;
    } else if archive.is_some() || !claimed.changed_files.is_empty() {
        return Err(invalid("unfinished turn returned changes"));
    }
    Ok(TurnOutput {
        proposal: sanitize(&claimed),
        workspace_archive: archive,
        usage,
    })
}

fn check_archive(
    data: &[u8],
    claimed: &StagedPatchProposal,
    limits: &OutputLimits,
) -> Result<(), WorkerError> {
    if data.len() > limits.max_archive_bytes {
        return Err(invalid("archive exceeds the budget"));
    }
    let entries: BTreeSet<RepoPath> = if data == archive::EMPTY_ARCHIVE_MARKER {
        if !limits.creates.is_empty() || limits.selected != limits.deletes {
            return Err(invalid("empty marker without matching delete grants"));
        }
        BTreeSet::new()
    } else {
        let grants = !limits.creates.is_empty() || !limits.deletes.is_empty();
        let max_files = limits.selected.len() + limits.creates.len();
        let expected = (!grants).then_some(limits.selected.len());
        archive::preflight_archive_directory(
            data,
            expected,
            limits.max_archive_bytes,
            Some(max_files),
        )
        .map_err(|_| invalid("archive directory rejected"))?;
        let archive_limits = archive::ArchiveLimits::new(max_files, limits.max_archive_bytes)
            .map_err(|_| invalid("archive budget rejected"))?;
        let manifest = archive::read_archive_manifest(data, &archive_limits)
            .map_err(|_| invalid("archive envelope rejected"))?;
        manifest.entries.into_iter().map(|e| e.path).collect()
    };
    // Staging's entry-set rule (reference §6.3 step 6).
    let kept_missing = limits
        .selected
        .difference(&entries)
        .any(|p| !limits.deletes.contains(p));
    let unexpected = entries
        .iter()
        .any(|p| !limits.selected.contains(p) && !limits.creates.contains(p));
    if kept_missing || unexpected {
        return Err(invalid("archive entries differ from the grants"));
    }
    for change in &claimed.changed_files {
        let path = RepoPath::parse(&change.path).map_err(|_| invalid("change path is unsafe"))?;
        let granted = match change.op {
            FileOp::Update => limits.selected.contains(&path),
            FileOp::Create => limits.creates.contains(&path),
            FileOp::Delete => limits.deletes.contains(&path),
        };
        if !granted {
            return Err(invalid("change operation is not granted"));
        }
    }
    Ok(())
}

/// The host-owned proposal: fresh ID, fixed provider and text; only status, changed files and
/// owned paths survive. Provider model, usage, events and all agent-written text are dropped.
fn sanitize(claimed: &StagedPatchProposal) -> StagedPatchProposal {
    let completed = claimed.status == ProposalStatus::Completed;
    StagedPatchProposal {
        proposal_id: uuid::Uuid::new_v4().simple().to_string(),
        provider_id: PROVIDER_ID.to_owned(),
        provider_model: None,
        status: claimed.status,
        usage: None,
        summary: SANITIZED_SUMMARY.to_owned(),
        rationale: SANITIZED_RATIONALE.to_owned(),
        changed_files: claimed.changed_files.clone(),
        owned_paths: claimed.owned_paths.clone(),
        validation_strategy_hint: None,
        validation_commands: Vec::new(),
        start_preview: false,
        needs_human_review: false,
        tool_context_loaded: false,
        error: (!completed)
            .then(|| format!("Isolated coding turn reported {}.", claimed.status.as_str())),
        provider_events: Vec::new(),
    }
}
