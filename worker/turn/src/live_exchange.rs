//! The worker side of a live turn: the container's stdin and stdout carry the framed protocol of
//! the `tunnel` crate. One I/O loop sends HELLO and the request, demultiplexes the container's
//! frames under the protocol's caps, hands each tunnelled channel to the model gateway, collects
//! the RESULT bytes under the result cap (they are parsed exactly like an offline turn's stdout),
//! sends STOP at the wall budget and gives up after a grace period (the caller kills and removes
//! the container). Every channel task lives in a `JoinSet` owned by the loop, so every channel is
//! torn down on every path, cancellation included.
//!
//! Offline turns never come here: their stdio stays the unframed reference contract.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use gateway::{ChannelReport, GatewayUsage, TurnGateway};
use serde::Serialize;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tunnel::{ChannelId, Decoder, Disposition, Frame, ResetCode, Role, Session};

use crate::config::TurnConfig;
use crate::error::TurnError;
use container::ContainerError;
use container::docker_call;
use container::{ContainerRuntime, OutputChunk, RuntimeError, StdinWriter};

/// The default port `turn-runner` listens on inside the container.
pub const DEFAULT_LIVE_PORT: u16 = 8417;
/// How long the container has, after STOP, to harvest and send RESULT_END.
pub const STOP_GRACE: Duration = Duration::from_secs(5);
/// Frames queued for the container's stdin before senders wait (backpressure).
const OUTBOUND_QUEUE: usize = 256;
/// Buffer of each channel's in-process pipe between the tunnel and the gateway.
const CHANNEL_PIPE: usize = 64 * 1024;

/// The operator's choices for a live turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveSettings {
    /// The agent adapter inside the image (`codex`).
    pub agent: String,
    /// The model the agent is configured with (also in the gateway's allowlist).
    pub model: String,
    /// The loopback port `turn-runner` listens on inside the container.
    pub port: u16,
    /// The tunnel's caps on the worker side.
    pub limits: tunnel::Limits,
    /// Grace after STOP.
    pub stop_grace: Duration,
}

impl LiveSettings {
    /// Codex with `model`, the default port, caps and grace.
    #[must_use]
    pub fn codex(model: &str) -> Self {
        Self {
            agent: "codex".to_owned(),
            model: model.to_owned(),
            port: DEFAULT_LIVE_PORT,
            limits: tunnel::Limits::default(),
            stop_grace: STOP_GRACE,
        }
    }
}

/// Something worth showing the operator while the turn runs.
#[derive(Debug, Clone, PartialEq)]
pub enum LiveNote {
    /// A tunnelled model request ended.
    ModelRequest {
        /// The channel.
        channel: u32,
        /// The report of the gateway.
        report: ChannelReport,
        /// The turn's trusted usage so far.
        usage: GatewayUsage,
    },
    /// An EVENT frame from the container (advisory, untrusted).
    AgentEvent(serde_json::Map<String, serde_json::Value>),
    /// STOP was sent (the wall budget is spent).
    Stopped,
}

/// Receives [`LiveNote`]s (progress on stderr in the CLI).
pub type LiveProgress = dyn Fn(&LiveNote) + Send + Sync;

/// What a live turn needs beyond an offline one.
pub struct LiveContext<'a> {
    /// Agent, model, port, caps.
    pub settings: &'a LiveSettings,
    /// The gateway's per-turn state.
    pub gateway: &'a TurnGateway,
    /// Progress sink.
    pub progress: &'a LiveProgress,
}

impl std::fmt::Debug for LiveContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveContext")
            .field("settings", self.settings)
            .finish_non_exhaustive()
    }
}

/// One gateway refusal or cut, for the turn's events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LiveEvent {
    /// The channel.
    pub channel: u32,
    /// The stable code (`PATCH_CANDIDATE_GATEWAY_*`).
    pub code: &'static str,
}

/// The record of a live turn's tunnel.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LiveLog {
    /// Channels the container opened.
    pub channels: u32,
    /// Advisory EVENT frames received.
    pub agent_events: u32,
    /// Gateway refusals and cuts, in order.
    pub events: Vec<LiveEvent>,
    /// STOP was sent at the wall budget.
    pub stopped: bool,
    /// The gateway's trusted usage.
    pub gateway: GatewayUsage,
}

