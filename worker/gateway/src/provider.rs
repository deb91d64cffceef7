//! Model providers: the one endpoint each serves, the shape its request body must have, how the
//! credential is presented upstream, and where its streamed answer reports token usage. Codex
//! (the OpenAI Responses API) is built in; Anthropic's `/v1/messages` and Gemini plug in as
//! further implementations of [`Provider`].

use http::{HeaderName, HeaderValue};
use serde_json::Value;

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

/// What the gateway learned from a checked request body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckedBody {
    /// The model named (in the allowlist).
    pub model: String,
    /// The body forwarded upstream: the parsed value, serialized again, so that the upstream
    /// reads exactly what the gateway checked (no duplicate-key or number differential).
    pub forward: Vec<u8>,
}

/// One model API.
pub trait Provider: Send + Sync + std::fmt::Debug {
    /// Short name for logs and usage records.
    fn name(&self) -> &'static str;
    /// The one origin-form path the agent may call, e.g. `/v1/responses`.
    fn path(&self) -> &'static str;
    /// The path appended to the upstream base URL, e.g. `responses`.
    fn upstream_path(&self) -> &'static str;
    /// Checks the body against the provider's shape and the operator's policy.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_GATEWAY_BODY`, `_STREAM`, `_MODEL` or `_TOOL`.
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
        let value: Value = serde_json::from_slice(body).map_err(|_| GatewayError::Body)?;
        let object = value.as_object().ok_or(GatewayError::Body)?;
        let model = object
            .get("model")
            .and_then(Value::as_str)
            .ok_or(GatewayError::Body)?;
        if object.get("stream") != Some(&Value::Bool(true)) {
            return Err(GatewayError::Stream);
        }
        if !config.models.iter().any(|m| m == model) {
            return Err(GatewayError::Model);
        }
        if let Some(tools) = object.get("tools") {
            let tools = tools.as_array().ok_or(GatewayError::Body)?;
            for tool in tools {
                let tool = tool.as_object().ok_or(GatewayError::Body)?;
                let kind = tool.get("type").and_then(Value::as_str);
                let name = tool.get("name").and_then(Value::as_str);
                if config
                    .refused_tools
                    .iter()
                    .any(|r| Some(r.as_str()) == kind || Some(r.as_str()) == name)
                {
                    return Err(GatewayError::Tool);
                }
            }
        }
        let forward = serde_json::to_vec(&value).map_err(|_| GatewayError::Body)?;
        Ok(CheckedBody {
            model: model.to_owned(),
            forward,
        })
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
