//! `turn-runner --live`: the container side of the framed stdio protocol (`tunnel` v1).
//!
//! The runner sends HELLO, reads HELLO and the request (REQUEST… REQUEST_END), listens on
//! `127.0.0.1:<port>` inside the container's own network namespace (under `--network none` only
//! the loopback interface exists), starts the agent with its model provider pointing there, and
//! turns every accepted TCP connection into a channel: OPEN n, DATA both ways, FIN ↔
//! `shutdown(write)`, RESET ↔ close. The turn itself is the offline one ([`run_turn_with`]) with
//! the live hooks: permission requests for edits of approved paths are allowed, the worker's STOP
//! halts the agent, tool calls become EVENT frames. When the turn ends, every channel is closed
//! and the result document (the offline stdout bytes) goes out as RESULT… RESULT_END.
//!
//! # Security
//! Every frame from the worker passes the strict decoder and the container-side [`Session`]; a
//! violation ends the turn without a result (the worker sees the stream end). Every frame this
//! side sends passes the same session first, so the runner never emits what the worker refuses:
//! a connection that would exceed the channel caps is refused (closed) locally, a channel that
//! would exceed its byte cap is RESET with `PROOF_WORKER_CHANNEL_BUDGET`. The agent never sees a
//! credential: it has none, and the worker adds it outside the container.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tunnel::{
    ChannelId, Chunk, Decoder, Disposition, EventPayload, Frame, Limits, ResetCode, Role, Session,
    TunnelError,
};

use crate::agents::adapter;
use crate::error::ProofError;
use crate::request::{LiveSpec, TurnRequest};
use crate::runner::{EventSink, RunnerConfig, TurnHooks, run_turn_with};

/// The in-container deadline of a live turn (the worker's own deadline, with STOP, is shorter).
pub const LIVE_TURN_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// Frames queued towards stdout at most (producers wait: backpressure from the pipe).
const OUT_QUEUE: usize = 256;
/// Bytes read from stdin or a socket at once.
const READ_CHUNK: usize = 64 * 1024;
/// Bytes from the worker queued for one socket the agent does not read; more resets the channel.
const CHANNEL_BACKLOG_BYTES: usize = 8 << 20;

/// RESET codes this side sends.
const RESET_BUDGET: &str = "PROOF_WORKER_CHANNEL_BUDGET";
const RESET_BACKLOG: &str = "PROOF_WORKER_CHANNEL_BACKLOG";
const RESET_IO: &str = "PROOF_WORKER_CHANNEL_IO";

