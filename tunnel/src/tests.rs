use pretty_assertions::assert_eq;

use crate::frame::{FrameType, HELLO};
use crate::session::Disposition;
use crate::{
    ChannelId, Chunk, Decoder, EventPayload, Frame, Limits, MAX_FRAME_PAYLOAD, ResetCode, Role,
    Session, TunnelError,
};

fn ch(n: u32) -> ChannelId {
    ChannelId::try_from(n).unwrap()
}

fn chunk(bytes: &[u8]) -> Chunk {
    Chunk::try_from(bytes.to_vec()).unwrap()
}

fn raw(kind: u8, channel: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![kind];
    out.extend_from_slice(&channel.to_be_bytes());
    out.extend_from_slice(&u32::try_from(payload.len()).unwrap().to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// The code of a refusal.
fn code<T: std::fmt::Debug>(result: Result<T, TunnelError>) -> &'static str {
    result.unwrap_err().code()
}

fn decode_all(bytes: &[u8]) -> Result<Vec<Frame>, TunnelError> {
    let mut d = Decoder::new();
    let frames = d.push(bytes)?;
    d.finish()?;
    Ok(frames)
}

fn every_frame() -> Vec<Frame> {
    vec![
        Frame::Hello,
        Frame::Request(chunk(b"{\"a\":1}")),
        Frame::RequestEnd,
        Frame::Open(ch(1)),
        Frame::Data(ch(1), chunk(b"POST /v1/responses HTTP/1.1\r\n")),
        Frame::Fin(ch(1)),
        Frame::Reset(
            ch(u32::MAX),
            "PATCH_CANDIDATE_GATEWAY_MODEL".parse().unwrap(),
        ),
        Frame::Reset(ch(2), ResetCode::default()),
        Frame::Event(EventPayload::try_from(b"{\"kind\":\"file\"}".to_vec()).unwrap()),
        Frame::Stop,
        Frame::Result(chunk(&[0u8; MAX_FRAME_PAYLOAD])),
        Frame::ResultEnd,
    ]
}

#[test]
fn every_frame_round_trips_whole_and_byte_by_byte() {
    let frames = every_frame();
    let mut wire = Vec::new();
    for f in &frames {
        f.encode(&mut wire);
    }
    assert_eq!(decode_all(&wire).unwrap(), frames);
    let mut d = Decoder::new();
    let mut got = Vec::new();
    for b in &wire {
        got.extend(d.push(std::slice::from_ref(b)).unwrap());
    }
    d.finish().unwrap();
    assert_eq!(got, frames);
}

#[test]
fn wire_layout_is_type_channel_length_payload_big_endian() {
    let bytes = Frame::Data(ch(0x0102_0304), chunk(b"xy")).to_bytes();
    assert_eq!(bytes, vec![0x11, 1, 2, 3, 4, 0, 0, 0, 2, b'x', b'y']);
    assert_eq!(
        Frame::Hello.to_bytes(),
        raw(0x01, 0, b"patch-candidate.tunnel.v1")
    );
    assert_eq!(
        Frame::ResultEnd.to_bytes(),
        vec![0x31, 0, 0, 0, 0, 0, 0, 0, 0]
    );
}

#[test]
fn oversized_length_is_refused_before_any_payload_byte() {
    let mut d = Decoder::new();
    let header = [0x11, 0, 0, 0, 1, 0, 1, 0, 1]; // DATA, length 65,537
    let e = d.push(&header).unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_TUNNEL_FRAME_SIZE");
    assert_eq!(d.buffered(), 0);
    let mut d = Decoder::new();
    let e = d
        .push(&[0x30, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff])
        .unwrap_err();
    assert_eq!(
        e,
        TunnelError::FrameSize {
            length: u32::MAX,
            limit: MAX_FRAME_PAYLOAD
        }
    );
    // The decoder stays failed.
    assert_eq!(d.push(&Frame::Hello.to_bytes()).unwrap_err(), e);
    assert_eq!(d.finish().unwrap_err(), e);
}

#[test]
fn the_largest_payload_is_accepted() {
    let f = Frame::Data(ch(7), chunk(&[b'a'; MAX_FRAME_PAYLOAD]));
    assert_eq!(decode_all(&f.to_bytes()).unwrap(), vec![f]);
}

#[test]
fn unknown_type_is_refused() {
    for byte in [0x00u8, 0x04, 0x14, 0x22, 0x32, 0xff] {
        let e = decode_all(&raw(byte, 0, b"")).unwrap_err();
        assert_eq!(e, TunnelError::FrameType { byte });
    }
}

#[test]
fn channel_class_is_checked() {
    let e = decode_all(&raw(0x11, 0, b"x")).unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_TUNNEL_FRAME_CHANNEL");
    for kind in [0x01u8, 0x02, 0x03, 0x20, 0x21, 0x30, 0x31] {
        let e = decode_all(&raw(kind, 5, b"")).unwrap_err();
        assert_eq!(
            e.code(),
            "PATCH_CANDIDATE_TUNNEL_FRAME_CHANNEL",
            "type {kind:#x}"
        );
    }
    for kind in [0x10u8, 0x12, 0x13] {
        let e = decode_all(&raw(kind, 0, b"")).unwrap_err();
        assert_eq!(
            e.code(),
            "PATCH_CANDIDATE_TUNNEL_FRAME_CHANNEL",
            "type {kind:#x}"
        );
    }
}

#[test]
fn payload_shapes_are_checked() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (raw(0x11, 1, b""), "PATCH_CANDIDATE_TUNNEL_FRAME_PAYLOAD"),
        (raw(0x02, 0, b""), "PATCH_CANDIDATE_TUNNEL_FRAME_PAYLOAD"),
        (raw(0x30, 0, b""), "PATCH_CANDIDATE_TUNNEL_FRAME_PAYLOAD"),
        (raw(0x03, 0, b"x"), "PATCH_CANDIDATE_TUNNEL_FRAME_PAYLOAD"),
        (raw(0x10, 1, b"x"), "PATCH_CANDIDATE_TUNNEL_FRAME_PAYLOAD"),
        (raw(0x12, 1, b"x"), "PATCH_CANDIDATE_TUNNEL_FRAME_PAYLOAD"),
        (raw(0x21, 0, b"x"), "PATCH_CANDIDATE_TUNNEL_FRAME_PAYLOAD"),
        (raw(0x31, 0, b"x"), "PATCH_CANDIDATE_TUNNEL_FRAME_PAYLOAD"),
        (
            raw(0x13, 1, &[b'A'; 65]),
            "PATCH_CANDIDATE_TUNNEL_FRAME_PAYLOAD",
        ),
        (
            raw(0x13, 1, b"BAD CODE"),
            "PATCH_CANDIDATE_TUNNEL_FRAME_PAYLOAD",
        ),
        (
            raw(0x13, 1, b"\x1b[2J"),
            "PATCH_CANDIDATE_TUNNEL_FRAME_PAYLOAD",
        ),
        (raw(0x20, 0, &[b' '; 4097]), "PATCH_CANDIDATE_TUNNEL_EVENT"),
        (raw(0x20, 0, b"[1,2]"), "PATCH_CANDIDATE_TUNNEL_EVENT"),
        (raw(0x20, 0, b"{\"a\":"), "PATCH_CANDIDATE_TUNNEL_EVENT"),
        (raw(0x20, 0, b""), "PATCH_CANDIDATE_TUNNEL_EVENT"),
    ];
    for (bytes, code) in cases {
        assert_eq!(decode_all(&bytes).unwrap_err().code(), code, "{bytes:?}");
    }
}

