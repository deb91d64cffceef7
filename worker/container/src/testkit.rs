//! Test support: a recording [`ContainerRuntime`] fake (compiled for this crate's tests and, with
//! the `testkit` feature, for the tests of the crates above it).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bollard::models::{
    ContainerConfig, ContainerCreateBody, ContainerInspectResponse, ContainerState,
    ContainerStateStatusEnum,
};

use crate::ids::{ContainerName, ImageReference};
use crate::profile::{RUNSC, RUNSC_ARGS, RUNSC_PATH, RegisteredRuntime};
use crate::seam::{
    ContainerRuntime, ExitStatus, ImageFacts, OutputChunk, OutputStream, RuntimeError,
    TurnContainer,
};

pub const IMAGE: &str = "patch-candidate-proof:local";
pub fn image_id() -> String {
    format!("sha256:{}", "ab".repeat(32))
}
pub const CONTAINER_ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// A simulated live container: it reads the worker's frames from `stdin` and writes its output
/// chunks to `output`; the container "exits" when the future ends.
pub type LiveContainer = Arc<
    dyn Fn(
            tokio::io::DuplexStream,
            tokio::sync::mpsc::UnboundedSender<Result<OutputChunk, RuntimeError>>,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
        + Send
        + Sync,
>;

/// Where a simulated live container writes its output.
pub type LiveOutput = tokio::sync::mpsc::UnboundedSender<Result<OutputChunk, RuntimeError>>;

/// How the fake's create call behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateMode {
    Ok,
    /// The daemon created the container but the response was lost.
    LostResponse,
    /// The daemon answered with a malformed ID.
    BadId,
}

/// A recording fake: every call is appended to `calls` in order. Clones share the recording
/// (a container guard holds a clone to remove the container after cancellation).
#[derive(Clone)]
pub struct FakeRuntime {
    pub calls: Arc<Mutex<Vec<String>>>,
    pub image: Result<ImageFacts, RuntimeError>,
    pub create_mode: CreateMode,
    pub created: Arc<Mutex<Option<(String, ContainerCreateBody)>>>,
    pub tamper: Option<fn(&mut ContainerInspectResponse)>,
    pub start_fails: bool,
    pub output: Vec<OutputChunk>,
    pub exit_code: i64,
    pub oom: bool,
    /// The signals of the daemon's recorded `kill` events (someone else signalled it).
    pub kill_events: Vec<String>,
    /// What the events query answers with (`Ok` means: `kill_events`).
    pub events_result: Result<(), RuntimeError>,
    pub stdin: Arc<Mutex<Option<Vec<u8>>>>,
    pub remove_result: Result<(), RuntimeError>,
    pub turns: Vec<TurnContainer>,
    /// `wait` never returns (a container that ignores its deadline).
    pub wait_hangs: bool,
    /// `create` never answers (a daemon that hangs, or a turn cancelled mid-create).
    pub create_hangs: bool,
    /// Notified whenever a call is recorded.
    pub progress: Arc<tokio::sync::Notify>,
    /// What `/info` lists as registered runtimes (default: runc and the expected runsc).
    pub runtimes: HashMap<String, RegisteredRuntime>,
    /// A live container behind `attach_stdin` / `attach_output` (live turn tests).
    pub live: Option<LiveContainer>,
    live_output: Arc<Mutex<Option<LiveOutput>>>,
    live_exited: Arc<tokio::sync::Notify>,
    live_exited_flag: Arc<std::sync::atomic::AtomicBool>,
}

impl std::fmt::Debug for FakeRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FakeRuntime")
    }
}

