//! Integration tests of the archive crate.
