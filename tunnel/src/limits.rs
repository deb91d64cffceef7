//! The protocol's caps. The defaults are the protocol's; the worker may lower (or, for its own
//! side, raise) them from the operator configuration.

/// Caps of one live turn's tunnel. Every protection is on by default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Channels open at once (not yet closed both ways, not reset).
    pub max_open_channels: usize,
    /// Channels opened over the whole turn.
    pub max_channels: u32,
    /// DATA bytes container → worker on one channel (one model request).
    pub max_channel_bytes_to_worker: u64,
    /// DATA bytes worker → container on one channel (one streamed answer).
    pub max_channel_bytes_to_container: u64,
    /// DATA bytes container → worker over the turn.
    pub max_total_bytes_to_worker: u64,
    /// DATA bytes worker → container over the turn.
    pub max_total_bytes_to_container: u64,
    /// EVENT frames over the turn.
    pub max_events: u32,
    /// RESULT bytes (the offline stdout cap).
    pub max_result_bytes: u64,
    /// REQUEST bytes (the offline stdin payload cap).
    pub max_request_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_open_channels: 16,
            max_channels: 1_024,
            max_channel_bytes_to_worker: 8 * 1_048_576,
            max_channel_bytes_to_container: 64 * 1_048_576,
            max_total_bytes_to_worker: 64 * 1_048_576,
            max_total_bytes_to_container: 512 * 1_048_576,
            max_events: 10_000,
            max_result_bytes: 40_000_000,
            max_request_bytes: 20_971_520,
        }
    }
}
