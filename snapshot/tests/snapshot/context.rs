//! `ApprovedExecutionContext` (reference §2.1) and `RepositorySnapshotEvidence` (§2.2).

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use snapshot::context_from_value;
use snapshot::{ApprovedExecutionContext, RepositorySnapshotEvidence, SnapshotError};

use crate::support::{COMMIT, context, context_value, context_with, evidence_value, p};

fn rejected(edit: impl FnOnce(&mut serde_json::Map<String, Value>)) -> SnapshotError {
    let mut value = context_value();
    edit(value.as_object_mut().unwrap());
    context_from_value(value).unwrap_err()
}

fn assert_invalid(err: &SnapshotError, needle: &str) {
    assert_eq!(err.code(), "REPOSITORY_PATCH_CONTEXT_INVALID", "{err}");
    assert!(
        err.to_string().contains(needle),
        "{err} should contain {needle:?}"
    );
}

#[test]
fn the_reference_fixture_is_accepted_with_defaults() {
    let ctx = context();
    assert_eq!(
        ctx.schema_version(),
        "managed_refinement.execution_context.v1"
    );
    assert_eq!(ctx.allowed_paths(), ["app/modules/support"]);
    assert!(ctx.prohibited_paths().is_empty());
    assert!(ctx.create_paths().is_empty());
    assert_eq!(ctx.baseline_commit_sha(), COMMIT);
    assert_eq!(ctx.required_validation_gates(), ["pytest"]);
}

#[test]
fn every_required_text_field_must_be_nonempty() {
    for field in [
        "handoff_id",
        "request_id",
        "plan_id",
        "app_id",
        "build_registry_id",
        "repository_full_name",
        "raw_request",
        "request_type",
        "snapshot_digest",
        "graph_identity_digest",
        "impact_report_digest",
        "execution_strategy_id",
        "rationale",
    ] {
        let err = rejected(|m| {
            m.insert(field.to_owned(), json!(""));
        });
        assert_invalid(&err, &format!("{field} must not be empty"));
        let err = rejected(|m| {
            m.remove(field);
        });
        assert_invalid(&err, field);
    }
}

#[test]
fn commit_and_plan_digest_must_be_hexadecimal_of_exact_length() {
    for bad in ["", "abc", &"g".repeat(40), &"a".repeat(41), &"a".repeat(39)] {
        let err = rejected(|m| {
            m.insert("baseline_commit_sha".into(), json!(bad));
        });
        assert_invalid(&err, "baseline_commit_sha must be hexadecimal");
    }
    for bad in ["", &"z".repeat(64), &"a".repeat(63), &"a".repeat(65)] {
        let err = rejected(|m| {
            m.insert("approved_plan_digest".into(), json!(bad));
        });
        assert_invalid(&err, "approved_plan_digest must be hexadecimal");
    }
    // Upper case is accepted for both (the reference allows `0-9a-fA-F`).
    context_with(|m| {
        m.insert("baseline_commit_sha".into(), json!(COMMIT.to_uppercase()));
        m.insert("approved_plan_digest".into(), json!("A".repeat(64)));
    });
}

#[test]
fn unknown_fields_are_rejected() {
    let err = rejected(|m| {
        m.insert("build_key".into(), json!("x"));
    });
    assert_invalid(&err, "unknown field");
}

#[test]
fn any_schema_version_is_accepted_by_the_model() {
    let ctx = context_with(|m| {
        m.insert(
            "schema_version".into(),
            json!("managed_refinement.execution_context.v2"),
        );
    });
    assert_eq!(
        ctx.schema_version(),
        "managed_refinement.execution_context.v2"
    );
}

#[test]
fn scopes_are_normalised_sorted_and_unique() {
    let ctx = context_with(|m| {
        m.insert(
            "allowed_paths".into(),
            json!(["b//c/", "app/", "./app", "app\\x", " app "]),
        );
        m.insert("prohibited_paths".into(), json!(["app/secret/"]));
        m.insert("read_only_paths".into(), json!(["app/tests/", "app/tests"]));
    });
    assert_eq!(ctx.allowed_paths(), ["app", "app/x", "b/c"]);
    assert_eq!(ctx.prohibited_paths(), ["app/secret"]);
    assert_eq!(ctx.read_only_paths(), ["app/tests"]);
    for field in ["allowed_paths", "prohibited_paths", "read_only_paths"] {
        for bad in ["../app", "/abs", "C:/x", "a/../../b", ""] {
            let err = rejected(|m| {
                m.insert(field.into(), json!([bad]));
            });
            assert_invalid(
                &err,
                &format!("unsafe execution path: {}", vocab::quote(bad)),
            );
        }
    }
}

