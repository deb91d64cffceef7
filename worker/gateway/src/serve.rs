//! One tunnelled model request, end to end: read it under the deadline and caps, check it, charge
//! the turn's budgets, forward it with the credential, stream the answer back chunk by chunk, and
//! count the tokens the upstream reports.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::sync::{Notify, mpsc};

use crate::config::GatewayConfig;
use crate::credential::Credential;
use crate::error::{GatewayError, GatewaySetupError};
use crate::http1::{HeadLimits, RequestHead, parse_head};
use crate::provider::{Provider, RouteKind, RouteMethod, TokenUsage};
use crate::scrub::{CredentialPatterns, Scrubber};
use crate::sse::UsageScanner;
use crate::upstream::{HttpClient, UpstreamUrl, client};

/// The gateway of one process: settings, provider, credential and the pooled upstream client.
pub struct Gateway {
    config: GatewayConfig,
    provider: Arc<dyn Provider>,
    credential: Credential,
    upstream: UpstreamUrl,
    client: HttpClient,
    patterns: CredentialPatterns,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("provider", &self.provider.name())
            .field("upstream", &self.upstream)
            .field("models", &self.config.models)
            .finish_non_exhaustive()
    }
}

impl Gateway {
    /// A gateway for `provider` at `upstream`, holding `credential`.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_GATEWAY_CONFIG` or `_TLS`.
    pub fn new(
        config: GatewayConfig,
        provider: Arc<dyn Provider>,
        credential: Credential,
        upstream: UpstreamUrl,
    ) -> Result<Self, GatewaySetupError> {
        config.validate()?;
        let patterns = CredentialPatterns::new(&credential)?;
        Ok(Self {
            config,
            provider,
            patterns,
            credential,
            upstream,
            client: client()?,
        })
    }

    /// The name of the provider this gateway speaks (`openai-responses`, …).
    #[must_use]
    pub fn provider_name(&self) -> &'static str {
        self.provider.name()
    }

    /// The settings.
    #[must_use]
    pub fn config(&self) -> &GatewayConfig {
        &self.config
    }

    /// Fresh per-turn state (budgets and the trusted usage count).
    #[must_use]
    pub fn start_turn(self: &Arc<Self>) -> TurnGateway {
        TurnGateway {
            gateway: Arc::clone(self),
            state: Arc::new(Mutex::new(TurnState::default())),
            changed: Arc::new(Notify::new()),
        }
    }
}

/// The trusted usage of one turn, counted by the gateway (the container's self-report is
/// advisory).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct GatewayUsage {
    /// Model requests received: one per channel, malformed and refused ones included.
    pub requests: u64,
    /// Requests forwarded upstream.
    pub forwarded: u64,
    /// Requests refused or cut by the gateway.
    pub refused: u64,
    /// Request bytes received from the agent.
    pub request_bytes: u64,
    /// Response bytes read from the upstream (streamed back to the agent, or drained).
    pub response_bytes: u64,
    /// Prompt tokens, from the upstream's usage events.
    pub input_tokens: u64,
    /// Completion tokens, from the upstream's usage events.
    pub output_tokens: u64,
    /// Total tokens, from the upstream's usage events.
    pub total_tokens: u64,
    /// Successful answers that carried no usage event (cut, drained or unread ones included).
    pub usage_missing: u64,
    /// Answers whose channel went away (reset by the container, or the turn ended) before they
    /// ended: read on to their usage event and charged, never sent on.
    pub drained: u64,
    /// Occurrences of the credential (or an encoding of it) removed from answers before they
    /// reached the container.
    pub scrubbed: u64,
}

/// What happened on one channel.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChannelReport {
    /// The model named, once the body was checked.
    pub model: Option<String>,
    /// The status sent to the agent.
    pub status: Option<u16>,
    /// Why the gateway refused or cut the exchange.
    pub error: Option<GatewayError>,
    /// Request bytes read.
    pub request_bytes: u64,
    /// Response bytes written.
    pub response_bytes: u64,
    /// The usage the upstream reported.
    pub usage: Option<TokenUsage>,
    /// The answer was cut mid-stream: the channel must be reset, not closed.
    pub reset: bool,
    /// Occurrences of the credential removed from this answer.
    pub scrubbed: u64,
}

/// The gateway state of one turn; clone it into each channel's task.
#[derive(Clone, Debug)]
pub struct TurnGateway {
    gateway: Arc<Gateway>,
    state: Arc<Mutex<TurnState>>,
    changed: Arc<Notify>,
}

