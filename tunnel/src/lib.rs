//! The framed stdio protocol of live turns, version 1 (`patch-candidate.tunnel.v1`).
//!
//! A live turn multiplexes the turn request, any number of tunnelled TCP byte streams (the
//! agent's model requests) and the final result on the container's stdin and stdout. Both ends
//! use this crate: the trusted worker (which never trusts a byte it receives) and the in-container
//! runner.
//!
//! Every frame is `type: u8`, `channel: u32` (big-endian), `length: u32` (big-endian), then
//! `length` payload bytes, `length ≤ 65,536`.
//!
//! | type | name | direction | channel | payload |
//! |---|---|---|---|---|
//! | 0x01 | HELLO | both, first frame each way | 0 | exactly `patch-candidate.tunnel.v1` |
//! | 0x02 | REQUEST | worker → container | 0 | a chunk of the turn request JSON |
//! | 0x03 | REQUEST_END | worker → container | 0 | empty |
//! | 0x10 | OPEN | container → worker | n ≥ 1 | empty; n above every id opened before |
//! | 0x11 | DATA | both | n ≥ 1 | 1..=65,536 bytes of the stream |
//! | 0x12 | FIN | both | n ≥ 1 | empty; half close by the sender |
//! | 0x13 | RESET | both | n ≥ 1 | ASCII code ≤ 64 bytes; channel dead both ways |
//! | 0x20 | EVENT | container → worker | 0 | one JSON object ≤ 4,096 bytes (advisory) |
//! | 0x21 | STOP | worker → container | 0 | empty; stop the agent and harvest now |
//! | 0x30 | RESULT | container → worker | 0 | a chunk of the final result |
//! | 0x31 | RESULT_END | container → worker | 0 | empty; nothing follows |
//!
//! [`Decoder`] checks everything that one frame alone can violate (size before buffering, type,
//! channel class, payload shape); [`Session`] checks the order and the caps across frames, for one
//! [`Role`], in both directions (what it receives and what it is about to send).
#![forbid(unsafe_code)]

mod codec;
mod error;
mod frame;
mod limits;
mod session;

pub use codec::Decoder;
pub use error::{ERROR_CODES, TunnelError};
pub use frame::{ChannelId, Chunk, EventPayload, Frame, HEADER_LEN, MAX_FRAME_PAYLOAD, ResetCode};
pub use limits::Limits;
pub use session::{Disposition, Role, Session};

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
