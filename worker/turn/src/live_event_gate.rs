//! How many of the container's advisory EVENTs reach the operator's progress sink: a per-turn
//! byte cap and a rate limit (a token bucket), like the cap on the container's stderr. What is held
//! back is only counted; the loop reports the count once, at the end of the turn.

use std::time::Duration;

use tokio::time::Instant;

/// EVENT payload bytes shown over one turn.
pub(crate) const MAX_SHOWN_EVENT_BYTES: usize = 256 * 1024;
/// EVENTs shown at once before the rate limit applies.
pub(crate) const EVENT_BURST: u32 = 32;
/// One more EVENT may be shown per interval (10 a second).
pub(crate) const EVENT_INTERVAL: Duration = Duration::from_millis(100);

/// The EVENTs held back over a turn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Suppressed {
    /// EVENT frames not shown.
    pub(crate) events: u32,
    /// Their payload bytes.
    pub(crate) bytes: u64,
}

/// The byte cap and token bucket of one turn.
#[derive(Debug)]
pub(crate) struct EventGate {
    shown_bytes: usize,
    tokens: u32,
    refilled: Instant,
    suppressed: Suppressed,
}

impl EventGate {
    /// A full bucket at `now`.
    pub(crate) fn new(now: Instant) -> Self {
        Self {
            shown_bytes: 0,
            tokens: EVENT_BURST,
            refilled: now,
            suppressed: Suppressed::default(),
        }
    }

    /// Whether an EVENT of `len` payload bytes arriving at `now` is shown; if not, it is counted.
    pub(crate) fn admit(&mut self, len: usize, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.refilled);
        let earned = u32::try_from(elapsed.as_millis() / EVENT_INTERVAL.as_millis().max(1))
            .unwrap_or(u32::MAX);
        if earned > 0 {
            self.tokens = self.tokens.saturating_add(earned).min(EVENT_BURST);
            self.refilled = now;
        }
        let within = self.shown_bytes.saturating_add(len) <= MAX_SHOWN_EVENT_BYTES;
        if within && self.tokens > 0 {
            self.tokens -= 1;
            self.shown_bytes = self.shown_bytes.saturating_add(len);
            return true;
        }
        self.suppressed.events = self.suppressed.events.saturating_add(1);
        self.suppressed.bytes = self
            .suppressed
            .bytes
            .saturating_add(u64::try_from(len).unwrap_or(u64::MAX));
        false
    }

    /// What was held back so far.
    pub(crate) fn suppressed(&self) -> Suppressed {
        self.suppressed
    }
}
