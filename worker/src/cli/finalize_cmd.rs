//! `patch-candidate finalize | digest | verify | show`: turn a staged workspace into a digested
//! candidate, recompute a candidate's digest, verify it against its repository, and display it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{IsTerminal as _, Read as _};
use std::path::{Path, PathBuf};

use archive::StagedWorkspace;
use cap_std::fs::Dir;
use clap::Args;
use finalizer::{
    CandidateStore, FinalizeError, FinalizeRequest, MAX_CANDIDATE_FILES, RepositoryPatchCandidate,
    finalize_repository_patch, repository_patch_digest, validate_candidate_json,
    verify_against_repository,
};
use snapshot::GitSnapshot;
use snapshot::{
    ApprovedExecutionContext, BaselineFiles, CreateAbsence, DefaultPathPolicy, FileOp, RepoPath,
    RepositorySnapshotEvidence, Sha256, StagedPatchProposal, from_slice_strict,
};

use super::{CliError, Outcome};

/// Largest approval, snapshot or proposal document read (the container output cap).
const MAX_INPUT_BYTES: usize = 40_000_000;
/// Largest candidate document read.
const MAX_CANDIDATE_BYTES: usize = finalizer::MAX_CANDIDATE_JSON_BYTES;
/// Largest single baseline file (the archive byte budget).
const MAX_BASELINE_FILE_BYTES: usize = archive::MAX_ARCHIVE_BYTES;
const IO_CODE: &str = "PATCH_CANDIDATE_IO";
const INPUT_CODE: &str = "PATCH_CANDIDATE_INPUT";

/// `finalize` arguments.
#[derive(Debug, Args)]
pub(crate) struct FinalizeArgs {
    /// The approved execution context (JSON).
    #[arg(long)]
    approval: PathBuf,
    /// The snapshot evidence (JSON).
    #[arg(long)]
    snapshot: PathBuf,
    /// A directory holding the selected baseline files at their repository paths.
    #[arg(long)]
    baseline_dir: PathBuf,
    /// The staged workspace tree (as written by staging).
    #[arg(long)]
    staged: PathBuf,
    /// The provider's proposal (JSON).
    #[arg(long)]
    proposal: PathBuf,
    /// The repository at the baseline commit: required when the approval grants creates (the
    /// absence proof over the complete tree).
    #[arg(long)]
    repo: Option<PathBuf>,
    /// Host policy file (`{"protected": [...]}`) extending the default protected paths.
    #[arg(long)]
    policy: Option<PathBuf>,
    /// Store the candidate in this directory as `<hex digest>.json`.
    #[arg(long)]
    store: Option<PathBuf>,
}

/// `digest` arguments.
#[derive(Debug, Args)]
pub(crate) struct DigestArgs {
    /// A candidate JSON file.
    file: PathBuf,
}

/// `verify` arguments.
#[derive(Debug, Args)]
pub(crate) struct VerifyArgs {
    /// A candidate JSON file.
    file: PathBuf,
    /// Also check it against this repository at its baseline commit (read-only).
    #[arg(long)]
    repo: Option<PathBuf>,
}

/// `show` arguments.
#[derive(Debug, Args)]
pub(crate) struct ShowArgs {
    /// A candidate JSON file.
    file: PathBuf,
}

fn finalize_error(e: FinalizeError) -> CliError {
    if e.is_environment() {
        CliError::environment(e.code(), e.to_string())
    } else {
        CliError::rejected(e.code(), e.to_string())
    }
}

fn archive_error(e: &archive::ArchiveError) -> CliError {
    if e.is_environment() {
        CliError::environment(e.code(), e.to_string())
    } else {
        CliError::rejected(e.code(), e.to_string())
    }
}

/// Reads at most `limit` bytes of `path`; more is an input error.
fn read_bounded(path: &Path, limit: usize, what: &str) -> Result<Vec<u8>, CliError> {
    let file = std::fs::File::open(path)
        .map_err(|e| CliError::environment(IO_CODE, format!("cannot open {what}: {}", e.kind())))?;
    let mut bytes = Vec::new();
    file.take(u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| CliError::environment(IO_CODE, format!("cannot read {what}: {}", e.kind())))?;
    if bytes.len() > limit {
        return Err(CliError::rejected(
            INPUT_CODE,
            format!("{what} exceeds {limit} bytes"),
        ));
    }
    Ok(bytes)
}

