//! The `archive` crate (see ARCHITECTURE.md).
#![forbid(unsafe_code)]
