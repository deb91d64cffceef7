//! Fault injection for the service's crash tests: `PATCH_CANDIDATE_FAULT=<point>:<abort|pause>`
//! makes a process that armed it (only `patch-candidate serve` does, at start) abort, or stop
//! making progress, when a job's life reaches the named point. The test then SIGKILLs and
//! restarts the service and checks what the store and the daemon hold.
//!
//! Unarmed (every other command, and `serve` without the variable) a point is one relaxed load.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// Right after the job store handed this host the job.
pub const AFTER_CLAIM: &str = "after_claim";
/// Right after the daemon answered the container create.
pub const AFTER_CONTAINER_CREATE: &str = "after_container_create";
/// Right after the container started.
pub const MID_TURN: &str = "mid_turn";
/// Right after the returned archive was staged into its private tree.
pub const AFTER_STAGING: &str = "after_staging";
/// Right after the candidate was written to the host's local candidate store.
pub const AFTER_CANDIDATE_STORED: &str = "after_candidate_stored";
/// Right before the service runs a job's first required gate (the turn's candidate is stored).
pub const BEFORE_GATES: &str = "before_gates";
/// Right before the fenced completion write.
pub const BEFORE_COMPLETE: &str = "before_complete";

/// Every point, for validation of the variable.
pub const POINTS: [&str; 7] = [
    AFTER_CLAIM,
    AFTER_CONTAINER_CREATE,
    MID_TURN,
    AFTER_STAGING,
    AFTER_CANDIDATE_STORED,
    BEFORE_GATES,
    BEFORE_COMPLETE,
];

/// The environment variable read by [`arm_from_env`].
pub const FAULT_ENV: &str = "PATCH_CANDIDATE_FAULT";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Abort,
    Pause,
}

static ARMED: AtomicBool = AtomicBool::new(false);
static FAULT: OnceLock<Option<(&'static str, Action)>> = OnceLock::new();

fn parse(value: &str) -> Option<(&'static str, Action)> {
    let (point, action) = value.split_once(':')?;
    let point = POINTS.iter().copied().find(|p| *p == point)?;
    let action = match action {
        "abort" => Action::Abort,
        "pause" => Action::Pause,
        _ => return None,
    };
    Some((point, action))
}

/// `PATCH_CANDIDATE_FAULT` is set but names no known point and action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidFault;

/// Arms the fault named by `PATCH_CANDIDATE_FAULT`, if any. Returns the armed point; an
/// unparsable value arms nothing and is reported with no echo of its text.
///
/// # Errors
/// [`InvalidFault`] when the variable is set but names no known point and action.
pub fn arm_from_env() -> Result<Option<&'static str>, InvalidFault> {
    let Some(raw) = std::env::var_os(FAULT_ENV) else {
        return Ok(None);
    };
    let parsed = raw.to_str().and_then(parse);
    let Some(fault) = parsed else {
        return Err(InvalidFault);
    };
    let stored = *FAULT.get_or_init(|| Some(fault));
    ARMED.store(stored.is_some(), Ordering::SeqCst);
    Ok(stored.map(|(p, _)| p))
}

/// A named point of a job's life: aborts the process or never returns when armed for it.
pub async fn point(name: &'static str) {
    if !ARMED.load(Ordering::Relaxed) {
        return;
    }
    let Some(Some((armed, action))) = FAULT.get() else {
        return;
    };
    if *armed != name {
        return;
    }
    tracing::warn!(
        code = "PATCH_CANDIDATE_FAULT",
        fault = name,
        "fault point reached"
    );
    match action {
        Action::Abort => std::process::abort(),
        Action::Pause => std::future::pending::<()>().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_only_known_points_and_actions() {
        assert_eq!(parse("mid_turn:abort"), Some((MID_TURN, Action::Abort)));
        assert_eq!(
            parse("before_complete:pause"),
            Some((BEFORE_COMPLETE, Action::Pause))
        );
        assert_eq!(parse("mid_turn"), None);
        assert_eq!(parse("mid_turn:explode"), None);
        assert_eq!(parse("elsewhere:abort"), None);
        assert_eq!(parse(""), None);
    }
}
