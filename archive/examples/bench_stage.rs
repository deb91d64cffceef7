//! Benchmark driver (see `benches/archive/run.sh`): inspects one archive (strict read, manifest,
//! archive digest), stages it into a fresh private directory, then removes the directory. The approval grants the creates
//! `bench/f00.txt` … `bench/f49.txt` (fixed here, never taken from the archive), so no baseline
//! has to be prepared. Usage: `bench_stage ARCHIVE WORKDIR [--inspect-only]`.
#![allow(clippy::print_stderr)]

use std::path::PathBuf;
use std::process::ExitCode;

use archive::{ArchiveLimits, StageLimits, read_archive_manifest_from, stage_workspace_archive};
use snapshot::{
    ApprovedExecutionContext, ApprovedTurn, BaselineFiles, CreateAbsence, DefaultPathGuard,
    RepoPath, RepositorySnapshotEvidence, SnapshotError,
};

/// The approved snapshot has no files, so every create path is absent.
#[derive(Debug)]
struct EmptyTree;

impl CreateAbsence for EmptyTree {
    fn prove_absent(&self, _path: &RepoPath) -> Result<(), SnapshotError> {
        Ok(())
    }
}

fn run() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let archive_path = PathBuf::from(args.next().ok_or("usage: bench_stage ARCHIVE WORKDIR")?);
    let workdir = PathBuf::from(args.next().ok_or("usage: bench_stage ARCHIVE WORKDIR")?);
    let inspect_only = args.next().as_deref() == Some("--inspect-only");
    if inspect_only {
        let file = std::fs::File::open(&archive_path).map_err(|e| e.to_string())?;
        let len = file.metadata().map_err(|e| e.to_string())?.len();
        let (_, m) = read_archive_manifest_from(file, len, &ArchiveLimits::default())
            .map_err(|e| e.to_string())?;
        return if m.entries.is_empty() {
            Err("no entries".into())
        } else {
            Ok(())
        };
    }
    // Inspect (the manifest and the archive digest), then stage the same bytes.
    let file = std::fs::File::open(&archive_path).map_err(|e| e.to_string())?;
    let len = file.metadata().map_err(|e| e.to_string())?.len();
    let (bytes, _) = read_archive_manifest_from(file, len, &ArchiveLimits::default())
        .map_err(|e| e.to_string())?;
    let creates: Vec<String> = (0..50).map(|i| format!("bench/f{i:02}.txt")).collect();
    let context = serde_json::json!({
        "handoff_id": "bench", "request_id": "bench", "plan_id": "bench", "app_id": "bench",
        "build_registry_id": "bench", "repository_full_name": "bench/bench",
        "baseline_commit_sha": "0".repeat(40), "raw_request": "bench", "request_type": "bench",
        "approved_plan_digest": "0".repeat(64), "snapshot_digest": "bench",
        "graph_identity_digest": "bench", "impact_report_digest": "bench",
        "execution_strategy_id": "bench", "rationale": "bench",
        "allowed_paths": ["bench/"], "create_paths": creates,
    });
    let snapshot = serde_json::json!({
        "plan_id": "bench", "request_id": "bench", "app_id": "bench",
        "repository_full_name": "bench/bench", "baseline_commit_sha": "0".repeat(40),
        "snapshot_digest": "bench", "file_manifest": {},
    });
    let context =
        ApprovedExecutionContext::from_json(&context.to_string()).map_err(|e| e.to_string())?;
    let snapshot =
        RepositorySnapshotEvidence::from_json(&snapshot.to_string()).map_err(|e| e.to_string())?;
    let root = workdir.join(format!("stage-{}", std::process::id()));
    let baseline = BaselineFiles::new();
    let policy = DefaultPathGuard::default();
    let approved = ApprovedTurn::new(
        &context,
        &snapshot,
        &policy,
        Some(&EmptyTree),
        Vec::new(),
        &baseline,
    )
    .map_err(|e| e.to_string())?;
    let limits = StageLimits {
        max_files: archive::MAX_ARCHIVE_FILES,
        max_archive_bytes: archive::MAX_ARCHIVE_BYTES,
    };
    let ws =
        stage_workspace_archive(&approved, &bytes, &root, limits).map_err(|e| e.to_string())?;
    ws.cleanup().map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
