//! Host peak memory of the live loop under one frame pattern (benches/live/run.sh): a simulated
//! container opens channels whose model requests a stalled upstream is still serving, then floods
//! them with DATA frames. Prints the pattern, the turn's outcome code and the process's VmHWM.
//!
//! usage: live_frames PATTERN   (one | two | interleaved | many | wide | big)
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::print_stdout
)]

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bollard::models::{ContainerCreateBody, ContainerInspectResponse};
use container::testkit::{FakeRuntime, IMAGE, image_id};
use container::{
    ContainerName, ContainerRuntime, ExitStatus, ImageFacts, ImageReference, OutputChunk,
    OutputStream, RegisteredRuntime, RuntimeError, StdinWriter, TurnContainer,
};
use futures::StreamExt as _;
use gateway::testkit::{Reply, ScriptedUpstream, events};
use gateway::{Credential, Gateway, GatewayConfig, OpenAiResponses};
use snapshot::testkit::peak_rss_kib;
use snapshot::{
    ApprovedExecutionContext, ApprovedTurn, DefaultPathGuard, RepoPath, RepositorySnapshotEvidence,
};
use tokio::io::AsyncReadExt as _;
use tunnel::{ChannelId, Chunk, Frame};
use turn::{CodingWorkerRequest, LiveContext, LiveNote, LiveSettings, TurnConfig};
use vocab::Sha256;

const MODEL: &str = "gpt-5.3-codex";
const FILE: &str = "app/a.py";
const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";
/// Per-channel DATA cap to the worker (tunnel default).
const CHANNEL_CAP: usize = 8 * 1_048_576;

/// (channels, DATA payload bytes per frame, bytes per channel, interleaved)
fn pattern(name: &str) -> (u32, usize, usize, bool) {
    match name {
        "one" => (1, 1, CHANNEL_CAP, false),
        "two" => (2, 1, CHANNEL_CAP, false),
        "interleaved" => (2, 1, CHANNEL_CAP, true),
        "many" => (16, 1, CHANNEL_CAP / 16, true),
        "wide" => (8, 1, CHANNEL_CAP, true),
        "big" => (1, tunnel::MAX_FRAME_PAYLOAD, CHANNEL_CAP, false),
        other => panic!("unknown pattern {other}"),
    }
}

