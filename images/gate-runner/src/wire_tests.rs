use super::*;
use pretty_assertions::assert_eq;
use proptest::prelude::*;

const NONCE: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

fn nonce() -> Nonce {
    NONCE.parse().unwrap()
}

fn request() -> GateRequest {
    GateRequest::new(
        nonce(),
        Argv::try_from(vec![
            "python3".to_owned(),
            "-m".to_owned(),
            "pytest".to_owned(),
        ])
        .unwrap(),
        RelPath::root(),
        Env::try_from(vec![
            ("HOME".to_owned(), "/tmp/home".to_owned()),
            ("PATH".to_owned(), "/usr/bin:/bin".to_owned()),
        ])
        .unwrap(),
        RunLimits::new(600_000, 2000, 65_536).unwrap(),
        Some(JunitSpec::new("out/junit.xml".parse().unwrap(), 1 << 20, 1000, 32).unwrap()),
        TreeTotals::new(3, 100).unwrap(),
    )
    .unwrap()
}

fn report() -> GateReport {
    GateReport::new(
        nonce(),
        RunStatus::Completed,
        None,
        Some(ExitStatus::Code(1)),
        1234,
        LogTail::new(10, b"tail\n".to_vec()).unwrap(),
        Some(JunitReport::Ok {
            cases: vec![JunitCase {
                id: CaseId::try_from("tests.test_a::test_one".to_owned()).unwrap(),
                outcome: CaseOutcome::Failed,
            }],
            truncated: false,
        }),
    )
    .unwrap()
}

fn code(e: &GateRunnerError) -> &'static str {
    e.code()
}

#[test]
fn request_encodes_as_the_contract_says() {
    let json = String::from_utf8(request().to_json().unwrap()).unwrap();
    assert_eq!(
        json,
        concat!(
            r#"{"argv":["python3","-m","pytest"],"cwd":".","env":[["HOME","/tmp/home"],["PATH","/usr/bin:/bin"]],"#,
            r#""junit":{"max_bytes":1048576,"max_cases":1000,"max_depth":32,"path":"out/junit.xml"},"#,
            r#""kill_grace_ms":2000,"log_tail_bytes":65536,"#,
            r#""nonce":"00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff","#,
            r#""tree":{"bytes":100,"entries":3},"version":1,"wall_ms":600000}"#
        )
    );
    assert_eq!(GateRequest::from_json(json.as_bytes()).unwrap(), request());
}

