//! The rules across frames, for one side of the tunnel: HELLO first, the request before its end,
//! channel ids strictly increasing, DATA/FIN only on a channel open in that direction, the caps,
//! nothing after RESULT_END. The same tracker checks what a side receives (a violation fails the
//! turn) and what it is about to send (so a correct side never emits a frame its peer refuses).

use std::collections::BTreeMap;

use crate::error::TunnelError;
use crate::frame::{ChannelId, Frame, FrameType};
use crate::limits::Limits;

/// Which end of the tunnel a [`Session`] tracks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The trusted worker: receives OPEN, EVENT and RESULT; sends REQUEST and STOP.
    Worker,
    /// The in-container runner: the other way round.
    Container,
}

impl Role {
    fn sends(self, kind: FrameType) -> bool {
        match kind {
            FrameType::Hello | FrameType::Data | FrameType::Fin | FrameType::Reset => true,
            FrameType::Request | FrameType::RequestEnd | FrameType::Stop => self == Role::Worker,
            FrameType::Open | FrameType::Event | FrameType::Result | FrameType::ResultEnd => {
                self == Role::Container
            }
        }
    }
}

/// What the receiver does with a frame the session accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disposition {
    /// Act on it.
    Deliver,
    /// Drop it: it concerns a channel this side already reset (a frame in flight when the RESET
    /// crossed it).
    Ignore,
}

#[derive(Debug, Default, Clone, Copy)]
struct Channel {
    /// Bytes received on the channel.
    bytes_in: u64,
    /// Bytes sent on the channel.
    bytes_out: u64,
    /// The peer sent FIN.
    fin_in: bool,
    /// This side sent FIN.
    fin_out: bool,
    /// This side sent RESET.
    reset_local: bool,
    /// The peer sent RESET.
    reset_peer: bool,
}

