//! A scripted model upstream for tests and benchmarks: a small model server on loopback speaking
//! SSE (OpenAI Responses shapes by default; Anthropic and Gemini ones from [`anthropic`] and
//! [`gemini`]), answering each request, whatever its path, with the next scripted [`Reply`] and
//! recording every request (method, target, headers — `authorization` included — and body).
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use gateway::testkit::{Reply, ScriptedUpstream};
//! let upstream = ScriptedUpstream::start([
//!     Reply::edit_file("src/lib.rs", "old line", "new line"),
//!     Reply::create_file("src/new.rs", "fn main() {}\n"),
//!     Reply::message("Done."),
//! ])
//! .await?;
//! let base = upstream.base_url(); // "http://127.0.0.1:PORT/v1": the gateway's --upstream
//! // ... run the turn ...
//! for request in upstream.requests() {
//!     assert_eq!(request.header("authorization"), Some("Bearer test-key"));
//! }
//! # Ok(()) }
//! ```
//!
//! Replies ([`Reply`]):
//! - [`Reply::message`]: one assistant message, then `response.completed` (ends Codex's turn).
//! - [`Reply::apply_patch`] / [`Reply::edit_file`] / [`Reply::create_file`]: a `custom_tool_call`
//!   named `apply_patch` whose input is a Codex patch (`*** Begin Patch` … `*** End Patch`).
//! - [`Reply::function_call`] / [`Reply::shell`] / [`Reply::exec_command`]: a `function_call`
//!   item (`shell` with `{"command": [...]}`, `exec_command` with `{"cmd": "..."}`).
//! - [`Reply::Events`]: any list of SSE event objects (see [`events`] for builders).
//! - [`Reply::Stall`]: sends the given events, then keeps the connection open and silent.
//! - [`Reply::Huge`]: `response.created`, then `response.output_text.delta` events of padding
//!   totalling about `bytes`, then `response.completed`.
//! - [`Reply::Paced`]: SSE events with a pause between two of them.
//! - [`Reply::Reflect`]: echoes the request's headers (credential included, raw, base64 and
//!   masked) in an SSE answer or an error body, written in two pieces.
//! - [`Reply::ReflectPatch`]: an `apply_patch` call adding a file that holds the echoed headers.
//! - [`Reply::Encoded`]: SSE events under a `content-encoding` (or `transfer-encoding`) header.
//! - [`Reply::Status`]: a non-SSE answer with the given status and JSON body.
//! - [`Reply::Data`]: SSE chunks framed as Gemini frames them (`data:` lines only).
//! - [`ScriptedUpstream::set_responder`]: a function asked first for every request, deciding
//!   the reply from the request itself ([`anthropic::claude_code`] answers Claude Code's title
//!   and `count_tokens` side calls and fills in the turn's working directory).
//! - [`anthropic`] and [`gemini`]: answers of those providers (`anthropic::text`,
//!   `anthropic::tool_use`, `gemini::text`, `gemini::function_call`,
//!   `gemini::generate_content`), reporting the given [`Usage`] in their own usage events.
//!
//! Every SSE reply is sent `event: <type>\ndata: <json>\n\n` per event, one write per event,
//! with `content-type: text/event-stream` and `connection: close` (the body ends when the
//! connection closes). Tool-call replies end with `response.completed` carrying
//! [`DEFAULT_USAGE`] unless [`Reply::with_usage`] says otherwise. When the script is used up,
//! the fallback reply (by default `Reply::message("Done.")`) answers.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Usage reported by scripted answers unless overridden: 100 in, 20 out, 120 total.
pub const DEFAULT_USAGE: Usage = Usage {
    input: 100,
    output: 20,
    total: 120,
};

/// Token usage a scripted answer reports in `response.completed`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    /// `input_tokens`.
    pub input: u64,
    /// `output_tokens`.
    pub output: u64,
    /// `total_tokens`.
    pub total: u64,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn next_id(prefix: &str) -> String {
    format!("{prefix}_{}", NEXT_ID.fetch_add(1, Ordering::Relaxed))
}

/// SSE event builders (Responses API shapes, as Codex reads them).
pub mod events {
    use super::{Usage, Value, json};

    /// `response.created`.
    #[must_use]
    pub fn created(id: &str) -> Value {
        json!({"type": "response.created", "response": {"id": id}})
    }

