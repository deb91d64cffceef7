//! Integration tests of the worker against the real Docker daemon.
//!
//! Docker tests are named `docker_*`. With `PATCH_CANDIDATE_REQUIRE_DOCKER=1` a missing daemon or
//! image is a failure, never a skip. Each Docker test takes a process-wide lock (tests share one
//! daemon and assert that no labelled turn container remains afterwards) and, when
//! `PATCH_CANDIDATE_DOCKER_TALLY` names a file, appends its name there once it has run, so the
//! CI isolation job can prove every expected case ran.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod cli;
mod hostile;
mod lifecycle;
mod proof;
mod real_turn;
mod support;