fn read_text(path: &Path, what: &str) -> Result<String, CliError> {
    String::from_utf8(read_bounded(path, MAX_INPUT_BYTES, what)?)
        .map_err(|_| CliError::rejected(INPUT_CODE, format!("{what} is not UTF-8")))
}

fn read_candidate(path: &Path) -> Result<RepositoryPatchCandidate, CliError> {
    let bytes = read_bounded(path, MAX_CANDIDATE_BYTES, "candidate")?;
    validate_candidate_json(&bytes).map_err(finalize_error)
}

/// Reads every regular file under `root` (no links followed, at most the repository budget of
/// files, each strict UTF-8) keyed by its portable path.
fn read_baseline_dir(root: &Path) -> Result<BaselineFiles, CliError> {
    let dir = Dir::open_ambient_dir(root, cap_std::ambient_authority()).map_err(|e| {
        CliError::environment(
            IO_CODE,
            format!("cannot open baseline directory: {}", e.kind()),
        )
    })?;
    let io = |e: std::io::Error| {
        CliError::environment(
            IO_CODE,
            format!("cannot read baseline directory: {}", e.kind()),
        )
    };
    let bad = |detail: String| CliError::rejected(INPUT_CODE, detail);
    let mut out = BaselineFiles::new();
    let mut stack: Vec<(Dir, String)> = vec![(dir, String::new())];
    while let Some((dir, prefix)) = stack.pop() {
        for entry in dir.entries().map_err(io)? {
            let entry = entry.map_err(io)?;
            let name = entry.file_name();
            let name = name
                .to_str()
                .ok_or_else(|| bad("baseline directory holds a non-UTF-8 name".to_owned()))?;
            let rel = format!("{prefix}{name}");
            let kind = entry.file_type().map_err(io)?;
            if kind.is_dir() {
                let sub = cap_fs_ext::DirExt::open_dir_nofollow(&dir, name).map_err(io)?;
                stack.push((sub, format!("{rel}/")));
                continue;
            }
            if !kind.is_file() {
                return Err(bad(format!("baseline entry {rel:?} is not a regular file")));
            }
            let path = RepoPath::parse(&rel).map_err(|r| {
                bad(format!(
                    "baseline entry {rel:?} is not a portable path: {r}"
                ))
            })?;
            if out.len() >= MAX_CANDIDATE_FILES {
                return Err(bad(
                    "baseline directory exceeds the repository file budget".into()
                ));
            }
            let file = entry.open().map_err(io)?;
            let mut bytes = Vec::new();
            file.take(u64::try_from(MAX_BASELINE_FILE_BYTES).unwrap_or(u64::MAX) + 1)
                .read_to_end(&mut bytes)
                .map_err(io)?;
            if bytes.len() > MAX_BASELINE_FILE_BYTES {
                return Err(bad(format!(
                    "baseline file {rel:?} exceeds the byte budget"
                )));
            }
            let text = String::from_utf8(bytes)
                .map_err(|_| bad(format!("baseline file {rel:?} is not UTF-8")))?;
            out.insert(path, text);
        }
    }
    Ok(out)
}

fn candidate_json(candidate: &RepositoryPatchCandidate) -> Result<serde_json::Value, CliError> {
    serde_json::to_value(candidate)
        .map_err(|_| CliError::rejected(INPUT_CODE, "candidate could not be serialised"))
}

