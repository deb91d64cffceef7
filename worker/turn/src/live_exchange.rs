//! The worker side of a live turn: the container's stdin and stdout carry the framed protocol of
//! the `tunnel` crate. One I/O loop sends HELLO and the request, demultiplexes the container's
//! frames under the protocol's caps, hands each tunnelled channel to the model gateway, collects
//! the RESULT bytes under the result cap (they are parsed exactly like an offline turn's stdout),
//! sends STOP at the wall budget and gives up after a grace period (the caller kills and removes
//! the container). Every channel task lives in a `JoinSet` owned by the loop, so every channel is
//! torn down on every path, cancellation included.
//!
//! Host memory follows what the host holds, never the container's frame count: each channel's
//! inbound bytes are coalesced into one bounded backlog (`live_inbox`; when it is full the loop
//! waits up to 250 ms for the consumer to take a block, then resets the channel with
//! `PATCH_CANDIDATE_TUNNEL_CHANNEL_BACKLOG`), the outbound data queue is
//! bounded in frames of at most 64 KiB each. The loop itself never waits on the container's stdin:
//! STOP and RESET travel on a priority queue the writer drains before any data, FIN follows its
//! channel's data from the channel's own task, and the grace after STOP runs from the moment STOP
//! is due. Advisory EVENTs reach the progress sink under a per-turn byte cap and a rate limit
//! (`live_event_gate`); the rest is counted and reported once.
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

use crate::agent::Agent;
use crate::config::TurnConfig;
use crate::error::TurnError;
use crate::live_commands::{CommandCounts, CommandTally};
use crate::live_event_gate::EventGate;
use crate::live_inbox::{BacklogMeter, ChannelInbox, MAX_CHANNEL_BACKLOG, PATIENCE};
use container::ContainerError;
use container::docker_call;
use container::{ContainerRuntime, OutputChunk, StdinWriter};

/// The default port `turn-runner` listens on inside the container.
pub const DEFAULT_LIVE_PORT: u16 = 8417;
/// How long the container has, after STOP, to harvest and send RESULT_END.
pub const STOP_GRACE: Duration = Duration::from_secs(5);
/// Data frames (each at most 64 KiB of payload) queued for the container's stdin before senders
/// wait (backpressure): at most 4 MiB.
const OUTBOUND_QUEUE: usize = 64;
/// Bytes the writer batches into one write to the container's stdin.
const WRITE_BATCH: usize = 256 * 1024;
/// Buffer of each channel's in-process pipe between the tunnel and the gateway.
const CHANNEL_PIPE: usize = 64 * 1024;

/// The operator's choices for a live turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveSettings {
    /// The agent inside the image (its adapter in the runner, its gateway provider).
    pub agent: Agent,
    /// The model the agent is configured with (also in the gateway's allowlist).
    pub model: String,
    /// The loopback port `turn-runner` listens on inside the container.
    pub port: u16,
    /// The tunnel's caps on the worker side.
    pub limits: tunnel::Limits,
    /// Grace after STOP.
    pub stop_grace: Duration,
    /// How the repository is checked (the operator's gate commands), quoted in the agent's
    /// prompt as `validation_hints`; empty when no gate definitions were given.
    pub validation_hints: Vec<String>,
}

impl LiveSettings {
    /// Codex with `model`, the default port, caps and grace.
    #[must_use]
    pub fn codex(model: &str) -> Self {
        Self::new(Agent::Codex, model)
    }

    /// `agent` with `model`, the default port, caps and grace.
    #[must_use]
    pub fn new(agent: Agent, model: &str) -> Self {
        Self {
            agent,
            model: model.to_owned(),
            port: DEFAULT_LIVE_PORT,
            limits: tunnel::Limits::default(),
            stop_grace: STOP_GRACE,
            validation_hints: Vec::new(),
        }
    }

