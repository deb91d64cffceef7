//! Integration tests: the real binaries as host processes, and the real images under Docker.
// Test helpers outside `#[test]` functions: failing loudly is their job.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod common;
mod docker;
mod host;
mod hostile_host;