/// `finalize`.
pub(crate) fn finalize(args: &FinalizeArgs) -> Result<Outcome, CliError> {
    let context = ApprovedExecutionContext::from_json(&read_text(&args.approval, "approval")?)?;
    let snapshot = RepositorySnapshotEvidence::from_json(&read_text(&args.snapshot, "snapshot")?)?;
    let baseline = read_baseline_dir(&args.baseline_dir)?;
    let selected: Vec<RepoPath> = baseline.keys().cloned().collect();
    let proposal_bytes = read_bounded(&args.proposal, MAX_INPUT_BYTES, "proposal")?;
    let proposal: StagedPatchProposal = from_slice_strict(&proposal_bytes, MAX_INPUT_BYTES)
        .map_err(|e| CliError::rejected(INPUT_CODE, format!("invalid proposal: {e}")))?;
    if !proposal.is_well_formed() {
        return Err(CliError::rejected(
            INPUT_CODE,
            "invalid proposal: ids or events out of bounds",
        ));
    }
    let policy = match &args.policy {
        Some(path) => DefaultPathPolicy::with_config_json(&read_text(path, "policy")?)?,
        None => DefaultPathPolicy::default(),
    };
    let tree = match &args.repo {
        Some(repo) => Some(GitSnapshot::load(repo, context.baseline_commit_sha())?),
        None => None,
    };
    // The staged tree was materialised from the approved baseline: its expected manifest is the
    // snapshot's entry for each selected path (finalize checks the baseline bytes against the
    // snapshot before it compares manifests, so nothing needs hashing twice).
    let manifest: BTreeMap<RepoPath, Sha256> = selected
        .iter()
        .filter_map(|p| snapshot.file_manifest().get(p).map(|h| (p.clone(), *h)))
        .collect();
    let workspace = StagedWorkspace::open_existing(&args.staged, manifest, BTreeMap::new())
        .map_err(|e| archive_error(&e))?;
    let candidate = finalize_repository_patch(FinalizeRequest {
        context: &context,
        snapshot: &snapshot,
        selected_paths: &selected,
        baseline_files: &baseline,
        workspace: &workspace,
        proposal: &proposal,
        policy: &policy,
        create_absence: tree.as_ref().map(|t| t as &dyn CreateAbsence),
    })
    .map_err(finalize_error)?;
    let digest = repository_patch_digest(&candidate).map_err(finalize_error)?;
    let stored = match &args.store {
        Some(dir) => {
            CandidateStore::open(dir)
                .and_then(|s| s.put(&candidate))
                .map_err(finalize_error)?;
            Some(dir.join(format!("{}.json", digest.bare_hex())))
        }
        None => None,
    };
    let mut text = summary_text(&candidate, &digest);
    if let Some(path) = &stored {
        let _ = writeln!(text, "stored:   {}", path.display());
    }
    Ok(Outcome {
        json: serde_json::json!({
            "digest": digest.to_string(),
            "stored": stored.map(|p| p.display().to_string()),
            "candidate": candidate_json(&candidate)?,
        }),
        text,
    })
}

/// `digest`.
pub(crate) fn digest(args: &DigestArgs) -> Result<Outcome, CliError> {
    let candidate = read_candidate(&args.file)?;
    let digest = repository_patch_digest(&candidate).map_err(finalize_error)?;
    Ok(Outcome {
        json: serde_json::json!({"digest": digest.to_string()}),
        text: format!("{digest}\n"),
    })
}

/// The digest a store file name promises (`<64 hex>.json`), if the name has that form.
fn digest_from_name(path: &Path) -> Option<Sha256> {
    let name = path.file_name()?.to_str()?;
    Sha256::from_bare_hex(name.strip_suffix(".json")?).ok()
}

/// `verify`.
pub(crate) fn verify(args: &VerifyArgs) -> Result<Outcome, CliError> {
    let candidate = read_candidate(&args.file)?;
    let digest = repository_patch_digest(&candidate).map_err(finalize_error)?;
    if let Some(named) = digest_from_name(&args.file)
        && named != digest
    {
        return Err(finalize_error(FinalizeError::StoreDigest {
            digest: named.to_string(),
        }));
    }
    let report = match &args.repo {
        Some(repo) => Some(verify_against_repository(&candidate, repo).map_err(finalize_error)?),
        None => None,
    };
    let mut text = format!("structure: valid\ndigest:    {digest}\n");
    if let Some(r) = &report {
        let _ = writeln!(
            text,
            "repository: {} files match {} and apply cleanly",
            r.files_checked, r.baseline_commit_sha
        );
    }
    Ok(Outcome {
        json: serde_json::json!({
            "digest": digest.to_string(),
            "structure": "valid",
            "repository": report,
        }),
        text,
    })
}

