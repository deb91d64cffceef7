//! `patch-candidate approve`: writes an approval for a change of a local repository without any
//! hand-written JSON. It resolves the commit, snapshots its complete tree, checks every flag
//! against that tree, fills every identity field (generating ids that were not given), and runs
//! the very checks `run` runs before any Docker call (the approval constructor, then the
//! selection, baseline, grant and read-only checks of a turn request). The approval goes to
//! stdout, or atomically to `--out` (0600, never inside the repository, never over an existing
//! file without `--force`); a short summary of what it grants goes to stderr.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use clap::Args;
use snapshot::{
    ApprovedExecutionContext, DefaultPathGuard, GitSnapshot, GrantInput, Grants, RepoPath,
    SnapshotError, WorkTreeState,
};
use turn::PreparedTurn;

use super::outcome::{OUTPUT_CODE, display_path};
use super::outfile::{check_output, dir_id, write_private};
use super::paths::require_dir;
use super::{CliError, Outcome, render};

/// Identity digests this command has nothing to compute from (no dependency graph, no impact
/// report): a fixed, self-describing value.
const NOT_COMPUTED: &str = "not-computed:patch-candidate-approve";
/// The `execution_strategy_id` of approvals written here.
const STRATEGY: &str = "patch-candidate.single-turn";
/// Most names listed per section of the summary.
const MAX_LISTED: usize = 20;
/// Most entries listed (text and JSON) that lie inside the scopes but will not be editable; the
/// rest are counted.
const MAX_NOT_EDITABLE_LISTED: usize = 50;
/// The summary section of entries inside the scopes that will not be editable.
const NOT_EDITABLE_TITLE: &str = "not editable inside the scopes";

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
    /// A validation gate the candidate must pass (repeatable): recorded as
    /// `required_validation_gates`, run by `gate` and `run --gates`.
    #[arg(long = "gate", value_name = "NAME")]
    gate: Vec<String>,
    /// The operator's gate definitions: every `--gate` must be defined there (checked before
    /// anything else).
    #[arg(long = "gates", value_name = "FILE")]
    gates: Option<PathBuf>,
}

impl ApproveArgs {
    /// The scope and grant flags as typed.
    fn grant_input(&self) -> GrantInput<'_> {
        GrantInput {
            allow: &self.allow,
            read_only: &self.read_only,
            prohibit: &self.prohibit,
            create: &self.create,
            delete: &self.delete,
        }
    }
}

