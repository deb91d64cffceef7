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
    BaselineCache, BaselineTree, BaselineUse, GateDefinitions, RunContext, evaluate_gate,
    verify_evidence,
};
use snapshot::{FileOp, RepoPath};
use vocab::GateVerdict;
use vocab::Sha256;

use crate::support::{assert_ok, docker, docker_lock, git_out, git_repo, git_text, run_ok, tally};

pub const PYTHON_GATE_IMAGE: &str = "patch-candidate-gate-python:local";

/// The python gate image's ID, or `None` (a failure when Docker is required).
pub(crate) fn python_image() -> Option<String> {
    let out = std::process::Command::new("docker")
        .args(["image", "inspect", "--format", "{{.Id}}", PYTHON_GATE_IMAGE])
        .output()
        .ok()?;
    if out.status.success() {
        return Some(String::from_utf8(out.stdout).ok()?.trim().to_owned());
    }
    assert!(
        !crate::support::docker_required(),
        "{PYTHON_GATE_IMAGE} missing: run images/build.sh --gate python"
    );
    eprintln!("SKIPPED ({PYTHON_GATE_IMAGE} missing)");
    None
}

pub(crate) fn definitions(image: &str, wall_seconds: u64, extra_pinned: &str) -> GateDefinitions {
    GateDefinitions::parse(definitions_text(image, wall_seconds, extra_pinned).as_bytes()).unwrap()
}

/// The `pytest` gate definition file's text.
pub(crate) fn definitions_text(image: &str, wall_seconds: u64, extra_pinned: &str) -> String {
    format!(
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
    )
}

/// A candidate at `commit` changing `path` from `old` (None: create) to `new`.
pub fn candidate(commit: &str, changes: &[(&str, Option<&str>, &str)]) -> RepositoryPatchCandidate {
    candidate_for("pytest", commit, changes)
}

/// [`candidate`] requiring the gate `gate`.
pub fn candidate_for(
    gate: &str,
    commit: &str,
    changes: &[(&str, Option<&str>, &str)],
) -> RepositoryPatchCandidate {
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
            required_validation_gates: vec![gate.to_owned()],
            ..CandidateFields::default()
        },
        files,
    )
    .unwrap()
}

/// Gate containers this process owns (never another test process's, nor those of another PID
/// namespace, where the same PID may own others).
pub(crate) async fn own_containers(docker: &container::BollardRuntime) -> usize {
    let me = format!("{}:", std::process::id());
    docker
        .list_turns()
        .await
        .unwrap()
        .iter()
        .filter(|c| {
            !crate::support::from_another_pid_namespace(&c.labels)
                && c.labels
                    .get("mozaiks.refinement.repository_turn.owner")
                    .is_some_and(|o| o.starts_with(&me))
        })
        .count()
}

pub(crate) const CALC: &str =
    "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n";
pub(crate) const TESTS: &str = "from calc import add, mul\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n";

fn small_repo() -> (tempfile::TempDir, String) {
    git_repo(&BTreeMap::from([
        ("calc.py", CALC.to_owned()),
        ("test_calc.py", TESTS.to_owned()),
        ("pytest.ini", "[pytest]\n".to_owned()),
    ]))
}

pub(crate) struct Env {
    pub docker: container::BollardRuntime,
    pub image: String,
    pub state: tempfile::TempDir,
}

pub(crate) async fn env() -> Option<Env> {
    let docker = docker().await?;
    let image = python_image()?;
    Some(Env {
        docker,
        image,
        state: tempfile::tempdir().unwrap(),
    })
}

pub(crate) async fn run(
    env: &Env,
    defs: &GateDefinitions,
    repo: &Path,
    cand: &RepositoryPatchCandidate,
) -> gate::GateResult {
    run_under(env, defs, repo, cand, RunContext::default()).await
}

/// [`run`] for the gate `name` of `defs`.
pub(crate) async fn run_gate(
    env: &Env,
    defs: &GateDefinitions,
    name: &str,
    repo: &Path,
    cand: &RepositoryPatchCandidate,
) -> gate::GateResult {
    run_named(env, defs, name, repo, cand, RunContext::default()).await
}

async fn run_under(
    env: &Env,
    defs: &GateDefinitions,
    repo: &Path,
    cand: &RepositoryPatchCandidate,
    ctx: RunContext<'_>,
) -> gate::GateResult {
    run_named(env, defs, "pytest", repo, cand, ctx).await
}

