//! `serve` as four named tasks over one [`Shared`]: [`start_up`] (everything that must hold before
//! the first claim), the [`claim_loop`] (fill free slots, wait for a slot, a wake-up or a signal),
//! [`maintenance`] (every heartbeat interval: rescue expired leases, remove the containers of
//! attempts no longer current, tell the store this host is alive) and [`drain`] (no more claims,
//! wait for the running turns up to the drain timeout, then stop them and release their jobs).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use container::BollardRuntime;
use finalizer::CandidateStore;
use jobs::JobStore;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;

use crate::http::{self, load_or_create_token};
use crate::metrics::Metrics;
use crate::mirror::MirrorCache;
use crate::runner;
use crate::{MAX_LOOP_BACKOFF, Phase, ServeOptions, ServiceError, Shared, create_private_dir};

/// How a serve process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServeExit {
    /// Drained after a signal: every turn finished or was released.
    Drained,
}

/// SIGINT and SIGTERM, installed once at start-up.
struct Signals {
    interrupt: Signal,
    terminate: Signal,
}

impl Signals {
    fn install() -> Result<Self, ServiceError> {
        let install = |kind| {
            signal(kind).map_err(|_| ServiceError::State {
                detail: "cannot install signal handlers",
            })
        };
        Ok(Self {
            interrupt: install(SignalKind::interrupt())?,
            terminate: install(SignalKind::terminate())?,
        })
    }

    /// The name of the next signal received.
    async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.interrupt.recv() => "SIGINT",
            _ = self.terminate.recv() => "SIGTERM",
        }
    }
}

/// Runs the service until a signal drains it (see the crate documentation).
///
/// # Errors
/// Start-up failures: the state directory is locked or unusable, the listen address is refused,
/// the store cannot be opened (a malformed `--database`), Docker is unreachable.
pub async fn serve(opts: ServeOptions) -> Result<ServeExit, ServiceError> {
    let mut signals = Signals::install()?;
    let Some(started) = start_up(opts, &mut signals).await? else {
        return Ok(ServeExit::Drained);
    };
    let Started { sh, _lock } = started;
    let (phase_tx, phase_rx) = watch::channel(Phase::Run);
    let upkeep = tokio::spawn(maintenance(Arc::clone(&sh), phase_rx.clone()));
    let intake = tokio::spawn(crate::forge_intake::intake_loop(
        Arc::clone(&sh),
        phase_rx.clone(),
    ));
    let report = tokio::spawn(crate::forge_report::report_loop(
        Arc::clone(&sh),
        phase_rx.clone(),
    ));
    let mut tasks: JoinSet<()> = JoinSet::new();
    let name = claim_loop(&sh, &mut tasks, &phase_rx, &mut signals).await;
    tracing::info!(
        code = "PATCH_CANDIDATE_SERVICE_DRAINING",
        signal = name,
        running = tasks.len(),
        "draining: no more claims"
    );
    // The maintenance task ends after the pass it may be in (as the single loop did before the
    // drain began).
    let _ = phase_tx.send(Phase::Drain);
    let _ = upkeep.await;
    let _ = intake.await;
    let _ = report.await;
    drain(&sh, tasks, &phase_tx, &mut signals).await;
    Ok(ServeExit::Drained)
}

/// What start-up hands to the other tasks: the shared state, and the state directory's lock held
/// for the process's life.
struct Started {
    sh: Arc<Shared>,
    _lock: std::fs::File,
}

