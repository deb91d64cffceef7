//! Gateway + tunnel overhead per model request, against the same request sent straight to the
//! scripted upstream on loopback. Run by `benches/gateway/run.sh`.
//!
//! Path "direct": client → TCP → scripted upstream.
//! Path "tunnelled": client → TCP → a runner-side relay that frames the bytes (DATA frames of the
//! `tunnel` crate) → an in-process pipe standing in for the container's stdio → the worker side
//! (strict decoder + session, as in a live turn) → the gateway (strict parse, checks, credential,
//! hyper client) → the scripted upstream, and the answer back the same way, chunk by chunk.
//! The Docker attach hop itself is not in this measurement.
//!
//! `overhead RUNS [PROVIDER] [parts]`: PROVIDER is `openai-responses` (default),
//! `anthropic-messages` or `gemini`; each sends its own main streamed call (same body size) and
//! gets a tool-call answer in its own SSE shape. With `parts`, the body is instead a 1 MiB input
//! of 500 content parts (text and inline `data:`/base64 images, alternating) in the provider's
//! shape, and the provider's body check alone is timed too (`benches/gateway/parts.sh` runs this
//! against the baseline's gateway side by side). The example uses only API the baseline has, so
//! the same file builds against both.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use gateway::testkit::{DEFAULT_USAGE, Reply, ScriptedUpstream, anthropic, gemini};
use gateway::{Credential, Gateway, GatewayConfig, ProviderKind, TurnGateway};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tunnel::{ChannelId, Decoder, Frame, Limits, Role, Session};

/// The model, request target, body and upstream base path of `kind`'s main call, and the
/// upstream header that carries the credential.
fn shape(
    kind: ProviderKind,
) -> (
    &'static str,
    String,
    serde_json::Value,
    &'static str,
    &'static str,
) {
    // A body of the size the agents send (tens of KB).
    let filler = "x".repeat(30_000);
    match kind {
        ProviderKind::OpenAiResponses => (
            "gpt-5.3-codex",
            "/v1/responses".to_owned(),
            serde_json::json!({
                "model": "gpt-5.3-codex", "stream": true,
                "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": filler}]}]
            }),
            "/v1",
            "authorization",
        ),
        ProviderKind::AnthropicMessages => (
            "claude-sonnet-4-5",
            "/v1/messages?beta=true".to_owned(),
            serde_json::json!({
                "model": "claude-sonnet-4-5", "stream": true, "max_tokens": 32000,
                "messages": [{"role": "user", "content": [{"type": "text", "text": filler}]}],
                "tools": [{"name": "Edit", "input_schema": {"type": "object"}}]
            }),
            "/v1",
            "x-api-key",
        ),
        ProviderKind::Gemini => (
            "gemini-2.5-flash",
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse".to_owned(),
            serde_json::json!({
                "contents": [{"role": "user", "parts": [{"text": filler}]}],
                "tools": [{"functionDeclarations": [{"name": "replace", "parameters": {"type": "object"}}]}]
            }),
            "/v1beta",
            "x-goog-api-key",
        ),
    }
}

/// Content parts in the provider's shape totalling about 1 MiB: 250 text parts and 250 inline
/// images, alternating, each about 2 KiB.
fn parts_body(kind: ProviderKind, model: &str) -> serde_json::Value {
    use serde_json::json;
    const PARTS: usize = 500;
    const PART_BYTES: usize = 1_048_576 / PARTS;
    let text = "t".repeat(PART_BYTES - 40);
    // Base64 of a byte pattern, padded to the part size.
    let data = "iVBORw0KGgo".repeat((PART_BYTES - 80) / 11);
    let parts: Vec<serde_json::Value> = (0..PARTS)
        .map(|i| match (kind, i % 2 == 0) {
            (ProviderKind::OpenAiResponses, true) => json!({"type": "input_text", "text": text}),
            (ProviderKind::OpenAiResponses, false) => json!({
                "type": "input_image", "detail": "auto",
                "image_url": format!("data:image/png;base64,{data}")
            }),
            (ProviderKind::AnthropicMessages, true) => json!({"type": "text", "text": text}),
            (ProviderKind::AnthropicMessages, false) => json!({
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": data}
            }),
            (ProviderKind::Gemini, true) => json!({"text": text}),
            (ProviderKind::Gemini, false) => {
                json!({"inlineData": {"mimeType": "image/png", "data": data}})
            }
        })
        .collect();
    match kind {
        ProviderKind::OpenAiResponses => json!({
            "model": model, "stream": true,
            "input": [{"type": "message", "role": "user", "content": parts}],
            "tools": [{"type": "function", "name": "shell", "parameters": {"type": "object"}}]
        }),
        ProviderKind::AnthropicMessages => json!({
            "model": model, "stream": true, "max_tokens": 32000,
            "messages": [{"role": "user", "content": parts}],
            "tools": [{"name": "Edit", "input_schema": {"type": "object"}}]
        }),
        ProviderKind::Gemini => json!({
            "contents": [{"role": "user", "parts": parts}],
            "tools": [{"functionDeclarations": [{"name": "replace", "parameters": {"type": "object"}}]}]
        }),
    }
}