    /// The same settings with `hints` (trusted: the operator's gate commands) for the agent's
    /// prompt: at most 16, each at most 1,024 bytes without control characters (the runner's
    /// caps); any other is left out.
    #[must_use]
    pub fn with_validation_hints(mut self, hints: impl IntoIterator<Item = String>) -> Self {
        self.validation_hints = hints
            .into_iter()
            .filter(|h| !h.is_empty() && h.len() <= 1024 && !h.chars().any(char::is_control))
            .take(16)
            .collect();
        self
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
    /// An EVENT frame from the container (advisory, untrusted), within the per-turn byte cap and
    /// the rate limit.
    AgentEvent(serde_json::Map<String, serde_json::Value>),
    /// EVENT frames held back by the byte cap or the rate limit, reported once at the end of the
    /// turn.
    AgentEventsSuppressed {
        /// EVENT frames not shown.
        events: u32,
        /// Their payload bytes.
        bytes: u64,
    },
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
    /// The stable code (`PATCH_CANDIDATE_GATEWAY_*`, or `PATCH_CANDIDATE_TUNNEL_CHANNEL_BACKLOG`
    /// when the worker reset a channel whose consumer fell behind).
    pub code: &'static str,
}

/// The record of a live turn's tunnel.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LiveLog {
    /// Channels the container opened.
    pub channels: u32,
    /// Advisory EVENT frames received.
    pub agent_events: u32,
    /// Of those, held back from the progress sink by the byte cap or the rate limit.
    pub agent_events_suppressed: u32,
    /// The most bytes the host held at once for channel consumers (allocated backlog blocks).
    pub backlog_peak_bytes: u64,
    /// Gateway refusals and cuts, in order.
    pub events: Vec<LiveEvent>,
    /// STOP was sent at the wall budget.
    pub stopped: bool,
    /// The gateway's trusted usage.
    pub gateway: GatewayUsage,
    /// The agent's commands, counted and timed by the worker from the runner's events.
    pub commands: CommandCounts,
}

impl LiveLog {
    /// The gateway refusal or cut that explains a failed turn: the first one recorded, leaving
    /// out the events an agent survives by design (a scrubbed answer, a side call the gateway
    /// answered itself).
    #[must_use]
    pub fn refusal_code(&self) -> Option<&'static str> {
        self.events
            .iter()
            .map(|e| e.code)
            .find(|code| !SURVIVABLE.contains(code))
    }
}

/// Gateway event codes that do not fail a turn.
const SURVIVABLE: &[&str] = &[
    gateway::CREDENTIAL_SCRUBBED,
    "PATCH_CANDIDATE_GATEWAY_SIDE_CALL",
];

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
            "agent": settings.agent.name(),
            "model": settings.model,
            "port": settings.port,
        }),
    );
    if !settings.validation_hints.is_empty() {
        doc.insert(
            "validation_hints".to_owned(),
            serde_json::json!(settings.validation_hints),
        );
    }
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
    /// Inbound DATA of each live channel, for its task (FIN: the task sees EOF once drained).
    inbound: HashMap<ChannelId, Arc<ChannelInbox>>,
    /// Abort handles by channel, for RESET and RESULT_END.
    aborts: HashMap<ChannelId, tokio::task::AbortHandle>,
    tasks: JoinSet<()>,
    /// Each task's end, sent before its FIN (so the loop has the report before the container
    /// can have answered the FIN, even on a path where the task is then aborted unjoined).
    ends: mpsc::UnboundedSender<ChannelEnd>,
    /// Every backlog's bytes, for the bound and the log.
    meter: Arc<BacklogMeter>,
}

impl Channels {
    /// Drops the channel's backlog (its memory is released now) and aborts its task.
    fn tear_down(&mut self, n: ChannelId) {
        if let Some(inbox) = self.inbound.remove(&n) {
            inbox.close();
        }
        if let Some(abort) = self.aborts.remove(&n) {
            abort.abort();
        }
    }
}

/// The two ways to the container's stdin: the bounded data queue (DATA, FIN; senders wait) and the
/// priority queue (STOP, RESET) that no sender ever waits on and the writer drains first. The
/// priority queue holds at most one STOP and one RESET per channel opened (the protocol's channel
/// cap bounds it).
#[derive(Clone)]
struct Outbound {
    data: mpsc::Sender<Frame>,
    priority: mpsc::UnboundedSender<Frame>,
}