/// Everything that must hold before the first claim: the options make sense, the state directory
/// is ours (locked, stale staging trees gone), the candidate store, the API token, Docker and the
/// listener are there; then the job store is opened (waiting for its database, the socket served
/// meanwhile by the waiting API) and this host is registered. `None`: a signal came first.
async fn start_up(
    opts: ServeOptions,
    signals: &mut Signals,
) -> Result<Option<Started>, ServiceError> {
    // SIGHUP reloads the repository policy: installed first, so a hangup never ends the process.
    let hangup = signal(SignalKind::hangup()).map_err(|_| ServiceError::State {
        detail: "cannot install signal handlers",
    })?;
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
    create_private_dir(&opts.state_dir)?;
    let lock = lock_state(&opts.state_dir)?;
    // Staging trees of a previous process of this state directory (killed mid-turn) go first.
    let staging = state::SERVE_STAGING.path_in(&opts.state_dir);
    if staging.exists() {
        let state_dir =
            cap_std::fs::Dir::open_ambient_dir(&opts.state_dir, cap_std::ambient_authority())
                .map_err(|_| ServiceError::State {
                    detail: "cannot open the state directory",
                })?;
        state_dir
            .remove_dir_all(state::SERVE_STAGING.name)
            .map_err(|_| ServiceError::State {
                detail: "cannot clear the staging directory",
            })?;
    }
    create_private_dir(&staging)?;
    let candidates = CandidateStore::open(&state::CANDIDATES.path_in(&opts.state_dir))?;
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
        name = signals.recv() => {
            tracing::info!(
                code = "PATCH_CANDIDATE_SERVICE_STOPPED",
                signal = name,
                "stopped while waiting for the job store"
            );
            return Ok(None);
        }
    };
    // Private mirrors (and credential copies) of publications killed before they could clean up.
    let swept = publish::sweep_abandoned_mirrors();
    if swept.removed > 0 {
        tracing::info!(
            removed = swept.removed,
            "removed private publication mirrors left by killed publications"
        );
    }
    let max_turns = opts.max_turns.max(1);
    let opts_policy = opts.repository_policy.clone();
    let meta = serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "backend": store.backend_name(),
    });
    let sh = Arc::new(Shared {
        mirrors: MirrorCache::new(state::MIRRORS.path_in(&opts.state_dir)),
        opts,
        store,
        docker,
        candidates,
        staging,
        metrics: Metrics::default(),
        ready: AtomicBool::new(true),
        wake: Notify::new(),
        forge_wake: Notify::new(),
        token,
        publishing: tokio::sync::Mutex::new(()),
        review_cache: crate::review_cache::ReviewCache::default(),
        repository_policy: std::sync::RwLock::new(
            opts_policy.as_ref().map(|p| Arc::clone(&p.loaded)),
        ),
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
        two_person_review = sh.opts.two_person_review,
        force_role = sh.opts.force_role.as_str(),
        repository_policy = sh.policy().map(|p| p.digest().to_string()),
        "serving"
    );
    warn_migrated_tokens(&sh.store).await;
    if let Some(policy) = sh.policy() {
        audit_policy_loaded(&sh, &policy).await;
    }
    tokio::spawn(reload_on_hangup(Arc::clone(&sh), hangup));
    Ok(Some(Started { sh, _lock: lock }))
}

/// Reads the repository policy file again on each SIGHUP: a file that passes every check
/// replaces the policy whole (logged with its digest, and audited as `policy_loaded`); one that
/// fails keeps the policy in force (logged with `PATCH_CANDIDATE_SERVICE_POLICY_FILE`). Jobs
/// already queued are re-admitted under the new policy when a host claims them.
async fn reload_on_hangup(sh: Arc<Shared>, mut hangup: Signal) {
    while hangup.recv().await.is_some() {
        let Some(source) = sh.opts.repository_policy.as_ref() else {
            tracing::info!(
                code = "PATCH_CANDIDATE_SERVICE_POLICY_RELOAD",
                "SIGHUP: no repository policy to reload (serve --repository-policy)"
            );
            continue;
        };
        let path = source.path.clone();
        let read = tokio::task::spawn_blocking(move || crate::RepositoryPolicy::load(&path)).await;
        match read {
            Ok(Ok(policy)) => {
                let policy = Arc::new(policy);
                let previous = sh.policy().map(|p| p.digest().to_string());
                match sh.repository_policy.write() {
                    Ok(mut guard) => *guard = Some(Arc::clone(&policy)),
                    Err(poisoned) => *poisoned.into_inner() = Some(Arc::clone(&policy)),
                }
                tracing::info!(
                    code = "PATCH_CANDIDATE_SERVICE_POLICY_RELOAD",
                    digest = %policy.digest(),
                    previous = previous.as_deref().unwrap_or("none"),
                    rules = policy.rule_count(),
                    "repository policy reloaded"
                );
                audit_policy_loaded(&sh, &policy).await;
            }
            Ok(Err(e)) => tracing::error!(
                code = vocab::Coded::code(&e),
                error = %e,
                "repository policy not reloaded: the policy in force stays"
            ),
            Err(_) => tracing::error!(
                code = "PATCH_CANDIDATE_SERVICE_POLICY_FILE",
                "repository policy not reloaded: the reader failed"
            ),
        }
    }
}

/// Records the policy this host loaded in the audit trail (`policy_loaded`, by the host).
async fn audit_policy_loaded(sh: &Shared, policy: &crate::RepositoryPolicy) {
    let recorded = sh
        .store
        .audit_policy_loaded(sh.opts.host_id.as_str(), &policy.digest().to_string())
        .await;
    if let Err(e) = recorded {
        tracing::warn!(code = e.code(), "policy load not audited");
    }
}