#[test]
fn exact_grants_must_be_canonical_nfc_and_casefold_unique() {
    for field in ["create_paths", "delete_paths"] {
        for bad in [
            "./app/modules/support/x.py",
            "app/modules/support//x.py",
            "app/modules/support/x.py/",
            " app/modules/support/x.py",
            "app/modules/support/cafe\u{301}.py",
            ".",
            "../x",
        ] {
            let err = rejected(|m| {
                m.insert(field.into(), json!([bad]));
            });
            assert_invalid(
                &err,
                &format!("unsafe exact execution path: {}", vocab::quote(bad)),
            );
        }
        let err = rejected(|m| {
            m.insert(
                field.into(),
                json!([
                    "app/modules/support/Straße.py",
                    "app/modules/support/STRASSE.py"
                ]),
            );
        });
        assert_invalid(
            &err,
            "duplicate exact execution path: 'app/modules/support/STRASSE.py'",
        );
    }
    let ctx = context_with(|m| {
        m.insert(
            "create_paths".into(),
            json!(["app/modules/support/z.py", "app/modules/support/a.py"]),
        );
    });
    assert_eq!(
        ctx.create_paths(),
        [p("app/modules/support/a.py"), p("app/modules/support/z.py")]
    );
}

#[test]
fn grants_may_not_overlap_or_leave_the_approved_scope() {
    let err = rejected(|m| {
        m.insert("create_paths".into(), json!(["app/modules/support/x.py"]));
        m.insert("delete_paths".into(), json!(["app/modules/support/X.py"]));
    });
    assert_invalid(&err, "exact operation grants overlap");
    let err = rejected(|m| {
        m.insert("create_paths".into(), json!(["app/modules/support/x"]));
        m.insert("delete_paths".into(), json!(["app/modules/support/X/y.py"]));
    });
    assert_invalid(&err, "exact operation grants overlap");
    let err = rejected(|m| {
        m.insert("create_paths".into(), json!(["app/other/x.py"]));
    });
    assert_invalid(
        &err,
        "exact operation path is outside approved scope: 'app/other/x.py'",
    );
    // Prohibited and read-only scopes win over allowed ones, case-folded.
    for (field, scope, path) in [
        (
            "prohibited_paths",
            "App/Modules/Support/Private",
            "app/modules/support/private/x.py",
        ),
        (
            "read_only_paths",
            "APP/modules/support/tests",
            "app/modules/support/tests/t.py",
        ),
    ] {
        let err = rejected(|m| {
            m.insert(field.into(), json!([scope]));
            m.insert("delete_paths".into(), json!([path]));
        });
        assert_invalid(&err, "exact operation path is outside approved scope");
    }
    // Allowed scopes are case-sensitive.
    let err = rejected(|m| {
        m.insert("create_paths".into(), json!(["App/modules/support/x.py"]));
    });
    assert_invalid(&err, "outside approved scope");
}

#[test]
fn context_json_round_trip_is_lossless() {
    let ctx = context_with(|m| {
        m.insert(
            "allowed_paths".into(),
            json!(["app/modules/support/", "app/ui"]),
        );
        m.insert("prohibited_paths".into(), json!(["app/ui/private"]));
        m.insert(
            "read_only_paths".into(),
            json!(["app/modules/support/tests"]),
        );
        m.insert("create_paths".into(), json!(["app/ui/pages/New.jsx"]));
        m.insert("delete_paths".into(), json!(["app/modules/support/old.py"]));
        m.insert("raw_request".into(), json!("ünïcödé \"quoted\" \n newline"));
    });
    let text = serde_json::to_string(&ctx).unwrap();
    let again = ApprovedExecutionContext::from_json(&text).unwrap();
    assert_eq!(again, ctx);
    assert_eq!(serde_json::to_string(&again).unwrap(), text);
    let from_value: ApprovedExecutionContext =
        serde_json::from_value(serde_json::to_value(&ctx).unwrap()).unwrap();
    assert_eq!(from_value, ctx);
}

#[test]
fn malformed_approval_text_is_rejected_with_the_context_code() {
    for bad in ["", "{", "[]", "null", "{\"handoff_id\": 1}"] {
        let err = ApprovedExecutionContext::from_json(bad).unwrap_err();
        assert_eq!(err.code(), "REPOSITORY_PATCH_CONTEXT_INVALID", "{bad}");
    }
}

