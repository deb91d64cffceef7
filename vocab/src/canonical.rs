//! Canonical JSON as the candidate digest writes it (sorted keys by code point, compact
//! separators, serde_json's escaping, non-ASCII raw), for the host documents bound to a candidate
//! (gate evidence, gate definitions, policy reports). Keys are sorted here rather than trusting
//! `serde_json::Map`'s order, which a `preserve_order` feature elsewhere in the build would change.

use crate::digest::Sha256;
use serde_json::Value;
use sha2::{Digest as _, Sha256 as Hasher};

/// Writes `value` canonically.
pub fn write_canonical(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_unstable();
            out.push(b'{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_scalar(out, &Value::String(key.clone()));
                out.push(b':');
                if let Some(v) = map.get(key) {
                    write_canonical(out, v);
                }
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(out, item);
            }
            out.push(b']');
        }
        scalar => write_scalar(out, scalar),
    }
}

fn write_scalar(out: &mut Vec<u8>, value: &Value) {
    // Writing a scalar into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, value);
}

/// The canonical bytes of `value`.
#[must_use]
pub fn canonical_bytes(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    write_canonical(&mut out, value);
    out
}

/// `sha256` over `{"<domain key>":<value>,"digest_schema":"<schema>"}` in canonical form, the way
/// the candidate digest wraps its document.
#[must_use]
pub fn domain_digest(schema: &str, key: &str, value: &Value) -> Sha256 {
    let mut wrapper = serde_json::Map::new();
    wrapper.insert(key.to_owned(), value.clone());
    wrapper.insert("digest_schema".to_owned(), Value::String(schema.to_owned()));
    let bytes = canonical_bytes(&Value::Object(wrapper));
    Sha256::from_raw(Hasher::digest(&bytes).into())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn keys_sorted_compact_non_ascii_raw() {
        let v: Value = serde_json::from_str(r#"{"b":[1,{"z":null,"a":"é\n"}],"a":true}"#).unwrap();
        assert_eq!(
            String::from_utf8(canonical_bytes(&v)).unwrap(),
            "{\"a\":true,\"b\":[1,{\"a\":\"é\\n\",\"z\":null}]}"
        );
    }
}