impl Outbound {
    /// Queues a control frame; never waits.
    fn urgent(&self, frame: Frame) {
        // A closed queue means the writer is gone (stdin broke): the output decides the turn.
        let _ = self.priority.send(frame);
    }
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
    let (data_tx, data_rx) = mpsc::channel::<Frame>(OUTBOUND_QUEUE);
    let (priority_tx, priority_rx) = mpsc::unbounded_channel::<Frame>();
    let out = Outbound {
        data: data_tx,
        priority: priority_tx,
    };
    // The writer runs on its own task and sends HELLO, the request and REQUEST_END first (so a
    // container that never reads its stdin stalls only the writer, never this loop); it is
    // aborted when this future ends, on every path.
    let _writer = AbortOnDrop(tokio::spawn(write_frames(
        stdin,
        payload.to_vec(),
        Queues {
            data: data_rx,
            priority: priority_rx,
        },
        Arc::clone(&session),
    )));

    let mut decoder = Decoder::new();
    let (ends_tx, mut ends) = mpsc::unbounded_channel::<ChannelEnd>();
    let mut channels = Channels {
        inbound: HashMap::new(),
        aborts: HashMap::new(),
        tasks: JoinSet::new(),
        ends: ends_tx,
        meter: Arc::new(BacklogMeter::default()),
    };
    let mut events = EventGate::new(tokio::time::Instant::now());
    let mut tally = CommandTally::default();
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
                        let next_deadline = give_up_at.unwrap_or(stop_at);
                        for frame in frames {
                            if let Err(e) = dispatch(frame, &session, &mut channels, &mut result, &mut log, (&mut events, &mut tally), live, &out, next_deadline).await {
                                failed = Some(e);
                                break;
                            }
                        }
                        if let Some(e) = failed {
                            break Err(e);
                        }
                    }
                    Some(Err(e)) => break Err(TurnError::runtime(&e, "attach stream")),
                }
            }
            Some((n, report)) = ends.recv() => {
                channel_ended(n, report, &mut channels, &mut log, live, &out);
            }
            // Reaps finished tasks (their ends came through `ends`).
            Some(_) = channels.tasks.join_next(), if !channels.tasks.is_empty() => {}
            () = tokio::time::sleep_until(stop_at), if give_up_at.is_none() => {
                // The wall budget is spent: ask the runner to stop the agent and harvest. STOP
                // goes ahead of any queued data and this loop never waits for it to be written:
                // the grace runs from the moment STOP is due.
                out.urgent(Frame::Stop);
                log.stopped = true;
                (live.progress)(&LiveNote::Stopped);
                give_up_at = Some(stop_at + settings.stop_grace);
            }
            () = sleep_until_opt(give_up_at) => {
                break Err(TurnError::from(ContainerError::Timeout { seconds: config.max_wall_seconds() }));
            }
        }
    };
    // Every channel task is aborted here (also when this future is dropped: the JoinSet aborts
    // its tasks on drop).
    channels.tasks.abort_all();
    // Channels that ended just before the turn did still get their note and event.
    while let Ok((n, report)) = ends.try_recv() {
        channel_ended(n, report, &mut channels, &mut log, live, &out);
    }
    for inbox in channels.inbound.values() {
        inbox.close();
    }
    drop(out);
    // Answers of channels reset or torn down are drained to their usage first (bounded).
    log.gateway = live.gateway.settle().await;
    log.commands = tally.counts();
    log.backlog_peak_bytes = u64::try_from(channels.meter.peak()).unwrap_or(u64::MAX);
    let suppressed = events.suppressed();
    log.agent_events_suppressed = suppressed.events;
    if suppressed.events > 0 {
        (live.progress)(&LiveNote::AgentEventsSuppressed {
            events: suppressed.events,
            bytes: suppressed.bytes,
        });
    }
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