/// The turn's counters and the answers still being read from the upstream.
#[derive(Debug, Default)]
struct TurnState {
    usage: GatewayUsage,
    next_pump: u64,
    /// Every answer the upstream is still sending, by pump id.
    pumps: HashMap<u64, PumpState>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PumpState {
    /// Its channel is still served.
    Attached,
    /// Its channel is gone (reset, aborted): the pump drains the answer to its usage event.
    Orphaned,
    /// The turn's usage was reported without it (counted as usage missing already).
    Abandoned,
}

impl TurnState {
    fn orphans(&self) -> usize {
        self.pumps
            .values()
            .filter(|p| **p == PumpState::Orphaned)
            .count()
    }
}

enum Failure {
    /// Refused before the answer started: send an HTTP error.
    Refuse(GatewayError),
    /// Cut after the answer started: reset the channel.
    Cut(GatewayError),
}

/// What a pump sends to its channel.
enum PumpMsg {
    Data(Bytes),
    /// The answer ended; the usage it carried.
    End(Option<TokenUsage>),
    /// The answer was cut (budget, idle upstream, upstream broken).
    Cut(GatewayError),
}

/// The answer's head (status, and whether it is an event stream), or why there is none.
type PumpHead = Result<(http::StatusCode, bool), GatewayError>;

/// How a pump ended.
struct PumpEnd {
    usage: Option<TokenUsage>,
    /// The upstream answered with a success status (so a usage event was due).
    success: bool,
    /// The last message for a channel still served.
    last: Option<PumpMsg>,
}

/// Chunks queued between a pump and its channel (backpressure beyond that).
const PUMP_QUEUE: usize = 4;

/// Marks the pump orphaned when the channel's future goes away before the answer ended (the
/// container reset the channel, or the turn ended).
struct PumpLink {
    id: u64,
    state: Arc<Mutex<TurnState>>,
    changed: Arc<Notify>,
}

impl Drop for PumpLink {
    fn drop(&mut self) {
        let mut state = lock(&self.state);
        if let Some(p) = state.pumps.get_mut(&self.id)
            && *p == PumpState::Attached
        {
            *p = PumpState::Orphaned;
        }
        drop(state);
        self.changed.notify_waiters();
    }
}

fn lock(state: &Mutex<TurnState>) -> std::sync::MutexGuard<'_, TurnState> {
    match state.lock() {
        Ok(s) => s,
        Err(poisoned) => poisoned.into_inner(),
    }
}

impl TurnGateway {
    /// The usage so far.
    #[must_use]
    pub fn usage(&self) -> GatewayUsage {
        lock(&self.state).usage.clone()
    }

    /// The usage once every answer the upstream was still sending has been read to its end (a
    /// reset channel's answer is drained, never sent on), waiting at most the config's settle
    /// deadline (`upstream_settle_timeout_ms`). An answer still unread then counts as
    /// usage missing (its tokens, should they arrive later, are still added).
    pub async fn settle(&self) -> GatewayUsage {
        let settle = Duration::from_millis(self.gateway.config.upstream_settle_timeout_ms);
        let deadline = tokio::time::Instant::now() + settle;
        loop {
            let notified = self.changed.notified();
            if lock(&self.state).pumps.is_empty() {
                break;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                break;
            }
        }
        let mut state = lock(&self.state);
        let mut abandoned = 0u64;
        for p in state.pumps.values_mut() {
            if *p != PumpState::Abandoned {
                *p = PumpState::Abandoned;
                abandoned += 1;
            }
        }
        state.usage.usage_missing = state.usage.usage_missing.saturating_add(abandoned);
        state.usage.clone()
    }

    fn with_usage<T>(&self, f: impl FnOnce(&mut GatewayUsage) -> T) -> T {
        f(&mut lock(&self.state).usage)
    }

    /// Waits until no answer of a reset channel is still being drained, so that the budget
    /// check sees its tokens (bounded: each drain has its own deadline).
    async fn orphans_settled(&self) {
        loop {
            let notified = self.changed.notified();
            if lock(&self.state).orphans() == 0 {
                return;
            }
            notified.await;
        }
    }

