//! Benchmark driver (see `benches/finalizer/run.sh`).
//!
//! * `finalize_bench turn BEFORE_DIR AFTER_DIR` — finalises AFTER_DIR (a staged tree) against
//!   BEFORE_DIR (the baseline) for a synthetic approval covering every file, digests the
//!   candidate and prints the digest: the whole host-side cost of one turn, file reading included.
//!   The snapshot manifest is read from `manifest.json` next to BEFORE_DIR (written by `gen.py`).
//! * `finalize_bench diff BEFORE_FILE AFTER_FILE` — one unified diff, printing its mode and size.
//! * `finalize_bench budget BEFORE_FILE AFTER_FILE` — the work budget that pair needs (to size
//!   `DEFAULT_WORK_BUDGET`).

use std::collections::BTreeMap;
use std::error::Error;
use std::path::Path;

use archive::StagedWorkspace;
use finalizer::{finalize_repository_patch, repository_patch_digest, unified_diff_with_budget};
use snapshot::{
    ApprovedExecutionContext, ApprovedTurn, BaselineFiles, DefaultPathGuard, FileOp,
    ProposedFileChange, RepoPath, RepositorySnapshotEvidence, StagedPatchProposal,
};
use vocab::Sha256;

type Res<T> = Result<T, Box<dyn Error>>;

fn read_tree(root: &Path) -> Res<BaselineFiles> {
    let mut out = BaselineFiles::new();
    let mut stack = vec![(root.to_owned(), String::new())];
    while let Some((dir, prefix)) = stack.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let name = entry
                .file_name()
                .into_string()
                .map_err(|_| "non-UTF-8 name")?;
            let rel = format!("{prefix}{name}");
            if entry.file_type()?.is_dir() {
                stack.push((entry.path(), format!("{rel}/")));
            } else {
                let path = RepoPath::parse(&rel).map_err(|r| r.to_string())?;
                out.insert(path, std::fs::read_to_string(entry.path())?);
            }
        }
    }
    Ok(out)
}

fn turn(before: &Path, after: &Path) -> Res<()> {
    let baseline = read_tree(before)?;
    let selected: Vec<RepoPath> = baseline.keys().cloned().collect();
    // The snapshot evidence's manifest arrives precomputed (as with the CLI's snapshot JSON).
    let manifest_path = before.parent().ok_or("no parent")?.join("manifest.json");
    let manifest: BTreeMap<RepoPath, Sha256> =
        serde_json::from_slice(&std::fs::read(manifest_path)?)?;
    let commit = "0".repeat(40);
    let digest = format!("sha256:{}", "1".repeat(64));
    let context = ApprovedExecutionContext::from_json(
        &serde_json::json!({
            "schema_version": "managed_refinement.execution_context.v1",
            "handoff_id": "h", "request_id": "r", "plan_id": "p", "app_id": "a",
            "build_registry_id": "b", "repository_full_name": "bench/repo",
            "baseline_commit_sha": commit, "raw_request": "bench", "request_type": "patch",
            "approved_plan_digest": "a".repeat(64), "snapshot_digest": digest,
            "graph_identity_digest": "g", "impact_report_digest": "i",
            "execution_strategy_id": "s", "rationale": "r", "allowed_paths": ["src/"],
        })
        .to_string(),
    )?;
    let snapshot = RepositorySnapshotEvidence::new(
        "p".into(),
        "r".into(),
        "a".into(),
        "bench/repo".into(),
        commit,
        digest,
        manifest.clone(),
    )?;
    let workspace = StagedWorkspace::open_existing(after, manifest, BTreeMap::new())?;
    // The provider's claim, as the container would send it (parsed elsewhere; built directly
    // here so JSON parsing is not part of the measurement).
    let staged = read_tree(after)?;
    let changed = staged
        .into_iter()
        .filter(|(p, c)| baseline.get(p) != Some(c))
        .map(|(p, c)| ProposedFileChange {
            path: p.as_str().to_owned(),
            op: FileOp::Update,
            content: Some(c),
        })
        .collect();
    let mut proposal: StagedPatchProposal = serde_json::from_value(serde_json::json!({
        "proposal_id": "bench", "provider_id": "bench", "status": "completed",
    }))?;
    proposal.changed_files = changed;
    proposal.owned_paths = selected.iter().map(|p| p.as_str().to_owned()).collect();
    let candidate = finalize_repository_patch(
        &ApprovedTurn::new(
            &context,
            &snapshot,
            &DefaultPathGuard::default(),
            None,
            selected.clone(),
            &baseline,
        )?,
        &workspace,
        &proposal,
    )?;
    let diff_bytes: usize = candidate
        .changed_files()
        .iter()
        .map(|f| f.diff().len())
        .sum();
    println!(
        "{} files={} diff_bytes={diff_bytes}",
        repository_patch_digest(&candidate)?,
        candidate.changed_files().len()
    );
    Ok(())
}

fn diff(before: &Path, after: &Path) -> Res<()> {
    let a = std::fs::read_to_string(before)?;
    let b = std::fs::read_to_string(after)?;
    let d = unified_diff_with_budget("f", Some(&a), Some(&b), finalizer::DEFAULT_WORK_BUDGET);
    println!("mode={:?} bytes={}", d.mode, d.text.len());
    Ok(())
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1..) {
        Some([cmd, a, b]) if cmd == "turn" => turn(Path::new(a), Path::new(b)),
        Some([cmd, a, b]) if cmd == "diff" => diff(Path::new(a), Path::new(b)),
        Some([cmd, a, b]) if cmd == "budget" => {
            let a = std::fs::read_to_string(a)?;
            let b = std::fs::read_to_string(b)?;
            println!("{}", min_budget(&a, &b));
            Ok(())
        }
        _ => Err(
            "usage: finalize_bench (turn BEFORE_DIR AFTER_DIR | diff|budget BEFORE AFTER)".into(),
        ),
    }
}

/// The smallest budget (doubling from 1000 steps) under which the diff is exact.
fn min_budget(a: &str, b: &str) -> u64 {
    let mut budget = 1_000u64;
    while unified_diff_with_budget("f", Some(a), Some(b), budget).mode
        == finalizer::DiffMode::WholeFile
    {
        budget *= 2;
    }
    budget
}
