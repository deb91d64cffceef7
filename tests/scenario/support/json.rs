//! Fields of the JSON documents the binaries print and the service answers.

use serde_json::Value;

/// The string field `field` of every element of the array `array`.
pub fn field_strs<'a>(array: &'a Value, field: &str) -> Vec<&'a str> {
    array
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e[field].as_str().unwrap())
        .collect()
}

/// The string fields `first` and `second` of every element of the array `array`, as pairs.
pub fn field_pairs(array: &Value, first: &str, second: &str) -> Vec<(String, String)> {
    field_strs(array, first)
        .into_iter()
        .zip(field_strs(array, second))
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
        .collect()
}

/// A printed candidate's changed files as (path, operation), in the candidate's order.
pub fn changed_files(doc: &Value) -> Vec<(String, String)> {
    field_pairs(&doc["candidate"]["changed_files"], "path", "op")
}

/// The message of an error document (`{"error": {"code": …, "message": …}}`).
pub fn error_message(doc: &Value) -> &str {
    doc["error"]["message"].as_str().unwrap()
}