#[test]
fn hello_mismatch_is_refused() {
    assert_eq!(
        decode_all(&raw(0x01, 0, b"patch-candidate.tunnel.v2")).unwrap_err(),
        TunnelError::Hello
    );
    assert_eq!(
        decode_all(&raw(0x01, 0, b"v1")).unwrap_err(),
        TunnelError::Hello
    );
    assert_eq!(
        decode_all(&raw(0x01, 0, b"")).unwrap_err(),
        TunnelError::Hello
    );
    assert_eq!(
        decode_all(&raw(0x01, 0, HELLO)).unwrap(),
        vec![Frame::Hello]
    );
}

#[test]
fn a_stream_ending_inside_a_frame_is_truncated() {
    let mut d = Decoder::new();
    d.push(&raw(0x11, 1, b"abc")[..10]).unwrap();
    assert_eq!(
        d.finish().unwrap_err(),
        TunnelError::Truncated { buffered: 10 }
    );
    let mut d = Decoder::new();
    d.push(&[0x11, 0, 0]).unwrap();
    assert_eq!(code(d.finish()), "PATCH_CANDIDATE_TUNNEL_TRUNCATED");
}

#[test]
fn chunk_and_payload_constructors_refuse_bad_sizes() {
    assert!(Chunk::try_from(Vec::new()).is_err());
    assert!(Chunk::try_from(vec![0; MAX_FRAME_PAYLOAD + 1]).is_err());
    assert_eq!(
        Chunk::split(&[1u8; 2 * MAX_FRAME_PAYLOAD + 1])
            .map(|c| c.len())
            .collect::<Vec<_>>(),
        vec![MAX_FRAME_PAYLOAD, MAX_FRAME_PAYLOAD, 1]
    );
    assert_eq!(Chunk::split(&[]).count(), 0);
    assert!(ChannelId::try_from(0).is_err());
    assert!("".parse::<ResetCode>().is_ok());
    assert!("A B".parse::<ResetCode>().is_err());
    let mut big = serde_json::Map::new();
    big.insert("k".into(), serde_json::Value::String("x".repeat(5000)));
    assert_eq!(
        EventPayload::from_object(&big).unwrap_err().code(),
        "PATCH_CANDIDATE_TUNNEL_EVENT"
    );
}

