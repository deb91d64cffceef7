//! The strict incremental decoder. It checks a frame's header (type, channel class, declared
//! length against the bound of that type) before it buffers a single payload byte, so a hostile
//! length never becomes an allocation; memory is bounded by one header plus one payload.

use crate::error::TunnelError;
use crate::frame::{
    ChannelId, Chunk, EventPayload, Frame, FrameType, HEADER_LEN, HELLO, MAX_EVENT_BYTES,
    MAX_FRAME_PAYLOAD, MAX_RESET_CODE_BYTES, ResetCode,
};

#[derive(Debug, Clone, Copy)]
struct Header {
    kind: FrameType,
    channel: u32,
    length: usize,
}

/// Incremental frame decoder: feed it bytes as they arrive, get whole frames back. After the
/// first error it stays failed and returns that error again.
#[derive(Debug, Default)]
pub struct Decoder {
    header: [u8; HEADER_LEN],
    header_len: usize,
    current: Option<Header>,
    payload: Vec<u8>,
    failed: Option<TunnelError>,
}

impl Decoder {
    /// A decoder at a frame boundary.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Consumes `input` and returns every frame it completes, in order.
    ///
    /// # Errors
    /// The first protocol error in the byte stream (size, type, channel class, payload shape);
    /// the decoder stays failed afterwards.
    ///
    /// # Security
    /// A declared length is checked against the bound of its frame type before any payload byte
    /// is buffered; the buffer never holds more than one frame.
    pub fn push(&mut self, mut input: &[u8]) -> Result<Vec<Frame>, TunnelError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let mut frames = Vec::new();
        while !input.is_empty() {
            match self.step(&mut input) {
                Ok(Some(frame)) => frames.push(frame),
                Ok(None) => {}
                Err(e) => {
                    self.failed = Some(e.clone());
                    return Err(e);
                }
            }
        }
        Ok(frames)
    }

    /// Checks that the stream ended at a frame boundary.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_TUNNEL_TRUNCATED` when a frame is incomplete; an earlier error again.
    pub fn finish(&self) -> Result<(), TunnelError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let buffered = self.buffered();
        if buffered > 0 {
            return Err(TunnelError::Truncated { buffered });
        }
        Ok(())
    }

    /// Bytes of the incomplete frame held now (header and payload).
    #[must_use]
    pub fn buffered(&self) -> usize {
        if self.current.is_some() {
            HEADER_LEN + self.payload.len()
        } else {
            self.header_len
        }
    }

    fn step(&mut self, input: &mut &[u8]) -> Result<Option<Frame>, TunnelError> {
        let Some(header) = self.current else {
            let want = HEADER_LEN.saturating_sub(self.header_len);
            let take = want.min(input.len());
            let (head, rest) = input
                .split_at_checked(take)
                .ok_or(TunnelError::Truncated { buffered: 0 })?;
            let slot = self
                .header
                .get_mut(self.header_len..self.header_len + take)
                .ok_or(TunnelError::Truncated { buffered: 0 })?;
            slot.copy_from_slice(head);
            self.header_len += take;
            *input = rest;
            if self.header_len == HEADER_LEN {
                self.header_len = 0;
                let header = parse_header(&self.header)?;
                self.current = Some(header);
                if header.length == 0 {
                    return self.complete(header).map(Some);
                }
            }
            return Ok(None);
        };
        let want = header.length.saturating_sub(self.payload.len());
        let take = want.min(input.len());
        let (head, rest) = input
            .split_at_checked(take)
            .ok_or(TunnelError::Truncated { buffered: 0 })?;
        if self.payload.is_empty() {
            self.payload.reserve_exact(header.length);
        }
        self.payload.extend_from_slice(head);
        *input = rest;
        if self.payload.len() == header.length {
            return self.complete(header).map(Some);
        }
        Ok(None)
    }

    fn complete(&mut self, header: Header) -> Result<Frame, TunnelError> {
        self.current = None;
        let payload = std::mem::take(&mut self.payload);
        build(header, payload)
    }
}

fn parse_header(bytes: &[u8; HEADER_LEN]) -> Result<Header, TunnelError> {
    let [byte, c0, c1, c2, c3, l0, l1, l2, l3] = *bytes;
    let kind = FrameType::from_byte(byte).ok_or(TunnelError::FrameType { byte })?;
    let channel = u32::from_be_bytes([c0, c1, c2, c3]);
    let declared = u32::from_be_bytes([l0, l1, l2, l3]);
    let length = usize::try_from(declared).unwrap_or(usize::MAX);
    if length > MAX_FRAME_PAYLOAD {
        return Err(TunnelError::FrameSize {
            length: declared,
            limit: MAX_FRAME_PAYLOAD,
        });
    }
    if kind.is_channel_type() == (channel == 0) {
        return Err(TunnelError::Channel {
            frame: kind.name(),
            channel,
        });
    }
    let payload_error = TunnelError::Payload {
        frame: kind.name(),
        length,
    };
    match kind {
        FrameType::Hello if length != HELLO.len() => return Err(TunnelError::Hello),
        FrameType::RequestEnd
        | FrameType::Open
        | FrameType::Fin
        | FrameType::Stop
        | FrameType::ResultEnd
            if length != 0 =>
        {
            return Err(payload_error);
        }
        FrameType::Data | FrameType::Request | FrameType::Result if length == 0 => {
            return Err(payload_error);
        }
        FrameType::Reset if length > MAX_RESET_CODE_BYTES => return Err(payload_error),
        FrameType::Event if length > MAX_EVENT_BYTES || length == 0 => {
            return Err(TunnelError::Event { length });
        }
        _ => {}
    }
    Ok(Header {
        kind,
        channel,
        length,
    })
}

fn build(header: Header, payload: Vec<u8>) -> Result<Frame, TunnelError> {
    let channel = || ChannelId::try_from(header.channel);
    Ok(match header.kind {
        FrameType::Hello => {
            if payload != HELLO {
                return Err(TunnelError::Hello);
            }
            Frame::Hello
        }
        FrameType::Request => Frame::Request(Chunk::try_from(payload)?),
        FrameType::RequestEnd => Frame::RequestEnd,
        FrameType::Open => Frame::Open(channel()?),
        FrameType::Data => Frame::Data(channel()?, Chunk::try_from(payload)?),
        FrameType::Fin => Frame::Fin(channel()?),
        FrameType::Reset => Frame::Reset(channel()?, ResetCode::try_from(payload)?),
        FrameType::Event => Frame::Event(EventPayload::try_from(payload)?),
        FrameType::Stop => Frame::Stop,
        FrameType::Result => Frame::Result(Chunk::try_from(payload)?),
        FrameType::ResultEnd => Frame::ResultEnd,
    })
}
