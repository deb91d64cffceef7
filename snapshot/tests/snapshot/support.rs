//! Shared fixtures: approval documents and temporary Git repositories made with the real `git`.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use snapshot::context_from_value;
use snapshot::testkit;
pub use snapshot::testkit::COMMIT;
use snapshot::{ApprovedExecutionContext, RepoPath, RepositorySnapshotEvidence};
use vocab::Sha256;

pub const SNAPSHOT_DIGEST: &str =
    "sha256:1111111111111111111111111111111111111111111111111111111111111111";
pub const SERVICE: &str = "app/modules/support/backend/service.py";
pub const SCHEMAS: &str = "app/modules/support/backend/schemas.py";
pub const SERVICE_TEXT: &str = "def answer():\n    return 1\n";
pub const SCHEMAS_TEXT: &str = "class Answer:\n    value: int\n";

pub fn p(s: &str) -> RepoPath {
    RepoPath::parse(s).unwrap()
}

/// The common reference fixture as an approval JSON value.
pub fn context_value() -> Value {
    testkit::approval(json!({
        "raw_request": "make answer return 2",
        "request_type": "patch",
        "approved_plan_digest": "a".repeat(64),
        "snapshot_digest": SNAPSHOT_DIGEST,
        "graph_identity_digest": "graph-1",
        "impact_report_digest": "impact-1",
        "execution_strategy_id": "strategy-1",
        "rationale": "fix the answer",
        "allowed_paths": ["app/modules/support/"],
        "required_validation_gates": ["pytest"],
        "required_security_gates": ["secret_scan"],
        "required_ci_checks": ["lint"]
    }))
}

pub fn context_with(
    edit: impl FnOnce(&mut serde_json::Map<String, Value>),
) -> ApprovedExecutionContext {
    let mut value = context_value();
    edit(value.as_object_mut().unwrap());
    context_from_value(value).unwrap()
}

pub fn context() -> ApprovedExecutionContext {
    context_with(|_| {})
}

pub fn evidence_value(manifest: &[(&str, &str)]) -> Value {
    let files: serde_json::Map<String, Value> = manifest
        .iter()
        .map(|(path, text)| {
            (
                (*path).to_owned(),
                Value::from(Sha256::of(text.as_bytes()).to_string()),
            )
        })
        .collect();
    json!({
        "plan_id": "plan-1",
        "request_id": "request-1",
        "app_id": "app-1",
        "repository_full_name": "acme/support",
        "baseline_commit_sha": COMMIT,
        "snapshot_digest": SNAPSHOT_DIGEST,
        "file_manifest": files,
    })
}

pub fn evidence(manifest: &[(&str, &str)]) -> RepositorySnapshotEvidence {
    RepositorySnapshotEvidence::from_json(&evidence_value(manifest).to_string()).unwrap()
}

/// A temporary repository driven by the real `git` binary with a clean, fixed environment.
pub struct TempRepo {
    pub dir: tempfile::TempDir,
}

impl TempRepo {
    pub fn new() -> Self {
        let repo = Self {
            dir: tempfile::tempdir().unwrap(),
        };
        repo.git(["init", "-q", "-b", "main", "."]);
        repo
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn command(&self) -> Command {
        testkit::git_command(self.path())
    }

    pub fn git<I, S>(&self, args: I) -> Vec<u8>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        testkit::git_bytes(self.path(), &args.into_iter().collect::<Vec<_>>())
    }

    pub fn git_text<I, S>(&self, args: I) -> String
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        testkit::git(self.path(), &args.into_iter().collect::<Vec<_>>())
    }

    #[expect(
        clippy::disallowed_methods,
        reason = "fixture inside a fresh temporary directory"
    )]
    pub fn write(&self, rel: impl AsRef<Path>, bytes: &[u8]) -> PathBuf {
        let full = self.path().join(rel);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(&full, bytes).unwrap();
        full
    }

    /// `git add -A` and commit; returns the new commit id.
    pub fn commit(&self, message: &str) -> String {
        testkit::commit(self.path(), message)
    }

    pub fn head(&self) -> String {
        self.git_text(["rev-parse", "HEAD"])
    }

    /// The blob bytes at `commit:path`, read with `git cat-file blob`.
    pub fn blob_bytes(&self, commit: &str, path: &str) -> Vec<u8> {
        self.git(["cat-file", "blob", &format!("{commit}:{path}")])
    }
}