    /// Serves one channel: one request, one answer, then the write side is shut down (FIN) —
    /// unless the report says `reset`, in which case the caller resets the channel.
    ///
    /// # Security
    /// Nothing read from `io` reaches the upstream unchecked: the head is parsed strictly, the
    /// body checked before it is forwarded, and only the provider's allowlisted agent headers
    /// are forwarded. The credential is added here; every answer byte written to `io` passes the
    /// credential scrubber. Once forwarded, a request is charged even if this future is dropped:
    /// its answer is drained to the usage event in a task of its own.
    pub async fn serve<IO>(&self, io: IO) -> ChannelReport
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send,
    {
        let (mut reader, mut writer) = tokio::io::split(io);
        let mut report = ChannelReport::default();
        let outcome = self.exchange(&mut reader, &mut writer, &mut report).await;
        match outcome {
            Ok(()) => {
                let _ = writer.shutdown().await;
            }
            Err(Failure::Refuse(e)) => {
                let body = self.gateway.provider.refusal_body(&e);
                let _ = write_refusal(&mut writer, &e, &body).await;
                report.status = Some(e.status());
                report.response_bytes = 0;
                report.error = Some(e);
                self.with_usage(|u| u.refused += 1);
                let _ = writer.shutdown().await;
            }
            Err(Failure::Cut(e)) => {
                report.error = Some(e);
                report.reset = true;
                self.with_usage(|u| u.refused += 1);
            }
        }
        report
    }

    async fn exchange<R, W>(
        &self,
        reader: &mut R,
        writer: &mut W,
        report: &mut ChannelReport,
    ) -> Result<(), Failure>
    where
        R: AsyncRead + Unpin + Send,
        W: AsyncWrite + Unpin + Send,
    {
        let gw = &*self.gateway;
        let config = &gw.config;
        // Every channel is one request attempt, malformed ones included.
        self.with_usage(|u| u.requests += 1);
        let limits = HeadLimits {
            max_head_bytes: config.max_request_head_bytes,
            max_headers: config.max_request_headers,
            max_body_bytes: config.max_request_body_bytes,
        };
        let read = tokio::time::timeout(
            config.read_timeout(),
            read_request(reader, &limits, gw.provider.as_ref()),
        )
        .await
        .map_err(|_| {
            Failure::Refuse(GatewayError::ReadTimeout {
                millis: config.read_timeout_ms,
            })
        })?;
        let (head, body, total) = read.map_err(Failure::Refuse)?;
        report.request_bytes = total;
        // An answer of a reset channel still draining: its tokens count before this check.
        self.orphans_settled().await;
        self.charge_request(total, config)?;
        let checked = gw
            .provider
            .check_body(&head.route, &body, config)
            .map_err(Failure::Refuse)?;
        report.model = Some(checked.model.clone());

        // Bytes after the body, however they are split across reads: the one request of this
        // channel is followed by another (pipelining), which is refused.
        let mut extra = std::pin::pin!(extra_bytes(reader));
        let request = self.upstream_request(&head, body)?;
        let kind = head.route.kind;
        let (_link, head_rx, mut rx) = self.start_pump(request, kind);
        let (status, sse) = tokio::select! {
            head = head_rx => head.unwrap_or(Err(GatewayError::Upstream)).map_err(Failure::Refuse)?,
            () = &mut extra => return Err(Failure::Refuse(GatewayError::Incomplete)),
        };
        let content_type = if sse {
            "text/event-stream"
        } else {
            "application/json"
        };
        let head_out = format!(
            "HTTP/1.1 {} {}\r\ncontent-type: {content_type}\r\ncache-control: no-store\r\nconnection: close\r\n\r\n",
            status.as_u16(),
            status.canonical_reason().unwrap_or("Status"),
        );
        report.status = Some(status.as_u16());
        if !status.is_success() {
            report.error = Some(GatewayError::UpstreamStatus {
                status: status.as_u16(),
            });
        }
        send(writer, head_out.as_bytes()).await?;

        let mut scrubber = Scrubber::new(&gw.patterns);
        let mut out = Vec::new();
        let usage = loop {
            let msg = tokio::select! {
                msg = rx.recv() => msg,
                () = &mut extra => return Err(Failure::Cut(GatewayError::Incomplete)),
            };
            let done = match msg {
                Some(PumpMsg::Data(data)) => {
                    report.response_bytes += data.len() as u64;
                    out.clear();
                    scrubber.push(&data, &mut out);
                    None
                }
                Some(PumpMsg::End(usage)) => {
                    out.clear();
                    scrubber.finish(&mut out);
                    Some(usage)
                }
                Some(PumpMsg::Cut(e)) => return Err(Failure::Cut(e)),
                None => return Err(Failure::Cut(GatewayError::Upstream)),
            };
            self.count_scrubbed(report, scrubber.found());
            if !out.is_empty() {
                send(writer, &out).await?;
            }
            if let Some(usage) = done {
                break usage;
            }
        };
        report.usage = usage;
        if status.is_success() && expects_usage(kind) && usage.is_none() {
            report.error = Some(GatewayError::UsageMissing);
        }
        Ok(())
    }