/// The live request: the offline stdin document plus a `live` object.
///
/// # Errors
/// `REPOSITORY_DOCKER_REQUEST_BUDGET` when the document exceeds the request cap.
pub fn live_payload(offline: &[u8], settings: &LiveSettings) -> Result<Vec<u8>, TurnError> {
    let budget = TurnError::RequestBudget {
        limit: crate::limits::MAX_REQUEST_BYTES,
    };
    let mut doc: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(offline)
        .map_err(|_| TurnError::RequestBudget {
            limit: crate::limits::MAX_REQUEST_BYTES,
        })?;
    doc.insert(
        "live".to_owned(),
        serde_json::json!({
            "agent": settings.agent,
            "model": settings.model,
            "port": settings.port,
        }),
    );
    let bytes = serde_json::to_vec(&doc).map_err(|_| TurnError::RequestBudget {
        limit: crate::limits::MAX_REQUEST_BYTES,
    })?;
    if bytes.len() > crate::limits::MAX_REQUEST_BYTES {
        return Err(budget);
    }
    Ok(bytes)
}

/// A channel task's end: the channel and the gateway's report.
type ChannelEnd = (ChannelId, ChannelReport);

struct Channels {
    /// Inbound DATA of each live channel, to its task (dropped on FIN: the task sees EOF).
    inbound: HashMap<ChannelId, mpsc::UnboundedSender<Vec<u8>>>,
    /// Abort handles by channel, for RESET and RESULT_END.
    aborts: HashMap<ChannelId, tokio::task::AbortHandle>,
    tasks: JoinSet<ChannelEnd>,
}

/// Runs the framed exchange on an attached, started container. Returns the RESULT bytes and the
/// tunnel's record.
///
/// # Errors
/// A `PATCH_CANDIDATE_TUNNEL_*` protocol violation, `REPOSITORY_DOCKER_OUTPUT_LIMIT` (stderr),
/// `REPOSITORY_DOCKER_TIMEOUT` when RESULT_END does not arrive within the grace after STOP,
/// or a Docker stream failure.
pub(crate) async fn live_exchange<R: ContainerRuntime>(
    runtime: &R,
    id: &str,
    payload: &[u8],
    config: &TurnConfig,
    live: &LiveContext<'_>,
) -> Result<(Vec<u8>, LiveLog), TurnError> {
    let settings = live.settings;
    let mut output = docker_call("attach", runtime.attach_output(id)).await?;
    let stdin = docker_call("attach stdin", runtime.attach_stdin(id)).await?;
    docker_call("start", runtime.start(id)).await?;

    let session = Arc::new(Mutex::new(Session::new(Role::Worker, settings.limits)));
    let (out_tx, out_rx) = mpsc::channel::<Frame>(OUTBOUND_QUEUE);
    // The writer runs on its own task (so a full queue never stalls the demultiplexer) and is
    // aborted when this future ends, on every path.
    let _writer = AbortOnDrop(tokio::spawn(write_frames(
        stdin,
        out_rx,
        Arc::clone(&session),
    )));
    // HELLO, the request, REQUEST_END; a closed queue means stdin broke: the output decides.
    let mut opening = vec![Frame::Hello];
    opening.extend(Frame::request_frames(payload));
    opening.push(Frame::RequestEnd);
    for frame in opening {
        if out_tx.send(frame).await.is_err() {
            break;
        }
    }

    let mut decoder = Decoder::new();
    let mut channels = Channels {
        inbound: HashMap::new(),
        aborts: HashMap::new(),
        tasks: JoinSet::new(),
    };
    let mut log = LiveLog::default();
    let mut result = Vec::new();
    let mut stderr_len = 0usize;
    let stop_at = tokio::time::Instant::now() + Duration::from_secs(config.max_wall_seconds());
    let mut give_up_at: Option<tokio::time::Instant> = None;
    let outcome: Result<(), TurnError> = loop {
        tokio::select! {
            chunk = output.next() => {
                match chunk {
                    None => break Ok(()),
                    Some(Ok(OutputChunk::Stderr(bytes))) => {
                        stderr_len = stderr_len.saturating_add(bytes.len());
                        if stderr_len > config.max_stderr_bytes() {
                            break Err(TurnError::OutputLimit { stream: "stderr", limit: config.max_stderr_bytes() });
                        }
                    }
                    Some(Ok(OutputChunk::Stdout(bytes))) => {
                        let frames = match decoder.push(&bytes) {
                            Ok(f) => f,
                            Err(e) => break Err(TurnError::Tunnel(e)),
                        };
                        let mut failed = None;
                        for frame in frames {
                            if let Err(e) = dispatch(frame, &session, &mut channels, &mut result, &mut log, live, &out_tx) {
                                failed = Some(e);
                                break;
                            }
                        }
                        if let Some(e) = failed {
                            break Err(e);
                        }
                    }
                    Some(Err(RuntimeError::Unavailable)) => break Err(TurnError::from(ContainerError::Unavailable { detail: "attach stream" })),
                    Some(Err(_)) => break Err(TurnError::from(ContainerError::CommandFailed { operation: "attach stream" })),
                }
            }
            Some(ended) = channels.tasks.join_next(), if !channels.tasks.is_empty() => {
                if let Ok((n, report)) = ended {
                    channel_ended(n, report, &mut channels, &mut log, live, &out_tx).await;
                }
            }
            () = tokio::time::sleep_until(stop_at), if give_up_at.is_none() => {
                // The wall budget is spent: ask the runner to stop the agent and harvest.
                let _ = out_tx.send(Frame::Stop).await;
                log.stopped = true;
                (live.progress)(&LiveNote::Stopped);
                give_up_at = Some(tokio::time::Instant::now() + settings.stop_grace);
            }
            () = sleep_until_opt(give_up_at) => {
                break Err(TurnError::from(ContainerError::Timeout { seconds: config.max_wall_seconds() }));
            }
        }
    };
    // Every channel task is aborted here (also when this future is dropped: the JoinSet aborts
    // its tasks on drop).
    channels.tasks.abort_all();
    drop(out_tx);
    // Answers of channels reset or torn down are drained to their usage first (bounded).
    log.gateway = live.gateway.settle().await;
    outcome?;
    decoder.finish().map_err(TurnError::Tunnel)?;
    let ended = session.lock().map(|s| s.finish());
    match ended {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(TurnError::Tunnel(e)),
        Err(_) => return Err(TurnError::Tunnel(tunnel::TunnelError::NoResultEnd)),
    }
    Ok((result, log))
}

