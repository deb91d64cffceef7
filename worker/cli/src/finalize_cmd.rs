//! `patch-candidate finalize | digest | verify | show`: turn a staged workspace into a digested
//! candidate, recompute a candidate's digest, verify it (bound to an expected digest, and against
//! its repository), and display it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use archive::StagedWorkspace;
use cap_std::fs::Dir;
use clap::Args;
use finalizer::{
    CandidateStore, FinalizeError, MAX_CANDIDATE_FILES, RepositoryPatchCandidate,
    finalize_repository_patch, proposal_from_staged_tree, repository_patch_digest,
    validate_candidate_json, verify_against_repository, verify_digest,
};
use snapshot::{
    ApprovedExecutionContext, BaselineFiles, CreateAbsence, DefaultPathGuard,
    MAX_CONTEXT_JSON_BYTES, MAX_SNAPSHOT_JSON_BYTES, RepoPath, RepositorySnapshotEvidence,
    StagedPatchProposal,
};
use snapshot::{ApprovedTurn, GitSnapshot};
use vocab::{Sha256, Untrusted, from_slice_strict};

use super::outcome::{CommandError, INPUT_CODE, IO_CODE, display_path};
use super::paths::{read_file, require_dir, require_parent};
use super::plan_args::read_policy;
use super::{CliError, Outcome, render};

/// Largest proposal document read (the container output cap).
const MAX_PROPOSAL_BYTES: usize = 40_000_000;
/// Largest candidate document read.
const MAX_CANDIDATE_BYTES: usize = finalizer::MAX_CANDIDATE_JSON_BYTES;
/// Largest single baseline file (the archive byte budget).
const MAX_BASELINE_FILE_BYTES: usize = archive::MAX_ARCHIVE_BYTES;

/// `finalize` arguments. Two forms: `--repo --approval --staged` derives everything from the
/// repository at the approved commit and the staged tree; the file form also takes
/// `--snapshot`, `--baseline-dir` and `--proposal` (all three).
#[derive(Debug, Args)]
pub(crate) struct FinalizeArgs {
    /// The approved execution context (JSON), e.g. as written by `approve`.
    #[arg(long)]
    approval: PathBuf,
    /// The snapshot evidence (JSON; `snapshot --json` output as it is). File form only.
    #[arg(long, requires_all = ["baseline_dir", "proposal"])]
    snapshot: Option<PathBuf>,
    /// A directory holding the selected baseline files at their repository paths. File form only.
    #[arg(long, requires_all = ["snapshot", "proposal"])]
    baseline_dir: Option<PathBuf>,
    /// The staged workspace tree. Without `--proposal`: every editable file of the approval at its
    /// repository path, changed or not, plus granted creates; a granted delete is made by leaving
    /// its file out. Read-only files do not belong in it.
    #[arg(long)]
    staged: PathBuf,
    /// The provider's proposal (JSON). File form only; without it the proposal is derived from
    /// `--staged` against the approved baseline.
    #[arg(long, requires_all = ["snapshot", "baseline_dir"])]
    proposal: Option<PathBuf>,
    /// The repository at the baseline commit (read-only): required without `--proposal` (the
    /// snapshot, the baseline and the selection are computed from it) and, in the file form, when
    /// the approval grants creates (the absence proof over the complete tree).
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
    /// The digest the candidate must have (`sha256:` + 64 hex): any edit of any field, or a lost
    /// changed file, is then refused whatever the file is called.
    #[arg(long)]
    digest: Option<String>,
    /// Also check it against this repository at its baseline commit (read-only): every diff
    /// applies and yields the candidate's bytes, the snapshot digest is recomputed, and every
    /// derived field (summary, rationale, file order, commit) is checked.
    #[arg(long)]
    repo: Option<PathBuf>,
    /// Also verify a gate evidence file against this candidate (repeatable): strict schema,
    /// canonical form, its recorded `evidence_digest`, the outcome consistent with its exit
    /// status, and bound to this candidate's digest and baseline commit.
    #[arg(long, value_name = "FILE")]
    evidence: Vec<PathBuf>,
    /// The evidence digest the (single) `--evidence` file must have, as `gate` printed it: a
    /// re-digested, edited file is then refused too.
    #[arg(long, value_name = "sha256:…", requires = "evidence")]
    evidence_digest: Option<String>,
}

/// `show` arguments.
#[derive(Debug, Args)]
pub(crate) struct ShowArgs {
    /// A candidate JSON file; gate evidence files next to it (`<digest>.gate.<name>.json`) are
    /// shown as verdict lines.
    file: PathBuf,
}

