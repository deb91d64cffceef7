#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use std::sync::{Arc, Mutex};

use gate_runner::{CaseOutcome as O, ExitStatus, GateRequest, RunStatus};
use pretty_assertions::assert_eq;

use super::*;
use crate::evidence::{ComparisonBasis, parse_evidence, verify_evidence};
use crate::testkit::{
    Behaviour, Change, Received, candidate, definitions, honest, repo, report, simulated,
};

const CALC: &str = "def add(a, b):\n    return a + b\n";
const BROKEN: &str = "def add(a, b):\n    return a - b\n";

/// The simulated test suite: `t::add` fails when calc.py is broken, `t::old` fails while
/// `old.py` says so.
fn suite() -> Behaviour {
    Arc::new(|req: &GateRequest, got: &Received| {
        let calc = got
            .files
            .get("src/calc.py")
            .map(|f| f.1.clone())
            .unwrap_or_default();
        let old = got
            .files
            .get("old.py")
            .map(|f| f.1.clone())
            .unwrap_or_default();
        let add = if calc == CALC.as_bytes() {
            O::Passed
        } else {
            O::Failed
        };
        let old = if old == b"broken\n" {
            O::Failed
        } else {
            O::Passed
        };
        honest(
            req,
            &[("t::add", add), ("t::old", old), ("t::skip", O::Skipped)],
        )
    })
}

/// A run that reports `status`, `runner_error`, `exit` and `cases`, whatever it was given.
fn reporting(
    status: RunStatus,
    runner_error: Option<&'static str>,
    exit: Option<ExitStatus>,
    cases: &'static [(&'static str, O)],
) -> Behaviour {
    Arc::new(move |req: &GateRequest, _: &Received| report(req, status, runner_error, exit, cases))
}

struct Fixture {
    _dir: tempfile::TempDir,
    state: tempfile::TempDir,
    base: BaselineTree,
    commit: String,
}

/// A repository of `files` (path, content, executable) and a fresh state directory.
fn fixture_of(files: &[(&str, &str, bool)]) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let commit = repo(dir.path(), files);
    let base = BaselineTree::load(dir.path(), &commit).unwrap();
    Fixture {
        _dir: dir,
        state: tempfile::tempdir().unwrap(),
        base,
        commit,
    }
}

fn fixture() -> Fixture {
    fixture_of(&[
        ("src/calc.py", CALC, false),
        ("old.py", "broken\n", false),
        ("bin/run", "#!/bin/sh\n", true),
        ("tests/conftest.py", "# fixtures\n", false),
    ])
}

async fn evaluate(
    f: &Fixture,
    behaviour: Behaviour,
    cand: &finalizer::RepositoryPatchCandidate,
) -> (GateResult, Vec<Received>, Vec<String>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let rt = simulated(behaviour, Arc::clone(&seen));
    let result = evaluate_with(&rt, f, cand).await.unwrap();
    let seen = seen.lock().unwrap().clone();
    (result, seen, rt.calls())
}

/// The `unit` gate on `cand` over `f`'s tree and baseline cache, run by `rt`.
async fn evaluate_with(
    rt: &container::testkit::FakeRuntime,
    f: &Fixture,
    cand: &finalizer::RepositoryPatchCandidate,
) -> Result<GateResult, GateError> {
    let defs = definitions("");
    let def = defs.get("unit").unwrap();
    let cache = BaselineCache::open(f.state.path()).unwrap();
    evaluate_gate(rt, def, &f.base, cand, &cache, RunContext::default()).await
}

/// A candidate that adds one new Python file to `f`'s commit.
fn new_file_candidate(f: &Fixture) -> finalizer::RepositoryPatchCandidate {
    candidate(&f.commit, &[Change::Create("src/new.py", "x = 1\n")])
}

