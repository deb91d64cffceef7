//! The abandoned-turn sweeper (the reference has none, §10.9). Safe with many workers: several
//! processes, PID namespaces (containerised workers) and hosts may share one daemon.
//!
//! A labelled turn container is removed only when one of these holds:
//! 1. **Its deadline has passed:** `now > deadline + grace`. The deadline label is the absolute
//!    time by which its owner gives up on the turn (wall budget plus slack from before `create`),
//!    so no live turn of any owner is still using the container. A container without a readable
//!    deadline label (an older worker's) is given `created + LEGACY_LIFETIME` instead.
//! 2. **Its owner is provably gone:** the container's host label equals this host's id, its PID
//!    namespace label equals this process's PID namespace (read from a procfs that is provably
//!    this namespace's own), and `/proc/<pid>/stat` shows that the recorded `<pid>:<start ticks>`
//!    no longer exists (no such PID, or a different start time). An unreadable or foreign procfs,
//!    a `hidepid` mount, a malformed or `unknown` label: nothing is proven, the container stays.
//!
//! A container of another host or another PID namespace is therefore only ever removed by rule 1.
//!
//! The service (`serve`) runs a second, store-based pass ([`list_job_turns`] then
//! [`remove_superseded_turns`]): a service turn container carries its job store's id, the job and
//! the store's attempt id; the pass removes a container whose `(job, attempt)` is no longer one of
//! the store's running attempts. It considers **only the containers whose `job_store` label
//! equals its own store's id**: a turn of another store (another service with another SQLite file
//! or another PostgreSQL database on the same daemon) is none of this store's attempts and would
//! look superseded, so it is never listed. A container with job labels but no or a malformed
//! `job_store` label (an older service's) proves nothing either and is left to rules 1 and 2.

use std::collections::HashMap;
use std::time::Duration;

use serde::Serialize;
use vocab::StoreId;

use crate::call::docker_call;
use crate::cleanup::remove_container;
use crate::error::ContainerError;
use crate::ids::ContainerName;
use crate::limits::{CALL_TIMEOUT, MAX_WALL_SECONDS, WALL_SLACK};
use crate::owner::{
    DEADLINE_LABEL_KEY, HOST_LABEL_KEY, JOB_ATTEMPT_LABEL_KEY, JOB_LABEL_KEY, JOB_STORE_LABEL_KEY,
    Liveness, LocalOwner, OWNER_LABEL_KEY, PID_NAMESPACE_LABEL_KEY, PidNamespace, ProcFs,
    ProcessIdentity, ProcessTable, local_owner,
};
use crate::seam::{ContainerRuntime, TurnContainer};

/// Default grace period after a turn's deadline before its container counts as abandoned.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(600);
/// The life assumed for a container without a readable deadline label: the longest wall budget,
/// its slack and the short calls around it.
pub const LEGACY_LIFETIME: Duration =
    Duration::from_secs(MAX_WALL_SECONDS + WALL_SLACK.as_secs() + 3 * CALL_TIMEOUT.as_secs());

/// What a sweep did, by container name (or ID when a container has no usable name).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SweepReport {
    pub removed: Vec<String>,
    pub kept: Vec<String>,
    pub failed: Vec<String>,
}

/// The sweeper's verdict on one container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Its deadline plus the grace period has passed.
    RemoveExpired,
    /// Its owner on this host and in this PID namespace is provably gone.
    RemoveOwnerGone,
    /// Not a generated turn name: never touched.
    KeepForeign,
    /// A turn that may still be live.
    KeepLive,
}

fn label<'a>(labels: &'a HashMap<String, String>, key: &str) -> Option<&'a str> {
    labels.get(key).map(String::as_str)
}

/// The deadline of `container` in Unix seconds.
fn deadline_of(container: &TurnContainer) -> i64 {
    label(&container.labels, DEADLINE_LABEL_KEY)
        .and_then(|d| {
            let plain = !d.is_empty() && d.len() <= 18 && d.bytes().all(|b| b.is_ascii_digit());
            if plain { d.parse::<i64>().ok() } else { None }
        })
        .unwrap_or_else(|| {
            let lifetime = i64::try_from(LEGACY_LIFETIME.as_secs()).unwrap_or(i64::MAX);
            container.created.saturating_add(lifetime)
        })
}

/// The janitor's rule (module documentation) for one container.
pub(crate) fn verdict(
    container: &TurnContainer,
    now_unix: i64,
    grace: Duration,
    me: &LocalOwner,
    processes: &dyn ProcessTable,
) -> Verdict {
    if !container
        .names
        .iter()
        .any(|n| n.parse::<ContainerName>().is_ok())
    {
        return Verdict::KeepForeign;
    }
    let grace = i64::try_from(grace.as_secs()).unwrap_or(i64::MAX);
    if now_unix > deadline_of(container).saturating_add(grace) {
        return Verdict::RemoveExpired;
    }
    let labels = &container.labels;
    let same_host = label(labels, HOST_LABEL_KEY) == Some(me.host().as_str());
    let same_namespace = me.pid_namespace().is_some_and(|mine| {
        label(labels, PID_NAMESPACE_LABEL_KEY).and_then(PidNamespace::parse) == Some(mine)
    });
    if !same_host || !same_namespace {
        return Verdict::KeepLive;
    }
    match label(labels, OWNER_LABEL_KEY).and_then(ProcessIdentity::parse) {
        Some(owner) if processes.liveness(owner) == Liveness::Gone => Verdict::RemoveOwnerGone,
        _ => Verdict::KeepLive,
    }
}

