use serde_json::Value;

use super::*;
use crate::testkit::{candidate, create, delete, sample, update};

/// An independent canonicaliser over the serde model: sorted keys at every level via a
/// `BTreeMap`, the reference list rules, compact output.
fn via_value(c: &RepositoryPatchCandidate) -> Vec<u8> {
    fn sort(v: Value) -> Value {
        match v {
            Value::Object(m) => {
                let sorted: std::collections::BTreeMap<String, Value> =
                    m.into_iter().map(|(k, v)| (k, sort(v))).collect();
                Value::Object(sorted.into_iter().collect())
            }
            Value::Array(a) => Value::Array(a.into_iter().map(sort).collect()),
            other => other,
        }
    }
    let mut v = serde_json::to_value(c).unwrap();
    let files = v["changed_files"].as_array_mut().unwrap();
    files.sort_by(|x, y| x["path"].as_str().cmp(&y["path"].as_str()));
    for gate in [
        "required_validation_gates",
        "required_security_gates",
        "required_ci_checks",
    ] {
        let mut items: Vec<String> = v[gate]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_owned())
            .collect();
        items.sort();
        items.dedup();
        v[gate] = Value::from(items);
    }
    serde_json::to_vec(&sort(v)).unwrap()
}

#[test]
fn typed_writer_covers_every_model_field_in_canonical_order() {
    for c in [
        sample(),
        candidate(vec![
            delete("z/last.txt", "x\n"),
            create("a/first.txt", "tab\t\"q\" \\ \u{1} \u{7f} \u{2028} 🎉"),
            update("m/mid.txt", "a\r\n", "b\r\n"),
        ]),
    ] {
        assert_eq!(
            String::from_utf8(canonical_bytes(&c)).unwrap(),
            String::from_utf8(via_value(&c)).unwrap()
        );
    }
}

#[test]
fn escaping_matches_python_json_dumps_with_raw_non_ascii() {
    let c = candidate(vec![create(
        "a.txt",
        "\u{0}\u{8}\u{c}\n\r\t\u{1f}\u{7f}\u{85}\u{2028}é𝄞/\"\\",
    )]);
    let text = String::from_utf8(canonical_bytes(&c)).unwrap();
    assert!(
        text.contains(r#""content":"\u0000\b\f\n\r\t\u001f"#),
        "{text}"
    );
    assert!(text.contains("\u{7f}\u{85}\u{2028}é𝄞/\\\"\\\\\""), "{text}");
}

#[test]
fn the_byte_cap_is_exact() {
    let c = sample();
    let total = canonical_bytes(&c).len()
        + b"{\"candidate\":".len()
        + b",\"digest_schema\":".len()
        + DIGEST_SCHEMA.len()
        + 2
        + 1;
    assert!(repository_patch_digest_with_limit(&c, total).is_ok());
    assert_eq!(
        repository_patch_digest_with_limit(&c, total - 1)
            .unwrap_err()
            .code(),
        "REPOSITORY_PATCH_DIGEST_BUDGET"
    );
}
