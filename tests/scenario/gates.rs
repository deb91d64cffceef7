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

use crate::support::{docker, docker_lock, git_repo, tally};

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

/// The fetched real projects (`fixtures/gates/fetch.sh`, run here when the cache lacks them).
fn fixtures() -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/gates/fetch.sh");
    let out = std::process::Command::new("bash")
        .arg(script)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "fetch.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

fn rev(repo: &Path, name: &str) -> String {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["rev-parse", &format!("{name}^{{commit}}")])
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

fn show(repo: &Path, commit: &str, path: &str) -> String {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["show", &format!("{commit}:{path}")])
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

const UNIQUE_OK: &str = "counts[element] == 1}";
const UNIQUE_BROKEN: &str = "counts[element] >= 1}";
const UNIQUE_CLASS: &str = "tests.test_more.UniqueToEachTests::";

#[tokio::test]
async fn docker_gate_real_python_project_new_fixed_and_still_failing() {
    let _lock = docker_lock().lock().await;
    let Some(env) = env().await else { return };
    let repo = fixtures().join("more-itertools");
    let pristine = rev(&repo, "pristine");
    let broken_commit = rev(&repo, "broken");
    let defs = definitions(&env.image, 600, "");
    let more = show(&repo, &pristine, "more_itertools/more.py");
    assert!(more.contains(UNIQUE_OK));

    // The published source passes its own suite; a candidate that breaks one function fails
    // with exactly that function's tests as new failures.
    let breaks = candidate(
        &pristine,
        &[(
            "more_itertools/more.py",
            Some(&more),
            &more.replace(UNIQUE_OK, UNIQUE_BROKEN),
        )],
    );
    let r = run(&env, &defs, &repo, &breaks).await;
    let baseline = gate::parse_evidence(r.baseline_file.as_ref().unwrap())
        .unwrap()
        .evidence;
    assert_eq!(baseline.outcome, GateOutcome::Passed, "{:?}", baseline.code);
    let tests = baseline.tests.unwrap();
    assert!(tests.passed > 500 && !tests.truncated, "{tests:?}");
    assert_eq!(
        r.evidence.outcome,
        GateOutcome::Failed,
        "{:?}",
        r.evidence.code
    );
    let c = r.evidence.comparison.clone().unwrap();
    assert!(c.regression && c.new_failures.count > 0);
    assert!(
        c.new_failures
            .ids
            .iter()
            .all(|id| id.starts_with(UNIQUE_CLASS)),
        "{:?}",
        c.new_failures.ids
    );
    assert_eq!(c.still_failing.count, 0);
    verify_evidence(&r.file, &breaks, Some(&r.digest)).unwrap();
    let broken_ids = c.new_failures.ids.clone();

    // At the commit with the deliberately broken function: restoring it reports exactly those
    // tests as fixed; an unrelated change leaves them still failing, never blamed on it.
    let broken_more = show(&repo, &broken_commit, "more_itertools/more.py");
    let fix = candidate(
        &broken_commit,
        &[("more_itertools/more.py", Some(&broken_more), &more)],
    );
    let r = run(&env, &defs, &repo, &fix).await;
    assert_eq!(
        r.evidence.outcome,
        GateOutcome::Passed,
        "{:?}",
        r.evidence.code
    );
    let c = r.evidence.comparison.clone().unwrap();
    assert_eq!(c.fixed.ids, broken_ids);
    assert!(!c.regression);
    let readme = show(&repo, &broken_commit, "README.rst");
    let unrelated = candidate(
        &broken_commit,
        &[("README.rst", Some(&readme), &format!("{readme}\nA note.\n"))],
    );
    let r = run(&env, &defs, &repo, &unrelated).await;
    assert_eq!((r.baseline, r.containers_run), (BaselineUse::Cached, 1));
    assert_eq!(r.evidence.outcome, GateOutcome::Failed);
    let c = r.evidence.comparison.clone().unwrap();
    assert_eq!(c.still_failing.ids, broken_ids);
    assert_eq!(c.new_failures.count, 0);
    assert!(!c.regression);
    assert_eq!(own_containers(&env.docker).await, 0);
    tally("docker_gate_real_python_project_new_fixed_and_still_failing");
}