/// The writer's ends of the two outbound queues.
struct Queues {
    data: mpsc::Receiver<Frame>,
    priority: mpsc::UnboundedReceiver<Frame>,
}

/// Writes HELLO, the request and REQUEST_END, then the queued frames to the container's stdin,
/// priority frames (STOP, RESET) ahead of data, checking each against the session first (a frame
/// the peer would refuse, e.g. DATA on a channel reset since, is dropped). Ends when the data
/// queue closes or stdin breaks; stdin is closed when this returns.
async fn write_frames(
    mut stdin: StdinWriter,
    request: Vec<u8>,
    mut queues: Queues,
    session: Arc<Mutex<Session>>,
) {
    let mut buf = Vec::with_capacity(WRITE_BATCH + tunnel::MAX_FRAME_PAYLOAD + tunnel::HEADER_LEN);
    let mut opening = std::iter::once(Frame::Hello)
        .chain(Frame::request_frames(&request))
        .chain(std::iter::once(Frame::RequestEnd))
        .peekable();
    while opening.peek().is_some() {
        buf.clear();
        for frame in opening.by_ref() {
            encode_checked(&session, &frame, &mut buf);
            if buf.len() >= WRITE_BATCH {
                break;
            }
        }
        if stdin.write_all(&buf).await.is_err() || stdin.flush().await.is_err() {
            return;
        }
    }
    drop(opening);
    drop(request);
    loop {
        buf.clear();
        while let Ok(frame) = queues.priority.try_recv() {
            encode_checked(&session, &frame, &mut buf);
        }
        if buf.is_empty() {
            tokio::select! {
                biased;
                Some(frame) = queues.priority.recv() => encode_checked(&session, &frame, &mut buf),
                frame = queues.data.recv() => match frame {
                    Some(frame) => encode_checked(&session, &frame, &mut buf),
                    None => break,
                },
            }
        }
        // Batch what is already queued into one write, priority frames first.
        while buf.len() < WRITE_BATCH {
            let next = match queues.priority.try_recv() {
                Ok(frame) => frame,
                Err(_) => match queues.data.try_recv() {
                    Ok(frame) => frame,
                    Err(_) => break,
                },
            };
            encode_checked(&session, &next, &mut buf);
        }
        if buf.is_empty() {
            continue;
        }
        if stdin.write_all(&buf).await.is_err() || stdin.flush().await.is_err() {
            return;
        }
    }
    let _ = stdin.shutdown().await;
}

/// Appends `frame` to `buf` if the session lets this side send it.
fn encode_checked(session: &Mutex<Session>, frame: &Frame, buf: &mut Vec<u8>) {
    if may_send(session, frame) {
        frame.encode(buf);
    }
}

/// Checks and records a frame about to be sent (false: drop it).
fn may_send(session: &Mutex<Session>, frame: &Frame) -> bool {
    session.lock().is_ok_and(|mut s| s.send(frame).is_ok())
}