async fn run_named(
    env: &Env,
    defs: &GateDefinitions,
    name: &str,
    repo: &Path,
    cand: &RepositoryPatchCandidate,
    ctx: RunContext<'_>,
) -> gate::GateResult {
    let base = BaselineTree::load(repo, cand.baseline_commit_sha()).unwrap();
    let cache = BaselineCache::open(env.state.path()).unwrap();
    evaluate_gate(
        &env.docker,
        defs.get(name).unwrap(),
        &base,
        cand,
        &cache,
        ctx,
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
    assert_eq!(r.evidence.outcome, GateVerdict::Failed, "{:?}", r.evidence);
    assert_eq!(r.baseline, BaselineUse::Ran);
    let c = r.evidence.comparison.clone().unwrap();
    assert_eq!(c.new_failures.ids, vec!["test_calc::test_mul".to_owned()]);
    assert_eq!(c.still_failing.count, 0);
    verify_evidence(&r.file, &broken, Some(&r.digest)).unwrap();

    // A harmless second candidate at the same commit: one run (the baseline is cached).
    let fine = candidate(&commit, &[("extra.py", None, "X = 1\n")]);
    let r2 = run(&env, &defs, dir.path(), &fine).await;
    assert_eq!(r2.evidence.outcome, GateVerdict::Passed);
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
    assert_eq!(r3.evidence.outcome, GateVerdict::PolicyRefused);
    assert_eq!(r3.containers_run, 0);
    assert_eq!(own_containers(&env.docker).await, 0);
    tally("docker_gate_small_repository_verdicts_and_cache");
}

/// The same verdicts under gVisor's runsc: the gate container carries the runsc turn profile,
/// the runner starts its child there, and a broken candidate fails exactly the broken test.
#[tokio::test]
async fn docker_gate_runsc_verdicts_match_runc() {
    let _lock = docker_lock().lock().await;
    let Some(docker) = crate::runtimes::docker_for("runsc").await else {
        return;
    };
    let Some(image) = python_image() else { return };
    let env = Env {
        docker,
        image,
        state: tempfile::tempdir().unwrap(),
    };
    let (dir, commit) = small_repo();
    let defs = definitions(&env.image, 180, "");
    let runsc: container::RuntimeName = "runsc".parse().unwrap();
    let ctx = || RunContext {
        runtime: Some(&runsc),
        job: None,
    };
    let broken = candidate(
        &commit,
        &[("calc.py", Some(CALC), &CALC.replace("a * b", "a + b"))],
    );
    let r = run_under(&env, &defs, dir.path(), &broken, ctx()).await;
    assert_eq!(r.evidence.outcome, GateVerdict::Failed, "{:?}", r.evidence);
    assert_eq!(r.evidence.runtime, "runsc");
    assert_eq!((r.baseline, r.containers_run), (BaselineUse::Ran, 2));
    let c = r.evidence.comparison.clone().unwrap();
    assert_eq!(c.new_failures.ids, vec!["test_calc::test_mul".to_owned()]);
    verify_evidence(&r.file, &broken, Some(&r.digest)).unwrap();

    let fine = candidate(&commit, &[("extra.py", None, "X = 1\n")]);
    let r2 = run_under(&env, &defs, dir.path(), &fine, ctx()).await;
    assert_eq!(
        r2.evidence.outcome,
        GateVerdict::Passed,
        "{:?}",
        r2.evidence
    );
    assert_eq!(r2.baseline, BaselineUse::Cached);
    assert_eq!(own_containers(&env.docker).await, 0);
    tally("docker_gate_runsc_verdicts_match_runc");
}

/// The fetched real projects (`fixtures/gates/fetch.sh`, run here when the cache lacks them).
pub(crate) fn fixtures() -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/gates/fetch.sh");
    let out = run_ok(std::process::Command::new("bash").arg(script));
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

pub(crate) fn rev(repo: &Path, name: &str) -> String {
    git_out(repo, &["rev-parse", &format!("{name}^{{commit}}")])
}

pub(crate) fn show(repo: &Path, commit: &str, path: &str) -> String {
    git_text(repo, &["show", &format!("{commit}:{path}")])
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
    assert_eq!(baseline.outcome, GateVerdict::Passed, "{:?}", baseline.code);
    let tests = baseline.tests.unwrap();
    assert!(tests.passed > 500 && !tests.truncated, "{tests:?}");
    assert_eq!(
        r.evidence.outcome,
        GateVerdict::Failed,
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
        GateVerdict::Passed,
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
    assert_eq!(r.evidence.outcome, GateVerdict::Failed);
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
        GateVerdict::TimedOut,
        "{:?}",
        r.evidence.code
    );

    // A fork bomb runs into the pids limit and the deadline; nothing survives the run.
    let bomb = "import os\nfor _ in range(100000):\n    try:\n        os.fork()\n    except OSError:\n        pass";
    let r = hostile(&env, bomb, 8).await;
    assert_ne!(r.evidence.outcome, GateVerdict::Passed);

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
        GateVerdict::Error,
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
        GateVerdict::Failed,
        "{:?}",
        r.evidence.code
    );
    let c = r.evidence.comparison.clone().unwrap();
    assert_eq!(c.new_failures.ids, vec!["test_calc::test_mul".to_owned()]);
    assert_eq!(own_containers(&env.docker).await, 0);
    tally("docker_gate_hostile_candidates_end_honestly");
}

