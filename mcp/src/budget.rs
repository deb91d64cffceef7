//! One memory budget shared by every tool call of the server.
//!
//! Tool bodies run on their own threads (at most [`crate::server::MAX_CONCURRENT_TOOLS`]); the
//! expensive part of each (reading and parsing a file, verifying a candidate, reading an archive)
//! first reserves an estimate of the memory it will use from [`WORK_BUDGET_BYTES`], and waits
//! while other calls hold the budget. A reservation larger than the whole budget is clamped to
//! it, so such work runs alone rather than never. Together with the per-file limits this bounds
//! what concurrent tool calls can hold at once, whatever a client sends in parallel.

use std::sync::{Condvar, Mutex, PoisonError};

/// Stack for tool bodies and the parser thread: parsers build deep trees from bounded but hostile
/// files, and dropping them recurses; a dedicated large stack keeps that from aborting the process.
pub(crate) const TOOL_STACK_BYTES: usize = 256 * 1024 * 1024;

/// Bytes of working memory all tool calls together may reserve at once.
pub const WORK_BUDGET_BYTES: u64 = 128 * 1024 * 1024;

/// Estimated working memory per input byte, by kind of work (measured upper bounds of the tree
/// each parser builds, rounded up). A Python parse reserves what the token scan counted instead
/// ([`reserve_within`]): its tree costs from 2 to over 200 bytes per byte of source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Work {
    /// YAML load (bounded tree).
    Yaml,
    /// JSON parse into a value tree.
    Json,
    /// Candidate validation and digest (value tree, typed model, canonical bytes).
    Candidate,
    /// Archive read (the bytes plus the reader's manifest).
    Archive,
}

impl Work {
    fn factor(self) -> u64 {
        match self {
            Self::Yaml => 12,
            Self::Json => 16,
            Self::Candidate => 24,
            Self::Archive => 3,
        }
    }
}

struct Budget {
    used: Mutex<u64>,
    freed: Condvar,
}

static BUDGET: Budget = Budget {
    used: Mutex::new(0),
    freed: Condvar::new(),
};

/// A reservation; returned to the budget when dropped.
#[derive(Debug)]
pub(crate) struct Reservation {
    bytes: u64,
}

/// Reserves the working memory of `work` over `input_bytes` bytes, waiting while the budget is
/// taken by other calls.
pub(crate) fn reserve(work: Work, input_bytes: u64) -> Reservation {
    take(
        input_bytes
            .saturating_mul(work.factor())
            .clamp(1, WORK_BUDGET_BYTES),
    )
}

/// Reserves `bytes` of working memory, waiting while the budget is taken by other calls; `None`
/// when they exceed the whole budget (such work never runs).
pub(crate) fn reserve_within(bytes: u64) -> Option<Reservation> {
    (bytes <= WORK_BUDGET_BYTES).then(|| take(bytes.max(1)))
}

fn take(bytes: u64) -> Reservation {
    let mut used = BUDGET.used.lock().unwrap_or_else(PoisonError::into_inner);
    while used.saturating_add(bytes) > WORK_BUDGET_BYTES {
        used = BUDGET
            .freed
            .wait(used)
            .unwrap_or_else(PoisonError::into_inner);
    }
    *used = used.saturating_add(bytes);
    Reservation { bytes }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut used = BUDGET.used.lock().unwrap_or_else(PoisonError::into_inner);
        *used = used.saturating_sub(self.bytes);
        drop(used);
        BUDGET.freed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_are_clamped_and_returned() {
        let big = reserve(Work::Json, u64::MAX);
        assert_eq!(big.bytes, WORK_BUDGET_BYTES);
        drop(big);
        assert!(reserve_within(WORK_BUDGET_BYTES + 1).is_none());
        let whole = reserve_within(WORK_BUDGET_BYTES).unwrap();
        assert_eq!(whole.bytes, WORK_BUDGET_BYTES);
        drop(whole);
        let a = reserve(Work::Json, 1024);
        let b = reserve(Work::Json, 1024);
        assert_eq!(a.bytes + b.bytes, 32 * 1024);
    }
}