    /// `response.output_item.added` for `item`.
    #[must_use]
    pub fn output_item_added(item: &Value) -> Value {
        json!({"type": "response.output_item.added", "output_index": 0, "item": item})
    }

    /// `response.output_item.done` for `item`.
    #[must_use]
    pub fn output_item_done(item: &Value) -> Value {
        json!({"type": "response.output_item.done", "output_index": 0, "item": item})
    }

    /// `response.output_text.delta`.
    #[must_use]
    pub fn text_delta(delta: &str) -> Value {
        json!({"type": "response.output_text.delta", "delta": delta})
    }

    /// `response.completed` with `usage`.
    #[must_use]
    pub fn completed(id: &str, usage: Usage) -> Value {
        json!({
            "type": "response.completed",
            "response": {
                "id": id,
                "usage": {
                    "input_tokens": usage.input,
                    "input_tokens_details": null,
                    "output_tokens": usage.output,
                    "output_tokens_details": null,
                    "total_tokens": usage.total
                }
            }
        })
    }

    /// An assistant message item.
    #[must_use]
    pub fn message_item(id: &str, text: &str) -> Value {
        json!({
            "type": "message", "role": "assistant", "id": id,
            "content": [{"type": "output_text", "text": text}]
        })
    }

    /// A `custom_tool_call` item (freeform tool such as `apply_patch`).
    #[must_use]
    pub fn custom_tool_call_item(call_id: &str, name: &str, input: &str) -> Value {
        json!({"type": "custom_tool_call", "call_id": call_id, "name": name, "input": input})
    }

