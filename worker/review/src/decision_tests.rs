use pretty_assertions::assert_eq;

use super::*;

fn digest(tag: &str) -> Sha256 {
    Sha256::of(tag.as_bytes())
}

fn gate(name: &str, outcome: GateVerdict, candidate: Sha256) -> GateFact {
    GateFact {
        gate: name.to_owned(),
        outcome,
        evidence_digest: digest(&format!("evidence-{name}")),
        candidate_digest: candidate,
    }
}

/// A candidate requiring `pytest` and `lint`, both passed, with a clean policy report.
fn ready() -> ReviewFacts {
    let c = digest("candidate-a");
    ReviewFacts {
        candidate_digest: c,
        approval_digest: "0".repeat(64),
        required_gates: vec!["pytest".into(), "lint".into()],
        gates: vec![
            gate("pytest", GateVerdict::Passed, c),
            gate("lint", GateVerdict::Passed, c),
        ],
        policy: Some(PolicyFact {
            report_digest: digest("policy"),
            candidate_digest: c,
            clean: true,
        }),
        published: false,
        continues: None,
        superseded_by: None,
    }
}

fn actor() -> Actor {
    Actor {
        kind: ActorKind::ApiToken,
        principal: Principal::parse("alice").unwrap(),
    }
}

fn request(facts: &ReviewFacts, decision: Decision) -> DecisionRequest {
    DecisionRequest {
        candidate_digest: facts.candidate_digest,
        decision,
        reason: None,
        force: false,
    }
}

fn reason(text: &str) -> Option<Reason> {
    Some(Reason::parse(text).unwrap())
}

#[test]
fn accept_with_every_gate_passed_and_a_clean_policy_is_recorded_against_every_digest() {
    let facts = ready();
    let record = decide(&facts, &request(&facts, Decision::Accept), actor(), 7).unwrap();
    assert_eq!(record.decision, Decision::Accept);
    assert!(!record.forced);
    assert_eq!(record.at_ms, 7);
    assert_eq!(record.against.candidate_digest, facts.candidate_digest);
    assert_eq!(record.against.approval_digest, "0".repeat(64));
    assert_eq!(
        record.against.gate_evidence,
        BTreeMap::from([
            ("lint".to_owned(), digest("evidence-lint")),
            ("pytest".to_owned(), digest("evidence-pytest")),
        ])
    );
    assert_eq!(record.against.policy_report_digest, Some(digest("policy")));
    let bytes = record.to_bytes().unwrap();
    assert_eq!(
        parse_record(&bytes, &facts.candidate_digest).unwrap(),
        record
    );
}

#[test]
fn accept_without_passing_gates_is_refused() {
    let c = digest("candidate-a");
    for (gates, named) in [
        (vec![], "lint, pytest"),
        (vec![gate("pytest", GateVerdict::Passed, c)], "lint"),
        (
            vec![
                gate("pytest", GateVerdict::Failed, c),
                gate("lint", GateVerdict::TimedOut, c),
            ],
            "lint, pytest",
        ),
        // Passed evidence bound to another candidate counts as missing.
        (
            vec![
                gate("pytest", GateVerdict::Passed, digest("candidate-b")),
                gate("lint", GateVerdict::Passed, c),
            ],
            "pytest",
        ),
    ] {
        let facts = ReviewFacts { gates, ..ready() };
        let e = decide(&facts, &request(&facts, Decision::Accept), actor(), 1).unwrap_err();
        assert_eq!(e.code(), "PATCH_CANDIDATE_REVIEW_GATES_UNMET");
        assert!(e.to_string().contains(named), "{e}");
    }
}

#[test]
fn accept_with_a_missing_or_unclean_policy_report_is_refused() {
    let mut facts = ready();
    facts.policy = None;
    let e = decide(&facts, &request(&facts, Decision::Accept), actor(), 1).unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_REVIEW_POLICY_UNCLEAN");
    assert!(e.to_string().contains("missing"));
    facts.policy = Some(PolicyFact {
        report_digest: digest("policy"),
        candidate_digest: facts.candidate_digest,
        clean: false,
    });
    let e = decide(&facts, &request(&facts, Decision::Accept), actor(), 1).unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_REVIEW_POLICY_UNCLEAN");
    assert!(e.to_string().contains("unclean"));
    // A clean report of another candidate is no report of this one.
    facts.policy = Some(PolicyFact {
        report_digest: digest("policy"),
        candidate_digest: digest("candidate-b"),
        clean: true,
    });
    let e = decide(&facts, &request(&facts, Decision::Accept), actor(), 1).unwrap_err();
    assert!(e.to_string().contains("missing"));
}

#[test]
fn a_forced_accept_needs_a_reason_and_records_what_it_overrode() {
    let mut facts = ready();
    facts.gates.truncate(1); // lint missing
    facts.policy.as_mut().unwrap().clean = false;
    let mut req = request(&facts, Decision::Accept);
    req.force = true;
    let e = decide(&facts, &req, actor(), 1).unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_REVIEW_REASON_REQUIRED");
    req.reason = reason("hotfix; lint is broken upstream");
    let record = decide(&facts, &req, actor(), 1).unwrap();
    assert!(record.forced);
    assert_eq!(
        record.overridden,
        vec![
            Unmet::Gate {
                gate: "lint".into(),
                state: "missing".into()
            },
            Unmet::Policy {
                state: "unclean".into()
            },
        ]
    );
    let back = parse_record(&record.to_bytes().unwrap(), &facts.candidate_digest).unwrap();
    assert!(back.forced);
}

