//! Building an approval's scopes and grants from what a person names (`patch-candidate
//! approve`): every path checked against the complete tree at the commit, creates proved absent,
//! deletes proved to be files, and no two grants colliding (case-folded, or one a directory of the
//! other). The approval built from them is then checked by [`crate::context_from_value`] and the
//! turn's own checks, like any other.

use std::collections::BTreeMap;

use crate::classify::{
    is_repository_env_template_path, is_secret_contract_path, is_secret_sensitive_path,
};
use crate::error::SnapshotError;
use crate::git::{GitSnapshot, TreeEntry};
use crate::guard::{CreateAbsence as _, PathGuard};
use crate::path::{RepoPath, casefold, in_scope};

/// The scopes and grants as a person typed them, one list per flag (`--allow`, `--read-only`,
/// `--prohibit`, `--create`, `--delete`).
#[derive(Debug, Clone, Copy, Default)]
pub struct GrantInput<'a> {
    pub allow: &'a [String],
    pub read_only: &'a [String],
    pub prohibit: &'a [String],
    pub create: &'a [String],
    pub delete: &'a [String],
}

/// The scopes and grants of one approval, checked against the tree.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Grants {
    allow: Vec<RepoPath>,
    read_only: Vec<RepoPath>,
    prohibit: Vec<RepoPath>,
    create: Vec<RepoPath>,
    delete: Vec<RepoPath>,
}

fn path_error(flag: &'static str, path: &str, reason: &'static str) -> SnapshotError {
    SnapshotError::ApprovePath {
        flag,
        path: path.to_owned(),
        reason,
    }
}

/// A scope or grant as typed: a portable, canonical repository path (one trailing `/` allowed
/// on a scope). Nothing is repaired: `./a`, `a//b`, `..` and backslashes are refused.
fn parse_path(flag: &'static str, raw: &str, scope: bool) -> Result<RepoPath, SnapshotError> {
    let text = if scope {
        raw.strip_suffix('/').unwrap_or(raw)
    } else {
        raw
    };
    RepoPath::parse(text).map_err(|_| {
        path_error(
            flag,
            raw,
            "is not a portable repository path (relative, '/'-separated, no '.', '..' or empty segments)",
        )
    })
}

/// The UTF-8 names of every tree entry (files and excluded entries alike).
fn tree_names(snap: &GitSnapshot) -> Vec<&str> {
    snap.entries().iter().filter_map(|e| e.path()).collect()
}

