//! `patch-candidate snapshot`: load a repository's complete tree at a pinned commit and print its
//! `RepositorySnapshotEvidence` plus the typed list of excluded tree entries.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Args;
use snapshot::GitSnapshot;

use super::{CliError, Outcome};

/// Snapshot arguments.
#[derive(Debug, Args)]
pub(crate) struct SnapshotArgs {
    /// Local Git repository (its object database is read; the worktree and index are ignored).
    #[arg(long)]
    repo: PathBuf,
    /// The pinned commit: exactly 40 lowercase hex digits.
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
    let snap = GitSnapshot::load(&args.repo, &args.commit)?;
    let evidence = snap.evidence(
        &args.plan_id,
        &args.request_id,
        &args.app_id,
        &args.repository_full_name,
    )?;
    let serialise =
        |_| CliError::environment("PATCH_CANDIDATE_OUTPUT", "evidence serialisation failed");
    let mut json = serde_json::to_value(&evidence).map_err(serialise)?;
    let excluded: Vec<&snapshot::TreeEntry> = snap.excluded().collect();
    let excluded_json = serde_json::to_value(&excluded).map_err(serialise)?;
    if let Some(object) = json.as_object_mut() {
        object.insert("excluded".to_owned(), excluded_json);
    } else {
        return Err(serialise(()));
    }

    let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
    for entry in &excluded {
        *by_kind.entry(entry.kind().as_str()).or_insert(0) += 1;
    }
    let mut text = String::new();
    let _ = writeln!(text, "repository: {}", evidence.repository_full_name());
    let _ = writeln!(text, "commit:     {}", evidence.baseline_commit_sha());
    let _ = writeln!(text, "files:      {}", evidence.file_manifest().len());
    let _ = write!(text, "excluded:   {}", excluded.len());
    if !by_kind.is_empty() {
        let parts: Vec<String> = by_kind.iter().map(|(k, n)| format!("{k} {n}")).collect();
        let _ = write!(text, " ({})", parts.join(", "));
    }
    let _ = writeln!(text);
    let _ = writeln!(text, "digest:     {}", evidence.snapshot_digest());
    Ok(Outcome { json, text })
}