impl FakeRuntime {
    pub fn new(stdout: &[u8]) -> Self {
        Self {
            calls: Arc::default(),
            image: Ok(ImageFacts {
                id: image_id(),
                env: vec!["PATH=/bin".to_owned()],
            }),
            create_mode: CreateMode::Ok,
            created: Arc::default(),
            tamper: None,
            start_fails: false,
            output: vec![OutputChunk::Stdout(stdout.to_vec())],
            exit_code: 0,
            oom: false,
            kill_events: Vec::new(),
            events_result: Ok(()),
            stdin: Arc::default(),
            remove_result: Ok(()),
            turns: Vec::new(),
            wait_hangs: false,
            create_hangs: false,
            progress: Arc::default(),
            runtimes: HashMap::from([
                (
                    "runc".to_owned(),
                    RegisteredRuntime {
                        path: Some("runc".to_owned()),
                        args: Vec::new(),
                    },
                ),
                (
                    RUNSC.to_owned(),
                    RegisteredRuntime {
                        path: Some(RUNSC_PATH.to_owned()),
                        args: RUNSC_ARGS.iter().map(|a| (*a).to_owned()).collect(),
                    },
                ),
            ]),
            live: None,
            live_output: Arc::default(),
            live_exited: Arc::default(),
            live_exited_flag: Arc::default(),
        }
    }

    /// A fake whose container is the simulated live container `live`.
    pub fn live(live: LiveContainer) -> Self {
        let mut fake = Self::new(b"");
        fake.live = Some(live);
        fake
    }

    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }

    fn record(&self, call: &str) {
        self.calls.lock().unwrap().push(call.to_owned());
        self.progress.notify_waiters();
    }

    /// Waits until `call` has been recorded.
    pub async fn reached(&self, call: &str) {
        loop {
            let next = self.progress.notified();
            if self.calls().iter().any(|c| c == call) {
                return;
            }
            next.await;
        }
    }

    pub fn stdin_json(&self) -> serde_json::Value {
        serde_json::from_slice(self.stdin.lock().unwrap().as_ref().unwrap()).unwrap()
    }

    pub fn created_body(&self) -> ContainerCreateBody {
        self.created.lock().unwrap().as_ref().unwrap().1.clone()
    }
}

/// What a faithful daemon reports for a container created from `body`.
pub fn inspect_from_body(
    name: &str,
    body: &ContainerCreateBody,
    image_env: &[String],
) -> ContainerInspectResponse {
    let mut env = image_env.to_vec();
    env.extend(body.env.clone().unwrap_or_default());
    ContainerInspectResponse {
        id: Some(CONTAINER_ID.to_owned()),
        name: Some(format!("/{name}")),
        image: body.image.clone(),
        state: Some(ContainerState {
            status: Some(ContainerStateStatusEnum::CREATED),
            ..ContainerState::default()
        }),
        mounts: Some(Vec::new()),
        host_config: body.host_config.clone(),
        config: Some(ContainerConfig {
            user: body.user.clone(),
            labels: body.labels.clone(),
            env: Some(env),
            tty: body.tty,
            open_stdin: body.open_stdin,
            stdin_once: body.stdin_once,
            image: body.image.clone(),
            ..ContainerConfig::default()
        }),
        ..ContainerInspectResponse::default()
    }
}

impl ContainerRuntime for FakeRuntime {
    async fn inspect_image(&self, _reference: &ImageReference) -> Result<ImageFacts, RuntimeError> {
        self.record("image_inspect");
        self.image.clone()
    }

    async fn create(
        &self,
        name: &ContainerName,
        body: &ContainerCreateBody,
    ) -> Result<String, RuntimeError> {
        self.record("create");
        self.live_exited_flag
            .store(false, std::sync::atomic::Ordering::SeqCst);
        *self.created.lock().unwrap() = Some((name.as_str().to_owned(), body.clone()));
        if self.create_hangs {
            std::future::pending::<()>().await;
        }
        match self.create_mode {
            CreateMode::Ok => Ok(CONTAINER_ID.to_owned()),
            CreateMode::LostResponse => Err(RuntimeError::Failed { status: None }),
            CreateMode::BadId => Ok("not-an-id".to_owned()),
        }
    }