#[tokio::test]
async fn breaking_a_function_is_a_new_failure_and_old_failures_stay_old() {
    let f = fixture();
    let cand = candidate(&f.commit, &[Change::Update("src/calc.py", CALC, BROKEN)]);
    let (r, seen, calls) = evaluate(&f, suite(), &cand).await;
    let e = &r.evidence;
    assert_eq!(e.outcome, GateVerdict::Failed);
    assert_eq!(r.baseline, BaselineUse::Ran);
    assert_eq!(r.containers_run, 2);
    let c = e.comparison.as_ref().unwrap();
    assert_eq!(c.by, ComparisonBasis::TestId);
    assert_eq!(c.new_failures.ids, vec!["t::add".to_owned()]);
    assert_eq!(c.still_failing.ids, vec!["t::old".to_owned()]);
    assert_eq!(c.fixed.count, 0);
    assert!(c.regression);
    // The tree was the baseline with the post-image applied; modes kept; dirs before files.
    let (base_run, cand_run) = (&seen[0], &seen[1]);
    assert_eq!(base_run.files["src/calc.py"].1, CALC.as_bytes());
    assert_eq!(cand_run.files["src/calc.py"].1, BROKEN.as_bytes());
    assert_eq!(cand_run.files["bin/run"].0, 0o755);
    assert_eq!(cand_run.files["old.py"].0, 0o644);
    assert_eq!(cand_run.dirs, vec!["bin", "src", "tests"]);
    let req = cand_run.request.as_ref().unwrap();
    assert_eq!(req.tree().entries(), 7);
    assert_ne!(
        base_run.request.as_ref().unwrap().nonce(),
        req.nonce(),
        "a nonce per run"
    );
    // Every container removed; the spec carries the gate's limits.
    assert_eq!(calls.iter().filter(|c| c.starts_with("remove:")).count(), 2);
    // The evidence file parses, is bound to the candidate, and the log tail is escaped.
    let parsed = verify_evidence(&r.file, &cand, Some(&r.digest)).unwrap();
    assert_eq!(parsed.evidence, *e);
    assert_eq!(e.log.tail, "log \\x1b[31mred");
    assert_eq!(
        e.baseline_evidence_digest,
        Some(
            parse_evidence(r.baseline_file.as_ref().unwrap())
                .unwrap()
                .digest
        )
    );
}

#[tokio::test]
async fn fixing_a_failing_test_is_fixed_and_the_second_candidate_hits_the_cache() {
    let f = fixture();
    let fix = candidate(&f.commit, &[FIX_OLD]);
    let (r, _, _) = evaluate(&f, suite(), &fix).await;
    let c = r.evidence.comparison.as_ref().unwrap();
    assert_eq!(r.evidence.outcome, GateVerdict::Passed);
    assert_eq!(c.fixed.ids, vec!["t::old".to_owned()]);
    assert!(!c.regression);
    assert_eq!(r.containers_run, 2);
    // A second candidate at the same commit: one run, the cached baseline.
    let other = new_file_candidate(&f);
    let (r2, seen, _) = evaluate(&f, suite(), &other).await;
    assert_eq!(r2.baseline, BaselineUse::Cached);
    assert_eq!(r2.containers_run, 1);
    assert_eq!(seen.len(), 1);
    assert_eq!(
        r2.evidence.baseline_evidence_digest,
        r.evidence.baseline_evidence_digest
    );
    let c2 = r2.evidence.comparison.as_ref().unwrap();
    assert_eq!(c2.still_failing.ids, vec!["t::old".to_owned()]);
    assert!(!c2.regression);
}