/// A digest given on the command line by `flag`: `sha256:` + 64 lowercase hex digits.
pub(crate) fn parse_digest_flag(flag: &'static str, text: &str) -> Result<Sha256, CliError> {
    text.parse::<Sha256>()
        .map_err(|_| CommandError::DigestFlag { flag }.into())
}

/// The candidate digest `--digest` expects, if given; `--repo`, if given, must be a folder.
pub(crate) fn expected_digest(
    digest: Option<&str>,
    repo: Option<&Path>,
) -> Result<Option<Sha256>, CliError> {
    let expected = digest
        .map(|d| parse_digest_flag("--digest", d))
        .transpose()?;
    if let Some(repo) = repo {
        require_dir("--repo", repo)?;
    }
    Ok(expected)
}

pub(crate) fn read_candidate(path: &Path) -> Result<RepositoryPatchCandidate, CliError> {
    let bytes = read_file("FILE", path, MAX_CANDIDATE_BYTES)?;
    Ok(validate_candidate_json(&bytes)?)
}

/// Reads every regular file under `root` (no links followed, at most the repository budget of
/// files, each strict UTF-8) keyed by its portable path. Each file is opened without following a
/// link and without blocking, and its type and size are checked on the open handle.
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
                return Err(bad(format!(
                    "baseline entry {} is not a regular file",
                    Untrusted::quoted(&rel)
                )));
            }
            let path = RepoPath::parse(&rel).map_err(|r| {
                bad(format!(
                    "baseline entry {} is not a portable path: {r}",
                    Untrusted::quoted(&rel)
                ))
            })?;
            if out.len() >= MAX_CANDIDATE_FILES {
                return Err(bad(
                    "baseline directory exceeds the repository file budget".into()
                ));
            }
            let file = dir.open_with(name, &nofollow_nonblocking()).map_err(io)?;
            let meta = file.metadata().map_err(io)?;
            let too_big = bad(format!(
                "baseline file {} exceeds the byte budget",
                Untrusted::quoted(&rel)
            ));
            if !meta.is_file() {
                return Err(bad(format!(
                    "baseline entry {} is not a regular file",
                    Untrusted::quoted(&rel)
                )));
            }
            if meta.len() > MAX_BASELINE_FILE_BYTES as u64 {
                return Err(too_big);
            }
            let mut bytes = Vec::new();
            file.take(MAX_BASELINE_FILE_BYTES as u64 + 1)
                .read_to_end(&mut bytes)
                .map_err(io)?;
            if bytes.len() > MAX_BASELINE_FILE_BYTES {
                return Err(too_big);
            }
            let text = String::from_utf8(bytes).map_err(|_| {
                bad(format!(
                    "baseline file {} is not UTF-8",
                    Untrusted::quoted(&rel)
                ))
            })?;
            out.insert(path, text);
        }
    }
    Ok(out)
}

/// Read-only, never following a final link, never blocking on a FIFO.
fn nofollow_nonblocking() -> cap_std::fs::OpenOptions {
    use cap_fs_ext::{FollowSymlinks, OpenOptionsFollowExt as _, OpenOptionsSyncExt as _};
    let mut options = cap_std::fs::OpenOptions::new();
    options.read(true).follow(FollowSymlinks::No).nonblock(true);
    options
}

fn candidate_json(candidate: &RepositoryPatchCandidate) -> Result<serde_json::Value, CliError> {
    serde_json::to_value(candidate)
        .map_err(|_| CliError::rejected(INPUT_CODE, "candidate could not be serialised"))
}

/// The file form's three documents.
struct FileInputs<'a> {
    snapshot: &'a Path,
    baseline_dir: &'a Path,
    proposal: &'a Path,
}

fn file_inputs(args: &FinalizeArgs) -> Result<Option<FileInputs<'_>>, CliError> {
    match (&args.snapshot, &args.baseline_dir, &args.proposal) {
        (Some(snapshot), Some(baseline_dir), Some(proposal)) => Ok(Some(FileInputs {
            snapshot,
            baseline_dir,
            proposal,
        })),
        (None, None, None) => Ok(None),
        _ => Err(CommandError::FinalizeFlags {
            detail: "--snapshot, --baseline-dir and --proposal go together (or give none of them, with --repo)",
        }
        .into()),
    }
}

