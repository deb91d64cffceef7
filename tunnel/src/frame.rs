//! Frame values and their layout (the header length, the payload bounds). Every payload-carrying
//! variant holds a type whose constructor already checked the payload, so [`Frame::encode`]
//! cannot produce a frame the decoder would refuse.

use std::num::NonZeroU32;

use crate::error::TunnelError;

/// Bytes of a frame header: type (1), channel (4), length (4).
pub const HEADER_LEN: usize = 9;
/// The HELLO payload of protocol version 1.
pub(crate) const HELLO: &[u8] = b"patch-candidate.tunnel.v1";
/// Largest payload of one frame (and of one DATA, REQUEST or RESULT chunk).
pub const MAX_FRAME_PAYLOAD: usize = 65_536;
/// Largest RESET code.
pub const MAX_RESET_CODE_BYTES: usize = 64;
/// Largest EVENT payload.
pub const MAX_EVENT_BYTES: usize = 4_096;

/// The frame type byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FrameType {
    /// 0x01, both ways, first frame.
    Hello = 0x01,
    /// 0x02, worker → container.
    Request = 0x02,
    /// 0x03, worker → container.
    RequestEnd = 0x03,
    /// 0x10, container → worker.
    Open = 0x10,
    /// 0x11, both ways.
    Data = 0x11,
    /// 0x12, both ways.
    Fin = 0x12,
    /// 0x13, both ways.
    Reset = 0x13,
    /// 0x20, container → worker.
    Event = 0x20,
    /// 0x21, worker → container.
    Stop = 0x21,
    /// 0x30, container → worker.
    Result = 0x30,
    /// 0x31, container → worker.
    ResultEnd = 0x31,
}

impl FrameType {
    /// The type for a wire byte, `None` for an unknown one.
    #[must_use]
    pub fn from_byte(byte: u8) -> Option<Self> {
        Some(match byte {
            0x01 => Self::Hello,
            0x02 => Self::Request,
            0x03 => Self::RequestEnd,
            0x10 => Self::Open,
            0x11 => Self::Data,
            0x12 => Self::Fin,
            0x13 => Self::Reset,
            0x20 => Self::Event,
            0x21 => Self::Stop,
            0x30 => Self::Result,
            0x31 => Self::ResultEnd,
            _ => return None,
        })
    }

    /// The wire name, for errors and logs.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Hello => "HELLO",
            Self::Request => "REQUEST",
            Self::RequestEnd => "REQUEST_END",
            Self::Open => "OPEN",
            Self::Data => "DATA",
            Self::Fin => "FIN",
            Self::Reset => "RESET",
            Self::Event => "EVENT",
            Self::Stop => "STOP",
            Self::Result => "RESULT",
            Self::ResultEnd => "RESULT_END",
        }
    }

    /// Whether the type travels on a data channel (n ≥ 1) rather than on channel 0.
    #[must_use]
    pub fn is_channel_type(self) -> bool {
        matches!(self, Self::Open | Self::Data | Self::Fin | Self::Reset)
    }
}

/// A data channel id, `1..=u32::MAX`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChannelId(NonZeroU32);

impl ChannelId {
    /// The id as sent on the wire.
    #[must_use]
    pub fn get(self) -> u32 {
        self.0.get()
    }
}

impl TryFrom<u32> for ChannelId {
    type Error = TunnelError;
    fn try_from(value: u32) -> Result<Self, Self::Error> {
        NonZeroU32::new(value)
            .map(Self)
            .ok_or(TunnelError::Channel {
                frame: FrameType::Data.name(),
                channel: value,
            })
    }
}

impl std::fmt::Display for ChannelId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The payload of a DATA, REQUEST or RESULT frame: 1..=[`MAX_FRAME_PAYLOAD`] bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct Chunk(Vec<u8>);

impl Chunk {
    /// Splits `bytes` into chunks of at most [`MAX_FRAME_PAYLOAD`] bytes (none for an empty slice).
    pub fn split(bytes: &[u8]) -> impl Iterator<Item = Chunk> + '_ {
        bytes
            .chunks(MAX_FRAME_PAYLOAD)
            .map(|part| Chunk(part.to_vec()))
    }

    /// The bytes.
    #[must_use]
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The bytes, owned.
    #[must_use]
    pub fn into_vec(self) -> Vec<u8> {
        self.0
    }

    /// Number of bytes (never 0).
    #[must_use]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Always false: a chunk holds at least one byte.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl TryFrom<Vec<u8>> for Chunk {
    type Error = TunnelError;
    fn try_from(bytes: Vec<u8>) -> Result<Self, Self::Error> {
        if bytes.is_empty() || bytes.len() > MAX_FRAME_PAYLOAD {
            return Err(TunnelError::Payload {
                frame: FrameType::Data.name(),
                length: bytes.len(),
            });
        }
        Ok(Self(bytes))
    }
}

impl std::fmt::Debug for Chunk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the bytes: they are tunnelled traffic (credentials travel the other way only in
        // the upstream request, but a Debug of traffic is a log flood either way).
        write!(f, "Chunk({} bytes)", self.0.len())
    }
}

/// A RESET payload: at most `MAX_RESET_CODE_BYTES` printable ASCII bytes (`!`..=`~`), maybe none.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ResetCode(String);