    /// Counts occurrences as they are removed (so a channel reset later still counts them).
    fn count_scrubbed(&self, report: &mut ChannelReport, found: u64) {
        let new = found.saturating_sub(report.scrubbed);
        if new > 0 {
            report.scrubbed = found;
            self.with_usage(|u| u.scrubbed = u.scrubbed.saturating_add(new));
        }
    }

    /// Sends the request upstream in a task of its own that reads the whole answer: the head
    /// and the chunks go to the channel while it is served; once it is gone the rest is read
    /// (bounded by the response-bytes budget and the drain deadline), never sent, to charge the
    /// tokens the upstream reports.
    fn start_pump(
        &self,
        request: http::Request<Full<Bytes>>,
        kind: RouteKind,
    ) -> (
        PumpLink,
        tokio::sync::oneshot::Receiver<PumpHead>,
        mpsc::Receiver<PumpMsg>,
    ) {
        let id = {
            let mut state = lock(&self.state);
            let id = state.next_pump;
            state.next_pump += 1;
            state.pumps.insert(id, PumpState::Attached);
            id
        };
        let link = PumpLink {
            id,
            state: Arc::clone(&self.state),
            changed: Arc::clone(&self.changed),
        };
        let (head_tx, head_rx) = tokio::sync::oneshot::channel();
        let (tx, rx) = mpsc::channel(PUMP_QUEUE);
        let turn = self.clone();
        tokio::spawn(async move {
            let end = turn.pump(request, kind, head_tx, &tx).await;
            // Charged before the channel hears of the end, so the next request sees the tokens.
            turn.pump_done(id, end.usage, end.success);
            if let Some(last) = end.last {
                let _ = tx.send(last).await;
            }
        });
        (link, head_rx, rx)
    }

    async fn pump(
        &self,
        request: http::Request<Full<Bytes>>,
        kind: RouteKind,
        head_tx: tokio::sync::oneshot::Sender<PumpHead>,
        tx: &mpsc::Sender<PumpMsg>,
    ) -> PumpEnd {
        let gw = &*self.gateway;
        let config = &gw.config;
        let first_byte = Duration::from_millis(config.upstream_first_byte_timeout_ms);
        // No head: the channel hears of it through `head_tx`; nothing to charge.
        let failed = PumpEnd {
            usage: None,
            success: false,
            last: None,
        };
        let response = match tokio::time::timeout(first_byte, gw.client.request(request)).await {
            Ok(Ok(response)) => response,
            Ok(Err(_)) => {
                let _ = head_tx.send(Err(GatewayError::Upstream));
                return failed;
            }
            Err(_) => {
                let e = GatewayError::UpstreamTimeout {
                    millis: config.upstream_first_byte_timeout_ms,
                };
                let _ = head_tx.send(Err(e));
                return failed;
            }
        };
        self.with_usage(|u| u.forwarded += 1);
        let status = response.status();
        if !identity_coded(response.headers()) {
            // The scrubber cannot read a compressed body: none of it is sent on, and the usage
            // it may report cannot be read either (a successful answer counts as one without).
            let _ = head_tx.send(Err(GatewayError::UpstreamEncoding));
            return PumpEnd {
                usage: None,
                success: status.is_success() && expects_usage(kind),
                last: None,
            };
        }
        let sse = response
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let mut attached = head_tx.send(Ok((status, sse))).is_ok();
        // A usage count is due from a successful answer of a route that spends tokens.
        let success = status.is_success() && expects_usage(kind);
        let idle = Duration::from_millis(config.upstream_idle_timeout_ms);
        let mut drain_until =
            (!attached).then(|| tokio::time::Instant::now() + config.drain_timeout());
        let mut body = response.into_body();
        let mut scanner = if kind == RouteKind::Stream {
            UsageScanner::default()
        } else {
            UsageScanner::json()
        };
        let cut = loop {
            let wait = match drain_until {
                Some(until) => {
                    idle.min(until.saturating_duration_since(tokio::time::Instant::now()))
                }
                None => idle,
            };
            let frame = tokio::select! {
                frame = tokio::time::timeout(wait, body.frame()) => frame,
                // The channel went away while the upstream is silent: the drain deadline starts.
                () = tx.closed(), if attached => {
                    attached = false;
                    drain_until = Some(tokio::time::Instant::now() + config.drain_timeout());
                    continue;
                }
            };
            match frame {
                Err(_) => {
                    break Some(GatewayError::UpstreamTimeout {
                        millis: config.upstream_idle_timeout_ms,
                    });
                }
                Ok(None) => {
                    scanner.finish(gw.provider.as_ref());
                    break None;
                }
                Ok(Some(Err(_))) => break Some(GatewayError::Upstream),
                Ok(Some(Ok(frame))) => {
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    scanner.feed(gw.provider.as_ref(), &data);
                    if let Err(e) = self.charge_response(data.len() as u64, config) {
                        break Some(e);
                    }
                    if attached && tx.send(PumpMsg::Data(data)).await.is_err() {
                        attached = false;
                        drain_until = Some(tokio::time::Instant::now() + config.drain_timeout());
                    }
                }
            }
        };
        let last = attached.then(|| match cut {
            Some(e) => PumpMsg::Cut(e),
            None => PumpMsg::End(scanner.usage()),
        });
        PumpEnd {
            usage: scanner.usage(),
            success,
            last,
        }
    }