fn load_policy(args: &FinalizeArgs) -> Result<DefaultPathGuard, CliError> {
    let text = args.policy.as_deref().map(read_policy).transpose()?;
    Ok(turn::host_path_guard(text.as_deref())?)
}

/// `finalize`.
pub(crate) fn finalize(args: &FinalizeArgs) -> Result<Outcome, CliError> {
    let inputs = file_inputs(args)?;
    // Every named path first: a missing one is a usage error before anything is read.
    if let Some(files) = &inputs {
        require_dir("--baseline-dir", files.baseline_dir)?;
    }
    require_dir("--staged", &args.staged)?;
    match &args.repo {
        Some(repo) => require_dir("--repo", repo)?,
        None if inputs.is_none() => {
            return Err(CommandError::FinalizeFlags {
                detail: "--repo is required without --proposal (the proposal is derived from --staged against the repository at the approved commit)",
            }
            .into());
        }
        None => {}
    }
    if let Some(store) = &args.store {
        require_parent("--store", store)?;
    }
    let context = ApprovedExecutionContext::from_slice(&read_file(
        "--approval",
        &args.approval,
        MAX_CONTEXT_JSON_BYTES,
    )?)?;
    let candidate = match (inputs, &args.repo) {
        (Some(files), _) => finalize_files(args, &context, &files)?,
        (None, Some(repo)) => finalize_staged(args, &context, repo)?,
        (None, None) => {
            return Err(CommandError::FinalizeFlags {
                detail: "--repo is required without --proposal",
            }
            .into());
        }
    };
    let digest = repository_patch_digest(&candidate)?;
    let stored = match &args.store {
        Some(dir) => {
            CandidateStore::open(dir).and_then(|s| s.put(&candidate))?;
            Some(dir.join(format!("{}.json", digest.bare_hex())))
        }
        None => None,
    };
    let mut text = render::summary(&candidate, &digest.to_string());
    if let Some(path) = &stored {
        let _ = writeln!(text, "stored in: {}", display_path(path));
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

/// The file form: snapshot evidence, baseline directory and proposal as given.
fn finalize_files(
    args: &FinalizeArgs,
    context: &ApprovedExecutionContext,
    files: &FileInputs<'_>,
) -> Result<RepositoryPatchCandidate, CliError> {
    let snapshot = RepositorySnapshotEvidence::from_slice(&read_file(
        "--snapshot",
        files.snapshot,
        MAX_SNAPSHOT_JSON_BYTES,
    )?)?;
    let proposal_bytes = read_file("--proposal", files.proposal, MAX_PROPOSAL_BYTES)?;
    let proposal: StagedPatchProposal = from_slice_strict(&proposal_bytes, MAX_PROPOSAL_BYTES)
        .map_err(|e| CliError::rejected(INPUT_CODE, format!("invalid proposal: {e}")))?;
    if !proposal.is_well_formed() {
        return Err(CliError::rejected(
            INPUT_CODE,
            "invalid proposal: ids or events out of bounds",
        ));
    }
    let baseline = read_baseline_dir(files.baseline_dir)?;
    let selected: Vec<RepoPath> = baseline.keys().cloned().collect();
    let policy = load_policy(args)?;
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
    let workspace = StagedWorkspace::open_existing(&args.staged, manifest, BTreeMap::new())?;
    let approved = ApprovedTurn::new(
        context,
        &snapshot,
        &policy,
        tree.as_ref().map(|t| t as &dyn CreateAbsence),
        selected,
        &baseline,
    )
    .map_err(FinalizeError::from)?;
    Ok(finalize_repository_patch(&approved, &workspace, &proposal)?)
}

/// The staged form: the snapshot, the selection (every file the approval makes editable, as
/// `run` selects by default) and the baseline come from the repository at the approved commit;
/// the proposal is derived from the staged tree.
fn finalize_staged(
    args: &FinalizeArgs,
    context: &ApprovedExecutionContext,
    repo: &Path,
) -> Result<RepositoryPatchCandidate, CliError> {
    let policy = load_policy(args)?;
    let snap = GitSnapshot::load(repo, context.baseline_commit_sha())?;
    let evidence = turn::verified_evidence(&snap, context)?;
    let (selected, _) = turn::default_selection(&snap, context, &policy)?;
    let staged =
        Dir::open_ambient_dir(&args.staged, cap_std::ambient_authority()).map_err(|e| {
            CliError::environment(IO_CODE, format!("cannot open --staged: {}", e.kind()))
        })?;
    let deletes: BTreeSet<&RepoPath> = context.delete_paths().iter().collect();
    if let Some(missing) = selected
        .iter()
        .find(|p| !deletes.contains(p) && staged.symlink_metadata(p.as_str()).is_err())
    {
        return Err(CommandError::StagedIncomplete {
            path: missing.as_str().to_owned(),
        }
        .into());
    }
    let baseline = snap.read_files(&selected)?;
    let manifest: BTreeMap<RepoPath, Sha256> = selected
        .iter()
        .filter_map(|p| evidence.file_manifest().get(p).map(|h| (p.clone(), *h)))
        .collect();
    let workspace = StagedWorkspace::open_existing(&args.staged, manifest, BTreeMap::new())?;
    let proposal = proposal_from_staged_tree(context, &workspace)?;
    let approved = ApprovedTurn::new(
        context,
        &evidence,
        &policy,
        Some(&snap),
        selected,
        &baseline,
    )
    .map_err(FinalizeError::from)?;
    Ok(finalize_repository_patch(&approved, &workspace, &proposal)?)
}

/// `digest`.
pub(crate) fn digest(args: &DigestArgs) -> Result<Outcome, CliError> {
    let candidate = read_candidate(&args.file)?;
    let digest = repository_patch_digest(&candidate)?;
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
    let expected = expected_digest(args.digest.as_deref(), args.repo.as_deref())?;
    let candidate = read_candidate(&args.file)?;
    let digest = match &expected {
        Some(expected) => verify_digest(&candidate, expected)?,
        None => repository_patch_digest(&candidate)?,
    };
    if let Some(named) = digest_from_name(&args.file)
        && named != digest
    {
        return Err(FinalizeError::StoreDigest {
            digest: named.to_string(),
        }
        .into());
    }
    let report = match &args.repo {
        Some(repo) => Some(verify_against_repository(&candidate, repo)?),
        None => None,
    };
    let evidence_expected = args
        .evidence_digest
        .as_deref()
        .map(|d| parse_digest_flag("--evidence-digest", d))
        .transpose()?;
    if evidence_expected.is_some() && args.evidence.len() != 1 {
        return Err(CommandError::DigestFlag {
            flag: "--evidence-digest (with exactly one --evidence)",
        }
        .into());
    }
    let mut verdicts = Vec::new();
    for path in &args.evidence {
        let bytes = read_file("--evidence", path, gate::MAX_EVIDENCE_BYTES)?;
        let file = gate::verify_evidence(&bytes, &candidate, evidence_expected.as_ref())?;
        verdicts.push(file);
    }
    let mut text = format!("structure: valid\ndigest:    {digest}\n");
    if expected.is_some() {
        text.push_str("digest matches --digest\n");
    }
    for file in &verdicts {
        let _ = writeln!(
            text,
            "evidence:  {} (bound to this candidate)",
            gate::verdict_line(&file.evidence, &file.digest)
        );
    }
    if let Some(r) = &report {
        let _ = writeln!(
            text,
            "repository: {} files match {} and apply cleanly; snapshot digest and derived fields match",
            r.files_checked,
            render::name(&r.baseline_commit_sha)
        );
    }
    Ok(Outcome {
        json: serde_json::json!({
            "digest": digest.to_string(),
            "digest_bound": expected.is_some(),
            "structure": "valid",
            "repository": report,
            "evidence": verdicts.iter().map(|f| serde_json::json!({
                "gate": f.evidence.gate,
                "outcome": f.evidence.outcome.as_str(),
                "evidence_digest": f.digest.to_string(),
            })).collect::<Vec<_>>(),
        }),
        text,
    })
}

/// `show`.
pub(crate) fn show(args: &ShowArgs) -> Result<Outcome, CliError> {
    let candidate = read_candidate(&args.file)?;
    let digest = repository_patch_digest(&candidate)?;
    let mut text = render::summary(&candidate, &digest.to_string());
    let dir = args
        .file
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or_else(|| Path::new("."));
    let mut gates = Vec::new();
    for (gate, parsed) in gate::find_evidence(dir, &digest)? {
        match parsed {
            Ok(file) if file.evidence.candidate_digest == Some(digest) => {
                let _ = writeln!(text, "{}", gate::verdict_line(&file.evidence, &file.digest));
                gates.push(serde_json::json!({
                    "gate": file.evidence.gate,
                    "outcome": file.evidence.outcome.as_str(),
                    "evidence_digest": file.digest.to_string(),
                }));
            }
            Ok(_) => {
                let _ = writeln!(
                    text,
                    "gate {}: evidence is for another candidate",
                    render::name(&gate)
                );
            }
            Err(e) => {
                let _ = writeln!(
                    text,
                    "gate {}: evidence refused ({})",
                    render::name(&gate),
                    e.code()
                );
            }
        }
    }
    text.push_str(&render::diffs(&candidate, render::colour_wanted()));
    Ok(Outcome {
        json: serde_json::json!({"digest": digest.to_string(), "candidate": candidate_json(&candidate)?, "gates": gates}),
        text,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_git::git;

    /// A repository with `src/a.txt` and `src/b.txt`, an approval over `src` granting the delete
    /// of `src/b.txt`, and an empty staged directory.
    fn staged_fixture() -> (tempfile::TempDir, FinalizeArgs) {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        std::fs::create_dir(repo.join("src")).unwrap();
        std::fs::write(repo.join("src/a.txt"), "a\n").unwrap();
        std::fs::write(repo.join("src/b.txt"), "b\n").unwrap();
        git(&repo, &["init", "-q", "."]);
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-q", "-m", "one"]);
        let head = git(&repo, &["rev-parse", "HEAD"]);
        let snap = GitSnapshot::load(&repo, &head).unwrap();
        let context = snapshot::context_from_value(serde_json::json!({
            "handoff_id": "h", "request_id": "r", "plan_id": "p", "app_id": "a",
            "build_registry_id": "b", "repository_full_name": "o/n",
            "baseline_commit_sha": head, "raw_request": "t", "request_type": "change",
            "approved_plan_digest": "0".repeat(64),
            "snapshot_digest": snap.snapshot_digest("o/n").to_string(),
            "graph_identity_digest": "g", "impact_report_digest": "i",
            "execution_strategy_id": "e", "rationale": "r", "allowed_paths": ["src"],
            "delete_paths": ["src/b.txt"],
        }))
        .unwrap();
        let approval = dir.path().join("approval.json");
        std::fs::write(&approval, serde_json::to_vec(&context).unwrap()).unwrap();
        let staged = dir.path().join("staged");
        std::fs::create_dir(&staged).unwrap();
        let args = FinalizeArgs {
            approval,
            snapshot: None,
            baseline_dir: None,
            staged,
            proposal: None,
            repo: Some(repo),
            policy: None,
            store: None,
        };
        (dir, args)
    }

    #[test]
    fn the_staged_form_derives_the_proposal_and_needs_every_editable_file() {
        let (_dir, args) = staged_fixture();
        // `src/a.txt` missing: only a granted delete may be missing.
        let err = finalize(&args).unwrap_err();
        assert_eq!(
            err.code,
            "PATCH_CANDIDATE_STAGED_INCOMPLETE",
            "{}",
            err.message()
        );
        assert!(
            err.message()
                .contains("--staged lacks the approved editable file 'src/a.txt'")
        );
        // Unchanged and `src/b.txt` left out: the granted delete is the whole change.
        std::fs::create_dir(args.staged.join("src")).unwrap();
        std::fs::write(args.staged.join("src/a.txt"), "a\n").unwrap();
        let outcome = finalize(&args).unwrap();
        let files = &outcome.json["candidate"]["changed_files"];
        assert_eq!(files.as_array().unwrap().len(), 1);
        assert_eq!(files[0]["path"], "src/b.txt");
        assert_eq!(files[0]["op"], "delete");
        assert_eq!(
            outcome.json["candidate"]["provider_id"],
            finalizer::STAGED_TREE_PROVIDER_ID
        );
        // Nothing changed at all: not a candidate.
        std::fs::write(args.staged.join("src/b.txt"), "b\n").unwrap();
        let err = finalize(&args).unwrap_err();
        assert_eq!(err.code, "REPOSITORY_PATCH_PROPOSAL_STATUS");
    }

    #[test]
    fn the_two_forms_do_not_mix() {
        let (_dir, mut args) = staged_fixture();
        args.repo = None;
        let err = finalize(&args).unwrap_err();
        assert_eq!(
            (err.code, err.class),
            ("PATCH_CANDIDATE_FINALIZE_FLAGS", vocab::FailureClass::Usage)
        );
        assert!(err.message().contains("--repo"), "{}", err.message());
        args.snapshot = Some(args.approval.clone());
        let err = finalize(&args).unwrap_err();
        assert_eq!(err.code, "PATCH_CANDIDATE_FINALIZE_FLAGS");
        assert!(
            err.message().contains("--baseline-dir"),
            "{}",
            err.message()
        );
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