fn collide(
    (flag, path): (&'static str, &RepoPath),
    (other_flag, other): (&'static str, &RepoPath),
    reason: &'static str,
) -> SnapshotError {
    SnapshotError::ApproveGrants {
        flag,
        path: path.as_str().to_owned(),
        other_flag,
        other: other.as_str().to_owned(),
        reason,
    }
}

/// `inner` equals `outer` or lies beneath it, compared case-folded.
fn within(inner: &RepoPath, outer: &RepoPath) -> bool {
    in_scope(inner.as_str(), &[outer.as_str()], true)
}

impl Grants {
    /// Parses every flag and checks it against the tree at the commit: scopes must name something
    /// there, creates must be absent, deletes must be files; no two grants may collide.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_APPROVE_PATH` for a path that cannot be granted as given,
    /// `PATCH_CANDIDATE_APPROVE_GRANTS` for two grants that collide.
    pub fn check(args: &GrantInput<'_>, snap: &GitSnapshot) -> Result<Self, SnapshotError> {
        let names = tree_names(snap);
        let mut g = Self::default();
        for (flag, raws, out, fold) in [
            ("--allow", args.allow, &mut g.allow, false),
            ("--read-only", args.read_only, &mut g.read_only, false),
            ("--prohibit", args.prohibit, &mut g.prohibit, true),
        ] {
            for raw in raws {
                let scope = parse_path(flag, raw, true)?;
                if !names.iter().any(|n| in_scope(n, &[scope.as_str()], fold)) {
                    return Err(path_error(
                        flag,
                        raw,
                        "matches nothing in the tree at the commit",
                    ));
                }
                out.push(scope);
            }
        }
        for raw in args.create {
            g.create.push(parse_path("--create", raw, false)?);
        }
        for raw in args.delete {
            g.delete.push(parse_path("--delete", raw, false)?);
        }
        g.check_collisions()?;
        // Every create, then every delete: it must be absent (a file), and editable.
        let exact = [
            ("--create", &g.create, true),
            ("--delete", &g.delete, false),
        ];
        for (flag, paths, create) in exact {
            for path in paths {
                let (unfit, reason) = if create {
                    (
                        snap.prove_absent(path).is_err(),
                        "already exists at the commit (or clashes with an existing path, case-folded)",
                    )
                } else {
                    (
                        !snap.manifest().contains_key(path),
                        "is not a regular UTF-8 file in the tree at the commit",
                    )
                };
                if unfit {
                    return Err(path_error(flag, path.as_str(), reason));
                }
                if !g.editable_scope(path) {
                    return Err(path_error(
                        flag,
                        path.as_str(),
                        "is not inside an --allow scope (or lies in a --read-only or --prohibit scope)",
                    ));
                }
            }
        }
        Ok(g)
    }

    /// Inside an allowed scope and outside every read-only and prohibited one.
    #[must_use]
    pub fn editable_scope(&self, path: &RepoPath) -> bool {
        let p = path.as_str();
        in_scope(p, &self.allow, false)
            && !in_scope(p, &self.read_only, true)
            && !in_scope(p, &self.prohibit, true)
    }

    /// Grants that cannot coexist: the same path twice (case-folded), an `--allow` or
    /// `--read-only` scope swallowed by a narrower-or-equal carve-out, and exact grants that are
    /// equal or one inside the other.
    fn check_collisions(&self) -> Result<(), SnapshotError> {
        let scopes: Vec<(&'static str, &RepoPath)> = self
            .allow
            .iter()
            .map(|p| ("--allow", p))
            .chain(self.read_only.iter().map(|p| ("--read-only", p)))
            .chain(self.prohibit.iter().map(|p| ("--prohibit", p)))
            .collect();
        let mut seen: BTreeMap<String, (&'static str, &RepoPath)> = BTreeMap::new();
        for &(flag, path) in &scopes {
            if let Some(&first) = seen.get(&casefold(path.as_str())) {
                return Err(collide(
                    (flag, path),
                    first,
                    "the same path, case-folded: it cannot be both",
                ));
            }
            seen.insert(casefold(path.as_str()), (flag, path));
        }
        for allow in &self.allow {
            for (flag, carve) in self
                .read_only
                .iter()
                .map(|p| ("--read-only", p))
                .chain(self.prohibit.iter().map(|p| ("--prohibit", p)))
            {
                if within(allow, carve) {
                    return Err(collide(
                        ("--allow", allow),
                        (flag, carve),
                        "the --allow scope lies inside it and would grant nothing editable",
                    ));
                }
            }
        }
        for read_only in &self.read_only {
            for prohibit in &self.prohibit {
                if within(read_only, prohibit) {
                    return Err(collide(
                        ("--read-only", read_only),
                        ("--prohibit", prohibit),
                        "the --read-only scope lies inside it and would show nothing",
                    ));
                }
            }
        }
        let exact: Vec<(&'static str, &RepoPath)> = self
            .create
            .iter()
            .map(|p| ("--create", p))
            .chain(self.delete.iter().map(|p| ("--delete", p)))
            .collect();
        for (i, &a) in exact.iter().enumerate() {
            for &b in exact.iter().skip(i + 1) {
                if a.1.collision_key() == b.1.collision_key() {
                    return Err(collide(b, a, "the same path, case-folded"));
                }
                if within(a.1, b.1) || within(b.1, a.1) {
                    return Err(collide(b, a, "one would be a directory of the other"));
                }
            }
        }
        Ok(())
    }
}

impl Grants {
    /// The editable scopes (`--allow`).
    #[must_use]
    pub fn allow(&self) -> &[RepoPath] {
        &self.allow
    }

    /// The read-only scopes (`--read-only`).
    #[must_use]
    pub fn read_only(&self) -> &[RepoPath] {
        &self.read_only
    }

    /// The prohibited scopes (`--prohibit`).
    #[must_use]
    pub fn prohibit(&self) -> &[RepoPath] {
        &self.prohibit
    }

    /// The exact create grants (`--create`).
    #[must_use]
    pub fn create(&self) -> &[RepoPath] {
        &self.create
    }

    /// The exact delete grants (`--delete`).
    #[must_use]
    pub fn delete(&self) -> &[RepoPath] {
        &self.delete
    }

    /// Why a tree entry inside the approved scopes is neither editable nor read-only context:
    /// the snapshot excluded it ([`crate::EntryKind::reason`]: `committed executable (100755)`,
    /// `symlink (120000)`, …), a `--prohibit` scope, a secret-sensitive name, or the host path
    /// policy. A name that is not UTF-8 is scope-checked in its lossy form.
    #[must_use]
    pub fn exclusion_reason(
        &self,
        entry: &TreeEntry,
        policy: &dyn PathGuard,
    ) -> Option<&'static str> {
        let lossy = String::from_utf8_lossy(entry.raw_path());
        let path: &str = &lossy;
        if !in_scope(path, &self.allow, false) && !in_scope(path, &self.read_only, false) {
            return None;
        }
        if entry.kind().is_excluded() {
            return Some(entry.kind().reason());
        }
        let repo_path = RepoPath::parse(path).ok()?;
        Some(if in_scope(path, &self.prohibit, true) {
            "prohibited (--prohibit)"
        } else if is_secret_sensitive_path(path) || is_secret_contract_path(path) {
            "secret-sensitive name (never sent)"
        } else if is_repository_env_template_path(path) {
            "environment template (never sent)"
        } else if policy.validate_path(&repo_path).is_err() {
            "protected by the host path policy"
        } else {
            return None;
        })
    }
}

/// The `request_type` of every approval a tool writes.
const REQUEST_TYPE: &str = "change";

/// The identity and wording of an approval written by a tool (`patch-candidate approve`, or a
/// forge trigger of the service): ids, the repository's full name, and fixed texts.
#[derive(Debug, Clone, Copy)]
pub struct ApprovalFields<'a> {
    pub handoff_id: &'a str,
    pub request_id: &'a str,
    pub plan_id: &'a str,
    pub app_id: &'a str,
    pub build_registry_id: &'a str,
    /// The repository's `owner/name` (part of the snapshot digest).
    pub repository_full_name: &'a str,
    /// The change asked for (`raw_request`).
    pub task: &'a str,
    /// `execution_strategy_id`.
    pub strategy: &'a str,
    /// The identity digests nothing computes (dependency graph, impact report).
    pub not_computed: &'a str,
    /// `rationale`: host-owned text saying who approved what.
    pub rationale: &'a str,
    /// `required_validation_gates`.
    pub gates: &'a [String],
}

/// The approval document for `grants` at the snapshot's commit: every identity field filled,
/// the snapshot digest computed from the tree, `approved_plan_digest` the SHA-256 of the
/// canonical JSON of what is approved. A read-only scope is also listed as an allowed one (a
/// turn selects read-only context only inside the allowed scopes, and never edits it). The
/// caller turns it into an approval with [`crate::context_from_value`] and checks it as `run`
/// does.
#[must_use]
pub fn approval_document(
    snap: &GitSnapshot,
    grants: &Grants,
    fields: &ApprovalFields<'_>,
) -> serde_json::Value {
    let strs = |v: &[RepoPath]| v.iter().map(|p| p.as_str().to_owned()).collect::<Vec<_>>();
    let commit = snap.commit();
    let full_name = fields.repository_full_name;
    let snapshot_digest = snap.snapshot_digest(full_name).to_string();
    let allowed: std::collections::BTreeSet<String> = strs(grants.allow())
        .into_iter()
        .chain(strs(grants.read_only()))
        .collect();
    let plan = serde_json::json!({
        "allowed_paths": allowed,
        "baseline_commit_sha": commit,
        "create_paths": strs(grants.create()),
        "delete_paths": strs(grants.delete()),
        "prohibited_paths": strs(grants.prohibit()),
        "raw_request": fields.task,
        "read_only_paths": strs(grants.read_only()),
        "repository_full_name": full_name,
        "snapshot_digest": snapshot_digest,
    });
    // Canonical: serde_json's map keeps keys sorted, and `to_string` is compact.
    let plan_digest = vocab::Sha256::of(plan.to_string().as_bytes()).bare_hex();
    serde_json::json!({
        "schema_version": crate::EXECUTION_CONTEXT_SCHEMA_VERSION,
        "handoff_id": fields.handoff_id,
        "request_id": fields.request_id,
        "plan_id": fields.plan_id,
        "app_id": fields.app_id,
        "build_registry_id": fields.build_registry_id,
        "repository_full_name": full_name,
        "baseline_commit_sha": commit,
        "raw_request": fields.task,
        "request_type": REQUEST_TYPE,
        "approved_plan_digest": plan_digest,
        "snapshot_digest": snapshot_digest,
        "graph_identity_digest": fields.not_computed,
        "impact_report_digest": fields.not_computed,
        "execution_strategy_id": fields.strategy,
        "rationale": fields.rationale,
        "allowed_paths": allowed,
        "prohibited_paths": strs(grants.prohibit()),
        "read_only_paths": strs(grants.read_only()),
        "create_paths": strs(grants.create()),
        "delete_paths": strs(grants.delete()),
        "required_validation_gates": fields.gates,
        "required_security_gates": [],
        "required_ci_checks": [],
    })
}
