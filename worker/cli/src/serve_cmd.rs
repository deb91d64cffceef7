//! `patch-candidate serve`: the job-worker service (see `docs/SERVICE.md`).

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;
use service::ServeOptions;

use super::docker_args::{DockerArgs, state_dir};
use super::live_args::{ServeLiveArgs, live_host};
use super::outcome::{FAULT_CODE, RUNTIME_CODE};
use super::{CliError, Outcome};

/// Parses `500ms`, `15s`, `2m` (a plain number is seconds).
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| "expected a number with ms, s or m (e.g. 500ms, 15s, 2m)".to_owned())?;
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n.saturating_mul(60)),
        _ => return Err("expected a unit of ms, s or m (e.g. 500ms, 15s, 2m)".to_owned()),
    };
    if d.is_zero() {
        return Err("must be more than zero".to_owned());
    }
    Ok(d)
}

/// `serve` arguments.
#[derive(Debug, Clone, Args)]
pub(crate) struct ServeArgs {
    /// The job store: `postgres://…` (many hosts share one queue), `sqlite:PATH` or a file path.
    /// Default: SQLite `jobs.sqlite3` in the state directory (one host, no set-up).
    #[arg(long, value_name = "URL|PATH")]
    pub database: Option<String>,
    /// This host's id in the job store (1-63 of `A-Z a-z 0-9 . _ -`). Default: generated once
    /// into `<state dir>/service-host-id`, so a restarted service is the same host.
    #[arg(long)]
    pub host_id: Option<String>,
    /// Turns run at once. Default: one per core, bounded by memory (768 MiB per turn).
    #[arg(long)]
    pub max_turns: Option<usize>,
    /// Address of the HTTP API. A non-loopback address needs --listen-public.
    #[arg(long, default_value = service::DEFAULT_LISTEN)]
    pub listen: SocketAddr,
    /// Allow a non-loopback --listen address (the API still needs the bearer token).
    #[arg(long)]
    pub listen_public: bool,
    /// The role a forced accept needs besides `review`: `submit`, `review`, `publish` or
    /// `admin`.
    #[arg(long, value_name = "ROLE", default_value = "admin", value_parser = super::tokens_cmd::parse_role)]
    pub force_role: jobs::Role,
    /// Two-person review: the principal who submitted a job may not accept its candidate (and a
    /// job queued before roles existed, whose submitter is not recorded, cannot be accepted).
    #[arg(long)]
    pub two_person_review: bool,
    /// The operator's repository policy (TOML, see docs/SERVICE.md "Repository policy"): per
    /// repository, a ceiling on approvals, required gates, allowed agents, models, budgets and
    /// base branches, the publication rule, and daily token quotas. Checked at start-up (a bad
    /// file refuses to start) and read again on SIGHUP (a bad file then keeps the policy in
    /// force).
    #[arg(long, value_name = "FILE")]
    pub repository_policy: Option<std::path::PathBuf>,
    /// How often the claim loop asks for work when idle (a submission through the API wakes it
    /// at once).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub poll_interval: Duration,
    /// Lease of an attempt: a host that stops renewing it loses the job after this long.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub lease: Duration,
    /// Lease renewal interval (shorter than --lease). A cancel reaches a running turn within one.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = parse_duration)]
    pub heartbeat: Duration,
    /// After SIGTERM: how long running turns may finish before they are stopped and their jobs
    /// released (without spending an attempt).
    #[arg(long, value_name = "DURATION", default_value = "120s", value_parser = parse_duration)]
    pub drain_timeout: Duration,
    /// How long a job this host cannot run now (image or repository missing) waits before it is
    /// offered again.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub snooze: Duration,
    /// Scale of the retry backoff of environment failures (default: 2 s doubling to 10 min,
    /// with jitter); a smaller base for tests.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, hide = true)]
    pub retry_base: Option<Duration>,
    /// The operator's gate definitions (docs/GATES.md): the required gates of each job run after
    /// its turn. Without it, a job that requires a gate is snoozed on this host.
    #[arg(long, value_name = "FILE")]
    pub gates: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub follow_ups: super::plan_args::FollowUpArgs,
    #[command(flatten)]
    pub publish: ServePublishArgs,
    #[command(flatten)]
    pub live: ServeLiveArgs,
    #[command(flatten)]
    pub docker: DockerArgs,
}

