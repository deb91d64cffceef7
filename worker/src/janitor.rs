//! The abandoned-turn sweeper (the reference has none, §10.9): removes labelled turn containers
//! older than a grace period that no live turn owns. A turn's owner is recorded in a label as
//! `<pid>:<process start ticks>`, so a recycled PID never keeps an abandoned container alive.

use std::time::Duration;

use crate::error::WorkerError;
use crate::ids::{ContainerName, OWNER_LABEL_KEY};
use crate::runtime::{ContainerRuntime, RuntimeError};
use crate::turn::{CALL_TIMEOUT, WALL_SLACK};

/// Default grace period before an unowned turn container counts as abandoned.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(600);
/// After this age a container is removed even if its owner still lives: no turn lasts longer
/// (3600 s wall budget + slack), so the owner has lost track of it.
pub const MAX_TURN_LIFETIME: Duration = Duration::from_secs(3600 + 2 * WALL_SLACK.as_secs() + 600);

/// What a sweep did, by container name (or ID when a container has no usable name).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct SweepReport {
    pub removed: Vec<String>,
    pub kept: Vec<String>,
    pub failed: Vec<String>,
}

/// The start time of `pid` in clock ticks since boot (`/proc/<pid>/stat` field 22), or `None`
/// when the process does not exist.
#[must_use]
pub fn process_start_ticks(pid: u32) -> Option<u64> {
    // Linux procfs: the one ambient read of this module, on a path built from a number.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(19)?.parse().ok()
}

fn owner_alive(label: Option<&String>) -> bool {
    let Some((pid, ticks)) = label.and_then(|l| l.split_once(':')) else {
        return false;
    };
    let (Ok(pid), Ok(ticks)) = (pid.parse::<u32>(), ticks.parse::<u64>()) else {
        return false;
    };
    ticks != 0 && process_start_ticks(pid) == Some(ticks)
}

/// Removes abandoned turn containers: older than `grace` and not owned by a live process, or
/// older than [`MAX_TURN_LIFETIME`]. Containers whose name is not a generated turn name are kept.
///
/// # Errors
/// `REPOSITORY_DOCKER_UNAVAILABLE` / `…_COMMAND_FAILED` / `…_TIMEOUT` when listing fails.
/// Individual removal failures are reported in [`SweepReport::failed`].
pub async fn sweep_abandoned_turns<R: ContainerRuntime>(
    runtime: &R,
    grace: Duration,
    now_unix: i64,
) -> Result<SweepReport, WorkerError> {
    let listed = tokio::time::timeout(CALL_TIMEOUT, runtime.list_turns()).await;
    let containers = match listed {
        Err(_) | Ok(Err(RuntimeError::Timeout)) => {
            return Err(WorkerError::Timeout {
                seconds: CALL_TIMEOUT.as_secs(),
            });
        }
        Ok(Err(RuntimeError::Unavailable)) => {
            return Err(WorkerError::Unavailable {
                detail: "list containers",
            });
        }
        Ok(Err(_)) => {
            return Err(WorkerError::CommandFailed {
                operation: "list containers",
            });
        }
        Ok(Ok(list)) => list,
    };
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
        let age = u64::try_from(now_unix.saturating_sub(container.created)).unwrap_or(0);
        let owned = owner_alive(container.labels.get(OWNER_LABEL_KEY));
        let abandoned = (age >= grace.as_secs() && !owned) || age >= MAX_TURN_LIFETIME.as_secs();
        if !abandoned {
            report.kept.push(name.as_str().to_owned());
            continue;
        }
        match crate::turn::remove_container(runtime, &name).await {
            Ok(()) => report.removed.push(name.as_str().to_owned()),
            Err(_) => report.failed.push(name.as_str().to_owned()),
        }
    }
    Ok(report)
}

/// Seconds since the Unix epoch.
#[must_use]
pub fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_is_alive_and_bogus_owners_are_not() {
        let pid = std::process::id();
        let ticks = process_start_ticks(pid).unwrap();
        assert!(owner_alive(Some(&format!("{pid}:{ticks}"))));
        assert!(!owner_alive(Some(&format!("{pid}:{}", ticks + 1))));
        assert!(!owner_alive(Some(&"x:1".to_owned())));
        assert!(!owner_alive(None));
        assert!(!owner_alive(Some(&format!("{}:1", u32::MAX))));
    }
}