    /// Charges what one answer reported: its tokens, or (a successful answer without a usage
    /// event, cut or drained ones included) one answer without usage, which fails the next
    /// request closed.
    fn pump_done(&self, id: u64, usage: Option<TokenUsage>, success: bool) {
        let mut state = lock(&self.state);
        let was = state.pumps.remove(&id);
        let u = &mut state.usage;
        match usage {
            Some(t) => {
                u.input_tokens = u.input_tokens.saturating_add(t.input_tokens);
                u.output_tokens = u.output_tokens.saturating_add(t.output_tokens);
                u.total_tokens = u.total_tokens.saturating_add(t.total_tokens);
            }
            None if success && was != Some(PumpState::Abandoned) => u.usage_missing += 1,
            None => {}
        }
        if was == Some(PumpState::Orphaned) {
            u.drained = u.drained.saturating_add(1);
        }
        drop(state);
        self.changed.notify_waiters();
    }

    /// Counts the request against the turn's budgets (the count includes refused requests).
    fn charge_request(&self, bytes: u64, config: &GatewayConfig) -> Result<(), Failure> {
        let budgets = config.budgets;
        self.with_usage(|u| {
            u.request_bytes = u.request_bytes.saturating_add(bytes);
            if u.requests > budgets.requests {
                return Err(GatewayError::BudgetRequests {
                    limit: budgets.requests,
                });
            }
            if u.request_bytes > budgets.request_bytes {
                return Err(GatewayError::BudgetRequestBytes {
                    limit: budgets.request_bytes,
                });
            }
            if u.total_tokens >= budgets.tokens {
                return Err(GatewayError::BudgetTokens {
                    limit: budgets.tokens,
                });
            }
            if u.usage_missing > 0 {
                return Err(GatewayError::UsageMissing);
            }
            Ok(())
        })
        .map_err(Failure::Refuse)
    }

    /// Charges answer bytes read from the upstream (sent on or drained).
    fn charge_response(&self, bytes: u64, config: &GatewayConfig) -> Result<(), GatewayError> {
        let limit = config.budgets.response_bytes;
        self.with_usage(|u| {
            let next = u.response_bytes.saturating_add(bytes);
            if next > limit {
                return Err(GatewayError::BudgetResponseBytes { limit });
            }
            u.response_bytes = next;
            Ok(())
        })
    }

    fn upstream_request(
        &self,
        head: &RequestHead,
        body: Vec<u8>,
    ) -> Result<http::Request<Full<Bytes>>, Failure> {
        let gw = &*self.gateway;
        let refuse = |_| Failure::Refuse(GatewayError::Upstream);
        let url = gw.upstream.join(&head.route.upstream_path);
        let mut builder = match head.route.method {
            RouteMethod::Post => {
                http::Request::post(url).header(http::header::CONTENT_TYPE, "application/json")
            }
            RouteMethod::Get => http::Request::get(url),
        };
        // The credential scrubber reads the answer as sent: ask for it uncompressed (an answer
        // compressed anyway is refused, `PATCH_CANDIDATE_GATEWAY_UPSTREAM_ENCODING`).
        builder = builder.header(http::header::ACCEPT_ENCODING, "identity");
        builder = builder.header(
            http::header::ACCEPT,
            if head.route.kind == RouteKind::Stream {
                "text/event-stream"
            } else {
                "application/json"
            },
        );
        for name in gw.provider.forwarded_headers() {
            if let Some(value) = head.header(name) {
                builder = builder.header(*name, value);
            }
        }
        for (name, value) in gw
            .provider
            .derived_headers(&head.headers)
            .map_err(Failure::Refuse)?
        {
            let value = http::HeaderValue::from_str(&value)
                .map_err(|_| Failure::Refuse(GatewayError::Header))?;
            builder = builder.header(name, value);
        }
        let (name, value) = gw
            .provider
            .auth_header(&gw.credential)
            .map_err(Failure::Refuse)?;
        builder = builder.header(name, value);
        builder.body(Full::new(Bytes::from(body))).map_err(refuse)
    }
}