fn worker() -> Session {
    let mut s = Session::new(Role::Worker, Limits::default());
    s.send(&Frame::Hello).unwrap();
    s.receive(&Frame::Hello).unwrap();
    s
}

fn container() -> Session {
    let mut s = Session::new(Role::Container, Limits::default());
    s.send(&Frame::Hello).unwrap();
    s.receive(&Frame::Hello).unwrap();
    s
}

#[test]
fn a_whole_turn_passes_both_sessions() {
    let mut w = Session::new(Role::Worker, Limits::default());
    let mut c = Session::new(Role::Container, Limits::default());
    let from_worker = [
        Frame::Hello,
        Frame::Request(chunk(b"{}")),
        Frame::RequestEnd,
    ];
    let from_container = [
        Frame::Hello,
        Frame::Open(ch(1)),
        Frame::Data(ch(1), chunk(b"GET")),
        Frame::Fin(ch(1)),
    ];
    for f in &from_worker {
        w.send(f).unwrap();
        assert_eq!(c.receive(f).unwrap(), Disposition::Deliver);
    }
    for f in &from_container {
        c.send(f).unwrap();
        assert_eq!(w.receive(f).unwrap(), Disposition::Deliver);
    }
    assert_eq!(w.live_channels(), vec![ch(1)]);
    let answer = [
        Frame::Data(ch(1), chunk(b"HTTP/1.1 200 OK")),
        Frame::Fin(ch(1)),
    ];
    for f in &answer {
        w.send(f).unwrap();
        c.receive(f).unwrap();
    }
    assert_eq!(w.live_channels(), Vec::<ChannelId>::new());
    assert_eq!(w.finish().unwrap_err(), TunnelError::NoResultEnd);
    for f in [
        Frame::Event(EventPayload::try_from(b"{}".to_vec()).unwrap()),
        Frame::Result(chunk(b"{}")),
        Frame::ResultEnd,
    ] {
        c.send(&f).unwrap();
        w.receive(&f).unwrap();
    }
    w.finish().unwrap();
    assert!(w.result_ended());
    assert_eq!(w.channels_opened(), 1);
    assert_eq!(w.data_bytes(), (3, 15));
}

