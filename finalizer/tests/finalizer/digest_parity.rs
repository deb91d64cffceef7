//! `repository_patch_digest` against an independent Python implementation of the reference
//! canonicalisation.

use finalizer::{repository_patch_digest, unified_diff, validate_candidate_json};
use serde_json::{Value, json};
use vocab::Sha256;

use crate::support::{Rng, run_oracle};

const TRICKY: &[&str] = &[
    "plain",
    "quote \" and backslash \\ and slash /",
    "controls \u{0} \u{1} \u{8} \t \n \u{b} \u{c} \r \u{1b} \u{1f} \u{7f}",
    "line sep \u{2028} para sep \u{2029} nel \u{85}",
    "emoji 🎉 astral 𝄞 𐍈 and CJK 日本",
    "combining e\u{301} vs é",
    "bom \u{feff} zero-width \u{200b}",
    "",
    "</script>&<>'",
];

fn file(path: &str, op: &str, before: Option<&str>, after: Option<&str>) -> Value {
    json!({
        "path": path,
        "op": op,
        "previous_sha256": before.map(|b| Sha256::of(b.as_bytes()).to_string()),
        "new_sha256": after.map(|a| Sha256::of(a.as_bytes()).to_string()),
        "content": after,
        "diff": unified_diff(path, before, after),
    })
}

fn candidate(rng: &mut Rng) -> Value {
    let text = |rng: &mut Rng| -> String {
        let n = 1 + rng.below(3);
        (0..n)
            .map(|_| *rng.pick(TRICKY))
            .collect::<Vec<_>>()
            .join("|")
    };
    let gates = |rng: &mut Rng| -> Vec<String> {
        (0..rng.below(5))
            .map(|_| {
                ["pytest", "lint", "z\"q", "é", "A", "a", "🎉", "\u{2028}"][rng.below(8)].to_owned()
            })
            .collect()
    };
    let paths = [
        "app/z.py",
        "app/a.py",
        "app/é/ü.txt",
        "docs/README.md",
        "src/日本/mod.rs",
        "app/A.py2",
    ];
    let mut files = Vec::new();
    for (i, path) in paths.iter().enumerate().take(1 + rng.below(paths.len())) {
        let before = format!("{}\n{}\n", text(rng), i);
        let after = format!("{}\n{}", text(rng), i);
        files.push(match rng.below(3) {
            0 => file(path, "create", None, Some(&after)),
            1 => file(path, "delete", Some(&before), None),
            _ => file(path, "update", Some(&before), Some(&after)),
        });
    }
    json!({
        "schema_version": "mozaiks.refinement.repository_patch.v2",
        "write_back_mode": "external_patch",
        "validation_state": "pending",
        "mutation_allowed": false,
        "handoff_id": text(rng),
        "request_id": text(rng),
        "plan_id": "plan-1",
        "app_id": text(rng),
        "build_registry_id": "build-7",
        "repository_full_name": "acme/widgets",
        "baseline_commit_sha": "0123456789abcdef0123456789abcdef01234567",
        "approved_plan_digest": "ab".repeat(32),
        "snapshot_digest": format!("sha256:{}", "cd".repeat(32)),
        "proposal_id": text(rng),
        "provider_id": "synthetic",
        "summary": text(rng),
        "rationale": text(rng),
        "changed_files": files,
        "required_validation_gates": gates(rng),
        "required_security_gates": gates(rng),
        "required_ci_checks": gates(rng),
    })
}

#[test]
fn digest_matches_the_independent_python_canonicalisation() {
    let mut rng = Rng::new(0xd16e57);
    let docs: Vec<Value> = (0..200).map(|_| candidate(&mut rng)).collect();
    let expected = run_oracle("digest_oracle.py", &json!(docs));
    for (doc, want) in docs.iter().zip(expected.as_array().unwrap()) {
        let parsed = validate_candidate_json(&serde_json::to_vec(doc).unwrap()).unwrap();
        let got = repository_patch_digest(&parsed).unwrap();
        assert_eq!(
            got.to_string(),
            want["digest"].as_str().unwrap(),
            "{}",
            want["canonical"]
        );
        // The stored (pretty, field-ordered) form digests identically.
        let again = validate_candidate_json(&parsed.to_json_pretty().unwrap()).unwrap();
        assert_eq!(repository_patch_digest(&again).unwrap(), got);
    }
}

