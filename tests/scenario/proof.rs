//! The proof image end to end through the library pipeline: update, exact create (absence proof
//! over the complete tree) and delete-only (empty marker) round trips through stage and finalise
//! to candidates that `git apply --check` and the finalizer's repository verification accept.

use std::collections::BTreeMap;
use std::path::Path;

use container::BollardRuntime;
use finalizer::{CandidateStore, RepositoryPatchCandidate};
use snapshot::{FileOp, RepoPath};
use turn::{PipelineOutcome, PipelineRequest, run_pipeline};
use turn::{TurnConfig, TurnError};

use crate::support::*;

pub const DASHBOARD: &str = "app/ui/pages/Dashboard.jsx";
pub const LEGACY: &str = "app/ui/pages/Legacy.jsx";
pub const NEW: &str = "app/ui/pages/New.jsx";
pub const TEST_FILE: &str = "tests/test_dashboard.py";

pub fn demo_files() -> BTreeMap<&'static str, String> {
    BTreeMap::from([
        (
            DASHBOARD,
            "export default function Dashboard() {\n  return 1;\n}\n".to_owned(),
        ),
        (LEGACY, "export default function Legacy() {}\n".to_owned()),
        (
            TEST_FILE,
            "def test_dashboard():\n    assert True\n".to_owned(),
        ),
        ("README.md", "# fixture\n".to_owned()),
    ])
}

pub struct Run {
    pub outcome: Result<PipelineOutcome, TurnError>,
    pub repo: tempfile::TempDir,
    pub store_dir: tempfile::TempDir,
}

fn paths(v: &[&str]) -> Vec<RepoPath> {
    v.iter().map(|p| RepoPath::parse(p).unwrap()).collect()
}

/// [`pipeline_under`] `runtime` with the recorded proof image and a 75 s wall budget.
pub async fn proof_turn_under(
    runtime: Option<&str>,
    docker: &BollardRuntime,
    task: &str,
    create: &[&str],
    delete: &[&str],
    selected: Option<&[&str]>,
) -> Run {
    let images = proof_images();
    pipeline_under(
        runtime,
        docker,
        images.image.as_str(),
        images.image_id.as_str(),
        task,
        create,
        delete,
        selected,
        75,
    )
    .await
}

/// Runs the whole pipeline on a fresh demo repository with the given grants and selection, under
/// a named OCI runtime (`None`: the daemon default).
#[allow(clippy::too_many_arguments)]
pub async fn pipeline_under(
    runtime: Option<&str>,
    docker: &BollardRuntime,
    image: &str,
    image_id: &str,
    task: &str,
    create: &[&str],
    delete: &[&str],
    selected: Option<&[&str]>,
    wall: u64,
) -> Run {
    let (repo, commit) = git_repo(&demo_files());
    let context = approval(
        repo.path(),
        &commit,
        task,
        &["app/", "tests/"],
        &["tests/"],
        create,
        delete,
    );
    let config = TurnConfig::parse(image, image_id, wall, 700_000)
        .unwrap()
        .with_runtime(runtime.map(|r| r.parse().unwrap()));
    let sinks = PipelineSinks::fresh();
    let outcome = run_pipeline(
        docker,
        PipelineRequest {
            selected: selected.map(paths),
            read_only: Some(paths(&[TEST_FILE])),
            ..sinks.request(repo.path(), &commit, &context, task, &config)
        },
    )
    .await;
    sinks.assert_staging_removed();
    Run {
        outcome,
        repo,
        store_dir: sinks.store_dir,
    }
}

/// `git apply --check` in the untouched repository, plus the finalizer's full verification.
pub fn assert_applies(repo: &Path, candidate: &RepositoryPatchCandidate) {
    let patch: String = candidate.changed_files().iter().map(|f| f.diff()).collect();
    let patch_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(patch_file.path(), patch).unwrap();
    git_text(
        repo,
        &["apply", "--check", patch_file.path().to_str().unwrap()],
    );
    finalizer::verify_against_repository(candidate, repo).unwrap();
    let status = git_text(repo, &["status", "--porcelain"]);
    assert!(status.is_empty(), "the repository was modified");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_proof_update_round_trip() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let run = proof_turn_under(None, &docker, "Update the dashboard.", &[], &[], None).await;
    let outcome = run.outcome.unwrap();
    assert_eq!(
        ops(&outcome.candidate),
        vec![(DASHBOARD.to_owned(), FileOp::Update)]
    );
    assert_eq!(outcome.read_only, paths(&[TEST_FILE]));
    assert_eq!(outcome.candidate.validation_state(), "pending");
    assert!(!outcome.candidate.mutation_allowed());
    let stored = CandidateStore::open(run.store_dir.path())
        .unwrap()
        .get(&outcome.digest)
        .unwrap();
    assert_eq!(stored, outcome.candidate);
    assert_applies(run.repo.path(), &outcome.candidate);
    assert_clean_and_tally(&docker, "docker_proof_update_round_trip").await;
}

/// A turn that makes exactly one change, `expected` (path, operation), whose candidate applies.
async fn single_op_round_trip(
    name: &str,
    task: &str,
    create: &[&str],
    delete: &[&str],
    selected: Option<&[&str]>,
    expected: (&str, FileOp),
) {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let run = proof_turn_under(None, &docker, task, create, delete, selected).await;
    let outcome = run.outcome.unwrap();
    assert_eq!(
        ops(&outcome.candidate),
        vec![(expected.0.to_owned(), expected.1)]
    );
    assert_applies(run.repo.path(), &outcome.candidate);
    assert_clean_and_tally(&docker, name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_proof_exact_create_round_trip() {
    single_op_round_trip(
        "docker_proof_exact_create_round_trip",
        "Add the New page.",
        &[NEW],
        &[],
        Some(&[]),
        (NEW, FileOp::Create),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_proof_delete_only_round_trip() {
    single_op_round_trip(
        "docker_proof_delete_only_round_trip",
        "Retire the Legacy page.",
        &[],
        &[LEGACY],
        Some(&[LEGACY]),
        (LEGACY, FileOp::Delete),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_proof_create_over_existing_path_never_reaches_docker() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    // A case-folded twin of an existing file: the absence proof fails before any container.
    let run = proof_turn_under(
        None,
        &docker,
        "Add.",
        &["app/ui/pages/dashboard.jsx"],
        &[],
        Some(&[]),
    )
    .await;
    let err = run.outcome.unwrap_err();
    assert!(
        err.code().starts_with("REPOSITORY_PATCH_CREATE_"),
        "{}",
        err.code()
    );
    assert_clean_and_tally(
        &docker,
        "docker_proof_create_over_existing_path_never_reaches_docker",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_proof_isolation_probes_all_report_confinement() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let task = "Update the dashboard.\nprobe: isolation\nprobe-tcp: 1.1.1.1:443\nprobe-env: MOZAIKS_ACP_HOST_SECRET\nprobe-file: /workspace/.host_sentinel";
    let run = proof_turn_under(None, &docker, task, &[], &[], None).await;
    let outcome = run.outcome.unwrap();
    assert_eq!(
        ops(&outcome.candidate),
        vec![(DASHBOARD.to_owned(), FileOp::Update)]
    );
    assert_clean_and_tally(
        &docker,
        "docker_proof_isolation_probes_all_report_confinement",
    )
    .await;
}