    /// A `function_call` item.
    #[must_use]
    pub fn function_call_item(call_id: &str, name: &str, arguments: &str) -> Value {
        json!({"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments})
    }
}

/// Anthropic Messages SSE events, as the API streams them (and Claude Code reads them).
pub mod anthropic {
    use super::{RecordedRequest, Reply, ScriptedUpstream, Usage, Value, json, next_id};

    /// `message_start`: `input` prompt tokens (`cache_read` more read from the cache), one
    /// first output token.
    #[must_use]
    pub fn message_start(model: &str, input: u64, cache_read: u64) -> Value {
        json!({
            "type": "message_start",
            "message": {
                "id": next_id("msg"), "type": "message", "role": "assistant", "model": model,
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {
                    "input_tokens": input, "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": cache_read, "output_tokens": 1
                }
            }
        })
    }

    /// A text block at `index`: start, one delta, stop.
    #[must_use]
    pub fn text_block(index: u64, text: &str) -> Vec<Value> {
        vec![
            json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}}),
            json!({"type": "content_block_stop", "index": index}),
        ]
    }

    /// A `tool_use` block at `index` calling `name` with `input` (streamed as one JSON delta).
    #[must_use]
    pub fn tool_use_block(index: u64, name: &str, input: &Value) -> Vec<Value> {
        vec![
            json!({"type": "content_block_start", "index": index, "content_block": {
                "type": "tool_use", "id": next_id("toolu"), "name": name, "input": {}}}),
            json!({"type": "content_block_delta", "index": index, "delta": {
                "type": "input_json_delta", "partial_json": input.to_string()}}),
            json!({"type": "content_block_stop", "index": index}),
        ]
    }

    /// `message_delta` with the cumulative `output_tokens`.
    #[must_use]
    pub fn message_delta(stop_reason: &str, output_tokens: u64) -> Value {
        json!({
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": null},
            "usage": {"output_tokens": output_tokens}
        })
    }

    /// `message_stop`.
    #[must_use]
    pub fn message_stop() -> Value {
        json!({"type": "message_stop"})
    }

    /// A whole answer: `message_start` (`usage.input` in), `blocks`, a first cumulative
    /// `message_delta` of half the output, then the last one with `usage.output`, then
    /// `message_stop`. The gateway must count `usage.input + usage.output`.
    #[must_use]
    pub fn answer(model: &str, blocks: Vec<Value>, stop_reason: &str, usage: Usage) -> Reply {
        let mut events = vec![message_start(model, usage.input, 0)];
        events.extend(blocks);
        events.push(message_delta(stop_reason, usage.output / 2));
        events.push(message_delta(stop_reason, usage.output));
        events.push(message_stop());
        Reply::Events(events)
    }

    /// A text answer ending the turn.
    #[must_use]
    pub fn text(model: &str, text: &str, usage: Usage) -> Reply {
        answer(model, text_block(0, text), "end_turn", usage)
    }

    /// An answer calling tool `name` with `input`.
    #[must_use]
    pub fn tool_use(model: &str, name: &str, input: &Value, usage: Usage) -> Reply {
        answer(model, tool_use_block(0, name, input), "tool_use", usage)
    }

    /// Whether `r` is Claude Code's session-title request (a JSON-schema answer with a `title`).
    #[must_use]
    pub fn is_title_request(r: &RecordedRequest) -> bool {
        r.json().is_some_and(|b| {
            b.pointer("/output_config/format/schema/properties/title")
                .is_some()
        })
    }

    /// Whether `r` is Claude Code's prompt-suggestion request: a side request it may send after
    /// a turn's answer (its last message asks for `[SUGGESTION MODE: …]`), depending on timing,
    /// so not part of the agent loop a test counts.
    #[must_use]
    pub fn is_suggestion_request(r: &RecordedRequest) -> bool {
        const SUGGESTION: &str = "[SUGGESTION MODE";
        r.json().is_some_and(|b| {
            b.pointer("/messages")
                .and_then(serde_json::Value::as_array)
                .and_then(|m| m.last())
                .and_then(|m| m.get("content"))
                .is_some_and(|content| match content {
                    // Claude Code sends the suggestion prompt as a plain string or as parts.
                    serde_json::Value::String(t) => t.starts_with(SUGGESTION),
                    serde_json::Value::Array(parts) => parts.iter().any(|p| {
                        p.get("text")
                            .and_then(serde_json::Value::as_str)
                            .is_some_and(|t| t.starts_with(SUGGESTION))
                    }),
                    _ => false,
                })
        })
    }

    /// The working directory Claude Code's prompt names (`Primary working directory: …`, in the
    /// environment block of the first user message).
    #[must_use]
    pub fn workdir(r: &RecordedRequest) -> Option<String> {
        let body = String::from_utf8_lossy(&r.body);
        let rest = body.split("Primary working directory: ").nth(1)?;
        let dir: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '-' | '_' | '.'))
            .collect();
        dir.starts_with('/').then_some(dir)
    }

    /// Makes `upstream` a scripted Claude model: the title request is answered with a title
    /// (`title_usage`), `count_tokens` with a count, and each agent-loop request with the next
    /// of `steps` (then `done`), every `{workdir}` in it replaced by the working directory the
    /// request's prompt names: Claude Code's file tools take absolute paths, and the runner's
    /// turn directory is fresh each turn.
    pub fn claude_code(
        upstream: &ScriptedUpstream,
        model: &str,
        steps: Vec<Reply>,
        title_usage: Usage,
        done: Reply,
    ) {
        let steps = std::sync::Mutex::new(std::collections::VecDeque::from(steps));
        let model = model.to_owned();
        upstream.set_responder(move |r| {
            if r.target.starts_with("/v1/messages/count_tokens") {
                return Some(Reply::Status {
                    status: 200,
                    body: r#"{"input_tokens": 120}"#.to_owned(),
                });
            }
            if is_title_request(r) {
                return Some(text(&model, r#"{"title": "Scripted turn"}"#, title_usage));
            }
            let dir = workdir(r).unwrap_or_default();
            let step = steps
                .lock()
                .ok()?
                .pop_front()
                .unwrap_or_else(|| done.clone());
            Some(match step {
                Reply::Events(events) => Reply::Events(
                    events
                        .iter()
                        .map(|e| {
                            serde_json::from_str(&e.to_string().replace("{workdir}", &dir))
                                .unwrap_or_else(|_| e.clone())
                        })
                        .collect(),
                ),
                other => other,
            })
        });
    }
}

/// Gemini `streamGenerateContent?alt=sse` chunks and `generateContent` answers, as the API
/// sends them (and Gemini CLI reads them): `data: <json>` lines, no `event:` lines.
pub mod gemini {
    use super::{Reply, Usage, Value, json};

    /// `usageMetadata` of `usage` (prompt, candidates, total).
    #[must_use]
    pub fn usage_metadata(usage: Usage) -> Value {
        json!({
            "promptTokenCount": usage.input,
            "candidatesTokenCount": usage.output,
            "totalTokenCount": usage.total
        })
    }

    /// One chunk with `parts`; `finish` adds `finishReason: STOP`; `usage` its `usageMetadata`.
    #[must_use]
    pub fn chunk(parts: Value, finish: bool, usage: Option<Usage>) -> Value {
        let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
        if finish && let Some(c) = candidate.as_object_mut() {
            c.insert("finishReason".to_owned(), json!("STOP"));
        }
        let mut chunk = json!({"candidates": [candidate], "modelVersion": "scripted"});
        if let (Some(u), Some(c)) = (usage, chunk.as_object_mut()) {
            c.insert("usageMetadata".to_owned(), usage_metadata(u));
        }
        chunk
    }

    /// A streamed answer of `parts`: a first chunk reporting only the prompt's tokens, then the
    /// finishing chunk with the cumulative `usage` (the gateway must count the last one).
    #[must_use]
    pub fn answer(parts: Value, usage: Usage) -> Reply {
        let first = Usage {
            input: usage.input,
            output: 0,
            total: usage.input,
        };
        Reply::Data(vec![
            chunk(json!([]), false, Some(first)),
            chunk(parts, true, Some(usage)),
        ])
    }

    /// A streamed text answer.
    #[must_use]
    pub fn text(text: &str, usage: Usage) -> Reply {
        answer(json!([{"text": text}]), usage)
    }

    /// A streamed answer calling function `name` with `args`.
    #[must_use]
    pub fn function_call(name: &str, args: &Value, usage: Usage) -> Reply {
        answer(
            json!([{"functionCall": {"name": name, "args": args}}]),
            usage,
        )
    }

    /// A non-streamed `generateContent` answer (JSON) of `text` with `usage`.
    #[must_use]
    pub fn generate_content(text: &str, usage: Usage) -> Reply {
        Reply::Status {
            status: 200,
            body: chunk(json!([{"text": text}]), true, Some(usage)).to_string(),
        }
    }
}

/// One scripted answer.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// 200 with these SSE events written as `data: <json>\r\n\r\n` only (Gemini's framing).
    Data(Vec<Value>),
    /// 200 with these SSE events.
    Events(Vec<Value>),
    /// 200 with these SSE events, then silence with the connection held open.
    Stall(Vec<Value>),
    /// 200 with about `bytes` of text deltas, then `response.completed`.
    Huge {
        /// Approximate body size.
        bytes: usize,
    },
    /// 200 with these SSE events, one write each, pausing `pause_ms` between two events (an
    /// answer still streaming when the agent resets its channel).
    Paced {
        /// The events.
        events: Vec<Value>,
        /// Pause between two events.
        pause_ms: u64,
    },
    /// Reflects the request's headers back (a debug proxy or a careless error page): with a
    /// 2xx `status` an SSE answer whose text delta lists every header (`authorization`
    /// included), the base64 of each header value and the provider's masked key form, then
    /// `response.completed` with [`DEFAULT_USAGE`]; with another status a JSON error body
    /// holding the same. The body is written in two writes split at byte `split` (2 ms apart).
    Reflect {
        /// HTTP status.
        status: u16,
        /// Where the body is split between the two writes.
        split: usize,
    },
    /// Reflects the request's headers (as [`Reply::Reflect`] lists them) into an `apply_patch`
    /// call that adds the file `path` holding them: what a reflecting upstream would make the
    /// agent write into the workspace.
    ReflectPatch {
        /// The file the patch adds.
        path: String,
    },
    /// 200 with these SSE events under a `content-encoding` (or, with `transfer`, a
    /// `transfer-encoding`) header naming `coding`; the bytes are sent as given, so an answer a
    /// client would have to decode before reading it.
    Encoded {
        /// The coding named (`gzip`, `br`, `identity`, …).
        coding: String,
        /// Name it in `transfer-encoding` instead of `content-encoding`.
        transfer: bool,
        /// The events.
        events: Vec<Value>,
    },
    /// A plain answer with this status and JSON body.
    Status {
        /// HTTP status.
        status: u16,
        /// Body (sent as `application/json`).
        body: String,
    },
}

