//! The content policy's integration tests: the secret corpus, hidden text, executables and
//! binaries, CI paths, the report's strictness and binding, bounds, and arbitrary input.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "test code"
)]

mod bounds;
mod corpus;
mod files;
mod report;
mod secrets;
mod support;