/// Where the publish action (`POST /v1/jobs/{id}/publish`) pushes: the operator's choice; a
/// client names only the new branch and the base branch.
#[derive(Debug, Clone, Args)]
pub(crate) struct ServePublishArgs {
    /// The destination of publications: an absolute path to a repository, or an `https://` (or
    /// loopback `http://`) URL without credentials in it. Without it, publish is refused with
    /// PATCH_CANDIDATE_SERVICE_PUBLISH_DISABLED.
    #[arg(long, value_name = "URL|PATH")]
    pub publish_remote: Option<String>,
    /// A file (mode 0600) holding `user:password` or a token for an HTTP remote; it reaches git
    /// only through a private credential helper, never in any argv or environment.
    #[arg(
        long,
        value_name = "FILE",
        requires = "publish_remote",
        conflicts_with = "publish_credential_helper"
    )]
    pub publish_credential_file: Option<std::path::PathBuf>,
    /// A git credential helper to use instead (as `credential.helper` takes it).
    #[arg(long, value_name = "HELPER", requires = "publish_remote")]
    pub publish_credential_helper: Option<String>,
    /// Author and committer name of published commits.
    #[arg(long, value_name = "NAME", default_value = "patch-candidate")]
    pub publish_identity_name: String,
    /// Author and committer e-mail of published commits.
    #[arg(
        long,
        value_name = "EMAIL",
        default_value = "patch-candidate@localhost"
    )]
    pub publish_identity_email: String,
}

fn publish_target(args: &ServePublishArgs) -> Result<Option<service::PublishTarget>, CliError> {
    let Some(remote) = &args.publish_remote else {
        return Ok(None);
    };
    let credential = match (
        &args.publish_credential_file,
        &args.publish_credential_helper,
    ) {
        (Some(file), _) => publish::CredentialSource::file(file),
        (None, Some(helper)) => publish::CredentialSource::helper(helper)?,
        (None, None) => publish::CredentialSource::None,
    };
    // The identity is checked now, so a bad one fails at start, not at the first publish.
    publish::CommitIdentity::new(
        &args.publish_identity_name,
        &args.publish_identity_email,
        0,
        0,
    )?;
    Ok(Some(service::PublishTarget {
        remote: publish::Remote::parse(remote)?,
        credential,
        identity_name: args.publish_identity_name.clone(),
        identity_email: args.publish_identity_email.clone(),
    }))
}

pub(crate) fn run(args: &ServeArgs) -> Result<Outcome, CliError> {
    let state = state_dir()?;
    if turn::fault::arm_from_env().is_err() {
        return Err(CliError::usage(
            FAULT_CODE,
            format!("{FAULT_CODE} must be <point>:<abort|pause>"),
        ));
    }
    let live = live_host(&args.live)?;
    let publish = publish_target(&args.publish)?;
    let gates = args
        .gates
        .as_deref()
        .map(super::gate_cmd::load_definitions)
        .transpose()?
        .map(std::sync::Arc::new);
    let repository_policy = args
        .repository_policy
        .as_ref()
        .map(|path| {
            Ok::<_, CliError>(service::PolicySource {
                path: path.clone(),
                loaded: std::sync::Arc::new(service::RepositoryPolicy::load(path)?),
            })
        })
        .transpose()?;
    let host_id = service::host_id(args.host_id.as_deref(), &state)?;
    let opts = ServeOptions {
        database: args.database.clone(),
        state_dir: state,
        host_id,
        max_turns: args.max_turns.unwrap_or_else(service::default_max_turns),
        poll_interval: args.poll_interval,
        lease: args.lease,
        heartbeat: args.heartbeat,
        drain_timeout: args.drain_timeout,
        snooze: args.snooze,
        retry_scale: args.retry_base,
        listen: args.listen,
        listen_public: args.listen_public,
        docker_socket: args.docker.docker_socket.clone(),
        live,
        gates,
        publish,
        follow_ups: args.follow_ups.policy(),
        force_role: args.force_role,
        two_person_review: args.two_person_review,
        repository_policy,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .map_err(|_| CliError::environment(RUNTIME_CODE, "cannot start the async runtime"))?;
    let exit = rt.block_on(service::serve(opts))?;
    Ok(Outcome {
        json: serde_json::json!({"stopped": format!("{exit:?}").to_lowercase()}),
        text: "drained and stopped\n".to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_ms_s_m_and_refuse_zero_or_junk() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("15"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        for bad in ["0s", "", "s", "1h", "-1s", "1.5s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
