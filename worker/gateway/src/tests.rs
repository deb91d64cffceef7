use std::sync::Arc;

use pretty_assertions::assert_eq;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::provider::UnknownProvider;
use crate::testkit::{Reply, ScriptedUpstream, Usage};
use crate::{
    ChannelReport, Credential, Gateway, GatewayConfig, GatewayError, GatewaySetupError,
    OpenAiResponses, TurnGateway, UpstreamUrl,
};

const KEY: &str = "sk-test-7f3a9c1e5b2d4f6a8c0e";

fn body(model: &str) -> String {
    serde_json::json!({
        "model": model,
        "stream": true,
        "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
        "tools": [{"type": "custom", "name": "apply_patch"}, {"type": "function", "name": "shell"}]
    })
    .to_string()
}

fn request_with(body: &str, extra_headers: &str) -> Vec<u8> {
    format!(
        "POST /v1/responses HTTP/1.1\r\nhost: 127.0.0.1:8417\r\ncontent-type: application/json\r\naccept: text/event-stream\r\n{extra_headers}content-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn request(model: &str) -> Vec<u8> {
    request_with(&body(model), "")
}

fn config() -> GatewayConfig {
    GatewayConfig::for_model("gpt-5.3-codex")
}

async fn setup(replies: Vec<Reply>, config: GatewayConfig) -> (ScriptedUpstream, TurnGateway) {
    let upstream = ScriptedUpstream::start(replies).await.unwrap();
    let url: UpstreamUrl = upstream.base_url().parse().unwrap();
    let gateway = Gateway::new(
        config,
        Arc::new(OpenAiResponses),
        Credential::from_value(KEY).unwrap(),
        url,
    )
    .unwrap();
    let turn = Arc::new(gateway).start_turn();
    (upstream, turn)
}

/// Sends `bytes` on a fresh channel (keeping the agent's write side open unless `fin`), returns
/// the report and everything the agent received.
async fn exchange(turn: &TurnGateway, bytes: &[u8], fin: bool) -> (ChannelReport, Vec<u8>) {
    let (gateway_end, mut agent) = tokio::io::duplex(1 << 16);
    let serving = turn.clone();
    let task = tokio::spawn(async move { serving.serve(gateway_end).await });
    agent.write_all(bytes).await.unwrap();
    if fin {
        agent.shutdown().await.unwrap();
    }
    let mut received = Vec::new();
    agent.read_to_end(&mut received).await.unwrap();
    let report = task.await.unwrap();
    assert!(
        !contains(&received, KEY.as_bytes()),
        "the credential reached the agent"
    );
    (report, received)
}

/// [`exchange`] of the usual streamed request for `gpt-5.3-codex`.
async fn send_codex(turn: &TurnGateway) -> (ChannelReport, Vec<u8>) {
    exchange(turn, &request("gpt-5.3-codex"), false).await
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn status_of(received: &[u8]) -> u16 {
    let text = String::from_utf8_lossy(received);
    text.split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

async fn refused(bytes: &[u8], config: GatewayConfig) -> (GatewayError, u16, usize) {
    let (upstream, turn) = setup(vec![], config).await;
    let (report, received) = exchange(&turn, bytes, false).await;
    let error = report.error.clone().expect("a refusal");
    let text = String::from_utf8_lossy(&received).into_owned();
    assert!(text.contains(error.code()), "the agent sees the code");
    assert!(text.contains("connection: close"));
    assert_eq!(report.status, Some(error.status()));
    assert!(!report.reset);
    (error, status_of(&received), upstream.requests().len())
}

#[tokio::test]
async fn a_valid_request_is_forwarded_with_the_credential_and_streamed_back() {
    let (upstream, turn) = setup(vec![Reply::edit_file("src/lib.rs", "a", "b")], config()).await;
    let (report, received) = send_codex(&turn).await;
    assert_eq!(report.error, None);
    assert_eq!(report.status, Some(200));
    assert_eq!(report.model.as_deref(), Some("gpt-5.3-codex"));
    let text = String::from_utf8(received.clone()).unwrap();
    assert!(text.starts_with("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"));
    assert!(text.contains("event: response.output_item.done"));
    assert!(text.contains("*** Update File: src/lib.rs"));
    assert!(text.ends_with("\n\n"));
    let requests = upstream.requests();
    assert_eq!(requests.len(), 1);
    let forwarded = &requests[0];
    assert_eq!(forwarded.method, "POST");
    assert_eq!(forwarded.target, "/v1/responses");
    assert_eq!(
        forwarded.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(
        forwarded.json().unwrap(),
        serde_json::from_str::<serde_json::Value>(&body("gpt-5.3-codex")).unwrap()
    );
    let usage = turn.usage();
    assert_eq!((usage.requests, usage.forwarded, usage.refused), (1, 1, 0));
    assert_eq!(
        (usage.input_tokens, usage.output_tokens, usage.total_tokens),
        (100, 20, 120)
    );
    assert_eq!(usage.response_bytes, report.response_bytes);
    assert_eq!(usage.request_bytes, request("gpt-5.3-codex").len() as u64);
}

#[tokio::test]
async fn agent_headers_other_than_the_allowlist_never_reach_the_upstream() {
    let (upstream, turn) = setup(vec![Reply::message("ok")], config()).await;
    let bytes = request_with(
        &body("gpt-5.3-codex"),
        "authorization: Bearer agent-made-up\r\nx-forwarded-for: 10.0.0.1\r\ncookie: a=b\r\noriginator: codex_cli_rs\r\n",
    );
    let (report, _) = exchange(&turn, &bytes, false).await;
    assert_eq!(report.error, None);
    let forwarded = &upstream.requests()[0];
    let names: Vec<&str> = forwarded.headers.iter().map(|(n, _)| n.as_str()).collect();
    assert!(!names.contains(&"x-forwarded-for") && !names.contains(&"cookie"));
    assert_eq!(forwarded.header("originator"), Some("codex_cli_rs"));
    let auth: Vec<&str> = forwarded
        .headers
        .iter()
        .filter(|(n, _)| n == "authorization")
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(auth, vec![format!("Bearer {KEY}").as_str()]);
}

#[tokio::test]
async fn smuggling_shapes_are_refused_before_anything_is_forwarded() {
    let b = body("gpt-5.3-codex");
    let n = b.len();
    let cases: Vec<(String, &str)> = vec![
        (
            format!(
                "POST /v1/responses HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n{n:x}\r\n{b}\r\n0\r\n\r\n"
            ),
            "PATCH_CANDIDATE_GATEWAY_TRANSFER_ENCODING",
        ),
        (
            format!(
                "POST /v1/responses HTTP/1.1\r\nhost: x\r\ncontent-length: {n}\r\ntransfer-encoding: chunked\r\n\r\n{b}"
            ),
            "PATCH_CANDIDATE_GATEWAY_TRANSFER_ENCODING",
        ),
        (
            format!(
                "POST /v1/responses HTTP/1.1\r\nhost: x\r\nTransfer-Encoding : chunked\r\ncontent-length: {n}\r\n\r\n{b}"
            ),
            "PATCH_CANDIDATE_GATEWAY_HEADER",
        ),
        (
            format!(
                "POST /v1/responses HTTP/1.1\r\nhost: x\r\ncontent-length: {n}\r\ncontent-length: {n}\r\n\r\n{b}"
            ),
            "PATCH_CANDIDATE_GATEWAY_CONTENT_LENGTH",
        ),
        (
            format!(
                "POST /v1/responses HTTP/1.1\r\nhost: x\r\ncontent-length: {n}, {n}\r\n\r\n{b}"
            ),
            "PATCH_CANDIDATE_GATEWAY_CONTENT_LENGTH",
        ),
        (
            format!("POST /v1/responses HTTP/1.1\r\nhost: x\r\ncontent-length: +{n}\r\n\r\n{b}"),
            "PATCH_CANDIDATE_GATEWAY_CONTENT_LENGTH",
        ),
        (
            format!("POST /v1/responses HTTP/1.1\r\nhost: x\r\n\r\n{b}"),
            "PATCH_CANDIDATE_GATEWAY_CONTENT_LENGTH",
        ),
        (
            format!("POST /v1/responses HTTP/1.1\nhost: x\r\ncontent-length: {n}\r\n\r\n{b}"),
            "PATCH_CANDIDATE_GATEWAY_HEADER",
        ),
        (
            format!("POST /v1/responses HTTP/1.1\r\nhost: x\ncontent-length: {n}\r\n\r\n{b}"),
            "PATCH_CANDIDATE_GATEWAY_HEADER",
        ),
        (
            format!("POST /v1/responses HTTP/1.1\r\nhost: x\rcontent-length: {n}\r\n\r\n{b}"),
            "PATCH_CANDIDATE_GATEWAY_HEADER",
        ),
        (
            format!("POST /v1/responses HTTP/1.1\r\nhost: x\r\ncontent-length: {n}\r\n\n{b}"),
            "PATCH_CANDIDATE_GATEWAY_HEADER",
        ),
        (
            format!(
                "POST /v1/responses HTTP/1.1\r\nhost: x\r\nx-a: 1\r\n  folded\r\ncontent-length: {n}\r\n\r\n{b}"
            ),
            "PATCH_CANDIDATE_GATEWAY_HEADER",
        ),
        (
            format!(
                "POST /v1/responses HTTP/1.1\r\nhost: x\r\nx-a: \x01\r\ncontent-length: {n}\r\n\r\n{b}"
            ),
            "PATCH_CANDIDATE_GATEWAY_HEADER",
        ),
        (
            format!(
                "POST /v1/responses HTTP/1.1\r\nhost: x\r\nhost: y\r\ncontent-length: {n}\r\n\r\n{b}"
            ),
            "PATCH_CANDIDATE_GATEWAY_HEADER_DUPLICATE",
        ),
        (
            format!("POST /v1/responses HTTP/1.1\r\ncontent-length: {n}\r\n\r\n{b}"),
            "PATCH_CANDIDATE_GATEWAY_HEADER",
        ),
        (
            format!(
                "POST /v1/responses HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\ncontent-length: {n}\r\n\r\n{b}"
            ),
            "PATCH_CANDIDATE_GATEWAY_HEADER_REFUSED",
        ),
        (
            format!(
                "POST /v1/responses HTTP/1.1\r\nhost: x\r\nupgrade: h2c\r\ncontent-length: {n}\r\n\r\n{b}"
            ),
            "PATCH_CANDIDATE_GATEWAY_UPGRADE",
        ),
        (
            format!(
                "POST http://api.openai.com/v1/responses HTTP/1.1\r\nhost: x\r\ncontent-length: {n}\r\n\r\n{b}"
            ),
            "PATCH_CANDIDATE_GATEWAY_TARGET",
        ),
        (
            "CONNECT api.openai.com:443 HTTP/1.1\r\nhost: api.openai.com:443\r\n\r\n".to_owned(),
            "PATCH_CANDIDATE_GATEWAY_TARGET",
        ),
        (
            "OPTIONS * HTTP/1.1\r\nhost: x\r\n\r\n".to_owned(),
            "PATCH_CANDIDATE_GATEWAY_TARGET",
        ),
        (
            format!(
                "POST //evil/v1/responses HTTP/1.1\r\nhost: x\r\ncontent-length: {n}\r\n\r\n{b}"
            ),
            "PATCH_CANDIDATE_GATEWAY_TARGET",
        ),
        (
            format!("GET /v1/responses HTTP/1.1\r\nhost: x\r\ncontent-length: {n}\r\n\r\n{b}"),
            "PATCH_CANDIDATE_GATEWAY_METHOD",
        ),
        (
            format!(
                "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: {n}\r\n\r\n{b}"
            ),
            "PATCH_CANDIDATE_GATEWAY_PATH",
        ),
        (
            format!("POST /v1/responses?x=1 HTTP/1.1\r\nhost: x\r\ncontent-length: {n}\r\n\r\n{b}"),
            "PATCH_CANDIDATE_GATEWAY_QUERY",
        ),
        (
            format!("POST /v1/responses HTTP/1.0\r\nhost: x\r\ncontent-length: {n}\r\n\r\n{b}"),
            "PATCH_CANDIDATE_GATEWAY_VERSION",
        ),
        (
            format!("POST /v1/responses HTTP/2\r\nhost: x\r\ncontent-length: {n}\r\n\r\n{b}"),
            "PATCH_CANDIDATE_GATEWAY_REQUEST_LINE",
        ),
        (
            format!("POST  /v1/responses HTTP/1.1\r\nhost: x\r\ncontent-length: {n}\r\n\r\n{b}"),
            "PATCH_CANDIDATE_GATEWAY_REQUEST_LINE",
        ),
        (
            format!("\r\nPOST /v1/responses HTTP/1.1\r\nhost: x\r\ncontent-length: {n}\r\n\r\n{b}"),
            "PATCH_CANDIDATE_GATEWAY_REQUEST_LINE",
        ),
        (
            format!(
                "POST /v1/responses HTTP/1.1\r\nhost: x\r\ncontent-length: {n}\r\n\r\n{b}GET / HTTP/1.1\r\n\r\n"
            ),
            "PATCH_CANDIDATE_GATEWAY_INCOMPLETE",
        ),
    ];
    for (bytes, code) in cases {
        let (error, status, forwarded) = refused(bytes.as_bytes(), config()).await;
        assert_eq!(error.code(), code, "{}", bytes.escape_debug());
        assert_eq!(status, error.status());
        assert_eq!(forwarded, 0, "{code} reached the upstream");
    }
}

#[tokio::test]
async fn header_floods_are_refused() {
    let mut many = String::new();
    for i in 0..65 {
        many.push_str(&format!("x-h{i}: v\r\n"));
    }
    let (e, status, _) = refused(&request_with(&body("gpt-5.3-codex"), &many), config()).await;
    assert_eq!(
        (e.code(), status),
        ("PATCH_CANDIDATE_GATEWAY_HEADERS_SIZE", 431)
    );
    let huge = format!("x-big: {}\r\n", "a".repeat(40 * 1024));
    let (e, _, _) = refused(&request_with(&body("gpt-5.3-codex"), &huge), config()).await;
    assert_eq!(e, GatewayError::HeadersSize { limit: 32 * 1024 });
}

#[tokio::test]
async fn a_slow_request_hits_the_read_deadline() {
    let config = GatewayConfig {
        read_timeout_ms: 100,
        ..config()
    };
    let (upstream, turn) = setup(vec![], config).await;
    // Half a head, then nothing (the agent keeps its side open).
    let (report, received) =
        exchange(&turn, b"POST /v1/responses HTTP/1.1\r\nhost: x\r\n", false).await;
    assert_eq!(
        report.error,
        Some(GatewayError::ReadTimeout { millis: 100 })
    );
    assert_eq!(status_of(&received), 408);
    assert!(upstream.requests().is_empty());
}

#[tokio::test]
async fn a_channel_closed_before_the_body_is_complete_is_refused() {
    let full = request("gpt-5.3-codex");
    let (e, _, forwarded) = {
        let (upstream, turn) = setup(vec![], config()).await;
        let (report, _) = exchange(&turn, &full[..full.len() - 5], true).await;
        (report.error.unwrap(), 0, upstream.requests().len())
    };
    assert_eq!((e, forwarded), (GatewayError::Incomplete, 0));
}

#[tokio::test]
async fn an_oversized_body_is_refused_from_its_declared_length() {
    let small = GatewayConfig {
        max_request_body_bytes: 64,
        ..config()
    };
    let (e, status, forwarded) = refused(&request("gpt-5.3-codex"), small).await;
    assert_eq!(
        (e, status, forwarded),
        (GatewayError::BodySize { limit: 64 }, 413, 0)
    );
    // A declared length beyond any cap, with no body at all.
    let (e, _, _) = refused(
        b"POST /v1/responses HTTP/1.1\r\nhost: x\r\ncontent-length: 99999999999999\r\n\r\n",
        config(),
    )
    .await;
    assert_eq!(e.code(), "PATCH_CANDIDATE_GATEWAY_BODY_SIZE");
}

#[tokio::test]
async fn body_policy_is_enforced() {
    let cases: Vec<(String, GatewayError)> = vec![
        ("not json".to_owned(), GatewayError::Body),
        ("[1]".to_owned(), GatewayError::Body),
        (r#"{"stream":true}"#.to_owned(), GatewayError::Body),
        (r#"{"model":"gpt-5.3-codex","stream":false}"#.to_owned(), GatewayError::Stream),
        (r#"{"model":"gpt-5.3-codex"}"#.to_owned(), GatewayError::Stream),
        (r#"{"model":"o3-pro","stream":true}"#.to_owned(), GatewayError::Model),
        (r#"{"model":"gpt-5.3-codex","stream":true,"tools":[{"type":"web_search"}]}"#.to_owned(), GatewayError::Tool),
        (r#"{"model":"gpt-5.3-codex","stream":true,"tools":[{"type":"function","name":"web_search"}]}"#.to_owned(), GatewayError::Tool),
        (r#"{"model":"gpt-5.3-codex","stream":true,"tools":{"type":"web_search"}}"#.to_owned(), GatewayError::Body),
    ];
    for (b, expected) in cases {
        let (e, status, forwarded) = refused(&request_with(&b, ""), config()).await;
        assert_eq!(e, expected, "{b}");
        assert_eq!(status, expected.status());
        assert_eq!(forwarded, 0);
    }
}

#[tokio::test]
async fn a_duplicate_policy_key_is_refused_and_the_body_is_forwarded_as_sent() {
    for b in [
        r#"{"model":"o3-pro","model":"gpt-5.3-codex","stream":true}"#,
        r#"{"model":"gpt-5.3-codex","stream":true,"mod\u0065l":"o3-pro"}"#,
        r#"{"model":"gpt-5.3-codex","stream":true,"tools":[{"type":"function","type":"web_search"}]}"#,
    ] {
        let (e, status, forwarded) = refused(&request_with(b, ""), config()).await;
        assert_eq!((e, status, forwarded), (GatewayError::Body, 400, 0), "{b}");
    }
    // The forwarded body is the agent's bytes, whitespace, key order and escapes included.
    let (upstream, turn) = setup(vec![Reply::message("ok")], config()).await;
    let b = "{ \"stream\" : true,\n \"input\":[1.50, \"\\u00e9\"], \"model\":\"gpt-5.3-codex\" }";
    let (report, _) = exchange(&turn, &request_with(b, ""), false).await;
    assert_eq!(report.error, None);
    assert_eq!(upstream.requests()[0].body, b.as_bytes().to_vec());
}

/// Hostile shapes of about `bytes` that an 8 MiB body cap lets through.
fn hostile_bodies(model: &str) -> Vec<(&'static str, String, GatewayError)> {
    let head = format!(r#"{{"model":"{model}","stream":true,"input":"#);
    let n = 300_000;
    vec![
        (
            "tiny array",
            format!("{head}[{}0]}}", "0,".repeat(n)),
            GatewayError::BodyValues { limit: 262_144 },
        ),
        (
            "many keys",
            format!(
                "{head}{{{}\"end\":0}}}}",
                (0..n).map(|i| format!("\"k{i}\":0,")).collect::<String>()
            ),
            GatewayError::BodyValues { limit: 262_144 },
        ),
        (
            "deep nesting",
            format!("{head}{}{}}}", "[".repeat(65), "]".repeat(65)),
            GatewayError::BodyDepth { limit: 64 },
        ),
        (
            "huge string",
            format!("{head}\"{}\"}}", "a".repeat(4 * 1_048_576 + 1)),
            GatewayError::BodyString {
                limit: 4 * 1_048_576,
            },
        ),
        (
            "huge key",
            format!("{head}{{\"{}\":1}}}}", "k".repeat(4 * 1_048_576 + 1)),
            GatewayError::BodyString {
                limit: 4 * 1_048_576,
            },
        ),
        (
            "duplicate model keys",
            format!(
                "{{{}\"stream\":true}}",
                format!(r#""model":"{model}","#).repeat(1000)
            ),
            GatewayError::Body,
        ),
    ]
}

#[tokio::test]
async fn r_hostile_body_shapes_are_refused_by_the_pre_scan_before_policy() {
    // An allowed model and a refused one: the shape is refused either way, before the model is
    // looked at, and nothing is forwarded.
    for model in ["gpt-5.3-codex", "o3-pro"] {
        for (name, body, expected) in hostile_bodies(model) {
            assert!(
                body.len() as u64 <= config().max_request_body_bytes,
                "{name}"
            );
            let (e, status, forwarded) = refused(&request_with(&body, ""), config()).await;
            assert_eq!(e, expected, "{name} ({model})");
            assert_eq!((status, forwarded), (expected.status(), 0), "{name}");
        }
    }
}

#[tokio::test]
async fn bodies_within_the_pre_scan_caps_are_checked_and_forwarded() {
    let (upstream, turn) = setup(vec![], config()).await;
    let head = r#"{"model":"gpt-5.3-codex","stream":true,"input":"#;
    for body in [
        format!("{head}[{}0]}}", "0,".repeat(200_000)),
        format!("{head}{}{}}}", "[".repeat(63), "]".repeat(63)),
        format!("{head}\"{}\"}}", "a".repeat(4 * 1_048_576)),
    ] {
        let (report, _) = exchange(&turn, &request_with(&body, ""), false).await;
        assert_eq!(report.error, None);
        assert_eq!(upstream.requests().last().unwrap().body, body.into_bytes());
    }
}

#[tokio::test]
async fn the_request_budget_refuses_the_next_request() {
    let mut config = config();
    config.budgets.requests = 2;
    let (upstream, turn) = setup(vec![], config).await;
    for _ in 0..2 {
        let (report, _) = send_codex(&turn).await;
        assert_eq!(report.error, None);
    }
    let (report, received) = send_codex(&turn).await;
    assert_eq!(
        report.error,
        Some(GatewayError::BudgetRequests { limit: 2 })
    );
    assert_eq!(status_of(&received), 429);
    assert_eq!(upstream.requests().len(), 2);
    assert_eq!((turn.usage().requests, turn.usage().refused), (3, 1));
}

#[tokio::test]
async fn the_request_bytes_budget_holds() {
    let mut config = config();
    config.budgets.request_bytes = request("gpt-5.3-codex").len() as u64 + 10;
    let (upstream, turn) = setup(vec![], config).await;
    assert_eq!(send_codex(&turn).await.0.error, None);
    let (report, _) = send_codex(&turn).await;
    assert_eq!(
        report.error.unwrap().code(),
        "PATCH_CANDIDATE_GATEWAY_BUDGET_REQUEST_BYTES"
    );
    assert_eq!(upstream.requests().len(), 1);
}

#[tokio::test]
async fn the_token_budget_counts_upstream_usage_and_refuses_once_spent() {
    let mut config = config();
    config.budgets.tokens = 150;
    let usage = Usage {
        input: 90,
        output: 10,
        total: 100,
    };
    let (upstream, turn) = setup(
        vec![
            Reply::message("a").with_usage(usage),
            Reply::message("b").with_usage(usage),
        ],
        config,
    )
    .await;
    assert_eq!(send_codex(&turn).await.0.error, None);
    // 100 < 150: allowed; the answer brings the count to 200.
    let (report, _) = send_codex(&turn).await;
    assert_eq!(report.usage.unwrap().total_tokens, 100);
    let (report, _) = send_codex(&turn).await;
    assert_eq!(
        report.error,
        Some(GatewayError::BudgetTokens { limit: 150 })
    );
    assert_eq!(upstream.requests().len(), 2);
    assert_eq!(turn.usage().total_tokens, 200);
}

#[tokio::test]
async fn an_answer_without_usage_fails_closed_for_the_next_request() {
    let no_usage = Reply::Events(vec![crate::testkit::events::created("r")]);
    let (_upstream, turn) = setup(vec![no_usage], config()).await;
    let (report, _) = send_codex(&turn).await;
    assert_eq!(report.error, Some(GatewayError::UsageMissing));
    assert_eq!(report.status, Some(200));
    let (report, _) = send_codex(&turn).await;
    assert_eq!(report.error, Some(GatewayError::UsageMissing));
    assert_eq!(report.status, Some(429));
}

#[tokio::test]
async fn the_response_budget_cuts_a_huge_answer_and_asks_for_a_reset() {
    let mut config = config();
    config.budgets.response_bytes = 256 * 1024;
    let (_upstream, turn) = setup(
        vec![Reply::Huge {
            bytes: 4 * 1_048_576,
        }],
        config,
    )
    .await;
    let (report, received) = send_codex(&turn).await;
    assert_eq!(
        report.error,
        Some(GatewayError::BudgetResponseBytes { limit: 256 * 1024 })
    );
    assert!(report.reset);
    assert!(report.response_bytes <= 256 * 1024);
    assert!(received.len() as u64 <= 256 * 1024 + 200);
    assert_eq!(status_of(&received), 200);
}

#[tokio::test]
async fn a_stalled_upstream_is_cut_at_the_idle_deadline() {
    let config = GatewayConfig {
        upstream_idle_timeout_ms: 100,
        ..config()
    };
    let stall = Reply::Stall(vec![crate::testkit::events::created("r")]);
    let (_upstream, turn) = setup(vec![stall], config).await;
    let (report, received) = send_codex(&turn).await;
    assert_eq!(
        report.error,
        Some(GatewayError::UpstreamTimeout { millis: 100 })
    );
    assert!(report.reset);
    assert!(String::from_utf8_lossy(&received).contains("response.created"));
}

#[tokio::test]
async fn an_upstream_error_status_is_passed_on_with_a_code() {
    let reply = Reply::Status {
        status: 500,
        body: r#"{"error":"x"}"#.to_owned(),
    };
    let (_upstream, turn) = setup(vec![reply], config()).await;
    let (report, received) = send_codex(&turn).await;
    assert_eq!(
        report.error,
        Some(GatewayError::UpstreamStatus { status: 500 })
    );
    assert_eq!(status_of(&received), 500);
}

#[tokio::test]
async fn an_unreachable_upstream_is_a_clean_502() {
    // Bind then drop a listener: nothing accepts on that port.
    let addr = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let gateway = Gateway::new(
        config(),
        Arc::new(OpenAiResponses),
        Credential::from_value(KEY).unwrap(),
        format!("http://{addr}/v1").parse().unwrap(),
    )
    .unwrap();
    let turn = Arc::new(gateway).start_turn();
    let (report, received) = send_codex(&turn).await;
    assert_eq!(report.error, Some(GatewayError::Upstream));
    assert_eq!(status_of(&received), 502);
}

#[tokio::test]
async fn a_flood_of_concurrent_channels_is_served_and_counted() {
    let (upstream, turn) = setup(vec![], config()).await;
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let turn = turn.clone();
        tasks.push(tokio::spawn(async move { send_codex(&turn).await.0 }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap().error, None);
    }
    assert_eq!(upstream.requests().len(), 32);
    assert!(
        upstream
            .requests()
            .iter()
            .all(|r| r.header("authorization") == Some(&format!("Bearer {KEY}")))
    );
    assert_eq!(turn.usage().total_tokens, 32 * 120);
}

#[test]
fn upstream_urls_are_checked() {
    for ok in [
        "https://api.openai.com/v1",
        "https://api.openai.com/v1/",
        "http://127.0.0.1:9/v1",
        "http://[::1]:9/v1",
        "http://localhost:9/v1",
    ] {
        assert!(ok.parse::<UpstreamUrl>().is_ok(), "{ok}");
    }
    assert_eq!(
        "https://api.openai.com/v1/"
            .parse::<UpstreamUrl>()
            .unwrap()
            .join("responses"),
        "https://api.openai.com/v1/responses"
    );
    for bad in [
        "http://api.openai.com/v1",
        "ftp://127.0.0.1/v1",
        "https://user:pw@api.openai.com/v1",
        "https://api.openai.com/v1?x=1",
        "/v1",
        "http://10.0.0.1/v1",
    ] {
        let e = bad.parse::<UpstreamUrl>().unwrap_err();
        assert_eq!(e.code(), "PATCH_CANDIDATE_GATEWAY_UPSTREAM_URL", "{bad}");
    }
}

#[test]
fn the_config_is_strict() {
    let ok = GatewayConfig::from_json(br#"{"models":["gpt-5.3-codex"],"budgets":{"requests":3}}"#)
        .unwrap();
    assert_eq!(ok.budgets.requests, 3);
    assert_eq!(ok.budgets.tokens, crate::config::Budgets::default().tokens);
    assert!(ok.refused_tools.contains(&"web_search".to_owned()));
    for bad in [
        &br#"{"models":["m"],"extra":1}"#[..],
        br#"{"models":[]}"#,
        br#"{"budgets":{}}"#,
        br#"{"models":["m"],"budgets":{"request":1}}"#,
        br#"{"models":["a b"]}"#,
        br#"{"models":["m"],"read_timeout_ms":0}"#,
    ] {
        let e = GatewayConfig::from_json(bad).unwrap_err();
        assert_eq!(e.code(), "PATCH_CANDIDATE_GATEWAY_CONFIG");
    }
}

#[test]
fn the_credential_is_never_displayed() {
    let c = Credential::from_value(KEY).unwrap();
    assert!(!format!("{c:?}").contains(KEY));
    assert!(Credential::from_value("two words").is_err());
    assert!(Credential::from_value("").is_err());
    // SAFETY-free env check: a name that is surely unset.
    let e = Credential::from_env("PATCH_CANDIDATE_TEST_UNSET_CREDENTIAL_VAR").unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_GATEWAY_CREDENTIAL");
    let dir = tempfile_dir();
    let path = dir.join("key");
    std::fs::write(&path, format!("{KEY}\n")).unwrap();
    let from_file = Credential::from_file(&path).unwrap();
    assert_eq!(from_file.expose(), KEY);
    std::fs::write(&path, format!("{KEY}\n\n")).unwrap();
    let e = Credential::from_file(&path).unwrap_err();
    assert!(!e.to_string().contains(KEY));
    std::fs::remove_file(&path).unwrap();
    std::fs::remove_dir(&dir).unwrap();
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("gateway-test-{}", std::process::id()));
    std::fs::create_dir(&dir).unwrap();
    dir
}

#[test]
fn every_error_follows_the_message_convention() {
    let all = [
        GatewayError::RequestLine,
        GatewayError::Method,
        GatewayError::Target,
        GatewayError::Path,
        GatewayError::Query,
        GatewayError::SideCall,
        GatewayError::Upgrade,
        GatewayError::Version,
        GatewayError::Header,
        GatewayError::HeadersSize { limit: 1 },
        GatewayError::HeaderDuplicate,
        GatewayError::TransferEncoding,
        GatewayError::ContentLength,
        GatewayError::HeaderRefused,
        GatewayError::BodySize { limit: 1 },
        GatewayError::ReadTimeout { millis: 1 },
        GatewayError::Incomplete,
        GatewayError::Body,
        GatewayError::BodyValues { limit: 1 },
        GatewayError::BodyDepth { limit: 1 },
        GatewayError::BodyString { limit: 1 },
        GatewayError::BodyKey,
        GatewayError::ContentUrl,
        GatewayError::ContentFile,
        GatewayError::StoredState,
        GatewayError::Stream,
        GatewayError::Model,
        GatewayError::Tool,
        GatewayError::BudgetRequests { limit: 1 },
        GatewayError::BudgetRequestBytes { limit: 1 },
        GatewayError::BudgetResponseBytes { limit: 1 },
        GatewayError::BudgetTokens { limit: 1 },
        GatewayError::UsageMissing,
        GatewayError::Upstream,
        GatewayError::UpstreamEncoding,
        GatewayError::UpstreamTimeout { millis: 1 },
        GatewayError::UpstreamStatus { status: 500 },
        GatewayError::Cancelled,
    ];
    let mut codes = std::collections::BTreeSet::new();
    for e in &all {
        vocab::check_message_convention(e).unwrap();
        assert!(codes.insert(e.code()));
        assert!((400..600).contains(&e.status()));
    }
    let setup = [
        GatewaySetupError::Config {
            path: "a".into(),
            reason: "b".into(),
        },
        GatewaySetupError::Credential {
            source_name: "x".into(),
        },
        GatewaySetupError::UpstreamUrl { reason: "r" },
        GatewaySetupError::Tls,
    ];
    for e in &setup {
        vocab::check_message_convention(e).unwrap();
    }
    vocab::check_message_convention(&UnknownProvider).unwrap();
    let produced = all
        .iter()
        .map(GatewayError::code)
        .chain(setup.iter().map(GatewaySetupError::code))
        .chain([UnknownProvider.code()]);
    vocab::check_code_table(crate::ERROR_CODES, produced).unwrap();
}

/// Opens a channel, sends `bytes`, reads until `until` appears in the answer, then drops the
/// channel's future as the live loop does on a container RESET. Returns the report and what the
/// agent received when the answer ended (or was refused) before `until` appeared.
async fn reset_once_seen(
    turn: &TurnGateway,
    bytes: &[u8],
    until: &str,
) -> Option<(ChannelReport, Vec<u8>)> {
    let (gateway_end, mut agent) = tokio::io::duplex(1 << 16);
    let serving = turn.clone();
    let task = tokio::spawn(async move { serving.serve(gateway_end).await });
    agent.write_all(bytes).await.unwrap();
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = agent.read(&mut buf).await.unwrap();
        if n == 0 {
            return Some((task.await.unwrap(), received));
        }
        received.extend_from_slice(&buf[..n]);
        if contains(&received, until.as_bytes()) {
            task.abort();
            let _ = task.await;
            return None;
        }
    }
}

fn paced(total: u64, with_usage: bool) -> Reply {
    if with_usage {
        return Reply::paced_partial_answer(total, 300);
    }
    Reply::Paced {
        events: vec![
            crate::testkit::events::created("r"),
            crate::testkit::events::text_delta("partial answer"),
            crate::testkit::events::text_delta("more"),
        ],
        pause_ms: 300,
    }
}

#[tokio::test]
async fn r_a_reset_as_soon_as_text_starts_does_not_dodge_the_token_budget() {
    let mut config = config();
    config.budgets.tokens = 2_000_000;
    let (upstream, turn) = setup(vec![], config).await;
    upstream.set_fallback(paced(1_500_000, true));
    let mut refusals = Vec::new();
    for _ in 0..5 {
        if let Some((report, _)) =
            reset_once_seen(&turn, &request("gpt-5.3-codex"), "partial answer").await
        {
            refusals.push(report.error);
        }
    }
    // The first answer is drained to its usage before the second request is checked
    // (1.5 M < 2 M: allowed); after the second the budget is spent.
    assert_eq!(
        refusals,
        vec![Some(GatewayError::BudgetTokens { limit: 2_000_000 }); 3]
    );
    assert_eq!(upstream.requests().len(), 2);
    let usage = turn.settle().await;
    assert_eq!(
        (usage.total_tokens, usage.drained, usage.usage_missing),
        (3_000_000, 2, 0)
    );
    assert_eq!((usage.forwarded, usage.refused), (2, 3));
}

#[tokio::test]
async fn r_a_reset_answer_that_never_reports_usage_is_recorded_and_fails_closed() {
    let (upstream, turn) = setup(vec![paced(0, false)], config()).await;
    assert!(
        reset_once_seen(&turn, &request("gpt-5.3-codex"), "partial answer")
            .await
            .is_none()
    );
    let (report, received) = reset_once_seen(&turn, &request("gpt-5.3-codex"), "never")
        .await
        .unwrap();
    assert_eq!(report.error, Some(GatewayError::UsageMissing));
    assert_eq!(status_of(&received), 429);
    assert_eq!(upstream.requests().len(), 1);
    let usage = turn.settle().await;
    assert_eq!((usage.usage_missing, usage.drained), (1, 1));
}

#[tokio::test]
async fn an_answer_still_unread_at_the_drain_deadline_counts_as_usage_missing() {
    let config = GatewayConfig {
        upstream_drain_timeout_ms: 200,
        ..config()
    };
    let stall = Reply::Stall(vec![
        crate::testkit::events::created("r"),
        crate::testkit::events::text_delta("partial answer"),
    ]);
    let (_upstream, turn) = setup(vec![stall], config).await;
    assert!(
        reset_once_seen(&turn, &request("gpt-5.3-codex"), "partial answer")
            .await
            .is_none()
    );
    // The drain ends at its own deadline (200 ms), well before the settle deadline (5 s).
    let started = std::time::Instant::now();
    let usage = turn.settle().await;
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
    assert_eq!((usage.usage_missing, usage.total_tokens), (1, 0));
}

#[tokio::test]
async fn r_a_request_pipelined_in_a_later_read_is_refused_like_one_in_the_same_read() {
    // In the same read as the first request (refused before anything is forwarded).
    let mut two = request("gpt-5.3-codex");
    two.extend_from_slice(&request("gpt-5.3-codex"));
    let (e, status, forwarded) = refused(&two, config()).await;
    assert_eq!((e, status, forwarded), (GatewayError::Incomplete, 400, 0));

    // In a later read, while the answer streams: the answer is cut with the same code.
    let (upstream, turn) = setup(vec![], config()).await;
    upstream.set_fallback(paced(120, true));
    let (gateway_end, mut agent) = tokio::io::duplex(1 << 16);
    let serving = turn.clone();
    let task = tokio::spawn(async move { serving.serve(gateway_end).await });
    agent.write_all(&request("gpt-5.3-codex")).await.unwrap();
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    while !contains(&received, b"partial answer") {
        let n = agent.read(&mut buf).await.unwrap();
        assert!(n > 0);
        received.extend_from_slice(&buf[..n]);
    }
    let second = request("gpt-5.3-codex");
    let (first, rest) = second.split_at(10);
    agent.write_all(first).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let _ = agent.write_all(rest).await;
    let report = task.await.unwrap();
    assert_eq!(report.error, Some(GatewayError::Incomplete));
    assert!(report.reset);
    assert_eq!(upstream.requests().len(), 1);
    // The forwarded request is still charged: its answer is drained to its usage.
    assert_eq!(turn.settle().await.total_tokens, 120);

    // A FIN after the request is a half close, not a second request.
    let (_upstream, turn) = setup(vec![], config()).await;
    let (report, _) = exchange(&turn, &request("gpt-5.3-codex"), true).await;
    assert_eq!(report.error, None);
}

fn masked(key: &str) -> String {
    format!("****{}", &key[key.len() - 4..])
}

#[tokio::test]
async fn r_a_reflecting_upstream_never_gets_the_credential_into_the_channel() {
    use base64::Engine as _;
    let bearer = base64::engine::general_purpose::STANDARD.encode(format!("Bearer {KEY}"));
    let upstream = ScriptedUpstream::start(vec![]).await.unwrap();
    let gateway = Arc::new(
        Gateway::new(
            config(),
            Arc::new(OpenAiResponses),
            Credential::from_value(KEY).unwrap(),
            upstream.base_url().parse().unwrap(),
        )
        .unwrap(),
    );
    for status in [200u16, 401] {
        let mut turn = gateway.start_turn();
        let mut in_turn = 0;
        // The reflected body is about 1.1 KB: every split point puts the boundary inside each
        // reflected form once.
        for split in 0..1400 {
            if in_turn == 60 {
                turn = gateway.start_turn();
                in_turn = 0;
            }
            in_turn += 1;
            upstream.push(Reply::Reflect { status, split });
            let (report, received) = send_codex(&turn).await;
            let text = String::from_utf8_lossy(&received);
            assert!(!text.contains(&bearer), "base64 form at split {split}");
            assert!(!text.contains(&masked(KEY)), "masked form at split {split}");
            // The raw key in `authorization`, its base64 and the masked form.
            assert!(report.scrubbed >= 3, "split {split}: {}", report.scrubbed);
            assert!(text.contains(crate::SCRUB_MARKER));
            if status == 200 {
                assert_eq!(report.error, None);
                assert_eq!(report.usage.map(|u| u.total_tokens), Some(120));
            } else {
                assert_eq!(report.error, Some(GatewayError::UpstreamStatus { status }));
                assert!(text.contains("application/json"));
            }
        }
        assert!(turn.usage().scrubbed >= 3 * in_turn);
    }
    // The upstream did receive the credential every time.
    assert!(
        upstream
            .requests()
            .iter()
            .all(|r| r.header("authorization") == Some(&format!("Bearer {KEY}")))
    );
}
