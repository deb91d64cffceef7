//! Model providers: the one endpoint each serves, the shape its request body must have, how the
//! credential is presented upstream, and where its streamed answer reports token usage. Codex
//! (the OpenAI Responses API) is built in; Anthropic's `/v1/messages` and Gemini plug in as
//! further implementations of [`Provider`].

use http::{HeaderName, HeaderValue};
use serde_json::Value;

use crate::body::{extract, prescan};
use crate::config::GatewayConfig;
use crate::credential::Credential;
use crate::error::GatewayError;

/// Token counts of one answer, as the upstream reported them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TokenUsage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// Total tokens (as reported; the budget counts this).
    pub total_tokens: u64,
}

/// What the gateway learned from a checked request body. The body itself is forwarded as the
/// agent sent it: the check refuses duplicates of every field policy reads, so the upstream
/// reads the same `model`, `stream` and tools the gateway checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckedBody {
    /// The model named (in the allowlist).
    pub model: String,
}

/// One model API.
pub trait Provider: Send + Sync + std::fmt::Debug {
    /// Short name for logs and usage records.
    fn name(&self) -> &'static str;
    /// The one origin-form path the agent may call, e.g. `/v1/responses`.
    fn path(&self) -> &'static str;
    /// The path appended to the upstream base URL, e.g. `responses`.
    fn upstream_path(&self) -> &'static str;
    /// Checks the body against the provider's shape and the operator's policy, without building
    /// a value tree of it (pre-scan, then typed extraction of the fields policy reads).
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_GATEWAY_BODY_VALUES`, `_BODY_DEPTH`, `_BODY_STRING` (pre-scan), `_BODY`,
    /// `_STREAM`, `_MODEL` or `_TOOL`.
    fn check_body(&self, body: &[u8], config: &GatewayConfig) -> Result<CheckedBody, GatewayError>;
    /// The upstream auth header carrying the credential.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_GATEWAY_UPSTREAM` if the header cannot be built (it can: the credential
    /// was checked to be visible ASCII).
    fn auth_header(
        &self,
        credential: &Credential,
    ) -> Result<(HeaderName, HeaderValue), GatewayError>;
    /// Agent headers forwarded upstream (lower-case names); everything else is dropped.
    fn forwarded_headers(&self) -> &'static [&'static str];
    /// The usage reported by one SSE event's JSON data, if the event carries the final count.
    fn usage(&self, event: &Value) -> Option<TokenUsage>;
}

/// The OpenAI Responses API, as Codex speaks it (`wire_api = "responses"`).
#[derive(Clone, Copy, Debug, Default)]
pub struct OpenAiResponses;

impl Provider for OpenAiResponses {
    fn name(&self) -> &'static str {
        "openai-responses"
    }

    fn path(&self) -> &'static str {
        "/v1/responses"
    }

    fn upstream_path(&self) -> &'static str {
        "responses"
    }

    fn check_body(&self, body: &[u8], config: &GatewayConfig) -> Result<CheckedBody, GatewayError> {
        // Policy before allocation: bounded byte scan, then only the fields policy reads.
        prescan(body, &config.body_limits())?;
        let fields = extract(body)?;
        let model = fields.model.ok_or(GatewayError::Body)?;
        if !fields.stream {
            return Err(GatewayError::Stream);
        }
        if !config.models.contains(&model) {
            return Err(GatewayError::Model);
        }
        for tool in &fields.tools {
            if config.refused_tools.iter().any(|r| {
                Some(r.as_str()) == tool.kind.as_deref() || Some(r.as_str()) == tool.name.as_deref()
            }) {
                return Err(GatewayError::Tool);
            }
        }
        Ok(CheckedBody { model })
    }

    fn auth_header(
        &self,
        credential: &Credential,
    ) -> Result<(HeaderName, HeaderValue), GatewayError> {
        let mut value = HeaderValue::from_str(&format!("Bearer {}", credential.expose()))
            .map_err(|_| GatewayError::Upstream)?;
        value.set_sensitive(true);
        Ok((http::header::AUTHORIZATION, value))
    }

    fn forwarded_headers(&self) -> &'static [&'static str] {
        &[
            "openai-beta",
            "originator",
            "session_id",
            "conversation_id",
            "user-agent",
        ]
    }

    fn usage(&self, event: &Value) -> Option<TokenUsage> {
        if event.get("type").and_then(Value::as_str) != Some("response.completed") {
            return None;
        }
        let usage = event.get("response")?.get("usage")?;
        let field = |name: &str| usage.get(name).and_then(Value::as_u64);
        let input_tokens = field("input_tokens")?;
        let output_tokens = field("output_tokens")?;
        let total_tokens =
            field("total_tokens").unwrap_or(input_tokens.saturating_add(output_tokens));
        Some(TokenUsage {
            input_tokens,
            output_tokens,
            total_tokens,
        })
    }
}
