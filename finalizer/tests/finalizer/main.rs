//! Integration tests of the `finalizer` crate: parity with independent Python 3 oracles (difflib
//! and the reference digest canonicalisation) and `git apply` round trips on real repositories.
// Test helpers (outside `#[test]` functions) may panic: a panic is a test failure here.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod diff_parity;
mod digest_parity;
mod support;
mod verify;
