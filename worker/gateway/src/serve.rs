//! One tunnelled model request, end to end: read it under the deadline and caps, check it, charge
//! the turn's budgets, forward it with the credential, stream the answer back chunk by chunk, and
//! count the tokens the upstream reports.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

use crate::config::GatewayConfig;
use crate::credential::Credential;
use crate::error::{GatewayError, GatewaySetupError};
use crate::http1::{HeadLimits, RequestHead, parse_head};
use crate::provider::{Provider, TokenUsage};
use crate::sse::UsageScanner;
use crate::upstream::{HttpClient, UpstreamUrl, client};

/// The gateway of one process: settings, provider, credential and the pooled upstream client.
pub struct Gateway {
    config: GatewayConfig,
    provider: Arc<dyn Provider>,
    credential: Credential,
    upstream: UpstreamUrl,
    client: HttpClient,
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
        Ok(Self {
            config,
            provider,
            credential,
            upstream,
            client: client()?,
        })
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
            usage: Arc::new(Mutex::new(GatewayUsage::default())),
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
    /// Response bytes streamed back to the agent.
    pub response_bytes: u64,
    /// Prompt tokens, from the upstream's usage events.
    pub input_tokens: u64,
    /// Completion tokens, from the upstream's usage events.
    pub output_tokens: u64,
    /// Total tokens, from the upstream's usage events.
    pub total_tokens: u64,
    /// Successful answers that carried no usage event.
    pub usage_missing: u64,
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
}

/// The gateway state of one turn; clone it into each channel's task.
#[derive(Clone, Debug)]
pub struct TurnGateway {
    gateway: Arc<Gateway>,
    usage: Arc<Mutex<GatewayUsage>>,
}

enum Failure {
    /// Refused before the answer started: send an HTTP error.
    Refuse(GatewayError),
    /// Cut after the answer started: reset the channel.
    Cut(GatewayError),
}

impl TurnGateway {
    /// The usage so far.
    #[must_use]
    pub fn usage(&self) -> GatewayUsage {
        self.usage.lock().map(|u| u.clone()).unwrap_or_default()
    }

    fn with_usage<T>(&self, f: impl FnOnce(&mut GatewayUsage) -> T) -> T {
        match self.usage.lock() {
            Ok(mut u) => f(&mut u),
            Err(poisoned) => f(&mut poisoned.into_inner()),
        }
    }

