//! `patch-candidate approve`: writes an approval for a change of a local repository without any
//! hand-written JSON. It resolves the commit, snapshots its complete tree, checks every flag
//! against that tree, fills every identity field (generating ids that were not given), and runs
//! the very checks `run` runs before any Docker call (the approval constructor, then the
//! selection, baseline, grant and read-only checks of a turn request). The approval goes to
//! stdout, or atomically to `--out` (0600, never inside the repository, never over an existing
//! file without `--force`); a short summary of what it grants goes to stderr.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use clap::Args;
use snapshot::{
    ApprovedExecutionContext, CreateAbsence as _, DefaultPathPolicy,
    EXECUTION_CONTEXT_SCHEMA_VERSION, GitSnapshot, PathPolicy, RepoPath, Sha256, SnapshotError,
    WorkTreeState, casefold, in_scope, is_repository_env_template_path, is_secret_contract_path,
    is_secret_sensitive_path,
};
use turn::{CodingWorkerRequest, TurnApproval, TurnError, default_selection};

use super::outcome::{OUTPUT_CODE, display_path};
use super::outfile::{check_output, dir_id, write_private};
use super::paths::require_dir;
use super::{CliError, Outcome, render};

/// The `request_type` of every approval written here.
const REQUEST_TYPE: &str = "change";
/// Identity digests this command has nothing to compute from (no dependency graph, no impact
/// report): a fixed, self-describing value.
const NOT_COMPUTED: &str = "not-computed:patch-candidate-approve";
/// The `execution_strategy_id` of approvals written here.
const STRATEGY: &str = "patch-candidate.single-turn";
/// Most names listed per section of the summary.
const MAX_LISTED: usize = 20;

/// `approve` arguments.
#[derive(Debug, Args)]
pub(crate) struct ApproveArgs {
    /// Local Git repository whose change is approved. Only its object database is read (at
    /// `--commit`); the work tree is looked at only to warn about uncommitted changes, which are
    /// never part of the approval.
    #[arg(long, value_name = "DIR")]
    repo: PathBuf,
    /// The commit the approval binds: any revision git understands (`HEAD`, a branch, a tag, an
    /// abbreviated id). It is resolved once and recorded as its full 40-digit id.
    #[arg(long, value_name = "REV", default_value = "HEAD")]
    commit: String,
    /// Editable scope (repeatable, at least one): a file, or a directory meaning everything
    /// beneath it, as named in the tree at the commit (case-sensitive, `/`-separated, relative).
    /// Every file inside is sent to the container and may be changed.
    #[arg(long = "allow", value_name = "PATH", required = true)]
    allow: Vec<String>,
    /// Read-only scope (repeatable): files the container sees for context but may not change. May
    /// lie inside an `--allow` scope (it is then carved out of it).
    #[arg(long = "read-only", value_name = "PATH")]
    read_only: Vec<String>,
    /// Prohibited scope (repeatable, case-insensitive): never sent, never changeable, even inside
    /// an `--allow` scope.
    #[arg(long = "prohibit", value_name = "PATH")]
    prohibit: Vec<String>,
    /// Exact file the change may create (repeatable). It must not exist at the commit (no
    /// case-folded equal, no file/directory prefix clash) and must lie inside an `--allow` scope.
    #[arg(long = "create", value_name = "PATH")]
    create: Vec<String>,
    /// Exact file the change may delete (repeatable): an editable file at the commit.
    #[arg(long = "delete", value_name = "PATH")]
    delete: Vec<String>,
    /// The task: exactly the text the coding turn is given (`run` reads it from the approval).
    #[arg(long, value_name = "TEXT")]
    task: String,
    /// Plan id recorded in the approval (default: a generated `plan-<uuid>`).
    #[arg(long, value_name = "ID")]
    plan_id: Option<String>,
    /// Request id recorded in the approval (default: a generated `request-<uuid>`).
    #[arg(long, value_name = "ID")]
    request_id: Option<String>,
    /// App id recorded in the approval (default: a generated `app-<uuid>`).
    #[arg(long, value_name = "ID")]
    app_id: Option<String>,
    /// Repository identity recorded in the approval and its snapshot digest (default:
    /// `local/<name of --repo>`).
    #[arg(long, value_name = "OWNER/NAME")]
    repository_full_name: Option<String>,
    /// Write the approval to this file (mode 0600, atomically) instead of stdout. Refused inside
    /// the repository and, without `--force`, when the file exists.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Replace an existing `--out` file (still atomically).
    #[arg(long, requires = "out")]
    force: bool,
}

/// The scopes and grants of one approval, checked against the tree.
#[derive(Debug, Default)]
struct Grants {
    allow: Vec<RepoPath>,
    read_only: Vec<RepoPath>,
    prohibit: Vec<RepoPath>,
    create: Vec<RepoPath>,
    delete: Vec<RepoPath>,
}