#[tokio::test]
async fn a_pinned_path_change_is_policy_refused_before_any_container() {
    let f = fixture();
    let cand = candidate(
        &f.commit,
        &[Change::Update(
            "tests/conftest.py",
            "# fixtures\n",
            "import os\n",
        )],
    );
    let (r, seen, calls) = evaluate(&f, suite(), &cand).await;
    assert_eq!(r.evidence.outcome, GateVerdict::PolicyRefused);
    assert_eq!(
        r.evidence.pinned_changed,
        vec!["tests/conftest.py".to_owned()]
    );
    assert!(seen.is_empty() && calls.is_empty(), "{calls:?}");
    // Creating the JUnit path is refused the same way.
    let forged = candidate(
        &f.commit,
        &[Change::Create(".gate-junit.xml", "<testsuite/>")],
    );
    let (r, _, calls) = evaluate(&f, suite(), &forged).await;
    assert_eq!(r.evidence.outcome, GateVerdict::PolicyRefused);
    assert!(calls.is_empty());
    verify_evidence(&r.file, &forged, None).unwrap();
}

#[tokio::test]
async fn forged_and_contradictory_reports_are_errors_never_passes() {
    let forged_nonce: Behaviour = Arc::new(|req: &GateRequest, _: &Received| {
        let mut r = honest(req, &[("t::add", O::Passed)]);
        // Another run's nonce (the child never sees the real one).
        let json = String::from_utf8(r[4..].to_vec()).unwrap();
        let fake = json.replace(req.nonce().as_str(), &"0".repeat(64));
        r.truncate(4);
        r.extend_from_slice(fake.as_bytes());
        r
    });
    let two_frames: Behaviour = Arc::new(|req: &GateRequest, _: &Received| {
        [
            honest(req, &[("t::add", O::Failed)]),
            honest(req, &[("t::add", O::Passed)]),
        ]
        .concat()
    });
    let exit0_with_failure = reporting(
        RunStatus::Completed,
        None,
        Some(ExitStatus::Code(0)),
        &[("t::add", O::Failed)],
    );
    let exit1_clean = reporting(
        RunStatus::Completed,
        None,
        Some(ExitStatus::Code(1)),
        &[("t::add", O::Passed)],
    );
    let garbage: Behaviour = Arc::new(|_: &GateRequest, _: &Received| b"PASSED t::add\n".to_vec());
    let runner_error = reporting(
        RunStatus::RunnerError,
        Some("GATE_RUNNER_TREE_TOTALS"),
        None,
        &[],
    );
    let timed_out = reporting(RunStatus::TimedOut, None, Some(ExitStatus::Signal(9)), &[]);
    for (behaviour, outcome, code) in [
        (
            forged_nonce,
            GateVerdict::Error,
            "PATCH_CANDIDATE_GATE_REPORT",
        ),
        (
            two_frames,
            GateVerdict::Error,
            "PATCH_CANDIDATE_GATE_REPORT",
        ),
        (
            exit0_with_failure,
            GateVerdict::Error,
            "PATCH_CANDIDATE_GATE_CONTRADICTION",
        ),
        (
            exit1_clean,
            GateVerdict::Error,
            "PATCH_CANDIDATE_GATE_CONTRADICTION",
        ),
        (garbage, GateVerdict::Error, "PATCH_CANDIDATE_GATE_REPORT"),
        (runner_error, GateVerdict::Error, "GATE_RUNNER_TREE_TOTALS"),
        (
            timed_out,
            GateVerdict::TimedOut,
            "PATCH_CANDIDATE_GATE_TIMED_OUT",
        ),
    ] {
        let g = fixture();
        let cand = candidate(&g.commit, &[Change::Create("src/new.py", "x = 1\n")]);
        let (r, _, calls) = evaluate(&g, behaviour, &cand).await;
        assert_eq!(r.evidence.outcome, outcome, "{code}");
        assert_eq!(r.evidence.code.as_deref(), Some(code));
        assert_eq!(calls.iter().filter(|c| c.starts_with("remove:")).count(), 2);
        // Environment errors at the baseline are never cached.
        let cache = BaselineCache::open(g.state.path()).unwrap();
        let defs = definitions("");
        assert!(
            cache
                .get(&g.commit, defs.get("unit").unwrap(), "default")
                .is_none()
        );
        verify_evidence(&r.file, &cand, Some(&r.digest)).unwrap();
    }
}

