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

/// A printed candidate's changed files as (path, operation), in the candidate's order.
pub fn changed_files(doc: &Value) -> Vec<(String, String)> {
    let files = &doc["candidate"]["changed_files"];
    field_strs(files, "path")
        .into_iter()
        .zip(field_strs(files, "op"))
        .map(|(path, op)| (path.to_owned(), op.to_owned()))
        .collect()
}

/// The message of an error document (`{"error": {"code": …, "message": …}}`).
pub fn error_message(doc: &Value) -> &str {
    doc["error"]["message"].as_str().unwrap()
}
