#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::sync::Arc;

use super::*;
use crate::gate::{GateResult, evaluate_gate};
use crate::testkit::{Change, candidate, definitions, honest, repo, simulated};

fn run() -> (
    GateResult,
    RepositoryPatchCandidate,
    RepositoryPatchCandidate,
) {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let commit = repo(dir.path(), &[("a.py", "a = 1\n", false)]);
    let base = crate::tree::BaselineTree::load(dir.path(), &commit).unwrap();
    let cand = candidate(&commit, &[Change::Update("a.py", "a = 1\n", "a = 2\n")]);
    let other = candidate(&commit, &[Change::Update("a.py", "a = 1\n", "a = 3\n")]);
    let defs = definitions("");
    let rt = simulated(
        Arc::new(|req, _| honest(req, &[("t::a", gate_runner::CaseOutcome::Passed)])),
        Arc::default(),
    );
    let cache = crate::cache::BaselineCache::open(state.path()).unwrap();
    let r = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(evaluate_gate(
            &rt,
            defs.get("unit").unwrap(),
            &base,
            &cand,
            &cache,
            crate::run::RunContext::default(),
        ))
        .unwrap();
    (r, cand, other)
}

#[test]
fn verify_accepts_the_evidence_and_rejects_tampering() {
    let (r, cand, other) = run();
    assert_eq!(r.evidence.outcome, GateVerdict::Passed);
    verify_evidence(&r.file, &cand, Some(&r.digest)).unwrap();
    let text = String::from_utf8(r.file.clone()).unwrap();

    // An edited verdict no longer matches its digest.
    let tampered = text.replace("\"wall_ms\":7", "\"wall_ms\":8");
    assert_ne!(tampered, text);
    let e = verify_evidence(tampered.as_bytes(), &cand, None).unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_GATE_EVIDENCE_BINDING");

    // Re-digested after the edit: self-consistent, but not the digest the run recorded.
    let mut forged = r.evidence.clone();
    forged.wall_ms = 8;
    let (bytes, _) = forged.to_file_bytes().unwrap();
    verify_evidence(&bytes, &cand, None).unwrap();
    let e = verify_evidence(&bytes, &cand, Some(&r.digest)).unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_GATE_EVIDENCE_BINDING");

    // Self-contradicting documents are refused even with a fresh digest.
    let mut liar = r.evidence.clone();
    liar.exit = Some(gate_runner::ExitStatus::Code(1));
    let (bytes, _) = liar.to_file_bytes().unwrap();
    assert_eq!(
        verify_evidence(&bytes, &cand, None).unwrap_err().code(),
        "PATCH_CANDIDATE_GATE_EVIDENCE"
    );

    // Another candidate, a non-canonical spelling, an unknown field.
    let e = verify_evidence(&r.file, &other, None).unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_GATE_EVIDENCE_BINDING");
    let spaced = text.replacen("{", "{ ", 1);
    assert_eq!(
        parse_evidence(spaced.as_bytes()).unwrap_err().code(),
        "PATCH_CANDIDATE_GATE_EVIDENCE"
    );
    let extra = text.replacen("{", "{\"extra\":1,", 1);
    assert_eq!(
        parse_evidence(extra.as_bytes()).unwrap_err().code(),
        "PATCH_CANDIDATE_GATE_EVIDENCE"
    );
}

#[test]
fn log_escaping_is_total() {
    assert_eq!(
        escape_log(b"ok\n\t\x1b[2J\\\xff\r"),
        "ok\n\t\\x1b[2J\\x5c\\xff\\x0d"
    );
}

/// The new fields keep the document honest: a clean exit is `failed` only with lost tests, a
/// `passed` run cannot carry them, lost tests are always a regression, and only a baseline run
/// lists passing ids.
#[test]
fn lost_tests_and_passing_lists_are_checked_against_the_outcome() {
    let (r, cand, _) = run();
    let base = r.evidence.clone();
    let comparison = base.comparison.clone().unwrap();
    let vanished = IdList::from_set(&["t::gone".to_owned()].into_iter().collect());
    let code = |e: &GateEvidence| {
        let (bytes, _) = e.to_file_bytes().unwrap();
        verify_evidence(&bytes, &cand, None).err().map(|e| e.code())
    };
    // Failed with exit 0 and vanished tests: consistent.
    let mut lost = base.clone();
    lost.outcome = GateVerdict::Failed;
    lost.comparison = Some(Comparison {
        vanished: vanished.clone(),
        regression: true,
        ..comparison.clone()
    });
    assert_eq!(code(&lost), None);
    // ... and its bytes without the new fields are exactly the old spelling when empty.
    let text = String::from_utf8(r.file.clone()).unwrap();
    assert!(!text.contains("vanished") && !text.contains("too_few_ran"));
    // Failed with exit 0 and nothing lost; passed with vanished tests; lost without regression.
    let mut liar = base.clone();
    liar.outcome = GateVerdict::Failed;
    assert_eq!(code(&liar), Some("PATCH_CANDIDATE_GATE_EVIDENCE"));
    let mut liar = lost.clone();
    liar.outcome = GateVerdict::Passed;
    assert_eq!(code(&liar), Some("PATCH_CANDIDATE_GATE_EVIDENCE"));
    let mut liar = lost.clone();
    liar.comparison = Some(Comparison {
        vanished,
        regression: false,
        ..comparison
    });
    assert_eq!(code(&liar), Some("PATCH_CANDIDATE_GATE_EVIDENCE"));
    // A candidate run never lists passing ids; the baseline's list never exceeds its count.
    let mut liar = base.clone();
    liar.passing = Some(IdList::from_set(&["t::a".to_owned()].into_iter().collect()));
    assert_eq!(code(&liar), Some("PATCH_CANDIDATE_GATE_EVIDENCE"));
    let baseline = parse_evidence(r.baseline_file.as_ref().unwrap())
        .unwrap()
        .evidence;
    assert_eq!(
        baseline.passing.as_ref().map(|p| p.ids.clone()),
        Some(vec!["t::a".to_owned()])
    );
    let mut liar = baseline;
    liar.passing = Some(IdList::from_set(
        &["t::a".to_owned(), "t::b".to_owned()].into_iter().collect(),
    ));
    let (bytes, _) = liar.to_file_bytes().unwrap();
    assert_eq!(
        parse_evidence(&bytes).unwrap_err().code(),
        "PATCH_CANDIDATE_GATE_EVIDENCE"
    );
}