/// Aborts a spawned task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Writes queued frames to the container's stdin, checking each against the session first (a
/// frame the peer would refuse, e.g. DATA on a channel it reset, is dropped). Ends when the queue
/// closes or stdin breaks; stdin is closed when this returns.
async fn write_frames(
    mut stdin: StdinWriter,
    mut queue: mpsc::Receiver<Frame>,
    session: Arc<Mutex<Session>>,
) {
    let mut buf = Vec::with_capacity(tunnel::MAX_FRAME_PAYLOAD + tunnel::HEADER_LEN);
    while let Some(frame) = queue.recv().await {
        if !may_send(&session, &frame) {
            continue;
        }
        buf.clear();
        frame.encode(&mut buf);
        // Batch what is already queued into one write.
        while buf.len() < 256 * 1024 {
            match queue.try_recv() {
                Ok(next) => {
                    if may_send(&session, &next) {
                        next.encode(&mut buf);
                    }
                }
                Err(_) => break,
            }
        }
        if stdin.write_all(&buf).await.is_err() || stdin.flush().await.is_err() {
            return;
        }
    }
    let _ = stdin.shutdown().await;
}

/// Checks and records a frame about to be sent (false: drop it).
fn may_send(session: &Mutex<Session>, frame: &Frame) -> bool {
    session.lock().is_ok_and(|mut s| s.send(frame).is_ok())
}