#[test]
fn force_on_an_accept_that_needs_none_is_not_recorded_as_forced() {
    let facts = ready();
    let mut req = request(&facts, Decision::Accept);
    req.force = true;
    req.reason = reason("sure");
    let record = decide(&facts, &req, actor(), 1).unwrap();
    assert!(!record.forced);
    assert!(record.overridden.is_empty());
}

#[test]
fn a_decision_made_against_digest_a_is_refused_for_candidate_b() {
    let facts = ready();
    for decision in Decision::ALL {
        let req = DecisionRequest {
            candidate_digest: digest("candidate-b"),
            decision,
            reason: reason("x"),
            force: true,
        };
        let e = decide(&facts, &req, actor(), 1).unwrap_err();
        assert_eq!(e.code(), "PATCH_CANDIDATE_REVIEW_DIGEST_MISMATCH");
    }
}

#[test]
fn reject_needs_a_reason_retry_does_not() {
    let facts = ready();
    let e = decide(&facts, &request(&facts, Decision::Reject), actor(), 1).unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_REVIEW_REASON_REQUIRED");
    let mut req = request(&facts, Decision::Reject);
    req.reason = reason("wrong approach");
    assert_eq!(
        decide(&facts, &req, actor(), 1).unwrap().decision,
        Decision::Reject
    );
    let retry = decide(&facts, &request(&facts, Decision::Retry), actor(), 1).unwrap();
    assert_eq!(retry.decision, Decision::Retry);
    // Retry and reject need no passing gates.
    let bare = ReviewFacts {
        gates: vec![],
        policy: None,
        ..ready()
    };
    assert!(decide(&bare, &req, actor(), 1).is_ok());
}

#[test]
fn a_published_candidate_takes_no_more_decisions() {
    let facts = ReviewFacts {
        published: true,
        ..ready()
    };
    let e = decide(&facts, &request(&facts, Decision::Retry), actor(), 1).unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_REVIEW_PUBLISHED");
}

#[test]
fn the_last_decision_wins_and_publication_needs_accepted() {
    let facts = ready();
    let mut history = Vec::new();
    assert_eq!(ReviewState::of(&history), ReviewState::Pending);
    assert_eq!(
        require_accepted(&history).unwrap_err().code(),
        "PATCH_CANDIDATE_REVIEW_NOT_ACCEPTED"
    );
    let mut push = |d: Decision, r: Option<Reason>| {
        let mut req = request(&facts, d);
        req.reason = r;
        let record = decide(&facts, &req, actor(), 1).unwrap();
        let seq = history.len() as u64 + 1;
        history.push(StoredDecision { seq, record });
        ReviewState::of(&history)
    };
    assert_eq!(push(Decision::Accept, None), ReviewState::Accepted);
    assert_eq!(push(Decision::Reject, reason("no")), ReviewState::Rejected);
    assert_eq!(push(Decision::Retry, None), ReviewState::RetryRequested);
    assert_eq!(push(Decision::Accept, None), ReviewState::Accepted);
    assert!(require_accepted(&history).is_ok());
    assert_eq!(history.len(), 4);
}

#[test]
fn reasons_and_principals_are_checked_never_repaired() {
    for bad in ["", "   ", "a\u{1b}[2Jb", "a\rb", "\u{0}"] {
        assert_eq!(
            Reason::parse(bad).unwrap_err().code(),
            "PATCH_CANDIDATE_REVIEW_REASON",
            "{bad:?}"
        );
    }
    assert!(Reason::parse(&"x".repeat(MAX_REASON_CHARS + 1)).is_err());
    assert!(Reason::parse("two lines\n\tindented").is_ok());
    for bad in ["", "-x", "a b", "a/b", "é", &"a".repeat(65)] {
        assert_eq!(
            Principal::parse(bad).unwrap_err().code(),
            "PATCH_CANDIDATE_REVIEW_PRINCIPAL",
            "{bad:?}"
        );
    }
    for good in ["operator", "alice@example.org", "ci-bot_2.x", "A"] {
        assert!(Principal::parse(good).is_ok(), "{good}");
    }
    assert_eq!(Decision::parse("accept").unwrap(), Decision::Accept);
    assert_eq!(
        Decision::parse("Accept").unwrap_err().code(),
        "PATCH_CANDIDATE_REVIEW_INPUT"
    );
}

#[test]
fn hostile_records_are_refused_when_read_back() {
    let facts = ready();
    let record = decide(&facts, &request(&facts, Decision::Accept), actor(), 1).unwrap();
    let good: serde_json::Value = serde_json::from_slice(&record.to_bytes().unwrap()).unwrap();
    let tamper = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut v = good.clone();
        f(&mut v);
        serde_json::to_vec(&v).unwrap()
    };
    let cases: Vec<Vec<u8>> = vec![
        b"{".to_vec(),
        tamper(&|v| v["schema"] = "x".into()),
        tamper(&|v| v["extra"] = 1.into()),
        tamper(&|v| v["forced"] = true.into()),
        tamper(&|v| v["actor"]["principal"] = "a b".into()),
        tamper(&|v| v["reason"] = "".into()),
        tamper(&|v| v["against"]["candidate_digest"] = digest("z").to_string().into()),
        tamper(&|v| v["decision"] = "reject".into()),
        vec![b' '; MAX_RECORD_BYTES + 1],
    ];
    for bytes in cases {
        assert_eq!(
            parse_record(&bytes, &facts.candidate_digest)
                .unwrap_err()
                .code(),
            "PATCH_CANDIDATE_REVIEW_RECORD"
        );
    }
    // A valid record read for another candidate.
    assert!(parse_record(&record.to_bytes().unwrap(), &digest("other")).is_err());
}