/// The runner configuration of the live turn `spec` asks for: its agent's adapter (program
/// unless the runner was given one, arguments after the runner's own, settings environment, ACP
/// setup).
#[must_use]
pub fn live_config(cfg: &RunnerConfig, spec: &LiveSpec) -> RunnerConfig {
    let adapter = adapter(spec.agent, &spec.model, spec.port);
    let mut turn_cfg = cfg.clone();
    if cfg.agent_from_request {
        turn_cfg.agent = adapter.program;
    }
    // Test-only arguments (an interpreter's script) come first, the agent's settings after.
    turn_cfg.agent_args.extend(adapter.args);
    turn_cfg.agent_env.extend(adapter.env);
    turn_cfg.agent_env.extend(
        crate::runner::COMMAND_ENV
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    turn_cfg.acp = adapter.acp;
    turn_cfg
}

/// Frames towards stdout, each checked by the session before it is queued (so the queue order is
/// the order the session saw).
#[derive(Clone)]
struct Outbox {
    tx: mpsc::Sender<Frame>,
    session: Arc<Mutex<Session>>,
}

impl Outbox {
    /// Queues `frame` after the session accepted it; waits for room.
    async fn send(&self, frame: Frame) -> Result<(), OutboxError> {
        let permit = self.tx.reserve().await.map_err(|_| OutboxError::Closed)?;
        let mut session = self.session.lock().map_err(|_| OutboxError::Closed)?;
        session.send(&frame).map_err(OutboxError::Refused)?;
        permit.send(frame);
        Ok(())
    }

    /// Queues `frame` only if there is room now (advisory frames).
    fn try_send(&self, frame: Frame) {
        let Ok(permit) = self.tx.try_reserve() else {
            return;
        };
        if let Ok(mut session) = self.session.lock()
            && session.send(&frame).is_ok()
        {
            permit.send(frame);
        }
    }

    /// OPEN for a new channel when the open-channel and per-turn caps allow one more.
    async fn open(&self, limits: &Limits) -> Option<ChannelId> {
        let permit = self.tx.reserve().await.ok()?;
        let mut session = self.session.lock().ok()?;
        if session.open_channels() >= limits.max_open_channels
            || session.channels_opened() >= limits.max_channels
        {
            return None;
        }
        let n = ChannelId::try_from(session.channels_opened().checked_add(1)?).ok()?;
        session.send(&Frame::Open(n)).ok()?;
        permit.send(Frame::Open(n));
        Some(n)
    }
}

#[derive(Debug)]
enum OutboxError {
    Closed,
    Refused(TunnelError),
}

enum ChanMsg {
    Data(Vec<u8>),
    Fin,
}

struct ChannelHandle {
    tx: mpsc::UnboundedSender<ChanMsg>,
    cancel: CancellationToken,
    backlog: Arc<AtomicUsize>,
}

/// State shared by the stdin reader, the accept loop and the channels.
struct Shared {
    channels: Mutex<HashMap<u32, ChannelHandle>>,
    /// STOP, or the worker's stream ended, or a protocol violation: halt the agent now.
    stop: CancellationToken,
    /// The turn is over: stop accepting, close every channel.
    shutdown: CancellationToken,
    /// The first protocol violation from the worker.
    fatal: Mutex<Option<TunnelError>>,
}

impl Shared {
    fn fail(&self, e: TunnelError) {
        if let Ok(mut slot) = self.fatal.lock()
            && slot.is_none()
        {
            *slot = Some(e);
        }
        self.stop.cancel();
        self.close_all();
    }

    fn close_all(&self) {
        if let Ok(mut map) = self.channels.lock() {
            for (_, handle) in map.drain() {
                handle.cancel.cancel();
            }
        }
    }

    fn take_fatal(&self) -> Option<TunnelError> {
        self.fatal.lock().ok().and_then(|mut f| f.take())
    }
}

/// Runs one live turn over `input` (frames from the worker) and `output` (frames to it).
///
/// # Errors
/// A protocol violation by the worker (its `PATCH_CANDIDATE_TUNNEL_*` code), a refused request
/// (`PROOF_WORKER_REQUEST_*`, `PROOF_WORKER_LIVE_REQUEST`, …), `PROOF_WORKER_LIVE_LISTEN`, an
/// isolation exposure, or an I/O failure on stdout. No RESULT_END is sent then.
pub async fn run_live<R, W>(cfg: &RunnerConfig, input: R, output: W) -> Result<(), ProofError>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let limits = Limits::default();
    let session = Arc::new(Mutex::new(Session::new(Role::Container, limits)));
    let (tx, rx) = mpsc::channel(OUT_QUEUE);
    let outbox = Outbox { tx, session };
    let writer = tokio::spawn(write_frames(output, rx));
    let shared = Arc::new(Shared {
        channels: Mutex::new(HashMap::new()),
        stop: CancellationToken::new(),
        shutdown: CancellationToken::new(),
        fatal: Mutex::new(None),
    });
    send_or_io(&outbox, Frame::Hello).await?;

    let (request_tx, request_rx) = oneshot::channel();
    let reader = tokio::spawn(read_frames(
        input,
        outbox.clone(),
        shared.clone(),
        request_tx,
    ));
    let result = live_turn(cfg, &limits, &outbox, &shared, request_rx).await;
    shared.shutdown.cancel();
    shared.close_all();
    reader.abort();
    if let Some(e) = shared.take_fatal() {
        return Err(e.into());
    }
    let document = result?;
    for frame in Frame::result_frames(&document) {
        send_or_io(&outbox, frame).await?;
    }
    send_or_io(&outbox, Frame::ResultEnd).await?;
    drop(outbox);
    match writer.await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.into()),
        Err(_) => Err(ProofError::Io {
            kind: std::io::ErrorKind::BrokenPipe,
        }),
    }
}

