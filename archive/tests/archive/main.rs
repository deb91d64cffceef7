//! Integration tests of the archive crate: the hostile corpus, independent oracles (the `zip`
//! crate and Python's `zipfile`), workspace harvest/export, and staging.
// Test helpers outside `#[test]` functions: failing loudly is their job.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod common;
mod envelope;
mod export;
mod hostile;
mod stage;
mod workspace;
