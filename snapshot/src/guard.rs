//! Host path guard: descendants that no approval scope may reach, however broad.

use std::fmt::Debug;

use serde::Deserialize;

use crate::error::SnapshotError;
use crate::path::{RepoPath, casefold};
use vocab::Untrusted;

/// A host's veto over paths. `validate_path` returns `Ok(())` to allow; any error propagates
/// unchanged to the caller of the selection checks (so a policy may use its own code).
pub trait PathGuard: Debug + Send + Sync {
    /// # Errors
    /// Whatever the policy decides; the default policy returns `REPOSITORY_PATCH_HOST_POLICY`.
    fn validate_path(&self, path: &RepoPath) -> Result<(), SnapshotError>;
}

/// Prefixes (case-folded, `/`-bounded) protected by [`DefaultPathGuard`]. A trailing `/` marks a
/// directory; other entries match the exact file and anything beneath it.
pub const DEFAULT_PROTECTED: &[&str] = &[
    ".git/",
    ".gitmodules",
    ".gitattributes",
    ".github/workflows/",
    ".github/actions/",
    ".gitlab-ci.yml",
    ".gitlab/",
    ".circleci/",
    ".travis.yml",
    ".buildkite/",
    "azure-pipelines.yml",
    "bitbucket-pipelines.yml",
    "jenkinsfile",
    ".ci/",
    ".mcp.json",
    ".claude/",
    ".codex/",
    ".cursor/",
    ".vscode/",
    ".idea/",
    "agents.md",
    "claude.md",
];

/// The default host policy: refuses every path at or under a protected prefix (case-folded), and
/// any path with a `.git` segment anywhere (nested repositories).
#[derive(Debug, Clone)]
pub struct DefaultPathGuard {
    protected: Vec<String>,
}

/// Largest host policy document accepted, in bytes.
const MAX_POLICY_JSON_BYTES: usize = 1_048_576;

/// The policy file format: `{"protected": ["dir/", "file", …]}` (entries are added to the defaults).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    protected: Vec<String>,
}

impl Default for DefaultPathGuard {
    fn default() -> Self {
        Self {
            protected: DEFAULT_PROTECTED.iter().map(|s| casefold(s)).collect(),
        }
    }
}

impl DefaultPathGuard {
    /// The defaults extended by a JSON policy document (`{"protected": [...]}`).
    ///
    /// # Errors
    /// `REPOSITORY_PATCH_POLICY_CONFIG` for malformed JSON, unknown keys, or an entry that is not
    /// a relative path (checked with the portable profile after removing one trailing `/`).
    pub fn with_config_json(text: &str) -> Result<Self, SnapshotError> {
        // The one strict parser (duplicate keys refused); its message never quotes the input.
        let file: PolicyFile = vocab::from_slice_strict(text.as_bytes(), MAX_POLICY_JSON_BYTES)
            .map_err(|e| SnapshotError::PolicyConfig {
                detail: format!("malformed policy file: {e}"),
            })?;
        let mut policy = Self::default();
        for entry in file.protected {
            let bare = entry.strip_suffix('/').unwrap_or(&entry);
            RepoPath::parse(bare).map_err(|r| SnapshotError::PolicyConfig {
                detail: format!("invalid protected entry {}: {r}", Untrusted::quoted(&entry)),
            })?;
            policy.protected.push(casefold(&entry));
        }
        Ok(policy)
    }

    /// True when the policy refuses `path`.
    #[must_use]
    pub fn is_protected(&self, path: &str) -> bool {
        let folded = casefold(path);
        if folded.split('/').any(|seg| seg == ".git") {
            return true;
        }
        self.protected.iter().any(|p| {
            let root = p.trim_end_matches('/');
            folded == root
                || folded
                    .strip_prefix(root)
                    .is_some_and(|r| r.starts_with('/'))
        })
    }
}

impl PathGuard for DefaultPathGuard {
    fn validate_path(&self, path: &RepoPath) -> Result<(), SnapshotError> {
        if self.is_protected(path.as_str()) {
            return Err(SnapshotError::HostPolicy {
                path: path.as_str().to_owned(),
            });
        }
        Ok(())
    }
}

/// Proof that a create path is absent from the complete tree at the pinned commit.
pub trait CreateAbsence: Debug + Send + Sync {
    /// # Errors
    /// `REPOSITORY_PATCH_CREATE_PROOF` (or `REPOSITORY_PATCH_CREATE_EXISTS`) when the path, a
    /// case-folded twin, a file at a parent directory, or a directory at the path exists.
    fn prove_absent(&self, path: &RepoPath) -> Result<(), SnapshotError>;

    /// Why the tree keeps the entry at `path` out of the manifest (a committed executable, a
    /// symlink, a submodule, …: the excluded kind's reason), so a refusal can name the real
    /// reason; `None` when unknown (the default) or when the entry is a manifest file.
    fn excluded_reason(&self, path: &str) -> Option<&'static str> {
        let _ = path;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> RepoPath {
        RepoPath::parse(s).unwrap()
    }

    #[test]
    fn default_policy_protects_descendants_of_broad_scopes() {
        let policy = DefaultPathGuard::default();
        for bad in [
            ".git/config",
            ".GitHub/workflows/ci.yml",
            ".gitmodules",
            "sub/.git/hooks/pre-commit",
            ".mcp.json",
            ".claude/settings.json",
            ".vscode/tasks.json",
            ".cursor/rules",
            ".codex/config.toml",
        ] {
            let err = policy.validate_path(&p(bad)).unwrap_err();
            assert_eq!(err.code(), "REPOSITORY_PATCH_HOST_POLICY", "{bad}");
        }
        for ok in [
            "app/x.py",
            ".github/CODEOWNERS",
            "src/gitlab.rs",
            "docs/.gitkeep",
        ] {
            policy.validate_path(&p(ok)).unwrap();
        }
    }

    #[test]
    fn config_file_extends_the_defaults() {
        let policy =
            DefaultPathGuard::with_config_json(r#"{"protected": ["deploy/", "Makefile"]}"#)
                .unwrap();
        assert!(policy.is_protected("deploy/prod.yaml"));
        assert!(policy.is_protected("makefile"));
        assert!(policy.is_protected(".git/HEAD"));
        assert!(!policy.is_protected("deployment/x"));
        for bad in [
            r#"{"protected": ["../x"]}"#,
            r#"{"protected": []"#,
            r#"{"other": []}"#,
        ] {
            assert_eq!(
                DefaultPathGuard::with_config_json(bad).unwrap_err().code(),
                "REPOSITORY_PATCH_POLICY_CONFIG"
            );
        }
    }
}
