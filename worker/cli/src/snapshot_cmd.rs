//! `patch-candidate snapshot`: load a repository's complete tree at a pinned commit and print its
//! `RepositorySnapshotEvidence` plus the typed list of excluded tree entries.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Args;
use snapshot::GitSnapshot;

use super::outcome::OUTPUT_CODE;
use super::paths::require_dir;
use super::{CliError, Outcome, render};

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
    require_dir("--repo", &args.repo)?;
    let snap = GitSnapshot::load(&args.repo, &args.commit)?;
    let evidence = snap.evidence(
        &args.plan_id,
        &args.request_id,
        &args.app_id,
        &args.repository_full_name,
    )?;
    let serialise =
        |_: serde_json::Error| CliError::environment(OUTPUT_CODE, "evidence serialisation failed");
    let excluded: Vec<&snapshot::TreeEntry> = snap.excluded().collect();
    let mut json = serde_json::to_value(&evidence).map_err(serialise)?;
    let excluded_json = serde_json::to_value(&excluded).map_err(serialise)?;
    let Some(object) = json.as_object_mut() else {
        return Err(CliError::environment(
            OUTPUT_CODE,
            "evidence did not serialise to an object",
        ));
    };
    object.insert("excluded".to_owned(), excluded_json);

    let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
    for entry in &excluded {
        *by_kind.entry(entry.kind().as_str()).or_insert(0) += 1;
    }
    let mut text = String::new();
    let _ = writeln!(
        text,
        "repository: {}",
        render::name(evidence.repository_full_name())
    );
    let _ = writeln!(
        text,
        "commit:     {}",
        render::name(evidence.baseline_commit_sha())
    );
    let _ = writeln!(text, "files:      {}", evidence.file_manifest().len());
    let _ = write!(text, "excluded:   {}", excluded.len());
    if !by_kind.is_empty() {
        let parts: Vec<String> = by_kind.iter().map(|(k, n)| format!("{k} {n}")).collect();
        let _ = write!(text, " ({})", parts.join(", "));
    }
    let _ = writeln!(text);
    let _ = writeln!(
        text,
        "digest:     {}",
        render::name(evidence.snapshot_digest())
    );
    Ok(Outcome { json, text })
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;
    use crate::test_git::git;
    use vocab::FailureClass;

    fn fixture() -> (tempfile::TempDir, String) {
        let dir = tempfile::tempdir().unwrap();
        git(dir.path(), &["init", "-q", "."]);
        std::fs::write(dir.path().join("a.txt"), "a\n").unwrap();
        std::fs::write(dir.path().join("bin.dat"), b"\xff\xfe").unwrap();
        std::os::unix::fs::symlink("a.txt", dir.path().join("link")).unwrap();
        git(dir.path(), &["add", "-A"]);
        git(dir.path(), &["commit", "-q", "-m", "one"]);
        let head = git(dir.path(), &["rev-parse", "HEAD"]);
        (dir, head)
    }

    fn args(repo: &std::path::Path, commit: &str) -> SnapshotArgs {
        SnapshotArgs {
            repo: repo.to_owned(),
            commit: commit.to_owned(),
            repository_full_name: "acme/demo".to_owned(),
            plan_id: "plan-1".to_owned(),
            request_id: "request-1".to_owned(),
            app_id: "app-1".to_owned(),
        }
    }

    #[test]
    fn json_is_the_evidence_plus_the_excluded_list() {
        let (dir, head) = fixture();
        let outcome = run(&args(dir.path(), &head)).unwrap();
        let object = outcome.json.as_object().unwrap();
        let keys: Vec<&str> = object.keys().map(String::as_str).collect();
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        assert_eq!(
            sorted,
            [
                "app_id",
                "baseline_commit_sha",
                "excluded",
                "file_manifest",
                "plan_id",
                "repository_full_name",
                "request_id",
                "snapshot_digest"
            ]
        );
        assert_eq!(object["baseline_commit_sha"], head.as_str());
        assert_eq!(object["file_manifest"].as_object().unwrap().len(), 1);
        let kinds: Vec<&str> = object["excluded"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["kind"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["non_utf8_content", "symlink"]);
        // `snapshot --json` output is accepted as evidence as it is (the `excluded` list is
        // checked and dropped) ...
        let as_printed =
            snapshot::RepositorySnapshotEvidence::from_json(&outcome.json.to_string()).unwrap();
        assert_eq!(as_printed.snapshot_digest(), object["snapshot_digest"]);
        // ... and without the `excluded` key the document is exactly valid snapshot evidence.
        let mut evidence = outcome.json.clone();
        evidence.as_object_mut().unwrap().remove("excluded");
        let parsed =
            snapshot::RepositorySnapshotEvidence::from_json(&evidence.to_string()).unwrap();
        assert_eq!(parsed, as_printed);
        assert!(outcome.text.contains("files:      1\n"), "{}", outcome.text);
        assert!(
            outcome
                .text
                .contains("excluded:   2 (non_utf8_content 1, symlink 1)"),
            "{}",
            outcome.text
        );
    }

    #[test]
    fn bad_input_is_rejected_with_a_code() {
        let (dir, head) = fixture();
        for (repo, commit, code) in [
            (
                dir.path().to_owned(),
                "not-a-sha".to_owned(),
                "REPOSITORY_SNAPSHOT_COMMIT",
            ),
            (
                dir.path().to_owned(),
                "0".repeat(40),
                "REPOSITORY_SNAPSHOT_COMMIT",
            ),
        ] {
            let err = run(&args(&repo, &commit)).unwrap_err();
            assert_eq!((err.code, err.class), (code, FailureClass::Rejected));
        }
        let err = run(&args(&dir.path().join("missing"), &head)).unwrap_err();
        assert_eq!(
            (err.code, err.class),
            ("PATCH_CANDIDATE_PATH_MISSING", FailureClass::Usage)
        );
        let mut empty_plan = args(dir.path(), &head);
        empty_plan.plan_id.clear();
        let err = run(&empty_plan).unwrap_err();
        assert_eq!(err.code, "REPOSITORY_PATCH_SNAPSHOT_INVALID");
    }
}