#[test]
fn digest_ignores_file_and_gate_order_but_covers_everything_else() {
    let mut rng = Rng::new(7);
    let mut doc = candidate(&mut rng);
    while doc["changed_files"].as_array().unwrap().len() < 2 {
        doc = candidate(&mut rng);
    }
    let digest = |d: &Value| {
        repository_patch_digest(&validate_candidate_json(&serde_json::to_vec(d).unwrap()).unwrap())
            .unwrap()
    };
    let base = digest(&doc);
    let mut reordered = doc.clone();
    reordered["changed_files"].as_array_mut().unwrap().reverse();
    reordered["required_validation_gates"] = json!(["z", "a", "z"]);
    let mut gates = doc.clone();
    gates["required_validation_gates"] = json!(["a", "z"]);
    assert_eq!(digest(&reordered), digest(&gates));
    assert_eq!(
        digest(&{
            let mut d = doc.clone();
            d["changed_files"].as_array_mut().unwrap().reverse();
            d
        }),
        base
    );
    for field in ["summary", "rationale", "proposal_id", "handoff_id"] {
        let mut d = doc.clone();
        d[field] = json!(format!("{}!", d[field].as_str().unwrap()));
        assert_ne!(digest(&d), base, "{field}");
    }
    let mut d = doc.clone();
    d["changed_files"][0]["diff"] = json!("--- tampered\n");
    assert_ne!(digest(&d), base);
}

#[test]
fn digest_input_checks_have_their_codes() {
    let mut rng = Rng::new(11);
    let doc = candidate(&mut rng);
    let code = |d: &Value| match validate_candidate_json(&serde_json::to_vec(d).unwrap()) {
        Ok(c) => repository_patch_digest(&c).unwrap_err().code(),
        Err(e) => e.code(),
    };
    let mut bad_content = doc.clone();
    let f = bad_content["changed_files"].as_array_mut().unwrap();
    f.clear();
    f.push(file("app/x.py", "update", Some("a\n"), Some("b\n")));
    f[0]["content"] = json!("c\n");
    assert_eq!(code(&bad_content), "REPOSITORY_PATCH_DIGEST_HASH");
    let mut collide = bad_content.clone();
    let f = collide["changed_files"].as_array_mut().unwrap();
    f.clear();
    f.push(file("app/x.py", "update", Some("a\n"), Some("b\n")));
    f.push(file("APP/X.py", "create", None, Some("b\n")));
    assert_eq!(code(&collide), "REPOSITORY_PATCH_DIGEST_PATH");
    collide["changed_files"][1] = file("app/x.py/inner.py", "create", None, Some("b\n"));
    assert_eq!(code(&collide), "REPOSITORY_PATCH_DIGEST_PATH");
    collide["changed_files"][1] = file("App", "create", None, Some("b\n"));
    assert_eq!(code(&collide), "REPOSITORY_PATCH_DIGEST_PATH");
    collide["changed_files"][1] = file("straße.py", "create", None, Some("b\n"));
    collide["changed_files"][0] = file("STRASSE.py", "create", None, Some("b\n"));
    assert_eq!(code(&collide), "REPOSITORY_PATCH_DIGEST_PATH");
    let mut too_many = doc.clone();
    too_many["changed_files"] = json!(
        (0..51)
            .map(|i| file(&format!("f{i}.txt"), "create", None, Some("x")))
            .collect::<Vec<_>>()
    );
    assert_eq!(code(&too_many), "REPOSITORY_PATCH_DIGEST_INPUT");
    let mut short_hash = doc.clone();
    short_hash["changed_files"][0]["previous_sha256"] = json!("sha256:abc");
    short_hash["changed_files"][0]["op"] = json!("delete");
    short_hash["changed_files"][0]["new_sha256"] = Value::Null;
    short_hash["changed_files"][0]["content"] = Value::Null;
    assert_eq!(code(&short_hash), "REPOSITORY_PATCH_DIGEST_HASH");
}

#[test]
fn digest_budget_is_enforced_at_64_mib() {
    // One 33 MiB file: content and diff each carry it, so the canonical form exceeds 64 MiB.
    let big = "y".repeat(33 * 1024 * 1024);
    let mut rng = Rng::new(3);
    let mut doc = candidate(&mut rng);
    doc["changed_files"] = json!([file("big.txt", "create", None, Some(&big))]);
    let parsed = validate_candidate_json(&serde_json::to_vec(&doc).unwrap()).unwrap();
    assert_eq!(
        repository_patch_digest(&parsed).unwrap_err().code(),
        "REPOSITORY_PATCH_DIGEST_BUDGET"
    );
    let small = "y".repeat(31 * 1024 * 1024);
    doc["changed_files"] = json!([file("big.txt", "create", None, Some(&small))]);
    let parsed = validate_candidate_json(&serde_json::to_vec(&doc).unwrap()).unwrap();
    assert!(repository_patch_digest(&parsed).is_ok());
}
