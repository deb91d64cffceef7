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
//! # Error codes: `#[derive(Coded)]`
//! Every library error enum of the project derives [`Coded`](derive@Coded) beside
//! `thiserror::Error`, so that each wire code is spelled once, in its variant's message:
//!
//! ```
//! pub const NAME_CODE: &str = "EXAMPLE_NAME";
//!
//! #[derive(Debug, thiserror::Error, vocab::Coded)]
//! pub enum ExampleError {
//!     /// The code is the message's prefix before `": "`.
//!     #[error("EXAMPLE_BUDGET: input exceeds {limit} bytes")]
//!     Budget { limit: u64 },
//!     /// A code the crate also names as a constant: checked equal at compile time.
//!     #[error("EXAMPLE_NAME: invalid name")]
//!     #[coded(code = NAME_CODE, usage)]
//!     Name,
//!     /// Another crate's code, not listed in this enum's `CODES`.
//!     #[error("REPOSITORY_PATCH_MANIFEST_HASH: invalid digest")]
//!     #[coded(foreign = vocab::MANIFEST_HASH_CODE)]
//!     Digest,
//!     #[error("EXAMPLE_IO: {kind}")]
//!     #[coded(environment)]
//!     Io { kind: std::io::ErrorKind },
//!     /// A wrapped error keeps its code and its class.
//!     #[error(transparent)]
//!     Vocab(#[from] vocab::VocabError),
//! }
//!
//! /// The crate's table: one enum's codes, or several joined with [`code_table!`].
//! pub const ERROR_CODES: &[&str] = ExampleError::CODES;
//!
//! use vocab::{Coded as _, FailureClass};
//! assert_eq!(ERROR_CODES, ["EXAMPLE_BUDGET", "EXAMPLE_NAME", "EXAMPLE_IO"]);
//! assert_eq!(ExampleError::Name.code(), "EXAMPLE_NAME");
//! assert_eq!(ExampleError::Name.class(), FailureClass::Usage);
//! assert_eq!(ExampleError::Digest.code(), vocab::MANIFEST_HASH_CODE);
//! let wrapped = ExampleError::from(vocab::JobId::parse("x").unwrap_err());
//! assert_eq!(wrapped.code(), vocab::ID_CODE);
//! vocab::check_coded_samples(&[
//!     ExampleError::Budget { limit: 1 },
//!     ExampleError::Name,
//!     ExampleError::Digest,
//!     ExampleError::Io { kind: std::io::ErrorKind::NotFound },
//!     wrapped,
//! ])
//! .unwrap();
//! ```
//!
//! The derive generates the inherent `CODES` (the enum's own codes, each once, in declaration
//! order) and `code()`, `impl Coded` (its `class()` included) and `impl` [`CodedEnum`] (for the
//! one-call all-variants test, [`check_coded_samples`]). Each variant has `#[error("CODE: …")]`,
//! where `CODE` is UPPER_SNAKE and `": "` follows it (anything else does not compile), or
//! `#[error(transparent)]`, which wraps one error and keeps its code and class. `#[coded(…)]`
//! on a variant says what differs:
//!
//! | option | meaning |
//! |---|---|
//! | `code = PATH` | the code is also the crate's constant `PATH` (returned; must equal the message's code) |
//! | `foreign = PATH` | another crate's code, its constant `PATH` (returned, not listed; must equal the message's code) |
//! | `field = NAME` | the `&'static str` field `NAME` holds the code (not listed); the message starts with `"{NAME}: "` |
//! | `delegate` | the one field is a wrapped error whose code and class are kept, with a message of its own |
//! | `rejected`, `usage`, `environment` | the [`FailureClass`] (default: rejected; a wrapped error's own) |
//! | `usage_as_rejected` | on a wrapped error: its class, but a usage error is reported as rejected |
//!
//! # Security
//! Every constructor here is fallible and strict: a value that is not exactly in its canonical
//! form is refused, never repaired, and an error message shows the input only bounded and escaped
//! ([`Untrusted`]).
#![forbid(unsafe_code)]

// The derive's expansion names `::vocab::…`; this lets it do so inside this crate too.
extern crate self as vocab;

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
#[doc(hidden)]
pub use coded::__private;
pub use coded::{
    Coded, CodedEnum, FailureClass, check_code_table, check_coded_samples, check_message_convention,
};
pub use digest::{
    SHA256_PREFIX, Sha256, Sha256Writer, is_lower_hex, is_typed_sha256, sha256_bare_hex,
};
pub use error::{ERROR_CODES, ID_CODE, MANIFEST_HASH_CODE, VocabError};
pub use id::{AttemptId, HostId, InstanceId, JobId, RANDOM_ID_BYTES, StoreId};
pub use json::{ShapeKind, StrictJsonError, from_slice_strict};
pub use text::{DEFAULT_QUOTED_CHARS, Untrusted, is_default_ignorable, is_printable, quote};
pub use time::{now_unix, now_unix_ms, rfc3339_utc, utc_timestamp};
pub use verdict::GateVerdict;
pub use vocab_derive::Coded;