#[test]
fn hello_must_come_first_and_only_once() {
    let mut w = Session::new(Role::Worker, Limits::default());
    assert_eq!(
        w.receive(&Frame::Open(ch(1))).unwrap_err(),
        TunnelError::HelloMissing { frame: "OPEN" }
    );
    let mut w = Session::new(Role::Worker, Limits::default());
    assert_eq!(
        code(w.send(&Frame::Stop)),
        "PATCH_CANDIDATE_TUNNEL_HELLO_MISSING"
    );
    let mut w = worker();
    assert_eq!(
        w.receive(&Frame::Hello).unwrap_err(),
        TunnelError::HelloRepeated
    );
}

#[test]
fn frames_in_the_wrong_direction_are_refused() {
    let mut w = worker();
    for f in [Frame::Request(chunk(b"x")), Frame::RequestEnd, Frame::Stop] {
        assert_eq!(code(w.receive(&f)), "PATCH_CANDIDATE_TUNNEL_DIRECTION");
    }
    let mut c = container();
    for f in [
        Frame::Open(ch(1)),
        Frame::Result(chunk(b"x")),
        Frame::ResultEnd,
        Frame::Event(EventPayload::try_from(b"{}".to_vec()).unwrap()),
    ] {
        assert_eq!(code(c.receive(&f)), "PATCH_CANDIDATE_TUNNEL_DIRECTION");
    }
    assert_eq!(
        code(w.send(&Frame::Open(ch(1)))),
        "PATCH_CANDIDATE_TUNNEL_DIRECTION"
    );
}

#[test]
fn request_after_request_end_is_refused() {
    let mut c = container();
    c.receive(&Frame::Request(chunk(b"{"))).unwrap();
    c.receive(&Frame::RequestEnd).unwrap();
    assert!(c.request_ended());
    assert_eq!(
        c.receive(&Frame::Request(chunk(b"}"))).unwrap_err(),
        TunnelError::RequestOrder { frame: "REQUEST" }
    );
    assert_eq!(
        code(c.receive(&Frame::RequestEnd)),
        "PATCH_CANDIDATE_TUNNEL_REQUEST_ORDER"
    );
}

#[test]
fn request_and_result_caps_hold() {
    let limits = Limits {
        max_request_bytes: 4,
        max_result_bytes: 4,
        ..Limits::default()
    };
    // (receiving side, what fits, what then crosses the cap, the refusal)
    for (role, within, over, refusal) in [
        (
            Role::Container,
            Frame::Request(chunk(b"1234")),
            Frame::Request(chunk(b"5")),
            TunnelError::RequestBytes { limit: 4 },
        ),
        (
            Role::Worker,
            Frame::Result(chunk(b"12")),
            Frame::Result(chunk(b"345")),
            TunnelError::ResultBytes { limit: 4 },
        ),
    ] {
        let mut s = Session::new(role, limits);
        s.receive(&Frame::Hello).unwrap();
        s.receive(&within).unwrap();
        assert_eq!(s.receive(&over).unwrap_err(), refusal);
    }
}

/// The refusal codes of DATA received on channel `incoming`, then sent on channel `outgoing`.
fn data_codes(w: &mut Session, incoming: u32, outgoing: u32) -> [&'static str; 2] {
    [
        code(w.receive(&Frame::Data(ch(incoming), chunk(b"x")))),
        code(w.send(&Frame::Data(ch(outgoing), chunk(b"x")))),
    ]
}