impl Reply {
    fn item_reply(item: &Value) -> Self {
        let id = next_id("resp");
        Self::Events(vec![
            events::created(&id),
            events::output_item_added(item),
            events::output_item_done(item),
            events::completed(&id, DEFAULT_USAGE),
        ])
    }

    /// One assistant message, then `response.completed`.
    #[must_use]
    pub fn message(text: &str) -> Self {
        Self::item_reply(&events::message_item(&next_id("msg"), text))
    }

    /// An `apply_patch` custom tool call carrying `patch`.
    #[must_use]
    pub fn apply_patch(patch: &str) -> Self {
        Self::item_reply(&events::custom_tool_call_item(
            &next_id("call"),
            "apply_patch",
            patch,
        ))
    }

    /// An `apply_patch` call replacing the line `old` by `new` in `path`.
    #[must_use]
    pub fn edit_file(path: &str, old: &str, new: &str) -> Self {
        Self::apply_patch(&format!(
            "*** Begin Patch\n*** Update File: {path}\n@@\n-{old}\n+{new}\n*** End Patch\n"
        ))
    }

    /// An `apply_patch` call adding `path` with `contents`.
    #[must_use]
    pub fn create_file(path: &str, contents: &str) -> Self {
        let mut patch = format!("*** Begin Patch\n*** Add File: {path}\n");
        for line in contents.lines() {
            patch.push('+');
            patch.push_str(line);
            patch.push('\n');
        }
        patch.push_str("*** End Patch\n");
        Self::apply_patch(&patch)
    }

