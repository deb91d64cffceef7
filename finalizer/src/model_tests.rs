use pretty_assertions::assert_eq;
use serde_json::json;

use super::*;
use crate::testkit::{create, delete, sample};

fn code(bytes: &[u8]) -> &'static str {
    match validate_candidate_json(bytes) {
        Ok(_) => panic!("accepted: {}", String::from_utf8_lossy(bytes)),
        Err(e) => e.code(),
    }
}

#[test]
fn json_field_order_is_the_v2_schema_order() {
    let value = serde_json::to_value(sample()).unwrap();
    let text = String::from_utf8(sample().to_json_pretty().unwrap()).unwrap();
    let keys: Vec<&str> = [
        "schema_version",
        "write_back_mode",
        "validation_state",
        "mutation_allowed",
        "handoff_id",
        "request_id",
        "plan_id",
        "app_id",
        "build_registry_id",
        "repository_full_name",
        "baseline_commit_sha",
        "approved_plan_digest",
        "snapshot_digest",
        "proposal_id",
        "provider_id",
        "summary",
        "rationale",
        "changed_files",
        "required_validation_gates",
        "required_security_gates",
        "required_ci_checks",
    ]
    .to_vec();
    let positions: Vec<usize> = keys
        .iter()
        .map(|k| text.find(&format!("\n  \"{k}\"")).unwrap())
        .collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{positions:?}");
    assert_eq!(
        value["schema_version"],
        "mozaiks.refinement.repository_patch.v2"
    );
    assert_eq!(value["write_back_mode"], "external_patch");
    assert_eq!(value["validation_state"], "pending");
    assert_eq!(value["mutation_allowed"], false);
    let file_keys: Vec<String> = value["changed_files"][0]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert_eq!(file_keys.len(), 6);
    let file_text = serde_json::to_string(&sample().changed_files()[0]).unwrap();
    let order: Vec<usize> = [
        "\"path\"",
        "\"op\"",
        "\"previous_sha256\"",
        "\"new_sha256\"",
        "\"content\"",
        "\"diff\"",
    ]
    .iter()
    .map(|k| file_text.find(k).unwrap())
    .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn round_trip_through_strict_json() {
    let c = sample();
    let back = validate_candidate_json(&c.to_json_pretty().unwrap()).unwrap();
    assert_eq!(back, c);
    let d = crate::testkit::candidate(vec![delete("app/old.py", "gone\n"), create("app/e.py", "")]);
    assert_eq!(
        validate_candidate_json(&serde_json::to_vec(&d).unwrap()).unwrap(),
        d
    );
}

#[test]
fn presence_rule_per_operation() {
    let p = || RepoPath::parse("a/b.py").unwrap();
    let h = || Some(Sha256::of(b"x"));
    let c = || Some("x".to_owned());
    assert!(RepositoryPatchFile::new(p(), FileOp::Create, None, h(), c(), String::new()).is_ok());
    assert!(RepositoryPatchFile::new(p(), FileOp::Update, h(), h(), c(), String::new()).is_ok());
    assert!(RepositoryPatchFile::new(p(), FileOp::Delete, h(), None, None, String::new()).is_ok());
    for (op, prev, new, content) in [
        (FileOp::Create, h(), h(), c()),
        (FileOp::Create, None, None, c()),
        (FileOp::Update, None, h(), c()),
        (FileOp::Update, h(), h(), None),
        (FileOp::Delete, h(), h(), None),
        (FileOp::Delete, h(), None, c()),
        (FileOp::Delete, None, None, None),
    ] {
        let err = RepositoryPatchFile::new(p(), op, prev, new, content, String::new()).unwrap_err();
        assert_eq!(err.code(), "REPOSITORY_PATCH_DIGEST_INPUT");
        assert!(err.to_string().contains("do not match operation"));
    }
}

fn doc() -> serde_json::Value {
    serde_json::to_value(sample()).unwrap()
}

/// [`code`] of `doc` as JSON bytes.
fn value_code(doc: &serde_json::Value) -> &'static str {
    code(&serde_json::to_vec(doc).unwrap())
}

#[test]
fn malformed_documents_are_rejected_with_codes() {
    let mut extra = doc();
    extra["unexpected"] = json!(1);
    assert_eq!(value_code(&extra), "REPOSITORY_PATCH_DIGEST_INPUT");
    let mut extra_file = doc();
    extra_file["changed_files"][0]["mode"] = json!("100644");
    assert_eq!(value_code(&extra_file), "REPOSITORY_PATCH_DIGEST_INPUT");
    for (field, bad) in [
        (
            "schema_version",
            json!("mozaiks.refinement.repository_patch.v1"),
        ),
        ("write_back_mode", json!("direct")),
        ("validation_state", json!("passed")),
        ("mutation_allowed", json!(true)),
    ] {
        let mut d = doc();
        d[field] = bad;
        assert_eq!(value_code(&d), "REPOSITORY_PATCH_DIGEST_INPUT", "{field}");
    }
    let mut no_files = doc();
    no_files["changed_files"] = json!([]);
    assert_eq!(value_code(&no_files), "REPOSITORY_PATCH_DIGEST_INPUT");
    let mut unsafe_path = doc();
    unsafe_path["changed_files"][0]["path"] = json!("../outside.py");
    assert_eq!(value_code(&unsafe_path), "REPOSITORY_PATCH_UNSAFE_PATH");
    let mut bad_hash = doc();
    bad_hash["changed_files"][0]["new_sha256"] = json!("sha256:INVALID");
    assert_eq!(value_code(&bad_hash), "REPOSITORY_PATCH_DIGEST_HASH");
    let mut presence = doc();
    presence["changed_files"][1]["previous_sha256"] =
        presence["changed_files"][0]["previous_sha256"].clone();
    assert_eq!(value_code(&presence), "REPOSITORY_PATCH_DIGEST_INPUT");
    // Presence is checked for every file before any path: the reference re-validates the model first.
    let mut both = presence.clone();
    both["changed_files"][0]["path"] = json!("../x");
    assert_eq!(value_code(&both), "REPOSITORY_PATCH_DIGEST_INPUT");
    let text = serde_json::to_string(&sample()).unwrap();
    let dup = text.replacen(
        "{\"schema_version\"",
        "{\"plan_id\":\"x\",\"schema_version\"",
        1,
    );
    assert_eq!(code(dup.as_bytes()), "REPOSITORY_PATCH_DIGEST_INPUT");
    assert_eq!(code(b"\xef\xbb\xbf{}"), "REPOSITORY_PATCH_DIGEST_INPUT");
    assert_eq!(code(b"[]"), "REPOSITORY_PATCH_DIGEST_INPUT");
}

#[test]
fn literal_fields_may_be_omitted_as_in_the_reference_model() {
    let mut d = doc();
    let obj = d.as_object_mut().unwrap();
    for k in [
        "schema_version",
        "write_back_mode",
        "validation_state",
        "mutation_allowed",
    ] {
        obj.remove(k);
    }
    obj["changed_files"][0]
        .as_object_mut()
        .unwrap()
        .remove("op");
    assert_eq!(
        validate_candidate_json(&serde_json::to_vec(&d).unwrap()).unwrap(),
        sample()
    );
}
