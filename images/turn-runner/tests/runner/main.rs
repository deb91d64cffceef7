//! Integration tests: the real binaries as host processes (the images under Docker are
//! exercised by the workspace scenario suite in tests/).
// Test helpers outside `#[test]` functions: failing loudly is their job.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod common;
mod host;
mod hostile_host;
mod live_host;
