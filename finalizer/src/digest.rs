//! `repository_patch_digest` (reference §9.4): one digest over the complete candidate, independent
//! of the order of `changed_files` and of the gate lists, equal to what the reference computes with
//! `json.dumps(..., ensure_ascii=False, sort_keys=True, separators=(",", ":"))`.
//!
//! The canonical writer sorts object keys itself (it does not rely on `serde_json::Map` ordering,
//! which a `preserve_order` feature elsewhere in the build would change), writes straight from the
//! typed candidate and streams into the hash with a byte cap, so no canonical copy is buffered. String escaping is serde_json's compact
//! escaping, which equals Python's with `ensure_ascii=False` (`\"`, `\\`, `\b \f \n \r \t`, other
//! controls as lowercase `\u00XX`, everything else raw); the tests check that against Python.

use std::io::{self, Write};

use sha2::{Digest as _, Sha256 as Hasher};
use snapshot::casefold;
use vocab::Sha256;

use crate::error::FinalizeError;
use crate::model::{MAX_CANDIDATE_FILES, RepositoryPatchCandidate, RepositoryPatchFile};
use crate::parallel::map_ordered;

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

/// [`repository_patch_digest`], bound to the digest the caller expects: a candidate whose ids,
/// summary, gates, snapshot digest, files or diffs differ in any way from the one digested as
/// `expected` is refused.
///
/// # Errors
/// Every error of [`repository_patch_digest`]; `REPOSITORY_PATCH_VERIFY_DIGEST` when the digest
/// differs from `expected`.
pub fn verify_digest(
    candidate: &RepositoryPatchCandidate,
    expected: &Sha256,
) -> Result<Sha256, FinalizeError> {
    let actual = repository_patch_digest(candidate)?;
    if actual != *expected {
        return Err(FinalizeError::VerifyDigest {
            expected: expected.to_string(),
            actual: actual.to_string(),
        });
    }
    Ok(actual)
}