async fn send_or_io(outbox: &Outbox, frame: Frame) -> Result<(), ProofError> {
    outbox.send(frame).await.map_err(|e| match e {
        OutboxError::Refused(t) => ProofError::Tunnel(t),
        OutboxError::Closed => ProofError::Io {
            kind: std::io::ErrorKind::BrokenPipe,
        },
    })
}

/// Waits for the request, starts listening, runs the turn; returns the result document.
async fn live_turn(
    cfg: &RunnerConfig,
    limits: &Limits,
    outbox: &Outbox,
    shared: &Arc<Shared>,
    request_rx: oneshot::Receiver<Result<Vec<u8>, TunnelError>>,
) -> Result<Vec<u8>, ProofError> {
    let request_bytes = match request_rx.await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(e)) => return Err(e.into()),
        Err(_) => return Err(TunnelError::Truncated { buffered: 0 }.into()),
    };
    let request = TurnRequest::parse(&request_bytes)?;
    let spec = request.live.clone().ok_or(ProofError::LiveRequest {
        reason: "a live turn needs the live object",
    })?;
    let listener = TcpListener::bind(("127.0.0.1", spec.port))
        .await
        .map_err(|_| ProofError::LiveListen { port: spec.port })?;
    let turn_cfg = live_config(cfg, &spec);

    let events_out = outbox.clone();
    let sink: EventSink = Arc::new(move |object| {
        if let Ok(payload) = EventPayload::from_object(&object) {
            events_out.try_send(Frame::Event(payload));
        }
    });
    let hooks = TurnHooks {
        live: true,
        stop: Some(shared.stop.clone()),
        events: Some(sink),
    };
    let acceptor = tokio::spawn(accept_loop(
        listener,
        *limits,
        outbox.clone(),
        shared.clone(),
    ));
    let result = run_turn_with(&turn_cfg, &request_bytes, &hooks).await;
    shared.shutdown.cancel();
    let _ = acceptor.await;
    let result = result?;
    if !result.exposures.is_empty() {
        return Err(ProofError::Isolation {
            exposures: result.exposures,
        });
    }
    let mut document = serde_json::to_vec(&result.output).map_err(|_| ProofError::Output)?;
    document.push(b'\n');
    Ok(document)
}

async fn write_frames<W: AsyncWrite + Unpin>(
    mut out: W,
    mut rx: mpsc::Receiver<Frame>,
) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(READ_CHUNK + 16);
    while let Some(frame) = rx.recv().await {
        buf.clear();
        frame.encode(&mut buf);
        out.write_all(&buf).await?;
        if rx.is_empty() {
            out.flush().await?;
        }
        if matches!(frame, Frame::ResultEnd) {
            break;
        }
    }
    out.flush().await
}

