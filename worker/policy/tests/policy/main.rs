//! The content policy's integration tests: the secret corpus, hidden text, executables and
//! binaries, CI paths, the report's strictness and binding, bounds, and arbitrary input.

mod bounds;
mod files;
mod report;
mod secrets;
mod support;
