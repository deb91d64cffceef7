//! `patch-candidate janitor`: removes abandoned turn containers — those whose deadline plus the
//! grace period has passed, or whose owner on this host, in this PID namespace, is provably gone.
//! Never a live turn of another process, PID namespace or host.

use std::fmt::Write as _;
use std::time::Duration;

use clap::Args;

use super::docker_args::{DockerArgs, tokio_runtime};
use super::outcome::CLEANUP_FAILED_CODE;
use super::{CliError, Outcome, render};

/// `janitor` arguments.
#[derive(Debug, Args)]
pub(crate) struct JanitorArgs {
    /// Seconds after a turn's deadline before its container counts as abandoned.
    #[arg(long, default_value_t = container::DEFAULT_GRACE.as_secs())]
    grace_seconds: u64,
    #[command(flatten)]
    docker: DockerArgs,
}

pub(crate) fn run(args: &JanitorArgs) -> Result<Outcome, CliError> {
    let rt = tokio_runtime()?;
    let report = rt.block_on(async {
        let docker = args.docker.connect().await?;
        let grace = Duration::from_secs(args.grace_seconds);
        Ok::<_, CliError>(
            container::sweep_abandoned_turns(&docker, grace, vocab::now_unix()).await?,
        )
    })?;
    let mut text = String::new();
    let _ = writeln!(text, "removed: {}", report.removed.len());
    for name in &report.removed {
        let _ = writeln!(text, "  {}", render::name(name));
    }
    let _ = writeln!(text, "kept:    {}", report.kept.len());
    let _ = writeln!(text, "failed:  {}", report.failed.len());
    for name in &report.failed {
        let _ = writeln!(text, "  {}", render::name(name));
    }
    let json = serde_json::to_value(&report).unwrap_or_default();
    if !report.failed.is_empty() {
        return Err(CliError::environment(
            CLEANUP_FAILED_CODE,
            format!("{} container(s) could not be removed", report.failed.len()),
        ));
    }
    Ok(Outcome { json, text })
}
