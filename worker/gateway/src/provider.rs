//! Model providers: the exact routes each serves (method, path and query string), the shape its
//! request body must have, how the credential is presented upstream, where its answers report
//! token usage, and how its refusals look to the agent. Three are built in: the OpenAI Responses
//! API (Codex), Anthropic Messages (Claude Code) and Gemini `generateContent` (Gemini CLI);
//! [`ProviderKind`] names them.

use std::sync::Arc;

use http::{HeaderName, HeaderValue};
use serde_json::Value;

use crate::body::{ContentPolicy, Dialect, PolicyFields, extract, extract_fields, prescan};
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

/// What the usage events of one streamed answer said so far. A provider folds each event into
/// it; only [`UsageTally::complete`] is charged (an answer that never completes its count is an
/// answer without usage, which fails the next request closed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UsageTally {
    /// Counts seen so far, possibly incomplete.
    pub seen: Option<TokenUsage>,
    /// The event the provider needs before a count is complete was seen (Anthropic
    /// `message_start`, Gemini's finish).
    pub started: bool,
    /// The count, once the events say it is complete.
    pub complete: Option<TokenUsage>,
}

/// What the body checked: the model named (in the allowlist, from the body or the path). The
/// body itself is forwarded as the agent sent it: the check refuses duplicates of every field
/// policy reads, so the upstream reads the same `model`, `stream` and tools the gateway checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckedBody {
    /// The model named (in the allowlist).
    pub model: String,
}

/// The method of a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouteMethod {
    /// `GET` (no body).
    Get,
    /// `POST` (a JSON body with `content-length`).
    Post,
}

impl RouteMethod {
    fn token(self) -> &'static [u8] {
        match self {
            Self::Get => b"GET",
            Self::Post => b"POST",
        }
    }
}

/// What the gateway does with a request on a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouteKind {
    /// The main model call: a streamed (SSE) answer whose usage events are counted (a successful
    /// answer without a complete count fails the next request closed).
    Stream,
    /// An allowed side call whose JSON answer reports the tokens it spent (counted like a
    /// stream's: required on success).
    SideCounted,
    /// An allowed side call whose answer spends no tokens (token counting, model lists): it is
    /// forwarded and charged to the request budgets only.
    SideFree,
    /// A side call the gateway answers itself (`PATCH_CANDIDATE_GATEWAY_SIDE_CALL`, 404 in the
    /// provider's error shape), never forwarded.
    Refused,
}

/// One request's route, as the provider matched it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// The method.
    pub method: RouteMethod,
    /// What is done with it.
    pub kind: RouteKind,
    /// Path (and query) appended to the upstream base URL, e.g. `messages?beta=true`.
    pub upstream_path: String,
    /// The model named in the path (Gemini), checked strictly for shape; the allowlist check
    /// is [`Provider::check_body`]'s.
    pub path_model: Option<String>,
}

/// A fixed route of a provider's table.
#[derive(Clone, Copy, Debug)]
struct StaticRoute {
    method: RouteMethod,
    path: &'static str,
    /// The exact query string (`None`: no `?` at all).
    query: Option<&'static str>,
    kind: RouteKind,
    upstream: &'static str,
}

/// Matches a request line against a fixed table: a path none of the routes has is
/// `PATCH_CANDIDATE_GATEWAY_PATH`, a route's path with another method `_METHOD`, with another
/// query string (or none, or an empty one) `_QUERY`.
fn match_static(
    table: &[StaticRoute],
    method: &[u8],
    target: &[u8],
) -> Result<Route, GatewayError> {
    let (path, query) = split_target(target);
    let mut same_path = table
        .iter()
        .filter(|r| r.path.as_bytes() == path)
        .peekable();
    if same_path.peek().is_none() {
        return Err(GatewayError::Path);
    }
    let same_method: Vec<&StaticRoute> = same_path.filter(|r| r.method.token() == method).collect();
    if same_method.is_empty() {
        return Err(GatewayError::Method);
    }
    let route = same_method
        .into_iter()
        .find(|r| r.query.map(str::as_bytes) == query)
        .ok_or(GatewayError::Query)?;
    Ok(Route {
        method: route.method,
        kind: route.kind,
        upstream_path: route.upstream.to_owned(),
        path_model: None,
    })
}

