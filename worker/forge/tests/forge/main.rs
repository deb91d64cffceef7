//! Webhook verification and parsing against real-shaped deliveries of GitHub, Gitea / Forgejo
//! and GitLab (fixtures signed by `fixtures/sign.py`, an independent implementation), and the
//! hostile ones, every refusal by its code.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod events;
mod support;
mod verify;
