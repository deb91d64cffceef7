//! Integration tests of the `finalizer` crate: parity with independent Python 3 oracles (difflib
//! and the reference digest canonicalisation), `git apply` round trips on real repositories, the
//! `git apply`-ready export, and the digest binding against every single-field edit.
// Test helpers (outside `#[test]` functions) may panic: a panic is a test failure here.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod diff_parity;
mod digest_binding;
mod digest_parity;
mod export;
mod support;
mod verify;