#[tokio::test]
async fn the_container_spec_is_the_turns_with_the_gates_limits() {
    let f = fixture();
    let rt = simulated(suite(), Arc::default());
    evaluate_with(&rt, &f, &new_file_candidate(&f))
        .await
        .unwrap();
    let body = rt.created_body();
    let host = body.host_config.unwrap();
    assert_eq!(host.network_mode.as_deref(), Some("none"));
    assert_eq!(host.readonly_rootfs, Some(true));
    assert_eq!(host.cap_drop, Some(vec!["ALL".to_owned()]));
    assert_eq!(host.memory, Some(256 * 1024 * 1024));
    assert_eq!(host.pids_limit, Some(64));
    assert_eq!(host.nano_cpus, Some(1_000_000_000));
    let tmpfs = host.tmpfs.unwrap();
    assert_eq!(tmpfs.len(), 2);
    assert_eq!(tmpfs["/workspace"], "rw,nosuid,nodev,size=16m,mode=1777");
    assert_eq!(body.env, Some(Vec::new()), "the container env stays empty");
    assert_eq!(
        host.init,
        Some(false),
        "the runner is PID 1, not docker-init"
    );
}

#[tokio::test]
async fn a_missing_or_other_image_fails_before_create() {
    let f = fixture();
    let cand = new_file_candidate(&f);
    let mut rt = simulated(suite(), Arc::default());
    rt.image = Err(container::RuntimeError::NotFound);
    let e = evaluate_with(&rt, &f, &cand).await.unwrap_err();
    assert_eq!(e.code(), "REPOSITORY_DOCKER_IMAGE_MISSING");
    assert!(e.is_environment());
    let mut rt = simulated(suite(), Arc::default());
    rt.image = Ok(container::ImageFacts {
        id: format!("sha256:{}", "cd".repeat(32)),
        env: Vec::new(),
    });
    let e = evaluate_with(&rt, &f, &cand).await.unwrap_err();
    assert_eq!(e.code(), "REPOSITORY_DOCKER_IMAGE_ID_MISMATCH");
    assert!(!rt.calls().iter().any(|c| c == "create"));
}

#[tokio::test]
async fn a_candidate_for_another_tree_is_refused() {
    let f = fixture();
    let stale = candidate(
        &f.commit,
        &[Change::Update("src/calc.py", "other\n", BROKEN)],
    );
    let rt = simulated(suite(), Arc::default());
    let e = evaluate_with(&rt, &f, &stale).await.unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_GATE_CANDIDATE_MISMATCH");
    assert!(rt.calls().is_empty());
}

#[test]
fn verdict_lines_name_the_outcome_and_the_comparison() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let f = fixture();
    let cand = candidate(&f.commit, &[Change::Update("src/calc.py", CALC, BROKEN)]);
    let (r, _, _) = rt.block_on(evaluate(&f, suite(), &cand));
    let line = verdict_line(&r.evidence, &r.digest);
    assert!(line.starts_with("gate unit: failed; tests 0 passed, 2 failed, 0 error, 1 skipped; new failures 1, fixed 0, still failing 1; regression; evidence sha256:"), "{line}");
}

