//! Shared fixtures: an approval, its snapshot, a create-absence proof and small helpers.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use archive::{ArchiveError, StageLimits, StagedWorkspace, stage_workspace_archive};
use snapshot::{
    ApprovedExecutionContext, ApprovedTurn, BaselineFiles, CreateAbsence, DefaultPathGuard,
    PathGuard, RepoPath, RepositorySnapshotEvidence, SnapshotError, casefold,
};
use vocab::Sha256;

pub fn p(s: &str) -> RepoPath {
    RepoPath::parse(s).unwrap()
}

/// The repository root of the workspace (fixtures live there).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

/// Absence proof over a fixed tree: refuses any case-fold twin, a file at a parent directory or
/// a directory at the path.
#[derive(Debug)]
pub struct TreeAbsence {
    files: BTreeSet<String>,
}

impl CreateAbsence for TreeAbsence {
    fn prove_absent(&self, path: &RepoPath) -> Result<(), SnapshotError> {
        let key = casefold(path.as_str());
        for f in &self.files {
            let fk = casefold(f);
            if fk == key || key.starts_with(&format!("{fk}/")) || fk.starts_with(&format!("{key}/"))
            {
                return Err(SnapshotError::CreateExists {
                    path: path.as_str().to_owned(),
                });
            }
        }
        Ok(())
    }
}

/// A policy that refuses one path with its own code (to check that policy errors propagate).
#[derive(Debug)]
pub struct RefusingPolicy(pub String);

impl PathGuard for RefusingPolicy {
    fn validate_path(&self, path: &RepoPath) -> Result<(), SnapshotError> {
        if path.as_str() == self.0 {
            return Err(SnapshotError::HostPolicy {
                path: path.as_str().to_owned(),
            });
        }
        Ok(())
    }
}

pub struct Fixture {
    pub context: ApprovedExecutionContext,
    pub snapshot: RepositorySnapshotEvidence,
    pub selected: Vec<RepoPath>,
    pub baseline: BaselineFiles,
    pub absence: TreeAbsence,
    pub policy: DefaultPathGuard,
}

pub struct Spec<'a> {
    pub files: &'a [(&'a str, &'a str)],
    pub selected: &'a [&'a str],
    pub creates: &'a [&'a str],
    pub deletes: &'a [&'a str],
    pub allowed: &'a [&'a str],
    pub read_only: &'a [&'a str],
    pub plan_id: &'a str,
}

impl Default for Spec<'_> {
    fn default() -> Self {
        Self {
            files: &[],
            selected: &[],
            creates: &[],
            deletes: &[],
            allowed: &["app/"],
            read_only: &[],
            plan_id: "plan-1",
        }
    }
}

pub fn fixture(spec: &Spec<'_>) -> Fixture {
    let context = serde_json::json!({
        "handoff_id": "handoff-1",
        "request_id": "request-1",
        "plan_id": spec.plan_id,
        "app_id": "app-1",
        "build_registry_id": "build-1",
        "repository_full_name": "octo/repo",
        "baseline_commit_sha": "0123456789abcdef0123456789abcdef01234567",
        "raw_request": "change the answer",
        "request_type": "refinement",
        "approved_plan_digest": "ab".repeat(32),
        "snapshot_digest": "sha256:snapshot",
        "graph_identity_digest": "graph",
        "impact_report_digest": "impact",
        "execution_strategy_id": "strategy",
        "rationale": "because",
        "allowed_paths": spec.allowed,
        "read_only_paths": spec.read_only,
        "create_paths": spec.creates,
        "delete_paths": spec.deletes,
    });
    let context = ApprovedExecutionContext::from_json(&context.to_string()).unwrap();
    let manifest: BTreeMap<String, String> = spec
        .files
        .iter()
        .map(|(path, content)| {
            (
                (*path).to_owned(),
                Sha256::of(content.as_bytes()).to_string(),
            )
        })
        .collect();
    let snapshot = serde_json::json!({
        "plan_id": "plan-1",
        "request_id": "request-1",
        "app_id": "app-1",
        "repository_full_name": "octo/repo",
        "baseline_commit_sha": "0123456789abcdef0123456789abcdef01234567",
        "snapshot_digest": "sha256:snapshot",
        "file_manifest": manifest,
    });
    let snapshot = RepositorySnapshotEvidence::from_json(&snapshot.to_string()).unwrap();
    let files: BTreeMap<&str, &str> = spec.files.iter().copied().collect();
    let baseline = spec
        .selected
        .iter()
        .map(|s| (p(s), files[s].to_owned()))
        .collect::<BaselineFiles>();
    Fixture {
        context,
        snapshot,
        selected: spec.selected.iter().map(|s| p(s)).collect(),
        baseline,
        absence: TreeAbsence {
            files: spec.files.iter().map(|(f, _)| (*f).to_owned()).collect(),
        },
        policy: DefaultPathGuard::default(),
    }
}

impl Fixture {
    pub fn stage(&self, archive: &[u8], root: &Path) -> Result<StagedWorkspace, ArchiveError> {
        self.stage_with(archive, root, &self.policy, 50, archive::MAX_ARCHIVE_BYTES)
    }

    pub fn stage_with(
        &self,
        archive: &[u8],
        root: &Path,
        policy: &dyn PathGuard,
        max_files: usize,
        max_archive_bytes: usize,
    ) -> Result<StagedWorkspace, ArchiveError> {
        let approved = ApprovedTurn::new(
            &self.context,
            &self.snapshot,
            policy,
            Some(&self.absence),
            self.selected.clone(),
            &self.baseline,
        )?;
        let limits = StageLimits {
            max_files,
            max_archive_bytes,
        };
        stage_workspace_archive(&approved, archive, root, limits)
    }
}

/// Every path below `dir` (relative, sorted), directories marked with a trailing `/`.
pub fn tree(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let rel = entry
                .path()
                .strip_prefix(base)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if entry.file_type().unwrap().is_dir() {
                out.push(format!("{rel}/"));
                walk(base, &entry.path(), out);
            } else {
                out.push(rel);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// Runs a Python 3 script from this test folder with `args`, feeding `stdin`; returns stdout.
pub fn python(script: &str, args: &[&str], stdin: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/archive")
        .join(script);
    let mut child = Command::new("python3")
        .arg(path)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 is required for the oracle tests");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{script} failed");
    out.stdout
}

pub fn entries(list: &[(&str, &[u8])]) -> Vec<(RepoPath, Vec<u8>)> {
    list.iter().map(|(n, c)| (p(n), c.to_vec())).collect()
}