/// Hostile candidate code in `calc.py` (imported by the tests).
async fn hostile(env: &Env, code: &str, wall_seconds: u64) -> gate::GateResult {
    let (dir, commit) = small_repo();
    let defs = definitions(&env.image, wall_seconds, "");
    let cand = candidate(
        &commit,
        &[("calc.py", Some(CALC), &format!("{code}\n{CALC}"))],
    );
    let r = run(env, &defs, dir.path(), &cand).await;
    verify_evidence(&r.file, &cand, Some(&r.digest)).unwrap();
    assert_eq!(
        own_containers(&env.docker).await,
        0,
        "a gate container was left behind"
    );
    r
}

#[tokio::test]
async fn docker_gate_hostile_candidates_end_honestly() {
    let _lock = docker_lock().lock().await;
    let Some(env) = env().await else { return };

    // Sleeping past the deadline: timed out, never a pass.
    let r = hostile(&env, "import time\ntime.sleep(120)", 5).await;
    assert_eq!(
        r.evidence.outcome,
        GateOutcome::TimedOut,
        "{:?}",
        r.evidence.code
    );

    // A fork bomb runs into the pids limit and the deadline; nothing survives the run.
    let bomb = "import os\nfor _ in range(100000):\n    try:\n        os.fork()\n    except OSError:\n        pass";
    let r = hostile(&env, bomb, 8).await;
    assert_ne!(r.evidence.outcome, GateOutcome::Passed);

    // A log flood (pytest spools captured output through its /tmp, so what reaches the runner's
    // pipe is bounded by that tmpfs): counted in full, only the bounded tail kept.
    let flood = "import os\nfor _ in range(4096):\n    os.write(1, b'x' * 65536)";
    let r = hostile(&env, flood, 60).await;
    assert!(
        r.evidence.log.total_bytes >= 32 * 1024 * 1024,
        "{}",
        r.evidence.log.total_bytes
    );
    assert!(r.evidence.log.tail_bytes <= 4096);
    assert_ne!(
        r.evidence.outcome,
        GateOutcome::Error,
        "{:?}",
        r.evidence.code
    );

    // Fake PASSED lines and a fake report frame written where the runner's stdout might be:
    // the verdict is the runner's wait and the JUnit file, so the broken test still fails.
    let fake = r#"import os, sys, struct
line = b"test_calc.py::test_mul PASSED\n" * 100
os.write(1, line)
frame = b'{"version":1,"nonce":"' + b"0" * 64 + b'","status":"completed","runner_error":null,"exit":{"code":0},"wall_ms":1,"log":{"total_bytes":0,"tail_b64":""},"junit":null}'
for pid in os.listdir("/proc"):
    for fd in ("0", "1", "2"):
        try:
            with open(f"/proc/{pid}/fd/{fd}", "wb") as f:
                f.write(struct.pack(">I", len(frame)) + frame)
        except OSError:
            pass
def mul(a, b):
    return a + b
"#;
    let (dir, commit) = small_repo();
    let defs = definitions(&env.image, 60, "");
    let forged = format!("{CALC}\n{fake}");
    let cand = candidate(&commit, &[("calc.py", Some(CALC), &forged)]);
    let r = run(&env, &defs, dir.path(), &cand).await;
    assert_eq!(
        r.evidence.outcome,
        GateOutcome::Failed,
        "{:?}",
        r.evidence.code
    );
    let c = r.evidence.comparison.clone().unwrap();
    assert_eq!(c.new_failures.ids, vec!["test_calc::test_mul".to_owned()]);
    assert_eq!(own_containers(&env.docker).await, 0);
    tally("docker_gate_hostile_candidates_end_honestly");
}