/// Acts on one received frame.
fn dispatch(
    frame: Frame,
    session: &Mutex<Session>,
    channels: &mut Channels,
    result: &mut Vec<u8>,
    log: &mut LiveLog,
    live: &LiveContext<'_>,
    out: &mpsc::Sender<Frame>,
) -> Result<(), TurnError> {
    let disposition = session
        .lock()
        .map_err(|_| TurnError::Tunnel(tunnel::TunnelError::NoResultEnd))?
        .receive(&frame)
        .map_err(TurnError::Tunnel)?;
    if disposition == Disposition::Ignore {
        return Ok(());
    }
    match frame {
        Frame::Open(n) => {
            log.channels += 1;
            open_channel(n, channels, live.gateway.clone(), out.clone());
        }
        Frame::Data(n, chunk) => {
            if let Some(tx) = channels.inbound.get(&n) {
                // A task that already answered has dropped its receiver: the bytes are moot.
                let _ = tx.send(chunk.into_vec());
            }
        }
        Frame::Fin(n) => {
            channels.inbound.remove(&n);
        }
        Frame::Reset(n, _) => {
            channels.inbound.remove(&n);
            if let Some(abort) = channels.aborts.remove(&n) {
                abort.abort();
            }
        }
        Frame::Event(payload) => {
            log.agent_events += 1;
            (live.progress)(&LiveNote::AgentEvent(payload.object()));
        }
        Frame::Result(chunk) => result.extend_from_slice(chunk.as_bytes()),
        Frame::ResultEnd => {
            // The runner is done: every channel still open is torn down here.
            channels.inbound.clear();
            for (_, abort) in channels.aborts.drain() {
                abort.abort();
            }
        }
        // HELLO needs no action; the session refuses every worker-bound frame type that is not
        // matched above.
        _ => {}
    }
    Ok(())
}

fn open_channel(
    n: ChannelId,
    channels: &mut Channels,
    gateway: TurnGateway,
    out: mpsc::Sender<Frame>,
) {
    let (in_tx, mut in_rx) = mpsc::unbounded_channel::<Vec<u8>>();
    channels.inbound.insert(n, in_tx);
    let abort = channels.tasks.spawn(async move {
        let (gateway_end, tunnel_end) = tokio::io::duplex(CHANNEL_PIPE);
        let (mut from_gateway, mut to_gateway) = tokio::io::split(tunnel_end);
        let serve = gateway.serve(gateway_end);
        let inbound = async {
            while let Some(bytes) = in_rx.recv().await {
                if to_gateway.write_all(&bytes).await.is_err() {
                    return;
                }
            }
            // FIN from the container: the gateway reads EOF.
            let _ = to_gateway.shutdown().await;
        };
        let outbound = async {
            let mut buf = vec![0u8; tunnel::MAX_FRAME_PAYLOAD];
            loop {
                match from_gateway.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(k) => {
                        for frame in Frame::data_frames(n, buf.get(..k).unwrap_or_default()) {
                            if out.send(frame).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            }
        };
        // The exchange ends when the gateway has answered and its answer is queued; the inbound
        // side (the container may never FIN) is not waited for.
        let answered = async { tokio::join!(serve, outbound).0 };
        tokio::pin!(answered);
        tokio::pin!(inbound);
        let mut inbound_done = false;
        let report = loop {
            tokio::select! {
                report = &mut answered => break report,
                () = &mut inbound, if !inbound_done => inbound_done = true,
            }
        };
        (n, report)
    });
    channels.aborts.insert(n, abort);
}

async fn channel_ended(
    n: ChannelId,
    report: ChannelReport,
    channels: &mut Channels,
    log: &mut LiveLog,
    live: &LiveContext<'_>,
    out: &mpsc::Sender<Frame>,
) {
    channels.aborts.remove(&n);
    channels.inbound.remove(&n);
    let closing = if report.reset {
        let code = report
            .error
            .as_ref()
            .and_then(|e| e.code().parse::<ResetCode>().ok())
            .unwrap_or_default();
        Frame::Reset(n, code)
    } else {
        Frame::Fin(n)
    };
    let _ = out.send(closing).await;
    if let Some(e) = &report.error {
        log.events.push(LiveEvent {
            channel: n.get(),
            code: e.code(),
        });
    }
    if report.scrubbed > 0 {
        log.events.push(LiveEvent {
            channel: n.get(),
            code: gateway::CREDENTIAL_SCRUBBED,
        });
    }
    (live.progress)(&LiveNote::ModelRequest {
        channel: n.get(),
        report,
        usage: live.gateway.usage(),
    });
}

#[cfg(test)]
#[path = "live_exchange_tests.rs"]
mod tests;