#[test]
fn snapshot_evidence_validates_paths_hashes_and_identity() {
    let good = evidence_value(&[("app/x.py", "x")]);
    let ev = RepositorySnapshotEvidence::from_json(&good.to_string()).unwrap();
    assert_eq!(ev.file_manifest().len(), 1);
    assert_eq!(serde_json::to_value(&ev).unwrap(), good, "round trip");

    let mut outside = good.clone();
    outside["file_manifest"] = json!({"../outside.py": format!("sha256:{}", "0".repeat(64))});
    let err = RepositorySnapshotEvidence::from_json(&outside.to_string()).unwrap_err();
    assert_eq!(err.code(), "REPOSITORY_PATCH_UNSAFE_PATH");

    for bad_hash in [
        "sha256:invalid",
        &"0".repeat(64),
        &format!("sha256:{}", "A".repeat(64)),
    ] {
        let mut v = good.clone();
        v["file_manifest"] = json!({"app/x.py": bad_hash});
        let err = RepositorySnapshotEvidence::from_json(&v.to_string()).unwrap_err();
        assert_eq!(err.code(), "REPOSITORY_PATCH_MANIFEST_HASH", "{bad_hash}");
    }
    for (field, value) in [
        ("baseline_commit_sha", json!("abc")),
        ("plan_id", json!("")),
        ("snapshot_digest", json!("")),
        ("extra", json!(1)),
    ] {
        let mut v = good.clone();
        v[field] = value;
        let err = RepositorySnapshotEvidence::from_json(&v.to_string()).unwrap_err();
        assert_eq!(err.code(), "REPOSITORY_PATCH_SNAPSHOT_INVALID", "{field}");
    }
    // The commit length is checked, not its alphabet (reference §2.2).
    let mut v = good;
    v["baseline_commit_sha"] = json!("z".repeat(40));
    RepositorySnapshotEvidence::from_json(&v.to_string()).unwrap();
    // An empty manifest is valid in v2.
    RepositorySnapshotEvidence::from_json(&evidence_value(&[]).to_string()).unwrap();
}

/// One parser per document: duplicate keys are refused by the constructors themselves, at the top
/// level and inside nested maps (where plain serde would let the last key win).
#[test]
fn r_duplicate_keys_are_refused_by_the_constructors() {
    let text = context_value().to_string();
    let twice = text.replacen("\"plan_id\":", "\"plan_id\":\"plan-other\",\"plan_id\":", 1);
    assert_ne!(twice, text);
    let err = ApprovedExecutionContext::from_json(&twice).unwrap_err();
    assert_invalid(&err, "duplicate object key");
    vocab::check_message_convention(&err).unwrap();

    let good = evidence_value(&[("app/x.py", "x")]).to_string();
    let hash = format!("\"sha256:{}\"", "0".repeat(64));
    let dup_manifest = good.replacen(
        "\"file_manifest\":{",
        &format!("\"file_manifest\":{{\"app/x.py\":{hash},"),
        1,
    );
    assert_ne!(dup_manifest, good);
    let err = RepositorySnapshotEvidence::from_json(&dup_manifest).unwrap_err();
    assert_eq!(err.code(), "REPOSITORY_PATCH_SNAPSHOT_INVALID", "{err}");
    assert!(err.to_string().contains("duplicate object key"), "{err}");
}

/// serde's own messages quote input values (`invalid type: string "…"`, `unknown field `…``);
/// none of that reaches the message, which names the JSON path and the kind instead, and the code
/// appears once.
#[test]
fn r_malformed_documents_never_quote_input_values() {
    let secret = "sk-live-\u{1b}]52;c;ZXZpbA==\u{7}";
    let cases: Vec<(Value, &str)> = vec![
        (
            {
                let mut v = context_value();
                v["allowed_paths"] = json!(secret);
                v
            },
            "$.allowed_paths",
        ),
        (
            {
                let mut v = context_value();
                v["allowed_paths"] = json!(["app/", 7, secret]);
                v
            },
            "$.allowed_paths[1]",
        ),
        (
            {
                let mut v = context_value();
                v[secret] = json!(secret);
                v
            },
            "unknown field",
        ),
        (
            {
                let mut v = context_value();
                v["handoff_id"] = json!([secret]);
                v
            },
            "$.handoff_id",
        ),
    ];
    for (doc, needle) in cases {
        let err = ApprovedExecutionContext::from_json(&doc.to_string()).unwrap_err();
        let shown = err.to_string();
        assert_invalid(&err, needle);
        assert!(!shown.contains("sk-live"), "{shown}");
        assert!(!shown.contains('\u{1b}'), "{shown}");
        vocab::check_message_convention(&err).unwrap();
    }
    // Validator messages quote paths only through the escaping display type.
    let err = rejected(|m| {
        m.insert("allowed_paths".into(), json!(["../\u{202e}evil"]));
    });
    assert_eq!(
        err.to_string(),
        "REPOSITORY_PATCH_CONTEXT_INVALID: unsafe execution path: '../\\u202eevil'"
    );
    vocab::check_message_convention(&err).unwrap();

    let mut v = evidence_value(&[("app/x.py", "x")]);
    v["file_manifest"] = json!({ "app/x.py": [secret] });
    let err = RepositorySnapshotEvidence::from_json(&v.to_string()).unwrap_err();
    assert_eq!(err.code(), "REPOSITORY_PATCH_SNAPSHOT_INVALID", "{err}");
    assert!(err.to_string().contains("$.file_manifest"), "{err}");
    assert!(!err.to_string().contains("sk-live"), "{err}");
    vocab::check_message_convention(&err).unwrap();
}

