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
pub mod bundle;
pub mod candidates;
pub mod envelope;
pub mod error;
mod fallback;
pub mod layout;
mod module_manifest;
mod parser_thread;
mod plan;
mod provenance;
mod pydepth;
mod pytargets;
mod pyyaml;
mod revision;
pub mod server;
mod transport;
pub mod workspace;

pub use budget::WORK_BUDGET_BYTES;
pub use envelope::PROTOCOL_SCHEMA_VERSION;
pub use error::{ERROR_CODES, McpError};
pub use server::{McpServer, SERVER_NAME, SERVER_VERSION, ServerOptions, TOOL_NAMES, tool_list};
pub use transport::{BoundedTransport, MAX_IN_FLIGHT_REQUESTS, MAX_REQUEST_BYTES};
pub use workspace::{MAX_DIR_ENTRIES, Workspace, check_request_path};

/// The server's documented peak resident memory (VmHWM) under any workspace and any client: the
/// hostile suite checks every case against it (docs/MCP.md, "Limits").
pub const MEMORY_BUDGET_BYTES: u64 = 192 * 1024 * 1024;
