//! The one Docker-call deadline: every short call (inspect, create, attach, start, wait, list)
//! runs under [`CALL_TIMEOUT`] and fails with a stable code, never with Docker's own text.

use std::future::Future;

use crate::error::ContainerError;
use crate::limits::CALL_TIMEOUT;
use crate::seam::RuntimeError;

/// Runs one runtime call under [`CALL_TIMEOUT`]; `operation` names it in the error.
///
/// # Errors
/// `REPOSITORY_DOCKER_TIMEOUT` when the deadline (or the call's own) passes,
/// `REPOSITORY_DOCKER_UNAVAILABLE` when the daemon is gone, `REPOSITORY_DOCKER_COMMAND_FAILED` for
/// any other failure.
pub async fn docker_call<T>(
    operation: &'static str,
    fut: impl Future<Output = Result<T, RuntimeError>>,
) -> Result<T, ContainerError> {
    match tokio::time::timeout(CALL_TIMEOUT, fut).await {
        Err(_) | Ok(Err(RuntimeError::Timeout)) => Err(ContainerError::Timeout {
            seconds: CALL_TIMEOUT.as_secs(),
        }),
        Ok(Err(RuntimeError::Unavailable)) => {
            Err(ContainerError::Unavailable { detail: operation })
        }
        Ok(Err(_)) => Err(ContainerError::CommandFailed { operation }),
        Ok(Ok(v)) => Ok(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn maps_each_runtime_failure_to_its_code() {
        let ok = docker_call("start", async { Ok::<_, RuntimeError>(7) }).await;
        assert_eq!(ok.unwrap(), 7);
        for (failure, code) in [
            (RuntimeError::Timeout, "REPOSITORY_DOCKER_TIMEOUT"),
            (RuntimeError::Unavailable, "REPOSITORY_DOCKER_UNAVAILABLE"),
            (RuntimeError::NotFound, "REPOSITORY_DOCKER_COMMAND_FAILED"),
            (
                RuntimeError::Failed { status: Some(500) },
                "REPOSITORY_DOCKER_COMMAND_FAILED",
            ),
        ] {
            let e = docker_call::<()>("start", async move { Err(failure) })
                .await
                .unwrap_err();
            assert_eq!(e.code(), code);
        }
        let hung = docker_call::<()>("wait", std::future::pending())
            .await
            .unwrap_err();
        assert_eq!(hung.code(), "REPOSITORY_DOCKER_TIMEOUT");
    }
}