/// `code` appended to a broken `calc.py` (so `test_mul` must fail): the gate must still report
/// exactly that failure, whatever the code tried.
async fn hostile_broken(env: &Env, code: &str, wall_seconds: u64) -> gate::GateResult {
    let broken = CALC.replace("a * b", "a + b");
    hostile_with(env, &format!("{broken}\n{code}\n"), wall_seconds).await
}

async fn hostile_with(env: &Env, calc: &str, wall_seconds: u64) -> gate::GateResult {
    let (dir, commit) = small_repo();
    let defs = definitions(&env.image, wall_seconds, "");
    let cand = candidate(&commit, &[("calc.py", Some(CALC), calc)]);
    let r = run(env, &defs, dir.path(), &cand).await;
    verify_evidence(&r.file, &cand, Some(&r.digest)).unwrap();
    assert_eq!(
        own_containers(&env.docker).await,
        0,
        "a gate container was left behind"
    );
    r
}

fn assert_only_mul_fails(r: &gate::GateResult, case: &str) {
    assert_eq!(
        r.evidence.outcome,
        GateVerdict::Failed,
        "{case}: {:?} {}",
        r.evidence.code,
        r.evidence.log.tail
    );
    let c = r.evidence.comparison.clone().unwrap();
    assert_eq!(
        c.new_failures.ids,
        vec!["test_calc::test_mul".to_owned()],
        "{case}: {}",
        r.evidence.log.tail
    );
}