/// p50 and p90 of the provider's body check alone (pre-scan, extraction, policy) on `body`.
fn check_only(kind: ProviderKind, target: &str, body: &[u8], config: &GatewayConfig) -> (f64, f64) {
    let provider = kind.provider();
    let route = provider.route(b"POST", target.as_bytes()).unwrap();
    let mut times = Vec::new();
    for i in 0..220 {
        let start = Instant::now();
        let checked = provider.check_body(&route, body, config);
        let took = start.elapsed();
        assert!(checked.is_ok(), "the benchmark body must pass the check");
        if i >= 20 {
            times.push(took);
        }
    }
    times.sort();
    (
        micros(percentile(&times, 0.5)),
        micros(percentile(&times, 0.9)),
    )
}

fn request(target: &str, body: &serde_json::Value) -> Vec<u8> {
    let body = body.to_string();
    format!(
        "POST {target} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\naccept: text/event-stream\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// A tool-call answer in `kind`'s SSE shape.
fn reply(kind: ProviderKind, model: &str) -> Reply {
    let edit = serde_json::json!({"file_path": "src/lib.rs", "old_string": "a", "new_string": "b"});
    match kind {
        ProviderKind::OpenAiResponses => Reply::edit_file("src/lib.rs", "a", "b"),
        ProviderKind::AnthropicMessages => anthropic::tool_use(model, "Edit", &edit, DEFAULT_USAGE),
        ProviderKind::Gemini => gemini::function_call("replace", &edit, DEFAULT_USAGE),
    }
}

/// Sends one request, reads to EOF; returns (first body byte, last byte) latencies.
async fn one(addr: std::net::SocketAddr, req: &[u8]) -> (Duration, Duration) {
    let start = Instant::now();
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.set_nodelay(true).unwrap();
    s.write_all(req).await.unwrap();
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 65536];
    let mut first = None;
    loop {
        let n = s.read(&mut chunk).await.unwrap();
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if first.is_none()
            && let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n")
            && buf.len() > i + 4
        {
            first = Some(start.elapsed());
        }
    }
    assert!(buf.starts_with(b"HTTP/1.1 200"), "unexpected answer");
    (first.unwrap(), start.elapsed())
}

/// Sends what `from` yields to `to` as DATA frames of channel `n`, until `from` ends.
async fn frame_into<R, W>(n: ChannelId, from: &mut R, to: &mut W)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 65536];
    loop {
        let k = from.read(&mut buf).await.unwrap();
        if k == 0 {
            break;
        }
        let mut out = Vec::new();
        for f in Frame::data_frames(n, &buf[..k]) {
            f.encode(&mut out);
        }
        to.write_all(&out).await.unwrap();
    }
}