#[test]
fn data_fin_reset_on_an_unopened_channel_are_refused() {
    let mut w = worker();
    assert_eq!(
        w.receive(&Frame::Data(ch(1), chunk(b"x"))).unwrap_err(),
        TunnelError::ChannelUnknown {
            frame: "DATA",
            channel: 1
        }
    );
    assert_eq!(
        code(w.receive(&Frame::Fin(ch(2)))),
        "PATCH_CANDIDATE_TUNNEL_CHANNEL_UNKNOWN"
    );
    let mut w = worker();
    assert_eq!(
        code(w.receive(&Frame::Reset(ch(3), ResetCode::default()))),
        "PATCH_CANDIDATE_TUNNEL_CHANNEL_UNKNOWN"
    );
    let mut w = worker();
    w.receive(&Frame::Open(ch(5))).unwrap();
    assert_eq!(
        data_codes(&mut w, 4, 6),
        ["PATCH_CANDIDATE_TUNNEL_CHANNEL_UNKNOWN"; 2]
    );
}

#[test]
fn open_ids_must_strictly_increase() {
    for channel in [3, 2] {
        let mut w = worker();
        w.receive(&Frame::Open(ch(3))).unwrap();
        assert_eq!(
            w.receive(&Frame::Open(ch(channel))).unwrap_err(),
            TunnelError::OpenOrder { channel, last: 3 }
        );
    }
    let mut w = worker();
    w.receive(&Frame::Open(ch(3))).unwrap();
    w.receive(&Frame::Open(ch(9))).unwrap();
}

#[test]
fn data_after_fin_or_reset_is_refused() {
    let mut w = worker();
    w.receive(&Frame::Open(ch(1))).unwrap();
    w.receive(&Frame::Fin(ch(1))).unwrap();
    assert_eq!(
        w.receive(&Frame::Data(ch(1), chunk(b"x"))).unwrap_err(),
        TunnelError::ChannelClosed {
            frame: "DATA",
            channel: 1
        }
    );
    let mut w = worker();
    w.receive(&Frame::Open(ch(1))).unwrap();
    w.receive(&Frame::Fin(ch(1))).unwrap();
    assert_eq!(
        code(w.receive(&Frame::Fin(ch(1)))),
        "PATCH_CANDIDATE_TUNNEL_CHANNEL_CLOSED"
    );
    // Half close: the worker still answers on a channel the container FIN'd.
    w.send(&Frame::Data(ch(1), chunk(b"answer"))).unwrap();
    w.send(&Frame::Fin(ch(1))).unwrap();
    assert_eq!(
        code(w.send(&Frame::Data(ch(1), chunk(b"more")))),
        "PATCH_CANDIDATE_TUNNEL_CHANNEL_CLOSED"
    );
    // A peer reset kills both directions.
    let mut w = worker();
    w.receive(&Frame::Open(ch(1))).unwrap();
    w.receive(&Frame::Reset(ch(1), ResetCode::default()))
        .unwrap();
    assert_eq!(
        data_codes(&mut w, 1, 1),
        ["PATCH_CANDIDATE_TUNNEL_CHANNEL_CLOSED"; 2]
    );
    assert_eq!(
        code(w.receive(&Frame::Reset(ch(1), ResetCode::default()))),
        "PATCH_CANDIDATE_TUNNEL_CHANNEL_CLOSED"
    );
}

#[test]
fn frames_in_flight_across_a_local_reset_are_dropped() {
    let mut w = worker();
    w.receive(&Frame::Open(ch(1))).unwrap();
    w.send(&Frame::Reset(
        ch(1),
        "PATCH_CANDIDATE_GATEWAY_MODEL".parse().unwrap(),
    ))
    .unwrap();
    assert!(w.is_reset(ch(1)));
    assert_eq!(
        w.receive(&Frame::Data(ch(1), chunk(b"x"))).unwrap(),
        Disposition::Ignore
    );
    assert_eq!(w.receive(&Frame::Fin(ch(1))).unwrap(), Disposition::Ignore);
    assert_eq!(
        w.receive(&Frame::Reset(ch(1), ResetCode::default()))
            .unwrap(),
        Disposition::Ignore
    );
    assert_eq!(w.open_channels(), 0);
}