/// Resource attacks, JUnit bombs written after pytest's own report (an `atexit` hook), and
/// attacks on the runner itself, each through the host's gate path (real container, real
/// runner, evidence verified, no container left).
#[tokio::test]
async fn docker_gate_hostile_resources_junit_bombs_and_runner_attacks() {
    let _lock = docker_lock().lock().await;
    let Some(env) = env().await else { return };

    // A thread bomb runs into the pids limit and gives up: the run ends within its limits with
    // an honest verdict on the tests (they pass: the code recovered), never an error or timeout.
    let threads = "import threading, time\nts = []\ntry:\n    while True:\n        t = threading.Thread(target=time.sleep, args=(60,), daemon=True)\n        t.start()\n        ts.append(t)\nexcept Exception:\n    pass";
    let r = hostile_with(&env, &format!("{threads}\n{CALC}"), 20).await;
    assert!(
        matches!(
            r.evidence.outcome,
            GateVerdict::Passed | GateVerdict::Failed
        ),
        "thread bomb: {:?} {:?}",
        r.evidence.outcome,
        r.evidence.code
    );

    // A memory balloon past the 512 MiB limit: killed, never a pass.
    let balloon = "chunks = []\nwhile True:\n    chunks.append(bytearray(64 << 20))";
    let r = hostile_with(&env, &format!("{balloon}\n{CALC}"), 60).await;
    assert_ne!(r.evidence.outcome, GateVerdict::Passed, "memory balloon");

    // A 1 GiB (sparse) JUnit file replaces pytest's report: refused by its size before it is
    // read, so the run is not a pass.
    let huge = "import atexit\ndef _junit():\n    with open('/workspace/.gate-junit.xml', 'wb') as f:\n        f.truncate(1 << 30)\natexit.register(_junit)";
    let r = hostile_with(&env, &format!("{CALC}\n{huge}"), 60).await;
    assert_ne!(r.evidence.outcome, GateVerdict::Passed, "1 GiB JUnit");

    // An entity bomb and a 100k-deep document in place of the report: refused, not a pass.
    let lol = "<?xml version=\"1.0\"?>\\n<!DOCTYPE lolz [<!ENTITY lol \"lol\"><!ENTITY lol2 \"&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;\">]>\\n<testsuites><testsuite name=\"&lol2;\" tests=\"1\"><testcase classname=\"test_calc\" name=\"test_mul\"/></testsuite></testsuites>";
    let entity = format!(
        "import atexit\ndef _junit():\n    open('/workspace/.gate-junit.xml', 'w').write(\"{lol}\")\natexit.register(_junit)"
    );
    let r = hostile_with(&env, &format!("{CALC}\n{entity}"), 60).await;
    assert_ne!(r.evidence.outcome, GateVerdict::Passed, "entity bomb");
    let deep = "import atexit\ndef _junit():\n    open('/workspace/.gate-junit.xml', 'w').write('<testsuites>' + '<a>' * 100000 + '</a>' * 100000 + '</testsuites>')\natexit.register(_junit)";
    let r = hostile_with(&env, &format!("{CALC}\n{deep}"), 60).await;
    assert_ne!(r.evidence.outcome, GateVerdict::Passed, "deep JUnit");

    // A forged all-passing report over a broken `mul`: the runner's own wait saw pytest exit
    // non-zero, so a report that disagrees with the exit status is an error, never a pass.
    let forged = "import atexit, os\ndef _junit():\n    open('/workspace/.gate-junit.xml', 'w').write('<testsuites><testsuite name=\"s\" tests=\"2\" failures=\"0\" errors=\"0\"><testcase classname=\"test_calc\" name=\"test_add\"/><testcase classname=\"test_calc\" name=\"test_mul\"/></testsuite></testsuites>')\natexit.register(_junit)";
    let broken = CALC.replace("a * b", "a + b");
    let r = hostile_with(&env, &format!("{broken}\n{forged}"), 60).await;
    assert_ne!(r.evidence.outcome, GateVerdict::Passed, "forged report");

    // Attacks on the runner and the sandbox: ptrace the runner (PID 1), read its memory,
    // environment and descriptors, signal it and every process, open sockets. Each attempt's
    // result is printed; none may succeed, and the broken `mul` still fails exactly.
    let probes = r#"
import ctypes, os, signal, socket
_ESCAPED = []
def _probe(name, f):
    try:
        f()
        _ESCAPED.append(name)
        print(f"PROBE {name}=OK", flush=True)
    except Exception as e:
        print(f"PROBE {name}=DENIED {type(e).__name__}", flush=True)
def _ptrace():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.ptrace(16, 1, None, None) != 0:
        raise OSError(ctypes.get_errno(), "ptrace")
def _read(path):
    def f():
        with open(path, "rb") as fh:
            if not fh.read(64):
                raise OSError("empty")
    return f
def _mem():
    with open("/proc/1/mem", "rb") as fh:
        fh.seek(0x400000)
        fh.read(16)
def _fd():
    os.readlink("/proc/1/fd/1")
def _inet():
    socket.create_connection(("1.1.1.1", 53), timeout=2)
def _udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(b"x", ("8.8.8.8", 53))
    s.recvfrom(1)
_probe("ptrace", _ptrace)
_probe("environ", _read("/proc/1/environ"))
_probe("mem", _mem)
_probe("fd", _fd)
_probe("inet", _inet)
_probe("udp", _udp)
# pytest captures what collection prints, so the log tail need not show the probes: a probe
# that succeeds also breaks `add` (returning the names), which the exact-failure assertion
# reports. (`/proc/1/cmdline` is world-readable by design and holds no secret: not probed.)
if _ESCAPED:
    def add(a, b):
        return list(_ESCAPED)
for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGSTOP):
    try:
        os.kill(1, sig)
    except OSError:
        pass
try:
    os.kill(-1, signal.SIGKILL)
except OSError:
    pass
"#;
    let r = hostile_broken(&env, probes, 60).await;
    // `kill(-1)` may end pytest itself (it cannot reach the runner): then there is no report,
    // which is an honest failure or error; otherwise exactly the broken test fails.
    assert_ne!(r.evidence.outcome, GateVerdict::Passed, "runner attacks");
    if r.evidence.outcome == GateVerdict::Failed && r.evidence.comparison.is_some() {
        assert_only_mul_fails(&r, "runner attacks");
    }
    assert!(
        !r.evidence.log.tail.contains("=OK"),
        "a probe succeeded: {}",
        r.evidence.log.tail
    );

    // The same probes without the process-wide kill: the report must arrive and be exact.
    let probes_only = probes
        .split("for sig in")
        .next()
        .unwrap_or(probes)
        .to_owned();
    let r = hostile_broken(&env, &probes_only, 60).await;
    assert_only_mul_fails(&r, "probes");
    assert!(
        r.evidence.log.tail.contains("PROBE ptrace=DENIED")
            || !r.evidence.log.tail.contains("PROBE "),
        "{}",
        r.evidence.log.tail
    );
    assert!(
        !r.evidence.log.tail.contains("=OK"),
        "a probe succeeded: {}",
        r.evidence.log.tail
    );
    tally("docker_gate_hostile_resources_junit_bombs_and_runner_attacks");
}