    /// A `function_call` to `name` with JSON `arguments`.
    #[must_use]
    pub fn function_call(name: &str, arguments: &Value) -> Self {
        Self::item_reply(&events::function_call_item(
            &next_id("call"),
            name,
            &arguments.to_string(),
        ))
    }

    /// A `shell` function call running `argv`.
    #[must_use]
    pub fn shell(argv: &[&str]) -> Self {
        Self::function_call("shell", &json!({"command": argv}))
    }

    /// An `exec_command` function call running `cmd`.
    #[must_use]
    pub fn exec_command(cmd: &str) -> Self {
        Self::function_call("exec_command", &json!({"cmd": cmd}))
    }

    /// A [`Reply::Paced`] answer, `pause_ms` between two events: `response.created`, the text
    /// `partial answer`, then `response.completed` charging `total` tokens (10 of them output).
    #[must_use]
    pub fn paced_partial_answer(total: u64, pause_ms: u64) -> Self {
        Self::Paced {
            events: vec![
                events::created("r"),
                events::text_delta("partial answer"),
                events::completed(
                    "r",
                    Usage {
                        input: total.saturating_sub(10),
                        output: 10,
                        total,
                    },
                ),
            ],
            pause_ms,
        }
    }

    /// The same reply reporting `usage` in its `response.completed` event.
    #[must_use]
    pub fn with_usage(self, usage: Usage) -> Self {
        match self {
            Self::Events(events) => Self::Events(
                events
                    .into_iter()
                    .map(|e| {
                        if e.get("type").and_then(Value::as_str) == Some("response.completed") {
                            let id = e
                                .pointer("/response/id")
                                .and_then(Value::as_str)
                                .unwrap_or("resp")
                                .to_owned();
                            events::completed(&id, usage)
                        } else {
                            e
                        }
                    })
                    .collect(),
            ),
            other => other,
        }
    }
}

/// One request the upstream received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedRequest {
    /// Method.
    pub method: String,
    /// Request target.
    pub target: String,
    /// Headers in order, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// Body bytes.
    pub body: Vec<u8>,
}

impl RecordedRequest {
    /// The first value of header `name` (lower-case).
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&str> {
        crate::http1::first_value(&self.headers, name)
    }

    /// The body as JSON.
    #[must_use]
    pub fn json(&self) -> Option<Value> {
        serde_json::from_slice(&self.body).ok()
    }
}

/// Decides a reply from the request itself, before the script is consulted (a model that reads
/// its prompt: the working directory it names, a side call's shape); `None` leaves it to the
/// script.
pub type Responder = Box<dyn Fn(&RecordedRequest) -> Option<Reply> + Send + Sync>;

struct State {
    script: Mutex<VecDeque<Reply>>,
    fallback: Mutex<Reply>,
    responder: Mutex<Option<Responder>>,
    requests: Mutex<Vec<RecordedRequest>>,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("script", &self.script)
            .field("fallback", &self.fallback)
            .field("requests", &self.requests)
            .finish_non_exhaustive()
    }
}

/// The scripted upstream; stops when dropped.
#[derive(Debug)]
pub struct ScriptedUpstream {
    addr: SocketAddr,
    state: Arc<State>,
    task: JoinHandle<()>,
}

