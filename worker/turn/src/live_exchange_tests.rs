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
use snapshot::{ApprovedExecutionContext, DefaultPathPolicy, RepoPath, RepositorySnapshotEvidence};
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

fn archive_of(entries: &[(&str, &str)]) -> Vec<u8> {
    let entries: Vec<(RepoPath, Vec<u8>)> = entries
        .iter()
        .map(|(k, v)| (p(k), v.as_bytes().to_vec()))
        .collect();
    archive::build_deterministic_archive(&entries).unwrap()
}

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
    policy: DefaultPathPolicy,
    absence: ManifestAbsence,
}

impl Fixture {
    fn new() -> Self {
        Self {
            context: context(&[], &[]),
            snapshot: snapshot_evidence(),
            policy: DefaultPathPolicy::default(),
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

    /// Tunnels one HTTP request on channel `n`; returns the whole answer (until the worker's FIN
    /// or RESET) and whether it was reset.
    async fn tunnel(&mut self, n: u32, request: &[u8]) -> (Vec<u8>, bool) {
        let id = ChannelId::try_from(n).unwrap();
        self.send(&Frame::Open(id));
        for f in Frame::data_frames(id, request) {
            self.send(&f);
        }
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

fn removed(fake: &FakeRuntime) -> bool {
    let (name, _) = fake.created.lock().unwrap().clone().unwrap();
    fake.calls().contains(&format!("remove:{name}"))
}

#[tokio::test]
async fn a_live_turn_tunnels_model_requests_and_parses_the_result_like_offline_stdout() {
    let upstream =
        ScriptedUpstream::start([Reply::edit_file(SERVICE, "    return 1", "    return 2")])
            .await
            .unwrap();
    let gateway = gateway_for(&upstream, GatewayConfig::for_model(MODEL)).await;
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
    let run = run_live(&fake, &gateway, 60, Duration::from_secs(1)).await;
    let (turn, log) = run.result.unwrap();
    assert_eq!(turn.proposal.status, snapshot::ProposalStatus::Completed);
    assert!(turn.workspace_archive.is_some());
    assert_eq!(log.channels, 1);
    assert_eq!(log.agent_events, 1);
    assert_eq!(log.events, Vec::<LiveEvent>::new());
    assert!(!log.stopped);
    assert_eq!((log.gateway.requests, log.gateway.total_tokens), (1, 120));
    let requests = upstream.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        requests[0].header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
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
    let upstream = ScriptedUpstream::start([]).await.unwrap();
    let gateway = gateway_for(&upstream, GatewayConfig::for_model(MODEL)).await;
    let fake = fake(|mut sim| {
        Box::pin(async move {
            sim.handshake().await;
            let (answer, _) = sim.tunnel(1, &http_request("o3-pro")).await;
            let text = String::from_utf8(answer).unwrap();
            assert!(text.starts_with("HTTP/1.1 403 Forbidden\r\n"));
            assert!(text.contains("PATCH_CANDIDATE_GATEWAY_MODEL"));
            let (answer, _) = sim.tunnel(2, b"POST http://evil/v1/responses HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n").await;
            assert!(
                String::from_utf8(answer)
                    .unwrap()
                    .contains("PATCH_CANDIDATE_GATEWAY_TARGET")
            );
            sim.result(&update_output());
        })
    });
    let run = run_live(&fake, &gateway, 60, Duration::from_secs(1)).await;
    let (_, log) = run.result.unwrap();
    let codes: Vec<&str> = log.events.iter().map(|e| e.code).collect();
    assert_eq!(
        codes,
        vec![
            "PATCH_CANDIDATE_GATEWAY_MODEL",
            "PATCH_CANDIDATE_GATEWAY_TARGET"
        ]
    );
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
    let upstream = ScriptedUpstream::start([]).await.unwrap();
    let gateway = gateway_for(&upstream, GatewayConfig::for_model(MODEL)).await;
    let fake = fake(script);
    let run = run_live(&fake, &gateway, 60, Duration::from_secs(1)).await;
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
    let upstream = ScriptedUpstream::start([]).await.unwrap();
    let gateway = gateway_for(&upstream, GatewayConfig::for_model(MODEL)).await;
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
    let e = run_live(&killed, &gateway, 60, Duration::from_secs(1))
        .await
        .result
        .unwrap_err();
    assert_eq!(e.code(), "REPOSITORY_DOCKER_KILLED_EXTERNALLY");
    assert!(e.is_environment());
    assert!(removed(&killed));

    let gateway = gateway_for(&upstream, GatewayConfig::for_model(MODEL)).await;
    let mut own = fake(cut_short);
    own.exit_code = 137;
    let e = run_live(&own, &gateway, 60, Duration::from_secs(1))
        .await
        .result
        .unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_TUNNEL_NO_RESULT_END");
    assert!(removed(&own));
}

#[tokio::test]
async fn the_wall_budget_sends_stop_and_a_harvest_within_the_grace_completes_the_turn() {
    let upstream = ScriptedUpstream::start([]).await.unwrap();
    let gateway = gateway_for(&upstream, GatewayConfig::for_model(MODEL)).await;
    let fake = fake(|mut sim| {
        Box::pin(async move {
            sim.handshake().await;
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
    let upstream = ScriptedUpstream::start([]).await.unwrap();
    let gateway = gateway_for(&upstream, GatewayConfig::for_model(MODEL)).await;
    let fake = fake(|mut sim| {
        Box::pin(async move {
            sim.handshake().await;
            std::future::pending::<()>().await;
        })
    });
    let run = run_live(&fake, &gateway, 1, Duration::from_millis(200)).await;
    assert_eq!(run.result.unwrap_err().code(), "REPOSITORY_DOCKER_TIMEOUT");
    assert!(removed(&fake));
}

#[tokio::test]
async fn a_stalled_upstream_resets_the_channel_and_the_turn_goes_on() {
    let upstream =
        ScriptedUpstream::start([Reply::Stall(vec![gateway::testkit::events::created("r")])])
            .await
            .unwrap();
    let config = GatewayConfig {
        upstream_idle_timeout_ms: 100,
        ..GatewayConfig::for_model(MODEL)
    };
    let gateway = gateway_for(&upstream, config).await;
    let fake = fake(|mut sim| {
        Box::pin(async move {
            sim.handshake().await;
            let (answer, reset) = sim.tunnel(1, &http_request(MODEL)).await;
            assert!(reset);
            assert!(
                String::from_utf8(answer)
                    .unwrap()
                    .contains("response.created")
            );
            sim.result(&update_output());
        })
    });
    let run = run_live(&fake, &gateway, 60, Duration::from_secs(1)).await;
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
    let upstream = ScriptedUpstream::start([]).await.unwrap();
    let gateway = gateway_for(&upstream, GatewayConfig::for_model(MODEL)).await;
    let fake = fake(|mut sim| {
        Box::pin(async move {
            sim.handshake().await;
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
    let run = run_live(&fake, &gateway, 60, Duration::from_secs(1)).await;
    let (_, log) = run.result.unwrap();
    assert_eq!(log.channels, 8);
    assert_eq!(upstream.requests().len(), 8);
    assert!(
        upstream
            .requests()
            .iter()
            .all(|r| r.header("authorization") == Some(&format!("Bearer {KEY}")))
    );
}

#[tokio::test]
async fn a_result_while_a_channel_is_open_ends_the_turn_and_tears_the_channel_down() {
    let upstream =
        ScriptedUpstream::start([Reply::Stall(vec![gateway::testkit::events::created("r")])])
            .await
            .unwrap();
    let gateway = gateway_for(&upstream, GatewayConfig::for_model(MODEL)).await;
    let fake = fake(|mut sim| {
        Box::pin(async move {
            sim.handshake().await;
            let id = ChannelId::try_from(1).unwrap();
            sim.send(&Frame::Open(id));
            for f in Frame::data_frames(id, &http_request(MODEL)) {
                sim.send(&f);
            }
            // Wait for the start of the (stalled) answer, then end the turn with the channel open.
            loop {
                if let Some(Frame::Data(..)) = sim.recv().await {
                    break;
                }
            }
            sim.result(&update_output());
        })
    });
    let run = run_live(&fake, &gateway, 60, Duration::from_secs(1)).await;
    let (turn, log) = run.result.unwrap();
    assert_eq!(turn.proposal.status, snapshot::ProposalStatus::Completed);
    assert_eq!(log.channels, 1);
    assert_eq!(log.gateway.forwarded, 1);
    assert!(removed(&fake));
}