fn path_error(flag: &'static str, path: &str, reason: &'static str) -> TurnError {
    TurnError::ApprovePath {
        flag,
        path: path.to_owned(),
        reason,
    }
}

/// A scope or grant as typed: a portable, canonical repository path (one trailing `/` allowed
/// on a scope). Nothing is repaired: `./a`, `a//b`, `..` and backslashes are refused.
fn parse_path(flag: &'static str, raw: &str, scope: bool) -> Result<RepoPath, TurnError> {
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
) -> TurnError {
    TurnError::ApproveGrants {
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
    fn check(args: &ApproveArgs, snap: &GitSnapshot) -> Result<Self, TurnError> {
        let names = tree_names(snap);
        let mut g = Self::default();
        for (flag, raws, out, fold) in [
            ("--allow", &args.allow, &mut g.allow, false),
            ("--read-only", &args.read_only, &mut g.read_only, false),
            ("--prohibit", &args.prohibit, &mut g.prohibit, true),
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
        for raw in &args.create {
            g.create.push(parse_path("--create", raw, false)?);
        }
        for raw in &args.delete {
            g.delete.push(parse_path("--delete", raw, false)?);
        }
        g.check_collisions()?;
        for path in &g.create {
            if snap.prove_absent(path).is_err() {
                return Err(path_error(
                    "--create",
                    path.as_str(),
                    "already exists at the commit (or clashes with an existing path, case-folded)",
                ));
            }
            if !g.editable_scope(path) {
                return Err(path_error(
                    "--create",
                    path.as_str(),
                    "is not inside an --allow scope (or lies in a --read-only or --prohibit scope)",
                ));
            }
        }
        for path in &g.delete {
            if !snap.manifest().contains_key(path) {
                return Err(path_error(
                    "--delete",
                    path.as_str(),
                    "is not a regular UTF-8 file in the tree at the commit",
                ));
            }
            if !g.editable_scope(path) {
                return Err(path_error(
                    "--delete",
                    path.as_str(),
                    "is not inside an --allow scope (or lies in a --read-only or --prohibit scope)",
                ));
            }
        }
        Ok(g)
    }

    /// Inside an allowed scope and outside every read-only and prohibited one.
    fn editable_scope(&self, path: &RepoPath) -> bool {
        let p = path.as_str();
        in_scope(p, &self.allow, false)
            && !in_scope(p, &self.read_only, true)
            && !in_scope(p, &self.prohibit, true)
    }

    /// Grants that cannot coexist: the same path twice (case-folded), an `--allow` or
    /// `--read-only` scope swallowed by a narrower-or-equal carve-out, and exact grants that are
    /// equal or one inside the other.
    fn check_collisions(&self) -> Result<(), TurnError> {
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

/// Ids the person gave, or generated ones (listed so the summary can say so).
fn id_or_generated(
    flag: &'static str,
    given: Option<&String>,
    prefix: &str,
    generated: &mut Vec<(&'static str, String)>,
    field: &'static str,
) -> Result<String, TurnError> {
    match given {
        Some(id) if id.is_empty() => Err(TurnError::ApproveValue {
            flag,
            reason: "must not be empty",
        }),
        Some(id) => Ok(id.clone()),
        None => {
            let id = format!("{prefix}-{}", uuid::Uuid::new_v4().simple());
            generated.push((field, id.clone()));
            Ok(id)
        }
    }
}

/// `local/<directory name>` of the repository (its absolute path's last component).
fn default_full_name(repo: &Path) -> String {
    let name = std::path::absolute(repo)
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .filter(|n| !n.is_empty() && n != "." && n != "..")
        .unwrap_or_else(|| "repository".to_owned());
    format!("local/{name}")
}

/// 64 hex: sha256 over the canonical (sorted-key, compact) JSON of what was approved.
fn plan_digest(plan: &serde_json::Value) -> String {
    Sha256::of(plan.to_string().as_bytes()).bare_hex()
}

/// Why a tree entry inside the approved scopes is neither editable nor read-only context.
fn exclusion_reason(
    entry: &snapshot::TreeEntry,
    g: &Grants,
    policy: &DefaultPathPolicy,
) -> Option<&'static str> {
    let path = entry.path()?;
    if !in_scope(path, &g.allow, false) && !in_scope(path, &g.read_only, false) {
        return None;
    }
    if entry.kind().is_excluded() {
        return Some(entry.kind().as_str());
    }
    let repo_path = RepoPath::parse(path).ok()?;
    Some(if in_scope(path, &g.prohibit, true) {
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

fn list_section(text: &mut String, title: &str, items: &[(String, Option<&str>)]) {
    let _ = writeln!(text, "{title} ({}):", items.len());
    for (name, why) in items.iter().take(MAX_LISTED) {
        match why {
            Some(why) => {
                let _ = writeln!(text, "  {}  [{why}]", render::name(name));
            }
            None => {
                let _ = writeln!(text, "  {}", render::name(name));
            }
        }
    }
    if items.len() > MAX_LISTED {
        let _ = writeln!(text, "  … and {} more", items.len() - MAX_LISTED);
    }
}

fn plain(paths: &[RepoPath]) -> Vec<(String, Option<&'static str>)> {
    paths
        .iter()
        .map(|p| (p.as_str().to_owned(), None))
        .collect()
}

/// The human summary of what an approval grants (every repository-derived name escaped).
fn summary(
    context: &ApprovedExecutionContext,
    editable: &[RepoPath],
    read_only: &[RepoPath],
    excluded: &[(String, Option<&'static str>)],
    generated: &[(&'static str, String)],
) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "approval: {} at {}",
        render::name(context.repository_full_name()),
        render::name(context.baseline_commit_sha())
    );
    let _ = writeln!(
        text,
        "snapshot: {}",
        render::name(context.snapshot_digest())
    );
    list_section(&mut text, "editable", &plain(editable));
    list_section(&mut text, "read-only", &plain(read_only));
    list_section(&mut text, "may create", &plain(context.create_paths()));
    list_section(&mut text, "may delete", &plain(context.delete_paths()));
    list_section(&mut text, "excluded inside the scopes", excluded);
    for (field, id) in generated {
        let _ = writeln!(text, "generated {field}: {}", render::name(id));
    }
    text
}

/// `approve`.
pub(crate) fn run(args: &ApproveArgs) -> Result<Outcome, CliError> {
    require_dir("--repo", &args.repo)?;
    if args.task.is_empty() {
        return Err(TurnError::ApproveValue {
            flag: "--task",
            reason: "must not be empty",
        }
        .into());
    }
    if matches!(&args.repository_full_name, Some(n) if n.is_empty()) {
        return Err(TurnError::ApproveValue {
            flag: "--repository-full-name",
            reason: "must not be empty",
        }
        .into());
    }
    let repo_id = dir_id(&args.repo).map_err(|_| CliError::missing_path("--repo", &args.repo))?;
    if let Some(out) = &args.out {
        super::paths::require_parent("--out", out)?;
        check_output("--out", out, &[repo_id], args.force)?;
    }
    let commit = snapshot::resolve_commit(&args.repo, &args.commit).map_err(|e| match e {
        SnapshotError::Commit { detail } => TurnError::ApproveCommit {
            rev: args.commit.clone(),
            reason: detail,
        },
        other => TurnError::Snapshot(other),
    })?;
    let mut stderr_text = String::new();
    match snapshot::work_tree_state(&args.repo) {
        Ok(WorkTreeState::Changed { entries }) => {
            let _ = writeln!(
                stderr_text,
                "note: the work tree has {entries} uncommitted change(s); the approval binds commit {} only, and uncommitted changes are not part of it",
                render::name(&commit)
            );
        }
        Ok(_) => {}
        Err(e) => {
            let _ = writeln!(
                stderr_text,
                "note: cannot tell whether the work tree is clean ({}); the approval binds commit {} only",
                e.code(),
                render::name(&commit)
            );
        }
    }
    let snap = GitSnapshot::load(&args.repo, &commit)?;
    // A worktree whose git directory lives elsewhere: nothing is written there either.
    let mut forbidden = vec![repo_id];
    if let Ok(id) = dir_id(snap.git_dir()) {
        forbidden.push(id);
    }
    if let Some(out) = &args.out {
        check_output("--out", out, &forbidden, args.force)?;
    }
    let grants = Grants::check(args, &snap)?;

    let mut generated = Vec::new();
    let plan_id = id_or_generated(
        "--plan-id",
        args.plan_id.as_ref(),
        "plan",
        &mut generated,
        "plan_id",
    )?;
    let request_id = id_or_generated(
        "--request-id",
        args.request_id.as_ref(),
        "request",
        &mut generated,
        "request_id",
    )?;
    let app_id = id_or_generated(
        "--app-id",
        args.app_id.as_ref(),
        "app",
        &mut generated,
        "app_id",
    )?;
    let handoff_id = id_or_generated(
        "--handoff-id",
        None,
        "handoff",
        &mut generated,
        "handoff_id",
    )?;
    let build_id = id_or_generated(
        "--build-id",
        None,
        "build",
        &mut generated,
        "build_registry_id",
    )?;
    let full_name = args
        .repository_full_name
        .clone()
        .unwrap_or_else(|| default_full_name(&args.repo));
    let snapshot_digest = snap.snapshot_digest(&full_name).to_string();
    let strs = |v: &[RepoPath]| {
        v.iter()
            .map(RepoPath::as_str)
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    // A read-only scope is also an allowed one: `run` selects read-only context only inside the
    // allowed scopes (and never edits it).
    let allowed: BTreeSet<String> = strs(&grants.allow)
        .into_iter()
        .chain(strs(&grants.read_only))
        .collect();
    let plan = serde_json::json!({
        "allowed_paths": allowed,
        "baseline_commit_sha": commit,
        "create_paths": strs(&grants.create),
        "delete_paths": strs(&grants.delete),
        "prohibited_paths": strs(&grants.prohibit),
        "raw_request": args.task,
        "read_only_paths": strs(&grants.read_only),
        "repository_full_name": full_name,
        "snapshot_digest": snapshot_digest,
    });
    let document = serde_json::json!({
        "schema_version": EXECUTION_CONTEXT_SCHEMA_VERSION,
        "handoff_id": handoff_id,
        "request_id": request_id,
        "plan_id": plan_id,
        "app_id": app_id,
        "build_registry_id": build_id,
        "repository_full_name": full_name,
        "baseline_commit_sha": commit,
        "raw_request": args.task,
        "request_type": REQUEST_TYPE,
        "approved_plan_digest": plan_digest(&plan),
        "snapshot_digest": snapshot_digest,
        "graph_identity_digest": NOT_COMPUTED,
        "impact_report_digest": NOT_COMPUTED,
        "execution_strategy_id": STRATEGY,
        "rationale": format!("Approved with patch-candidate approve at commit {commit}."),
        "allowed_paths": allowed,
        "prohibited_paths": strs(&grants.prohibit),
        "read_only_paths": strs(&grants.read_only),
        "create_paths": strs(&grants.create),
        "delete_paths": strs(&grants.delete),
        "required_validation_gates": [],
        "required_security_gates": [],
        "required_ci_checks": [],
    });
    // The one approval constructor, then exactly the checks `run` makes before any Docker call.
    let context = snapshot::context_from_value(document)?;
    let policy = DefaultPathPolicy::default();
    let (editable, read_only) = default_selection(&snap, &context, &policy)?;
    let evidence = snap.evidence(
        context.plan_id(),
        context.request_id(),
        context.app_id(),
        context.repository_full_name(),
    )?;
    let request = CodingWorkerRequest::for_context(
        &context,
        &args.task,
        snap.read_files(&editable)?,
        snap.read_files(&read_only)?,
    );
    turn::verify_turn_request(
        &request,
        &TurnApproval {
            context: &context,
            snapshot: &evidence,
            policy: &policy,
            create_absence: Some(&snap),
        },
    )?;
    let mut bytes = serde_json::to_vec_pretty(&context)
        .map_err(|_| CliError::environment(OUTPUT_CODE, "approval serialisation failed"))?;
    bytes.push(b'\n');
    // What is written parses back to the same approval.
    if ApprovedExecutionContext::from_slice(&bytes)? != context {
        return Err(CliError::environment(
            OUTPUT_CODE,
            "approval does not round-trip",
        ));
    }

    let excluded: Vec<(String, Option<&'static str>)> = snap
        .entries()
        .iter()
        .filter_map(|e| {
            let why = exclusion_reason(e, &grants, &policy)?;
            Some((e.path()?.to_owned(), Some(why)))
        })
        .collect();
    stderr_text.push_str(&summary(
        &context, &editable, &read_only, &excluded, &generated,
    ));
    let value = serde_json::to_value(&context)
        .map_err(|_| CliError::environment(OUTPUT_CODE, "approval serialisation failed"))?;
    let outcome = match &args.out {
        Some(out) => {
            write_private("--out", out, &bytes, &forbidden, args.force)?;
            let _ = writeln!(stderr_text, "wrote {} (mode 0600)", display_path(out));
            Outcome {
                json: serde_json::json!({
                    "out": out.display().to_string(),
                    "baseline_commit_sha": context.baseline_commit_sha(),
                    "snapshot_digest": context.snapshot_digest(),
                    "editable_paths": strs(&editable),
                    "read_only_paths": strs(&read_only),
                    "generated": generated.iter().map(|(f, _)| *f).collect::<Vec<_>>(),
                    "approval": value,
                }),
                text: String::new(),
            }
        }
        None => Outcome {
            json: value,
            text: String::from_utf8_lossy(&bytes).into_owned(),
        },
    };
    let _ = std::io::stderr().lock().write_all(stderr_text.as_bytes());
    Ok(outcome)
}

#[cfg(test)]
#[path = "approve_tests.rs"]
mod tests;
