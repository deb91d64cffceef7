//! The `finalizer` crate (see ARCHITECTURE.md).
#![forbid(unsafe_code)]