/// Reads and checks the worker's frames until its stream ends or breaks the protocol.
async fn read_frames<R: AsyncRead + Unpin>(
    mut input: R,
    outbox: Outbox,
    shared: Arc<Shared>,
    request_tx: oneshot::Sender<Result<Vec<u8>, TunnelError>>,
) {
    let mut decoder = Decoder::new();
    let mut request = Vec::new();
    let mut request_tx = Some(request_tx);
    let mut buf = vec![0u8; READ_CHUNK];
    let failure = loop {
        let n = match input.read(&mut buf).await {
            Ok(0) => match decoder.finish() {
                // The worker's stream ended: before the request it is a truncated request;
                // after it, the same as STOP.
                Ok(()) if request_tx.is_none() => {
                    shared.stop.cancel();
                    return;
                }
                Ok(()) => break TunnelError::Truncated { buffered: 0 },
                Err(e) => break e,
            },
            Ok(n) => n,
            Err(_) => {
                break TunnelError::Truncated {
                    buffered: decoder.buffered(),
                };
            }
        };
        let frames = match decoder.push(buf.get(..n).unwrap_or_default()) {
            Ok(frames) => frames,
            Err(e) => break e,
        };
        let mut failed = None;
        for frame in frames {
            let disposition = match outbox.session.lock() {
                Ok(mut session) => session.receive(&frame),
                Err(_) => Err(TunnelError::Truncated { buffered: 0 }),
            };
            match disposition {
                Ok(Disposition::Deliver) => {}
                Ok(Disposition::Ignore) => continue,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
            match frame {
                Frame::Request(chunk) => request.extend_from_slice(chunk.as_bytes()),
                Frame::RequestEnd => {
                    if let Some(tx) = request_tx.take() {
                        let _ = tx.send(Ok(std::mem::take(&mut request)));
                    }
                }
                Frame::Data(n, chunk) => deliver(&shared, &outbox, n, chunk).await,
                Frame::Fin(n) => {
                    if let Ok(map) = shared.channels.lock()
                        && let Some(handle) = map.get(&n.get())
                    {
                        let _ = handle.tx.send(ChanMsg::Fin);
                    }
                }
                Frame::Reset(n, _) => {
                    if let Ok(mut map) = shared.channels.lock()
                        && let Some(handle) = map.remove(&n.get())
                    {
                        handle.cancel.cancel();
                    }
                }
                Frame::Stop => shared.stop.cancel(),
                // HELLO is checked by the session; the rest cannot pass its direction check.
                _ => {}
            }
        }
        if let Some(e) = failed {
            break e;
        }
    };
    match request_tx.take() {
        Some(tx) => {
            let _ = tx.send(Err(failure));
            shared.stop.cancel();
        }
        None => shared.fail(failure),
    }
}

/// Hands worker bytes to a channel's socket writer; a channel whose agent does not read resets.
async fn deliver(shared: &Shared, outbox: &Outbox, n: ChannelId, chunk: Chunk) {
    let len = chunk.len();
    let overflow = {
        let Ok(map) = shared.channels.lock() else {
            return;
        };
        let Some(handle) = map.get(&n.get()) else {
            return;
        };
        let queued = handle.backlog.fetch_add(len, Ordering::SeqCst) + len;
        if queued > CHANNEL_BACKLOG_BYTES {
            true
        } else {
            let _ = handle.tx.send(ChanMsg::Data(chunk.into_vec()));
            false
        }
    };
    if overflow {
        reset_local(shared, outbox, n, RESET_BACKLOG).await;
    }
}

/// Closes channel `n` on this side and tells the worker (RESET with `code`).
async fn reset_local(shared: &Shared, outbox: &Outbox, n: ChannelId, code: &str) {
    if let Ok(mut map) = shared.channels.lock()
        && let Some(handle) = map.remove(&n.get())
    {
        handle.cancel.cancel();
    }
    if let Ok(code) = code.parse::<ResetCode>() {
        let _ = outbox.send(Frame::Reset(n, code)).await;
    }
}

async fn accept_loop(listener: TcpListener, limits: Limits, outbox: Outbox, shared: Arc<Shared>) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = shared.shutdown.cancelled() => return,
        };
        let Ok((stream, _)) = accepted else {
            // Out of descriptors or a connection aborted before accept: try again shortly.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        if shared.shutdown.is_cancelled() {
            return;
        }
        let cancel = shared.shutdown.child_token();
        let (tx, rx) = mpsc::unbounded_channel();
        let backlog = Arc::new(AtomicUsize::new(0));
        // Register before OPEN is queued, so the first answer byte finds its socket.
        let Some(n) = ({
            let opened = outbox.open(&limits).await;
            if let Some(n) = opened
                && let Ok(mut map) = shared.channels.lock()
            {
                map.insert(
                    n.get(),
                    ChannelHandle {
                        tx,
                        cancel: cancel.clone(),
                        backlog: backlog.clone(),
                    },
                );
            }
            opened
        }) else {
            // Over the open-channel or per-turn cap: the connection is refused (closed) here.
            drop(stream);
            refused_event(&outbox);
            continue;
        };
        let (read_half, write_half) = stream.into_split();
        tokio::spawn(upstream(
            n,
            read_half,
            outbox.clone(),
            shared.clone(),
            cancel.clone(),
        ));
        tokio::spawn(downstream(
            n,
            write_half,
            rx,
            backlog,
            outbox.clone(),
            shared.clone(),
            cancel,
        ));
    }
}

fn refused_event(outbox: &Outbox) {
    let mut event = serde_json::Map::new();
    event.insert("event".to_owned(), "channel_refused".into());
    if let Ok(payload) = EventPayload::from_object(&event) {
        outbox.try_send(Frame::Event(payload));
    }
}