    async fn inspect(&self, _id: &str) -> Result<ContainerInspectResponse, RuntimeError> {
        self.record("inspect");
        let (name, body) = self.created.lock().unwrap().clone().unwrap();
        let image_env = self
            .image
            .as_ref()
            .map(|i| i.env.clone())
            .unwrap_or_default();
        let mut inspect = inspect_from_body(&name, &body, &image_env);
        // Exited once waited for (or, live, once its script ended) since the latest create: a
        // fake reused for several containers starts each one fresh.
        let calls = self.calls();
        let last_create = calls.iter().rposition(|c| c == "create");
        let last_wait = calls.iter().rposition(|c| c == "wait");
        let exited = last_wait > last_create
            || self
                .live_exited_flag
                .load(std::sync::atomic::Ordering::SeqCst);
        if exited {
            inspect.state = Some(ContainerState {
                status: Some(ContainerStateStatusEnum::EXITED),
                running: Some(false),
                exit_code: Some(self.exit_code),
                oom_killed: Some(self.oom),
                ..ContainerState::default()
            });
        }
        if let Some(tamper) = self.tamper {
            tamper(&mut inspect);
        }
        Ok(inspect)
    }

    async fn attach_output(&self, _id: &str) -> Result<OutputStream, RuntimeError> {
        self.record("attach");
        if self.live.is_some() {
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
            *self.live_output.lock().unwrap() = Some(tx);
            return Ok(Box::pin(futures::stream::poll_fn(move |cx| {
                rx.poll_recv(cx)
            })));
        }
        let chunks: Vec<Result<OutputChunk, RuntimeError>> =
            self.output.iter().cloned().map(Ok).collect();
        Ok(Box::pin(futures::stream::iter(chunks)))
    }

    async fn start(&self, _id: &str) -> Result<(), RuntimeError> {
        self.record("start");
        if self.start_fails {
            Err(RuntimeError::Failed { status: Some(500) })
        } else {
            Ok(())
        }
    }

    async fn write_stdin(&self, _id: &str, payload: &[u8]) -> Result<(), RuntimeError> {
        self.record("stdin");
        *self.stdin.lock().unwrap() = Some(payload.to_vec());
        Ok(())
    }

    async fn attach_stdin(&self, _id: &str) -> Result<crate::seam::StdinWriter, RuntimeError> {
        self.record("attach_stdin");
        let Some(live) = self.live.clone() else {
            return Ok(Box::pin(tokio::io::sink()));
        };
        let (worker_end, container_end) = tokio::io::duplex(1 << 16);
        let output = self.live_output.lock().unwrap().take().unwrap();
        let exited = Arc::clone(&self.live_exited);
        let flag = Arc::clone(&self.live_exited_flag);
        tokio::spawn(async move {
            live(container_end, output).await;
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
            exited.notify_waiters();
        });
        Ok(Box::pin(worker_end))
    }

    async fn wait(&self, _id: &str) -> Result<ExitStatus, RuntimeError> {
        self.record("wait");
        if self.live.is_some() {
            loop {
                let next = self.live_exited.notified();
                if self
                    .live_exited_flag
                    .load(std::sync::atomic::Ordering::SeqCst)
                {
                    break;
                }
                next.await;
            }
        }
        if self.wait_hangs {
            std::future::pending::<()>().await;
        }
        Ok(ExitStatus {
            code: self.exit_code,
        })
    }

    async fn kill(&self, _id: &str) -> Result<(), RuntimeError> {
        self.record("kill");
        Ok(())
    }

    async fn kill_events(&self, _id: &str, _since_unix: i64) -> Result<Vec<String>, RuntimeError> {
        self.record("events");
        self.events_result?;
        Ok(self.kill_events.clone())
    }

    async fn remove(&self, name: &str) -> Result<(), RuntimeError> {
        self.record(&format!("remove:{name}"));
        self.remove_result
    }

    async fn list_turns(&self) -> Result<Vec<TurnContainer>, RuntimeError> {
        self.record("list");
        Ok(self.turns.clone())
    }

    async fn registered_runtimes(
        &self,
    ) -> Result<HashMap<String, RegisteredRuntime>, RuntimeError> {
        self.record("info");
        Ok(self.runtimes.clone())
    }
}
