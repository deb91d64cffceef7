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

pub mod bundle;
pub mod candidates;
pub mod envelope;
pub mod error;
mod fallback;
pub mod layout;
mod module_manifest;
mod plan;
mod provenance;
mod pytargets;
mod pyyaml;
mod revision;
pub mod server;
pub mod workspace;

pub use envelope::PROTOCOL_SCHEMA_VERSION;
pub use error::{ERROR_CODES, McpError};
pub use server::{McpServer, SERVER_NAME, SERVER_VERSION, ServerOptions, TOOL_NAMES, tool_list};
pub use workspace::{Workspace, check_request_path};
