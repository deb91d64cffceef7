//! The report document: canonical bytes, strict parsing, digest binding, `verify`.

use policy::{POLICY_REPORT_SCHEMA, PolicyReport, parse_report, rule_set_info, scan, verify};

use crate::support::{candidate, corpus, create};

fn sample() -> (finalizer::RepositoryPatchCandidate, PolicyReport) {
    let fake = &corpus()[2];
    let c = candidate(vec![
        create("app/a.py", &format!("{}\n", fake.line)),
        create(".github/workflows/ci.yml", "on: push\n"),
        create("app/b.py", "x = 1\n"),
    ]);
    let report = scan(&c).unwrap();
    (c, report)
}

#[test]
fn the_report_is_bound_and_round_trips_canonically() {
    let (c, report) = sample();
    assert_eq!(report.schema, POLICY_REPORT_SCHEMA);
    assert_eq!(
        report.candidate_digest,
        finalizer::repository_patch_digest(&c).unwrap()
    );
    let info = rule_set_info().unwrap();
    assert_eq!(report.rules_version, info.version);
    assert_eq!(report.rules_sha256, info.sha256);
    assert_eq!(report.counts.secret, 1);
    assert_eq!(report.counts.ci_config, 1);
    assert_eq!(report.findings_total, 2);
    assert!(!report.clean && !report.truncated);
    let (bytes, digest) = report.to_file_bytes().unwrap();
    assert!(digest.to_string().starts_with("sha256:"));
    let parsed = parse_report(&bytes).unwrap();
    assert_eq!(parsed.report, report);
    assert_eq!(parsed.digest, digest);
    assert_eq!(report.digest().unwrap(), digest);
    verify(&parsed.report, &c).unwrap();
    // Deterministic: the same candidate gives the same bytes.
    assert_eq!(scan(&c).unwrap().to_file_bytes().unwrap().0, bytes);
}

#[test]
fn a_report_for_another_candidate_or_a_forged_one_does_not_verify() {
    let (_, report) = sample();
    let other = candidate(vec![create("app/a.py", "x = 2\n")]);
    let err = verify(&report, &other).unwrap_err();
    assert_eq!(err.code(), "PATCH_CANDIDATE_POLICY_BINDING");
    // A report for the right digest whose findings were edited (a "clean" forgery).
    let (c, mut forged) = sample();
    forged.findings.clear();
    forged.counts = Default::default();
    forged.findings_total = 0;
    forged.clean = true;
    assert_eq!(
        verify(&forged, &c).unwrap_err().code(),
        "PATCH_CANDIDATE_POLICY_BINDING"
    );
    // Made by another rule file.
    let (c, mut old) = sample();
    old.rules_version = "2000.1.1".into();
    assert_eq!(
        verify(&old, &c).unwrap_err().code(),
        "PATCH_CANDIDATE_POLICY_RULES_VERSION"
    );
}

fn reencode(value: &serde_json::Value) -> Vec<u8> {
    vocab::canonical_bytes(value)
}

#[test]
fn the_parser_is_strict() {
    let (_, report) = sample();
    let (bytes, _) = report.to_file_bytes().unwrap();
    let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    #[track_caller]
    fn code(b: &[u8]) -> &'static str {
        parse_report(b).unwrap_err().code()
    }

    // Unknown field (digest recomputed so only the schema check can refuse it).
    let mut extra = report.clone();
    let mut v = serde_json::to_value(&extra).unwrap();
    v["matched_value"] = serde_json::json!("x");
    v["report_digest"] = serde_json::json!(extra.digest().unwrap().to_string());
    assert_eq!(code(&reencode(&v)), "PATCH_CANDIDATE_POLICY_REPORT");
    // Unknown field inside a finding.
    let mut v = value.clone();
    v["findings"][0]["value"] = serde_json::json!("x");
    assert_eq!(code(&reencode(&v)), "PATCH_CANDIDATE_POLICY_REPORT");
    // An edited field breaks the digest.
    let mut v = value.clone();
    v["added_lines_scanned"] = serde_json::json!(99);
    assert_eq!(code(&reencode(&v)), "PATCH_CANDIDATE_POLICY_BINDING");
    // Missing digest, non-canonical spelling, trailing bytes, not JSON.
    let mut v = value.clone();
    v.as_object_mut().unwrap().remove("report_digest");
    assert_eq!(code(&reencode(&v)), "PATCH_CANDIDATE_POLICY_REPORT");
    let pretty = serde_json::to_vec_pretty(&value).unwrap();
    assert_eq!(code(&pretty), "PATCH_CANDIDATE_POLICY_REPORT");
    let mut trailing = bytes.clone();
    trailing.extend_from_slice(b" {}");
    assert_eq!(code(&trailing), "PATCH_CANDIDATE_POLICY_REPORT");
    assert_eq!(code(b"\xff\xfe"), "PATCH_CANDIDATE_POLICY_REPORT");
    // Internally inconsistent documents, re-digested so the consistency check is what refuses.
    let inconsistent: [fn(&mut PolicyReport); 6] = [
        |r| r.clean = true,
        |r| r.truncated = true,
        |r| r.findings_total += 1,
        |r| r.schema = "patch_candidate.policy_report.v0".into(),
        |r| r.findings[1].severity = policy::Severity::Medium,
        |r| r.findings.reverse(),
    ];
    for edit in inconsistent {
        extra = report.clone();
        edit(&mut extra);
        let (b, _) = extra.to_file_bytes().unwrap();
        assert_eq!(code(&b), "PATCH_CANDIDATE_POLICY_REPORT", "{extra:?}");
    }
}

#[test]
fn a_clean_candidate_has_a_clean_report() {
    let c = candidate(vec![create("app/ok.py", "def f():\n    return 1\n")]);
    let report = scan(&c).unwrap();
    assert!(report.clean);
    assert_eq!(report.findings_total, 0);
    assert_eq!(report.added_lines_scanned, 2);
    verify(&report, &c).unwrap();
}

#[test]
fn a_report_bound_to_a_wrong_digest_never_verifies() {
    let (c, report) = sample();
    let digest = finalizer::repository_patch_digest(&c).unwrap();
    assert_eq!(policy::scan_with_digest(&c, digest).unwrap(), report);
    let wrong = vocab::Sha256::of(b"another candidate");
    let misbound = policy::scan_with_digest(&c, wrong).unwrap();
    assert_eq!(
        verify(&misbound, &c).unwrap_err().code(),
        "PATCH_CANDIDATE_POLICY_BINDING"
    );
}