#[test]
fn report_encodes_as_the_contract_says() {
    let json = String::from_utf8(report().to_json().unwrap()).unwrap();
    assert_eq!(
        json,
        concat!(
            r#"{"exit":{"code":1},"junit":{"cases":[{"id":"tests.test_a::test_one","outcome":"failed"}],"state":"ok","truncated":false},"#,
            r#""log":{"tail_b64":"dGFpbAo=","total_bytes":10},"#,
            r#""nonce":"00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff","#,
            r#""runner_error":null,"status":"completed","version":1,"wall_ms":1234}"#
        )
    );
    assert_eq!(GateReport::from_json(json.as_bytes()).unwrap(), report());
    for (junit, text) in [
        (JunitReport::Missing, r#"{"state":"missing"}"#),
        (
            JunitReport::Invalid {
                code: "GATE_JUNIT_DOCTYPE".parse().unwrap(),
            },
            r#"{"code":"GATE_JUNIT_DOCTYPE","state":"invalid"}"#,
        ),
    ] {
        let enc = to_canonical(&junit, 1000).unwrap();
        assert_eq!(String::from_utf8(enc).unwrap(), text);
        let back: JunitReport = vocab::from_slice_strict(text.as_bytes(), 1000).unwrap();
        assert_eq!(back, junit);
    }
    let signal = to_canonical(&ExitStatus::Signal(9), 100).unwrap();
    assert_eq!(signal, br#"{"signal":9}"#);
}

#[test]
fn report_refuses_non_canonical_spellings() {
    let json = String::from_utf8(report().to_json().unwrap()).unwrap();
    let spaced = json.replacen(',', ", ", 1);
    let reordered = json.replacen(
        r#"{"exit":{"code":1},"#,
        r#"{"wall_ms":1234,"exit":{"code":1},"#,
        1,
    );
    let reordered = reordered.replacen(r#","wall_ms":1234}"#, "}", 1);
    let escaped = json.replacen("test_one", "test_\\u006fne", 1);
    for bad in [spaced, reordered, escaped] {
        let e = GateReport::from_json(bad.as_bytes()).unwrap_err();
        assert_eq!(code(&e), "GATE_WIRE_NOT_CANONICAL");
    }
}

#[test]
fn documents_refuse_unknown_and_duplicate_fields_and_other_versions() {
    let req = String::from_utf8(request().to_json().unwrap()).unwrap();
    let rep = String::from_utf8(report().to_json().unwrap()).unwrap();
    let cases: Vec<(String, &str)> = vec![
        (req.replacen('{', r#"{"extra":1,"#, 1), "GATE_WIRE_JSON"),
        (req.replacen('{', r#"{"wall_ms":1,"#, 1), "GATE_WIRE_JSON"),
        (
            req.replacen(r#""version":1"#, r#""version":2"#, 1),
            "GATE_WIRE_JSON",
        ),
        (
            req.replacen(r#""bytes":100,"#, r#""bytes":100,"x":0,"#, 1),
            "GATE_WIRE_JSON",
        ),
        (
            req.replacen(r#""max_bytes""#, r#""extra":0,"max_bytes""#, 1),
            "GATE_WIRE_JSON",
        ),
        (format!("\u{feff}{req}"), "GATE_WIRE_JSON"),
        (format!("{req}x"), "GATE_WIRE_JSON"),
        (format!("{req}{req}"), "GATE_WIRE_JSON"),
    ];
    for (doc, expected) in cases {
        let e = GateRequest::from_json(doc.as_bytes()).unwrap_err();
        assert_eq!(code(&e), expected, "{doc}");
    }
    for doc in [
        rep.replacen('{', r#"{"extra":1,"#, 1),
        rep.replacen(r#""version":1"#, r#""version":0"#, 1),
        rep.replacen(r#""state":"ok""#, r#""state":"ok","x":1"#, 1),
        rep.replacen(r#""outcome":"failed""#, r#""outcome":"failed","x":1"#, 1),
        rep.replacen(r#""total_bytes":10"#, r#""total_bytes":10,"x":1"#, 1),
        rep.replacen(r#"{"code":1}"#, r#"{"code":1,"signal":9}"#, 1),
        rep.replacen(r#""status":"completed""#, r#""status":"passed""#, 1),
    ] {
        let e = GateReport::from_json(doc.as_bytes()).unwrap_err();
        assert_eq!(code(&e), "GATE_WIRE_JSON", "{doc}");
    }
}

#[test]
fn field_constructors_refuse_every_rule() {
    let s = |v: &str| v.to_owned();
    let bad_nonces = [
        "",
        &NONCE[1..],
        &NONCE.to_uppercase(),
        &format!("{}g", &NONCE[1..]),
        &format!("{NONCE}0"),
    ]
    .map(str::to_owned);
    for n in bad_nonces {
        assert!(Nonce::try_from(n).is_err());
    }
    for p in [
        "", "/abs", "a//b", "a/", "./a", "a/./b", "a/..", "..", "a\\b", "a\0b",
    ] {
        assert!(RelPath::try_from(s(p)).is_err(), "{p}");
    }
    assert!(RelPath::try_from("x".repeat(256)).is_err());
    assert!(RelPath::try_from(["a"; 2049].join("/")).is_err());
    assert!(RelPath::try_from("x".repeat(255)).is_ok());
    assert!(Argv::try_from(vec![]).is_err());
    assert!(Argv::try_from(vec![s("")]).is_err());
    assert!(Argv::try_from(vec![s("a"); 257]).is_err());
    assert!(Argv::try_from(vec![s("a"); 256]).is_ok());
    assert!(Argv::try_from(vec![s("a"), "x".repeat(4097)]).is_err());
    assert!(Argv::try_from(vec![s("a"), s("b\0")]).is_err());
    for k in ["", "lower", "1A", "A-B", "A B", &"A".repeat(129)] {
        assert!(Env::try_from(vec![(s(k), s("v"))]).is_err(), "{k}");
    }
    assert!(Env::try_from(vec![(s("_A1"), s("v"))]).is_ok());
    assert!(Env::try_from(vec![(s("A"), s("1")), (s("A"), s("2"))]).is_err());
    assert!(Env::try_from(vec![(s("A"), "x".repeat(4097))]).is_err());
    assert!(Env::try_from(vec![(s("A"), s("a\0"))]).is_err());
    let many: Vec<_> = (0..129).map(|i| (format!("K{i}"), s("v"))).collect();
    assert!(Env::try_from(many).is_err());
    let j = |b, c, d| JunitSpec::new("j.xml".parse().unwrap(), b, c, d);
    assert!(j(0, 1, 2).is_err());
    assert!(j(MAX_JUNIT_BYTES + 1, 1, 2).is_err());
    assert!(j(1, 0, 2).is_err());
    assert!(j(1, MAX_JUNIT_CASES + 1, 2).is_err());
    assert!(j(1, 1, 1).is_err());
    assert!(j(1, 1, MAX_JUNIT_DEPTH + 1).is_err());
    assert!(j(MAX_JUNIT_BYTES, MAX_JUNIT_CASES, MAX_JUNIT_DEPTH).is_ok());
    assert!(JunitSpec::new(RelPath::root(), 1, 1, 2).is_err());
    assert!(RunLimits::new(0, 0, 0).is_err());
    assert!(RunLimits::new(MAX_WALL_MS + 1, 0, 0).is_err());
    assert!(RunLimits::new(1, MAX_KILL_GRACE_MS + 1, 0).is_err());
    assert!(RunLimits::new(1, 0, MAX_LOG_TAIL_BYTES + 1).is_err());
    assert!(RunLimits::new(MAX_WALL_MS, MAX_KILL_GRACE_MS, MAX_LOG_TAIL_BYTES).is_ok());
    assert!(TreeTotals::new(MAX_TREE_ENTRIES + 1, 0).is_err());
    assert!(TreeTotals::new(1, MAX_TREE_BYTES + 1).is_err());
    assert!(TreeTotals::new(0, 1).is_err());
    assert!(TreeTotals::new(0, 0).is_ok());
    for c in ["", "lower", "_A", "A-B", &"A".repeat(65)] {
        assert!(StableCode::try_from(s(c)).is_err(), "{c}");
    }
    assert!(CaseId::try_from(s("")).is_err());
    assert!(CaseId::try_from("x".repeat(257)).is_err());
    assert!(CaseId::try_from(s("a\u{1b}[2J")).is_err());
    assert!(CaseId::try_from(s("a\nb")).is_err());
    assert!(LogTail::new(2, vec![0; 3]).is_err());
    assert!(LogTail::new(u64::MAX, vec![0; MAX_LOG_TAIL_BYTES as usize + 1]).is_err());
}

#[test]
fn a_request_whose_worst_case_report_exceeds_the_cap_is_refused() {
    let big = GateRequest::new(
        nonce(),
        Argv::try_from(vec!["x".to_owned()]).unwrap(),
        RelPath::root(),
        Env::try_from(vec![]).unwrap(),
        RunLimits::new(1, 0, MAX_LOG_TAIL_BYTES).unwrap(),
        Some(
            JunitSpec::new(
                "j.xml".parse().unwrap(),
                1,
                MAX_JUNIT_CASES,
                MAX_JUNIT_DEPTH,
            )
            .unwrap(),
        ),
        TreeTotals::new(0, 0).unwrap(),
    );
    assert_eq!(code(&big.unwrap_err()), "GATE_WIRE_FIELD");
    // The largest report a valid request allows fits the report cap.
    let cases = (0..MAX_JUNIT_CASES)
        .map(|_| JunitCase {
            id: CaseId::try_from("\"".repeat(MAX_CASE_ID_BYTES)).unwrap(),
            outcome: CaseOutcome::Skipped,
        })
        .collect();
    let log = LogTail::new(u64::MAX, vec![0xff; 65_536]).unwrap();
    let r = GateReport::new(
        nonce(),
        RunStatus::TimedOut,
        None,
        Some(ExitStatus::Signal(9)),
        u64::MAX,
        log,
        Some(JunitReport::Ok {
            cases,
            truncated: true,
        }),
    )
    .unwrap();
    let json = r.to_json().unwrap();
    assert!(json.len() <= MAX_REPORT_BYTES);
    assert_eq!(GateReport::from_json(&json).unwrap(), r);
}

#[test]
fn report_fields_must_agree() {
    let log = || LogTail::new(0, vec![]).unwrap();
    let code_ = || Some("GATE_RUNNER_TREE".parse::<StableCode>().unwrap());
    let shape = |st, rc, ex| GateReport::new(nonce(), st, rc, ex, 0, log(), None);
    assert!(shape(RunStatus::RunnerError, None, None).is_err());
    assert!(shape(RunStatus::Completed, code_(), Some(ExitStatus::Code(0))).is_err());
    assert!(shape(RunStatus::TimedOut, code_(), Some(ExitStatus::Signal(9))).is_err());
    assert!(shape(RunStatus::Completed, None, None).is_err());
    assert!(shape(RunStatus::TimedOut, None, None).is_err());
    assert!(shape(RunStatus::Completed, None, Some(ExitStatus::Code(256))).is_err());
    assert!(shape(RunStatus::Completed, None, Some(ExitStatus::Code(-1))).is_err());
    assert!(shape(RunStatus::Completed, None, Some(ExitStatus::Signal(0))).is_err());
    assert!(shape(RunStatus::Completed, None, Some(ExitStatus::Signal(65))).is_err());
    assert!(shape(RunStatus::RunnerError, code_(), None).is_ok());
    assert!(shape(RunStatus::RunnerError, code_(), Some(ExitStatus::Code(0))).is_ok());
    let too_many = (0..=MAX_JUNIT_CASES)
        .map(|_| JunitCase {
            id: CaseId::try_from("a".to_owned()).unwrap(),
            outcome: CaseOutcome::Passed,
        })
        .collect();
    let r = GateReport::new(
        nonce(),
        RunStatus::Completed,
        None,
        Some(ExitStatus::Code(0)),
        0,
        log(),
        Some(JunitReport::Ok {
            cases: too_many,
            truncated: true,
        }),
    );
    assert!(r.is_err());
    // Base64 that is not canonical (non-zero trailing bits, no padding) is refused.
    let json = String::from_utf8(report().to_json().unwrap()).unwrap();
    for b64 in ["dGFpbAp=", "dGFpbAo", "dGFp bAo="] {
        let doc = json.replacen("dGFpbAo=", b64, 1);
        assert!(GateReport::from_json(doc.as_bytes()).is_err(), "{b64}");
    }
}

#[test]
fn frames_are_length_checked_before_reading() {
    let mut buf = Vec::new();
    write_frame(&mut buf, b"{}", 10).unwrap();
    assert_eq!(buf, b"\0\0\0\x02{}");
    assert_eq!(read_frame(&buf[..], 10).unwrap(), b"{}");
    assert_eq!(
        code(&write_frame(&mut Vec::new(), b"", 10).unwrap_err()),
        "GATE_WIRE_FRAME_LENGTH"
    );
    assert_eq!(
        code(&write_frame(&mut Vec::new(), &[0; 11], 10).unwrap_err()),
        "GATE_WIRE_FRAME_LENGTH"
    );
    for (bytes, expected) in [
        (&b"\0\0\0\0"[..], "GATE_WIRE_FRAME_LENGTH"),
        (&b"\xff\xff\xff\xff"[..], "GATE_WIRE_FRAME_LENGTH"),
        (&b"\0\0\0\x0b"[..], "GATE_WIRE_FRAME_LENGTH"),
        (&b"\0\0"[..], "GATE_WIRE_FRAME_TRUNCATED"),
        (&b""[..], "GATE_WIRE_FRAME_TRUNCATED"),
        (&b"\0\0\0\x05{}"[..], "GATE_WIRE_FRAME_TRUNCATED"),
    ] {
        assert_eq!(code(&read_frame(bytes, 10).unwrap_err()), expected);
    }
    let mut stream = Vec::new();
    report().write_frame(&mut stream).unwrap();
    assert_eq!(GateReport::read_stream(&stream[..]).unwrap(), report());
    let mut two = stream.clone();
    two.extend_from_slice(&stream);
    assert_eq!(
        code(&GateReport::read_stream(&two[..]).unwrap_err()),
        "GATE_WIRE_TRAILING_DATA"
    );
    let mut one_more = stream.clone();
    one_more.push(b'\n');
    assert_eq!(
        code(&GateReport::read_stream(&one_more[..]).unwrap_err()),
        "GATE_WIRE_TRAILING_DATA"
    );
    let mut req = Vec::new();
    request().write_frame(&mut req).unwrap();
    req.extend_from_slice(b"tar follows");
    let mut cursor = &req[..];
    assert_eq!(GateRequest::read_frame(&mut cursor).unwrap(), request());
    assert_eq!(cursor, b"tar follows");
}

#[test]
fn the_nonce_is_never_printed() {
    let shown = format!("{:?} {:?}", nonce(), request());
    assert!(!shown.contains(NONCE));
}

fn arb_text() -> impl Strategy<Value = String> {
    proptest::string::string_regex("[a-zA-Z0-9 ./:_\"\\\\\u{e9}\u{202e}-]{0,40}").unwrap()
}

fn arb_request() -> impl Strategy<Value = GateRequest> {
    (
        any::<[u8; 32]>(),
        proptest::collection::vec(arb_text(), 0..5),
        proptest::collection::btree_map("[A-Z_][A-Z0-9_]{0,8}", arb_text(), 0..5),
        (1..=MAX_WALL_MS, 0..=MAX_KILL_GRACE_MS, 0..=65_536u64),
        proptest::option::of((1..=MAX_JUNIT_BYTES, 1..=1000u64, 2..=MAX_JUNIT_DEPTH)),
        (0..=MAX_TREE_ENTRIES, 0..=MAX_TREE_BYTES),
        proptest::sample::select(vec![".", "a", "a/b", "src/x y/\u{e9}"]),
    )
        .prop_map(|(n, args, env, (w, g, l), junit, (e, b), cwd)| {
            let mut argv = vec!["prog".to_owned()];
            argv.extend(args);
            GateRequest::new(
                Nonce::from_bytes(n),
                Argv::try_from(argv).unwrap(),
                cwd.parse().unwrap(),
                Env::try_from(env.into_iter().collect::<Vec<_>>()).unwrap(),
                RunLimits::new(w, g, l).unwrap(),
                junit.map(|(mb, mc, md)| {
                    JunitSpec::new("out/j.xml".parse().unwrap(), mb, mc, md).unwrap()
                }),
                TreeTotals::new(e.max(1), b).unwrap(),
            )
            .unwrap()
        })
}

fn arb_report() -> impl Strategy<Value = GateReport> {
    let outcome = proptest::sample::select(vec![
        CaseOutcome::Passed,
        CaseOutcome::Failed,
        CaseOutcome::Error,
        CaseOutcome::Skipped,
    ]);
    let case = ("[^\\p{Cc}]{1,20}", outcome).prop_map(|(id, outcome)| JunitCase {
        id: CaseId::try_from(id).unwrap(),
        outcome,
    });
    let junit = prop_oneof![
        Just(None),
        Just(Some(JunitReport::Missing)),
        "[A-Z][A-Z0-9_]{0,20}".prop_map(|c| Some(JunitReport::Invalid {
            code: c.parse().unwrap()
        })),
        (proptest::collection::vec(case, 0..8), any::<bool>())
            .prop_map(|(cases, truncated)| Some(JunitReport::Ok { cases, truncated })),
    ];
    (
        any::<[u8; 32]>(),
        0..3u8,
        prop_oneof![
            (0..=255i32).prop_map(ExitStatus::Code),
            (1..=64i32).prop_map(ExitStatus::Signal)
        ],
        any::<u64>(),
        proptest::collection::vec(any::<u8>(), 0..300),
        any::<u64>(),
        junit,
    )
        .prop_map(|(n, st, exit, wall, tail, extra, junit)| {
            let (status, rc, exit) = match st {
                0 => (RunStatus::Completed, None, Some(exit)),
                1 => (RunStatus::TimedOut, None, Some(exit)),
                _ => (
                    RunStatus::RunnerError,
                    Some("GATE_RUNNER_TREE".parse().unwrap()),
                    None,
                ),
            };
            let total = (tail.len() as u64).saturating_add(extra % 1_000_000);
            GateReport::new(
                Nonce::from_bytes(n),
                status,
                rc,
                exit,
                wall,
                LogTail::new(total, tail).unwrap(),
                junit,
            )
            .unwrap()
        })
}

/// The bytes `write` puts in an empty buffer.
fn framed(write: impl FnOnce(&mut Vec<u8>) -> Result<(), GateRunnerError>) -> Vec<u8> {
    let mut buf = Vec::new();
    write(&mut buf).unwrap();
    buf
}

proptest! {
    #[test]
    fn requests_round_trip_through_frames(req in arb_request()) {
        let buf = framed(|b| req.write_frame(b));
        let back = GateRequest::read_frame(&buf[..]).unwrap();
        prop_assert_eq!(&back, &req);
        prop_assert_eq!(back.to_json().unwrap(), req.to_json().unwrap());
    }

    #[test]
    fn reports_round_trip_and_are_canonical(rep in arb_report()) {
        let buf = framed(|b| rep.write_frame(b));
        let back = GateReport::read_stream(&buf[..]).unwrap();
        prop_assert_eq!(&back, &rep);
        // Any serde_json re-encoding that differs from the canonical bytes is refused.
        let pretty = serde_json::to_vec_pretty(&rep).unwrap();
        prop_assert!(GateReport::from_json(&pretty).is_err());
    }

    #[test]
    fn truncated_frames_are_refused(rep in arb_report(), cut in any::<proptest::sample::Index>()) {
        let buf = framed(|b| rep.write_frame(b));
        let at = cut.index(buf.len());
        prop_assert!(GateReport::read_stream(&buf[..at]).is_err());
    }
}
