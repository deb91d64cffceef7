//! `repository_patch_digest` (reference §9.4): one digest over the complete candidate, independent
//! of the order of `changed_files` and of the gate lists, equal to what the reference computes with
//! `json.dumps(..., ensure_ascii=False, sort_keys=True, separators=(",", ":"))`.
//!
//! The canonical writer sorts object keys itself (it does not rely on `serde_json::Map` ordering,
//! which a `preserve_order` feature elsewhere in the build would change) and streams into the hash
//! with a byte cap, so no canonical copy is buffered. String escaping is serde_json's compact
//! escaping, which equals Python's with `ensure_ascii=False` (`\"`, `\\`, `\b \f \n \r \t`, other
//! controls as lowercase `\u00XX`, everything else raw); the tests check that against Python.

use std::io::{self, Write};

use serde_json::Value;
use sha2::{Digest as _, Sha256 as Hasher};
use snapshot::{Sha256, casefold};

use crate::error::FinalizeError;
use crate::model::{MAX_CANDIDATE_FILES, RepositoryPatchCandidate};

/// The digest schema id.
pub const DIGEST_SCHEMA: &str = "mozaiks.refinement.repository_patch_digest.v1";
/// Most canonical bytes a digest may cover (64 MiB).
pub const MAX_DIGEST_INPUT_BYTES: usize = 64 * 1024 * 1024;

/// Reference `repository_patch_digest`.
///
/// # Errors
/// `REPOSITORY_PATCH_DIGEST_INPUT` (file count), `REPOSITORY_PATCH_DIGEST_HASH` (content differs
/// from `new_sha256`), `REPOSITORY_PATCH_DIGEST_PATH` (case-folded equal or `/`-prefix-related
/// paths), `REPOSITORY_PATCH_DIGEST_BUDGET` (canonical form over 64 MiB). Hash spelling, canonical
/// paths and the presence rule are guaranteed by the candidate type.
pub fn repository_patch_digest(
    candidate: &RepositoryPatchCandidate,
) -> Result<Sha256, FinalizeError> {
    repository_patch_digest_with_limit(candidate, MAX_DIGEST_INPUT_BYTES)
}

pub(crate) fn repository_patch_digest_with_limit(
    candidate: &RepositoryPatchCandidate,
    limit: usize,
) -> Result<Sha256, FinalizeError> {
    let files = candidate.changed_files();
    if !(1..=MAX_CANDIDATE_FILES).contains(&files.len()) {
        return Err(FinalizeError::input("invalid candidate or file count"));
    }
    let mut folded: Vec<String> = Vec::with_capacity(files.len());
    for file in files {
        if let Some(content) = file.content()
            && file.new_sha256() != Some(&Sha256::of(content.as_bytes()))
        {
            return Err(FinalizeError::DigestHash {
                detail: "content differs from file hash",
            });
        }
        let key = casefold(file.path().as_str());
        let related = |earlier: &String| {
            *earlier == key
                || key
                    .strip_prefix(earlier.as_str())
                    .is_some_and(|r| r.starts_with('/'))
                || earlier
                    .strip_prefix(key.as_str())
                    .is_some_and(|r| r.starts_with('/'))
        };
        if folded.iter().any(related) {
            return Err(FinalizeError::DigestPath);
        }
        folded.push(key);
    }
    let mut canonical =
        serde_json::to_value(candidate).map_err(|_| FinalizeError::input("invalid candidate"))?;
    let Value::Object(fields) = &mut canonical else {
        return Err(FinalizeError::input("invalid candidate"));
    };
    if let Some(Value::Array(changed)) = fields.get_mut("changed_files") {
        changed.sort_by(|x, y| path_of(x).cmp(path_of(y)));
    }
    for gate in [
        "required_validation_gates",
        "required_security_gates",
        "required_ci_checks",
    ] {
        if let Some(Value::Array(list)) = fields.get_mut(gate) {
            let mut texts: Vec<String> = list
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect();
            texts.sort();
            texts.dedup();
            *list = texts.into_iter().map(Value::String).collect();
        }
    }
    let mut sink = HashSink {
        hasher: Hasher::new(),
        written: 0,
        limit,
    };
    let result = (|| -> io::Result<()> {
        sink.write_all(b"{\"candidate\":")?;
        write_canonical(&mut sink, &canonical)?;
        sink.write_all(b",\"digest_schema\":")?;
        write_string(&mut sink, DIGEST_SCHEMA)?;
        sink.write_all(b"}")
    })();
    match result {
        Ok(()) => Ok(Sha256::from_raw(sink.hasher.finalize().into())),
        Err(_) => Err(FinalizeError::DigestBudget),
    }
}

fn path_of(v: &Value) -> &str {
    v.get("path").and_then(Value::as_str).unwrap_or("")
}

/// Hashes what is written and refuses to go past `limit` bytes.
struct HashSink {
    hasher: Hasher,
    written: usize,
    limit: usize,
}

impl Write for HashSink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.written = self.written.saturating_add(buf.len());
        if self.written > self.limit {
            return Err(io::Error::other("digest budget exceeded"));
        }
        self.hasher.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn write_string<W: Write>(out: &mut W, s: &str) -> io::Result<()> {
    serde_json::to_writer(out, s).map_err(io::Error::other)
}

/// Compact JSON with object keys sorted by code point (UTF-8 byte order equals code point order).
pub(crate) fn write_canonical<W: Write>(out: &mut W, value: &Value) -> io::Result<()> {
    match value {
        Value::Null => out.write_all(b"null"),
        Value::Bool(true) => out.write_all(b"true"),
        Value::Bool(false) => out.write_all(b"false"),
        Value::Number(n) => out.write_all(n.to_string().as_bytes()),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.write_all(b"[")?;
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.write_all(b",")?;
                }
                write_canonical(out, item)?;
            }
            out.write_all(b"]")
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|x, y| x.0.cmp(y.0));
            out.write_all(b"{")?;
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.write_all(b",")?;
                }
                write_string(out, k)?;
                out.write_all(b":")?;
                write_canonical(out, v)?;
            }
            out.write_all(b"}")
        }
    }
}
