//! The container's time limits, written once: the longest wall budget, the slack around it, the
//! deadline of short Docker calls and of an interrupted command's cleanup.

use std::time::Duration;

/// Longest wall budget an operator may approve, in seconds (`REPOSITORY_DOCKER_WALL_BUDGET`).
pub const MAX_WALL_SECONDS: u64 = 3600;
/// Extra time on top of the wall budget for create, inspection, attach, start and exit
/// bookkeeping. The wall budget plus this slack is the turn's whole life: its absolute deadline.
pub const WALL_SLACK: Duration = Duration::from_secs(10);
/// Deadline of short Docker calls (inspect, create, start, kill, remove).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an interrupted command waits for the removals its cancelled turns started.
pub const CANCEL_CLEANUP_TIMEOUT: Duration = Duration::from_secs(45);