#[test]
fn a_flood_of_channels_hits_the_open_cap_then_the_turn_cap() {
    let mut w = worker();
    for n in 1..=16 {
        w.receive(&Frame::Open(ch(n))).unwrap();
    }
    assert_eq!(
        w.receive(&Frame::Open(ch(17))).unwrap_err(),
        TunnelError::OpenChannels { limit: 16 }
    );
    // Closing channels frees slots, but the per-turn count keeps growing.
    let limits = Limits {
        max_channels: 20,
        ..Limits::default()
    };
    let mut w = Session::new(Role::Worker, limits);
    w.receive(&Frame::Hello).unwrap();
    for n in 1..=20 {
        w.receive(&Frame::Open(ch(n))).unwrap();
        w.receive(&Frame::Reset(ch(n), ResetCode::default()))
            .unwrap();
    }
    assert_eq!(
        w.receive(&Frame::Open(ch(21))).unwrap_err(),
        TunnelError::Channels { limit: 20 }
    );
    // The container's own session refuses to open past the cap before it sends.
    let mut c = container();
    for n in 1..=16 {
        c.send(&Frame::Open(ch(n))).unwrap();
    }
    assert_eq!(
        code(c.send(&Frame::Open(ch(17)))),
        "PATCH_CANDIDATE_TUNNEL_OPEN_CHANNELS"
    );
}

#[test]
fn byte_caps_hold_per_channel_and_in_total() {
    let limits = Limits {
        max_channel_bytes_to_worker: 5,
        max_total_bytes_to_worker: 8,
        max_channel_bytes_to_container: 3,
        ..Limits::default()
    };
    // Two channels open, five bytes received on the first.
    let primed = || {
        let mut w = Session::new(Role::Worker, limits);
        w.receive(&Frame::Hello).unwrap();
        w.send(&Frame::Hello).unwrap();
        w.receive(&Frame::Open(ch(1))).unwrap();
        w.receive(&Frame::Open(ch(2))).unwrap();
        w.receive(&Frame::Data(ch(1), chunk(b"12345"))).unwrap();
        w
    };
    let mut w = primed();
    assert_eq!(
        w.receive(&Frame::Data(ch(1), chunk(b"6"))).unwrap_err(),
        TunnelError::ChannelBytes {
            channel: 1,
            limit: 5
        }
    );
    let mut w = primed();
    assert_eq!(
        w.receive(&Frame::Data(ch(2), chunk(b"6789"))).unwrap_err(),
        TunnelError::TotalBytes { limit: 8 }
    );
    w.send(&Frame::Data(ch(2), chunk(b"abc"))).unwrap();
    assert_eq!(
        code(w.send(&Frame::Data(ch(2), chunk(b"d")))),
        "PATCH_CANDIDATE_TUNNEL_CHANNEL_BYTES"
    );
}

#[test]
fn events_are_capped() {
    let mut w = Session::new(
        Role::Worker,
        Limits {
            max_events: 2,
            ..Limits::default()
        },
    );
    w.receive(&Frame::Hello).unwrap();
    let e = Frame::Event(EventPayload::try_from(b"{\"k\":1}".to_vec()).unwrap());
    w.receive(&e).unwrap();
    w.receive(&e).unwrap();
    assert_eq!(w.receive(&e).unwrap_err(), TunnelError::Events { limit: 2 });
}

#[test]
fn anything_after_result_end_is_refused() {
    let follow_ups = [
        Frame::Result(chunk(b"x")),
        Frame::ResultEnd,
        Frame::Open(ch(9)),
        Frame::Data(ch(1), chunk(b"x")),
        Frame::Event(EventPayload::try_from(b"{}".to_vec()).unwrap()),
        Frame::Hello,
        Frame::Stop,
    ];
    for f in follow_ups {
        let mut w = worker();
        w.receive(&Frame::Open(ch(1))).unwrap();
        w.receive(&Frame::Result(chunk(b"{}"))).unwrap();
        w.receive(&Frame::ResultEnd).unwrap();
        // The channel still open at RESULT_END is for the worker to tear down.
        assert_eq!(w.live_channels(), vec![ch(1)]);
        let e = w.receive(&f).unwrap_err();
        assert_eq!(
            e,
            TunnelError::AfterEnd {
                frame: f.frame_type().name()
            }
        );
    }
    let mut c = container();
    c.send(&Frame::ResultEnd).unwrap();
    assert_eq!(
        code(c.send(&Frame::Result(chunk(b"x")))),
        "PATCH_CANDIDATE_TUNNEL_AFTER_END"
    );
}

