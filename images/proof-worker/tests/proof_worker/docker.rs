//! Docker tests (filled below).
