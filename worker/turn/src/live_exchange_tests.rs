#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gateway::testkit::{Reply, ScriptedUpstream};
use gateway::{Credential, Gateway, GatewayConfig, OpenAiResponses, TurnGateway};
use pretty_assertions::assert_eq;
use snapshot::{ApprovedExecutionContext, DefaultPathGuard, RepositorySnapshotEvidence};
use tokio::io::{AsyncReadExt as _, DuplexStream};
use tokio::sync::mpsc::UnboundedSender;
use tunnel::{ChannelId, Chunk, Decoder, EventPayload, Frame};

use super::*;
use crate::docker_turn::execute_live_turn;
use crate::request::CodingWorkerRequest;
use crate::testkit::*;
use container::{OutputChunk, RuntimeError};

const KEY: &str = "sk-live-test-c0ffee1234567890";
const MODEL: &str = "gpt-5.3-codex";

fn update_output() -> Vec<u8> {
    use base64::Engine as _;
    let new = "def answer():\n    return 2\n";
    let archive = archive_of(&[(SERVICE, new)]);
    serde_json::to_vec(&serde_json::json!({
        "proposal": {
            "proposal_id": "agent-id",
            "provider_id": "agent",
            "provider_model": MODEL,
            "status": "completed",
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            "summary": "s",
            "rationale": "r",
            "changed_files": [{"path": SERVICE, "op": "update", "content": new}],
            "owned_paths": [SERVICE],
            "provider_events": [],
        },
        "workspace_archive_base64": base64::engine::general_purpose::STANDARD.encode(archive),
    }))
    .unwrap()
}

struct Fixture {
    context: ApprovedExecutionContext,
    snapshot: RepositorySnapshotEvidence,
    policy: DefaultPathGuard,
    absence: ManifestAbsence,
}

impl Fixture {
    fn new() -> Self {
        Self {
            context: context(&[], &[]),
            snapshot: snapshot_evidence(),
            policy: DefaultPathGuard::default(),
            absence: ManifestAbsence::default(),
        }
    }
    fn approved<'a>(&'a self, request: &'a CodingWorkerRequest) -> snapshot::ApprovedTurn<'a> {
        approve(
            request,
            &self.context,
            &self.snapshot,
            &self.policy,
            Some(&self.absence),
        )
        .unwrap()
    }
    fn request(&self) -> CodingWorkerRequest {
        CodingWorkerRequest::for_context(
            &self.context,
            self.context.raw_request(),
            files(&[SERVICE]),
            files(&[]),
        )
    }
}

/// The simulated runner's view of its stdio.
struct Sim {
    stdin: DuplexStream,
    out: UnboundedSender<Result<OutputChunk, RuntimeError>>,
    decoder: Decoder,
    pending: VecDeque<Frame>,
}

impl Sim {
    fn new(stdin: DuplexStream, out: UnboundedSender<Result<OutputChunk, RuntimeError>>) -> Self {
        Self {
            stdin,
            out,
            decoder: Decoder::new(),
            pending: VecDeque::new(),
        }
    }

    async fn recv(&mut self) -> Option<Frame> {
        loop {
            if let Some(f) = self.pending.pop_front() {
                return Some(f);
            }
            let mut buf = vec![0u8; 1 << 16];
            let n = self.stdin.read(&mut buf).await.ok()?;
            if n == 0 {
                return None;
            }
            self.pending.extend(self.decoder.push(&buf[..n]).unwrap());
        }
    }

    fn send(&self, frame: &Frame) {
        self.raw(&frame.to_bytes());
    }

    fn raw(&self, bytes: &[u8]) {
        let _ = self.out.send(Ok(OutputChunk::Stdout(bytes.to_vec())));
    }

    /// HELLO both ways and the whole request; returns the request JSON.
    async fn handshake(&mut self) -> serde_json::Value {
        self.send(&Frame::Hello);
        assert_eq!(self.recv().await, Some(Frame::Hello));
        let mut request = Vec::new();
        loop {
            match self.recv().await.unwrap() {
                Frame::Request(c) => request.extend_from_slice(c.as_bytes()),
                Frame::RequestEnd => break,
                other => panic!("unexpected {other:?}"),
            }
        }
        serde_json::from_slice(&request).unwrap()
    }

    /// Opens channel `n` and sends `request` on it; the channel's id.
    fn open_with(&self, n: u32, request: &[u8]) -> ChannelId {
        let id = ChannelId::try_from(n).unwrap();
        self.send(&Frame::Open(id));
        for f in Frame::data_frames(id, request) {
            self.send(&f);
        }
        id
    }