impl Channel {
    fn live(&self) -> bool {
        !(self.reset_local || self.reset_peer || (self.fin_in && self.fin_out))
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Direction {
    hello: bool,
    request_end: bool,
    request_bytes: u64,
    result_bytes: u64,
    result_end: bool,
    events: u32,
    data_bytes: u64,
}

/// The protocol state of one side of one live turn.
#[derive(Debug)]
pub struct Session {
    role: Role,
    limits: Limits,
    inbound: Direction,
    outbound: Direction,
    channels: BTreeMap<u32, Channel>,
    last_opened: u32,
    opened: u32,
}

impl Session {
    /// A fresh session for `role` under `limits`.
    #[must_use]
    pub fn new(role: Role, limits: Limits) -> Self {
        Self {
            role,
            limits,
            inbound: Direction::default(),
            outbound: Direction::default(),
            channels: BTreeMap::new(),
            last_opened: 0,
            opened: 0,
        }
    }

    /// The limits in force.
    #[must_use]
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Checks and records a frame received from the peer.
    ///
    /// # Errors
    /// The protocol rule the frame violates; the caller fails the turn and tears every channel
    /// down.
    pub fn receive(&mut self, frame: &Frame) -> Result<Disposition, TunnelError> {
        let peer = match self.role {
            Role::Worker => Role::Container,
            Role::Container => Role::Worker,
        };
        let (channel_cap, total_cap) = self.caps(peer);
        let limits = self.limits;
        Self::check(
            peer,
            &limits,
            &mut self.inbound,
            &mut self.channels,
            &mut self.last_opened,
            &mut self.opened,
            frame,
            Side::Inbound,
            channel_cap,
            total_cap,
        )
    }

    /// Checks and records a frame this side is about to send.
    ///
    /// # Errors
    /// The rule sending it would break (e.g. DATA after this side's FIN, or past a cap); the
    /// caller must not send it.
    pub fn send(&mut self, frame: &Frame) -> Result<(), TunnelError> {
        let (channel_cap, total_cap) = self.caps(self.role);
        let limits = self.limits;
        Self::check(
            self.role,
            &limits,
            &mut self.outbound,
            &mut self.channels,
            &mut self.last_opened,
            &mut self.opened,
            frame,
            Side::Outbound,
            channel_cap,
            total_cap,
        )
        .map(|_| ())
    }

    /// Checks that the peer ended properly: the worker has received RESULT_END (the container
    /// has nothing to check at end of input).
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_TUNNEL_NO_RESULT_END` when the worker's input ended before RESULT_END.
    pub fn finish(&self) -> Result<(), TunnelError> {
        if self.role == Role::Worker && !self.inbound.result_end {
            return Err(TunnelError::NoResultEnd);
        }
        Ok(())
    }

    /// Whether the peer has sent RESULT_END (worker side).
    #[must_use]
    pub fn result_ended(&self) -> bool {
        self.inbound.result_end || self.outbound.result_end
    }

    /// Whether the request is complete (REQUEST_END seen either way).
    #[must_use]
    pub fn request_ended(&self) -> bool {
        self.inbound.request_end || self.outbound.request_end
    }

    /// Channels still live (opened, not reset, not closed both ways), lowest id first: what the
    /// teardown resets.
    #[must_use]
    pub fn live_channels(&self) -> Vec<ChannelId> {
        self.channels
            .iter()
            .filter(|(_, c)| c.live())
            .filter_map(|(n, _)| ChannelId::try_from(*n).ok())
            .collect()
    }

    /// Number of channels live now.
    #[must_use]
    pub fn open_channels(&self) -> usize {
        self.channels.values().filter(|c| c.live()).count()
    }

    /// Channels opened over the turn.
    #[must_use]
    pub fn channels_opened(&self) -> u32 {
        self.opened
    }

    /// DATA bytes received and sent so far.
    #[must_use]
    pub fn data_bytes(&self) -> (u64, u64) {
        (self.inbound.data_bytes, self.outbound.data_bytes)
    }

    /// Whether the channel was reset by this side (frames for it are to be dropped).
    #[must_use]
    pub fn is_reset(&self, n: ChannelId) -> bool {
        self.channels
            .get(&n.get())
            .is_some_and(|c| c.reset_local || c.reset_peer)
    }

    /// (per-channel, total) DATA caps for frames sent by `sender`.
    fn caps(&self, sender: Role) -> (u64, u64) {
        match sender {
            Role::Container => (
                self.limits.max_channel_bytes_to_worker,
                self.limits.max_total_bytes_to_worker,
            ),
            Role::Worker => (
                self.limits.max_channel_bytes_to_container,
                self.limits.max_total_bytes_to_container,
            ),
        }
    }

    #[expect(clippy::too_many_arguments, reason = "split borrows of one session")]
    fn check(
        sender: Role,
        limits: &Limits,
        dir: &mut Direction,
        channels: &mut BTreeMap<u32, Channel>,
        last_opened: &mut u32,
        opened: &mut u32,
        frame: &Frame,
        side: Side,
        channel_cap: u64,
        total_cap: u64,
    ) -> Result<Disposition, TunnelError> {
        let kind = frame.frame_type();
        let name = kind.name();
        if dir.result_end {
            return Err(TunnelError::AfterEnd { frame: name });
        }
        if !sender.sends(kind) {
            return Err(TunnelError::Direction { frame: name });
        }
        if !dir.hello {
            if kind != FrameType::Hello {
                return Err(TunnelError::HelloMissing { frame: name });
            }
            dir.hello = true;
            return Ok(Disposition::Deliver);
        }
        match frame {
            Frame::Hello => Err(TunnelError::HelloRepeated),
            Frame::Request(chunk) => {
                if dir.request_end {
                    return Err(TunnelError::RequestOrder { frame: name });
                }
                dir.request_bytes = add_within(
                    dir.request_bytes,
                    chunk.len(),
                    limits.max_request_bytes,
                    TunnelError::RequestBytes {
                        limit: limits.max_request_bytes,
                    },
                )?;
                Ok(Disposition::Deliver)
            }
            Frame::RequestEnd => {
                if dir.request_end {
                    return Err(TunnelError::RequestOrder { frame: name });
                }
                dir.request_end = true;
                Ok(Disposition::Deliver)
            }
            Frame::Stop => Ok(Disposition::Deliver),
            Frame::Event(_) => {
                if dir.events >= limits.max_events {
                    return Err(TunnelError::Events {
                        limit: limits.max_events,
                    });
                }
                dir.events += 1;
                Ok(Disposition::Deliver)
            }
            Frame::Result(chunk) => {
                dir.result_bytes = add_within(
                    dir.result_bytes,
                    chunk.len(),
                    limits.max_result_bytes,
                    TunnelError::ResultBytes {
                        limit: limits.max_result_bytes,
                    },
                )?;
                Ok(Disposition::Deliver)
            }
            Frame::ResultEnd => {
                dir.result_end = true;
                Ok(Disposition::Deliver)
            }
            Frame::Open(n) => {
                let id = n.get();
                if id <= *last_opened {
                    return Err(TunnelError::OpenOrder {
                        channel: id,
                        last: *last_opened,
                    });
                }
                if *opened >= limits.max_channels {
                    return Err(TunnelError::Channels {
                        limit: limits.max_channels,
                    });
                }
                if channels.values().filter(|c| c.live()).count() >= limits.max_open_channels {
                    return Err(TunnelError::OpenChannels {
                        limit: limits.max_open_channels,
                    });
                }
                *last_opened = id;
                *opened += 1;
                channels.insert(id, Channel::default());
                Ok(Disposition::Deliver)
            }
            Frame::Data(n, chunk) => {
                let channel = lookup(channels, *n, name)?;
                let (local_reset, fin, peer_reset) = match side {
                    Side::Inbound => (channel.reset_local, channel.fin_in, channel.reset_peer),
                    Side::Outbound => (channel.reset_peer, channel.fin_out, channel.reset_local),
                };
                if side == Side::Inbound && local_reset {
                    return Ok(Disposition::Ignore);
                }
                if fin || peer_reset || local_reset {
                    return Err(TunnelError::ChannelClosed {
                        frame: name,
                        channel: n.get(),
                    });
                }
                let bytes = match side {
                    Side::Inbound => &mut channel.bytes_in,
                    Side::Outbound => &mut channel.bytes_out,
                };
                let next = add_within(
                    *bytes,
                    chunk.len(),
                    channel_cap,
                    TunnelError::ChannelBytes {
                        channel: n.get(),
                        limit: channel_cap,
                    },
                )?;
                dir.data_bytes = add_within(
                    dir.data_bytes,
                    chunk.len(),
                    total_cap,
                    TunnelError::TotalBytes { limit: total_cap },
                )?;
                *bytes = next;
                Ok(Disposition::Deliver)
            }
            Frame::Fin(n) => {
                let channel = lookup(channels, *n, name)?;
                let (local_reset, peer_reset) = match side {
                    Side::Inbound => (channel.reset_local, channel.reset_peer),
                    Side::Outbound => (channel.reset_peer, channel.reset_local),
                };
                if side == Side::Inbound && local_reset {
                    return Ok(Disposition::Ignore);
                }
                let fin = match side {
                    Side::Inbound => &mut channel.fin_in,
                    Side::Outbound => &mut channel.fin_out,
                };
                if *fin || peer_reset || local_reset {
                    return Err(TunnelError::ChannelClosed {
                        frame: name,
                        channel: n.get(),
                    });
                }
                *fin = true;
                Ok(Disposition::Deliver)
            }
            Frame::Reset(n, _) => {
                let channel = lookup(channels, *n, name)?;
                let (mine, theirs) = match side {
                    Side::Inbound => (channel.reset_peer, channel.reset_local),
                    Side::Outbound => (channel.reset_local, channel.reset_peer),
                };
                if mine {
                    // A second RESET from the same side.
                    return Err(TunnelError::ChannelClosed {
                        frame: name,
                        channel: n.get(),
                    });
                }
                let closed = channel.fin_in && channel.fin_out;
                match side {
                    Side::Inbound => channel.reset_peer = true,
                    Side::Outbound => channel.reset_local = true,
                }
                // Both ends may reset at once, or reset a channel the other just closed: the
                // crossing RESET is dropped, never an error.
                if theirs || closed {
                    return Ok(Disposition::Ignore);
                }
                Ok(Disposition::Deliver)
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Inbound,
    Outbound,
}

fn lookup<'a>(
    channels: &'a mut BTreeMap<u32, Channel>,
    n: ChannelId,
    frame: &'static str,
) -> Result<&'a mut Channel, TunnelError> {
    channels
        .get_mut(&n.get())
        .ok_or(TunnelError::ChannelUnknown {
            frame,
            channel: n.get(),
        })
}

fn add_within(
    current: u64,
    add: usize,
    limit: u64,
    error: TunnelError,
) -> Result<u64, TunnelError> {
    let add = u64::try_from(add).unwrap_or(u64::MAX);
    match current.checked_add(add) {
        Some(total) if total <= limit => Ok(total),
        _ => Err(error),
    }
}
