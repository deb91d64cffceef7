//! Cross-crate end-to-end scenarios against the real Docker daemon: the offline fake-agent proof
//! through the library pipeline and the `patch-candidate` binary, the hostile image and agent
//! modes, the Docker turn with the fixture image, and the proof images under plain `docker run`
//! with the hardened flags (the CI isolation job's cases).
//!
//! The suites drive the workspace's built binaries (`patch-candidate`, `turn-runner`,
//! `fake-agent`, `hostile-entry`) from the target directory this test binary runs in:
//! `cargo test --workspace` builds them; with `-p scenario-tests` build them first with
//! `cargo build --release --locked --workspace --bins`.
//!
//! Docker tests are named `docker_*` (unique across the workspace). With
//! `PATCH_CANDIDATE_REQUIRE_DOCKER=1` a missing daemon or image is a failure, never a skip. Each
//! Docker test takes the process-wide Docker lock (tests share one daemon and assert that no
//! labelled turn container remains afterwards) and, when `PATCH_CANDIDATE_DOCKER_TALLY` names a
//! file, appends its name there once it has run, so the CI isolation job (infra/ci/isolation.sh)
//! can prove every expected case ran.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod approve;
mod cli;
mod cli_export;
mod cli_input;
mod cli_live;
mod cli_review;
mod codes;
mod follow_ups;
mod gate_environments;
mod gates;
mod hostile;
mod layering;
mod lifecycle;
mod live_claude;
mod live_commands;
mod live_container;
mod live_e2e;
mod live_gemini;
mod live_worker;
mod proof;
mod proof_image;
mod real_turn;
mod review_page_bench;
mod runtimes;
mod service;
mod service_api;
mod service_database;
mod service_deaths;
mod service_forge;
mod service_gates;
mod service_hostile_clients;
mod service_janitor;
mod service_live;
mod service_recovery;
mod service_review;
mod support;
mod ui_browser;
