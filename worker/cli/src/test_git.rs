//! Test support for the command tests: `git` with no system or user configuration and a fixed
//! identity, in a throwaway repository.

/// Runs `git ARGS` in `dir`; panics unless it succeeds; returns stdout without the trailing
/// newline.
pub(crate) use snapshot::testkit::git;