pub const RUST_GATE_IMAGE: &str = "patch-candidate-gate-rust:local";

#[tokio::test]
async fn docker_gate_real_rust_crate_with_the_init_definition() {
    let _lock = docker_lock().lock().await;
    let Some(docker) = docker().await else { return };
    let out = std::process::Command::new("docker")
        .args(["image", "inspect", "--format", "{{.Id}}", RUST_GATE_IMAGE])
        .output()
        .unwrap();
    if !out.status.success() {
        assert!(
            !crate::support::docker_required(),
            "{RUST_GATE_IMAGE} missing: run images/build.sh --gate rust"
        );
        return;
    }
    let image: container::ImageId = String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Exactly what `gate init rust` prints.
    let defs =
        GateDefinitions::parse(gate::init_definitions(gate::GateKind::Rust, &image).as_bytes())
            .unwrap();
    let env = Env {
        docker,
        image: image.to_string(),
        state: tempfile::tempdir().unwrap(),
    };
    let repo = fixtures().join("strsim");
    let pristine = rev(&repo, "pristine");
    let broken = rev(&repo, "broken");
    let lib = show(&repo, &pristine, "src/lib.rs");
    let broken_lib = show(&repo, &broken, "src/lib.rs");
    let cand = candidate(&pristine, &[("src/lib.rs", Some(&lib), &broken_lib)]);
    let cand_defs = RepositoryPatchCandidate::new(
        CandidateFields {
            baseline_commit_sha: pristine.clone(),
            summary: "gate scenario".to_owned(),
            required_validation_gates: vec!["cargo-test".to_owned()],
            ..CandidateFields::default()
        },
        cand.changed_files().to_vec(),
    )
    .unwrap();
    let base = BaselineTree::load(&repo, &pristine).unwrap();
    let cache = BaselineCache::open(env.state.path()).unwrap();
    let def = defs.get("cargo-test").unwrap();
    let r = evaluate_gate(
        &env.docker,
        def,
        &base,
        &cand_defs,
        &cache,
        RunContext::default(),
    )
    .await
    .unwrap();
    let baseline = gate::parse_evidence(r.baseline_file.as_ref().unwrap())
        .unwrap()
        .evidence;
    assert_eq!(
        baseline.outcome,
        GateVerdict::Passed,
        "{:?} {}",
        baseline.code,
        baseline.log.tail
    );
    assert_eq!(
        r.evidence.outcome,
        GateVerdict::Failed,
        "{:?}",
        r.evidence.code
    );
    let c = r.evidence.comparison.clone().unwrap();
    assert_eq!(c.by, gate::ComparisonBasis::ExitStatus);
    assert!(c.regression);
    assert!(
        r.evidence.log.tail.contains("hamming"),
        "the failing tests are named in the log"
    );
    verify_evidence(&r.file, &cand_defs, Some(&r.digest)).unwrap();
    assert_eq!(own_containers(&env.docker).await, 0);
    tally("docker_gate_real_rust_crate_with_the_init_definition");
}