/// A gate container someone else killed (a `docker kill`: exit 137, a recorded `kill` event, no
/// OOM) is an environment failure, never evidence against the candidate; the same death with no
/// kill event (the container's own doing) is a run without a report: `error` evidence.
#[tokio::test]
async fn r_gate_container_killed_from_outside_is_an_environment_failure() {
    let f = fixture();
    let defs = definitions("");
    let def = defs.get("unit").unwrap();
    let cand = candidate(&f.commit, &[Change::Update("src/calc.py", CALC, BROKEN)]);
    let killed_run: Behaviour = Arc::new(|_: &GateRequest, _: &Received| Vec::new());

    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut rt = simulated(Arc::clone(&killed_run), Arc::clone(&seen));
    rt.exit_code = 137;
    rt.kill_events = vec!["9".to_owned()];
    let cache = BaselineCache::open(f.state.path()).unwrap();
    let e = evaluate_gate(&rt, def, &f.base, &cand, &cache, RunContext::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), "REPOSITORY_DOCKER_KILLED_EXTERNALLY");
    assert!(e.is_environment());
    assert!(rt.calls().iter().any(|c| c == "events"));
    assert!(rt.calls().last().unwrap().starts_with("remove:"));

    let mut own = simulated(killed_run, seen);
    own.exit_code = 137;
    let state = tempfile::tempdir().unwrap();
    let cache = BaselineCache::open(state.path()).unwrap();
    let result = evaluate_gate(&own, def, &f.base, &cand, &cache, RunContext::default())
        .await
        .unwrap();
    assert_eq!(result.evidence.outcome, GateVerdict::Error);
}

/// A suite whose cases follow the candidate's tree: `t::add` passes, is skipped when calc.py
/// says `SKIP`, is missing when it says `HIDE`; `t::old` as in [`suite`]; `t::p0`…`t::p9`
/// pass, the first five missing when calc.py says `HIDE5`; every `tests/test_*.py` file adds
/// `tests.test_*::test_a` and `::test_b`, passing.
fn lossy() -> Behaviour {
    Arc::new(|req: &GateRequest, got: &Received| {
        let calc = got
            .files
            .get("src/calc.py")
            .map(|f| String::from_utf8(f.1.clone()).unwrap())
            .unwrap_or_default();
        let old_broken = got.files.get("old.py").is_some_and(|f| f.1 == b"broken\n");
        let mut ids: Vec<(String, O)> = Vec::new();
        if calc.contains("SKIP") {
            ids.push(("t::add".to_owned(), O::Skipped));
        } else if !calc.contains("HIDE\n") {
            ids.push(("t::add".to_owned(), O::Passed));
        }
        ids.push((
            "t::old".to_owned(),
            if old_broken { O::Failed } else { O::Passed },
        ));
        let first = if calc.contains("HIDE5") { 5 } else { 0 };
        for i in first..10 {
            ids.push((format!("t::p{i}"), O::Passed));
        }
        for path in got.files.keys() {
            if let Some(stem) = path
                .strip_prefix("tests/test_")
                .and_then(|p| p.strip_suffix(".py"))
            {
                for case in ["test_a", "test_b"] {
                    ids.push((format!("tests.test_{stem}::{case}"), O::Passed));
                }
            }
        }
        let cases: Vec<(&str, O)> = ids.iter().map(|(id, o)| (id.as_str(), *o)).collect();
        honest(req, &cases)
    })
}

const GONE: &str = "def test_a():\n    pass\n\n\ndef test_b():\n    pass\n";

fn lossy_fixture() -> Fixture {
    fixture_of(&[
        ("src/calc.py", CALC, false),
        ("old.py", "broken\n", false),
        ("tests/test_gone.py", GONE, false),
    ])
}

/// The change that fixes `old.py`, the test the lossy baseline fails.
const FIX_OLD: Change<'static> = Change::Update("old.py", "broken\n", "ok\n");

/// A candidate on `f`'s commit that fixes `old.py` and makes `change`.
fn fix_old_and(f: &Fixture, change: Change<'_>) -> finalizer::RepositoryPatchCandidate {
    candidate(&f.commit, &[FIX_OLD, change])
}

/// A candidate on `f`'s commit that fixes `old.py` and appends `marker` to `src/calc.py`.
fn fix_old_and_mark_calc(f: &Fixture, marker: &str) -> finalizer::RepositoryPatchCandidate {
    fix_old_and(
        f,
        Change::Update("src/calc.py", CALC, &format!("{CALC}{marker}")),
    )
}