/// The approval size cap lives in the constructor, so every command has the same one.
#[test]
fn approval_documents_over_the_cap_are_refused() {
    let mut v = context_value();
    v["rationale"] = json!("r".repeat(snapshot::MAX_CONTEXT_JSON_BYTES));
    let err = ApprovedExecutionContext::from_json(&v.to_string()).unwrap_err();
    assert_invalid(&err, "exceeds");
}

/// `patch-candidate snapshot --json` adds an `excluded` list to the evidence: it is accepted,
/// checked entry by entry (shape, kind, ids, name bytes), and dropped; nothing else is loosened.
#[test]
fn snapshot_json_excluded_list_is_accepted_and_checked() {
    let good = evidence_value(&[("app/x.py", "x")]);
    let link = json!({
        "content_sha256": format!("sha256:{}", "1".repeat(64)),
        "kind": "symlink",
        "mode": "120000",
        "object_id": "a".repeat(40),
        "path": "app/link",
        "path_hex": "6170702f6c696e6b",
        "size": 5,
    });
    let submodule = json!({
        "content_sha256": null,
        "kind": "submodule",
        "mode": "160000",
        "object_id": "b".repeat(40),
        "path": null,
        "path_hex": "ff",
        "size": null,
    });
    let mut with = good.clone();
    with["excluded"] = json!([link.clone(), submodule]);
    let parsed = RepositorySnapshotEvidence::from_json(&with.to_string()).unwrap();
    assert_eq!(
        parsed,
        RepositorySnapshotEvidence::from_json(&good.to_string()).unwrap()
    );
    assert_eq!(serde_json::to_value(&parsed).unwrap(), good, "dropped");
    let mut empty = good.clone();
    empty["excluded"] = json!([]);
    RepositorySnapshotEvidence::from_json(&empty.to_string()).unwrap();

    let cases: Vec<(&str, Value)> = vec![
        ("kind", json!("file")),
        ("kind", json!("other")),
        ("mode", json!("12x000")),
        ("object_id", json!("A".repeat(40))),
        ("object_id", json!("a".repeat(41))),
        ("content_sha256", json!("sha256:zz")),
        ("path_hex", json!("6170702f6c696e6")),
        ("path_hex", json!("6170702F6C696E6B")),
        ("path", json!("app/other")),
        ("path", json!("app/x.py")),
        ("extra", json!(1)),
        ("size", json!(-1)),
        ("size", json!(null)),
    ];
    for (field, value) in cases {
        let mut entry = link.clone();
        entry[field] = value;
        if field == "path" && entry["path"] == "app/x.py" {
            entry["path_hex"] = json!("6170702f782e7079");
        }
        let mut v = good.clone();
        v["excluded"] = json!([entry]);
        let err = RepositorySnapshotEvidence::from_json(&v.to_string()).unwrap_err();
        assert_eq!(err.code(), "REPOSITORY_PATCH_SNAPSHOT_INVALID", "{field}");
        assert!(err.to_string().contains("$.excluded"), "{field}: {err}");
        vocab::check_message_convention(&err).unwrap();
    }
    let mut not_a_list = good;
    not_a_list["excluded"] = json!({"kind": "symlink"});
    let err = RepositorySnapshotEvidence::from_json(&not_a_list.to_string()).unwrap_err();
    assert_eq!(err.code(), "REPOSITORY_PATCH_SNAPSHOT_INVALID");
}
