#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use super::*;
use pretty_assertions::assert_eq;
use serde_json::json;

const FILE: &str = "app/a.py";
const NEW: &str = "print('new')\n";

fn limits() -> OutputLimits {
    OutputLimits {
        max_archive_bytes: 4096,
        selected: [RepoPath::parse(FILE).unwrap()].into(),
        creates: BTreeSet::new(),
        deletes: BTreeSet::new(),
    }
}

fn archive() -> Vec<u8> {
    archive::build_deterministic_archive(&[(RepoPath::parse(FILE).unwrap(), NEW.into())]).unwrap()
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn proposal() -> serde_json::Value {
    json!({
        "proposal_id": "agent-id",
        "provider_id": "agent",
        "provider_model": "m",
        "status": "completed",
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        "summary": "SOURCE ECHO",
        "rationale": "SOURCE ECHO",
        "changed_files": [{"path": FILE, "op": "update", "content": NEW}],
        "owned_paths": [FILE],
        "validation_strategy_hint": "h",
        "validation_commands": ["make"],
        "start_preview": false,
        "needs_human_review": true,
        "tool_context_loaded": false,
        "error": null,
        "provider_events": [{"kind": "plan", "summary": "SOURCE ECHO"}],
    })
}

fn document(proposal: serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(&json!({"proposal": proposal, "workspace_archive_base64": b64(&archive())}))
        .unwrap()
}

fn reason(stdout: Vec<u8>) -> String {
    let err = parse_turn_output(stdout, &limits()).unwrap_err();
    assert_eq!(err.code(), "REPOSITORY_DOCKER_INVALID_OUTPUT");
    err.to_string()
}

#[test]
fn valid_output_is_sanitised_and_its_archive_read_once() {
    let out = parse_turn_output(document(proposal()), &limits()).unwrap();
    let p = out.proposal();
    assert_eq!(p.provider_id, PROVIDER_ID);
    assert_eq!(p.summary, SANITIZED_SUMMARY);
    assert_eq!(p.changed_files.len(), 1);
    assert_eq!(p.changed_files[0].content.as_deref(), Some(NEW));
    assert_eq!(p.owned_paths, vec![FILE.to_owned()]);
    assert!(p.provider_events.is_empty());
    let verified = out.archive().unwrap();
    assert_eq!(verified.bytes(), archive());
    let entries: Vec<(String, Vec<u8>)> = verified
        .entries()
        .map(|(p, d)| (p.as_str().to_owned(), d.to_vec()))
        .collect();
    assert_eq!(entries, vec![(FILE.to_owned(), NEW.as_bytes().to_vec())]);
    assert_eq!(out.usage().unwrap().total_tokens(), 5);
}

#[test]
fn escaped_archive_text_is_refused_as_not_strict_base64() {
    // The base64 alphabet never needs a JSON escape; an escaped text would be decoded into a
    // second buffer before its check, so it is refused during the pre-scan.
    let plain = b64(&archive());
    for text in [
        format!("{plain}\\/"),
        plain.replacen('A', "\\u0041", 1),
        "\\n".repeat(64),
    ] {
        let doc = format!(
            "{{\"proposal\":{},\"workspace_archive_base64\":\"{text}\"}}",
            proposal()
        );
        assert_eq!(
            reason(doc.into_bytes()),
            "REPOSITORY_DOCKER_INVALID_OUTPUT: archive is not strict base64"
        );
    }
}

#[test]
fn in_place_decoding_equals_whole_decoding_at_every_length() {
    let engine = &base64::engine::general_purpose::STANDARD;
    for len in [0, 1, 2, 3, 3071, 3072, 3073, 6144, 10_000] {
        let data: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        let text = engine.encode(&data);
        let mut buf = format!("{{\"x\":\"{text}\"}}").into_bytes();
        decode_in_place(&mut buf, 6, text.len()).unwrap();
        assert_eq!(buf, data, "{len}");
    }
    // Padding inside a chunk boundary and bad trailing bits are refused as a whole decode is.
    for bad in [
        "YQ",
        "YQ=",
        "YR==",
        "YQ==YQ==",
        &format!("{}=A==", "A".repeat(4095)),
    ] {
        let mut buf = bad.as_bytes().to_vec();
        assert!(engine.decode(bad).is_err(), "{bad}");
        assert!(decode_in_place(&mut buf, 0, bad.len()).is_err(), "{bad}");
    }
}

#[test]
fn usage_is_strict_and_never_invalidates_the_patch() {
    for (usage, expected) in [
        (
            json!({"prompt_tokens": 1, "completion_tokens": 0, "total_tokens": 1}),
            Some(1),
        ),
        (json!(null), None),
        (json!([]), None),
        (json!([1, [2, {"a": 3}]]), None),
        (
            json!({"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 1}),
            None,
        ),
        (
            json!({"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}),
            None,
        ),
        (
            json!({"prompt_tokens": true, "completion_tokens": 0, "total_tokens": 2}),
            None,
        ),
        (
            json!({"prompt_tokens": 1.0, "completion_tokens": 0, "total_tokens": 2}),
            None,
        ),
        (
            json!({"prompt_tokens": -1, "completion_tokens": 0, "total_tokens": 2}),
            None,
        ),
        (
            json!({"prompt_tokens": "1", "completion_tokens": 0, "total_tokens": 2}),
            None,
        ),
        (
            json!({"prompt_tokens": [1], "completion_tokens": 0, "total_tokens": 2}),
            None,
        ),
        (
            json!({"prompt_tokens": 1, "completion_tokens": 0, "total_tokens": 10_000_001}),
            None,
        ),
        (
            json!({"prompt_tokens": 1, "completion_tokens": 0, "total_tokens": 2, "model": "x"}),
            None,
        ),
        (json!({"prompt_tokens": 1, "completion_tokens": 0}), None),
        (json!("many tokens"), None),
    ] {
        let mut p = proposal();
        p["usage"] = usage.clone();
        let out = parse_turn_output(document(p), &limits()).unwrap();
        assert_eq!(out.usage().map(|u| u.total_tokens()), expected, "{usage}");
    }
}

#[test]
fn r_unsafe_owned_path_is_refused_without_quoting_it() {
    for path in [
        "../etc/passwd",
        "/abs",
        "a\\b",
        "a//b",
        "",
        "a\u{1}b",
        "./a",
    ] {
        let mut p = proposal();
        p["owned_paths"] = json!([FILE, path]);
        assert_eq!(
            reason(document(p)),
            "REPOSITORY_DOCKER_INVALID_OUTPUT: owned path is unsafe",
            "{path:?}"
        );
    }
    // A huge path is refused by the size bound before it is kept, and never quoted.
    let mut p = proposal();
    p["owned_paths"] = json!(["x".repeat(MAX_OUTPUT_TEXT_BYTES + 1)]);
    assert_eq!(
        reason(document(p)),
        "REPOSITORY_DOCKER_INVALID_OUTPUT: output exceeds the structure bounds"
    );
    let mut p = proposal();
    p["owned_paths"] = json!(["a/".repeat(3000)]);
    assert_eq!(
        reason(document(p)),
        "REPOSITORY_DOCKER_INVALID_OUTPUT: owned path is unsafe"
    );
    let mut p = proposal();
    p["changed_files"][0]["path"] = json!("../x");
    assert_eq!(
        reason(document(p)),
        "REPOSITORY_DOCKER_INVALID_OUTPUT: change path is unsafe"
    );
}

/// Every hostile shape, in every position of the contract: refused with a fixed, short reason.
#[test]
fn hostile_shapes_are_refused_by_the_bounds_in_every_position() {
    let wide_array = serde_json::Value::Array(vec![json!(0); MAX_OUTPUT_VALUES]);
    let wide_object: serde_json::Map<String, serde_json::Value> = (0..MAX_OUTPUT_VALUES)
        .map(|i| (format!("k{i}"), json!(0)))
        .collect();
    let mut deep = json!(0);
    for _ in 0..MAX_OUTPUT_DEPTH {
        deep = json!([deep]);
    }
    let huge = json!("x".repeat(MAX_OUTPUT_TEXT_BYTES + 1));
    let shapes = [
        ("wide array", wide_array),
        ("wide object", serde_json::Value::Object(wide_object)),
        ("deep", deep),
        ("huge string", huge),
    ];
    let fields = [
        "proposal_id",
        "provider_id",
        "provider_model",
        "usage",
        "summary",
        "rationale",
        "changed_files",
        "owned_paths",
        "validation_strategy_hint",
        "validation_commands",
        "error",
        "provider_events",
    ];
    for (shape, value) in &shapes {
        for field in fields {
            let mut p = proposal();
            p[field] = value.clone();
            let text = reason(document(p));
            assert!(
                text.len() < 100 && !text.contains("xxx"),
                "{shape} in {field}: {text}"
            );
        }
        let doc =
            serde_json::to_vec(&json!({"proposal": proposal(), "workspace_archive_base64": value}))
                .unwrap();
        let text = reason(doc);
        assert!(text.len() < 100, "{shape} as archive: {text}");
        // Deep inside a change and an event.
        let mut p = proposal();
        p["changed_files"][0]["content"] = value.clone();
        assert!(reason(document(p)).len() < 100, "{shape} as content");
        let mut p = proposal();
        p["provider_events"][0]["summary"] = value.clone();
        assert!(reason(document(p)).len() < 100, "{shape} as event summary");
    }
    // Huge text where the contract allows large text: refused by the archive budget.
    let mut p = proposal();
    p["changed_files"][0]["content"] = json!("x".repeat(4097));
    assert_eq!(
        reason(document(p)),
        "REPOSITORY_DOCKER_INVALID_OUTPUT: archive exceeds the budget"
    );
    let doc = serde_json::to_vec(
        &json!({"proposal": proposal(), "workspace_archive_base64": "A".repeat(5464)}),
    )
    .unwrap();
    assert_eq!(
        reason(doc),
        "REPOSITORY_DOCKER_INVALID_OUTPUT: archive exceeds the budget"
    );
    // Lists over their caps, below the value limit.
    let mut p = proposal();
    p["owned_paths"] = json!(vec![FILE; MAX_OUTPUT_PATHS + 1]);
    assert_eq!(
        reason(document(p)),
        "REPOSITORY_DOCKER_INVALID_OUTPUT: output exceeds the structure bounds"
    );
}

#[test]
fn contract_violations_keep_their_reasons() {
    let valid = String::from_utf8(document(proposal())).unwrap();
    for (doc, expected) in [
        (
            format!("{{\"proposal\":{}}}", proposal()),
            "output keys differ from the contract",
        ),
        (
            valid.replacen("{\"proposal\"", "{\"extra\":1,\"proposal\"", 1),
            "output keys differ from the contract",
        ),
        (
            "{\"proposal\":[],\"workspace_archive_base64\":null}".to_owned(),
            "proposal is not an object",
        ),
        (
            valid.replacen("\"proposal_id\"", "\"injected\":1,\"proposal_id\"", 1),
            "proposal does not match the model",
        ),
        (
            valid.replacen("\"agent-id\"", "\"\"", 1),
            "proposal does not match the model",
        ),
        (
            valid.replacen(
                "{\"proposal\"",
                "{\"workspace_archive_base64\":null,\"proposal\"",
                1,
            ),
            "output is not strict JSON",
        ),
        ("[]".to_owned(), "output keys differ from the contract"),
        ("".to_owned(), "output is not strict JSON"),
    ] {
        assert_eq!(
            reason(doc.clone().into_bytes()),
            format!("REPOSITORY_DOCKER_INVALID_OUTPUT: {expected}"),
            "{doc:.80}"
        );
    }
    let mut p = proposal();
    p["provider_events"] = json!(vec![json!({"kind": "plan", "summary": "s"}); 201]);
    assert_eq!(
        reason(document(p)),
        "REPOSITORY_DOCKER_INVALID_OUTPUT: output exceeds the structure bounds"
    );
    let mut p = proposal();
    p["provider_events"] = json!([{"kind": "plan", "summary": "é".repeat(501)}]);
    assert_eq!(
        reason(document(p)),
        "REPOSITORY_DOCKER_INVALID_OUTPUT: proposal does not match the model"
    );
    let doc = serde_json::to_vec(&json!({"proposal": proposal(), "workspace_archive_base64": 5}))
        .unwrap();
    assert_eq!(
        reason(doc),
        "REPOSITORY_DOCKER_INVALID_OUTPUT: archive is neither null nor a string"
    );
}
