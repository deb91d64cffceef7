//! Cleanup as ownership: a [`ContainerGuard`] exists from before `create` until the container is
//! proven gone. It removes its container on every path: explicitly (so a failure can be reported)
//! on success, error and timeout, and from `Drop` when the turn is cancelled (a dropped future, e.g. after a signal) or
//! unwinds.
//!
//! `Drop` cannot await, so a dropped armed guard hands its removal to a task on the current tokio
//! runtime (or, outside one, to a thread with its own). Those removals are counted process-wide;
//! [`settle_pending_removals`] waits for them, so a command interrupted by a signal exits only
//! after its containers are gone.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

use crate::error::ContainerError;
use crate::ids::ContainerName;
use crate::limits::CALL_TIMEOUT;
use crate::seam::{ContainerRuntime, RuntimeError};

/// How often a removal that conflicts with one already in progress is retried.
const REMOVE_ATTEMPTS: usize = 20;
/// Pause between those retries.
const REMOVE_RETRY: Duration = Duration::from_millis(250);
/// When a turn is cancelled while its create request is in flight, the daemon may still finish the
/// create after a first removal found nothing: the removal is repeated once after this pause.
const LATE_CREATE_PAUSE: Duration = Duration::from_millis(750);

/// Force-removes `name`; `NotFound` means the create never happened (or it is already gone).
/// A removal already in progress is polled until the container is gone.
///
/// # Errors
/// `REPOSITORY_DOCKER_CLEANUP_FAILED`.
pub async fn remove_container<R: ContainerRuntime>(
    runtime: &R,
    name: &ContainerName,
) -> Result<(), ContainerError> {
    let failed = || ContainerError::CleanupFailed { name: name.clone() };
    for _ in 0..REMOVE_ATTEMPTS {
        match tokio::time::timeout(CALL_TIMEOUT, runtime.remove(name.as_str())).await {
            Ok(Ok(()) | Err(RuntimeError::NotFound)) => return Ok(()),
            Ok(Err(RuntimeError::Conflict)) => tokio::time::sleep(REMOVE_RETRY).await,
            _ => return Err(failed()),
        }
    }
    Err(failed())
}

/// Removals handed off by dropped guards and not finished yet.
static PENDING: AtomicUsize = AtomicUsize::new(0);
static SETTLED: Notify = Notify::const_new();

/// Counts one hand-off removal for as long as it lives (finished, failed or dropped).
struct PendingRemoval;

impl PendingRemoval {
    fn start() -> Self {
        PENDING.fetch_add(1, Ordering::SeqCst);
        Self
    }
}

impl Drop for PendingRemoval {
    fn drop(&mut self) {
        PENDING.fetch_sub(1, Ordering::SeqCst);
        SETTLED.notify_waiters();
    }
}

/// Waits until every removal handed off by a dropped turn container guard has finished, or
/// `timeout` passed. Returns how many are still running (0 when all settled).
pub async fn settle_pending_removals(timeout: Duration) -> usize {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        // Registered before the check, so a removal finishing in between still wakes us.
        let settled = SETTLED.notified();
        let pending = PENDING.load(Ordering::SeqCst);
        if pending == 0 {
            return 0;
        }
        if tokio::time::timeout_at(deadline, settled).await.is_err() {
            return PENDING.load(Ordering::SeqCst);
        }
    }
}

/// Owns one turn container by its generated name, from before `create` (a lost create response
/// still leaves a container with that name) until it is proven gone.
#[derive(Debug)]
pub struct ContainerGuard<R: ContainerRuntime + Clone + 'static> {
    runtime: R,
    name: ContainerName,
    /// The daemon confirmed the create (no create request is in flight any more).
    confirmed: bool,
    armed: bool,
}

impl<R: ContainerRuntime + Clone + 'static> ContainerGuard<R> {
    /// Guards `name` before its create request is sent.
    pub fn new(runtime: &R, name: ContainerName) -> Self {
        Self {
            runtime: runtime.clone(),
            name,
            confirmed: false,
            armed: true,
        }
    }

    /// The guarded name.
    pub fn name(&self) -> &ContainerName {
        &self.name
    }

    /// Records that the create request has been answered.
    pub fn confirm_created(&mut self) {
        self.confirmed = true;
    }

    /// Removes the container now and reports the result. Cancelled half-way, the guard is dropped
    /// still armed and the removal is handed off as for any other cancellation.
    ///
    /// # Errors
    /// `REPOSITORY_DOCKER_CLEANUP_FAILED`.
    pub async fn remove(mut self) -> Result<(), ContainerError> {
        let removed = remove_container(&self.runtime, &self.name).await;
        self.armed = false;
        removed
    }
}

impl<R: ContainerRuntime + Clone + 'static> Drop for ContainerGuard<R> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let runtime = self.runtime.clone();
        let name = self.name.clone();
        let late_create = !self.confirmed;
        let pending = PendingRemoval::start();
        let removal = async move {
            let _pending = pending;
            let mut removed = remove_container(&runtime, &name).await;
            if removed.is_ok() && late_create {
                tokio::time::sleep(LATE_CREATE_PAUSE).await;
                removed = remove_container(&runtime, &name).await;
            }
            match removed {
                Ok(()) => tracing::debug!("cancelled turn: container {name} removed"),
                Err(e) => tracing::warn!("{}: cancelled turn container {name} remains", e.code()),
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(removal);
            }
            Err(_) => {
                // Dropped outside any runtime: a thread with its own drives the removal.
                let spawned = std::thread::Builder::new()
                    .name("turn-cleanup".to_owned())
                    .spawn(move || {
                        if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()
                        {
                            rt.block_on(removal);
                        }
                    });
                if spawned.is_err() {
                    tracing::warn!("cancelled turn container {} remains", self.name);
                }
            }
        }
    }
}
