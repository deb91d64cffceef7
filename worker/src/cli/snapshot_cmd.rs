//! `patch-candidate snapshot`.

use std::path::PathBuf;

use clap::Args;

use super::{CliError, Outcome};

/// Snapshot arguments.
#[derive(Debug, Args)]
pub(crate) struct SnapshotArgs {
    /// Local Git repository (its object database is read; the worktree and index are ignored).
    #[arg(long)]
    repo: PathBuf,
    /// The pinned commit: exactly 40 hex digits.
    #[arg(long)]
    commit: String,
    /// Repository identity recorded in the evidence, `OWNER/NAME`.
    #[arg(long)]
    repository_full_name: String,
    /// Plan id the evidence is bound to.
    #[arg(long)]
    plan_id: String,
    /// Request id the evidence is bound to.
    #[arg(long)]
    request_id: String,
    /// App id the evidence is bound to.
    #[arg(long)]
    app_id: String,
}

pub(crate) fn run(args: &SnapshotArgs) -> Result<Outcome, CliError> {
    let _ = args;
    Err(CliError::environment("PATCH_CANDIDATE_UNAVAILABLE", "snapshot loader not built yet"))
}