/// Splits an origin-form target at its first `?`.
fn split_target(target: &[u8]) -> (&[u8], Option<&[u8]>) {
    match target.iter().position(|&b| b == b'?') {
        Some(i) => (
            target.get(..i).unwrap_or_default(),
            Some(target.get(i + 1..).unwrap_or_default()),
        ),
        None => (target, None),
    }
}

/// One model API.
pub trait Provider: Send + Sync + std::fmt::Debug {
    /// Short name for logs and usage records (the name [`ProviderKind`] parses).
    fn name(&self) -> &'static str;
    /// Matches the request line's method and origin-form target (exact path and exact query
    /// string) to one of the provider's routes.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_GATEWAY_PATH`, `_METHOD` or `_QUERY`.
    fn route(&self, method: &[u8], target: &[u8]) -> Result<Route, GatewayError>;
    /// Checks the body of a request on `route` against the provider's shape and the operator's
    /// policy, without building a value tree of it (pre-scan, then typed extraction of the
    /// fields policy reads). A model in the path is checked against the allowlist here too.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_GATEWAY_BODY_VALUES`, `_BODY_DEPTH`, `_BODY_STRING` (pre-scan), `_BODY`,
    /// `_STREAM`, `_MODEL` or `_TOOL`.
    fn check_body(
        &self,
        route: &Route,
        body: &[u8],
        config: &GatewayConfig,
    ) -> Result<CheckedBody, GatewayError>;
    /// The upstream auth header carrying the credential.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_GATEWAY_UPSTREAM` if the header cannot be built (it can: the credential
    /// was checked to be visible ASCII).
    fn auth_header(
        &self,
        credential: &Credential,
    ) -> Result<(HeaderName, HeaderValue), GatewayError>;
    /// Agent headers forwarded upstream as sent (lower-case names); everything else is dropped
    /// (inbound auth headers included).
    fn forwarded_headers(&self) -> &'static [&'static str];
    /// Headers the gateway sets upstream from the agent's once it has checked them (e.g.
    /// Anthropic's `anthropic-version` and `anthropic-beta`).
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_GATEWAY_HEADER` for a malformed value, `_TOOL` for a flag that switches
    /// on a server-side feature.
    fn derived_headers(
        &self,
        _headers: &[(String, String)],
    ) -> Result<Vec<(&'static str, String)>, GatewayError> {
        Ok(Vec::new())
    }
    /// Folds one SSE event's JSON data into the answer's usage tally.
    fn usage(&self, event: &Value, tally: &mut UsageTally);
    /// The usage reported by a non-streamed JSON answer of a `RouteKind::SideCounted` route.
    fn answer_usage(&self, _answer: &Value) -> Option<TokenUsage> {
        None
    }
    /// The JSON body of a refusal, in the provider's error shape (it carries the code).
    fn refusal_body(&self, e: &GatewayError) -> String {
        serde_json::json!({
            "error": {"code": e.code(), "message": e.to_string(), "type": "gateway_refusal"}
        })
        .to_string()
    }
}

/// The built-in providers, by name: the CLI and the service map an agent to one of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProviderKind {
    /// `openai-responses`: the OpenAI Responses API (Codex).
    OpenAiResponses,
    /// `anthropic-messages`: Anthropic Messages (Claude Code).
    AnthropicMessages,
    /// `gemini`: Gemini `streamGenerateContent` (Gemini CLI).
    Gemini,
}

impl ProviderKind {
    /// Every built-in provider.
    pub const ALL: [ProviderKind; 3] = [
        ProviderKind::OpenAiResponses,
        ProviderKind::AnthropicMessages,
        ProviderKind::Gemini,
    ];

    /// The provider's name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::OpenAiResponses => "openai-responses",
            Self::AnthropicMessages => "anthropic-messages",
            Self::Gemini => "gemini",
        }
    }

    /// The provider.
    #[must_use]
    pub fn provider(self) -> Arc<dyn Provider> {
        match self {
            Self::OpenAiResponses => Arc::new(OpenAiResponses),
            Self::AnthropicMessages => Arc::new(AnthropicMessages),
            Self::Gemini => Arc::new(GeminiGenerateContent),
        }
    }
}

impl std::fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A provider name that is none of the built-in ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "PATCH_CANDIDATE_GATEWAY_PROVIDER: unknown provider (openai-responses, anthropic-messages, gemini)"
)]
pub struct UnknownProvider;

impl UnknownProvider {
    /// The stable wire code.
    #[must_use]
    pub fn code(&self) -> &'static str {
        "PATCH_CANDIDATE_GATEWAY_PROVIDER"
    }
}

impl vocab::Coded for UnknownProvider {
    fn code(&self) -> &'static str {
        UnknownProvider::code(self)
    }
    fn class(&self) -> vocab::FailureClass {
        vocab::FailureClass::Usage
    }
}

impl std::str::FromStr for ProviderKind {
    type Err = UnknownProvider;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or(UnknownProvider)
    }
}

fn bearer(credential: &Credential) -> Result<(HeaderName, HeaderValue), GatewayError> {
    let mut value = HeaderValue::from_str(&format!("Bearer {}", credential.expose()))
        .map_err(|_| GatewayError::Upstream)?;
    value.set_sensitive(true);
    Ok((http::header::AUTHORIZATION, value))
}

fn plain_key(
    name: &'static str,
    credential: &Credential,
) -> Result<(HeaderName, HeaderValue), GatewayError> {
    let mut value =
        HeaderValue::from_str(credential.expose()).map_err(|_| GatewayError::Upstream)?;
    value.set_sensitive(true);
    Ok((HeaderName::from_static(name), value))
}

/// The allowlist check of a model.
fn allowed(model: &str, config: &GatewayConfig) -> Result<(), GatewayError> {
    if config.models.iter().any(|m| m == model) {
        Ok(())
    } else {
        Err(GatewayError::Model)
    }
}

/// The pre-scan's content rules for `dialect` under `config`.
fn content(config: &GatewayConfig, dialect: Dialect) -> ContentPolicy<'_> {
    ContentPolicy {
        dialect,
        allowed_file_ids: &config.allowed_file_ids,
    }
}

/// The checks of a body whose JSON names its model: the bounded pre-scan (content rules
/// included) before any allocation, then only the fields policy reads; the model present, a
/// streamed answer asked for when `stream_required`, the model allowed.
fn checked_fields(
    body: &[u8],
    config: &GatewayConfig,
    dialect: Dialect,
    stream_required: bool,
) -> Result<(PolicyFields, String), GatewayError> {
    prescan(body, &config.body_limits(), &content(config, dialect))?;
    let fields = extract(body)?;
    let model = fields.model.clone().ok_or(GatewayError::Body)?;
    if stream_required && !fields.stream {
        return Err(GatewayError::Stream);
    }
    allowed(&model, config)?;
    Ok((fields, model))
}

/// The operator's refused tools, by type or name (exact).
fn operator_refuses(fields: &PolicyFields, config: &GatewayConfig) -> bool {
    fields.tools.iter().any(|tool| {
        config.refused_tools.iter().any(|r| {
            Some(r.as_str()) == tool.kind.as_deref() || Some(r.as_str()) == tool.name.as_deref()
        })
    })
}

fn count(v: &Value, name: &str) -> Option<u64> {
    v.get(name).and_then(Value::as_u64)
}

/// Responses tool types that reach nothing outside the request: `function`, `custom` (freeform),
/// the built-in `local_shell`, `shell` and `apply_patch`, whose calls the model only proposes and
/// the agent runs in its container, and `tool_search`, which searches the tools the same request
/// declares (each of them checked here; Codex declares it next to its function tools). Every
/// other type (`web_search*`, `file_search`, `code_interpreter`, `mcp`, `image_generation`,
/// `computer_use_preview`, and any type added later) is refused.
const RESPONSES_CLIENT_TOOL_TYPES: &[&str] = &[
    "function",
    "custom",
    "local_shell",
    "shell",
    "apply_patch",
    "tool_search",
];

/// The one `openai-beta` value forwarded.
const RESPONSES_BETA: &str = "responses=experimental";

/// The OpenAI Responses API, as Codex speaks it (`wire_api = "responses"`): one route,
/// `POST /v1/responses`.
#[derive(Clone, Copy, Debug, Default)]
pub struct OpenAiResponses;

const RESPONSES_ROUTES: &[StaticRoute] = &[StaticRoute {
    method: RouteMethod::Post,
    path: "/v1/responses",
    query: None,
    kind: RouteKind::Stream,
    upstream: "responses",
}];

impl Provider for OpenAiResponses {
    fn name(&self) -> &'static str {
        ProviderKind::OpenAiResponses.name()
    }

    fn route(&self, method: &[u8], target: &[u8]) -> Result<Route, GatewayError> {
        match_static(RESPONSES_ROUTES, method, target)
    }

    fn check_body(
        &self,
        _route: &Route,
        body: &[u8],
        config: &GatewayConfig,
    ) -> Result<CheckedBody, GatewayError> {
        // Policy before allocation: bounded byte scan (content rules included), then only the
        // fields policy reads.
        let (fields, model) = checked_fields(body, config, Dialect::Responses, true)?;
        let client_only = fields
            .tools
            .iter()
            .all(|t| RESPONSES_CLIENT_TOOL_TYPES.contains(&t.kind.as_deref().unwrap_or_default()));
        if !client_only || operator_refuses(&fields, config) {
            return Err(GatewayError::Tool);
        }
        Ok(CheckedBody { model })
    }

    fn auth_header(
        &self,
        credential: &Credential,
    ) -> Result<(HeaderName, HeaderValue), GatewayError> {
        bearer(credential)
    }

    fn forwarded_headers(&self) -> &'static [&'static str] {
        &["originator", "session_id", "conversation_id", "user-agent"]
    }

    /// `openai-beta` is forwarded only as `responses=experimental` (every such header saying
    /// exactly that); any other value is dropped.
    fn derived_headers(
        &self,
        headers: &[(String, String)],
    ) -> Result<Vec<(&'static str, String)>, GatewayError> {
        let mut betas = headers
            .iter()
            .filter(|(n, _)| n == "openai-beta")
            .map(|(_, v)| v.as_str())
            .peekable();
        if betas.peek().is_some() && betas.all(|v| v == RESPONSES_BETA) {
            Ok(vec![("openai-beta", RESPONSES_BETA.to_owned())])
        } else {
            Ok(Vec::new())
        }
    }

    fn usage(&self, event: &Value, tally: &mut UsageTally) {
        if event.get("type").and_then(Value::as_str) != Some("response.completed") {
            return;
        }
        let Some(usage) = event.get("response").and_then(|r| r.get("usage")) else {
            return;
        };
        let (Some(input_tokens), Some(output_tokens)) =
            (count(usage, "input_tokens"), count(usage, "output_tokens"))
        else {
            return;
        };
        let total_tokens =
            count(usage, "total_tokens").unwrap_or(input_tokens.saturating_add(output_tokens));
        let usage = TokenUsage {
            input_tokens,
            output_tokens,
            total_tokens,
        };
        tally.seen = Some(usage);
        tally.started = true;
        tally.complete = Some(usage);
    }
}

/// Anthropic Messages, as Claude Code speaks it: `POST /v1/messages?beta=true` (SSE), side calls
/// `POST /v1/messages/count_tokens?beta=true` (forwarded, no tokens) and `GET /v1/models`
/// (with or without `?limit=1000`; answered by the gateway with a 404). The credential goes
/// upstream as `x-api-key`.
#[derive(Clone, Copy, Debug, Default)]
pub struct AnthropicMessages;

const MESSAGES_ROUTES: &[StaticRoute] = &[
    StaticRoute {
        method: RouteMethod::Post,
        path: "/v1/messages",
        query: Some("beta=true"),
        kind: RouteKind::Stream,
        upstream: "messages?beta=true",
    },
    StaticRoute {
        method: RouteMethod::Post,
        path: "/v1/messages/count_tokens",
        query: Some("beta=true"),
        kind: RouteKind::SideFree,
        upstream: "messages/count_tokens?beta=true",
    },
    // The adapter's model listing (`GET /v1/models?limit=1000`): a 4xx answer means "no
    // listing, models not narrowed", so the gateway answers it with a 404 itself.
    StaticRoute {
        method: RouteMethod::Get,
        path: "/v1/models",
        query: Some("limit=1000"),
        kind: RouteKind::Refused,
        upstream: "models",
    },
    StaticRoute {
        method: RouteMethod::Get,
        path: "/v1/models",
        query: None,
        kind: RouteKind::Refused,
        upstream: "models",
    },
];

/// The `anthropic-version` sent when the agent's is missing or not a `YYYY-MM-DD` date.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Anthropic-defined tool types the client itself executes (the container's agent); every other
/// typed tool (`web_search_*`, `web_fetch_*`, `code_execution_*`, `tool_search_tool_*`,
/// `mcp_toolset`, and types not known here) runs on Anthropic's servers or is unknown, and is
/// refused.
const ANTHROPIC_CLIENT_TOOL_PREFIXES: &[&str] = &["bash_", "text_editor_", "computer_", "memory_"];

/// `anthropic-beta` flags refused (`PATCH_CANDIDATE_GATEWAY_TOOL`): those that switch on
/// server-side tools, remote MCP servers, files or containers.
const ANTHROPIC_REFUSED_BETAS: &[&str] = &[
    "mcp-client",
    "code-execution",
    "web-fetch",
    "web-search",
    "files-api",
    "skills",
    "container",
];

/// `anthropic-beta` flags forwarded (by prefix; the date after it is the flag's version): client
/// and model features that make Anthropic fetch, run or store nothing. Flags neither here nor
/// refused above are dropped (not forwarded), so a flag Anthropic adds later switches nothing on
/// until it is reviewed and listed here.
const ANTHROPIC_FORWARDED_BETAS: &[&str] = &[
    "claude-code-",
    "interleaved-thinking-",
    "context-management-",
    "thinking-token-count-",
    "advanced-tool-use-",
    "fine-grained-tool-streaming-",
    "token-efficient-tools-",
    "output-128k-",
    "context-1m-",
    "prompt-caching-",
    "token-counting-",
    "extended-cache-ttl-",
    "effort-",
    "structured-outputs-",
];

fn is_date(v: &str) -> bool {
    let b = v.as_bytes();
    b.len() == 10
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            _ => c.is_ascii_digit(),
        })
}

fn anthropic_tool_allowed(kind: Option<&str>) -> bool {
    match kind {
        None | Some("custom") => true,
        Some(t) => ANTHROPIC_CLIENT_TOOL_PREFIXES
            .iter()
            .any(|p| t.starts_with(p)),
    }
}

fn anthropic_error_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        500.. => "api_error",
        _ => "invalid_request_error",
    }
}

impl Provider for AnthropicMessages {
    fn name(&self) -> &'static str {
        ProviderKind::AnthropicMessages.name()
    }

    fn route(&self, method: &[u8], target: &[u8]) -> Result<Route, GatewayError> {
        match_static(MESSAGES_ROUTES, method, target)
    }

    fn check_body(
        &self,
        route: &Route,
        body: &[u8],
        config: &GatewayConfig,
    ) -> Result<CheckedBody, GatewayError> {
        let stream_required = route.kind == RouteKind::Stream;
        let (fields, model) = checked_fields(body, config, Dialect::Anthropic, stream_required)?;
        if fields.server_side
            || operator_refuses(&fields, config)
            || !fields
                .tools
                .iter()
                .all(|t| anthropic_tool_allowed(t.kind.as_deref()))
        {
            return Err(GatewayError::Tool);
        }
        Ok(CheckedBody { model })
    }

    fn auth_header(
        &self,
        credential: &Credential,
    ) -> Result<(HeaderName, HeaderValue), GatewayError> {
        plain_key("x-api-key", credential)
    }

    fn forwarded_headers(&self) -> &'static [&'static str] {
        &["user-agent", "x-app"]
    }

    fn derived_headers(
        &self,
        headers: &[(String, String)],
    ) -> Result<Vec<(&'static str, String)>, GatewayError> {
        let version = headers
            .iter()
            .find(|(n, _)| n == "anthropic-version")
            .map(|(_, v)| v.as_str());
        let version = match version {
            None => ANTHROPIC_VERSION,
            Some(v) if is_date(v) => v,
            Some(_) => return Err(GatewayError::Header),
        };
        let mut out = vec![("anthropic-version", version.to_owned())];
        let mut betas: Vec<&str> = Vec::new();
        for (_, value) in headers.iter().filter(|(n, _)| n == "anthropic-beta") {
            for flag in value.split(',').map(str::trim) {
                if flag.is_empty()
                    || flag.len() > 64
                    || betas.len() >= 32
                    || !flag
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                {
                    return Err(GatewayError::Header);
                }
                if ANTHROPIC_REFUSED_BETAS.iter().any(|r| flag.starts_with(r)) {
                    return Err(GatewayError::Tool);
                }
                if ANTHROPIC_FORWARDED_BETAS
                    .iter()
                    .any(|r| flag.starts_with(r))
                {
                    betas.push(flag);
                }
            }
        }
        if !betas.is_empty() {
            out.push(("anthropic-beta", betas.join(",")));
        }
        Ok(out)
    }

    /// `message_start.message.usage` gives the input (cache creation and cache reads included)
    /// and a first output count; each `message_delta.usage.output_tokens` is cumulative, so the
    /// last one replaces it. A `message_delta` before any `message_start` is not counted.
    fn usage(&self, event: &Value, tally: &mut UsageTally) {
        let input = |u: &Value| {
            count(u, "input_tokens")
                .unwrap_or(0)
                .saturating_add(count(u, "cache_creation_input_tokens").unwrap_or(0))
                .saturating_add(count(u, "cache_read_input_tokens").unwrap_or(0))
        };
        match event.get("type").and_then(Value::as_str) {
            Some("message_start") => {
                let Some(usage) = event.get("message").and_then(|m| m.get("usage")) else {
                    return;
                };
                if count(usage, "input_tokens").is_none() {
                    return;
                }
                tally.started = true;
                let input_tokens = input(usage);
                let output_tokens = count(usage, "output_tokens").unwrap_or(0);
                tally.seen = Some(TokenUsage {
                    input_tokens,
                    output_tokens,
                    total_tokens: input_tokens.saturating_add(output_tokens),
                });
            }
            Some("message_delta") => {
                let (Some(seen), Some(usage)) = (tally.seen.as_mut(), event.get("usage")) else {
                    return;
                };
                let Some(output) = count(usage, "output_tokens") else {
                    return;
                };
                seen.output_tokens = output;
                if count(usage, "input_tokens").is_some() {
                    // Newer answers repeat the cumulative input here.
                    seen.input_tokens = seen.input_tokens.max(input(usage));
                }
                seen.total_tokens = seen.input_tokens.saturating_add(seen.output_tokens);
                tally.complete = Some(*seen);
            }
            _ => {}
        }
    }

    fn refusal_body(&self, e: &GatewayError) -> String {
        serde_json::json!({
            "type": "error",
            "error": {"type": anthropic_error_type(e.status()), "message": e.to_string()}
        })
        .to_string()
    }
}

/// Gemini `generateContent`, as Gemini CLI speaks it:
/// `POST /v1beta/models/{model}:streamGenerateContent?alt=sse` (SSE), side calls
/// `POST /v1beta/models/{model}:generateContent` (JSON; forwarded, its `usageMetadata` counted)
/// and `POST /v1beta/models/{model}:countTokens` (forwarded, no tokens). The model sits in the
/// path: `MAX_PATH_MODEL` bytes at most of ASCII letters, digits, `.`, `_`, `-`, starting with
/// a letter or digit. The credential goes upstream as `x-goog-api-key`.
#[derive(Clone, Copy, Debug, Default)]
pub struct GeminiGenerateContent;

/// Longest model name accepted in a Gemini path.
pub const MAX_PATH_MODEL: usize = 128;

/// The only key a Gemini tool object may have: function declarations (camel- and snake-case,
/// as the API reads both). `googleSearch`, `googleSearchRetrieval`, `urlContext`,
/// `codeExecution` and every other (server-side) tool are refused.
const GEMINI_CLIENT_TOOL_KEYS: &[&str] = &["functionDeclarations", "function_declarations"];

fn path_model(model: &[u8]) -> Option<String> {
    let first = model.first()?;
    if model.len() > MAX_PATH_MODEL
        || !first.is_ascii_alphanumeric()
        || !model
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(b))
    {
        return None;
    }
    String::from_utf8(model.to_vec()).ok()
}

fn gemini_status(status: u16) -> &'static str {
    match status {
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        408 | 504 => "DEADLINE_EXCEEDED",
        413 | 429 => "RESOURCE_EXHAUSTED",
        503 => "UNAVAILABLE",
        500.. => "INTERNAL",
        _ => "INVALID_ARGUMENT",
    }
}

/// One `usageMetadata` object, cumulative: output is candidates plus thoughts, the total the
/// reported one (or the sum, if that is larger).
fn gemini_usage(meta: &Value) -> Option<TokenUsage> {
    let prompt = count(meta, "promptTokenCount")?;
    let output = count(meta, "candidatesTokenCount")
        .unwrap_or(0)
        .saturating_add(count(meta, "thoughtsTokenCount").unwrap_or(0));
    let sum = prompt.saturating_add(output);
    Some(TokenUsage {
        input_tokens: prompt,
        output_tokens: output,
        total_tokens: count(meta, "totalTokenCount").unwrap_or(sum).max(sum),
    })
}

impl Provider for GeminiGenerateContent {
    fn name(&self) -> &'static str {
        ProviderKind::Gemini.name()
    }

    fn route(&self, method: &[u8], target: &[u8]) -> Result<Route, GatewayError> {
        let (path, query) = split_target(target);
        let rest = path
            .strip_prefix(b"/v1beta/models/")
            .ok_or(GatewayError::Path)?;
        let colon = rest
            .iter()
            .rposition(|&b| b == b':')
            .ok_or(GatewayError::Path)?;
        let (model, action) = rest.split_at(colon);
        let action = action.get(1..).unwrap_or_default();
        let model = path_model(model).ok_or(GatewayError::Path)?;
        let (kind, want_query) = match action {
            b"streamGenerateContent" => (RouteKind::Stream, Some(&b"alt=sse"[..])),
            b"generateContent" => (RouteKind::SideCounted, None),
            b"countTokens" => (RouteKind::SideFree, None),
            _ => return Err(GatewayError::Path),
        };
        if method != b"POST" {
            return Err(GatewayError::Method);
        }
        if query != want_query {
            return Err(GatewayError::Query);
        }
        let action = String::from_utf8_lossy(action);
        let upstream_path = match want_query {
            Some(q) => format!("models/{model}:{action}?{}", String::from_utf8_lossy(q)),
            None => format!("models/{model}:{action}"),
        };
        Ok(Route {
            method: RouteMethod::Post,
            kind,
            upstream_path,
            path_model: Some(model),
        })
    }

    fn check_body(
        &self,
        route: &Route,
        body: &[u8],
        config: &GatewayConfig,
    ) -> Result<CheckedBody, GatewayError> {
        let model = route.path_model.clone().ok_or(GatewayError::Path)?;
        allowed(&model, config)?;
        prescan(
            body,
            &config.body_limits(),
            &content(config, Dialect::Gemini),
        )?;
        let fields = extract_fields(body)?;
        let client_only = fields.tools.iter().all(|t| {
            t.keys
                .iter()
                .all(|k| GEMINI_CLIENT_TOOL_KEYS.contains(&k.as_str()))
        });
        if !client_only || operator_refuses(&fields, config) {
            return Err(GatewayError::Tool);
        }
        Ok(CheckedBody { model })
    }

    fn auth_header(
        &self,
        credential: &Credential,
    ) -> Result<(HeaderName, HeaderValue), GatewayError> {
        plain_key("x-goog-api-key", credential)
    }

    fn forwarded_headers(&self) -> &'static [&'static str] {
        &["user-agent", "x-goog-api-client"]
    }

    /// Each chunk's `usageMetadata` is cumulative: the last one replaces the earlier. The count
    /// is complete once a chunk finished a candidate (`finishReason`) or reported the prompt
    /// blocked (`promptFeedback.blockReason`).
    fn usage(&self, event: &Value, tally: &mut UsageTally) {
        if let Some(usage) = event.get("usageMetadata").and_then(gemini_usage) {
            tally.seen = Some(usage);
        }
        let finished = event
            .get("candidates")
            .and_then(Value::as_array)
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c.get("finishReason").and_then(Value::as_str).is_some())
            })
            || event
                .get("promptFeedback")
                .and_then(|p| p.get("blockReason"))
                .is_some();
        tally.started |= finished;
        if tally.started {
            tally.complete = tally.seen;
        }
    }

    fn answer_usage(&self, answer: &Value) -> Option<TokenUsage> {
        answer.get("usageMetadata").and_then(gemini_usage)
    }

    fn refusal_body(&self, e: &GatewayError) -> String {
        serde_json::json!({
            "error": {"code": e.status(), "message": e.to_string(), "status": gemini_status(e.status())}
        })
        .to_string()
    }
}