/// Acts on one received frame.
#[expect(
    clippy::too_many_arguments,
    reason = "the loop's state, borrowed apart"
)]
async fn dispatch(
    frame: Frame,
    session: &Mutex<Session>,
    channels: &mut Channels,
    result: &mut Vec<u8>,
    log: &mut LiveLog,
    (events, tally): (&mut EventGate, &mut CommandTally),
    live: &LiveContext<'_>,
    out: &Outbound,
    next_deadline: tokio::time::Instant,
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
            open_channel(n, channels, live.gateway.clone(), out.data.clone());
        }
        Frame::Data(n, chunk) => {
            // A channel already answered, reset or torn down has no backlog: the bytes are moot.
            // A full backlog waits (briefly) for a consumer that is reading.
            // The wait never runs past the loop's next deadline (STOP due, or the end of the
            // grace), so a stalled consumer cannot delay STOP or the end of the turn.
            let patience = (tokio::time::Instant::now() + PATIENCE).min(next_deadline);
            let overflow = match channels.inbound.get(&n) {
                Some(inbox) => inbox.push_until(chunk.as_bytes(), patience).await.is_err(),
                None => false,
            };
            if overflow {
                // The consumer stopped taking: reset this channel only; the others go on.
                channels.tear_down(n);
                let error = tunnel::TunnelError::ChannelBacklog {
                    channel: n.get(),
                    limit: MAX_CHANNEL_BACKLOG,
                };
                let code = error.code().parse::<ResetCode>().unwrap_or_default();
                out.urgent(Frame::Reset(n, code));
                log.events.push(LiveEvent {
                    channel: n.get(),
                    code: error.code(),
                });
            }
        }
        Frame::Fin(n) => {
            if let Some(inbox) = channels.inbound.remove(&n) {
                inbox.fin();
            }
        }
        Frame::Reset(n, _) => channels.tear_down(n),
        Frame::Event(payload) => {
            log.agent_events += 1;
            let object = payload.object();
            let now = tokio::time::Instant::now();
            // Counted whether or not the progress sink is shown the event.
            tally.observe(&object, now);
            if events.admit(payload.as_bytes().len(), now) {
                (live.progress)(&LiveNote::AgentEvent(object));
            }
        }
        Frame::Result(chunk) => result.extend_from_slice(chunk.as_bytes()),
        Frame::ResultEnd => {
            // The runner is done: every channel still open is torn down here.
            for (_, inbox) in channels.inbound.drain() {
                inbox.close();
            }
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
    let inbox = Arc::new(ChannelInbox::new(
        Arc::clone(&channels.meter),
        MAX_CHANNEL_BACKLOG,
    ));
    channels.inbound.insert(n, Arc::clone(&inbox));
    let ends = channels.ends.clone();
    let abort = channels.tasks.spawn(async move {
        let (gateway_end, tunnel_end) = tokio::io::duplex(CHANNEL_PIPE);
        let (mut from_gateway, mut to_gateway) = tokio::io::split(tunnel_end);
        let serve = gateway.serve(gateway_end);
        let inbound = async {
            while let Some(block) = inbox.take().await {
                if to_gateway.write_all(block.bytes()).await.is_err() {
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
        // Nothing reads the backlog any more: release it (and a push waiting on it).
        inbox.close();
        // FIN follows the answer's data on the same queue (only this task waits for room); a
        // RESET goes on the priority queue from the loop.
        let reset = report.reset;
        let _ = ends.send((n, report));
        if !reset {
            let _ = out.send(Frame::Fin(n)).await;
        }
    });
    channels.aborts.insert(n, abort);
}

fn channel_ended(
    n: ChannelId,
    report: ChannelReport,
    channels: &mut Channels,
    log: &mut LiveLog,
    live: &LiveContext<'_>,
    out: &Outbound,
) {
    channels.aborts.remove(&n);
    if let Some(inbox) = channels.inbound.remove(&n) {
        inbox.close();
    }
    if report.reset {
        let code = report
            .error
            .as_ref()
            .and_then(|e| e.code().parse::<ResetCode>().ok())
            .unwrap_or_default();
        out.urgent(Frame::Reset(n, code));
    }
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

#[cfg(test)]
mod hint_tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn validation_hints_travel_beside_the_live_object_within_the_runners_caps() {
        let offline = br#"{"app_id":"a"}"#;
        let plain = live_payload(offline, &LiveSettings::new(Agent::Gemini, "m")).unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&plain).unwrap();
        assert!(doc.get("validation_hints").is_none());
        let long = "x".repeat(1025);
        let settings = LiveSettings::new(Agent::Gemini, "m").with_validation_hints(
            [
                "pytest -q".to_owned(),
                "a\nb".to_owned(),
                long,
                String::new(),
            ]
            .into_iter()
            .chain((0..20).map(|i| format!("cmd {i}"))),
        );
        let doc: serde_json::Value =
            serde_json::from_slice(&live_payload(offline, &settings).unwrap()).unwrap();
        let hints = doc["validation_hints"].as_array().unwrap();
        assert_eq!(hints.len(), 16);
        assert_eq!(hints[0], "pytest -q");
        assert_eq!(hints[1], "cmd 0");
    }
}