/// `approve --gate --gates`, `run --gates`, `verify --evidence`, `show` through the binary: the
/// proof agent's turn, then the pytest gate on the real daemon.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_gate_cli_run_gates_prints_verdicts_that_verify_accepts() {
    let _lock = docker_lock().lock().await;
    let Some(env) = env().await else { return };
    let bin = || {
        let mut c = crate::support::bin();
        c.env("PATCH_CANDIDATE_STATE_DIR", env.state.path());
        c
    };
    std::fs::write(
        env.state.path().join("images.json"),
        serde_json::to_vec(&crate::support::proof_images()).unwrap(),
    )
    .unwrap();
    let (dir, _) = git_repo(&BTreeMap::from([
        ("calc.py", CALC.to_owned()),
        ("test_calc.py", TESTS.to_owned()),
        ("NOTES.md", "notes\n".to_owned()),
    ]));
    let work = tempfile::tempdir().unwrap();
    let gates = work.path().join("gates.toml");
    let init = bin()
        .args(["gate", "init", "python", "--image", &env.image])
        .output()
        .unwrap();
    assert!(init.status.success());
    std::fs::write(&gates, &init.stdout).unwrap();
    let approval = work.path().join("approval.json");
    let unknown = bin()
        .args(["--json", "approve", "--repo"])
        .arg(dir.path())
        .args([
            "--allow",
            "NOTES.md",
            "--task",
            "Tidy the notes",
            "--gate",
            "lint",
            "--gates",
        ])
        .arg(&gates)
        .output()
        .unwrap();
    assert_eq!(unknown.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&unknown.stdout).contains("PATCH_CANDIDATE_GATE_UNKNOWN"));
    run_ok(
        bin()
            .args(["approve", "--repo"])
            .arg(dir.path())
            .args([
                "--allow",
                "NOTES.md",
                "--task",
                "Tidy the notes",
                "--gate",
                "pytest",
                "--gates",
            ])
            .arg(&gates)
            .arg("--out")
            .arg(&approval),
    );
    let store = work.path().join("store");
    let out = bin()
        .args(["run", "--repo"])
        .arg(dir.path())
        .arg("--approval")
        .arg(&approval)
        .arg("--store")
        .arg(&store)
        .arg("--gates")
        .arg(&gates)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_ok(&out);
    let line = text
        .lines()
        .find(|l| l.starts_with("gate pytest: "))
        .unwrap();
    assert!(
        line.starts_with("gate pytest: passed; tests 2 passed"),
        "{line}"
    );
    let digest = line.rsplit("evidence ").next().unwrap();
    let mut names: Vec<PathBuf> = std::fs::read_dir(&store)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    let evidence = names
        .iter()
        .find(|p| p.to_string_lossy().ends_with(".gate.pytest.json"))
        .unwrap();
    let candidate = names
        .iter()
        .find(|p| !p.to_string_lossy().contains(".gate."))
        .unwrap();
    run_ok(
        bin()
            .arg("verify")
            .arg(candidate)
            .arg("--evidence")
            .arg(evidence)
            .args(["--evidence-digest", digest]),
    );
    let show = bin().arg("show").arg(candidate).output().unwrap();
    assert!(String::from_utf8_lossy(&show.stdout).contains(line));
    // A tampered verdict is refused.
    let tampered = work.path().join("tampered.json");
    let bytes = std::fs::read_to_string(evidence)
        .unwrap()
        .replace("\"passed\"", "\"failed\"");
    std::fs::write(&tampered, bytes).unwrap();
    let refused = bin()
        .arg("verify")
        .arg(candidate)
        .arg("--evidence")
        .arg(&tampered)
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(1));
    assert_eq!(own_containers(&env.docker).await, 0);
    tally("docker_gate_cli_run_gates_prints_verdicts_that_verify_accepts");
}

/// The cheap ways a candidate's own code can make a real project's suite look green, each run
/// under exactly what `gate init python` prints, on more-itertools with `unique_to_each`
/// deliberately broken (so a cheat that worked would hide real failures).
mod cheats {
    use super::*;

    /// Module-level skip of every test module that imports the package from `tests/test_more.py`
    /// (the one that tests `unique_to_each`); `tests/test_recipes.py` still runs and passes.
    const SKIP_TEST_MORE: &str = "import traceback as _tb\nif any(_f.filename.endswith('test_more.py') for _f in _tb.extract_stack()):\n    import pytest as _p\n    _p.skip('nothing to see', allow_module_level=True)\n";
    /// Every test module skipped at import.
    const SKIP_ALL: &str =
        "import pytest as _p\n_p.skip('nothing to see', allow_module_level=True)\n";
    /// An `atexit` hook that rewrites pytest's JUnit report to all passed and exits 0.
    const FORGE: &str = r#"import atexit as _ae, os as _os, re as _re
def _forge():
    _p = '/workspace/.gate-junit.xml'
    try:
        _s = open(_p).read()
    except OSError:
        _os._exit(0)
    _s = _re.sub(r'<failure[^>]*>.*?</failure>', '', _s, flags=_re.S)
    _s = _re.sub(r'<failure[^>]*/>', '', _s)
    _s = _re.sub(r'failures="\d+"', 'failures="0"', _s)
    open(_p, 'w').write(_s)
    _FINISH(_s)
    _os._exit(0)
_ae.register(_forge)
def _FINISH(_s):
    pass
"#;
    /// Silences pytest's own summary (its failures, short summary and `N failed, M passed`
    /// line) from the package, at import: pytest's output capture is active then, so
    /// redirecting file descriptors would not outlive the import; patching the reporter does.
    const SILENCE: &str = "import _pytest.terminal as _t\nfor _m in ('summary_stats', 'summary_failures', 'summary_errors', 'short_test_summary'):\n    setattr(_t.TerminalReporter, _m, lambda self, *a, **k: None)\n";
    /// Silences every line pytest's terminal writer prints (progress included).
    const SILENCE_ALL: &str = "import _pytest._io.terminalwriter as _w\nfor _m in ('write', 'line', 'sep'):\n    setattr(_w.TerminalWriter, _m, lambda self, *a, **k: None)\n";
    /// With [`SILENCE_ALL`] and [`FORGE`]: prints a summary line that agrees with the forged report
    /// (at exit, when pytest's capture is over).
    const FAKE_SUMMARY: &str = "import os as _o2\ndef _FINISH(_s):\n    _o2.write(1, ('%d passed in 1.00s\\n' % _s.count('<testcase')).encode())\n";
    /// A tree-root `pytest.py` (and `sitecustomize.py`): if imported, they write a report of
    /// one passing case and exit 0 before any test runs.
    const SHADOW: &str = "import sys\nopen('/workspace/.gate-junit.xml', 'w').write('<testsuite><testcase classname=\"tests.test_more\" name=\"test_ok\"/></testsuite>')\nprint('SHADOWED')\nsys.exit(0)\n";

