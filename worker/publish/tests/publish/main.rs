//! Publication against real Git: a bare repository on this machine and a Git HTTP remote
//! (`git http-backend` behind a loopback server with basic auth), every refusal by its code.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod extend;
mod forge;
mod http_remote;
mod path_remote;
mod rebase;
mod server;
mod support;
