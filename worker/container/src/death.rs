//! Why a container ended with a non-zero status, told honestly: the kernel's OOM killer inside
//! the container's own memory limit (the candidate's doing), a signal from outside that this host
//! never sent (an operator's `docker kill`, another tool: the environment's doing), or the
//! container's own processes choosing the status.
//!
//! The daemon is the witness for both facts: `State.OOMKilled` from its inspect, and the `kill`
//! events it records whenever anyone signals the container through it. A process inside cannot
//! forge either (an `exit 137` leaves no `kill` event), so a candidate cannot pass its own failure
//! off as the environment's.

use crate::call::docker_call;
use crate::error::ContainerError;
use crate::seam::ContainerRuntime;

/// How a container that exited non-zero ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Death {
    /// The OOM killer ended a process inside the container's memory limit.
    OutOfMemory,
    /// Someone signalled the container through the daemon, and it was not this host.
    KilledFromOutside { status: i64 },
    /// The container's own processes chose the exit status.
    Exited { status: i64 },
}

impl Death {
    /// The error of a death that is not the container's own choice: `None` for
    /// [`Death::Exited`] and [`Death::OutOfMemory`] (the caller's own rejection codes).
    #[must_use]
    pub fn environment_error(self) -> Option<ContainerError> {
        match self {
            Self::KilledFromOutside { status } => Some(ContainerError::KilledExternally { status }),
            Self::OutOfMemory | Self::Exited { .. } => None,
        }
    }
}

/// Classifies the non-zero exit `status` of container `id`, created at or after `since_unix`.
///
/// The caller must not have signalled the container itself (its own deadline kill and its
/// cancellation's forced removal end the run before a status is read); every `kill` event the
/// daemon recorded for the container is then someone else's.
///
/// # Errors
/// `REPOSITORY_DOCKER_TIMEOUT`, `REPOSITORY_DOCKER_UNAVAILABLE` or
/// `REPOSITORY_DOCKER_COMMAND_FAILED` when the daemon cannot be asked: the cause is then unknown,
/// which is never blamed on the container.
pub async fn classify_exit<R: ContainerRuntime>(
    runtime: &R,
    id: &str,
    status: i64,
    since_unix: i64,
) -> Result<Death, ContainerError> {
    let after = docker_call("inspect", runtime.inspect(id)).await?;
    if after.state.and_then(|s| s.oom_killed) == Some(true) {
        return Ok(Death::OutOfMemory);
    }
    let kills = docker_call("events", runtime.kill_events(id, since_unix)).await?;
    if kills.is_empty() {
        Ok(Death::Exited { status })
    } else {
        Ok(Death::KilledFromOutside { status })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{CONTAINER_ID, FakeRuntime};

    async fn classify(fake: &FakeRuntime) -> Result<Death, ContainerError> {
        // The fake's inspect answers for the container it created.
        let name: crate::ids::ContainerName =
            format!("mozaiks-acp-{}", "b".repeat(32)).parse().unwrap();
        fake.create(&name, &bollard::models::ContainerCreateBody::default())
            .await
            .unwrap();
        fake.wait(CONTAINER_ID).await.unwrap();
        classify_exit(fake, CONTAINER_ID, fake.exit_code, 0).await
    }

    #[tokio::test]
    async fn an_outside_kill_an_oom_and_an_own_exit_are_told_apart() {
        let mut killed = FakeRuntime::new(b"");
        killed.exit_code = 137;
        killed.kill_events = vec!["9".to_owned()];
        let death = classify(&killed).await.unwrap();
        assert_eq!(death, Death::KilledFromOutside { status: 137 });
        let e = death.environment_error().unwrap();
        assert_eq!(e.code(), "REPOSITORY_DOCKER_KILLED_EXTERNALLY");
        assert!(e.is_environment());
        assert_eq!(
            killed.calls(),
            ["create", "wait", "inspect", "events"],
            "the OOM fact is read first, then the daemon's kill events"
        );

        // An OOM kill is the container's, even when someone also signalled it.
        let mut oom = FakeRuntime::new(b"");
        oom.exit_code = 137;
        oom.oom = true;
        oom.kill_events = vec!["9".to_owned()];
        assert_eq!(classify(&oom).await.unwrap(), Death::OutOfMemory);
        assert_eq!(
            Death::OutOfMemory.environment_error().map(|e| e.code()),
            None
        );

        // `exit 137` from inside leaves no kill event: the container's own status.
        let mut own = FakeRuntime::new(b"");
        own.exit_code = 137;
        assert_eq!(classify(&own).await.unwrap(), Death::Exited { status: 137 });
        assert!(Death::Exited { status: 137 }.environment_error().is_none());
    }

    #[tokio::test]
    async fn an_unanswerable_daemon_is_an_environment_failure() {
        let mut fake = FakeRuntime::new(b"");
        fake.exit_code = 1;
        fake.events_result = Err(crate::seam::RuntimeError::Unavailable);
        let e = classify(&fake).await.unwrap_err();
        assert_eq!(e.code(), "REPOSITORY_DOCKER_UNAVAILABLE");
        assert!(e.is_environment());
    }
}
