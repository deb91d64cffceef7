//! The Anthropic Messages and Gemini providers against scripted upstreams, and what every
//! provider shares (upgrade refusal, provider names).

use std::sync::Arc;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::provider::ANTHROPIC_VERSION;
use crate::testkit::DEFAULT_USAGE as USAGE;
use crate::testkit::{Reply, ScriptedUpstream, Usage, anthropic, gemini};
use crate::{
    ChannelReport, Credential, Gateway, GatewayConfig, GatewayError, OpenAiResponses, Provider,
    ProviderKind, TurnGateway, UpstreamUrl,
};

const KEY: &str = "sk-ant-test-7f3a9c1e5b2d4f6a8c0e";
const CLAUDE: &str = "claude-sonnet-4-5";
const HAIKU: &str = "claude-haiku-4-5";
const FLASH: &str = "gemini-2.5-flash";

fn claude_config() -> GatewayConfig {
    let mut c = GatewayConfig::for_model(CLAUDE);
    c.models.push(HAIKU.to_owned());
    c
}

fn gemini_config() -> GatewayConfig {
    GatewayConfig::for_model(FLASH)
}

/// A gateway for `provider` in front of a scripted upstream whose base path is `base`
/// (`/v1` for Anthropic, `/v1beta` for Gemini).
async fn setup(
    provider: Arc<dyn Provider>,
    base: &str,
    replies: Vec<Reply>,
    config: GatewayConfig,
) -> (ScriptedUpstream, TurnGateway) {
    let upstream = ScriptedUpstream::start(replies).await.unwrap();
    let turn = turn_gateway(&upstream, base, provider, config, KEY);
    (upstream, turn)
}

/// A gateway for `provider` holding credential `key`, in front of `upstream` at base path
/// `base`, and its turn.
pub(crate) fn turn_gateway(
    upstream: &ScriptedUpstream,
    base: &str,
    provider: Arc<dyn Provider>,
    config: GatewayConfig,
    key: &str,
) -> TurnGateway {
    let url: UpstreamUrl = format!("http://{}{base}", upstream.addr()).parse().unwrap();
    let gateway =
        Gateway::new(config, provider, Credential::from_value(key).unwrap(), url).unwrap();
    Arc::new(gateway).start_turn()
}

/// The base path of `kind`'s upstream: `/v1beta` for Gemini, `/v1` for the others.
pub(crate) fn base_path(kind: ProviderKind) -> &'static str {
    if kind == ProviderKind::Gemini {
        "/v1beta"
    } else {
        "/v1"
    }
}

/// [`setup`] for the provider of `kind`, at its base path.
async fn setup_kind(
    kind: ProviderKind,
    replies: Vec<Reply>,
    config: GatewayConfig,
) -> (ScriptedUpstream, TurnGateway) {
    setup(kind.provider(), base_path(kind), replies, config).await
}

async fn claude(replies: Vec<Reply>) -> (ScriptedUpstream, TurnGateway) {
    setup_kind(ProviderKind::AnthropicMessages, replies, claude_config()).await
}

async fn gem(replies: Vec<Reply>) -> (ScriptedUpstream, TurnGateway) {
    setup_kind(ProviderKind::Gemini, replies, gemini_config()).await
}

async fn exchange(turn: &TurnGateway, bytes: &[u8]) -> (ChannelReport, String) {
    exchange_keeping(turn, bytes, KEY).await
}

/// Sends `bytes` on one channel of `turn` and reads the whole answer, which must not hold the
/// credential `key`.
pub(crate) async fn exchange_keeping(
    turn: &TurnGateway,
    bytes: &[u8],
    key: &str,
) -> (ChannelReport, String) {
    let (gateway_end, mut agent) = tokio::io::duplex(1 << 16);
    let serving = turn.clone();
    let task = tokio::spawn(async move { serving.serve(gateway_end).await });
    agent.write_all(bytes).await.unwrap();
    let mut received = Vec::new();
    agent.read_to_end(&mut received).await.unwrap();
    let report = task.await.unwrap();
    let text = String::from_utf8_lossy(&received).into_owned();
    assert!(!text.contains(key), "the credential reached the agent");
    (report, text)
}

