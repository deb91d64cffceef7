//! The provider's proposal (`StagedPatchProposal`, reference §10.6): what the container *claims*
//! it changed. Shared by the in-container runner (which writes it), the worker (which parses and
//! sanitises it) and the finalizer (which checks it against host-verified bytes). Nothing in a
//! proposal is trusted.

use serde::{Deserialize, Serialize};

/// A file operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileOp {
    Create,
    Update,
    Delete,
}

impl FileOp {
    /// The wire name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Update => "update",
            Self::Delete => "delete",
        }
    }
}

/// Proposal status values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProposalStatus {
    Completed,
    Failed,
    Empty,
    RejectedScope,
    Timeout,
    BudgetExceeded,
    Unavailable,
}

impl ProposalStatus {
    /// The wire name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Empty => "empty",
            Self::RejectedScope => "rejected_scope",
            Self::Timeout => "timeout",
            Self::BudgetExceeded => "budget_exceeded",
            Self::Unavailable => "unavailable",
        }
    }
}

/// One claimed change. `path` is kept as text: the consumer runs the canonical-path check and
/// reports `REPOSITORY_PATCH_UNSAFE_PATH` itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProposedFileChange {
    pub path: String,
    #[serde(default = "default_op")]
    pub op: FileOp,
    #[serde(default)]
    pub content: Option<String>,
}

fn default_op() -> FileOp {
    FileOp::Update
}

/// A provider event record (kind + bounded summary).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderEventRecord {
    pub kind: ProviderEventKind,
    pub summary: String,
}

/// Provider event kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderEventKind {
    Plan,
    ToolCall,
    ModeChange,
}

/// Most provider events a proposal may carry.
pub const MAX_PROVIDER_EVENTS: usize = 200;
/// Longest provider event summary, in characters.
const MAX_PROVIDER_EVENT_SUMMARY_CHARS: usize = 500;

/// `StagedPatchProposal`, field for field (unknown keys rejected). `usage` is a raw JSON value
/// here; it is parsed strictly and separately, and malformed usage never invalidates a patch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StagedPatchProposal {
    pub proposal_id: String,
    pub provider_id: String,
    #[serde(default)]
    pub provider_model: Option<String>,
    pub status: ProposalStatus,
    #[serde(default)]
    pub usage: Option<serde_json::Value>,
    #[serde(default)]
    pub summary: String,
    #[serde(default)]
    pub rationale: String,
    #[serde(default)]
    pub changed_files: Vec<ProposedFileChange>,
    #[serde(default)]
    pub owned_paths: Vec<String>,
    #[serde(default)]
    pub validation_strategy_hint: Option<String>,
    #[serde(default)]
    pub validation_commands: Vec<String>,
    #[serde(default)]
    pub start_preview: bool,
    #[serde(default)]
    pub needs_human_review: bool,
    #[serde(default)]
    pub tool_context_loaded: bool,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub provider_events: Vec<ProviderEventRecord>,
}

impl StagedPatchProposal {
    /// Checks the model constraints the reference enforces: non-empty ids and bounded events.
    #[must_use]
    pub fn is_well_formed(&self) -> bool {
        !self.proposal_id.is_empty()
            && !self.provider_id.is_empty()
            && self.provider_events.len() <= MAX_PROVIDER_EVENTS
            && self
                .provider_events
                .iter()
                .all(|e| e.summary.chars().count() <= MAX_PROVIDER_EVENT_SUMMARY_CHARS)
    }
}
