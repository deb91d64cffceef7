//! The bytes the container sent on one live channel that its gateway task has not yet taken. The
//! demultiplexer appends each DATA frame's payload here (never one allocation per frame: payloads
//! are coalesced into fixed-size blocks, so a one-byte frame costs one byte); the channel's task
//! takes whole blocks and writes them to the gateway. A push that would take the channel past its
//! backlog cap waits for the consumer to take a block, at most [`PATIENCE`] (a consumer that is
//! reading keeps up: backpressure); past that the push is refused and the caller resets the
//! channel. A stalled consumer never grows host memory and holds up the demultiplexer (so the
//! other channels) at most once, for [`PATIENCE`].
//!
//! Every byte held, queued or in flight, is counted in one [`BacklogMeter`] per turn: allocated
//! block bytes (what the host really holds, not what the container sent) with their peak.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use std::time::Duration;

use tokio::sync::Notify;

/// Bytes of one block of a channel's backlog.
pub(crate) const BLOCK: usize = 16 * 1024;
/// Bytes one channel may hold for its consumer (queued and in flight) before it is reset.
pub(crate) const MAX_CHANNEL_BACKLOG: usize = 1_048_576;
/// How long a push into a full backlog waits for the consumer to take a block.
pub(crate) const PATIENCE: Duration = Duration::from_millis(250);

/// The host memory held by every channel backlog of one turn, in allocated bytes.
#[derive(Debug, Default)]
pub(crate) struct BacklogMeter {
    held: AtomicUsize,
    peak: AtomicUsize,
}

impl BacklogMeter {
    fn add(&self, bytes: usize) {
        let now = self
            .held
            .fetch_add(bytes, Ordering::Relaxed)
            .saturating_add(bytes);
        self.peak.fetch_max(now, Ordering::Relaxed);
    }

    fn sub(&self, bytes: usize) {
        // Never below zero: every `sub` follows the `add` of the same block.
        let _ = self
            .held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| {
                Some(h.saturating_sub(bytes))
            });
    }

    /// Allocated backlog bytes held now (tests).
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// The most allocated backlog bytes held at once over the turn.
    pub(crate) fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }
}

/// The push would take the channel past [`MAX_CHANNEL_BACKLOG`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Overflow;

#[derive(Debug, Default)]
struct State {
    /// Filled blocks, oldest first; only the last one may have room left.
    blocks: VecDeque<Vec<u8>>,
    /// Payload bytes queued and taken-but-not-yet-written, against the cap.
    pending: usize,
    /// The container sent FIN: the consumer sees end of input once the blocks are taken.
    fin: bool,
    /// The channel is gone (reset, ended): later pushes are dropped, the memory is released.
    closed: bool,
}

/// One channel's backlog, shared by the demultiplexer (pushes) and the channel's task (takes).
#[derive(Debug)]
pub(crate) struct ChannelInbox {
    state: Mutex<State>,
    /// Signalled on push and FIN (the consumer waits on it).
    ready: Notify,
    /// Signalled when a block is released or the channel closes (a full push waits on it).
    room: Notify,
    meter: Arc<BacklogMeter>,
    cap: usize,
}

/// A block taken by the consumer; its bytes stay counted until it is dropped (written).
#[derive(Debug)]
pub(crate) struct Taken<'a> {
    inbox: &'a ChannelInbox,
    block: Vec<u8>,
}

impl Taken<'_> {
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.block
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        self.inbox.release(self.block.len());
    }
}

impl ChannelInbox {
    /// An empty backlog under `cap` payload bytes, counted in `meter`.
    pub(crate) fn new(meter: Arc<BacklogMeter>, cap: usize) -> Self {
        Self {
            state: Mutex::new(State::default()),
            ready: Notify::new(),
            room: Notify::new(),
            meter,
            cap,
        }
    }

    /// Appends `bytes` for the consumer.
    ///
    /// # Errors
    /// [`Overflow`] when the channel would hold more than its cap; nothing is appended and the
    /// caller resets the channel (then [`close`](Self::close)s it).
    pub(crate) fn push(&self, mut bytes: &[u8]) -> Result<(), Overflow> {
        let Ok(mut state) = self.state.lock() else {
            return Err(Overflow);
        };
        if state.closed {
            return Ok(());
        }
        let pending = state.pending.saturating_add(bytes.len());
        if pending > self.cap {
            return Err(Overflow);
        }
        state.pending = pending;
        while !bytes.is_empty() {
            let room = state
                .blocks
                .back()
                .map_or(0, |b| BLOCK.saturating_sub(b.len()));
            if room == 0 {
                state.blocks.push_back(Vec::with_capacity(BLOCK));
                self.meter.add(BLOCK);
                continue;
            }
            let (head, rest) = bytes
                .split_at_checked(room.min(bytes.len()))
                .unwrap_or((bytes, &[]));
            if let Some(block) = state.blocks.back_mut() {
                block.extend_from_slice(head);
            }
            bytes = rest;
        }
        drop(state);
        self.ready.notify_one();
        Ok(())
    }

    /// Appends `bytes`, waiting while the backlog is full for the consumer to take a block, until
    /// `deadline`.
    ///
    /// # Errors
    /// [`Overflow`] when the consumer took nothing in time; nothing is appended.
    pub(crate) async fn push_until(
        &self,
        bytes: &[u8],
        deadline: tokio::time::Instant,
    ) -> Result<(), Overflow> {
        loop {
            if self.push(bytes).is_ok() {
                return Ok(());
            }
            // `notify_one` keeps a permit when nobody waits: a block released between the push
            // above and this wait still wakes it.
            if tokio::time::timeout_at(deadline, self.room.notified())
                .await
                .is_err()
            {
                return Err(Overflow);
            }
        }
    }

    /// The container half-closed the channel.
    pub(crate) fn fin(&self) {
        if let Ok(mut state) = self.state.lock() {
            state.fin = true;
        }
        self.ready.notify_one();
    }

    /// The channel is gone: every queued block is released now, later pushes are dropped.
    pub(crate) fn close(&self) {
        if let Ok(mut state) = self.state.lock() {
            state.closed = true;
            let queued = state.blocks.len().saturating_mul(BLOCK);
            state.blocks.clear();
            self.meter.sub(queued);
        }
        self.ready.notify_one();
        self.room.notify_one();
    }

    /// The oldest block, waiting for one; `None` at FIN (or close) once every block is taken.
    pub(crate) async fn take(&self) -> Option<Taken<'_>> {
        loop {
            {
                let mut state = self.state.lock().ok()?;
                if let Some(block) = state.blocks.pop_front() {
                    return Some(Taken { inbox: self, block });
                }
                if state.fin || state.closed {
                    return None;
                }
            }
            // `notify_one` keeps a permit when nobody waits: no wake-up is lost between the
            // check above and this wait.
            self.ready.notified().await;
        }
    }

    fn release(&self, len: usize) {
        if let Ok(mut state) = self.state.lock() {
            state.pending = state.pending.saturating_sub(len);
        }
        self.meter.sub(BLOCK);
        self.room.notify_one();
    }

    /// Payload bytes queued or in flight (tests).
    #[cfg(test)]
    pub(crate) fn pending(&self) -> usize {
        self.state.lock().map_or(0, |s| s.pending)
    }
}

impl Drop for ChannelInbox {
    fn drop(&mut self) {
        // Blocks still queued when the last owner goes (taken blocks borrow the inbox, so none
        // is in flight here).
        if let Ok(state) = self.state.get_mut() {
            self.meter.sub(state.blocks.len().saturating_mul(BLOCK));
        }
    }
}