/// The runner-side relay plus the worker side, for one accepted connection.
async fn tunnelled_connection(mut tcp: TcpStream, n: ChannelId, turn: TurnGateway) {
    tcp.set_nodelay(true).unwrap();
    // The container's stdout (runner → worker) and stdin (worker → runner).
    let (mut runner_out, mut worker_in) = tokio::io::duplex(1 << 20);
    let (mut worker_out, mut runner_in) = tokio::io::duplex(1 << 20);
    let (mut tcp_read, mut tcp_write) = tcp.split();
    let runner_up = async {
        runner_out
            .write_all(&Frame::Open(n).to_bytes())
            .await
            .unwrap();
        frame_into(n, &mut tcp_read, &mut runner_out).await;
    };
    let runner_down = async {
        let mut d = Decoder::new();
        let mut buf = vec![0u8; 65536];
        loop {
            let k = runner_in.read(&mut buf).await.unwrap();
            if k == 0 {
                return;
            }
            for f in d.push(&buf[..k]).unwrap() {
                match f {
                    Frame::Data(_, c) => tcp_write.write_all(c.as_bytes()).await.unwrap(),
                    Frame::Fin(_) | Frame::Reset(..) => {
                        tcp_write.shutdown().await.unwrap();
                        return;
                    }
                    _ => {}
                }
            }
        }
    };
    let worker = async {
        let mut session = Session::new(Role::Worker, Limits::default());
        session.receive(&Frame::Hello).unwrap();
        session.send(&Frame::Hello).unwrap();
        let (gw_end, tunnel_end) = tokio::io::duplex(65536);
        let (mut from_gw, mut to_gw) = tokio::io::split(tunnel_end);
        let serve = turn.serve(gw_end);
        let inbound = async {
            let mut d = Decoder::new();
            let mut buf = vec![0u8; 65536];
            loop {
                let k = worker_in.read(&mut buf).await.unwrap();
                if k == 0 {
                    return;
                }
                for f in d.push(&buf[..k]).unwrap() {
                    session.receive(&f).unwrap();
                    if let Frame::Data(_, c) = f
                        && to_gw.write_all(c.as_bytes()).await.is_err()
                    {
                        return;
                    }
                }
            }
        };
        let outbound = async {
            frame_into(n, &mut from_gw, &mut worker_out).await;
            worker_out
                .write_all(&Frame::Fin(n).to_bytes())
                .await
                .unwrap();
        };
        tokio::pin!(inbound);
        let answered = async { tokio::join!(serve, outbound) };
        tokio::select! {
            _ = answered => {}
            () = &mut inbound => {}
        }
    };
    tokio::select! {
        _ = async { tokio::join!(runner_up, runner_down, worker) } => {}
        () = tokio::time::sleep(Duration::from_secs(30)) => panic!("stuck"),
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let runs: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(300);
    let kind: ProviderKind = std::env::args()
        .nth(2)
        .map_or(Ok(ProviderKind::OpenAiResponses), |p| p.parse())
        .unwrap();
    let parts = std::env::args().nth(3).is_some_and(|a| a == "parts");
    let (model, target, mut body, base, key_header) = shape(kind);
    if parts {
        body = parts_body(kind, model);
    }
    let upstream = ScriptedUpstream::start([]).await.unwrap();
    upstream.set_fallback(reply(kind, model));
    let mut config = GatewayConfig::for_model(model);
    config.budgets.requests = u64::MAX;
    config.budgets.request_bytes = u64::MAX;
    config.budgets.response_bytes = u64::MAX;
    config.budgets.tokens = u64::MAX;
    let checked = parts.then(|| check_only(kind, &target, body.to_string().as_bytes(), &config));
    let gateway = Arc::new(
        Gateway::new(
            config,
            kind.provider(),
            Credential::from_value("sk-bench").unwrap(),
            format!("http://{}{base}", upstream.addr()).parse().unwrap(),
        )
        .unwrap(),
    );
    let turn = gateway.start_turn();
    let relay = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let relay_addr = relay.local_addr().unwrap();
    tokio::spawn(async move {
        let mut next = 1u32;
        while let Ok((tcp, _)) = relay.accept().await {
            let n = ChannelId::try_from(next).unwrap();
            next += 1;
            tokio::spawn(tunnelled_connection(tcp, n, turn.clone()));
        }
    });
    let req = request(&target, &body);
    // Warm up both paths (connection pool, page cache).
    let warm = if parts { 5 } else { 20 };
    for _ in 0..warm {
        one(upstream.addr(), &req).await;
        one(relay_addr, &req).await;
    }
    let (mut direct_first, mut direct_total, mut tun_first, mut tun_total) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // Interleaved, so drift and noise hit both paths alike.
    for _ in 0..runs {
        let (f, t) = one(upstream.addr(), &req).await;
        direct_first.push(f);
        direct_total.push(t);
        let (f, t) = one(relay_addr, &req).await;
        tun_first.push(f);
        tun_total.push(t);
    }
    // Each run's own difference (the two paths of one run are sent back to back), so load that
    // drifts between runs cancels out.
    let mut paired: Vec<f64> = tun_total
        .iter()
        .zip(&direct_total)
        .map(|(t, d)| micros(*t) - micros(*d))
        .collect();
    paired.sort_by(f64::total_cmp);
    let paired_p50 = paired[paired.len() / 2];
    for v in [
        &mut direct_first,
        &mut direct_total,
        &mut tun_first,
        &mut tun_total,
    ] {
        v.sort();
    }
    println!(
        "provider {kind}; runs per path: {runs}; request {} bytes{}",
        req.len(),
        if parts { " (500 content parts)" } else { "" }
    );
    if let Some((p50, p90)) = checked {
        println!("body check alone (200 runs): p50 {p50:.0} µs, p90 {p90:.0} µs");
    }
    println!("| metric | direct p50 | via gateway+tunnel p50 | added p50 | direct p90 | via p90 |");
    println!("|---|---|---|---|---|---|");
    for (name, d, t) in [
        ("whole request (last byte)", &direct_total, &tun_total),
        ("first SSE byte", &direct_first, &tun_first),
    ] {
        let (d50, t50) = (percentile(d, 0.5), percentile(t, 0.5));
        println!(
            "| {name} | {:.0} µs | {:.0} µs | {:.0} µs | {:.0} µs | {:.0} µs |",
            micros(d50),
            micros(t50),
            micros(t50) - micros(d50),
            micros(percentile(d, 0.9)),
            micros(percentile(t, 0.9)),
        );
    }
    println!("paired added p50 (median of each run's via − direct): {paired_p50:.0} µs");
    // Every tunnelled request reached the upstream with the credential; no direct one did.
    let with_key = upstream
        .requests()
        .iter()
        .filter(|r| {
            let want = if key_header == "authorization" {
                "Bearer sk-bench"
            } else {
                "sk-bench"
            };
            r.header(key_header) == Some(want)
        })
        .count();
    assert_eq!(with_key, runs + warm);
}
