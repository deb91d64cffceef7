//! The scenario suites' shared helpers, each in one place: Docker access (fail-not-skip), the
//! test images and the leftover-container check ([`docker`]); the built binaries and their
//! output ([`cli`]); real Git repositories ([`git`]); approvals and state directories
//! ([`state`]); raw HTTP/1.1 answers ([`http`]); fields of JSON documents ([`json`]); live turns
//! through the model gateway to a scripted upstream ([`live`]); the stores and staging of a
//! library pipeline run ([`pipeline`]); a running `serve` process and its job store
//! ([`service`]); candidates and gate evidence planted without a turn ([`review`]).
//!
//! Every item is re-exported here: a suite says `use crate::support::*`.

pub mod cli;
pub mod docker;
pub mod git;
/// The publish crate's Git HTTP remote (`git http-backend` behind basic auth): the same file.
#[path = "../../../worker/publish/tests/publish/server.rs"]
#[allow(
    dead_code,
    reason = "the forge scenario uses the server without its push hold"
)]
pub mod git_http;
pub mod http;
pub mod json;
pub mod live;
pub mod pipeline;
pub mod review;
pub mod service;
pub mod state;

pub use cli::*;
pub use docker::*;
pub use git::*;
pub use http::*;
pub use json::*;
pub use live::*;
pub use pipeline::*;
pub use review::*;
pub use service::*;
pub use state::*;
