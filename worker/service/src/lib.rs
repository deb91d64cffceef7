//! `patch-candidate serve`: the trusted job-worker service. It claims jobs from the job store
//! (`jobs` crate: SQLite in the state directory, or PostgreSQL shared by many hosts), runs each as
//! one turn through the same pipeline as `run`, and records exactly one result per job.
//!
//! One host: a claim loop with `--max-turns` slots, a lease per attempt renewed by heartbeat, a
//! janitor that removes the containers of attempts no longer current, a rescuer that returns
//! expired leases to the queue, and the HTTP API (`http`). SIGTERM drains; a second signal
//! stops at once.

mod error;
mod http;
mod live_host;
mod metrics;
mod mirror;
mod runner;
mod submission;

use std::io::Read as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use finalizer::CandidateStore;
use jobs::{HostId, JobStore};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;

pub use error::ServiceError;
pub use http::{TOKEN_FILE, job_view, load_or_create_token};
pub use live_host::{CredentialSource, LiveHost};
pub use metrics::Metrics;
pub use mirror::{Locator, MirrorCache};
pub use submission::{
    DEFAULT_MAX_ATTEMPTS, JobInputs, MAX_ATTEMPTS, MAX_POLICY_BYTES, Selections, Submission,
    prepare, reverify,
};

use container::BollardRuntime;

/// Default lease of one attempt.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);
/// Default heartbeat interval.
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(15);
/// Default poll interval of the claim loop.
pub const DEFAULT_POLL: Duration = Duration::from_secs(1);
/// Default drain timeout after SIGTERM.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(120);
/// Default snooze of a job this host cannot run now (image or repository missing).
pub const DEFAULT_SNOOZE: Duration = Duration::from_secs(60);
/// Default listen address of the HTTP API.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8787";
/// The file holding this state directory's service host id.
pub const HOST_ID_FILE: &str = "service-host-id";
/// Memory a turn may use (its container limit), for the default `--max-turns`.
const TURN_MEMORY_BYTES: u64 = 768 * 1024 * 1024;
/// Longest pause of the claim loop (and of the start-up wait, and of a retried store write) while
/// the database is unavailable. Each try costs one failed connection attempt — nothing on a
/// unix socket or a refused port, at most the store's connect timeout (5 s) against a host that
/// does not answer — so polling a database that is down every 5 s is no load on it even from
/// hundreds of hosts, and a host resumes claiming within 5 s of the database's return (a longer
/// cap, e.g. 30 s, would leave the queue idle for up to half a minute after a short restart).
const MAX_LOOP_BACKOFF: Duration = Duration::from_secs(5);

/// What `serve` was asked to do.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub database: Option<String>,
    pub state_dir: PathBuf,
    pub host_id: HostId,
    pub max_turns: usize,
    pub poll_interval: Duration,
    pub lease: Duration,
    pub heartbeat: Duration,
    pub drain_timeout: Duration,
    pub snooze: Duration,
    /// Scales the retry backoff (tests); `None` uses the store's rule as is.
    pub retry_scale: Option<Duration>,
    pub listen: SocketAddr,
    pub listen_public: bool,
    pub docker_socket: PathBuf,
    /// Gateway settings for live jobs; `None`: this host snoozes the live jobs it claims.
    pub live: Option<LiveHost>,
}

/// The claim loop's phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Run,
    Drain,
    Kill,
}

/// What every task of one serve process shares.
pub(crate) struct Shared {
    pub opts: ServeOptions,
    pub store: JobStore,
    pub docker: BollardRuntime,
    pub mirrors: MirrorCache,
    pub candidates: CandidateStore,
    pub staging: PathBuf,
    pub metrics: Metrics,
    pub ready: AtomicBool,
    pub wake: Notify,
    pub token: Vec<u8>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("host", &self.opts.host_id)
            .finish_non_exhaustive()
    }
}

/// Creates `dir` (and parents) with mode 0700.
pub(crate) fn create_private_dir(dir: &Path) -> Result<(), ServiceError> {
    use std::os::unix::fs::DirBuilderExt as _;
    // The state directory is the operator's: ambient by design.
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|_| ServiceError::State {
            detail: "cannot create a directory in the state directory",
        })
}