    /// Serves one channel: one request, one answer, then the write side is shut down (FIN) —
    /// unless the report says `reset`, in which case the caller resets the channel.
    ///
    /// # Security
    /// Nothing read from `io` reaches the upstream unchecked: the head is parsed strictly, the
    /// body re-serialized from its checked value, and only the provider's allowlisted agent
    /// headers are forwarded. The credential is added here and never written to `io`.
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
                let _ = write_refusal(&mut writer, &e).await;
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
            read_request(reader, &limits, gw.provider.path()),
        )
        .await
        .map_err(|_| {
            Failure::Refuse(GatewayError::ReadTimeout {
                millis: config.read_timeout_ms,
            })
        })?;
        let (head, body, total) = read.map_err(Failure::Refuse)?;
        report.request_bytes = total;
        self.charge_request(total, config)?;
        let checked = gw
            .provider
            .check_body(&body, config)
            .map_err(Failure::Refuse)?;
        report.model = Some(checked.model.clone());

        let request = self.upstream_request(&head, checked.forward)?;
        let first_byte = Duration::from_millis(config.upstream_first_byte_timeout_ms);
        let response = tokio::time::timeout(first_byte, gw.client.request(request))
            .await
            .map_err(|_| {
                Failure::Refuse(GatewayError::UpstreamTimeout {
                    millis: config.upstream_first_byte_timeout_ms,
                })
            })?
            .map_err(|_| Failure::Refuse(GatewayError::Upstream))?;
        self.with_usage(|u| u.forwarded += 1);

        let status = response.status();
        let content_type = response
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .filter(|v| v.starts_with("text/event-stream"))
            .map_or("application/json", |_| "text/event-stream");
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
        writer
            .write_all(head_out.as_bytes())
            .await
            .map_err(|_| Failure::Cut(GatewayError::Cancelled))?;
        writer
            .flush()
            .await
            .map_err(|_| Failure::Cut(GatewayError::Cancelled))?;

        let idle = Duration::from_millis(config.upstream_idle_timeout_ms);
        let mut body = response.into_body();
        let mut scanner = UsageScanner::default();
        loop {
            let frame = tokio::time::timeout(idle, body.frame())
                .await
                .map_err(|_| {
                    Failure::Cut(GatewayError::UpstreamTimeout {
                        millis: config.upstream_idle_timeout_ms,
                    })
                })?;
            let Some(frame) = frame else { break };
            let frame = frame.map_err(|_| Failure::Cut(GatewayError::Upstream))?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            self.charge_response(data.len() as u64, config)?;
            report.response_bytes += data.len() as u64;
            scanner.feed(gw.provider.as_ref(), &data);
            writer
                .write_all(&data)
                .await
                .map_err(|_| Failure::Cut(GatewayError::Cancelled))?;
            writer
                .flush()
                .await
                .map_err(|_| Failure::Cut(GatewayError::Cancelled))?;
        }
        report.usage = scanner.usage();
        self.with_usage(|u| match scanner.usage() {
            Some(t) => {
                u.input_tokens = u.input_tokens.saturating_add(t.input_tokens);
                u.output_tokens = u.output_tokens.saturating_add(t.output_tokens);
                u.total_tokens = u.total_tokens.saturating_add(t.total_tokens);
            }
            None if status.is_success() => u.usage_missing += 1,
            None => {}
        });
        if status.is_success() && scanner.usage().is_none() {
            report.error = Some(GatewayError::UsageMissing);
        }
        Ok(())
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

    fn charge_response(&self, bytes: u64, config: &GatewayConfig) -> Result<(), Failure> {
        let limit = config.budgets.response_bytes;
        self.with_usage(|u| {
            let next = u.response_bytes.saturating_add(bytes);
            if next > limit {
                return Err(GatewayError::BudgetResponseBytes { limit });
            }
            u.response_bytes = next;
            Ok(())
        })
        .map_err(Failure::Cut)
    }

    fn upstream_request(
        &self,
        head: &RequestHead,
        body: Vec<u8>,
    ) -> Result<http::Request<Full<Bytes>>, Failure> {
        let gw = &*self.gateway;
        let refuse = |_| Failure::Refuse(GatewayError::Upstream);
        let mut builder = http::Request::post(gw.upstream.join(gw.provider.upstream_path()))
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "text/event-stream");
        for name in gw.provider.forwarded_headers() {
            if let Some(value) = head.header(name) {
                builder = builder.header(*name, value);
            }
        }
        let (name, value) = gw
            .provider
            .auth_header(&gw.credential)
            .map_err(Failure::Refuse)?;
        builder = builder.header(name, value);
        builder.body(Full::new(Bytes::from(body))).map_err(refuse)
    }
}

/// Reads one request: the head (parsed strictly as it arrives) and exactly `content-length`
/// body bytes. Bytes after the body, or the channel closing early, are refused.
async fn read_request<R>(
    reader: &mut R,
    limits: &HeadLimits,
    path: &str,
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
                parse_head(&buf, limits, path)?;
                GatewayError::Incomplete
            });
        }
        buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
        if let Some(done) = parse_head(&buf, limits, path)? {
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

async fn write_refusal<W: AsyncWrite + Unpin>(
    writer: &mut W,
    e: &GatewayError,
) -> std::io::Result<()> {
    let status = http::StatusCode::from_u16(e.status()).unwrap_or(http::StatusCode::BAD_REQUEST);
    let body = serde_json::json!({
        "error": {"code": e.code(), "message": e.to_string(), "type": "gateway_refusal"}
    })
    .to_string();
    let out = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        status.as_u16(),
        status.canonical_reason().unwrap_or("Error"),
        body.len(),
    );
    writer.write_all(out.as_bytes()).await?;
    writer.flush().await
}

/// Time since `start`, in whole microseconds (for reports and benchmarks).
#[must_use]
pub fn micros_since(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX)
}
