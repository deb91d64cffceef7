//! Newline-delimited JSON-RPC over a child's or our own stdio with hard caps: a longest message
//! and a total inbound byte budget. The SDK's `ByteStreams` reads lines without a bound, so a
//! hostile peer could grow one line without limit; this builds the SDK's `Lines` transport from a
//! length-capped `LinesCodec` instead.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use agent_client_protocol::Lines;
use futures::{Sink, SinkExt, Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::codec::{FramedRead, FramedWrite, LinesCodec, LinesCodecError};

/// Caps on what a peer may send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelLimits {
    /// Longest single message (one line), in bytes.
    pub max_message_bytes: usize,
    /// Total inbound bytes over the whole connection.
    pub max_inbound_bytes: u64,
}

impl ChannelLimits {
    /// The runner's limits: a write of a full 16 MiB file (JSON-escaped) fits in one message.
    pub const RUNNER: Self = Self {
        max_message_bytes: 40 << 20,
        max_inbound_bytes: 96 << 20,
    };
    /// The agent's limits on what the client sends it.
    pub const AGENT: Self = Self {
        max_message_bytes: 40 << 20,
        max_inbound_bytes: 256 << 20,
    };
}

/// Set when a peer broke a channel limit.
#[derive(Debug, Clone, Default)]
pub struct BudgetFlag(Arc<AtomicBool>);

impl BudgetFlag {
    /// True once a limit was broken.
    #[must_use]
    pub fn exceeded(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
    fn set(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A `Lines` transport over `reader`/`writer` that ends with an error (and sets `flag`) as soon as
/// the peer exceeds `limits`.
pub fn bounded_lines<R, W>(
    reader: R,
    writer: W,
    limits: ChannelLimits,
    flag: BudgetFlag,
) -> Lines<
    impl Sink<String, Error = io::Error> + Send + 'static,
    impl Stream<Item = io::Result<String>> + Send + 'static,
>
where
    R: AsyncRead + Send + 'static,
    W: AsyncWrite + Send + 'static,
{
    let outgoing = SinkExt::<String>::sink_map_err(
        FramedWrite::new(Box::pin(writer), LinesCodec::new()),
        |e| match e {
            LinesCodecError::Io(e) => e,
            LinesCodecError::MaxLineLengthExceeded => io::Error::other("outgoing line too long"),
        },
    );
    Lines::new(outgoing, bounded_incoming(reader, limits, flag))
}

/// The inbound half: lines of at most `limits.max_message_bytes`, at most
/// `limits.max_inbound_bytes` in total; the first violation yields one error and ends the stream.
pub fn bounded_incoming<R>(
    reader: R,
    limits: ChannelLimits,
    flag: BudgetFlag,
) -> impl Stream<Item = io::Result<String>> + Send + 'static
where
    R: AsyncRead + Send + 'static,
{
    let codec = LinesCodec::new_with_max_length(limits.max_message_bytes);
    let mut total: u64 = 0;
    let mut failed = false;
    FramedRead::new(Box::pin(reader), codec).scan((), move |(), item| {
        if failed {
            return futures::future::ready(None);
        }
        let out = match item {
            Ok(line) => {
                total = total.saturating_add(line.len() as u64 + 1);
                if total > limits.max_inbound_bytes {
                    flag.set();
                    Err(io::Error::other("inbound byte budget exceeded"))
                } else {
                    Ok(line)
                }
            }
            Err(LinesCodecError::MaxLineLengthExceeded) => {
                flag.set();
                Err(io::Error::other("message exceeds size limit"))
            }
            Err(LinesCodecError::Io(e)) => Err(e),
        };
        failed = out.is_err();
        futures::future::ready(Some(out))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn drain(input: &[u8], limits: ChannelLimits) -> (Vec<Result<String, String>>, bool) {
        let flag = BudgetFlag::default();
        let items: Vec<_> =
            bounded_incoming(std::io::Cursor::new(input.to_vec()), limits, flag.clone())
                .map(|r| r.map_err(|e| e.to_string()))
                .collect()
                .await;
        (items, flag.exceeded())
    }

    #[tokio::test]
    async fn caps_message_size_and_total_bytes() {
        let limits = ChannelLimits {
            max_message_bytes: 8,
            max_inbound_bytes: 20,
        };
        let (items, hit) = drain(b"{\"a\":1}\n{}\n", limits).await;
        assert_eq!(items, vec![Ok("{\"a\":1}".to_owned()), Ok("{}".to_owned())]);
        assert!(!hit);
        let (items, hit) = drain(b"{}\n0123456789abc\n{}\n", limits).await;
        assert_eq!(
            items,
            vec![
                Ok("{}".to_owned()),
                Err("message exceeds size limit".to_owned())
            ]
        );
        assert!(hit);
        let (items, hit) = drain(b"1234567\n1234567\n1234567\n{}\n", limits).await;
        assert_eq!(items.len(), 3);
        assert_eq!(items[2], Err("inbound byte budget exceeded".to_owned()));
        assert!(hit);
        let (items, hit) = drain(b"\xff\xfe\n", limits).await;
        assert!(items[0].is_err() && items.len() == 1 && !hit);
    }
}
