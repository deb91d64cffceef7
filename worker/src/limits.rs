//! Every numeric limit of a turn, written once. The other modules (request, output, turn, cleanup,
//! janitor) import from here and never from each other for a constant.

use std::time::Duration;

/// Largest stdin payload (reference §10.3): 20 MiB.
pub const MAX_REQUEST_BYTES: usize = 20_971_520;
/// Largest stdout a turn may produce, enforced while streaming.
pub const MAX_STDOUT_BYTES: usize = 40_000_000;
/// Largest stderr a turn may produce (it is counted and discarded, never surfaced).
pub const MAX_STDERR_BYTES: usize = 1_048_576;
/// Largest archive a turn may return.
pub const MAX_TURN_ARCHIVE_BYTES: usize = 16_777_216;
/// Default wall budget of a turn, in seconds.
pub const DEFAULT_WALL_SECONDS: u64 = 90;
/// Longest wall budget an operator may approve, in seconds (`REPOSITORY_DOCKER_WALL_BUDGET`).
pub const MAX_WALL_SECONDS: u64 = 3600;
/// Extra time on top of the wall budget for create, inspection, attach, start and exit
/// bookkeeping. The wall budget plus this slack is the turn's whole life: its absolute deadline.
pub const WALL_SLACK: Duration = Duration::from_secs(10);
/// Deadline of short Docker calls (inspect, create, start, kill, remove).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the output stream may stay open after `wait` reported the exit.
pub const DRAIN_GRACE: Duration = Duration::from_secs(5);
/// How long an interrupted command waits for the removals its cancelled turns started.
pub const CANCEL_CLEANUP_TIMEOUT: Duration = Duration::from_secs(45);