/// The service host id of this state directory: `--host-id` when given, else the id stored in
/// `<state dir>/service-host-id`, generated (`h` + 32 hex, 0600) on first use.
///
/// # Errors
/// `PATCH_CANDIDATE_SERVICE_STATE` when the file cannot be read or written;
/// `PATCH_CANDIDATE_JOBS_ID` when a stored id is malformed.
pub fn host_id(explicit: Option<&str>, state: &Path) -> Result<HostId, ServiceError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    if let Some(id) = explicit {
        return Ok(HostId::parse(id)?);
    }
    let path = state.join(HOST_ID_FILE);
    let mut text = String::new();
    if let Ok(f) = std::fs::File::open(&path) {
        f.take(128)
            .read_to_string(&mut text)
            .map_err(|_| ServiceError::State {
                detail: "cannot read the service host id",
            })?;
        return Ok(HostId::parse(text.trim_end_matches('\n'))?);
    }
    create_private_dir(state)?;
    let fresh = format!("h{}", uuid::Uuid::new_v4().simple());
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut f| f.write_all(format!("{fresh}\n").as_bytes()));
    match written {
        Ok(()) => Ok(HostId::parse(&fresh)?),
        // Lost a race with another process: read what it wrote.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => host_id(None, state),
        Err(_) => Err(ServiceError::State {
            detail: "cannot write the service host id",
        }),
    }
}

/// The default turn slots: one per core, bounded by memory (a turn may use 768 MiB; a quarter of
/// the memory is left to the host), at least one.
#[must_use]
pub fn default_max_turns() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let mut text = String::new();
    let mem_total = std::fs::File::open("/proc/meminfo")
        .and_then(|f| f.take(1 << 16).read_to_string(&mut text))
        .ok()
        .and_then(|_| {
            text.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().strip_suffix("kB"))
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
        .map(|kb| kb.saturating_mul(1024));
    let by_memory = mem_total.map_or(cores, |bytes| {
        usize::try_from(bytes / 4 * 3 / TURN_MEMORY_BYTES).unwrap_or(usize::MAX)
    });
    cores.min(by_memory).max(1)
}

/// Holds `<state dir>/serve.lock` (one serve per state directory) for the process's life.
fn lock_state(state: &Path) -> Result<std::fs::File, ServiceError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(state.join("serve.lock"))
        .map_err(|_| ServiceError::State {
            detail: "cannot open the serve lock file",
        })?;
    rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive)
        .map_err(|_| ServiceError::Locked)?;
    Ok(file)
}

