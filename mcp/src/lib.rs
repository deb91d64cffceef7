//! `patch-candidate-mcp`: a read-only MCP server (`mozaiks.mcp.v1`, ADR 0004) over one workspace
//! bound at startup, plus read-only views of repository patch candidates and workspace archives.
//!
//! Every tool is read or validate only: no tool writes, executes a command, stages, promotes or
//! exposes approval scope, and none accepts `confirm_execution`. Every response carries the
//! `mozaiks.mcp.v1` envelope in `structuredContent`.
//!
//! # Security
//! Paths are checked lexically (fail closed on absolute paths, `..`, drive prefixes, schemes, glob
//! characters) and then opened through a cap-std directory handle, which refuses symbolic links
//! that lead outside the root. Workspace files are hostile input: parsers run on a large dedicated
//! stack, every read is bounded, and messages never quote file content.
#![forbid(unsafe_code)]
#![deny(clippy::print_stdout, clippy::print_stderr)]

#[allow(
    dead_code,
    reason = "the bundle tools load YAML with PyYAML semantics (pyyaml.rs) and use only the limit pre-checks here; the strict single-document loaders stay for the next caller"
)]
mod bounded;
mod budget;
mod bundle;
mod candidates;
mod envelope;
mod error;
mod fallback;
mod layout;
mod module_manifest;
mod parser_thread;
mod plan;
mod provenance;
mod pydepth;
mod pytargets;
mod pyyaml;
mod revision;
mod server;
mod transport;
mod workspace;

// The surface other crates, the binary and the tests use; everything else is internal.
pub use candidates::MAX_LISTED_CANDIDATES;
pub use error::ERROR_CODES;
pub use server::{McpServer, ServerOptions, TOOL_NAMES};
pub use transport::{BoundedTransport, MAX_REQUEST_BYTES};
pub use workspace::MAX_DIR_ENTRIES;

/// The server's documented peak resident memory (VmHWM) under any workspace and any client: the
/// hostile suite checks every case against it (docs/MCP.md, "Limits").
pub const MEMORY_BUDGET_BYTES: u64 = 192 * 1024 * 1024;
