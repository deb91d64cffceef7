//! `patch-candidate serve`: the trusted job-worker service. It claims jobs from the job store
//! (`jobs` crate: SQLite in the state directory, or PostgreSQL shared by many hosts), runs each as
//! one turn through the same pipeline as `run`, and records exactly one result per job.
//!
//! One host is four named tasks (`serve` module): **start-up** (state directory, lock, Docker,
//! listener, the waiting API while the job store opens), the **claim loop** with `--max-turns`
//! slots (a lease per attempt renewed by heartbeat), **maintenance** every heartbeat (a rescuer
//! that returns expired leases to the queue, a janitor that removes the containers of attempts no
//! longer current, the host heartbeat), and the **drain** after SIGTERM; a second signal stops
//! at once. The HTTP API (`http`) serves beside them.

mod attempt_usage;
mod error;
mod follow_up;
mod forge_intake;
mod forge_policy;
mod forge_report;
mod gates;
mod http;
mod live_host;
mod metrics;
mod mirror;
mod repository_policy;
mod review_cache;
mod runner;
mod serve;
mod submission;

use std::io::Read as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use finalizer::CandidateStore;
use jobs::{JobStore, JobsError};
use tokio::sync::Notify;
use vocab::HostId;

pub use attempt_usage::{AttemptCommands, AttemptUsage, ms_as_seconds};
pub use error::ERROR_CODES;
pub(crate) use error::ServiceError;
pub use follow_up::{ChainEnd, ChainLimits, Step, follow_up_feedback, next_step};
pub use forge_policy::{ForgeConfig, ProjectTemplate};
pub use http::{PublishTarget, job_view, job_view_with_gates, mint_token, review_summary};
pub use live_host::{CredentialSource, LiveHost};
pub use mirror::{Locator, MirrorCache};
pub use repository_policy::{JobAsk, MAX_REPOSITORY_POLICY_BYTES, RepositoryPolicy};
pub use serve::serve;
pub use submission::{DEFAULT_MAX_ATTEMPTS, Submission, prepare};

use container::BollardRuntime;
use metrics::Metrics;

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
pub const HOST_ID_FILE: &str = state::SERVICE_HOST_ID.name;
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
    /// The operator's gate definitions (`--gates FILE`); `None`: this host snoozes the jobs that
    /// require a gate.
    pub gates: Option<std::sync::Arc<gate::GateDefinitions>>,
    /// Where the publish action pushes (`--publish-remote`); `None`: publication is refused
    /// with `PATCH_CANDIDATE_SERVICE_PUBLISH_DISABLED`.
    pub publish: Option<PublishTarget>,
    /// Automatic follow-ups (`--max-follow-ups`): stored with every job this host accepts, so
    /// whichever host runs a job continues it within these bounds; `None`: never.
    pub follow_ups: Option<jobs::FollowUpPolicy>,
    /// The role a forced accept needs besides `review` (`--force-role`, default `admin`).
    pub force_role: jobs::Role,
    /// Two-person review (`--two-person-review`): the principal who submitted a job may not
    /// accept its candidate.
    pub two_person_review: bool,
    /// The operator's repository policy (`--repository-policy FILE`): the file, read again on
    /// SIGHUP, and the policy read at start-up. `None`: no policy (every repository, no quota).
    pub repository_policy: Option<PolicySource>,
}

/// The operator's repository policy file and the policy read from it.
#[derive(Debug, Clone)]
pub struct PolicySource {
    /// The file, read again on SIGHUP.
    pub path: PathBuf,
    /// The policy as read at start-up.
    pub loaded: std::sync::Arc<RepositoryPolicy>,
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
    /// Publications of this host, one at a time.
    pub publishing: tokio::sync::Mutex<()>,
    /// Candidates checked against their digest, with their policy scan, by digest.
    pub review_cache: review_cache::ReviewCache,
    /// Wakes this host's forge intake when a webhook queued a delivery.
    pub forge_wake: tokio::sync::Notify,
    /// The repository policy in force (replaced whole on SIGHUP).
    pub repository_policy: std::sync::RwLock<Option<std::sync::Arc<RepositoryPolicy>>>,
}

impl Shared {
    /// Checks the daily token quotas `policy` sets for `principal` and `repository` against the
    /// ledger of today (UTC): refused once the day's spend has reached the quota (a turn that
    /// starts below it may end above it, by at most its own budget). `at` is `submit` or
    /// `claim`, for the metrics. `read`: the day's spend when the claim already read it (on the
    /// store's clock, [`jobs::JobStore::claim_reading_spend`]); `None` reads it now.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_SERVICE_QUOTA` naming `principal` or `repository`; store errors.
    pub(crate) async fn check_quota(
        &self,
        policy: &RepositoryPolicy,
        principal: &str,
        repository: &str,
        at: &'static str,
        read: Option<jobs::SpendToday>,
    ) -> Result<(), ServiceError> {
        let quotas = (
            policy.principal_quota(principal),
            policy.repository_quota(repository),
        );
        if quotas == (None, None) {
            return Ok(());
        }
        let spent = match read {
            Some(spent) => spent,
            None => {
                self.store
                    .spend_on(jobs::UtcDay::today(), principal, repository)
                    .await?
            }
        };
        let over = if quotas.0.is_some_and(|q| spent.principal.total_tokens >= q) {
            Some("principal")
        } else if quotas.1.is_some_and(|q| spent.repository.total_tokens >= q) {
            Some("repository")
        } else {
            None
        };
        match over {
            None => Ok(()),
            Some(scope) => {
                self.metrics.quota_refused(scope, at);
                Err(ServiceError::Quota { scope })
            }
        }
    }

    /// Whether the policy in force sets a quota (claims then read the day's spend with the job).
    pub(crate) fn quotas_in_force(&self) -> bool {
        self.policy().is_some_and(|p| p.has_quotas())
    }

    /// The repository policy in force now, if any.
    pub(crate) fn policy(&self) -> Option<std::sync::Arc<RepositoryPolicy>> {
        // A poisoned lock still holds a whole policy: replacing it is one assignment.
        match self.repository_policy.read() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("host", &self.opts.host_id)
            .finish_non_exhaustive()
    }
}

/// Creates `dir` (and parents) with mode 0700 ([`state::create_private_dir`]).
pub(crate) fn create_private_dir(dir: &Path) -> Result<(), ServiceError> {
    state::create_private_dir(dir).map_err(|_| ServiceError::State {
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
        return Ok(HostId::parse(id).map_err(JobsError::from)?);
    }
    let path = state::SERVICE_HOST_ID.path_in(state);
    let mut text = String::new();
    if let Ok(f) = std::fs::File::open(&path) {
        f.take(128)
            .read_to_string(&mut text)
            .map_err(|_| ServiceError::State {
                detail: "cannot read the service host id",
            })?;
        return Ok(HostId::parse(text.trim_end_matches('\n')).map_err(JobsError::from)?);
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
        Ok(()) => Ok(HostId::parse(&fresh).map_err(JobsError::from)?),
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