/// The answer's body is sent as is: every `content-encoding` token is `identity` and every
/// `transfer-encoding` token is `chunked` (any case). Anything else (`gzip`, `br`, an empty
/// or unreadable value) is a body the credential scrubber could not read.
fn identity_coded(headers: &http::HeaderMap) -> bool {
    let only = |name: http::header::HeaderName, coding: &str| {
        headers.get_all(name).iter().all(|v| {
            v.to_str().is_ok_and(|v| {
                v.split(',')
                    .all(|token| token.trim().eq_ignore_ascii_case(coding))
            })
        })
    };
    only(http::header::CONTENT_ENCODING, "identity")
        && only(http::header::TRANSFER_ENCODING, "chunked")
}

/// Routes whose successful answers must report the tokens they spent.
fn expects_usage(kind: RouteKind) -> bool {
    matches!(kind, RouteKind::Stream | RouteKind::SideCounted)
}

/// Resolves when a byte arrives after the request's body; never when the channel ends (a FIN
/// after the request is a half close, not an error).
async fn extra_bytes<R: AsyncRead + Unpin>(reader: &mut R) {
    let mut probe = [0u8; 1];
    match reader.read(&mut probe).await {
        Ok(n) if n > 0 => {}
        _ => std::future::pending().await,
    }
}

/// Reads one request: the head (parsed strictly as it arrives) and exactly `content-length`
/// body bytes. Bytes after the body, or the channel closing early, are refused.
async fn read_request<R>(
    reader: &mut R,
    limits: &HeadLimits,
    provider: &dyn Provider,
) -> Result<(RequestHead, Vec<u8>, u64), GatewayError>
where
    R: AsyncRead + Unpin + Send,
{
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = vec![0u8; 16 * 1024];
    let (head, head_len) = loop {
        let n = reader
            .read(&mut chunk)
            .await
            .map_err(|_| GatewayError::Incomplete)?;
        if n == 0 {
            return Err(if buf.is_empty() {
                GatewayError::Incomplete
            } else {
                // A head that never completes: judge what arrived, else incomplete.
                parse_head(&buf, limits, provider)?;
                GatewayError::Incomplete
            });
        }
        buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
        if let Some(done) = parse_head(&buf, limits, provider)? {
            break done;
        }
    };
    let body_len = usize::try_from(head.content_length).map_err(|_| GatewayError::ContentLength)?;
    let total = head_len.saturating_add(body_len);
    buf.reserve(total.saturating_sub(buf.len()));
    while buf.len() < total {
        let n = reader
            .read(&mut chunk)
            .await
            .map_err(|_| GatewayError::Incomplete)?;
        if n == 0 {
            return Err(GatewayError::Incomplete);
        }
        buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
    }
    if buf.len() > total {
        return Err(GatewayError::Incomplete);
    }
    let body = buf.split_off(head_len);
    Ok((head, body, total as u64))
}

/// Writes `bytes` to the client and flushes them; a client that went away cancels the exchange.
async fn send<W: AsyncWrite + Unpin>(writer: &mut W, bytes: &[u8]) -> Result<(), Failure> {
    writer
        .write_all(bytes)
        .await
        .map_err(|_| Failure::Cut(GatewayError::Cancelled))?;
    writer
        .flush()
        .await
        .map_err(|_| Failure::Cut(GatewayError::Cancelled))
}

async fn write_refusal<W: AsyncWrite + Unpin>(
    writer: &mut W,
    e: &GatewayError,
    body: &str,
) -> std::io::Result<()> {
    let status = http::StatusCode::from_u16(e.status()).unwrap_or(http::StatusCode::BAD_REQUEST);
    let out = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        status.as_u16(),
        status.canonical_reason().unwrap_or("Error"),
        body.len(),
    );
    writer.write_all(out.as_bytes()).await?;
    writer.flush().await
}