    struct Project {
        env: Env,
        repo: PathBuf,
        pristine: String,
        init: String,
        more: String,
        defs: GateDefinitions,
    }

    async fn project() -> Option<Project> {
        let env = env().await?;
        let repo = fixtures().join("more-itertools");
        let pristine = rev(&repo, "pristine");
        let image: container::ImageId = env.image.parse().unwrap();
        // Exactly what `gate init python` prints.
        let defs = GateDefinitions::parse(
            gate::init_definitions(gate::GateKind::Python, &image).as_bytes(),
        )
        .unwrap();
        Some(Project {
            init: show(&repo, &pristine, "more_itertools/__init__.py"),
            more: show(&repo, &pristine, "more_itertools/more.py"),
            env,
            repo,
            pristine,
            defs,
        })
    }

    impl Project {
        /// `unique_to_each` broken, `code` appended to the package's `__init__.py`, `extra` files
        /// created.
        async fn cheat(&self, code: &str, extra: &[(&str, &str)]) -> gate::GateResult {
            self.cheat_under(&self.defs, code, extra).await
        }

        async fn cheat_under(
            &self,
            defs: &GateDefinitions,
            code: &str,
            extra: &[(&str, &str)],
        ) -> gate::GateResult {
            let init = format!("{}\n{code}", self.init);
            let broken = self.more.replace(UNIQUE_OK, UNIQUE_BROKEN);
            let mut changes: Vec<(&str, Option<&str>, &str)> = vec![(
                "more_itertools/more.py",
                Some(self.more.as_str()),
                broken.as_str(),
            )];
            if !code.is_empty() {
                changes.push((
                    "more_itertools/__init__.py",
                    Some(self.init.as_str()),
                    init.as_str(),
                ));
            }
            changes.extend(extra.iter().map(|(p, c)| (*p, None, *c)));
            let cand = candidate(&self.pristine, &changes);
            let r = run(&self.env, defs, &self.repo, &cand).await;
            verify_evidence(&r.file, &cand, Some(&r.digest)).unwrap();
            assert_eq!(own_containers(&self.env.docker).await, 0);
            r
        }
    }

    fn describe(r: &gate::GateResult) -> String {
        format!(
            "{:?} {:?} {:?}\n{}",
            r.evidence.outcome, r.evidence.code, r.evidence.comparison, r.evidence.log.tail
        )
    }