/// Removes abandoned turn containers by the rule in the module documentation.
///
/// # Errors
/// `REPOSITORY_DOCKER_UNAVAILABLE` / `…_COMMAND_FAILED` / `…_TIMEOUT` when listing fails.
/// Individual removal failures are reported in `SweepReport::failed`.
pub async fn sweep_abandoned_turns<R: ContainerRuntime>(
    runtime: &R,
    grace: Duration,
    now_unix: i64,
) -> Result<SweepReport, ContainerError> {
    sweep_with(runtime, grace, now_unix, local_owner(), &ProcFs).await
}

pub(crate) async fn sweep_with<R: ContainerRuntime>(
    runtime: &R,
    grace: Duration,
    now_unix: i64,
    me: &LocalOwner,
    processes: &dyn ProcessTable,
) -> Result<SweepReport, ContainerError> {
    let containers = docker_call("list containers", runtime.list_turns()).await?;
    let mut report = SweepReport::default();
    for container in containers {
        let name = container
            .names
            .iter()
            .find_map(|n| n.parse::<ContainerName>().ok());
        let Some(name) = name else {
            report.kept.push(container.id);
            continue;
        };
        match verdict(&container, now_unix, grace, me, processes) {
            Verdict::RemoveExpired | Verdict::RemoveOwnerGone => {
                match remove_container(runtime, &name).await {
                    Ok(()) => report.removed.push(name.as_str().to_owned()),
                    Err(_) => report.failed.push(name.as_str().to_owned()),
                }
            }
            Verdict::KeepForeign | Verdict::KeepLive => {
                report.kept.push(name.as_str().to_owned());
            }
        }
    }
    Ok(report)
}

/// A service turn container of one job store: its name and the job and store attempt its labels
/// name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobTurn {
    pub name: ContainerName,
    pub job: String,
    pub attempt: String,
}

/// Lists the service turn containers of the job store `store`, of every host: those whose
/// `job_store` label is `store` and that carry job and attempt labels. A container of another
/// store, or with no or a malformed `job_store` label, is not listed (module documentation).
///
/// Call this BEFORE reading the store's current attempts: a container listed here was created
/// after its attempt was claimed, so an attempt missing from a later read of the current
/// attempts is provably over ([`remove_superseded_turns`]).
///
/// # Errors
/// `REPOSITORY_DOCKER_UNAVAILABLE` / `…_COMMAND_FAILED` / `…_TIMEOUT` when listing fails.
pub async fn list_job_turns<R: ContainerRuntime>(
    runtime: &R,
    store: &StoreId,
) -> Result<Vec<JobTurn>, ContainerError> {
    let containers = docker_call("list containers", runtime.list_turns()).await?;
    Ok(containers
        .into_iter()
        .filter_map(|c| {
            let name = c
                .names
                .iter()
                .find_map(|n| n.parse::<ContainerName>().ok())?;
            let own_store = label(&c.labels, JOB_STORE_LABEL_KEY)
                .and_then(|s| StoreId::parse(s).ok())
                .is_some_and(|s| &s == store);
            if !own_store {
                return None;
            }
            let job = label(&c.labels, JOB_LABEL_KEY)?.to_owned();
            let attempt = label(&c.labels, JOB_ATTEMPT_LABEL_KEY)?.to_owned();
            Some(JobTurn { name, job, attempt })
        })
        .collect())
}

/// Removes exactly the listed job turns whose `(job, attempt)` is not in `current` (the store's
/// running attempts, read after the listing). `listed` and `current` must be of the same store
/// ([`list_job_turns`] with that store's id): others' live turns are then never touched.
pub async fn remove_superseded_turns<R: ContainerRuntime>(
    runtime: &R,
    listed: Vec<JobTurn>,
    current: &std::collections::HashSet<(String, String)>,
) -> SweepReport {
    let mut report = SweepReport::default();
    for turn in listed {
        if current.contains(&(turn.job.clone(), turn.attempt.clone())) {
            report.kept.push(turn.name.as_str().to_owned());
            continue;
        }
        match remove_container(runtime, &turn.name).await {
            Ok(()) => report.removed.push(turn.name.as_str().to_owned()),
            Err(_) => report.failed.push(turn.name.as_str().to_owned()),
        }
    }
    report
}

#[cfg(test)]
#[path = "janitor_tests.rs"]
mod tests;
