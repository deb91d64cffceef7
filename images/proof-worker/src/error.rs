//! The crate's one error type. Messages never quote file contents or agent output.

/// Why a turn could not be run or reported.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProofError {
    #[error("request exceeds {limit} bytes")]
    RequestBudget { limit: usize },
    #[error("request is not a valid turn payload: {reason}")]
    RequestFormat { reason: String },
    #[error("unsafe path in request: {path:?}")]
    RequestPath { path: String },
    #[error("invalid operation grants: {reason}")]
    Grants { reason: &'static str },
    #[error("request file count {count} outside 1..={limit}")]
    FileBudget { count: usize, limit: usize },
    #[error("read-only inspection files exceed {limit} bytes")]
    InspectionBudget { limit: usize },
    #[error("workspace setup failed: {reason}")]
    Workspace { reason: String },
    #[error("agent could not be started")]
    AgentSpawn,
    #[error("isolation exposure: {exposures:?}")]
    Isolation { exposures: Vec<String> },
    #[error("output could not be encoded")]
    Output,
    #[error(transparent)]
    Archive(#[from] archive::ArchiveError),
    #[error("i/o failure: {kind}")]
    Io { kind: std::io::ErrorKind },
}

impl From<std::io::Error> for ProofError {
    fn from(e: std::io::Error) -> Self {
        Self::Io { kind: e.kind() }
    }
}

impl ProofError {
    /// The stable code.
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            Self::RequestBudget { .. } => "PROOF_WORKER_REQUEST_BUDGET",
            Self::RequestFormat { .. } => "PROOF_WORKER_REQUEST_FORMAT",
            Self::RequestPath { .. } => "PROOF_WORKER_REQUEST_PATH",
            Self::Grants { .. } => "PROOF_WORKER_GRANTS",
            Self::FileBudget { .. } => "PROOF_WORKER_FILE_BUDGET",
            Self::InspectionBudget { .. } => "PROOF_WORKER_INSPECTION_BUDGET",
            Self::Workspace { .. } => "PROOF_WORKER_WORKSPACE",
            Self::AgentSpawn => "PROOF_WORKER_AGENT_SPAWN",
            Self::Isolation { .. } => "ACP_PROOF_ISOLATION_FAILED",
            Self::Output => "PROOF_WORKER_OUTPUT",
            Self::Archive(e) => e.code(),
            Self::Io { .. } => "PROOF_WORKER_IO",
        }
    }
}
