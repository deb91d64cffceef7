//! Integration tests of the read-only MCP server (one binary, modules per concern): every tool
//! through an in-process client (app bundle tools against upstream-format fixtures), the tool-list
//! contract, the fail-closed path table, no writes,
//! structural hygiene, and the built binary over real stdio.
// Test helpers (outside `#[test]` functions) may panic: a panic is a test failure here.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]
// mcp/clippy.toml's disallowed methods bind the server; the tests spawn the built server and
// write fixtures.
#![allow(clippy::disallowed_methods)]

mod contract;
mod fixture;
mod hostile;
mod hygiene;
mod no_writes;
mod paths;
mod python_parity;
mod stdio;
mod support;
mod surface;
mod tools;
mod upstream;