    /// Tunnels one HTTP request on channel `n`; returns the whole answer (until the worker's FIN
    /// or RESET) and whether it was reset.
    async fn tunnel(&mut self, n: u32, request: &[u8]) -> (Vec<u8>, bool) {
        let id = self.open_with(n, request);
        let mut answer = Vec::new();
        loop {
            match self.recv().await.unwrap() {
                Frame::Data(m, c) if m == id => answer.extend_from_slice(c.as_bytes()),
                Frame::Fin(m) if m == id => {
                    self.send(&Frame::Fin(id));
                    return (answer, false);
                }
                Frame::Reset(m, _) if m == id => return (answer, true),
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    fn result(&self, bytes: &[u8]) {
        for f in Frame::result_frames(bytes) {
            self.send(&f);
        }
        self.send(&Frame::ResultEnd);
    }
}

/// An upstream answer that starts (`response.created`) and then stalls.
fn stalled() -> Reply {
    Reply::Stall(vec![gateway::testkit::events::created("r")])
}

/// An answer's bytes as text.
fn as_text(answer: Vec<u8>) -> String {
    String::from_utf8(answer).unwrap()
}

fn http_request(model: &str) -> Vec<u8> {
    let body = serde_json::json!({"model": model, "stream": true, "input": []}).to_string();
    format!(
        "POST /v1/responses HTTP/1.1\r\nhost: 127.0.0.1:8417\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

type Script = fn(Sim) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

fn fake(script: Script) -> FakeRuntime {
    FakeRuntime::live(Arc::new(move |stdin, out| script(Sim::new(stdin, out))))
}

/// [`fake`] whose runner does the handshake (HELLO both ways, the whole request) before `script`.
fn fake_after_hello(script: Script) -> FakeRuntime {
    FakeRuntime::live(Arc::new(move |stdin, out| {
        Box::pin(async move {
            let mut sim = Sim::new(stdin, out);
            sim.handshake().await;
            script(sim).await;
        })
    }))
}

/// A scripted upstream answering with `replies`, and a turn's gateway to it allowing [`MODEL`].
async fn started(replies: impl IntoIterator<Item = Reply>) -> (ScriptedUpstream, TurnGateway) {
    let upstream = ScriptedUpstream::start(replies).await.unwrap();
    let gateway = gateway_for(&upstream, GatewayConfig::for_model(MODEL)).await;
    (upstream, gateway)
}

async fn gateway_for(upstream: &ScriptedUpstream, config: GatewayConfig) -> TurnGateway {
    let gateway = Gateway::new(
        config,
        Arc::new(OpenAiResponses),
        Credential::from_value(KEY).unwrap(),
        upstream.base_url().parse().unwrap(),
    )
    .unwrap();
    Arc::new(gateway).start_turn()
}

struct Run {
    result: Result<(crate::docker_turn::RepositoryDockerTurn, LiveLog), TurnError>,
    notes: Vec<LiveNote>,
}

async fn run_live(fake: &FakeRuntime, gateway: &TurnGateway, wall: u64, grace: Duration) -> Run {
    let fx = Fixture::new();
    let config = crate::config::TurnConfig::parse(IMAGE, &image_id(), wall, 700_000).unwrap();
    let mut settings = LiveSettings::codex(MODEL);
    settings.stop_grace = grace;
    let notes = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&notes);
    let progress = move |n: &LiveNote| sink.lock().unwrap().push(n.clone());
    let live = LiveContext {
        settings: &settings,
        gateway,
        progress: &progress,
    };
    let request = fx.request();
    let result = execute_live_turn(fake, &request, &fx.approved(&request), &config, &live).await;
    let notes = notes.lock().unwrap().clone();
    Run { result, notes }
}

/// [`run_live`] with the usual budget: 60 s of wall time, a 1 s grace after STOP.
async fn run_usual(fake: &FakeRuntime, gateway: &TurnGateway) -> Run {
    run_live(fake, gateway, 60, Duration::from_secs(1)).await
}

fn removed(fake: &FakeRuntime) -> bool {
    let (name, _) = fake.created.lock().unwrap().clone().unwrap();
    fake.calls().contains(&format!("remove:{name}"))
}

#[tokio::test]
async fn a_live_turn_tunnels_model_requests_and_parses_the_result_like_offline_stdout() {
    let (upstream, gateway) =
        started([Reply::edit_file(SERVICE, "    return 1", "    return 2")]).await;
    let fake = fake(|mut sim| {
        Box::pin(async move {
            let request = sim.handshake().await;
            assert_eq!(
                request["live"],
                serde_json::json!({"agent": "codex", "model": MODEL, "port": 8417})
            );
            assert_eq!(request["files"][SERVICE], "def answer():\n    return 1\n");
            let (answer, reset) = sim.tunnel(1, &http_request(MODEL)).await;
            assert!(!reset);
            let text = String::from_utf8(answer).unwrap();
            assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
            assert!(text.contains("*** Update File: app/modules/support/backend/service.py"));
            assert!(!text.contains(KEY));
            let event = EventPayload::try_from(
                br#"{"kind":"file","path":"app/modules/support/backend/service.py"}"#.to_vec(),
            )
            .unwrap();
            sim.send(&Frame::Event(event));
            sim.result(&update_output());
        })
    });
    let run = run_usual(&fake, &gateway).await;
    let (turn, log) = run.result.unwrap();
    assert_eq!(turn.proposal.status, snapshot::ProposalStatus::Completed);
    assert!(turn.workspace_archive.is_some());
    assert_eq!(log.channels, 1);
    assert_eq!(log.agent_events, 1);
    assert_eq!(log.events, Vec::<LiveEvent>::new());
    assert!(!log.stopped);
    assert_eq!((log.gateway.requests, log.gateway.total_tokens), (1, 120));
    assert_eq!(upstream.authorizations(), [Some(format!("Bearer {KEY}"))]);
    assert!(removed(&fake));
    let calls = fake.calls();
    let at = |c: &str| calls.iter().position(|x| x == c).unwrap();
    assert!(at("attach") < at("attach_stdin") && at("attach_stdin") < at("start"));
    assert!(
        run.notes
            .iter()
            .any(|n| matches!(n, LiveNote::ModelRequest { channel: 1, .. }))
    );
    assert!(
        run.notes
            .iter()
            .any(|n| matches!(n, LiveNote::AgentEvent(o) if o["kind"] == "file"))
    );
}

#[tokio::test]
async fn gateway_refusals_reach_the_agent_and_the_events_but_do_not_fail_the_turn() {
    let (upstream, gateway) = started([]).await;
    let fake = fake_after_hello(|mut sim| {
        Box::pin(async move {
            let (answer, _) = sim.tunnel(1, &http_request("o3-pro")).await;
            let text = String::from_utf8(answer).unwrap();
            assert!(text.starts_with("HTTP/1.1 403 Forbidden\r\n"));
            assert!(text.contains("PATCH_CANDIDATE_GATEWAY_MODEL"));
            let (answer, _) = sim.tunnel(2, b"POST http://evil/v1/responses HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n").await;
            assert!(as_text(answer).contains("PATCH_CANDIDATE_GATEWAY_TARGET"));
            sim.result(&update_output());
        })
    });
    let run = run_usual(&fake, &gateway).await;
    let (_, log) = run.result.unwrap();
    let codes: Vec<&str> = log.events.iter().map(|e| e.code).collect();
    assert_eq!(
        codes,
        vec![
            "PATCH_CANDIDATE_GATEWAY_MODEL",
            "PATCH_CANDIDATE_GATEWAY_TARGET"
        ]
    );
    // Should the turn fail, the first refusal explains it.
    assert_eq!(log.refusal_code(), Some("PATCH_CANDIDATE_GATEWAY_MODEL"));
    assert_eq!(
        (
            log.gateway.requests,
            log.gateway.refused,
            log.gateway.forwarded
        ),
        (2, 2, 0)
    );
    assert!(upstream.requests().is_empty());
    assert!(removed(&fake));
}

async fn hostile(script: Script) -> (TurnError, FakeRuntime) {
    let (_upstream, gateway) = started([]).await;
    let fake = fake(script);
    let run = run_usual(&fake, &gateway).await;
    let e = run.result.unwrap_err();
    assert!(removed(&fake), "container left behind after {}", e.code());
    (e, fake)
}

#[tokio::test]
async fn hostile_frames_fail_the_turn_with_their_code_and_remove_the_container() {
    let cases: Vec<(Script, &str)> = vec![
        (
            |sim| {
                Box::pin(async move {
                    sim.raw(&[0x11, 0, 0, 0, 1, 0, 1, 0, 1]);
                })
            },
            "PATCH_CANDIDATE_TUNNEL_FRAME_SIZE",
        ),
        (
            |sim| {
                Box::pin(async move {
                    sim.raw(&[0x7f, 0, 0, 0, 0, 0, 0, 0, 0]);
                })
            },
            "PATCH_CANDIDATE_TUNNEL_FRAME_TYPE",
        ),
        (
            |sim| {
                Box::pin(async move {
                    sim.raw(&[0x01, 0, 0, 0, 0, 0, 0, 0, 25]);
                    sim.raw(b"patch-candidate.tunnel.v2");
                })
            },
            "PATCH_CANDIDATE_TUNNEL_HELLO",
        ),
        (
            |sim| {
                Box::pin(async move {
                    sim.send(&Frame::Open(ChannelId::try_from(1).unwrap()));
                })
            },
            "PATCH_CANDIDATE_TUNNEL_HELLO_MISSING",
        ),
        (
            |mut sim| {
                Box::pin(async move {
                    sim.handshake().await;
                    sim.send(&Frame::Data(
                        ChannelId::try_from(3).unwrap(),
                        Chunk::try_from(b"x".to_vec()).unwrap(),
                    ));
                })
            },
            "PATCH_CANDIDATE_TUNNEL_CHANNEL_UNKNOWN",
        ),
        (
            |mut sim| {
                Box::pin(async move {
                    sim.handshake().await;
                    sim.send(&Frame::Open(ChannelId::try_from(5).unwrap()));
                    sim.send(&Frame::Open(ChannelId::try_from(5).unwrap()));
                })
            },
            "PATCH_CANDIDATE_TUNNEL_OPEN_ORDER",
        ),
        (
            |mut sim| {
                Box::pin(async move {
                    sim.handshake().await;
                    for n in 1..=17 {
                        sim.send(&Frame::Open(ChannelId::try_from(n).unwrap()));
                    }
                    // Keep the stream open: the worker must fail on its own.
                    std::future::pending::<()>().await;
                })
            },
            "PATCH_CANDIDATE_TUNNEL_OPEN_CHANNELS",
        ),
        (
            |mut sim| {
                Box::pin(async move {
                    sim.handshake().await;
                    sim.result(&update_output());
                    sim.send(&Frame::Result(Chunk::try_from(b"x".to_vec()).unwrap()));
                })
            },
            "PATCH_CANDIDATE_TUNNEL_AFTER_END",
        ),
        (
            |mut sim| {
                Box::pin(async move {
                    sim.handshake().await;
                    for f in Frame::result_frames(&update_output()) {
                        sim.send(&f);
                    }
                })
            },
            "PATCH_CANDIDATE_TUNNEL_NO_RESULT_END",
        ),
        (
            |mut sim| {
                Box::pin(async move {
                    sim.handshake().await;
                    sim.raw(&Frame::Stop.to_bytes());
                })
            },
            "PATCH_CANDIDATE_TUNNEL_DIRECTION",
        ),
        (
            |mut sim| {
                Box::pin(async move {
                    sim.handshake().await;
                    sim.raw(&Frame::ResultEnd.to_bytes()[..5]);
                })
            },
            "PATCH_CANDIDATE_TUNNEL_TRUNCATED",
        ),
    ];
    for (script, code) in cases {
        let (e, _) = hostile(script).await;
        assert_eq!(e.code(), code);
    }
}

/// A live container killed from outside mid-turn breaks the protocol; the daemon's kill event
/// names the cause (the environment), where its own early exit stays a protocol failure.
#[tokio::test]
async fn r_live_container_killed_from_outside_is_an_environment_failure() {
    let (upstream, gateway) = started([]).await;
    let cut_short: Script = |mut sim| {
        Box::pin(async move {
            sim.handshake().await;
            for f in Frame::result_frames(&update_output()) {
                sim.send(&f);
            }
        })
    };
    let mut killed = fake(cut_short);
    killed.exit_code = 137;
    killed.kill_events = vec!["9".to_owned()];
    let e = run_usual(&killed, &gateway).await.result.unwrap_err();
    assert_eq!(e.code(), "REPOSITORY_DOCKER_KILLED_EXTERNALLY");
    assert!(e.is_environment());
    assert!(removed(&killed));

    let gateway = gateway_for(&upstream, GatewayConfig::for_model(MODEL)).await;
    let mut own = fake(cut_short);
    own.exit_code = 137;
    let e = run_usual(&own, &gateway).await.result.unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_TUNNEL_NO_RESULT_END");
    assert!(removed(&own));
}

#[tokio::test]
async fn the_wall_budget_sends_stop_and_a_harvest_within_the_grace_completes_the_turn() {
    let (_upstream, gateway) = started([]).await;
    let fake = fake_after_hello(|mut sim| {
        Box::pin(async move {
            assert_eq!(sim.recv().await, Some(Frame::Stop));
            sim.result(&update_output());
        })
    });
    let run = run_live(&fake, &gateway, 1, Duration::from_secs(5)).await;
    let (_, log) = run.result.unwrap();
    assert!(log.stopped);
    assert!(run.notes.contains(&LiveNote::Stopped));
    assert!(removed(&fake));
}

#[tokio::test]
async fn a_container_that_ignores_stop_is_killed_and_removed_after_the_grace() {
    let (_upstream, gateway) = started([]).await;
    let fake = fake_after_hello(|sim| {
        Box::pin(async move {
            // The container keeps its stdio open and never answers.
            let _sim = sim;
            std::future::pending::<()>().await;
        })
    });
    let run = run_live(&fake, &gateway, 1, Duration::from_millis(200)).await;
    assert_eq!(run.result.unwrap_err().code(), "REPOSITORY_DOCKER_TIMEOUT");
    assert!(removed(&fake));
}

#[tokio::test]
async fn a_stalled_upstream_resets_the_channel_and_the_turn_goes_on() {
    let upstream = ScriptedUpstream::start([stalled()]).await.unwrap();
    let config = GatewayConfig {
        upstream_idle_timeout_ms: 100,
        ..GatewayConfig::for_model(MODEL)
    };
    let gateway = gateway_for(&upstream, config).await;
    let fake = fake_after_hello(|mut sim| {
        Box::pin(async move {
            let (answer, reset) = sim.tunnel(1, &http_request(MODEL)).await;
            assert!(reset);
            assert!(as_text(answer).contains("response.created"));
            sim.result(&update_output());
        })
    });
    let run = run_usual(&fake, &gateway).await;
    let (_, log) = run.result.unwrap();
    assert_eq!(
        log.events,
        vec![LiveEvent {
            channel: 1,
            code: "PATCH_CANDIDATE_GATEWAY_UPSTREAM_TIMEOUT"
        }]
    );
}

#[tokio::test]
async fn concurrent_channels_are_served_and_their_bytes_never_carry_the_key() {
    let (upstream, gateway) = started([]).await;
    let fake = fake_after_hello(|mut sim| {
        Box::pin(async move {
            let request = http_request(MODEL);
            // Open eight channels at once, interleaving their bytes.
            for n in 1..=8u32 {
                sim.send(&Frame::Open(ChannelId::try_from(n).unwrap()));
            }
            let half = request.len() / 2;
            for n in 1..=8u32 {
                let id = ChannelId::try_from(n).unwrap();
                sim.send(&Frame::Data(
                    id,
                    Chunk::try_from(request[..half].to_vec()).unwrap(),
                ));
            }
            for n in 1..=8u32 {
                let id = ChannelId::try_from(n).unwrap();
                sim.send(&Frame::Data(
                    id,
                    Chunk::try_from(request[half..].to_vec()).unwrap(),
                ));
            }
            let mut fins = 0;
            let mut bytes = Vec::new();
            while fins < 8 {
                match sim.recv().await.unwrap() {
                    Frame::Data(_, c) => bytes.extend_from_slice(c.as_bytes()),
                    Frame::Fin(id) => {
                        fins += 1;
                        sim.send(&Frame::Fin(id));
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
            let text = String::from_utf8(bytes).unwrap();
            assert_eq!(text.matches("HTTP/1.1 200 OK").count(), 8);
            assert!(!text.contains(KEY));
            sim.result(&update_output());
        })
    });
    let run = run_usual(&fake, &gateway).await;
    let (_, log) = run.result.unwrap();
    assert_eq!(log.channels, 8);
    assert_eq!(upstream.requests().len(), 8);
    assert_eq!(
        upstream.authorizations(),
        vec![Some(format!("Bearer {KEY}")); 8]
    );
}

#[tokio::test]
async fn a_result_while_a_channel_is_open_ends_the_turn_and_tears_the_channel_down() {
    let (_upstream, gateway) = started([stalled()]).await;
    let fake = fake_after_hello(|mut sim| {
        Box::pin(async move {
            sim.open_with(1, &http_request(MODEL));
            // Wait for the start of the (stalled) answer, then end the turn with the channel open.
            loop {
                if let Some(Frame::Data(..)) = sim.recv().await {
                    break;
                }
            }
            sim.result(&update_output());
        })
    });
    let run = run_usual(&fake, &gateway).await;
    let (turn, log) = run.result.unwrap();
    assert_eq!(turn.proposal.status, snapshot::ProposalStatus::Completed);
    assert_eq!(log.channels, 1);
    assert_eq!(log.gateway.forwarded, 1);
    assert!(removed(&fake));
}

// ---- Host memory, STOP priority and EVENT output (issue 22) ----

use crate::live_event_gate::{EVENT_BURST, EVENT_INTERVAL, EventGate, MAX_SHOWN_EVENT_BYTES};
use crate::live_inbox::{BLOCK, BacklogMeter, ChannelInbox, MAX_CHANNEL_BACKLOG};

const BACKLOG: &str = "PATCH_CANDIDATE_TUNNEL_CHANNEL_BACKLOG";

impl Sim {
    /// Opens channel `n`, sends a model request the (stalled) upstream will hold, and waits for
    /// the start of its answer: the gateway is now serving it and reads nothing more.
    async fn open_stalled(&mut self, n: u32) {
        let id = self.open_with(n, &http_request(MODEL));
        loop {
            match self.recv().await.unwrap() {
                Frame::Data(m, _) if m == id => return,
                Frame::Data(..) => {}
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    /// `frames` one-byte DATA frames on each of `ids`, round robin, in 64 KiB output chunks.
    async fn flood(&self, ids: &[u32], frames: usize) {
        let ids: Vec<ChannelId> = ids
            .iter()
            .map(|n| ChannelId::try_from(*n).unwrap())
            .collect();
        let one = Chunk::try_from(b"x".to_vec()).unwrap();
        let mut chunk = Vec::with_capacity(1 << 16);
        for _ in 0..frames {
            for id in &ids {
                Frame::Data(*id, one.clone()).encode(&mut chunk);
            }
            if chunk.len() >= 1 << 16 {
                self.raw(&chunk);
                chunk.clear();
                tokio::task::yield_now().await;
            }
        }
        self.raw(&chunk);
    }

    /// Reads the worker's frames until every channel of `ids` was reset; returns their codes.
    async fn resets(&mut self, ids: &[u32]) -> Vec<(u32, String)> {
        let mut codes = Vec::new();
        while codes.len() < ids.len() {
            match self.recv().await.unwrap() {
                Frame::Reset(m, code) if ids.contains(&m.get()) => {
                    codes.push((m.get(), code.as_str().to_owned()));
                }
                Frame::Data(..) => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        codes.sort();
        codes
    }
}

/// How a flooded channel may end: the gateway reads a channel's bytes while it serves and cuts it
/// for bytes past its request (`_INCOMPLETE`); a consumer that still falls behind gets the backlog
/// reset. Either way the host holds at most the bounded backlog.
fn flood_cut(code: &str) -> bool {
    code == BACKLOG || code == "PATCH_CANDIDATE_GATEWAY_INCOMPLETE"
}

/// Bytes a channel may send in one flood: the per-channel cap to the worker, less the request.
fn flood_frames() -> usize {
    usize::try_from(tunnel::Limits::default().max_channel_bytes_to_worker).unwrap()
        - http_request(MODEL).len()
}

/// The most allocated backlog `channels` channels may hold at once.
fn backlog_bound(channels: usize) -> u64 {
    u64::try_from(channels * (MAX_CHANNEL_BACKLOG + 2 * BLOCK)).unwrap()
}

#[tokio::test]
async fn r_one_byte_frames_to_stalled_channels_are_bounded_by_bytes_and_reset_only_those_channels()
{
    // Two channels whose requests the upstream holds, each flooded with ~8 M one-byte DATA
    // frames (under the per-channel cap, so no tunnel cap fires), interleaved; then a third
    // channel must still be answered at once.
    let (upstream, gateway) = started([stalled(), stalled(), Reply::message("ok")]).await;
    let fake = fake_after_hello(|mut sim| {
        Box::pin(async move {
            sim.open_stalled(1).await;
            sim.open_stalled(2).await;
            sim.flood(&[1, 2], flood_frames()).await;
            let codes = sim.resets(&[1, 2]).await;
            assert_eq!(
                codes.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
                vec![1, 2]
            );
            assert!(codes.iter().all(|(_, c)| flood_cut(c)), "{codes:?}");
            // The third channel is answered at once, not stalled behind the other two; the
            // answer is the gateway's refusal, because the two cut answers never reported their
            // usage and the token budget binds across cuts and resets.
            let (answer, reset) = sim.tunnel(3, &http_request(MODEL)).await;
            assert!(!reset);
            let answer = String::from_utf8(answer).unwrap();
            assert!(answer.starts_with("HTTP/1.1 "), "{answer}");
            assert!(!answer.starts_with("HTTP/1.1 200"), "{answer}");
            sim.result(&update_output());
        })
    });
    let run = run_live(&fake, &gateway, 120, Duration::from_secs(1)).await;
    let (turn, log) = run.result.unwrap();
    assert_eq!(turn.proposal.status, snapshot::ProposalStatus::Completed);
    // The two flooded channels are cut in either order; the third is refused after both.
    let mut cut: Vec<u32> = log.events.iter().take(2).map(|e| e.channel).collect();
    cut.sort_unstable();
    assert_eq!(cut, vec![1, 2], "{:?}", log.events);
    assert_eq!(log.events.len(), 3, "{:?}", log.events);
    assert_eq!(log.events[2].channel, 3);
    assert!(
        log.events[..2].iter().all(|e| flood_cut(e.code)),
        "{:?}",
        log.events
    );
    assert_eq!(log.events[2].code, "PATCH_CANDIDATE_GATEWAY_USAGE_MISSING");
    // What the host held for the consumers: two channels' backlogs at most, whatever the number
    // of frames (16 M here).
    assert!(log.backlog_peak_bytes > 0);
    assert!(
        log.backlog_peak_bytes <= backlog_bound(2),
        "peak {} above {}",
        log.backlog_peak_bytes,
        backlog_bound(2)
    );
    assert_eq!(log.channels, 3);
    assert_eq!(upstream.requests().len(), 2);
    assert!(removed(&fake));
}

#[tokio::test]
async fn r_many_flooded_channels_hold_at_most_one_backlog_each() {
    // Sixteen channels open at once (the open cap), all stalled, flooded round robin with 1.5 MiB
    // of one-byte frames each (24 M frames in all).
    let upstream = ScriptedUpstream::start([]).await.unwrap();
    upstream.set_fallback(stalled());
    let gateway = gateway_for(&upstream, GatewayConfig::for_model(MODEL)).await;
    let fake = fake_after_hello(|mut sim| {
        Box::pin(async move {
            let ids: Vec<u32> = (1..=16).collect();
            for n in &ids {
                sim.open_stalled(*n).await;
            }
            sim.flood(&ids, MAX_CHANNEL_BACKLOG + MAX_CHANNEL_BACKLOG / 2)
                .await;
            let codes = sim.resets(&ids).await;
            assert!(codes.iter().all(|(_, c)| flood_cut(c)), "{codes:?}");
            sim.result(&update_output());
        })
    });
    let run = run_live(&fake, &gateway, 120, Duration::from_secs(1)).await;
    let (_, log) = run.result.unwrap();
    assert_eq!(log.events.len(), 16);
    assert!(
        log.events.iter().all(|e| flood_cut(e.code)),
        "{:?}",
        log.events
    );
    assert!(
        log.backlog_peak_bytes <= backlog_bound(16),
        "peak {}",
        log.backlog_peak_bytes
    );
}

#[test]
fn a_channel_backlog_counts_blocks_not_frames_and_refuses_past_its_cap() {
    let meter = Arc::new(BacklogMeter::default());
    let inbox = ChannelInbox::new(Arc::clone(&meter), 4 * BLOCK);
    // One-byte pushes coalesce: 4 blocks of bytes, 4 allocations.
    for _ in 0..4 * BLOCK {
        inbox.push(b"x").unwrap();
    }
    assert_eq!(inbox.pending(), 4 * BLOCK);
    assert_eq!(meter.held(), 4 * BLOCK);
    assert!(inbox.push(b"x").is_err());
    assert_eq!(meter.held(), 4 * BLOCK);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let taken = inbox.take().await.unwrap();
        assert_eq!(taken.bytes().len(), BLOCK);
        // In flight: still counted against the cap and in the meter.
        assert!(inbox.push(b"x").is_err());
        drop(taken);
        assert_eq!(inbox.pending(), 3 * BLOCK);
        assert_eq!(meter.held(), 3 * BLOCK);
        inbox.push(b"y").unwrap();
        assert_eq!(meter.held(), 4 * BLOCK);
        inbox.fin();
        let mut total = 0;
        while let Some(block) = inbox.take().await {
            total += block.bytes().len();
        }
        assert_eq!(total, 3 * BLOCK + 1);
    });
    assert_eq!((inbox.pending(), meter.held()), (0, 0));
    assert_eq!(meter.peak(), 4 * BLOCK);
    // Closing releases what is queued and drops later pushes.
    inbox.push(b"z").ok();
    let closing = ChannelInbox::new(Arc::clone(&meter), 4 * BLOCK);
    closing.push(&[0u8; 3 * BLOCK]).unwrap();
    closing.close();
    assert_eq!(closing.push(b"late"), Ok(()));
    assert_eq!(closing.pending(), 3 * BLOCK);
    drop(closing);
    drop(inbox);
    assert_eq!(meter.held(), 0);
}

#[tokio::test]
async fn r_stop_is_not_stuck_behind_a_container_that_stopped_reading_its_stdin() {
    // The container reads the request, opens a channel whose answer is far larger than every
    // buffer on the way (pipe, queue, stdin), then never reads its stdin again.
    let (upstream, gateway) = started([Reply::Huge {
        bytes: 16 * 1_048_576,
    }])
    .await;
    let fake = fake_after_hello(|sim| {
        Box::pin(async move {
            sim.open_with(1, &http_request(MODEL));
            std::future::pending::<()>().await;
        })
    });
    let grace = Duration::from_millis(300);
    let started = std::time::Instant::now();
    let run = run_live(&fake, &gateway, 1, grace).await;
    let elapsed = started.elapsed();
    assert_eq!(run.result.unwrap_err().code(), "REPOSITORY_DOCKER_TIMEOUT");
    assert!(run.notes.contains(&LiveNote::Stopped));
    // Budget + grace (1.3 s) and scheduling slack; the outer deadline is budget + 10 s + grace.
    assert!(
        elapsed < Duration::from_secs(4),
        "the turn ended after {elapsed:?}"
    );
    assert!(upstream.requests().len() == 1);
    assert!(removed(&fake));
}

#[tokio::test]
async fn stop_goes_ahead_of_queued_data() {
    // The container stops reading while a large answer is queued, then starts again after STOP
    // was due: STOP must come before the rest of the queued data.
    let (_upstream, gateway) = started([Reply::Huge {
        bytes: 16 * 1_048_576,
    }])
    .await;
    let fake = fake_after_hello(|mut sim| {
        Box::pin(async move {
            let id = sim.open_with(1, &http_request(MODEL));
            tokio::time::sleep(Duration::from_millis(1500)).await;
            let mut data_before_stop = 0usize;
            loop {
                match sim.recv().await.unwrap() {
                    Frame::Data(_, c) => data_before_stop += c.len(),
                    Frame::Stop => break,
                    other => panic!("unexpected {other:?}"),
                }
            }
            // Only what was already in flight (stdin pipe, one write batch) precedes STOP.
            assert!(
                data_before_stop < 2 * 1_048_576,
                "{data_before_stop} bytes before STOP"
            );
            sim.send(&Frame::Reset(id, ResetCode::default()));
            sim.result(&update_output());
        })
    });
    let run = run_live(&fake, &gateway, 1, Duration::from_secs(5)).await;
    let (_, log) = run.result.unwrap();
    assert!(log.stopped);
}

/// An EVENT payload of exactly `len` bytes.
fn event_of(len: usize) -> EventPayload {
    let head = br#"{"kind":"file","path":""#;
    let tail = br#""}"#;
    let mut bytes = head.to_vec();
    bytes.resize(len - tail.len(), b'a');
    bytes.extend_from_slice(tail);
    EventPayload::try_from(bytes).unwrap()
}

fn shown_events(notes: &[LiveNote]) -> usize {
    notes
        .iter()
        .filter(|n| matches!(n, LiveNote::AgentEvent(_)))
        .count()
}

fn suppressed_notes(notes: &[LiveNote]) -> Vec<(u32, u64)> {
    notes
        .iter()
        .filter_map(|n| match n {
            LiveNote::AgentEventsSuppressed { events, bytes } => Some((*events, *bytes)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn r_an_event_flood_reaches_the_progress_sink_within_the_byte_cap_then_one_summary() {
    // 10,000 EVENTs of 4,000 bytes (40 MB): the operator sees at most the per-turn byte cap,
    // then one summary with the count and bytes of the rest.
    const EVENTS: usize = 10_000;
    const LEN: usize = 4_000;
    let (_upstream, gateway) = started([]).await;
    let fake = fake_after_hello(|sim| {
        Box::pin(async move {
            let event = event_of(LEN);
            let mut chunk = Vec::new();
            for _ in 0..EVENTS {
                Frame::Event(event.clone()).encode(&mut chunk);
                if chunk.len() >= 1 << 16 {
                    sim.raw(&chunk);
                    chunk.clear();
                }
            }
            sim.raw(&chunk);
            sim.result(&update_output());
        })
    });
    let run = run_usual(&fake, &gateway).await;
    let (_, log) = run.result.unwrap();
    let shown = shown_events(&run.notes);
    assert!(shown >= 1);
    assert!(shown * LEN <= MAX_SHOWN_EVENT_BYTES, "{shown} events shown");
    let rest = EVENTS - shown;
    assert_eq!(
        suppressed_notes(&run.notes),
        vec![(
            u32::try_from(rest).unwrap(),
            u64::try_from(rest * LEN).unwrap()
        )]
    );
    assert!(matches!(
        run.notes.last(),
        Some(LiveNote::AgentEventsSuppressed { .. })
    ));
    assert_eq!(log.agent_events, 10_000);
    assert_eq!(log.agent_events_suppressed, u32::try_from(rest).unwrap());
}

#[tokio::test]
async fn small_events_are_rate_limited() {
    const EVENTS: usize = 2_000;
    let (_upstream, gateway) = started([]).await;
    let fake = fake_after_hello(|sim| {
        Box::pin(async move {
            for _ in 0..EVENTS {
                sim.send(&Frame::Event(event_of(40)));
            }
            sim.result(&update_output());
        })
    });
    let started = std::time::Instant::now();
    let run = run_usual(&fake, &gateway).await;
    let elapsed = started.elapsed();
    run.result.unwrap();
    let shown = shown_events(&run.notes);
    // Far under the byte cap (80 KB in all): only the rate limit holds them back.
    let earned = usize::try_from(elapsed.as_millis() / EVENT_INTERVAL.as_millis()).unwrap();
    let burst = usize::try_from(EVENT_BURST).unwrap();
    assert!(shown >= burst && shown <= burst + earned, "{shown} shown");
    assert_eq!(
        suppressed_notes(&run.notes),
        vec![(
            u32::try_from(EVENTS - shown).unwrap(),
            u64::try_from((EVENTS - shown) * 40).unwrap()
        )]
    );
}

#[test]
fn the_event_gate_refills_at_its_rate_and_never_past_its_burst() {
    let t0 = tokio::time::Instant::now();
    let mut gate = EventGate::new(t0);
    let burst = usize::try_from(EVENT_BURST).unwrap();
    let shown = (0..burst + 5).filter(|_| gate.admit(10, t0)).count();
    assert_eq!(shown, burst);
    assert!(gate.admit(10, t0 + EVENT_INTERVAL));
    assert!(!gate.admit(10, t0 + EVENT_INTERVAL));
    // A long quiet spell refills the bucket to the burst, not beyond.
    let later = t0 + EVENT_INTERVAL * 10_000;
    let shown = (0..burst + 5).filter(|_| gate.admit(10, later)).count();
    assert_eq!(shown, burst);
    // The byte cap binds whatever the rate.
    let mut gate = EventGate::new(t0);
    assert!(gate.admit(MAX_SHOWN_EVENT_BYTES, t0));
    assert!(!gate.admit(1, t0 + EVENT_INTERVAL * 100));
    let s = gate.suppressed();
    assert_eq!((s.events, s.bytes), (1, 1));
}

#[tokio::test]
async fn a_large_request_sent_at_once_is_forwarded_not_reset() {
    // A legitimate request near the gateway's 8 MiB body cap, every byte queued at once: the
    // gateway reads it as it arrives, so the backlog cap must not cut it.
    let (upstream, gateway) = started([Reply::message("ok")]).await;
    let fake = fake_after_hello(|mut sim| {
        Box::pin(async move {
            // Seven 1 MiB strings (one string is capped at 4 MiB by the gateway's pre-scan).
            let text = "x".repeat(1_048_576);
            let content: Vec<_> = (0..7)
                .map(|_| serde_json::json!({"type": "input_text", "text": text}))
                .collect();
            let body = serde_json::json!({
                "model": MODEL,
                "stream": true,
                "input": [{"role": "user", "content": content}],
            })
            .to_string();
            let request = format!(
                "POST /v1/responses HTTP/1.1\r\nhost: 127.0.0.1:8417\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            let (answer, reset) = sim.tunnel(1, request.as_bytes()).await;
            assert!(!reset);
            assert!(as_text(answer).starts_with("HTTP/1.1 200 OK\r\n"));
            sim.result(&update_output());
        })
    });
    let run = run_usual(&fake, &gateway).await;
    let (_, log) = run.result.unwrap();
    assert_eq!(log.events, Vec::<LiveEvent>::new());
    assert_eq!(upstream.requests().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_full_backlog_waits_for_a_reading_consumer_and_gives_up_on_a_stalled_one() {
    use crate::live_inbox::PATIENCE;
    let meter = Arc::new(BacklogMeter::default());
    let inbox = Arc::new(ChannelInbox::new(Arc::clone(&meter), BLOCK));
    inbox.push(&[0u8; BLOCK]).unwrap();
    // Nobody takes: refused after the patience, nothing appended.
    let started = tokio::time::Instant::now();
    assert!(inbox.push_until(b"x", started + PATIENCE).await.is_err());
    assert_eq!(started.elapsed(), PATIENCE);
    assert_eq!(inbox.pending(), BLOCK);
    // A consumer that takes a block in time lets the push through.
    let consumer = Arc::clone(&inbox);
    let taker = tokio::spawn(async move {
        tokio::time::sleep(PATIENCE / 2).await;
        drop(consumer.take().await);
    });
    inbox
        .push_until(b"x", tokio::time::Instant::now() + PATIENCE)
        .await
        .unwrap();
    taker.await.unwrap();
    assert_eq!(inbox.pending(), 1);
    // A closed backlog (its task ended) drops the bytes at once.
    inbox.push(&[0u8; BLOCK - 1]).unwrap();
    inbox.close();
    assert_eq!(
        inbox
            .push_until(b"late", tokio::time::Instant::now() + PATIENCE)
            .await,
        Ok(())
    );
}

/// The red team's case: a container that resets each channel as soon as the answer's text
/// starts. Each forwarded answer is still drained to its usage and charged, so the token budget
/// binds across the resets (before: five answers of 1.5 M tokens forwarded under a 2 M budget,
/// 0 tokens recorded).
#[tokio::test]
async fn r_resetting_each_channel_as_text_starts_does_not_dodge_the_token_budget() {
    let upstream = ScriptedUpstream::start([]).await.unwrap();
    upstream.set_fallback(Reply::paced_partial_answer(1_500_000, 300));
    let mut config = GatewayConfig::for_model(MODEL);
    config.budgets.tokens = 2_000_000;
    let gateway = gateway_for(&upstream, config).await;
    let fake = fake_after_hello(|mut sim| {
        Box::pin(async move {
            for n in 1..=5u32 {
                let id = sim.open_with(n, &http_request(MODEL));
                let mut answer = Vec::new();
                loop {
                    match sim.recv().await.unwrap() {
                        Frame::Data(m, c) if m == id => {
                            answer.extend_from_slice(c.as_bytes());
                            if String::from_utf8_lossy(&answer).contains("partial answer") {
                                sim.send(&Frame::Reset(id, ResetCode::default()));
                                break;
                            }
                        }
                        Frame::Fin(m) if m == id => {
                            sim.send(&Frame::Fin(id));
                            break;
                        }
                        other => panic!("unexpected {other:?}"),
                    }
                }
            }
            sim.result(&update_output());
        })
    });
    let run = run_usual(&fake, &gateway).await;
    let (_, log) = run.result.unwrap();
    assert_eq!(upstream.requests().len(), 2);
    assert_eq!(
        (
            log.gateway.forwarded,
            log.gateway.total_tokens,
            log.gateway.drained
        ),
        (2, 3_000_000, 2)
    );
    let codes: Vec<&str> = log.events.iter().map(|e| e.code).collect();
    assert_eq!(codes, vec!["PATCH_CANDIDATE_GATEWAY_BUDGET_TOKENS"; 3]);
}

#[test]
fn the_refusal_code_skips_the_events_an_agent_survives() {
    let event = |channel, code| LiveEvent { channel, code };
    let mut log = LiveLog::default();
    assert_eq!(log.refusal_code(), None);
    log.events.push(event(1, gateway::CREDENTIAL_SCRUBBED));
    log.events
        .push(event(2, "PATCH_CANDIDATE_GATEWAY_SIDE_CALL"));
    assert_eq!(log.refusal_code(), None);
    log.events.push(event(3, "PATCH_CANDIDATE_GATEWAY_TOOL"));
    log.events
        .push(event(4, "PATCH_CANDIDATE_GATEWAY_USAGE_MISSING"));
    assert_eq!(log.refusal_code(), Some("PATCH_CANDIDATE_GATEWAY_TOOL"));
}
