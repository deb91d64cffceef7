//! What a library pipeline run writes to besides the repository: the path guard, a candidate
//! store, an in-memory usage ledger and a staging parent, and the request that names them.

use std::path::Path;

use finalizer::CandidateStore;
use snapshot::{ApprovedExecutionContext, DefaultPathGuard};
use turn::{PipelineRequest, TurnConfig, UsageLedger};

/// The default path guard, a fresh candidate store, an in-memory ledger and a fresh staging
/// parent.
pub struct PipelineSinks {
    pub policy: DefaultPathGuard,
    pub store_dir: tempfile::TempDir,
    pub store: CandidateStore,
    pub ledger: UsageLedger,
    pub staging: tempfile::TempDir,
}

impl PipelineSinks {
    pub fn fresh() -> Self {
        let store_dir = tempfile::tempdir().unwrap();
        let store = CandidateStore::open(store_dir.path()).unwrap();
        Self {
            policy: DefaultPathGuard::default(),
            store_dir,
            store,
            ledger: UsageLedger::in_memory().unwrap(),
            staging: tempfile::tempdir().unwrap(),
        }
    }

    /// The request of `task` on `repo` at `commit` under `context` and `config`, every approved
    /// file selected, stored and ledgered for user `tester`, no review feedback.
    pub fn request<'a>(
        &'a self,
        repo: &'a Path,
        commit: &'a str,
        context: &'a ApprovedExecutionContext,
        task: &'a str,
        config: &'a TurnConfig,
    ) -> PipelineRequest<'a> {
        PipelineRequest {
            repo,
            commit,
            context,
            task,
            selected: None,
            read_only: None,
            policy: &self.policy,
            config,
            staging_parent: self.staging.path(),
            store: Some(&self.store),
            ledger: Some(&self.ledger),
            user_id: "tester",
            review_feedback: None,
            parent: None,
        }
    }

    /// Asserts that the staging parent is empty again (the private tree was removed).
    pub fn assert_staging_removed(&self) {
        assert_eq!(std::fs::read_dir(self.staging.path()).unwrap().count(), 0);
    }
}
