//! Container-level tests of the runner (filled below).
