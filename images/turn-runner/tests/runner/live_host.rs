//! `turn-runner --live` as a host process with a raw agent that floods its loopback listener:
//! the runner opens at most the protocol's 16 channels at once and closes every further
//! connection itself (an advisory `channel_refused` event each), so the worker never sees a frame
//! it would refuse; the turn still ends with RESULT… RESULT_END.

use std::io::{Read as _, Write as _};
use std::process::Command;

use serde_json::{Value, json};
use tunnel::{Decoder, Frame};
use turn_runner::testkit::spawn_piped;

const FLOOD: usize = 40;

fn live_request(port: u16) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "app_id": "app", "build_family": "app_bundle", "build_record_id": "build-1",
        "change_class": "patch", "raw_user_request": "flood",
        "files": {"src/a.txt": "a\n"}, "read_only_files": {},
        "live": {"agent": "codex", "model": "gpt-5.3-codex", "port": port},
    }))
    .unwrap()
}

#[test]
fn live_runner_refuses_a_flood_of_channels_locally() {
    let workspace = tempfile::tempdir().unwrap();
    let agent = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/runner/flood_agent.py");
    // A free port for this run.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (mut child, mut stdin) = spawn_piped(
        Command::new(env!("CARGO_BIN_EXE_turn-runner"))
            .arg("--live")
            .args(["--workspace-root", workspace.path().to_str().unwrap()])
            .args(["--agent", "python3", "--agent-arg", agent, "--agent-arg"])
            .arg(FLOOD.to_string())
            .args(["--turn-timeout-ms", "60000"]),
    );
    let mut input = Frame::Hello.to_bytes();
    for f in Frame::request_frames(&live_request(port)) {
        input.extend(f.to_bytes());
    }
    input.extend(Frame::RequestEnd.to_bytes());
    stdin.write_all(&input).unwrap();
    // stdin stays open (its end would mean STOP) until the result is complete.
    let mut stdout = child.stdout.take().unwrap();
    let mut decoder = Decoder::new();
    let (mut opens, mut refused, mut result, mut ended) = (0, 0, Vec::new(), false);
    let mut buf = vec![0u8; 65536];
    while !ended {
        let n = stdout.read(&mut buf).unwrap();
        assert!(n > 0, "the runner ended without RESULT_END");
        for frame in decoder.push(&buf[..n]).unwrap() {
            match frame {
                Frame::Open(_) => opens += 1,
                Frame::Event(e) if e.object()["event"] == "channel_refused" => refused += 1,
                Frame::Result(chunk) => result.extend_from_slice(chunk.as_bytes()),
                Frame::ResultEnd => ended = true,
                _ => {}
            }
        }
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(opens, 16, "at most the open-channel cap");
    assert_eq!(refused, FLOOD - 16);
    let doc: Value = serde_json::from_slice(&result).unwrap();
    assert_eq!(doc["proposal"]["status"], "empty");
    let report: Value = serde_json::from_str(doc["proposal"]["summary"].as_str().unwrap()).unwrap();
    assert_eq!(report, json!({"connected": FLOOD, "closed": FLOOD - 16}));
}