/// Socket → worker: DATA per read, FIN at end of stream, RESET on a cap or an error.
async fn upstream(
    n: ChannelId,
    mut socket: tokio::net::tcp::OwnedReadHalf,
    outbox: Outbox,
    shared: Arc<Shared>,
    cancel: CancellationToken,
) {
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        let read = tokio::select! {
            read = socket.read(&mut buf) => read,
            () = cancel.cancelled() => return,
        };
        match read {
            Ok(0) => {
                let _ = outbox.send(Frame::Fin(n)).await;
                return;
            }
            Ok(len) => {
                let Some(chunk) = buf
                    .get(..len)
                    .and_then(|b| Chunk::try_from(b.to_vec()).ok())
                else {
                    return;
                };
                match outbox.send(Frame::Data(n, chunk)).await {
                    Ok(()) => {}
                    Err(OutboxError::Refused(_)) => {
                        reset_local(&shared, &outbox, n, RESET_BUDGET).await;
                        return;
                    }
                    Err(OutboxError::Closed) => return,
                }
            }
            Err(_) => {
                reset_local(&shared, &outbox, n, RESET_IO).await;
                return;
            }
        }
    }
}

/// Worker → socket: DATA written in order, FIN as `shutdown(write)`.
async fn downstream(
    n: ChannelId,
    mut socket: tokio::net::tcp::OwnedWriteHalf,
    mut rx: mpsc::UnboundedReceiver<ChanMsg>,
    backlog: Arc<AtomicUsize>,
    outbox: Outbox,
    shared: Arc<Shared>,
    cancel: CancellationToken,
) {
    loop {
        let msg = tokio::select! {
            msg = rx.recv() => msg,
            () = cancel.cancelled() => return,
        };
        match msg {
            Some(ChanMsg::Data(bytes)) => {
                backlog.fetch_sub(bytes.len(), Ordering::SeqCst);
                let written = tokio::select! {
                    written = socket.write_all(&bytes) => written,
                    () = cancel.cancelled() => return,
                };
                if written.is_err() {
                    reset_local(&shared, &outbox, n, RESET_IO).await;
                    return;
                }
            }
            Some(ChanMsg::Fin) => {
                let _ = socket.shutdown().await;
                // Keep the write half (and so the connection) until the channel ends.
                cancel.cancelled().await;
                return;
            }
            None => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::{CODEX_ENTRY, GEMINI_ENTRY, LiveAgent, NODE};

    #[test]
    fn the_request_picks_the_adapter_unless_the_runner_was_given_an_agent() {
        let spec = LiveSpec {
            agent: LiveAgent::Gemini,
            model: "gemini-2.5-flash".to_owned(),
            port: 8417,
        };
        let mut image = RunnerConfig::image_defaults();
        image.agent_from_request = true;
        let cfg = live_config(&image, &spec);
        assert_eq!(cfg.agent, std::path::PathBuf::from(NODE));
        assert_eq!(
            cfg.agent_args.first().map(String::as_str),
            Some(GEMINI_ENTRY)
        );
        assert!(!cfg.acp.client_fs);
        assert!(cfg.acp.gateway.is_some());
        // PATH and HOME stay first; the adapter's settings follow.
        assert_eq!(cfg.agent_env.first().map(|(k, _)| k.as_str()), Some("PATH"));
        let mut test = RunnerConfig::image_defaults();
        test.agent = "python3".into();
        test.agent_args = vec!["script.py".to_owned()];
        let cfg = live_config(
            &test,
            &LiveSpec {
                agent: LiveAgent::Codex,
                ..spec
            },
        );
        assert_eq!(cfg.agent, std::path::PathBuf::from("python3"));
        assert_eq!(
            cfg.agent_args.first().map(String::as_str),
            Some("script.py")
        );
        assert_eq!(cfg.agent_args.get(1).map(String::as_str), Some(CODEX_ENTRY));
        assert!(!cfg.acp.client_fs);
        assert!(cfg.agent_env.iter().any(|(k, _)| k == "CODEX_CONFIG"));
    }
}
