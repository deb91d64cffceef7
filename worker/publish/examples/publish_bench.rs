//! The publication benchmark's driver (see `benches/publish/run.sh`).
//!
//! `publish_bench input REPO BASELINE OUT N` writes `OUT/candidate.json` (a candidate updating
//! the first N files under `src/` at BASELINE, one appended line each) and `OUT/candidate.patch`
//! (its `git apply` form); `publish_bench publish REPO REMOTE BRANCH CANDIDATE` publishes it
//! with a fixed identity and prints the commit id.

use std::error::Error;
use std::path::Path;
use std::process::Command;

use finalizer::{CandidateFields, RepositoryPatchCandidate, RepositoryPatchFile, unified_diff};
use publish::{BranchName, CommitIdentity, CredentialSource, PublishRequest, Remote};
use snapshot::{FileOp, RepoPath};
use vocab::Sha256;

type Res<T> = Result<T, Box<dyn Error>>;

fn git_show(repo: &Path, spec: &str) -> Res<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["show", spec])
        .output()?;
    if !out.status.success() {
        return Err(format!("git show {spec} failed").into());
    }
    Ok(String::from_utf8(out.stdout)?)
}

fn input(repo: &Path, baseline: &str, out: &Path, n: usize) -> Res<()> {
    let listing = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["ls-tree", "-r", "--name-only", baseline, "--", "src"])
        .output()?;
    let names = String::from_utf8(listing.stdout)?;
    let mut files = Vec::new();
    for name in names.lines().take(n) {
        let before = git_show(repo, &format!("{baseline}:{name}"))?;
        let after = format!("{before}changed by the candidate\n");
        files.push(RepositoryPatchFile::new(
            RepoPath::parse(name).map_err(|_| "unsafe path in the bench repository")?,
            FileOp::Update,
            Some(Sha256::of(before.as_bytes())),
            Some(Sha256::of(after.as_bytes())),
            Some(after.clone()),
            unified_diff(name, Some(&before), Some(&after)),
        )?);
    }
    let fields = CandidateFields {
        handoff_id: "handoff-bench".into(),
        request_id: "request-bench".into(),
        plan_id: "plan-bench".into(),
        app_id: "app-bench".into(),
        build_registry_id: "build-bench".into(),
        repository_full_name: "bench/repo".into(),
        baseline_commit_sha: baseline.to_owned(),
        approved_plan_digest: "b".repeat(64),
        snapshot_digest: format!("sha256:{}", "c".repeat(64)),
        proposal_id: "proposal-bench".into(),
        provider_id: "synthetic".into(),
        summary: "bench".into(),
        rationale: finalizer::CANDIDATE_RATIONALE.into(),
        ..CandidateFields::default()
    };
    let candidate = RepositoryPatchCandidate::new(fields, files)?;
    std::fs::write(out.join("candidate.json"), candidate.to_json_pretty()?)?;
    std::fs::write(
        out.join("candidate.patch"),
        finalizer::git_patch(&candidate)?,
    )?;
    Ok(())
}

fn publish_once(repo: &Path, remote: &str, branch: &str, candidate: &Path) -> Res<()> {
    let candidate = finalizer::validate_candidate_json(&std::fs::read(candidate)?)?;
    let remote = Remote::parse(remote)?;
    let branch = BranchName::parse(branch)?;
    let base = BranchName::parse("main")?;
    let identity = CommitIdentity::new("Bench", "bench@example.invalid", 1_700_000_000, 0)?;
    let record = publish::publish(&PublishRequest {
        candidate: &candidate,
        source: Some(repo),
        remote: &remote,
        branch: &branch,
        base: &base,
        identity: &identity,
        credential: &CredentialSource::None,
        rebase: None,
        extends: None,
    })?;
    println!("{}", record.commit_id);
    Ok(())
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["input", repo, baseline, out, n] => {
            input(Path::new(repo), baseline, Path::new(out), n.parse()?)
        }
        ["publish", repo, remote, branch, candidate] => {
            publish_once(Path::new(repo), remote, branch, Path::new(candidate))
        }
        _ => Err(
            "usage: publish_bench input REPO BASELINE OUT N | publish REPO REMOTE BRANCH CANDIDATE"
                .into(),
        ),
    }
}