fn http_request() -> Vec<u8> {
    let body = serde_json::json!({"model": MODEL, "stream": true, "input": []}).to_string();
    format!(
        "POST /v1/responses HTTP/1.1\r\nhost: 127.0.0.1:8417\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

// One thread: the simulated container then writes only when the loop has taken its last chunk,
// as a real container blocks on its stdout pipe (the fake's output channel has no backpressure).
/// The fake runtime, with its output stream counting the chunks the loop has taken: the
/// simulated container writes a chunk only when at most two are waiting, as a real container
/// blocks on its stdout pipe (the fake's own output channel has no backpressure).
#[derive(Clone)]
struct Paced {
    inner: FakeRuntime,
    taken: Arc<AtomicUsize>,
}

impl ContainerRuntime for Paced {
    async fn inspect_image(&self, r: &ImageReference) -> Result<ImageFacts, RuntimeError> {
        self.inner.inspect_image(r).await
    }
    async fn create(
        &self,
        name: &ContainerName,
        body: &ContainerCreateBody,
    ) -> Result<String, RuntimeError> {
        self.inner.create(name, body).await
    }
    async fn inspect(&self, id: &str) -> Result<ContainerInspectResponse, RuntimeError> {
        self.inner.inspect(id).await
    }
    async fn attach_output(&self, id: &str) -> Result<OutputStream, RuntimeError> {
        let taken = Arc::clone(&self.taken);
        let inner = self.inner.attach_output(id).await?;
        Ok(Box::pin(inner.inspect(move |_| {
            taken.fetch_add(1, Ordering::SeqCst);
        })))
    }
    async fn start(&self, id: &str) -> Result<(), RuntimeError> {
        self.inner.start(id).await
    }
    async fn write_stdin(&self, id: &str, payload: &[u8]) -> Result<(), RuntimeError> {
        self.inner.write_stdin(id, payload).await
    }
    async fn attach_stdin(&self, id: &str) -> Result<StdinWriter, RuntimeError> {
        self.inner.attach_stdin(id).await
    }
    async fn wait(&self, id: &str) -> Result<ExitStatus, RuntimeError> {
        self.inner.wait(id).await
    }
    async fn kill(&self, id: &str) -> Result<(), RuntimeError> {
        self.inner.kill(id).await
    }
    async fn kill_events(&self, id: &str, since_unix: i64) -> Result<Vec<String>, RuntimeError> {
        self.inner.kill_events(id, since_unix).await
    }
    async fn remove(&self, name: &str) -> Result<(), RuntimeError> {
        self.inner.remove(name).await
    }
    async fn list_turns(&self) -> Result<Vec<TurnContainer>, RuntimeError> {
        self.inner.list_turns().await
    }
    async fn registered_runtimes(
        &self,
    ) -> Result<HashMap<String, RegisteredRuntime>, RuntimeError> {
        self.inner.registered_runtimes().await
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let name = std::env::args().nth(1).unwrap_or_else(|| "one".to_owned());
    let (channels, frame_len, per_channel, interleaved) = pattern(&name);
    let upstream = Arc::new(ScriptedUpstream::start([]).await.unwrap());
    upstream.set_fallback(Reply::Stall(vec![events::created("r")]));
    let gateway = Arc::new(
        Gateway::new(
            GatewayConfig::for_model(MODEL),
            Arc::new(OpenAiResponses),
            Credential::from_value("sk-bench-not-a-key-0123456789").unwrap(),
            upstream.base_url().parse().unwrap(),
        )
        .unwrap(),
    )
    .start_turn();

    let peer_upstream = Arc::clone(&upstream);
    let taken = Arc::new(AtomicUsize::new(0));
    let peer_taken = Arc::clone(&taken);
    let fake = FakeRuntime::live(Arc::new(move |mut stdin, out| {
        let upstream = Arc::clone(&peer_upstream);
        let taken = Arc::clone(&peer_taken);
        Box::pin(async move {
            let mut sent = 0usize;
            let mut send = async |bytes: Vec<u8>| {
                while sent > taken.load(Ordering::SeqCst) + 2 {
                    tokio::time::sleep(Duration::from_micros(200)).await;
                }
                sent += 1;
                let _ = out.send(Ok(OutputChunk::Stdout(bytes)));
            };
            send(Frame::Hello.to_bytes()).await;
            // Drain (and drop) everything the worker sends.
            tokio::spawn(async move {
                let mut buf = vec![0u8; 1 << 16];
                while matches!(stdin.read(&mut buf).await, Ok(n) if n > 0) {}
            });
            let request = http_request();
            let ids: Vec<ChannelId> = (1..=channels)
                .map(|n| ChannelId::try_from(n).unwrap())
                .collect();
            for id in &ids {
                send(Frame::Open(*id).to_bytes()).await;
                let mut bytes = Vec::new();
                for f in Frame::data_frames(*id, &request) {
                    f.encode(&mut bytes);
                }
                send(bytes).await;
            }
            // Every request has reached the (stalled) upstream: the gateway is serving them all.
            while upstream.requests().len() < ids.len() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let budget = per_channel - request.len();
            let frames = budget / frame_len;
            let payload = Chunk::try_from(vec![b'x'; frame_len]).unwrap();
            // Frame i goes to channel (i mod channels) interleaved, (i div frames) otherwise.
            let total = frames * ids.len();
            let mut chunk = Vec::with_capacity(1 << 16);
            for i in 0..total {
                let id = if interleaved {
                    ids[i % ids.len()]
                } else {
                    ids[i / frames]
                };
                Frame::Data(id, payload.clone()).encode(&mut chunk);
                if chunk.len() >= 1 << 16 {
                    send(std::mem::replace(&mut chunk, Vec::with_capacity(1 << 16))).await;
                }
            }
            send(chunk).await;
            // Let the worker take in the last chunk, then end without a result.
            tokio::time::sleep(Duration::from_millis(200)).await;
        })
    }));

    let context = ApprovedExecutionContext::from_json(
        &serde_json::json!({
            "schema_version": "managed_refinement.execution_context.v1",
            "handoff_id": "h", "request_id": "r", "plan_id": "p", "app_id": "a",
            "build_registry_id": "b", "repository_full_name": "acme/bench",
            "baseline_commit_sha": COMMIT, "raw_request": "Bench.", "request_type": "change",
            "approved_plan_digest": "a".repeat(64), "snapshot_digest": "s",
            "graph_identity_digest": "g", "impact_report_digest": "i",
            "execution_strategy_id": "x", "rationale": "bench",
            "allowed_paths": ["app/"], "prohibited_paths": [], "read_only_paths": [],
            "create_paths": [], "delete_paths": [],
        })
        .to_string(),
    )
    .unwrap();
    let path = RepoPath::parse(FILE).unwrap();
    let content = "x = 1\n".to_owned();
    let evidence = RepositorySnapshotEvidence::new(
        "p".into(),
        "r".into(),
        "a".into(),
        "acme/bench".into(),
        COMMIT.into(),
        "s".into(),
        BTreeMap::from([(path.clone(), Sha256::of(content.as_bytes()))]),
    )
    .unwrap();
    let files = BTreeMap::from([(path.clone(), content)]);
    let request = CodingWorkerRequest::for_context(&context, "Bench.", files, BTreeMap::new());
    let policy = DefaultPathGuard::default();
    let approved = ApprovedTurn::new(
        &context,
        &evidence,
        &policy,
        None,
        vec![path],
        &request.files,
    )
    .unwrap();
    let config = TurnConfig::parse(IMAGE, &image_id(), 600, 700_000).unwrap();
    let settings = LiveSettings::codex(MODEL);
    let progress = |_: &LiveNote| {};
    let live = LiveContext {
        settings: &settings,
        gateway: &gateway,
        progress: &progress,
    };
    let started = std::time::Instant::now();
    let fake = Paced { inner: fake, taken };
    let outcome = turn::execute_live_turn(&fake, &request, &approved, &config, &live).await;
    let code = match &outcome {
        Ok(_) => "ok",
        Err(e) => e.code(),
    };
    println!(
        "{name}: {code} in {:.1} s, VmHWM {} KiB",
        started.elapsed().as_secs_f64(),
        peak_rss_kib()
    );
}