#[tokio::test]
async fn a_baseline_passing_test_skipped_or_missing_in_the_candidate_run_is_a_regression() {
    for (marker, what) in [("# SKIP\n", "skipped"), ("# HIDE\n", "missing")] {
        let f = lossy_fixture();
        let cand = fix_old_and_mark_calc(&f, marker);
        let (r, _, _) = evaluate(&f, lossy(), &cand).await;
        let e = &r.evidence;
        // The run itself exited 0 with no failing case, and still fails the gate.
        assert_eq!(e.exit, Some(ExitStatus::Code(0)), "{what}");
        assert_eq!(e.outcome, GateVerdict::Failed, "{what}");
        let c = e.comparison.as_ref().unwrap();
        assert_eq!(c.vanished.ids, vec!["t::add".to_owned()], "{what}");
        assert_eq!(c.fixed.ids, vec!["t::old".to_owned()]);
        assert!(c.regression && c.too_few_ran.is_none(), "{what}");
        verify_evidence(&r.file, &cand, Some(&r.digest)).unwrap();
        assert!(
            crate::gate::verdict_line(e, &r.digest).contains("; vanished 1; regression"),
            "{what}"
        );
        // The baseline's evidence lists what passed there.
        let baseline = parse_evidence(r.baseline_file.as_ref().unwrap()).unwrap();
        assert!(
            baseline
                .evidence
                .passing
                .as_ref()
                .unwrap()
                .ids
                .contains(&"t::add".to_owned())
        );
    }
}

#[tokio::test]
async fn the_tests_of_a_file_the_candidate_deleted_are_not_vanished() {
    let f = lossy_fixture();
    let cand = fix_old_and(&f, Change::Delete("tests/test_gone.py", GONE));
    let (r, _, _) = evaluate(&f, lossy(), &cand).await;
    let c = r.evidence.comparison.as_ref().unwrap();
    assert_eq!(r.evidence.outcome, GateVerdict::Passed, "{c:?}");
    assert!(c.vanished.is_empty() && c.too_few_ran.is_none() && !c.regression);
    // Emptying the file instead of deleting it is not a deletion: its tests vanished.
    let f = lossy_fixture();
    let emptied = fix_old_and(&f, Change::Update("tests/test_gone.py", GONE, "\n"));
    let behaviour: Behaviour = Arc::new(|req: &GateRequest, got: &Received| {
        let mut got = got.clone();
        if got
            .files
            .get("tests/test_gone.py")
            .is_some_and(|f| f.1 == b"\n")
        {
            got.files.remove("tests/test_gone.py");
        }
        lossy()(req, &got)
    });
    let (r, _, _) = evaluate(&f, behaviour, &emptied).await;
    let c = r.evidence.comparison.as_ref().unwrap();
    assert_eq!(r.evidence.outcome, GateVerdict::Failed);
    assert_eq!(
        c.vanished.ids,
        vec![
            "tests.test_gone::test_a".to_owned(),
            "tests.test_gone::test_b".to_owned()
        ]
    );
}

#[tokio::test]
async fn a_run_that_ran_far_fewer_tests_than_its_baseline_says_so() {
    let f = lossy_fixture();
    let cand = fix_old_and_mark_calc(&f, "# HIDE5\n");
    let (r, _, _) = evaluate(&f, lossy(), &cand).await;
    let c = r.evidence.comparison.as_ref().unwrap();
    assert_eq!(r.evidence.outcome, GateVerdict::Failed);
    assert_eq!(c.vanished.count, 5);
    // Baseline: add, old, p0..p9, two in test_gone = 14 ran; the candidate 9 (< 90 %).
    assert_eq!(
        c.too_few_ran,
        Some(crate::evidence::RanCounts {
            baseline: 14,
            candidate: 9,
            deleted: 0
        })
    );
    assert!(c.regression);
    verify_evidence(&r.file, &cand, Some(&r.digest)).unwrap();
    assert!(
        crate::gate::verdict_line(&r.evidence, &r.digest)
            .contains("; too few tests ran (9 of 14, 0 deleted)")
    );
}

