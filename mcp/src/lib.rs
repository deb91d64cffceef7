//! The `mcp` crate (see ARCHITECTURE.md).
#![forbid(unsafe_code)]
