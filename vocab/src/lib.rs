//! The project's shared words, one definition each: error codes and [`Coded`], `sha256:` digests
//! ([`Sha256`]), untrusted-text display ([`Untrusted`]), strict JSON ([`from_slice_strict`]),
//! canonical JSON bytes and domain digests, the gate verdict ([`GateVerdict`]), the typed IDs of
//! jobs, attempts, hosts, stores and turn owners ([`JobId`], [`AttemptId`], [`HostId`],
//! [`StoreId`], [`InstanceId`]), and UTC time stamps ([`rfc3339_utc`]).
//!
//! A leaf: it depends on no crate of the project, spawns no process, writes no file and reads
//! nothing of the system but the clock (no random source: a fresh ID is built from bytes the
//! caller drew), so every crate (the read-only MCP server included) can use it.
//!
//! # Security
//! Every constructor here is fallible and strict: a value that is not exactly in its canonical
//! form is refused, never repaired, and an error message shows the input only bounded and escaped
//! ([`Untrusted`]).
#![forbid(unsafe_code)]

// Modules are private; the curated surface is re-exported below.
mod canonical;
mod coded;
mod digest;
mod error;
mod id;
mod json;
mod text;
mod time;
mod verdict;

pub use canonical::{canonical_bytes, domain_digest};
pub use coded::{Coded, FailureClass, check_code_table, check_message_convention, check_samples};
pub use digest::{SHA256_PREFIX, Sha256, is_lower_hex, is_typed_sha256, sha256_bare_hex};
pub use error::{ERROR_CODES, ID_CODE, MANIFEST_HASH_CODE, VocabError};
pub use id::{AttemptId, HostId, InstanceId, JobId, RANDOM_ID_BYTES, StoreId};
pub use json::{MAX_JSON_DEPTH, ShapeKind, StrictJsonError, from_slice_strict};
pub use text::{DEFAULT_QUOTED_CHARS, Untrusted, is_default_ignorable, is_printable, quote};
pub use time::{now_unix, now_unix_ms, rfc3339_utc, utc_timestamp};
pub use verdict::GateVerdict;
