//! Validation gates end to end on the real daemon: the gate crate's host side with the real
//! gate runner in the python gate image (`images/build.sh --gate python`), on a real project's
//! published source (`fixtures/gates/fetch.sh`) and on small repositories for the hostile cases.
//! Docker tests are `docker_gate_*`; with `PATCH_CANDIDATE_REQUIRE_DOCKER=1` a missing daemon or
//! gate image is a failure.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use container::ContainerRuntime as _;
use finalizer::{CandidateFields, RepositoryPatchCandidate, RepositoryPatchFile};
use gate::{
    BaselineCache, BaselineTree, BaselineUse, GateDefinitions, GateOutcome, RunContext,
    evaluate_gate, verify_evidence,
};
use snapshot::{FileOp, RepoPath, Sha256};

use crate::support::{docker, docker_cli, docker_lock, git_repo, tally};

pub const PYTHON_GATE_IMAGE: &str = "patch-candidate-gate-python:local";

/// The python gate image's ID, or `None` (a failure when Docker is required).
fn python_image() -> Option<String> {
    let out = std::process::Command::new("docker")
        .args(["image", "inspect", "--format", "{{.Id}}", PYTHON_GATE_IMAGE])
        .output()
        .ok()?;
    if out.status.success() {
        return Some(String::from_utf8(out.stdout).ok()?.trim().to_owned());
    }
    assert!(
        std::env::var("PATCH_CANDIDATE_REQUIRE_DOCKER").as_deref() != Ok("1"),
        "{PYTHON_GATE_IMAGE} missing: run images/build.sh --gate python"
    );
    eprintln!("SKIPPED ({PYTHON_GATE_IMAGE} missing)");
    None
}

fn definitions(image: &str, wall_seconds: u64, extra_pinned: &str) -> GateDefinitions {
    let text = format!(
        r#"version = 1
[gates.pytest]
image = "{image}"
argv = ["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml=/workspace/.gate-junit.xml"]
cwd = "."
wall_seconds = {wall_seconds}
kill_grace_ms = 1000
memory_mib = 512
pids = 128
cpu_millis = 1000
workspace_mib = 64
tmp_mib = 64
log_tail_bytes = 4096
pinned = ["pytest.ini", "conftest.py", "**/conftest.py"{extra_pinned}]
[gates.pytest.env]
HOME = "/tmp/home"
PATH = "/usr/bin:/bin"
PYTHONDONTWRITEBYTECODE = "1"
[gates.pytest.junit]
path = ".gate-junit.xml"
max_bytes = 4194304
max_cases = 1500
max_depth = 16
"#
    );
    GateDefinitions::parse(text.as_bytes()).unwrap()
}

/// A candidate at `commit` changing `path` from `old` (None: create) to `new`.
pub fn candidate(commit: &str, changes: &[(&str, Option<&str>, &str)]) -> RepositoryPatchCandidate {
    let files = changes
        .iter()
        .map(|(path, old, new)| {
            RepositoryPatchFile::new(
                path.parse::<RepoPath>().unwrap(),
                if old.is_some() {
                    FileOp::Update
                } else {
                    FileOp::Create
                },
                old.map(|o| Sha256::of(o.as_bytes())),
                Some(Sha256::of(new.as_bytes())),
                Some((*new).to_owned()),
                String::new(),
            )
            .unwrap()
        })
        .collect();
    RepositoryPatchCandidate::new(
        CandidateFields {
            baseline_commit_sha: commit.to_owned(),
            summary: "gate scenario".to_owned(),
            required_validation_gates: vec!["pytest".to_owned()],
            ..CandidateFields::default()
        },
        files,
    )
    .unwrap()
}

/// Gate containers this process owns (never another test process's).
async fn own_containers(docker: &container::BollardRuntime) -> usize {
    let me = format!("{}:", std::process::id());
    docker
        .list_turns()
        .await
        .unwrap()
        .iter()
        .filter(|c| {
            c.labels
                .get("mozaiks.refinement.repository_turn.owner")
                .is_some_and(|o| o.starts_with(&me))
        })
        .count()
}

const CALC: &str = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n";
const TESTS: &str = "from calc import add, mul\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n";

fn small_repo() -> (tempfile::TempDir, String) {
    git_repo(&BTreeMap::from([
        ("calc.py", CALC.to_owned()),
        ("test_calc.py", TESTS.to_owned()),
        ("pytest.ini", "[pytest]\n".to_owned()),
    ]))
}

struct Env {
    docker: container::BollardRuntime,
    image: String,
    state: tempfile::TempDir,
}

async fn env() -> Option<Env> {
    let docker = docker().await?;
    let image = python_image()?;
    Some(Env {
        docker,
        image,
        state: tempfile::tempdir().unwrap(),
    })
}

async fn run(
    env: &Env,
    defs: &GateDefinitions,
    repo: &Path,
    cand: &RepositoryPatchCandidate,
) -> gate::GateResult {
    let base = BaselineTree::load(repo, cand.baseline_commit_sha()).unwrap();
    let cache = BaselineCache::open(env.state.path()).unwrap();
    evaluate_gate(
        &env.docker,
        defs.get("pytest").unwrap(),
        &base,
        cand,
        &cache,
        RunContext::default(),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn docker_gate_small_repository_verdicts_and_cache() {
    let _lock = docker_lock().lock().await;
    let Some(env) = env().await else { return };
    let (dir, commit) = small_repo();
    let defs = definitions(&env.image, 120, "");

    // Breaking `mul` fails exactly test_mul, new at this commit.
    let broken = candidate(
        &commit,
        &[("calc.py", Some(CALC), &CALC.replace("a * b", "a + b"))],
    );
    let r = run(&env, &defs, dir.path(), &broken).await;
    assert_eq!(r.evidence.outcome, GateOutcome::Failed, "{:?}", r.evidence);
    assert_eq!(r.baseline, BaselineUse::Ran);
    let c = r.evidence.comparison.clone().unwrap();
    assert_eq!(c.new_failures.ids, vec!["test_calc::test_mul".to_owned()]);
    assert_eq!(c.still_failing.count, 0);
    verify_evidence(&r.file, &broken, Some(&r.digest)).unwrap();

    // A harmless second candidate at the same commit: one run (the baseline is cached).
    let fine = candidate(&commit, &[("extra.py", None, "X = 1\n")]);
    let r2 = run(&env, &defs, dir.path(), &fine).await;
    assert_eq!(r2.evidence.outcome, GateOutcome::Passed);
    assert_eq!((r2.baseline, r2.containers_run), (BaselineUse::Cached, 1));

    // A pinned path: refused, nothing runs.
    let pinned = candidate(
        &commit,
        &[(
            "pytest.ini",
            Some("[pytest]\n"),
            "[pytest]\naddopts = -k nothing\n",
        )],
    );
    let r3 = run(&env, &defs, dir.path(), &pinned).await;
    assert_eq!(r3.evidence.outcome, GateOutcome::PolicyRefused);
    assert_eq!(r3.containers_run, 0);
    assert_eq!(own_containers(&env.docker).await, 0);
    tally("docker_gate_small_repository_verdicts_and_cache");
}