#[tokio::test]
async fn the_baseline_cache_is_keyed_by_the_container_runtime() {
    let f = fixture();
    let cand = new_file_candidate(&f);
    let (r, _, _) = evaluate(&f, suite(), &cand).await;
    assert_eq!(r.baseline, BaselineUse::Ran);
    let defs = definitions("");
    let def = defs.get("unit").unwrap();
    let cache = BaselineCache::open(f.state.path()).unwrap();
    assert!(cache.get(&f.commit, def, "default").is_some());
    // A baseline run under runc says nothing about one under runsc (another kernel).
    assert!(cache.get(&f.commit, def, "runsc").is_none());
    // An entry whose own runtime differs from its key is no hit either.
    let dir = f.state.path().join(crate::cache::BASELINE_CACHE_DIR);
    let entry = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "json"))
        .unwrap();
    let mut other = parse_evidence(&std::fs::read(&entry).unwrap())
        .unwrap()
        .evidence;
    other.runtime = "runsc".to_owned();
    std::fs::write(&entry, other.to_file_bytes().unwrap().0).unwrap();
    assert!(cache.get(&f.commit, def, "default").is_none());
    assert!(cache.get(&f.commit, def, "runsc").is_none());
}

/// pytest's summary line ends every pytest run's output: a clean candidate run without one,
/// over a baseline that has one, had its output silenced (the report is then unverifiable).
#[tokio::test]
async fn a_clean_run_whose_pytest_summary_is_gone_is_a_log_contradiction() {
    let with_log = |log: &'static [u8]| -> Behaviour {
        Arc::new(move |req: &GateRequest, got: &Received| {
            let mut r = lossy()(req, got);
            let silenced = got
                .files
                .get("src/calc.py")
                .is_some_and(|f| String::from_utf8_lossy(&f.1).contains("SILENCE"));
            let json = String::from_utf8(r[4..].to_vec()).unwrap();
            let mut v: serde_json::Value = serde_json::from_str(&json).unwrap();
            let log: &[u8] = if silenced { b"collected\n" } else { log };
            v["log"] = serde_json::json!({
                "tail_b64": base64_encode(log),
                "total_bytes": log.len(),
            });
            let text = vocab::canonical_bytes(&v);
            r.truncate(0);
            r.extend_from_slice(&u32::try_from(text.len()).unwrap().to_be_bytes());
            r.extend_from_slice(&text);
            r
        })
    };
    let f = lossy_fixture();
    let fine = candidate(&f.commit, &[FIX_OLD]);
    let behaviour = with_log(b"....\n14 passed in 0.10s\n");
    // The baseline fails t::old, so its summary says so; the candidate's agrees with its report.
    let baseline_log: &'static [u8] = b"....F\n1 failed, 13 passed in 0.10s\n";
    let both: Behaviour = Arc::new(move |req: &GateRequest, got: &Received| {
        let old_broken = got.files.get("old.py").is_some_and(|f| f.1 == b"broken\n");
        if old_broken {
            with_log(baseline_log)(req, got)
        } else {
            behaviour(req, got)
        }
    });
    let (r, _, _) = evaluate(&f, Arc::clone(&both), &fine).await;
    assert_eq!(
        (r.evidence.outcome, r.evidence.code.as_deref()),
        (GateVerdict::Passed, None),
        "{}",
        r.evidence.log.tail
    );
    let silenced = fix_old_and_mark_calc(&f, "# SILENCE\n");
    let (r, _, _) = evaluate(&f, both, &silenced).await;
    assert_eq!(
        (r.evidence.outcome, r.evidence.code.as_deref()),
        (
            GateVerdict::Error,
            Some(crate::classify::LOG_CONTRADICTION_CODE)
        )
    );
    verify_evidence(&r.file, &silenced, Some(&r.digest)).unwrap();
}

fn base64_encode(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(A[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}
