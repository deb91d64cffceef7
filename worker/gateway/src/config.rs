//! The operator's gateway settings: model allowlist, refused tools, per-turn budgets, size caps
//! and deadlines. Strict JSON (unknown fields refused); every field but `models` has a default
//! with every protection on.

use std::time::Duration;

use serde::Deserialize;

use crate::body::BodyLimits;
use crate::error::GatewaySetupError;

/// Per-turn budgets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Budgets {
    /// Model requests per turn (refusals included).
    pub requests: u64,
    /// Request bytes per turn (heads and bodies as received from the agent).
    pub request_bytes: u64,
    /// Response bytes per turn (as read from the upstream: streamed back to the agent, or
    /// drained after the agent's channel went away).
    pub response_bytes: u64,
    /// Tokens per turn, as counted from the upstream's usage events.
    pub tokens: u64,
}

impl Default for Budgets {
    fn default() -> Self {
        Self {
            requests: 64,
            request_bytes: 64 * 1_048_576,
            response_bytes: 256 * 1_048_576,
            tokens: 2_000_000,
        }
    }
}

/// The gateway settings of one live turn.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewayConfig {
    /// Models the agent may name (exact strings).
    pub models: Vec<String>,
    /// Tool types or names a request may not offer (e.g. `web_search`), refused on top of each
    /// provider's allowlist of client-executed tool types (this list cannot allow anything).
    #[serde(default = "default_refused_tools")]
    pub refused_tools: Vec<String>,
    /// Provider-stored files a content part may reference, matched exactly: a Responses or
    /// Anthropic `file_id`, or a Gemini `fileUri`. Empty by default: every stored-file
    /// reference is refused (`PATCH_CANDIDATE_GATEWAY_CONTENT_FILE`).
    #[serde(default)]
    pub allowed_file_ids: Vec<String>,
    /// Per-turn budgets.
    #[serde(default)]
    pub budgets: Budgets,
    /// Largest body of one request.
    #[serde(default = "default_max_body")]
    pub max_request_body_bytes: u64,
    /// Most JSON values (object keys included) in one request body, checked before parsing.
    #[serde(default = "default_max_body_values")]
    pub max_request_body_values: u64,
    /// Deepest nesting of arrays and objects in one request body, checked before parsing.
    #[serde(default = "default_max_body_depth")]
    pub max_request_body_depth: u32,
    /// Longest string (in bytes as written) in one request body, checked before parsing.
    #[serde(default = "default_max_body_string")]
    pub max_request_body_string_bytes: u64,
    /// Largest head (request line and headers) of one request.
    #[serde(default = "default_max_head")]
    pub max_request_head_bytes: usize,
    /// Most header lines of one request.
    #[serde(default = "default_max_headers")]
    pub max_request_headers: usize,
    /// The whole request must arrive within this many milliseconds of the channel opening.
    #[serde(default = "default_read_timeout")]
    pub read_timeout_ms: u64,
    /// The upstream must answer (status and headers) within this many milliseconds.
    #[serde(default = "default_upstream_timeout")]
    pub upstream_first_byte_timeout_ms: u64,
    /// The upstream may stay silent between two chunks for at most this many milliseconds.
    #[serde(default = "default_upstream_timeout")]
    pub upstream_idle_timeout_ms: u64,
    /// An answer whose channel went away is read on (never sent) for at most this many
    /// milliseconds to reach its usage event.
    #[serde(default = "default_drain_timeout")]
    pub upstream_drain_timeout_ms: u64,
    /// At the end of a turn, the final usage waits at most this many milliseconds for answers
    /// still being drained; one still unread then counts as an answer without usage.
    #[serde(default = "default_settle_timeout")]
    pub upstream_settle_timeout_ms: u64,
}

fn default_refused_tools() -> Vec<String> {
    vec![
        "web_search".to_owned(),
        "web_search_preview".to_owned(),
        "image_generation".to_owned(),
        "computer_use_preview".to_owned(),
        "mcp".to_owned(),
    ]
}
fn default_max_body() -> u64 {
    8 * 1_048_576
}
fn default_max_body_values() -> u64 {
    262_144
}
fn default_max_body_depth() -> u32 {
    64
}
fn default_max_body_string() -> u64 {
    4 * 1_048_576
}
fn default_max_head() -> usize {
    32 * 1024
}
fn default_max_headers() -> usize {
    64
}
fn default_read_timeout() -> u64 {
    10_000
}
fn default_upstream_timeout() -> u64 {
    120_000
}
fn default_drain_timeout() -> u64 {
    30_000
}
fn default_settle_timeout() -> u64 {
    5_000
}