/// Logs `PATCH_CANDIDATE_SERVICE_TOKENS_MIGRATED` (a warning) when live named tokens still
/// carry every role because they predate roles (schema version 7), with how many: each should
/// get the roles it needs (`patch-candidate tokens roles NAME --role …`).
async fn warn_migrated_tokens(store: &jobs::JobStore) {
    match store.tokens().await {
        Ok(tokens) => {
            let migrated = tokens
                .iter()
                .filter(|t| t.roles_migrated && t.revoked_at_ms.is_none())
                .count();
            if migrated > 0 {
                tracing::warn!(
                    code = "PATCH_CANDIDATE_SERVICE_TOKENS_MIGRATED",
                    tokens = migrated,
                    "named tokens from before roles carry every role; set each one's roles with `tokens roles NAME --role ...`"
                );
            }
        }
        Err(e) => tracing::warn!(code = e.code(), "the named tokens could not be listed"),
    }
}

/// Claims into every free slot, then waits for a poll tick, a wake-up (a submission), a finished
/// turn or a signal. A failed claim backs off (poll interval doubling up to
/// [`MAX_LOOP_BACKOFF`]); while every slot is busy it waits only for a turn to end. Returns the
/// name of the signal that ends it.
async fn claim_loop(
    sh: &Arc<Shared>,
    tasks: &mut JoinSet<()>,
    phase: &watch::Receiver<Phase>,
    signals: &mut Signals,
) -> &'static str {
    let max_turns = sh.opts.max_turns.max(1);
    let mut pause = Duration::ZERO;
    loop {
        let free = max_turns.saturating_sub(tasks.len());
        if free > 0 {
            // Under a quota the claim also reads each job's spend of the day (no second trip).
            let claimed = if sh.quotas_in_force() {
                sh.store
                    .claim_reading_spend(&sh.opts.host_id, free, sh.opts.lease)
                    .await
            } else {
                sh.store.claim(&sh.opts.host_id, free, sh.opts.lease).await
            };
            match claimed {
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
                        tasks.spawn(runner::run_attempt(Arc::clone(sh), c, phase.clone()));
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
        tokio::select! {
            () = tokio::time::sleep(wait), if !full => {}
            () = sh.wake.notified(), if !full => {}
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            name = signals.recv() => return name,
        }
    }
}

/// Every heartbeat interval until the drain begins: rescue expired leases, remove the containers
/// of attempts no longer current, tell the store this host is alive. The first pass runs at once.
async fn maintenance(sh: Arc<Shared>, mut phase: watch::Receiver<Phase>) {
    let mut tick = tokio::time::interval(sh.opts.heartbeat);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            changed = phase.changed() => {
                if changed.is_err() || *phase.borrow() != Phase::Run {
                    return;
                }
                continue;
            }
        }
        let rescued = sh.store.rescue_expired().await;
        match rescued {
            Ok(n) => {
                sh.metrics.store_ok();
                if n > 0 {
                    tracing::info!(
                        code = "PATCH_CANDIDATE_JOBS_RESCUED",
                        rescued = n,
                        "expired leases returned to the queue"
                    );
                    sh.metrics.rescued(n);
                }
            }
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
}

/// No more claims, not ready: waits for the running turns up to the drain timeout, then tells
/// them to stop (their jobs are released), then for the container removals they started. A
/// second signal stops the process at once (exit 143); the janitor removes what is left.
async fn drain(
    sh: &Shared,
    mut tasks: JoinSet<()>,
    phase: &watch::Sender<Phase>,
    signals: &mut Signals,
) {
    sh.ready.store(false, Ordering::SeqCst);
    sh.metrics.set_draining();
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
                let _ = phase.send(Phase::Kill);
                killed = true;
            }
            name = signals.recv() => hard(name),
        }
    }
    let remaining = tokio::select! {
        n = container::settle_pending_removals(container::CANCEL_CLEANUP_TIMEOUT) => n,
        name = signals.recv() => hard(name),
    };
    tracing::info!(
        code = "PATCH_CANDIDATE_SERVICE_STOPPED",
        pending_removals = remaining,
        "drained"
    );
}

/// Holds `<state dir>/serve.lock` (one serve per state directory) for the process's life.
fn lock_state(state: &Path) -> Result<std::fs::File, ServiceError> {
    state::StateDir::at(state)
        .lock_serve()
        .map_err(|e| match e {
            state::LockError::Held => ServiceError::Locked,
            _ => ServiceError::State {
                detail: "cannot open the serve lock file",
            },
        })
}

/// Opens the store, waiting with backoff while the database is unavailable.
async fn open_store(opts: &ServeOptions) -> Result<JobStore, ServiceError> {
    let mut pause = Duration::from_millis(200);
    loop {
        match JobStore::open(opts.database.as_deref(), &opts.state_dir).await {
            Ok(store) => return Ok(store),
            Err(e) if vocab::Coded::class(&e) == vocab::FailureClass::Environment => {
                tracing::warn!(code = e.code(), "job store unavailable: waiting");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(MAX_LOOP_BACKOFF);
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Binds the API listener with a deep accept queue: a burst of clients (1,000 at once in the API
/// test) must wait in the kernel's queue, not be reset when a 1,024-entry queue overflows.
fn bind_listener(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(4096)
}
