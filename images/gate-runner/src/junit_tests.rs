use super::*;
use pretty_assertions::assert_eq;

fn p(xml: &str) -> Result<JunitReport, JunitRefusal> {
    parse(xml.as_bytes(), 100, 16)
}

fn case(id: &str, outcome: CaseOutcome) -> JunitCase {
    JunitCase {
        id: CaseId::try_from(id.to_owned()).unwrap(),
        outcome,
    }
}

#[test]
fn reads_pytest_style_junit() {
    let xml = r#"<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="1" skipped="1" tests="4">
<testcase classname="tests.test_a" name="test_ok" time="0.001" />
<testcase classname="tests.test_a" name="test_bad" time="0.001"><failure message="assert 1 == 2">tests/test_a.py:5: AssertionError &amp; more</failure></testcase>
<testcase classname="tests.test_a" name="test_skip"><skipped type="pytest.skip" message="no"/></testcase>
<testcase classname="tests.test_a" name="test_err[a&lt;b]"><system-out>PASSED</system-out><error message="fixture"/></testcase>
<testcase name="bare"/>
</testsuite></testsuites>"#;
    assert_eq!(
        p(xml).unwrap(),
        JunitReport::Ok {
            cases: vec![
                case("tests.test_a::test_ok", CaseOutcome::Passed),
                case("tests.test_a::test_bad", CaseOutcome::Failed),
                case("tests.test_a::test_skip", CaseOutcome::Skipped),
                case("tests.test_a::test_err[a<b]", CaseOutcome::Error),
                case("bare", CaseOutcome::Passed),
            ],
            truncated: false,
        }
    );
    // A bare <testsuite> root is accepted too.
    assert!(p(r#"<testsuite><testcase name="a"/></testsuite>"#).is_ok());
}

#[test]
fn refuses_doctype_entities_depth_and_malformed_documents() {
    let bomb = r#"<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;">]><testsuites><testcase name="&lol2;"/></testsuites>"#;
    let deep = format!(
        "<testsuites>{}{}</testsuites>",
        "<a>".repeat(100_000),
        "</a>".repeat(100_000)
    );
    let cases: Vec<(String, JunitRefusal)> = vec![
        (bomb.to_owned(), JunitRefusal::Doctype),
        (
            r#"<testsuites><testcase name="&ext;"/></testsuites>"#.to_owned(),
            JunitRefusal::Entity,
        ),
        (
            r#"<testsuites><testcase name="a">&ext;</testcase></testsuites>"#.to_owned(),
            JunitRefusal::Entity,
        ),
        (deep, JunitRefusal::TooDeep),
        ("<testsuites>".to_owned(), JunitRefusal::Syntax),
        ("<testsuites></testsuite>".to_owned(), JunitRefusal::Syntax),
        ("<html/>".to_owned(), JunitRefusal::Syntax),
        ("".to_owned(), JunitRefusal::Syntax),
        (
            "<testsuites/><testsuites/>".to_owned(),
            JunitRefusal::Syntax,
        ),
        ("<testsuites/>junk".to_owned(), JunitRefusal::Syntax),
        (
            r#"<testsuites><testcase name="a"><testcase name="b"/></testcase></testsuites>"#
                .to_owned(),
            JunitRefusal::Syntax,
        ),
        (
            r#"<testsuites><testcase a="1" a="2" name="x"/></testsuites>"#.to_owned(),
            JunitRefusal::Syntax,
        ),
        (
            r#"<testsuites><testcase classname="c"/></testsuites>"#.to_owned(),
            JunitRefusal::CaseId,
        ),
        (
            format!(
                r#"<testsuites><testcase name="{}"/></testsuites>"#,
                "x".repeat(300)
            ),
            JunitRefusal::CaseId,
        ),
        (
            r#"<testsuites><testcase name="a&#x1b;[2J"/></testsuites>"#.to_owned(),
            JunitRefusal::CaseId,
        ),
    ];
    for (xml, expected) in cases {
        assert_eq!(p(&xml), Err(expected), "{}", &xml[..xml.len().min(80)]);
    }
    // The document is well-formed XML but the failure is a sibling, not a child: passed.
    assert_eq!(
        p(r#"<testsuites><testcase name="a"/><failure/></testsuites>"#).unwrap(),
        JunitReport::Ok {
            cases: vec![case("a", CaseOutcome::Passed)],
            truncated: false
        }
    );
}

#[test]
fn the_case_cap_truncates_and_says_so() {
    let xml = format!(
        "<testsuites>{}</testsuites>",
        (0..10)
            .map(|i| format!(r#"<testcase name="t{i}"/>"#))
            .collect::<String>()
    );
    let JunitReport::Ok { cases, truncated } = parse(xml.as_bytes(), 3, 8).unwrap() else {
        panic!("not ok");
    };
    assert_eq!(cases.len(), 3);
    assert!(truncated);
}

#[test]
fn file_reading_checks_type_and_size_first() {
    let tmp = tempfile::tempdir().unwrap();
    let root = Dir::open_ambient_dir(tmp.path(), cap_std::ambient_authority()).unwrap();
    let spec = |max| JunitSpec::new("out/j.xml".parse().unwrap(), max, 10, 8).unwrap();
    assert_eq!(read_junit(&root, &spec(100)), JunitReport::Missing);
    std::fs::create_dir(tmp.path().join("out")).unwrap();
    std::fs::write(
        tmp.path().join("out/j.xml"),
        r#"<testsuites><testcase name="a"/></testsuites>"#,
    )
    .unwrap();
    assert!(matches!(
        read_junit(&root, &spec(100)),
        JunitReport::Ok { .. }
    ));
    let invalid = |code: &str| JunitReport::Invalid {
        code: code.parse().unwrap(),
    };
    assert_eq!(
        read_junit(&root, &spec(10)),
        invalid("GATE_JUNIT_TOO_LARGE")
    );
    // A 1 GiB sparse file is refused by its size without being read.
    let big = std::fs::File::create(tmp.path().join("out/big.xml")).unwrap();
    big.set_len(1 << 30).unwrap();
    let big_spec = JunitSpec::new("out/big.xml".parse().unwrap(), 1 << 20, 10, 8).unwrap();
    assert_eq!(
        read_junit(&root, &big_spec),
        invalid("GATE_JUNIT_TOO_LARGE")
    );
    std::fs::remove_file(tmp.path().join("out/j.xml")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", tmp.path().join("out/j.xml")).unwrap();
    assert_eq!(
        read_junit(&root, &spec(100)),
        invalid("GATE_JUNIT_NOT_A_FILE")
    );
    std::fs::remove_file(tmp.path().join("out/j.xml")).unwrap();
    std::fs::create_dir(tmp.path().join("out/j.xml")).unwrap();
    assert_eq!(
        read_junit(&root, &spec(100)),
        invalid("GATE_JUNIT_NOT_A_FILE")
    );
    std::fs::remove_dir(tmp.path().join("out/j.xml")).unwrap();
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        tmp.path().join("out/j.xml"),
        rustix::fs::Mode::from_raw_mode(0o644),
    )
    .unwrap();
    assert_eq!(
        read_junit(&root, &spec(100)),
        invalid("GATE_JUNIT_NOT_A_FILE")
    );
}

#[test]
fn every_refusal_code_is_a_stable_code() {
    for r in JunitRefusal::ALL {
        assert!(matches!(r.report(), JunitReport::Invalid { .. }));
    }
}