/// Opens the store, waiting with backoff while the database is unavailable.
async fn open_store(opts: &ServeOptions) -> Result<JobStore, ServiceError> {
    let mut pause = Duration::from_millis(200);
    loop {
        match JobStore::open(opts.database.as_deref(), &opts.state_dir).await {
            Ok(store) => return Ok(store),
            Err(e) if snapshot::Coded::class(&e) == snapshot::FailureClass::Environment => {
                tracing::warn!(code = e.code(), "job store unavailable: waiting");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(MAX_LOOP_BACKOFF);
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// How a serve process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServeExit {
    /// Drained after a signal: every turn finished or was released.
    Drained,
}

/// Runs the service until a signal drains it (see the module documentation).
///
/// # Errors
/// Start-up failures: the state directory is locked or unusable, the listen address is refused,
/// the store cannot be opened (a malformed `--database`), Docker is unreachable.
pub async fn serve(opts: ServeOptions) -> Result<ServeExit, ServiceError> {
    if !opts.listen.ip().is_loopback() && !opts.listen_public {
        return Err(ServiceError::Listen {
            detail: "a non-loopback address needs --listen-public",
        });
    }
    if opts.heartbeat.is_zero() || opts.heartbeat >= opts.lease {
        return Err(ServiceError::Spec {
            detail: "the heartbeat interval must be shorter than the lease",
        });
    }
    // A host that cannot read its credential or config refuses to start (each live attempt
    // reads the credential again, so a rotated file is picked up).
    if let Some(live) = &opts.live {
        live.check()?;
    }
    let mut interrupt = signal(SignalKind::interrupt()).map_err(|_| ServiceError::State {
        detail: "cannot install signal handlers",
    })?;
    let mut terminate = signal(SignalKind::terminate()).map_err(|_| ServiceError::State {
        detail: "cannot install signal handlers",
    })?;
    create_private_dir(&opts.state_dir)?;
    let _lock = lock_state(&opts.state_dir)?;
    // Staging trees of a previous process of this state directory (killed mid-turn) go first.
    let staging = opts.state_dir.join("serve-staging");
    if staging.exists() {
        let state_dir =
            cap_std::fs::Dir::open_ambient_dir(&opts.state_dir, cap_std::ambient_authority())
                .map_err(|_| ServiceError::State {
                    detail: "cannot open the state directory",
                })?;
        state_dir
            .remove_dir_all("serve-staging")
            .map_err(|_| ServiceError::State {
                detail: "cannot clear the staging directory",
            })?;
    }
    create_private_dir(&staging)?;
    let candidates = CandidateStore::open(&opts.state_dir.join("candidates"))?;
    let token = load_or_create_token(&opts.state_dir)?;
    let docker = BollardRuntime::connect(&opts.docker_socket).await?;
    let listener = bind_listener(opts.listen).map_err(|_| ServiceError::Listen {
        detail: "cannot bind the listen address",
    })?;
    let bound = listener.local_addr().map_err(|_| ServiceError::Listen {
        detail: "cannot read the bound address",
    })?;
    tracing::info!(
        code = "PATCH_CANDIDATE_SERVICE_LISTENING",
        listen = %bound,
        "listening; opening the job store"
    );
    // While the store opens (the database may be down: `open_store` waits for it), the socket is
    // served by the waiting API — probes answer, everything else is 503 — so clients and load
    // balancers get an answer instead of hanging in the accept queue. Both servers accept from
    // the one listener; the waiting one stops accepting once the full API runs, and connections
    // queued meanwhile stay in the kernel's queue for the full API.
    let listener = Arc::new(listener);
    let (opened, waiting_done) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(http::serve_waiting(
        Arc::clone(&listener),
        token.clone(),
        async move {
            let _ = waiting_done.await;
        },
    ));
    let store = tokio::select! {
        store = open_store(&opts) => store?,
        _ = interrupt.recv() => return Ok(stopped_before_start("SIGINT")),
        _ = terminate.recv() => return Ok(stopped_before_start("SIGTERM")),
    };
    let max_turns = opts.max_turns.max(1);
    let meta = serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "backend": store.backend_name(),
    });
    let sh = Arc::new(Shared {
        mirrors: MirrorCache::new(opts.state_dir.join("mirrors")),
        opts,
        store,
        docker,
        candidates,
        staging,
        metrics: Metrics::default(),
        ready: AtomicBool::new(true),
        wake: Notify::new(),
        token,
    });
    sh.metrics.set_max_turns(max_turns);
    let registered = runner::retrying(&sh, "register_host", || {
        sh.store.register_host(
            &sh.opts.host_id,
            u32::try_from(max_turns).unwrap_or(u32::MAX),
            &meta,
        )
    })
    .await;
    if let Err(e) = registered {
        tracing::warn!(code = e.code(), "host not registered");
    }
    let _ = opened.send(());
    tokio::spawn(http::serve_api(listener, Arc::clone(&sh)));
    tracing::info!(
        code = "PATCH_CANDIDATE_SERVICE_STARTED",
        host = %sh.opts.host_id,
        listen = %bound,
        backend = sh.store.backend_name(),
        max_turns,
        live = sh.opts.live.is_some(),
        "serving"
    );

    let (phase_tx, phase_rx) = watch::channel(Phase::Run);
    let mut tasks: JoinSet<()> = JoinSet::new();
    let mut pause = Duration::ZERO;
    let mut last_maintenance = tokio::time::Instant::now() - sh.opts.heartbeat;
    loop {
        // Maintenance every heartbeat interval: rescue expired leases, remove containers of
        // attempts no longer current, tell the store this host is alive.
        if last_maintenance.elapsed() >= sh.opts.heartbeat {
            last_maintenance = tokio::time::Instant::now();
            let rescued = sh.store.rescue_expired().await;
            if rescued.is_ok() {
                sh.metrics.store_ok();
            }
            match rescued {
                Ok(n) if n > 0 => {
                    tracing::info!(
                        code = "PATCH_CANDIDATE_JOBS_RESCUED",
                        rescued = n,
                        "expired leases returned to the queue"
                    );
                    sh.metrics.rescued(n);
                }
                Ok(_) => {}
                Err(e) => {
                    sh.metrics.store_error();
                    tracing::warn!(code = e.code(), "rescue failed");
                }
            }
            runner::janitor_pass(&sh).await;
            match sh.store.host_heartbeat(&sh.opts.host_id).await {
                Ok(_) => sh.metrics.store_ok(),
                Err(e) => {
                    sh.metrics.store_error();
                    tracing::debug!(code = e.code(), "host heartbeat failed");
                }
            }
        }
        let free = max_turns.saturating_sub(tasks.len());
        if free > 0 {
            match sh.store.claim(&sh.opts.host_id, free, sh.opts.lease).await {
                Ok(claimed) => {
                    sh.metrics.store_ok();
                    if !pause.is_zero() {
                        tracing::info!(
                            code = "PATCH_CANDIDATE_SERVICE_STORE_BACK",
                            "job store reachable again: claiming"
                        );
                    }
                    pause = Duration::ZERO;
                    sh.metrics.claimed(claimed.len());
                    for c in claimed {
                        tasks.spawn(runner::run_attempt(Arc::clone(&sh), c, phase_rx.clone()));
                    }
                }
                Err(e) => {
                    sh.metrics.store_error();
                    pause = (pause * 2).clamp(sh.opts.poll_interval, MAX_LOOP_BACKOFF);
                    tracing::warn!(
                        code = e.code(),
                        backoff_ms = u64::try_from(pause.as_millis()).unwrap_or(u64::MAX),
                        "claim failed: waiting"
                    );
                }
            }
        }
        sh.metrics.set_running(tasks.len());
        let wait = if pause.is_zero() {
            sh.opts.poll_interval
        } else {
            pause
        };
        let full = tasks.len() >= max_turns;
        let received = tokio::select! {
            () = tokio::time::sleep(wait), if !full => None,
            () = tokio::time::sleep(sh.opts.heartbeat), if full => None,
            () = sh.wake.notified(), if !full => None,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => None,
            _ = interrupt.recv() => Some("SIGINT"),
            _ = terminate.recv() => Some("SIGTERM"),
        };
        if let Some(name) = received {
            tracing::info!(
                code = "PATCH_CANDIDATE_SERVICE_DRAINING",
                signal = name,
                running = tasks.len(),
                "draining: no more claims"
            );
            break;
        }
    }
    // Drain: no more claims, not ready, wait for the running turns up to the drain timeout.
    sh.ready.store(false, Ordering::SeqCst);
    sh.metrics.set_draining();
    let _ = phase_tx.send(Phase::Drain);
    let deadline = tokio::time::Instant::now() + sh.opts.drain_timeout;
    let hard = |name: &str| -> ! {
        tracing::warn!(
            code = "PATCH_CANDIDATE_INTERRUPTED",
            signal = name,
            "second signal: stopping at once; the janitor removes what is left"
        );
        std::process::exit(143)
    };
    let mut killed = false;
    while !tasks.is_empty() {
        tokio::select! {
            _ = tasks.join_next() => {}
            () = tokio::time::sleep_until(deadline), if !killed => {
                tracing::warn!(code = "PATCH_CANDIDATE_SERVICE_DRAIN_TIMEOUT", running = tasks.len(), "drain timeout: stopping turns and releasing their jobs");
                let _ = phase_tx.send(Phase::Kill);
                killed = true;
            }
            _ = interrupt.recv() => hard("SIGINT"),
            _ = terminate.recv() => hard("SIGTERM"),
        }
    }
    let remaining = tokio::select! {
        n = container::settle_pending_removals(container::CANCEL_CLEANUP_TIMEOUT) => n,
        _ = interrupt.recv() => hard("SIGINT"),
        _ = terminate.recv() => hard("SIGTERM"),
    };
    tracing::info!(
        code = "PATCH_CANDIDATE_SERVICE_STOPPED",
        pending_removals = remaining,
        "drained"
    );
    Ok(ServeExit::Drained)
}

/// The end of a serve process stopped by a signal while it waited for its job store: nothing ran.
fn stopped_before_start(signal: &str) -> ServeExit {
    tracing::info!(
        code = "PATCH_CANDIDATE_SERVICE_STOPPED",
        signal,
        "stopped while waiting for the job store"
    );
    ServeExit::Drained
}

/// Binds the API listener with a deep accept queue: a burst of clients (1,000 at once in the API
/// test) must wait in the kernel's queue, not be reset when a 1,024-entry queue overflows.
fn bind_listener(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(4096)
}
