//! The tunnel's errors: one stable code per protocol rule. Fields are structured (types, ids,
//! sizes); no error ever carries payload bytes.

/// Every code [`TunnelError::code`] can return, for documentation and contract tests.
pub const ERROR_CODES: &[&str] = TunnelError::CODES;

/// A violation of the framed stdio protocol (or of one of its caps).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, vocab::Coded)]
#[non_exhaustive]
pub enum TunnelError {
    /// A frame declared a payload above the frame bound (checked before any payload byte).
    #[error("PATCH_CANDIDATE_TUNNEL_FRAME_SIZE: frame payload of {length} bytes exceeds {limit}")]
    FrameSize {
        /// Declared length.
        length: u32,
        /// The bound.
        limit: usize,
    },
    /// An unknown frame type byte.
    #[error("PATCH_CANDIDATE_TUNNEL_FRAME_TYPE: unknown frame type 0x{byte:02x}")]
    FrameType {
        /// The type byte.
        byte: u8,
    },
    /// A control frame on a data channel, or a channel frame on channel 0.
    #[error("PATCH_CANDIDATE_TUNNEL_FRAME_CHANNEL: {frame} frame on channel {channel}")]
    Channel {
        /// Frame name.
        frame: &'static str,
        /// The channel it came on.
        channel: u32,
    },
    /// A payload of the wrong shape for its frame type (non-empty where empty is required, empty
    /// DATA, a RESET code that is not short printable ASCII).
    #[error(
        "PATCH_CANDIDATE_TUNNEL_FRAME_PAYLOAD: {frame} frame with an invalid payload of {length} bytes"
    )]
    Payload {
        /// Frame name.
        frame: &'static str,
        /// Payload length.
        length: usize,
    },
    /// The HELLO payload is not the protocol version this side speaks.
    #[error("PATCH_CANDIDATE_TUNNEL_HELLO: the peer does not speak patch-candidate.tunnel.v1")]
    Hello,
    /// The first frame was not HELLO.
    #[error("PATCH_CANDIDATE_TUNNEL_HELLO_MISSING: {frame} frame before HELLO")]
    HelloMissing {
        /// Frame name.
        frame: &'static str,
    },
    /// A second HELLO.
    #[error("PATCH_CANDIDATE_TUNNEL_HELLO_REPEATED: a second HELLO frame")]
    HelloRepeated,
    /// A frame type that does not travel in this direction.
    #[error("PATCH_CANDIDATE_TUNNEL_DIRECTION: {frame} frame in the wrong direction")]
    Direction {
        /// Frame name.
        frame: &'static str,
    },
    /// REQUEST or REQUEST_END after REQUEST_END.
    #[error("PATCH_CANDIDATE_TUNNEL_REQUEST_ORDER: {frame} frame after REQUEST_END")]
    RequestOrder {
        /// Frame name.
        frame: &'static str,
    },
    /// OPEN on an id that is not above every id opened before.
    #[error(
        "PATCH_CANDIDATE_TUNNEL_OPEN_ORDER: OPEN of channel {channel} after channel {last} was opened"
    )]
    OpenOrder {
        /// The id opened.
        channel: u32,
        /// The highest id opened before.
        last: u32,
    },
    /// DATA, FIN or RESET on a channel that was never opened.
    #[error(
        "PATCH_CANDIDATE_TUNNEL_CHANNEL_UNKNOWN: {frame} frame on channel {channel}, which was never opened"
    )]
    ChannelUnknown {
        /// Frame name.
        frame: &'static str,
        /// The channel.
        channel: u32,
    },
    /// DATA or FIN on a channel already closed in that direction (FIN, or RESET by the sender).
    #[error(
        "PATCH_CANDIDATE_TUNNEL_CHANNEL_CLOSED: {frame} frame on channel {channel}, which is closed in that direction"
    )]
    ChannelClosed {
        /// Frame name.
        frame: &'static str,
        /// The channel.
        channel: u32,
    },
    /// More channels open at once than allowed.
    #[error("PATCH_CANDIDATE_TUNNEL_OPEN_CHANNELS: more than {limit} channels open at once")]
    OpenChannels {
        /// The cap.
        limit: usize,
    },
    /// More channels in one turn than allowed.
    #[error("PATCH_CANDIDATE_TUNNEL_CHANNELS: more than {limit} channels in one turn")]
    Channels {
        /// The cap.
        limit: u32,
    },
    /// One channel carried more bytes in one direction than allowed.
    #[error(
        "PATCH_CANDIDATE_TUNNEL_CHANNEL_BYTES: channel {channel} exceeds {limit} bytes in one direction"
    )]
    ChannelBytes {
        /// The channel.
        channel: u32,
        /// The cap.
        limit: u64,
    },
    /// The consumer of a channel fell behind: the bytes the container sent on it and the
    /// worker's side has not yet taken exceed the channel's backlog cap. The worker resets the
    /// channel with this code (the turn goes on); it is not a framing violation.
    #[error(
        "PATCH_CANDIDATE_TUNNEL_CHANNEL_BACKLOG: channel {channel} has more than {limit} bytes waiting for its consumer"
    )]
    ChannelBacklog {
        /// The channel.
        channel: u32,
        /// The cap.
        limit: usize,
    },
    /// All channels together carried more bytes in one direction than allowed.
    #[error("PATCH_CANDIDATE_TUNNEL_TOTAL_BYTES: tunnelled bytes exceed {limit} in one direction")]
    TotalBytes {
        /// The cap.
        limit: u64,
    },
    /// An EVENT payload that is not one JSON object of at most 4,096 bytes.
    #[error(
        "PATCH_CANDIDATE_TUNNEL_EVENT: EVENT payload of {length} bytes is not one JSON object within 4096 bytes"
    )]
    Event {
        /// Payload length.
        length: usize,
    },
    /// More EVENT frames than allowed.
    #[error("PATCH_CANDIDATE_TUNNEL_EVENTS: more than {limit} EVENT frames")]
    Events {
        /// The cap.
        limit: u32,
    },
    /// The REQUEST frames exceed the request cap.
    #[error("PATCH_CANDIDATE_TUNNEL_REQUEST_BYTES: request exceeds {limit} bytes")]
    RequestBytes {
        /// The cap.
        limit: u64,
    },
    /// The RESULT frames exceed the result cap.
    #[error("PATCH_CANDIDATE_TUNNEL_RESULT_BYTES: result exceeds {limit} bytes")]
    ResultBytes {
        /// The cap.
        limit: u64,
    },
    /// A frame after RESULT_END.
    #[error("PATCH_CANDIDATE_TUNNEL_AFTER_END: {frame} frame after RESULT_END")]
    AfterEnd {
        /// Frame name.
        frame: &'static str,
    },
    /// The byte stream ended inside a frame.
    #[error(
        "PATCH_CANDIDATE_TUNNEL_TRUNCATED: the stream ended inside a frame ({buffered} bytes buffered)"
    )]
    Truncated {
        /// Bytes of the incomplete frame.
        buffered: usize,
    },
    /// The byte stream ended before RESULT_END.
    #[error("PATCH_CANDIDATE_TUNNEL_NO_RESULT_END: the stream ended before RESULT_END")]
    NoResultEnd,
}