fn post(target: &str, body: &str, extra_headers: &str) -> Vec<u8> {
    format!(
        "POST {target} HTTP/1.1\r\nhost: 127.0.0.1:8417\r\ncontent-type: application/json\r\n{extra_headers}content-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn messages_body(model: &str, tools: &Value) -> String {
    json!({
        "model": model,
        "stream": true,
        "max_tokens": 32000,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "tools": tools
    })
    .to_string()
}

fn claude_tools() -> Value {
    json!([
        {"name": "Bash", "description": "run", "input_schema": {"type": "object"}},
        {"name": "Edit", "input_schema": {"type": "object"}},
        {"type": "custom", "name": "Write", "input_schema": {"type": "object"}}
    ])
}

const MESSAGES: &str = "/v1/messages?beta=true";

/// The usual Claude Code request body: `CLAUDE`, streamed, its client tools.
fn claude_body() -> String {
    messages_body(CLAUDE, &claude_tools())
}

/// The usual Claude Code request, with `extra_headers`.
fn claude_post(extra_headers: &str) -> Vec<u8> {
    post(MESSAGES, &claude_body(), extra_headers)
}
const CLAUDE_HEADERS: &str = "authorization: Bearer acp-proxy\r\nx-api-key: agent-made-up\r\nanthropic-version: 2023-06-01\r\nanthropic-beta: claude-code-20250219, interleaved-thinking-2025-05-14\r\nuser-agent: claude-cli/2.1.318 (external, sdk-cli)\r\nx-app: cli\r\ncookie: a=b\r\n";

fn stream_target(model: &str) -> String {
    format!("/v1beta/models/{model}:streamGenerateContent?alt=sse")
}

fn gemini_body(tools: &Value) -> String {
    json!({
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        "systemInstruction": {"parts": [{"text": "be brief"}]},
        "generationConfig": {"temperature": 0},
        "tools": tools
    })
    .to_string()
}

/// A Gemini CLI request to `target` offering `tools`.
fn gemini_post(target: &str, tools: &Value) -> Vec<u8> {
    post(target, &gemini_body(tools), GEMINI_HEADERS)
}

fn gemini_tools() -> Value {
    json!([{"functionDeclarations": [{"name": "write_file", "parameters": {"type": "object"}}]}])
}

const GEMINI_HEADERS: &str = "x-goog-api-key: \r\nauthorization: Bearer agent-made-up\r\nuser-agent: GeminiCLI/0.61.0/gemini-2.5-flash (linux; x64)\r\nx-goog-api-client: google-genai-sdk/1.30.0 gl-node/v20.20.2\r\n";

fn usage_of(turn: &TurnGateway) -> (u64, u64, u64) {
    let u = turn.usage();
    (u.input_tokens, u.output_tokens, u.total_tokens)
}

/// Each `(target, code)`: a POST of `body` there is refused with `code`; then `get` (a whole
/// GET request) is refused for its method.
async fn assert_routes_refused(
    turn: &TurnGateway,
    upstream: &ScriptedUpstream,
    body: &str,
    get: &str,
    cases: &[(&str, &str)],
) {
    for (target, code) in cases {
        let (e, _) = refused_by(turn, upstream, &post(target, body, "")).await;
        assert_eq!(e.code(), *code, "{target}");
    }
    let (e, _) = refused_by(turn, upstream, get.as_bytes()).await;
    assert_eq!(e, GatewayError::Method);
}

/// Asserts that an exchange was forwarded for `model` and answered with an event stream.
fn assert_streamed(report: &ChannelReport, text: &str, model: &str) {
    assert_eq!(report.error, None);
    assert_eq!(report.model.as_deref(), Some(model));
    assert!(text.starts_with("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"));
}

/// The refusal's code, status and provider-shaped body; nothing forwarded.
async fn refused_by(
    turn: &TurnGateway,
    upstream: &ScriptedUpstream,
    bytes: &[u8],
) -> (GatewayError, Value) {
    let before = upstream.requests().len();
    let (report, text) = exchange(turn, bytes).await;
    let error = report.error.clone().expect("a refusal");
    assert_eq!(report.status, Some(error.status()));
    assert!(
        text.starts_with(&format!("HTTP/1.1 {} ", error.status())),
        "{text}"
    );
    assert!(text.contains(error.code()), "the agent sees the code");
    assert_eq!(
        upstream.requests().len(),
        before,
        "{} was forwarded",
        error.code()
    );
    let body = text.split("\r\n\r\n").nth(1).unwrap_or_default();
    (error, serde_json::from_str(body).unwrap())
}

#[tokio::test]
async fn a_claude_stream_is_forwarded_with_x_api_key_and_its_usage_counted_from_start_and_last_delta()
 {
    let events = {
        let mut e = vec![anthropic::message_start(CLAUDE, 70, 30)];
        e.extend(anthropic::text_block(0, "Done."));
        // Cumulative: 5, then 20 (not 25).
        e.push(anthropic::message_delta("end_turn", 5));
        e.push(anthropic::message_delta("end_turn", 20));
        e.push(anthropic::message_stop());
        e
    };
    let (upstream, turn) = claude(vec![Reply::Events(events)]).await;
    let body = claude_body();
    let (report, text) = exchange(&turn, &post(MESSAGES, &body, CLAUDE_HEADERS)).await;
    assert_streamed(&report, &text, CLAUDE);
    assert!(text.contains("event: message_stop"));
    assert_eq!(usage_of(&turn), (100, 20, 120));
    let forwarded = &upstream.requests()[0];
    assert_eq!(
        (forwarded.method.as_str(), forwarded.target.as_str()),
        ("POST", MESSAGES)
    );
    assert_eq!(forwarded.header("x-api-key"), Some(KEY));
    assert_eq!(forwarded.header("authorization"), None);
    assert_eq!(forwarded.header("cookie"), None);
    assert_eq!(forwarded.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(
        forwarded.header("anthropic-beta"),
        Some("claude-code-20250219,interleaved-thinking-2025-05-14")
    );
    assert_eq!(forwarded.header("x-app"), Some("cli"));
    assert_eq!(forwarded.header("accept"), Some("text/event-stream"));
    assert_eq!(
        forwarded
            .headers
            .iter()
            .filter(|(n, _)| n == "x-api-key")
            .count(),
        1
    );
    assert_eq!(
        forwarded.json().unwrap(),
        serde_json::from_str::<Value>(&body).unwrap()
    );
}

#[tokio::test]
async fn anthropic_version_and_beta_flags_are_checked_never_repaired() {
    // None sent: the fixed version.
    let (upstream, turn) = claude(vec![anthropic::text(CLAUDE, "ok", USAGE)]).await;
    let (report, _) = exchange(&turn, &claude_post("")).await;
    assert_eq!(report.error, None);
    let forwarded = &upstream.requests()[0];
    assert_eq!(
        forwarded.header("anthropic-version"),
        Some(ANTHROPIC_VERSION)
    );
    assert_eq!(forwarded.header("anthropic-beta"), None);
    // Malformed values, and flags that switch on server-side features, are refused.
    for (headers, code) in [
        (
            "anthropic-version: latest\r\n",
            "PATCH_CANDIDATE_GATEWAY_HEADER",
        ),
        (
            "anthropic-version: 2023-06-01x\r\n",
            "PATCH_CANDIDATE_GATEWAY_HEADER",
        ),
        ("anthropic-version: \r\n", "PATCH_CANDIDATE_GATEWAY_HEADER"),
        (
            "anthropic-beta: claude-code-20250219,,x\r\n",
            "PATCH_CANDIDATE_GATEWAY_HEADER",
        ),
        (
            "anthropic-beta: Claude-Code\r\n",
            "PATCH_CANDIDATE_GATEWAY_HEADER",
        ),
        (
            "anthropic-beta: mcp-client-2025-04-04\r\n",
            "PATCH_CANDIDATE_GATEWAY_TOOL",
        ),
        (
            "anthropic-beta: claude-code-20250219\r\nanthropic-beta: code-execution-2025-08-25\r\n",
            "PATCH_CANDIDATE_GATEWAY_TOOL",
        ),
        (
            "anthropic-beta: web-fetch-2025-09-10\r\n",
            "PATCH_CANDIDATE_GATEWAY_TOOL",
        ),
        (
            "anthropic-beta: files-api-2025-04-14\r\n",
            "PATCH_CANDIDATE_GATEWAY_TOOL",
        ),
    ] {
        let (e, _) = refused_by(&turn, &upstream, &claude_post(headers)).await;
        assert_eq!(e.code(), code, "{headers}");
    }
}

#[tokio::test]
async fn claude_models_are_checked_helper_models_only_when_listed() {
    let (upstream, turn) = claude(vec![anthropic::text(HAIKU, "title", USAGE)]).await;
    let (report, _) = exchange(
        &turn,
        &post(MESSAGES, &messages_body(HAIKU, &json!([])), CLAUDE_HEADERS),
    )
    .await;
    assert_eq!(report.error, None, "a listed helper model is served");
    for model in [
        "claude-opus-4-1",
        "claude-3-5-haiku-20241022",
        "CLAUDE-SONNET-4-5",
    ] {
        let (e, body) = refused_by(
            &turn,
            &upstream,
            &post(MESSAGES, &messages_body(model, &json!([])), CLAUDE_HEADERS),
        )
        .await;
        assert_eq!(e, GatewayError::Model);
        assert_eq!(body["type"], "error");
        assert_eq!(body["error"]["type"], "permission_error");
    }
}

#[tokio::test]
async fn claude_server_tools_are_refused_by_type() {
    let (upstream, turn) = claude(vec![]).await;
    for tool in [
        json!({"type": "web_search_20250305", "name": "web_search", "max_uses": 5}),
        json!({"type": "web_fetch_20250910", "name": "web_fetch"}),
        json!({"type": "code_execution_20250825", "name": "code_execution"}),
        json!({"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"}),
        json!({"type": "mcp_toolset", "mcp_server_name": "x"}),
        json!({"type": "not_yet_known_20270101", "name": "x"}),
    ] {
        let mut tools = claude_tools();
        tools.as_array_mut().unwrap().push(tool.clone());
        let (e, _) = refused_by(
            &turn,
            &upstream,
            &post(MESSAGES, &messages_body(CLAUDE, &tools), CLAUDE_HEADERS),
        )
        .await;
        assert_eq!(e, GatewayError::Tool, "{tool}");
    }
    // Remote MCP servers and server-side containers, whatever their value.
    for (key, value) in [
        (
            "mcp_servers",
            json!([{"type": "url", "url": "https://mcp.example", "name": "x"}]),
        ),
        ("mcp_servers", json!([])),
        ("container", json!("container_1")),
    ] {
        let mut body: Value = serde_json::from_str(&claude_body()).unwrap();
        body[key] = value;
        let (e, _) = refused_by(
            &turn,
            &upstream,
            &post(MESSAGES, &body.to_string(), CLAUDE_HEADERS),
        )
        .await;
        assert_eq!(e, GatewayError::Tool, "{key}");
    }
}

#[tokio::test]
async fn claude_client_executed_tool_types_pass() {
    let tools = json!([
        {"type": "bash_20250124", "name": "bash"},
        {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
        {"name": "Read", "input_schema": {"type": "object"}}
    ]);
    let (_upstream, turn) = claude(vec![anthropic::text(CLAUDE, "ok", USAGE)]).await;
    let (report, _) = exchange(
        &turn,
        &post(MESSAGES, &messages_body(CLAUDE, &tools), CLAUDE_HEADERS),
    )
    .await;
    assert_eq!(report.error, None);
}

#[tokio::test]
async fn count_tokens_is_forwarded_within_the_budget_and_spends_no_tokens() {
    let (upstream, turn) = claude(vec![
        Reply::Status {
            status: 200,
            body: r#"{"input_tokens": 4242}"#.to_owned(),
        },
        anthropic::text(CLAUDE, "ok", USAGE),
    ])
    .await;
    let body = json!({"model": HAIKU, "messages": [{"role": "user", "content": "hi"}], "tools": claude_tools()})
        .to_string();
    let (report, text) = exchange(
        &turn,
        &post("/v1/messages/count_tokens?beta=true", &body, CLAUDE_HEADERS),
    )
    .await;
    assert_eq!(report.error, None);
    assert!(text.starts_with("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"));
    assert!(text.ends_with(r#"{"input_tokens": 4242}"#));
    let forwarded = &upstream.requests()[0];
    assert_eq!(forwarded.target, "/v1/messages/count_tokens?beta=true");
    assert_eq!(forwarded.header("x-api-key"), Some(KEY));
    assert_eq!(forwarded.header("accept"), Some("application/json"));
    let u = turn.usage();
    assert_eq!((u.requests, u.forwarded, u.usage_missing), (1, 1, 0));
    assert_eq!(usage_of(&turn), (0, 0, 0));
    // Not an answer without usage: the next request is served.
    let (report, _) = exchange(&turn, &claude_post(CLAUDE_HEADERS)).await;
    assert_eq!(report.error, None);
    assert_eq!(usage_of(&turn), (100, 20, 120));
    // Its model is checked too, and server tools refused.
    let count_tokens =
        |body: &str| post("/v1/messages/count_tokens?beta=true", body, CLAUDE_HEADERS);
    let bad = json!({"model": "claude-opus-4-1", "messages": []}).to_string();
    let (e, _) = refused_by(&turn, &upstream, &count_tokens(&bad)).await;
    assert_eq!(e, GatewayError::Model);
    let bad = json!({"model": HAIKU, "messages": [], "tools": [{"type": "web_search_20250305", "name": "web_search"}]}).to_string();
    let (e, _) = refused_by(&turn, &upstream, &count_tokens(&bad)).await;
    assert_eq!(e, GatewayError::Tool);
}

#[tokio::test]
async fn the_model_listing_is_answered_by_the_gateway_with_a_404() {
    let (upstream, turn) = claude(vec![]).await;
    for target in ["/v1/models?limit=1000", "/v1/models"] {
        let bytes = format!(
            "GET {target} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer acp-proxy\r\nanthropic-version: 2023-06-01\r\n\r\n"
        );
        let (e, body) = refused_by(&turn, &upstream, bytes.as_bytes()).await;
        assert_eq!(
            (e.code(), e.status()),
            ("PATCH_CANDIDATE_GATEWAY_SIDE_CALL", 404)
        );
        assert_eq!(body["error"]["type"], "not_found_error");
    }
    let u = turn.usage();
    assert_eq!((u.requests, u.forwarded, u.refused), (2, 0, 2));
}

#[tokio::test]
async fn claude_routes_are_exact_in_method_path_and_query() {
    let (upstream, turn) = claude(vec![]).await;
    let body = claude_body();
    let get = "GET /v1/messages?beta=true HTTP/1.1\r\nhost: x\r\n\r\n";
    assert_routes_refused(
        &turn,
        &upstream,
        &body,
        get,
        &[
            ("/v1/messages", "PATCH_CANDIDATE_GATEWAY_QUERY"),
            ("/v1/messages?beta=false", "PATCH_CANDIDATE_GATEWAY_QUERY"),
            (
                "/v1/messages?beta=true&x=1",
                "PATCH_CANDIDATE_GATEWAY_QUERY",
            ),
            ("/v1/messages?", "PATCH_CANDIDATE_GATEWAY_QUERY"),
            ("/v1/messages/count_tokens", "PATCH_CANDIDATE_GATEWAY_QUERY"),
            ("/v1/messages/?beta=true", "PATCH_CANDIDATE_GATEWAY_PATH"),
            ("/v1/complete", "PATCH_CANDIDATE_GATEWAY_PATH"),
            (
                "/v1/messages/batches?beta=true",
                "PATCH_CANDIDATE_GATEWAY_PATH",
            ),
            ("/v1/files", "PATCH_CANDIDATE_GATEWAY_PATH"),
            ("/v1/responses", "PATCH_CANDIDATE_GATEWAY_PATH"),
        ],
    )
    .await;
    let post_models = post("/v1/models", "{}", "");
    let (e, _) = refused_by(&turn, &upstream, &post_models).await;
    assert_eq!(e, GatewayError::Method);
    // A body on a GET is refused.
    let get_body = "GET /v1/models HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}";
    let (e, _) = refused_by(&turn, &upstream, get_body.as_bytes()).await;
    assert_eq!(e, GatewayError::SideCall);
    let not_streamed = json!({"model": CLAUDE, "stream": false, "messages": []}).to_string();
    let (e, _) = refused_by(&turn, &upstream, &post(MESSAGES, &not_streamed, "")).await;
    assert_eq!(e, GatewayError::Stream);
}

#[tokio::test]
async fn claude_usage_events_that_are_malformed_or_out_of_order_count_as_missing() {
    let start_bad = json!({"type": "message_start", "message": {"usage": {"input_tokens": "100", "output_tokens": 1}}});
    let negative = json!({"type": "message_start", "message": {"usage": {"input_tokens": -5}}});
    let cases = vec![
        // No message_start: the deltas' output alone is not a count.
        vec![
            anthropic::message_delta("end_turn", 20),
            anthropic::message_stop(),
        ],
        vec![start_bad, anthropic::message_delta("end_turn", 20)],
        vec![negative, anthropic::message_delta("end_turn", 20)],
        // A start but no delta with a count.
        vec![
            anthropic::message_start(CLAUDE, 100, 0),
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1.5}}),
        ],
    ];
    for events in cases {
        let (upstream, turn) = claude(vec![Reply::Events(events.clone())]).await;
        let body = claude_body();
        let (report, _) = exchange(&turn, &post(MESSAGES, &body, "")).await;
        assert_eq!(report.error, Some(GatewayError::UsageMissing), "{events:?}");
        assert_eq!(turn.usage().usage_missing, 1);
        // Fails closed: the next request is refused.
        let (e, _) = refused_by(&turn, &upstream, &post(MESSAGES, &body, "")).await;
        assert_eq!(e, GatewayError::UsageMissing);
    }
}

#[tokio::test]
async fn huge_usage_numbers_saturate_and_spend_the_token_budget() {
    let huge = vec![
        json!({"type": "message_start", "message": {"usage": {
            "input_tokens": u64::MAX, "cache_read_input_tokens": u64::MAX, "output_tokens": 1}}}),
        anthropic::message_delta("end_turn", u64::MAX),
    ];
    let (upstream, turn) = claude(vec![Reply::Events(huge)]).await;
    let body = claude_body();
    let (report, _) = exchange(&turn, &post(MESSAGES, &body, "")).await;
    assert_eq!(report.error, None);
    assert_eq!(usage_of(&turn), (u64::MAX, u64::MAX, u64::MAX));
    let (e, _) = refused_by(&turn, &upstream, &post(MESSAGES, &body, "")).await;
    assert_eq!(e.code(), "PATCH_CANDIDATE_GATEWAY_BUDGET_TOKENS");
}

#[tokio::test]
async fn a_usage_event_longer_than_the_line_cap_is_skipped_not_buffered() {
    let pad = "x".repeat(crate::MAX_EVENT_LINE + 16);
    let events = vec![
        anthropic::message_start(CLAUDE, 100, 0),
        json!({"type": "message_delta", "pad": pad, "usage": {"output_tokens": 20}}),
    ];
    let (_upstream, turn) = claude(vec![Reply::Events(events)]).await;
    let (report, _) = exchange(&turn, &claude_post("")).await;
    assert_eq!(report.error, Some(GatewayError::UsageMissing));
}

#[tokio::test]
async fn a_reflecting_anthropic_upstream_never_gets_x_api_key_into_the_channel() {
    for status in [200, 401] {
        let (_upstream, turn) = claude(vec![Reply::Reflect { status, split: 40 }]).await;
        let (report, text) = exchange(&turn, &claude_post(CLAUDE_HEADERS)).await;
        assert!(report.scrubbed >= 2, "raw and base64: {}", report.scrubbed);
        assert!(text.contains(crate::SCRUB_MARKER));
        assert_eq!(turn.usage().scrubbed, report.scrubbed);
    }
}

#[tokio::test]
async fn a_gemini_stream_is_forwarded_with_x_goog_api_key_and_the_last_chunk_counted() {
    let (upstream, turn) = gem(vec![gemini::text("Done.", USAGE)]).await;
    let body = gemini_body(&gemini_tools());
    let (report, text) = exchange(&turn, &post(&stream_target(FLASH), &body, GEMINI_HEADERS)).await;
    assert_streamed(&report, &text, FLASH);
    assert!(text.contains("\"finishReason\":\"STOP\""));
    // The first chunk reported 100 prompt tokens, the last the cumulative 100/20/120.
    assert_eq!(usage_of(&turn), (100, 20, 120));
    let forwarded = &upstream.requests()[0];
    assert_eq!(forwarded.target, stream_target(FLASH));
    assert_eq!(forwarded.header("x-goog-api-key"), Some(KEY));
    assert_eq!(
        forwarded
            .headers
            .iter()
            .filter(|(n, _)| n == "x-goog-api-key")
            .count(),
        1
    );
    assert_eq!(forwarded.header("authorization"), None);
    assert_eq!(
        forwarded.header("x-goog-api-client"),
        Some("google-genai-sdk/1.30.0 gl-node/v20.20.2")
    );
    assert_eq!(
        forwarded.json().unwrap(),
        serde_json::from_str::<Value>(&body).unwrap()
    );
}

#[tokio::test]
async fn the_gemini_model_in_the_path_is_parsed_strictly_and_allow_listed() {
    let (upstream, turn) = gem(vec![]).await;
    let body = gemini_body(&gemini_tools());
    let long = "a".repeat(crate::provider::MAX_PATH_MODEL + 1);
    for (model, code) in [
        ("gemini-2.5-pro", "PATCH_CANDIDATE_GATEWAY_MODEL"),
        ("gemini-2.5-flash-lite", "PATCH_CANDIDATE_GATEWAY_MODEL"),
        ("Gemini-2.5-flash", "PATCH_CANDIDATE_GATEWAY_MODEL"),
        ("", "PATCH_CANDIDATE_GATEWAY_PATH"),
        ("../gemini-2.5-flash", "PATCH_CANDIDATE_GATEWAY_PATH"),
        ("gemini-2.5-flash/x", "PATCH_CANDIDATE_GATEWAY_PATH"),
        ("gemini%2D2.5-flash", "PATCH_CANDIDATE_GATEWAY_PATH"),
        ("-gemini", "PATCH_CANDIDATE_GATEWAY_PATH"),
        ("gemini-2.5-flash:x", "PATCH_CANDIDATE_GATEWAY_PATH"),
        (long.as_str(), "PATCH_CANDIDATE_GATEWAY_PATH"),
    ] {
        let (e, body) = refused_by(&turn, &upstream, &post(&stream_target(model), &body, "")).await;
        assert_eq!(e.code(), code, "{model}");
        assert_eq!(body["error"]["code"], e.status());
    }
    let (e, body) = refused_by(
        &turn,
        &upstream,
        &post(
            &stream_target("gemini-2.5-pro"),
            &gemini_body(&json!([])),
            "",
        ),
    )
    .await;
    assert_eq!(e, GatewayError::Model);
    assert_eq!(body["error"]["status"], "PERMISSION_DENIED");
    // The side calls name their model in the path too, and it is checked the same way.
    for action in ["generateContent", "countTokens"] {
        let (e, body) = refused_by(
            &turn,
            &upstream,
            &post(
                &format!("/v1beta/models/gemini-2.5-pro:{action}"),
                &gemini_body(&json!([])),
                "",
            ),
        )
        .await;
        assert_eq!(e, GatewayError::Model, "{action}");
        assert_eq!(body["error"]["status"], "PERMISSION_DENIED");
    }
}

#[tokio::test]
async fn gemini_routes_are_exact_in_method_path_and_query() {
    let (upstream, turn) = gem(vec![]).await;
    let body = gemini_body(&gemini_tools());
    let get = format!("GET {} HTTP/1.1\r\nhost: x\r\n\r\n", stream_target(FLASH));
    assert_routes_refused(
        &turn,
        &upstream,
        &body,
        &get,
        &[
            (
                "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
                "PATCH_CANDIDATE_GATEWAY_QUERY",
            ),
            (
                "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=json",
                "PATCH_CANDIDATE_GATEWAY_QUERY",
            ),
            (
                "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse&key=x",
                "PATCH_CANDIDATE_GATEWAY_QUERY",
            ),
            (
                "/v1beta/models/gemini-2.5-flash:generateContent?alt=sse",
                "PATCH_CANDIDATE_GATEWAY_QUERY",
            ),
            (
                "/v1beta/models/gemini-2.5-flash:countTokens?key=x",
                "PATCH_CANDIDATE_GATEWAY_QUERY",
            ),
            (
                "/v1beta/models/gemini-2.5-flash:embedContent",
                "PATCH_CANDIDATE_GATEWAY_PATH",
            ),
            (
                "/v1beta/models/gemini-2.5-flash",
                "PATCH_CANDIDATE_GATEWAY_PATH",
            ),
            (
                "/v1/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
                "PATCH_CANDIDATE_GATEWAY_PATH",
            ),
            (
                "/v1beta/tunedModels/x:generateContent",
                "PATCH_CANDIDATE_GATEWAY_PATH",
            ),
            ("/v1beta/models", "PATCH_CANDIDATE_GATEWAY_PATH"),
            ("/upload/v1beta/files", "PATCH_CANDIDATE_GATEWAY_PATH"),
        ],
    )
    .await;
}

#[tokio::test]
async fn gemini_server_tools_are_refused() {
    let (upstream, turn) = gem(vec![]).await;
    for tool in [
        json!({"googleSearch": {}}),
        json!({"googleSearchRetrieval": {"dynamicRetrievalConfig": {"mode": "MODE_DYNAMIC"}}}),
        json!({"urlContext": {}}),
        json!({"codeExecution": {}}),
        json!({"google_search": {}}),
        json!({"code_execution": {}}),
        json!({"functionDeclarations": [], "googleSearch": {}}),
        json!({"computerUse": {"environment": "ENVIRONMENT_BROWSER"}}),
    ] {
        let mut tools = gemini_tools();
        tools.as_array_mut().unwrap().push(tool.clone());
        for target in [
            stream_target(FLASH),
            format!("/v1beta/models/{FLASH}:generateContent"),
        ] {
            let (e, _) =
                refused_by(&turn, &upstream, &post(&target, &gemini_body(&tools), "")).await;
            assert_eq!(e, GatewayError::Tool, "{tool} on {target}");
        }
    }
    // Duplicate tools lists are refused as a shape policy cannot read.
    let dup = r#"{"contents":[],"tools":[],"tools":[{"googleSearch":{}}]}"#;
    let (e, _) = refused_by(&turn, &upstream, &post(&stream_target(FLASH), dup, "")).await;
    assert_eq!(e, GatewayError::Body);
}

#[tokio::test]
async fn generate_content_is_forwarded_and_its_usage_metadata_counted() {
    let side = Usage {
        input: 30,
        output: 5,
        total: 35,
    };
    let (upstream, turn) = gem(vec![
        gemini::generate_content("true", side),
        Reply::Status {
            status: 200,
            body: r#"{"totalTokens": 77}"#.to_owned(),
        },
        gemini::text("Done.", USAGE),
    ])
    .await;
    let target = format!("/v1beta/models/{FLASH}:generateContent");
    let (report, text) = exchange(&turn, &gemini_post(&target, &json!([]))).await;
    assert_eq!(report.error, None);
    assert!(text.starts_with("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"));
    assert_eq!(report.usage.map(|u| u.total_tokens), Some(35));
    assert_eq!(usage_of(&turn), (30, 5, 35));
    assert_eq!(upstream.requests()[0].target, target);
    assert_eq!(upstream.requests()[0].header("x-goog-api-key"), Some(KEY));
    // countTokens: forwarded, no tokens, not an answer without usage.
    let count = format!("/v1beta/models/{FLASH}:countTokens");
    let (report, text) = exchange(&turn, &gemini_post(&count, &json!([]))).await;
    assert_eq!(report.error, None);
    assert!(text.ends_with(r#"{"totalTokens": 77}"#));
    assert_eq!(usage_of(&turn), (30, 5, 35));
    let (report, _) = exchange(&turn, &gemini_post(&stream_target(FLASH), &gemini_tools())).await;
    assert_eq!(report.error, None);
    assert_eq!(usage_of(&turn), (130, 25, 155));
    let u = turn.usage();
    assert_eq!((u.requests, u.forwarded, u.usage_missing), (3, 3, 0));
}

#[tokio::test]
async fn gemini_answers_without_a_complete_count_fail_closed() {
    let unfinished = Reply::Data(vec![gemini::chunk(
        json!([{"text": "a"}]),
        false,
        Some(USAGE),
    )]);
    let no_metadata = Reply::Data(vec![gemini::chunk(json!([{"text": "a"}]), true, None)]);
    let bad_numbers = Reply::Data(vec![json!({
        "candidates": [{"finishReason": "STOP"}],
        "usageMetadata": {"promptTokenCount": "100", "totalTokenCount": 120}
    })]);
    let json_without = Reply::Status {
        status: 200,
        body: r#"{"candidates":[{"content":{"parts":[{"text":"x"}]},"finishReason":"STOP"}]}"#
            .to_owned(),
    };
    let stream = stream_target(FLASH);
    let generate = format!("/v1beta/models/{FLASH}:generateContent");
    for (reply, target) in [
        (unfinished, &stream),
        (no_metadata, &stream),
        (bad_numbers, &stream),
        (json_without, &generate),
    ] {
        let (upstream, turn) = gem(vec![reply.clone()]).await;
        let (report, _) = exchange(&turn, &post(target, &gemini_body(&json!([])), "")).await;
        assert_eq!(report.error, Some(GatewayError::UsageMissing), "{reply:?}");
        let (e, _) = refused_by(
            &turn,
            &upstream,
            &post(target, &gemini_body(&json!([])), ""),
        )
        .await;
        assert_eq!(e, GatewayError::UsageMissing);
    }
    // A blocked prompt reports its count without a candidate.
    let blocked = Reply::Data(vec![json!({
        "promptFeedback": {"blockReason": "SAFETY"},
        "usageMetadata": {"promptTokenCount": 9, "totalTokenCount": 9}
    })]);
    let (_upstream, turn) = gem(vec![blocked]).await;
    let (report, _) = exchange(&turn, &post(&stream, &gemini_body(&json!([])), "")).await;
    assert_eq!(report.error, None);
    assert_eq!(usage_of(&turn), (9, 0, 9));
}

#[tokio::test]
async fn a_reflecting_gemini_upstream_never_gets_x_goog_api_key_into_the_channel() {
    let (_upstream, turn) = gem(vec![Reply::Reflect {
        status: 403,
        split: 17,
    }])
    .await;
    let (report, text) =
        exchange(&turn, &gemini_post(&stream_target(FLASH), &gemini_tools())).await;
    assert!(report.scrubbed >= 2);
    assert!(text.contains(crate::SCRUB_MARKER));
}

#[tokio::test]
async fn an_upgrade_is_refused_at_once_by_every_provider() {
    let websocket = |target: &str| {
        format!(
            "GET {target} HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\r\n"
        )
    };
    let cases: Vec<(Arc<dyn Provider>, &str, String)> = vec![
        (Arc::new(OpenAiResponses), "/v1", websocket("/v1/responses")),
        (
            ProviderKind::AnthropicMessages.provider(),
            "/v1",
            websocket(MESSAGES),
        ),
        (
            ProviderKind::Gemini.provider(),
            "/v1beta",
            websocket(&stream_target(FLASH)),
        ),
        // On any path, and announced by `connection` alone, in any case.
        (Arc::new(OpenAiResponses), "/v1", websocket("/elsewhere")),
        (
            ProviderKind::AnthropicMessages.provider(),
            "/v1",
            String::from_utf8(claude_post("connection: keep-alive, UPGRADE\r\n")).unwrap(),
        ),
        (
            ProviderKind::Gemini.provider(),
            "/v1beta",
            String::from_utf8(post(&stream_target(FLASH), "{}", "Upgrade: h2c\r\n")).unwrap(),
        ),
    ];
    for (provider, base, bytes) in cases {
        let mut config = claude_config();
        config.models.push(FLASH.to_owned());
        config.models.push("gpt-5.3-codex".to_owned());
        let name = provider.name();
        let (upstream, turn) = setup(provider, base, vec![], config).await;
        let (e, _) = refused_by(&turn, &upstream, bytes.as_bytes()).await;
        assert_eq!(
            (e.code(), e.status()),
            ("PATCH_CANDIDATE_GATEWAY_UPGRADE", 426),
            "{name}"
        );
    }
}

#[test]
fn providers_are_selected_by_name() {
    for kind in ProviderKind::ALL {
        assert_eq!(kind.name().parse::<ProviderKind>(), Ok(kind));
        assert_eq!(kind.provider().name(), kind.name());
        assert_eq!(kind.to_string(), kind.name());
    }
    for bad in ["", "anthropic", "Gemini", "openai-responses "] {
        assert!(bad.parse::<ProviderKind>().is_err(), "{bad}");
    }
    let e = "x".parse::<ProviderKind>().unwrap_err();
    assert!(
        e.to_string()
            .starts_with("PATCH_CANDIDATE_GATEWAY_PROVIDER: ")
    );
}