impl Drop for ScriptedUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ScriptedUpstream {
    /// Listens on `127.0.0.1:0` and answers requests with `script`, in order.
    ///
    /// # Errors
    /// The listener could not be bound.
    pub async fn start(script: impl IntoIterator<Item = Reply>) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State {
            script: Mutex::new(script.into_iter().collect()),
            fallback: Mutex::new(Reply::message("Done.")),
            responder: Mutex::new(None),
            requests: Mutex::new(Vec::new()),
        });
        let serving = Arc::clone(&state);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let state = Arc::clone(&serving);
                tokio::spawn(async move {
                    let _ = serve_connection(stream, &state).await;
                });
            }
        });
        Ok(Self { addr, state, task })
    }

    /// The listening address.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL to give the gateway: `http://127.0.0.1:PORT/v1`.
    #[must_use]
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Every request received so far, in arrival order.
    #[must_use]
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state
            .requests
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }

    /// The `authorization` header of every request received so far, in arrival order.
    #[must_use]
    pub fn authorizations(&self) -> Vec<Option<String>> {
        self.requests()
            .iter()
            .map(|r| r.header("authorization").map(str::to_owned))
            .collect()
    }

    /// Appends a reply to the script.
    pub fn push(&self, reply: Reply) {
        if let Ok(mut s) = self.state.script.lock() {
            s.push_back(reply);
        }
    }

    /// Sets the [`Responder`] asked first for every request.
    pub fn set_responder(
        &self,
        responder: impl Fn(&RecordedRequest) -> Option<Reply> + Send + Sync + 'static,
    ) {
        if let Ok(mut r) = self.state.responder.lock() {
            *r = Some(Box::new(responder));
        }
    }

    /// Sets the reply used once the script is exhausted.
    pub fn set_fallback(&self, reply: Reply) {
        if let Ok(mut f) = self.state.fallback.lock() {
            *f = reply;
        }
    }
}

async fn serve_connection(mut stream: TcpStream, state: &State) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let head_end = loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > 1_048_576 {
            return Ok(());
        }
    };
    let head = String::from_utf8_lossy(buf.get(..head_end).unwrap_or_default()).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next().unwrap_or_default().split(' ');
    let method = request_line.next().unwrap_or_default().to_owned();
    let target = request_line.next().unwrap_or_default().to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
    }
    let body = buf.get(head_end..).unwrap_or_default().to_vec();
    let reflected = reflection(&headers);
    let request = RecordedRequest {
        method,
        target,
        headers,
        body,
    };
    let decided = state
        .responder
        .lock()
        .ok()
        .and_then(|r| r.as_ref().and_then(|f| f(&request)));
    if let Ok(mut r) = state.requests.lock() {
        r.push(request);
    }
    let reply = decided
        .or_else(|| state.script.lock().ok().and_then(|mut s| s.pop_front()))
        .or_else(|| state.fallback.lock().ok().map(|f| f.clone()))
        .unwrap_or(Reply::Status {
            status: 500,
            body: "{}".to_owned(),
        });
    let sse_head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n";
    match reply {
        Reply::Data(chunks) => {
            stream.write_all(sse_head).await?;
            for c in &chunks {
                stream
                    .write_all(format!("data: {c}\r\n\r\n").as_bytes())
                    .await?;
            }
        }
        Reply::Events(events) => {
            stream.write_all(sse_head).await?;
            for e in &events {
                stream.write_all(&sse_event(e)).await?;
            }
        }
        Reply::Stall(events) => {
            stream.write_all(sse_head).await?;
            for e in &events {
                stream.write_all(&sse_event(e)).await?;
            }
            // Hold the connection open and silent until the client goes away.
            let mut sink = [0u8; 64];
            while stream.read(&mut sink).await? > 0 {}
        }
        Reply::Huge { bytes } => {
            stream.write_all(sse_head).await?;
            let id = next_id("resp");
            stream.write_all(&sse_event(&events::created(&id))).await?;
            let piece = "x".repeat(16 * 1024);
            let mut sent = 0;
            while sent < bytes {
                let e = sse_event(&events::text_delta(&piece));
                sent += e.len();
                stream.write_all(&e).await?;
            }
            stream
                .write_all(&sse_event(&events::completed(&id, DEFAULT_USAGE)))
                .await?;
        }
        Reply::Paced { events, pause_ms } => {
            stream.write_all(sse_head).await?;
            for (i, e) in events.iter().enumerate() {
                if i > 0 {
                    tokio::time::sleep(std::time::Duration::from_millis(pause_ms)).await;
                }
                stream.write_all(&sse_event(e)).await?;
                stream.flush().await?;
            }
        }
        Reply::Reflect { status, split } => {
            let (kind, body) = if (200..300).contains(&status) {
                let id = next_id("resp");
                let mut body = sse_event(&events::created(&id));
                body.extend_from_slice(&sse_event(&events::text_delta(&reflected)));
                body.extend_from_slice(&sse_event(&events::completed(&id, DEFAULT_USAGE)));
                ("text/event-stream", body)
            } else {
                let error =
                    json!({"error": {"message": reflected, "type": "invalid_request_error"}});
                ("application/json", error.to_string().into_bytes())
            };
            let head = format!(
                "HTTP/1.1 {status} Reflected\r\ncontent-type: {kind}\r\nconnection: close\r\n\r\n"
            );
            stream.write_all(head.as_bytes()).await?;
            let (first, second) = body.split_at(split.min(body.len()));
            stream.write_all(first).await?;
            stream.flush().await?;
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            stream.write_all(second).await?;
        }
        Reply::ReflectPatch { path } => {
            stream.write_all(sse_head).await?;
            if let Reply::Events(events) = Reply::create_file(&path, &reflected) {
                for e in &events {
                    stream.write_all(&sse_event(e)).await?;
                }
            }
        }
        Reply::Encoded {
            coding,
            transfer,
            events,
        } => {
            let header = if transfer {
                "transfer-encoding"
            } else {
                "content-encoding"
            };
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n{header}: {coding}\r\nconnection: close\r\n\r\n"
            );
            stream.write_all(head.as_bytes()).await?;
            for e in &events {
                stream.write_all(&sse_event(e)).await?;
            }
        }
        Reply::Status { status, body } => {
            let head = format!(
                "HTTP/1.1 {status} Scripted\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            stream.write_all(head.as_bytes()).await?;
            stream.write_all(body.as_bytes()).await?;
        }
    }
    stream.flush().await?;
    stream.shutdown().await
}