/// `show`.
pub(crate) fn show(args: &ShowArgs) -> Result<Outcome, CliError> {
    let candidate = read_candidate(&args.file)?;
    let digest = repository_patch_digest(&candidate).map_err(finalize_error)?;
    let color = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let mut text = summary_text(&candidate, &digest);
    for file in candidate.changed_files() {
        text.push('\n');
        if file.diff().is_empty() {
            let _ = writeln!(
                text,
                "({} {}: empty file, no line changes)",
                file.op().as_str(),
                file.path()
            );
            continue;
        }
        for line in file.diff().split_inclusive('\n') {
            text.push_str(&render_line(line, color));
        }
    }
    Ok(Outcome {
        json: serde_json::json!({"digest": digest.to_string(), "candidate": candidate_json(&candidate)?}),
        text,
    })
}

fn summary_text(candidate: &RepositoryPatchCandidate, digest: &Sha256) -> String {
    let mut text = String::new();
    let _ = writeln!(text, "candidate {digest}");
    let _ = writeln!(
        text,
        "repository {} @ {}  (plan {}, proposal {} by {})",
        printable(candidate.repository_full_name()),
        printable(candidate.baseline_commit_sha()),
        printable(candidate.plan_id()),
        printable(candidate.proposal_id()),
        printable(candidate.provider_id()),
    );
    let _ = writeln!(
        text,
        "state: {}, mutation allowed: {}",
        candidate.validation_state(),
        candidate.mutation_allowed()
    );
    let _ = writeln!(text, "{}", printable(candidate.summary()));
    for file in candidate.changed_files() {
        let _ = writeln!(text, "  {:<6} {}", file.op().as_str(), file.path());
    }
    let gates: Vec<&String> = candidate
        .required_validation_gates()
        .iter()
        .chain(candidate.required_security_gates())
        .chain(candidate.required_ci_checks())
        .collect();
    if !gates.is_empty() {
        let list: Vec<String> = gates.iter().map(|g| printable(g)).collect();
        let _ = writeln!(text, "required gates: {}", list.join(", "));
    }
    let creates = candidate
        .changed_files()
        .iter()
        .filter(|f| f.op() == FileOp::Create)
        .count();
    let deletes = candidate
        .changed_files()
        .iter()
        .filter(|f| f.op() == FileOp::Delete)
        .count();
    let _ = writeln!(
        text,
        "{} updated, {creates} created, {deletes} deleted",
        candidate.changed_files().len() - creates - deletes
    );
    text
}

/// Makes untrusted text safe for a terminal: control characters (other than tab) and the
/// Unicode line/paragraph separators become visible escapes, so diff content cannot move the
/// cursor, recolour or retitle the terminal.
fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\t' => out.push(c),
            c if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') => {
                out.extend(c.escape_default());
            }
            c => out.push(c),
        }
    }
    out
}

fn render_line(line: &str, color: bool) -> String {
    let body = line.strip_suffix('\n').unwrap_or(line);
    let safe = printable(body);
    let style = match body.chars().next() {
        _ if !color => None,
        _ if body.starts_with("--- ") || body.starts_with("+++ ") => Some("1"),
        Some('+') => Some("32"),
        Some('-') => Some("31"),
        Some('@') => Some("36"),
        Some('\\') => Some("2"),
        _ => None,
    };
    match style {
        Some(code) => format!("\u{1b}[{code}m{safe}\u{1b}[0m\n"),
        None => format!("{safe}\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_output_neutralises_control_characters() {
        assert_eq!(
            printable("a\u{1b}[2Jb\rc\u{2028}d\te"),
            "a\\u{1b}[2Jb\\rc\\u{2028}d\te"
        );
        assert_eq!(
            render_line("+x\u{1b}]0;title\u{7}\n", false),
            "+x\\u{1b}]0;title\\u{7}\n"
        );
        assert_eq!(render_line("-one\r\n", false), "-one\\r\n");
        assert_eq!(render_line("-old\n", true), "\u{1b}[31m-old\u{1b}[0m\n");
        assert_eq!(
            render_line("+++ b/x\n", true),
            "\u{1b}[1m+++ b/x\u{1b}[0m\n"
        );
        assert_eq!(render_line(" ctx\n", true), " ctx\n");
    }

    #[test]
    fn store_names_promise_a_digest() {
        let d = Sha256::of(b"x");
        assert_eq!(
            digest_from_name(Path::new(&format!("/s/{}.json", d.bare_hex()))),
            Some(d)
        );
        assert_eq!(digest_from_name(Path::new("/s/candidate.json")), None);
    }
}
