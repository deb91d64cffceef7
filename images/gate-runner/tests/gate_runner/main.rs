//! Integration tests of the gate runner binary.
