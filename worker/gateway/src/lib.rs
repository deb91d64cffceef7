//! The model gateway of live turns. It runs inside the trusted worker and serves the model
//! requests an agent in a `--network none` container sends through the tunnel: one strict
//! HTTP/1.1 request per channel, checked against the operator's allowlist, refused tools and
//! per-turn budgets, forwarded with the credential the container never sees, answered by
//! streaming the upstream's SSE chunk by chunk, with the tokens counted from the upstream's own
//! usage events.
//!
//! Modules are private; this list is the crate's surface.
//!
//! # Security
//! The agent is hostile: see [`parse_head`] for the request grammar, [`GatewayError`] for every
//! refusal (each a clean HTTP error to the agent and a stable code for the turn's events). The
//! credential's `Debug` is redacted and no error or report carries it.
#![forbid(unsafe_code)]

mod body;
mod config;
mod credential;
mod error;
mod http1;
mod provider;
mod scrub;
mod serve;
mod sse;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
mod upstream;

pub use config::GatewayConfig;
pub use credential::Credential;
pub use error::{CONFIG_CODE, ERROR_CODES, GatewayError, GatewaySetupError};
pub use http1::{HeadLimits, parse_head};
pub use provider::{
    AnthropicMessages, GeminiGenerateContent, OpenAiResponses, Provider, ProviderKind, Route,
    UsageTally,
};
pub use scrub::{CREDENTIAL_SCRUBBED, SCRUB_MARKER};
pub use serve::{ChannelReport, Gateway, GatewayUsage, TurnGateway};
pub use sse::{MAX_EVENT_LINE, UsageScanner};
pub use upstream::UpstreamUrl;

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
#[cfg(test)]
#[path = "tests_providers.rs"]
mod tests_providers;
#[cfg(test)]
#[path = "tests_reach_out.rs"]
mod tests_reach_out;
