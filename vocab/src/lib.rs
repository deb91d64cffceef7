//! The project's shared words, one definition each: error codes and [`Coded`], `sha256:` digests
//! ([`Sha256`]), untrusted-text display ([`Untrusted`]), strict JSON ([`from_slice_strict`]),
//! canonical JSON bytes and domain digests, and the gate verdict ([`GateVerdict`]).
//!
//! A leaf: it depends on no crate of the project, spawns no process and writes no file, so every
//! crate (the read-only MCP server included) can use it.
//!
//! # Security
//! Every constructor here is fallible and strict: a value that is not exactly in its canonical
//! form is refused, never repaired, and no error message quotes the input.
#![forbid(unsafe_code)]

// Modules are private; the curated surface is re-exported below.
mod canonical;
mod coded;
mod digest;
mod error;
mod json;
mod text;
mod verdict;

pub use canonical::{canonical_bytes, domain_digest, write_canonical};
pub use coded::{Coded, FailureClass, check_code_table, check_message_convention, check_samples};
pub use digest::{SHA256_PREFIX, Sha256, is_lower_hex, is_typed_sha256, sha256_bare_hex};
pub use error::{ERROR_CODES, MANIFEST_HASH_CODE, VocabError};
pub use json::{MAX_JSON_DEPTH, ShapeKind, StrictJsonError, from_slice_strict};
pub use text::{DEFAULT_QUOTED_CHARS, Untrusted, is_default_ignorable, is_printable, quote};
pub use verdict::GateVerdict;