/// What [`Reply::Reflect`] echoes: every header line, then for each value its base64, then the
/// masked form of a bearer token (`Incorrect API key provided: <first 8>****<last 4>`).
fn reflection(headers: &[(String, String)]) -> String {
    use base64::Engine as _;
    let mut text = String::new();
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\n"));
    }
    for (name, value) in headers {
        let encoded = base64::engine::general_purpose::STANDARD.encode(value);
        text.push_str(&format!("{name} (base64): {encoded}\n"));
    }
    if let Some((_, value)) = headers.iter().find(|(n, _)| n == "authorization")
        && let Some(key) = value.strip_prefix("Bearer ")
        && key.len() >= 16
    {
        let first = key.get(..8).unwrap_or_default();
        let last = key.get(key.len() - 4..).unwrap_or_default();
        text.push_str(&format!("Incorrect API key provided: {first}****{last}\n"));
    }
    text
}

/// One SSE event: `event: <type>\ndata: <json>\n\n`.
#[must_use]
pub fn sse_event(event: &Value) -> Vec<u8> {
    let kind = event
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message");
    format!("event: {kind}\ndata: {event}\n\n").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::{RecordedRequest, anthropic};

    fn post(body: &serde_json::Value) -> RecordedRequest {
        RecordedRequest {
            method: "POST".to_owned(),
            target: "/v1/messages?beta=true".to_owned(),
            headers: Vec::new(),
            body: serde_json::to_vec(body).unwrap_or_default(),
        }
    }

    #[test]
    fn a_suggestion_request_is_recognised_with_string_or_part_content() {
        let text = "[SUGGESTION MODE: Suggest what the user might naturally type next]";
        let as_string = serde_json::json!({"messages": [
            {"role": "user", "content": "fix it"},
            {"role": "user", "content": text},
        ]});
        let as_parts = serde_json::json!({"messages": [
            {"role": "user", "content": [{"type": "text", "text": text}]},
        ]});
        assert!(anthropic::is_suggestion_request(&post(&as_string)));
        assert!(anthropic::is_suggestion_request(&post(&as_parts)));
        // Only the last message counts, and a tool result is not a suggestion.
        let earlier = serde_json::json!({"messages": [
            {"role": "user", "content": text},
            {"role": "user", "content": [{"type": "tool_result", "content": "ok"}]},
        ]});
        assert!(!anthropic::is_suggestion_request(&post(&earlier)));
        assert!(!anthropic::is_suggestion_request(&post(
            &serde_json::json!({"messages": []})
        )));
    }
}