impl ResetCode {
    /// The code text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<Vec<u8>> for ResetCode {
    type Error = TunnelError;
    fn try_from(bytes: Vec<u8>) -> Result<Self, Self::Error> {
        let length = bytes.len();
        let bad = TunnelError::Payload {
            frame: FrameType::Reset.name(),
            length,
        };
        if length > MAX_RESET_CODE_BYTES || !bytes.iter().all(u8::is_ascii_graphic) {
            return Err(bad);
        }
        String::from_utf8(bytes).map(Self).map_err(|_| bad)
    }
}

impl std::str::FromStr for ResetCode {
    type Err = TunnelError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::try_from(s.as_bytes().to_vec())
    }
}

/// An EVENT payload: one JSON object of at most `MAX_EVENT_BYTES` bytes. Its content is
/// advisory (progress from the container) and is never trusted.
#[derive(Clone, PartialEq, Eq)]
pub struct EventPayload(Vec<u8>);

impl EventPayload {
    /// The JSON bytes.
    #[must_use]
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The parsed object (parsing succeeded once already, at construction).
    #[must_use]
    pub fn object(&self) -> serde_json::Map<String, serde_json::Value> {
        serde_json::from_slice(&self.0).unwrap_or_default()
    }

    /// Serializes `object` into an event payload.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_TUNNEL_EVENT` when the serialized object exceeds `MAX_EVENT_BYTES`.
    pub fn from_object(
        object: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<Self, TunnelError> {
        let bytes = serde_json::to_vec(object).map_err(|_| TunnelError::Event { length: 0 })?;
        Self::try_from(bytes)
    }
}

impl TryFrom<Vec<u8>> for EventPayload {
    type Error = TunnelError;
    fn try_from(bytes: Vec<u8>) -> Result<Self, Self::Error> {
        let length = bytes.len();
        if length > MAX_EVENT_BYTES {
            return Err(TunnelError::Event { length });
        }
        serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(&bytes)
            .map_err(|_| TunnelError::Event { length })?;
        Ok(Self(bytes))
    }
}

impl std::fmt::Debug for EventPayload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EventPayload({} bytes)", self.0.len())
    }
}

/// One frame. HELLO carries the fixed version string implicitly.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// First frame each way.
    Hello,
    /// A chunk of the turn request JSON.
    Request(Chunk),
    /// The request is complete.
    RequestEnd,
    /// The container accepted connection `n`.
    Open(ChannelId),
    /// Stream bytes on a channel.
    Data(ChannelId, Chunk),
    /// The sender sends no more DATA on the channel.
    Fin(ChannelId),
    /// The channel is dead both ways.
    Reset(ChannelId, ResetCode),
    /// Advisory progress from the container.
    Event(EventPayload),
    /// Stop the agent now and harvest.
    Stop,
    /// A chunk of the final result.
    Result(Chunk),
    /// Nothing follows.
    ResultEnd,
}

impl Frame {
    /// The frame's type.
    #[must_use]
    pub fn frame_type(&self) -> FrameType {
        match self {
            Self::Hello => FrameType::Hello,
            Self::Request(_) => FrameType::Request,
            Self::RequestEnd => FrameType::RequestEnd,
            Self::Open(_) => FrameType::Open,
            Self::Data(..) => FrameType::Data,
            Self::Fin(_) => FrameType::Fin,
            Self::Reset(..) => FrameType::Reset,
            Self::Event(_) => FrameType::Event,
            Self::Stop => FrameType::Stop,
            Self::Result(_) => FrameType::Result,
            Self::ResultEnd => FrameType::ResultEnd,
        }
    }

    /// The channel the frame travels on (0 for control frames).
    #[must_use]
    pub fn channel(&self) -> u32 {
        match self {
            Self::Open(n) | Self::Data(n, _) | Self::Fin(n) | Self::Reset(n, _) => n.get(),
            _ => 0,
        }
    }

    fn payload(&self) -> &[u8] {
        match self {
            Self::Hello => HELLO,
            Self::Request(c) | Self::Data(_, c) | Self::Result(c) => c.as_bytes(),
            Self::Reset(_, code) => code.as_str().as_bytes(),
            Self::Event(e) => e.as_bytes(),
            Self::RequestEnd | Self::Open(_) | Self::Fin(_) | Self::Stop | Self::ResultEnd => &[],
        }
    }

    /// Appends the wire form of the frame to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let payload = self.payload();
        out.reserve(HEADER_LEN + payload.len());
        out.push(self.frame_type() as u8);
        out.extend_from_slice(&self.channel().to_be_bytes());
        // Every payload type is bounded by MAX_FRAME_PAYLOAD at construction.
        let length = u32::try_from(payload.len()).unwrap_or(u32::MAX);
        out.extend_from_slice(&length.to_be_bytes());
        out.extend_from_slice(payload);
    }

    /// The wire form of the frame.
    #[must_use]
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }

    /// DATA frames carrying `bytes` on channel `n` (none for an empty slice).
    pub fn data_frames(n: ChannelId, bytes: &[u8]) -> impl Iterator<Item = Frame> + '_ {
        Chunk::split(bytes).map(move |c| Frame::Data(n, c))
    }

    /// REQUEST frames carrying `bytes`, without the REQUEST_END.
    pub fn request_frames(bytes: &[u8]) -> impl Iterator<Item = Frame> + '_ {
        Chunk::split(bytes).map(Frame::Request)
    }

    /// RESULT frames carrying `bytes`, without the RESULT_END.
    pub fn result_frames(bytes: &[u8]) -> impl Iterator<Item = Frame> + '_ {
        Chunk::split(bytes).map(Frame::Result)
    }
}
