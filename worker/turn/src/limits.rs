//! Every numeric limit of a turn's request and output, written once (the container's own time
//! limits are the container crate's). The other modules import from here, never from each other.

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
/// How long the output stream may stay open after `wait` reported the exit.
pub const DRAIN_GRACE: Duration = Duration::from_secs(5);
