//! Bounds: a 10 MiB candidate of millions of lines, capped findings, arbitrary input.

use policy::{MAX_FINDINGS, MAX_FINDINGS_PER_FILE, parse_report, scan};
use proptest::prelude::*;

use crate::support::{candidate, create, update_with_diff};

#[test]
fn a_ten_mib_candidate_of_millions_of_lines_is_scanned_whole() {
    // Five files of 2 MiB, each 400k+ lines.
    let files = (0..5)
        .map(|i| {
            let text = "ab = 1\n".repeat(2 * 1024 * 1024 / 7);
            create(&format!("app/big{i}.py"), &text)
        })
        .collect();
    let report = scan(&candidate(files)).unwrap();
    assert!(report.clean);
    assert_eq!(report.added_lines_scanned, 5 * (2 * 1024 * 1024 / 7));
    assert!(report.added_lines_scanned > 1_400_000);
}

#[test]
fn findings_are_capped_per_file_and_in_all_with_exact_counts() {
    let line = "x = 'a\u{202E}b'\n";
    let files = (0..20)
        .map(|i| create(&format!("app/f{i:02}.py"), &line.repeat(500)))
        .collect();
    let report = scan(&candidate(files)).unwrap();
    assert_eq!(report.counts.hidden_text, 20 * 500);
    assert_eq!(report.findings_total, 20 * 500);
    assert_eq!(report.findings.len(), MAX_FINDINGS);
    assert!(report.truncated);
    assert_eq!(
        report.findings.iter().filter(|f| f.file_index == 0).count(),
        MAX_FINDINGS_PER_FILE
    );
    let (bytes, _) = report.to_file_bytes().unwrap();
    assert_eq!(parse_report(&bytes).unwrap().report, report);
}

#[test]
fn one_huge_line_with_many_keywords_stays_linear() {
    // 4 MiB on one line, a keyword every few bytes: each rule's regex runs once over the line.
    let text = "key=sk_test ghp_ xoxb AIza token ".repeat(4 * 1024 * 1024 / 33);
    let report = scan(&candidate(vec![create("app/one.txt", &text)])).unwrap();
    assert_eq!(report.added_lines_scanned, 1);
}

fn hostile_text() -> impl Strategy<Value = String> {
    let pieces = prop_oneof![
        Just("\n".to_owned()),
        Just("\r\n".to_owned()),
        Just("@@ -1,2 +1,3 @@\n".to_owned()),
        Just("+".to_owned()),
        Just("-".to_owned()),
        Just(" ".to_owned()),
        Just("\\ No newline at end of file\n".to_owned()),
        Just("ghp_".to_owned()),
        Just("-----BEGIN RSA PRIVATE KEY-----".to_owned()),
        Just("password=".to_owned()),
        Just("\u{202E}".to_owned()),
        Just("\u{FEFF}".to_owned()),
        Just("\u{0}".to_owned()),
        Just("#!".to_owned()),
        "[a-zA-Z0-9_=+/.-]{0,40}",
        any::<String>(),
    ];
    proptest::collection::vec(pieces, 0..40).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn scan_never_panics_and_its_report_always_parses(
        before in hostile_text(),
        after in hostile_text(),
        diff in hostile_text(),
        created in hostile_text(),
    ) {
        let honest = finalizer::unified_diff("app/u.txt", Some(&before), Some(&after));
        for d in [diff.as_str(), honest.as_str()] {
            let c = candidate(vec![
                update_with_diff("app/u.txt", &before, &after, d),
                create("app/c.txt", &created),
            ]);
            let report = scan(&c).unwrap();
            let (bytes, _) = report.to_file_bytes().unwrap();
            prop_assert_eq!(parse_report(&bytes).unwrap().report, report.clone());
            policy::verify(&report, &c).unwrap();
        }
    }
}