    #[tokio::test]
    async fn docker_gate_cheats_skip_exit_shadow_and_forge_are_not_passed() {
        let _lock = docker_lock().lock().await;
        let Some(p) = project().await else { return };

        // The honest breakage, for reference: failed, exactly unique_to_each's tests new.
        let honest = p.cheat("", &[]).await;
        assert_eq!(
            honest.evidence.outcome,
            GateVerdict::Failed,
            "{}",
            describe(&honest)
        );
        let broken_ids = honest.evidence.comparison.clone().unwrap().new_failures.ids;
        assert!(!broken_ids.is_empty());
        assert!(broken_ids.iter().all(|id| id.starts_with(UNIQUE_CLASS)));

        // (a) Skipping the module that tests the broken function at import: pytest exits 0 with
        // test_recipes passing; every test_more test that passed on the baseline vanished.
        let r = p.cheat(SKIP_TEST_MORE, &[]).await;
        assert_eq!(r.evidence.exit, Some(gate_runner::ExitStatus::Code(0)));
        assert_eq!(r.evidence.outcome, GateVerdict::Failed, "{}", describe(&r));
        let c = r.evidence.comparison.clone().unwrap();
        assert!(c.regression && c.vanished.count > 400, "{c:?}");
        assert!(c.too_few_ran.is_some(), "{c:?}");
        assert!(
            c.vanished
                .ids
                .iter()
                .any(|id| id.starts_with("tests.test_more.")),
            "{c:?}"
        );
        // Every module skipped: pytest's own exit status (5, nothing ran) already disagrees.
        let r = p.cheat(SKIP_ALL, &[]).await;
        assert_ne!(r.evidence.outcome, GateVerdict::Passed, "{}", describe(&r));

        // (b) Exiting 0 at import, hard or through SystemExit.
        for code in [
            "import os as _o\n_o._exit(0)\n",
            "import sys as _s\n_s.exit(0)\n",
        ] {
            let r = p.cheat(code, &[]).await;
            assert_ne!(
                r.evidence.outcome,
                GateVerdict::Passed,
                "{code}: {}",
                describe(&r)
            );
        }

        // (c) A tree-root pytest.py and sitecustomize.py: the starter pins them (refused before
        // any container) ...
        let shadow = [("pytest.py", SHADOW), ("sitecustomize.py", SHADOW)];
        let r = p.cheat("", &shadow).await;
        assert_eq!(r.evidence.outcome, GateVerdict::PolicyRefused);
        assert_eq!(
            r.evidence.pinned_changed,
            vec!["pytest.py".to_owned(), "sitecustomize.py".to_owned()]
        );
        // ... and even unpinned, the starter's command never imports them: the image's pytest
        // runs and reports the real failures.
        let image: container::ImageId = p.env.image.parse().unwrap();
        let unpinned = gate::init_definitions(gate::GateKind::Python, &image)
            .replace(", \"sitecustomize.py\"", "")
            .replace(", \"pytest.py\"", "");
        let unpinned = GateDefinitions::parse(unpinned.as_bytes()).unwrap();
        let r = p.cheat_under(&unpinned, "", &shadow).await;
        assert_eq!(r.evidence.outcome, GateVerdict::Failed, "{}", describe(&r));
        assert!(
            !r.evidence.log.tail.contains("SHADOWED"),
            "{}",
            describe(&r)
        );
        assert_eq!(r.evidence.comparison.unwrap().new_failures.ids, broken_ids);

        // (d) An atexit hook rewrites the report to all passed and exits 0: report and exit
        // status agree, but pytest's own summary line in the log says what failed.
        let r = p.cheat(FORGE, &[]).await;
        assert_eq!(
            (r.evidence.outcome, r.evidence.code.as_deref()),
            (GateVerdict::Error, Some(gate::LOG_CONTRADICTION_CODE)),
            "{}",
            describe(&r)
        );
        assert!(
            r.evidence.log.tail.contains(" failed, "),
            "{}",
            describe(&r)
        );
        // Silencing pytest's summary first: its progress line still shows the failures, and
        // the line every pytest run ends with is gone.
        let r = p.cheat(&format!("{SILENCE}{FORGE}"), &[]).await;
        assert_eq!(
            (r.evidence.outcome, r.evidence.code.as_deref()),
            (GateVerdict::Error, Some(gate::LOG_CONTRADICTION_CODE)),
            "{}",
            describe(&r)
        );
        // The limit (docs/GATES.md, "What a gate cannot catch"): code that silences pytest,
        // rewrites the report and prints a summary line agreeing with it leaves nothing the host
        // can tell from an honest run. This case documents that limit; it passes. What the
        // evidence still shows: a log of one line where the baseline's ran to many.
        let r = p
            .cheat(&format!("{SILENCE_ALL}{FORGE}{FAKE_SUMMARY}"), &[])
            .await;
        assert_eq!(r.evidence.outcome, GateVerdict::Passed, "{}", describe(&r));
        let baseline = gate::parse_evidence(r.baseline_file.as_ref().unwrap())
            .unwrap()
            .evidence;
        assert!(
            r.evidence.log.total_bytes * 10 < baseline.log.total_bytes,
            "{} vs {}",
            r.evidence.log.total_bytes,
            baseline.log.total_bytes
        );
        tally("docker_gate_cheats_skip_exit_shadow_and_forge_are_not_passed");
    }
}