impl GatewayConfig {
    /// The defaults for one allowed model.
    #[must_use]
    pub fn for_model(model: &str) -> Self {
        Self {
            models: vec![model.to_owned()],
            refused_tools: default_refused_tools(),
            allowed_file_ids: Vec::new(),
            budgets: Budgets::default(),
            max_request_body_bytes: default_max_body(),
            max_request_body_values: default_max_body_values(),
            max_request_body_depth: default_max_body_depth(),
            max_request_body_string_bytes: default_max_body_string(),
            max_request_head_bytes: default_max_head(),
            max_request_headers: default_max_headers(),
            read_timeout_ms: default_read_timeout(),
            upstream_first_byte_timeout_ms: default_upstream_timeout(),
            upstream_idle_timeout_ms: default_upstream_timeout(),
            upstream_drain_timeout_ms: default_drain_timeout(),
            upstream_settle_timeout_ms: default_settle_timeout(),
        }
    }

    /// Parses the operator's JSON config.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_GATEWAY_CONFIG` naming the JSON path of the first problem.
    pub fn from_json(bytes: &[u8]) -> Result<Self, GatewaySetupError> {
        let de = &mut serde_json::Deserializer::from_slice(bytes);
        let config: Self =
            serde_path_to_error::deserialize(de).map_err(|e| GatewaySetupError::Config {
                path: e.path().to_string(),
                reason: "not a valid gateway configuration".to_owned(),
            })?;
        config.validate()?;
        Ok(config)
    }

    /// Checks the values (non-empty allowlist of plain model names, caps above zero).
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_GATEWAY_CONFIG`.
    pub fn validate(&self) -> Result<(), GatewaySetupError> {
        let bad = |path: &str, reason: &str| GatewaySetupError::Config {
            path: path.to_owned(),
            reason: reason.to_owned(),
        };
        if self.models.is_empty() {
            return Err(bad("models", "at least one model is required"));
        }
        for m in &self.models {
            if m.is_empty()
                || m.len() > 128
                || !m
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._:/".contains(&b))
            {
                return Err(bad("models", "a model name is not a plain identifier"));
            }
        }
        if self.max_request_body_bytes == 0
            || self.max_request_body_values == 0
            || self.max_request_body_depth == 0
            || self.max_request_body_string_bytes == 0
            || self.max_request_head_bytes == 0
            || self.max_request_headers == 0
        {
            return Err(bad("max_request_*", "caps must be above zero"));
        }
        if self.max_request_body_depth > crate::body::MAX_SCAN_DEPTH {
            return Err(bad(
                "max_request_body_depth",
                "the nesting depth is at most 256",
            ));
        }
        if self
            .allowed_file_ids
            .iter()
            .any(|id| id.is_empty() || id.len() > 256 || !id.bytes().all(|b| b.is_ascii_graphic()))
        {
            return Err(bad(
                "allowed_file_ids",
                "a file id is 1 to 256 visible ASCII bytes",
            ));
        }
        if self.read_timeout_ms == 0
            || self.upstream_first_byte_timeout_ms == 0
            || self.upstream_idle_timeout_ms == 0
            || self.upstream_drain_timeout_ms == 0
            || self.upstream_settle_timeout_ms == 0
        {
            return Err(bad("*_timeout_ms", "deadlines must be above zero"));
        }
        Ok(())
    }

    /// The pre-scan caps of a request body.
    #[must_use]
    pub fn body_limits(&self) -> BodyLimits {
        BodyLimits {
            max_values: self.max_request_body_values,
            max_depth: self.max_request_body_depth,
            max_string_bytes: self.max_request_body_string_bytes,
        }
    }

    /// How long an answer whose channel went away is read on.
    #[must_use]
    pub fn drain_timeout(&self) -> Duration {
        Duration::from_millis(self.upstream_drain_timeout_ms)
    }

    /// The request read deadline.
    #[must_use]
    pub fn read_timeout(&self) -> Duration {
        Duration::from_millis(self.read_timeout_ms)
    }
}