#[test]
fn frame_type_bytes_match_the_table() {
    let table = [
        (0x01, FrameType::Hello),
        (0x02, FrameType::Request),
        (0x03, FrameType::RequestEnd),
        (0x10, FrameType::Open),
        (0x11, FrameType::Data),
        (0x12, FrameType::Fin),
        (0x13, FrameType::Reset),
        (0x20, FrameType::Event),
        (0x21, FrameType::Stop),
        (0x30, FrameType::Result),
        (0x31, FrameType::ResultEnd),
    ];
    for (byte, kind) in table {
        assert_eq!(FrameType::from_byte(byte), Some(kind));
        assert_eq!(kind as u8, byte);
    }
}

#[test]
fn every_error_follows_the_message_convention() {
    let all = [
        TunnelError::FrameSize {
            length: 1,
            limit: 1,
        },
        TunnelError::FrameType { byte: 9 },
        TunnelError::Channel {
            frame: "DATA",
            channel: 0,
        },
        TunnelError::Payload {
            frame: "DATA",
            length: 0,
        },
        TunnelError::Hello,
        TunnelError::HelloMissing { frame: "DATA" },
        TunnelError::HelloRepeated,
        TunnelError::Direction { frame: "OPEN" },
        TunnelError::RequestOrder { frame: "REQUEST" },
        TunnelError::OpenOrder {
            channel: 1,
            last: 1,
        },
        TunnelError::ChannelUnknown {
            frame: "DATA",
            channel: 1,
        },
        TunnelError::ChannelClosed {
            frame: "DATA",
            channel: 1,
        },
        TunnelError::OpenChannels { limit: 1 },
        TunnelError::Channels { limit: 1 },
        TunnelError::ChannelBytes {
            channel: 1,
            limit: 1,
        },
        TunnelError::ChannelBacklog {
            channel: 1,
            limit: 1,
        },
        TunnelError::TotalBytes { limit: 1 },
        TunnelError::Event { length: 1 },
        TunnelError::Events { limit: 1 },
        TunnelError::RequestBytes { limit: 1 },
        TunnelError::ResultBytes { limit: 1 },
        TunnelError::AfterEnd { frame: "DATA" },
        TunnelError::Truncated { buffered: 1 },
        TunnelError::NoResultEnd,
    ];
    let mut codes = std::collections::BTreeSet::new();
    for e in &all {
        vocab::check_message_convention(e).unwrap();
        assert!(codes.insert(e.code()), "duplicate code {}", e.code());
    }
    vocab::check_code_table(crate::ERROR_CODES, all.iter().map(TunnelError::code)).unwrap();
}

#[test]
fn the_backlog_code_travels_as_a_reset_code() {
    let e = TunnelError::ChannelBacklog {
        channel: 3,
        limit: 1_048_576,
    };
    assert_eq!(e.code(), "PATCH_CANDIDATE_TUNNEL_CHANNEL_BACKLOG");
    let code: ResetCode = e.code().parse().unwrap();
    let frame = Frame::Reset(ch(3), code);
    let mut d = Decoder::new();
    assert_eq!(d.push(&frame.to_bytes()).unwrap(), vec![frame]);
    // The message names the channel and the cap, nothing else.
    assert_eq!(
        e.to_string(),
        "PATCH_CANDIDATE_TUNNEL_CHANNEL_BACKLOG: channel 3 has more than 1048576 bytes waiting for its consumer"
    );
}