/// Ids the person gave, or generated ones (listed so the summary can say so).
fn id_or_generated(
    flag: &'static str,
    given: Option<&String>,
    prefix: &str,
    generated: &mut Vec<(&'static str, String)>,
    field: &'static str,
) -> Result<String, SnapshotError> {
    match given {
        Some(id) if id.is_empty() => Err(SnapshotError::ApproveValue {
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

fn list_section(text: &mut String, title: &str, items: &[(String, Option<&str>)]) {
    list_bounded(text, title, items, MAX_LISTED);
}

fn list_bounded(text: &mut String, title: &str, items: &[(String, Option<&str>)], max: usize) {
    let _ = writeln!(text, "{title} ({}):", items.len());
    for (name, why) in items.iter().take(max) {
        match why {
            Some(why) => {
                let _ = writeln!(text, "  {}  [{why}]", render::name(name));
            }
            None => {
                let _ = writeln!(text, "  {}", render::name(name));
            }
        }
    }
    if items.len() > max {
        let _ = writeln!(text, "  … and {} more", items.len() - max);
    }
}

fn plain(paths: &[RepoPath]) -> Vec<(String, Option<&'static str>)> {
    paths
        .iter()
        .map(|p| (p.as_str().to_owned(), None))
        .collect()
}

/// The entries inside the allowed and read-only scopes that will not be editable, each with
/// why (the snapshot excluded it, a `--prohibit` scope, a secret-sensitive name, the host path
/// policy), in tree order. A name that is not UTF-8 is shown lossily (and escaped when printed).
fn not_editable(
    snap: &GitSnapshot,
    grants: &Grants,
    policy: &DefaultPathGuard,
) -> Vec<(String, Option<&'static str>)> {
    snap.entries()
        .iter()
        .filter_map(|e| {
            let why = grants.exclusion_reason(e, policy)?;
            Some((
                String::from_utf8_lossy(e.raw_path()).into_owned(),
                Some(why),
            ))
        })
        .collect()
}

/// The `--json` form of [`not_editable`]: at most [`MAX_NOT_EDITABLE_LISTED`] `{path, reason}`
/// objects (paths as text, to be escaped by whoever prints them).
fn not_editable_json(excluded: &[(String, Option<&'static str>)]) -> serde_json::Value {
    excluded
        .iter()
        .take(MAX_NOT_EDITABLE_LISTED)
        .map(|(path, why)| serde_json::json!({"path": path, "reason": why}))
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
    list_bounded(
        &mut text,
        NOT_EDITABLE_TITLE,
        excluded,
        MAX_NOT_EDITABLE_LISTED,
    );
    for (field, id) in generated {
        let _ = writeln!(text, "generated {field}: {}", render::name(id));
    }
    text
}

/// `approve`.
pub(crate) fn run(args: &ApproveArgs) -> Result<Outcome, CliError> {
    require_dir("--repo", &args.repo)?;
    // Gate names first: a gate the operator's definitions do not know fails before anything
    // else (stable code), and every name is a gate name.
    for name in &args.gate {
        name.parse::<gate::GateName>()?;
    }
    if let Some(path) = &args.gates {
        let defs = gate::GateDefinitions::load(path)?;
        gate::check_required_gates(&args.gate, &defs)?;
    }
    if args.task.is_empty() {
        return Err(SnapshotError::ApproveValue {
            flag: "--task",
            reason: "must not be empty",
        }
        .into());
    }
    if matches!(&args.repository_full_name, Some(n) if n.is_empty()) {
        return Err(SnapshotError::ApproveValue {
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
        SnapshotError::Commit { detail } => SnapshotError::ApproveCommit {
            rev: args.commit.clone(),
            reason: detail,
        },
        other => other,
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
    let grants = Grants::check(&args.grant_input(), &snap)?;

    let mut generated = Vec::new();
    // (flag, given, prefix of a generated one, field), generated in this order.
    let [plan_id, request_id, app_id, handoff_id, build_id] = [
        ("--plan-id", args.plan_id.as_ref(), "plan", "plan_id"),
        (
            "--request-id",
            args.request_id.as_ref(),
            "request",
            "request_id",
        ),
        ("--app-id", args.app_id.as_ref(), "app", "app_id"),
        ("--handoff-id", None, "handoff", "handoff_id"),
        ("--build-id", None, "build", "build_registry_id"),
    ]
    .map(|(flag, given, prefix, field)| {
        id_or_generated(flag, given, prefix, &mut generated, field)
    });
    let (plan_id, request_id, app_id, handoff_id, build_id) =
        (plan_id?, request_id?, app_id?, handoff_id?, build_id?);
    let full_name = args
        .repository_full_name
        .clone()
        .unwrap_or_else(|| default_full_name(&args.repo));
    let rationale = format!("Approved with patch-candidate approve at commit {commit}.");
    let document = snapshot::approval_document(
        &snap,
        &grants,
        &snapshot::ApprovalFields {
            handoff_id: &handoff_id,
            request_id: &request_id,
            plan_id: &plan_id,
            app_id: &app_id,
            build_registry_id: &build_id,
            repository_full_name: &full_name,
            task: &args.task,
            strategy: STRATEGY,
            not_computed: NOT_COMPUTED,
            rationale: &rationale,
            gates: &args.gate,
        },
    );
    let strs = |v: &[RepoPath]| {
        v.iter()
            .map(RepoPath::as_str)
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    // The one approval constructor, then exactly the checks `run` makes before any Docker call.
    let context = snapshot::context_from_value(document)?;
    let policy = DefaultPathGuard::default();
    let prepared = PreparedTurn::new(&snap, &context, &policy, &args.task, None, None)?;
    prepared.approve()?;
    let (editable, read_only) = (prepared.selected(), prepared.read_only());
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

    let excluded = not_editable(&snap, &grants, &policy);
    stderr_text.push_str(&summary(
        &context, editable, read_only, &excluded, &generated,
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
                    "editable_paths": strs(editable),
                    "read_only_paths": strs(read_only),
                    "not_editable": not_editable_json(&excluded),
                    "not_editable_count": excluded.len(),
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
