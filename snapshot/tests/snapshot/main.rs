//! Integration tests of the `snapshot` crate: portable paths, approvals, selection checks and Git
//! snapshots of real repositories built with `git` in temporary directories.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test fixtures: a failed setup step is a failed test"
)]

mod context;
mod git_snapshot;
mod paths;
mod properties;
mod selection;
mod support;
