//! `verify_digest` refuses every single-field edit of a real candidate. The edits are generated
//! over the candidate's JSON: every leaf replaced (strings altered, emptied, or for a hash given
//! another valid hash; booleans flipped; nulls filled), every array element removed and one added,
//! every object key removed and an unknown key added. Each edited document must be refused with
//! one of a fixed set of stable codes: the parse and digest-input codes, or
//! `REPOSITORY_PATCH_VERIFY_DIGEST`. The only edits not refused are key removals whose default
//! equals the removed value (the same candidate by the schema); the test names them exactly.

use std::collections::BTreeSet;

use finalizer::{FinalizeError, repository_patch_digest, validate_candidate_json, verify_digest};
use serde_json::{Value, json};
use vocab::Sha256;

use crate::export::finalised;

/// Codes an edited candidate may be refused with.
const CODES: &[&str] = &[
    "REPOSITORY_PATCH_DIGEST_INPUT",
    "REPOSITORY_PATCH_DIGEST_HASH",
    "REPOSITORY_PATCH_DIGEST_PATH",
    "REPOSITORY_PATCH_UNSAFE_PATH",
    "REPOSITORY_PATCH_VERIFY_DIGEST",
];

/// An edit: where (a JSON pointer) and what.
struct Edit {
    at: String,
    what: &'static str,
    doc: Value,
}

fn pointer_token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// A different string that is still well formed where the original was a hash or a commit.
fn other_valid(s: &str) -> Option<String> {
    let hex = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_hexdigit());
    let flip = |t: &str| {
        let mut chars: Vec<char> = t.chars().collect();
        let last = chars.last_mut()?;
        *last = if *last == '0' { '1' } else { '0' };
        Some(chars.into_iter().collect::<String>())
    };
    match s.strip_prefix("sha256:") {
        Some(h) if hex(h) => flip(s),
        _ if hex(s) => flip(s),
        _ => None,
    }
}

fn replace(root: &Value, at: &str, value: Value) -> Value {
    let mut doc = root.clone();
    *doc.pointer_mut(at).unwrap() = value;
    doc
}

/// Every single-field edit of `root`.
fn edits(root: &Value) -> Vec<Edit> {
    let mut out = Vec::new();
    let mut stack = vec![String::new()];
    while let Some(at) = stack.pop() {
        let node = root.pointer(&at).unwrap().clone();
        let push = |out: &mut Vec<Edit>, what, doc| {
            out.push(Edit {
                at: at.clone(),
                what,
                doc,
            });
        };
        match &node {
            Value::String(s) => {
                push(
                    &mut out,
                    "append",
                    replace(root, &at, json!(format!("{s}x"))),
                );
                if !s.is_empty() {
                    push(&mut out, "empty", replace(root, &at, json!("")));
                    let mut shorter = s.clone();
                    shorter.pop();
                    push(&mut out, "truncate", replace(root, &at, json!(shorter)));
                }
                if let Some(other) = other_valid(s) {
                    push(&mut out, "other valid", replace(root, &at, json!(other)));
                }
                push(&mut out, "null", replace(root, &at, Value::Null));
            }
            Value::Bool(b) => push(&mut out, "flip", replace(root, &at, json!(!b))),
            Value::Null => push(&mut out, "fill", replace(root, &at, json!("x"))),
            Value::Number(_) => push(&mut out, "number", replace(root, &at, json!(0))),
            Value::Array(items) => {
                for i in 0..items.len() {
                    let mut doc = root.clone();
                    doc.pointer_mut(&at)
                        .unwrap()
                        .as_array_mut()
                        .unwrap()
                        .remove(i);
                    push(&mut out, "remove element", doc);
                    stack.push(format!("{at}/{i}"));
                }
                let mut doc = root.clone();
                let added = items.first().cloned().unwrap_or_else(|| json!("new-gate"));
                let added = if added.is_string() {
                    json!("new-gate")
                } else {
                    added
                };
                doc.pointer_mut(&at)
                    .unwrap()
                    .as_array_mut()
                    .unwrap()
                    .push(added);
                push(&mut out, "add element", doc);
            }
            Value::Object(map) => {
                for key in map.keys() {
                    let mut doc = root.clone();
                    doc.pointer_mut(&at)
                        .unwrap()
                        .as_object_mut()
                        .unwrap()
                        .remove(key);
                    let child = format!("{at}/{}", pointer_token(key));
                    out.push(Edit {
                        at: child.clone(),
                        what: "remove key",
                        doc,
                    });
                    stack.push(child);
                }
                let mut doc = root.clone();
                doc.pointer_mut(&at)
                    .unwrap()
                    .as_object_mut()
                    .unwrap()
                    .insert("unexpected".to_owned(), json!("x"));
                push(&mut out, "add key", doc);
            }
        }
    }
    out
}

/// Parse, then digest bound to `expected`: what `verify FILE --digest` does.
fn check(bytes: &[u8], expected: &Sha256) -> Result<(), FinalizeError> {
    let candidate = validate_candidate_json(bytes)?;
    verify_digest(&candidate, expected).map(|_| ())
}

#[test]
fn verify_digest_refuses_every_single_field_edit_of_a_real_candidate() {
    let (_repo, _, candidate) = finalised();
    let expected = repository_patch_digest(&candidate).unwrap();
    let root = serde_json::to_value(&candidate).unwrap();
    check(&serde_json::to_vec(&root).unwrap(), &expected).unwrap();
    let edits = edits(&root);
    let mut no_ops = BTreeSet::new();
    let mut codes = BTreeSet::new();
    for edit in &edits {
        let bytes = serde_json::to_vec(&edit.doc).unwrap();
        match check(&bytes, &expected) {
            Err(e) => {
                assert!(
                    CODES.contains(&e.code()),
                    "{} {}: unexpected code {}",
                    edit.what,
                    edit.at,
                    e.code()
                );
                codes.insert(e.code());
            }
            Ok(()) => {
                // Accepted only when the schema reads the edited document as the same candidate.
                assert_eq!(edit.what, "remove key", "{}: accepted", edit.at);
                assert_eq!(validate_candidate_json(&bytes).unwrap(), candidate);
                no_ops.insert(edit.at.clone());
            }
        }
    }
    // The literal fields (their defaults are the only allowed values), each file's `null` hashes
    // and content (absent reads as null), and `op: update` (its default).
    let mut expected_no_ops: BTreeSet<String> = [
        "/schema_version",
        "/write_back_mode",
        "/validation_state",
        "/mutation_allowed",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    for (i, file) in root["changed_files"].as_array().unwrap().iter().enumerate() {
        for (key, value) in file.as_object().unwrap() {
            if value.is_null() || (key == "op" && value == "update") {
                expected_no_ops.insert(format!("/changed_files/{i}/{key}"));
            }
        }
    }
    assert_eq!(
        no_ops, expected_no_ops,
        "only default-valued keys may be dropped"
    );
    assert!(edits.len() > 500, "{} edits", edits.len());
    assert!(codes.contains("REPOSITORY_PATCH_VERIFY_DIGEST"));
    // Losing one changed file: refused with the digest code.
    let mut lost = root.clone();
    lost["changed_files"].as_array_mut().unwrap().pop();
    let e = check(&serde_json::to_vec(&lost).unwrap(), &expected).unwrap_err();
    assert_eq!(e.code(), "REPOSITORY_PATCH_VERIFY_DIGEST");
    assert!(
        e.to_string()
            .ends_with(&format!("differs from the expected {expected}")),
        "{e}"
    );
}