pub(crate) fn repository_patch_digest_with_limit(
    candidate: &RepositoryPatchCandidate,
    limit: usize,
) -> Result<Sha256, FinalizeError> {
    let files = candidate.changed_files();
    if !(1..=MAX_CANDIDATE_FILES).contains(&files.len()) {
        return Err(FinalizeError::input("invalid candidate or file count"));
    }
    // Content hashes are independent per file: computed in parallel for large candidates, then
    // checked in stored order.
    // A candidate straight from the finalizer has hashes derived from these very bytes.
    let work: usize = files.iter().map(|f| f.content().map_or(0, str::len)).sum();
    let hashes = if candidate.hashes_derived() {
        files.iter().map(|f| f.new_sha256().copied()).collect()
    } else {
        map_ordered(files, work, |f| {
            f.content().map(|c| Sha256::of(c.as_bytes()))
        })
    };
    let mut folded: Vec<String> = Vec::with_capacity(files.len());
    for (file, hash) in files.iter().zip(hashes) {
        if hash.is_some() && file.new_sha256() != hash.as_ref() {
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
    let mut sink = HashSink {
        hasher: Hasher::new(),
        written: 0,
        limit,
    };
    let result = (|| -> io::Result<()> {
        sink.write_all(b"{\"candidate\":")?;
        write_candidate(&mut sink, candidate)?;
        sink.write_all(b",\"digest_schema\":")?;
        write_string(&mut sink, DIGEST_SCHEMA)?;
        sink.write_all(b"}")
    })();
    match result {
        Ok(()) => Ok(Sha256::from_raw(sink.hasher.finalize().into())),
        Err(_) => Err(FinalizeError::DigestBudget),
    }
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

/// One value of the canonical form.
enum Field<'a> {
    Str(&'a str),
    OptStr(Option<String>),
    OptText(Option<&'a str>),
    Bool(bool),
    /// A gate list: written de-duplicated and sorted.
    Set(&'a [String]),
    /// The changed files: written sorted by path.
    Files(&'a [RepositoryPatchFile]),
}

/// Writes an object with its keys sorted by code point (UTF-8 byte order equals code point
/// order), compact separators.
fn write_object<W: Write>(out: &mut W, mut fields: Vec<(&str, Field<'_>)>) -> io::Result<()> {
    fields.sort_by(|x, y| x.0.cmp(y.0));
    out.write_all(b"{")?;
    for (i, (key, value)) in fields.into_iter().enumerate() {
        if i > 0 {
            out.write_all(b",")?;
        }
        write_string(out, key)?;
        out.write_all(b":")?;
        match value {
            Field::Str(s) => write_string(out, s)?,
            Field::OptStr(Some(s)) => write_string(out, &s)?,
            Field::OptText(Some(s)) => write_string(out, s)?,
            Field::OptStr(None) | Field::OptText(None) => out.write_all(b"null")?,
            Field::Bool(true) => out.write_all(b"true")?,
            Field::Bool(false) => out.write_all(b"false")?,
            Field::Set(items) => {
                let mut sorted: Vec<&str> = items.iter().map(String::as_str).collect();
                sorted.sort_unstable();
                sorted.dedup();
                write_array(out, &sorted, |out, s| write_string(out, s))?;
            }
            Field::Files(files) => {
                let mut sorted: Vec<&RepositoryPatchFile> = files.iter().collect();
                sorted.sort_by(|x, y| x.path().as_str().cmp(y.path().as_str()));
                write_array(out, &sorted, |out, f| write_file(out, f))?;
            }
        }
    }
    out.write_all(b"}")
}

fn write_array<W: Write, T>(
    out: &mut W,
    items: &[T],
    mut each: impl FnMut(&mut W, &T) -> io::Result<()>,
) -> io::Result<()> {
    out.write_all(b"[")?;
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.write_all(b",")?;
        }
        each(out, item)?;
    }
    out.write_all(b"]")
}

fn write_file<W: Write>(out: &mut W, file: &RepositoryPatchFile) -> io::Result<()> {
    write_object(
        out,
        vec![
            ("path", Field::Str(file.path().as_str())),
            ("op", Field::Str(file.op().as_str())),
            (
                "previous_sha256",
                Field::OptStr(file.previous_sha256().map(ToString::to_string)),
            ),
            (
                "new_sha256",
                Field::OptStr(file.new_sha256().map(ToString::to_string)),
            ),
            ("content", Field::OptText(file.content())),
            ("diff", Field::Str(file.diff())),
        ],
    )
}

/// The canonical candidate object: every field of the v2 model (the tests check the key set
/// against the serialised model), written straight from the typed value without an intermediate
/// JSON tree.
fn write_candidate<W: Write>(out: &mut W, c: &RepositoryPatchCandidate) -> io::Result<()> {
    write_object(
        out,
        vec![
            ("schema_version", Field::Str(c.schema_version())),
            ("write_back_mode", Field::Str(c.write_back_mode())),
            ("validation_state", Field::Str(c.validation_state())),
            ("mutation_allowed", Field::Bool(c.mutation_allowed())),
            ("handoff_id", Field::Str(c.handoff_id())),
            ("request_id", Field::Str(c.request_id())),
            ("plan_id", Field::Str(c.plan_id())),
            ("app_id", Field::Str(c.app_id())),
            ("build_registry_id", Field::Str(c.build_registry_id())),
            ("repository_full_name", Field::Str(c.repository_full_name())),
            ("baseline_commit_sha", Field::Str(c.baseline_commit_sha())),
            ("approved_plan_digest", Field::Str(c.approved_plan_digest())),
            ("snapshot_digest", Field::Str(c.snapshot_digest())),
            ("proposal_id", Field::Str(c.proposal_id())),
            ("provider_id", Field::Str(c.provider_id())),
            ("summary", Field::Str(c.summary())),
            ("rationale", Field::Str(c.rationale())),
            ("changed_files", Field::Files(c.changed_files())),
            (
                "required_validation_gates",
                Field::Set(c.required_validation_gates()),
            ),
            (
                "required_security_gates",
                Field::Set(c.required_security_gates()),
            ),
            ("required_ci_checks", Field::Set(c.required_ci_checks())),
        ],
    )
}

/// The canonical bytes (for tests and diagnostics).
#[cfg(test)]
pub(crate) fn canonical_bytes(c: &RepositoryPatchCandidate) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = write_candidate(&mut out, c);
    out
}

#[cfg(test)]
#[path = "digest_tests.rs"]
mod tests;
