//! The built binary over real stdio: raw newline-delimited JSON-RPC in, only protocol frames out.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::support::fixture_copy;

const BIN: &str = env!("CARGO_BIN_EXE_patch-candidate-mcp");

#[test]
fn stdio_session_answers_with_protocol_frames_only() {
    let copy = fixture_copy();
    let mut child = Command::new(BIN)
        .arg("--workspace-root")
        .arg(&copy.root)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let frames = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "list_modules", "arguments": {}}}),
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "resolve_artifact_location", "arguments": {"path": "/etc/passwd"}}}),
    ];
    let mut stdin = child.stdin.take().unwrap();
    for frame in &frames {
        writeln!(stdin, "{frame}").unwrap();
    }
    stdin.flush().unwrap();
    // Read until every request is answered, then close stdin: the server exits cleanly.
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut replies: Vec<Value> = Vec::new();
    while replies.len() < 4 {
        let mut line = String::new();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "stdout closed early"
        );
        replies.push(serde_json::from_str(&line).expect("stdout line is JSON"));
    }
    drop(stdin);
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    assert!(
        rest.is_empty(),
        "unexpected output after the answers: {rest}"
    );
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(status.success(), "{stderr}");
    // Requests are served concurrently: order the answers by id.
    replies.sort_by_key(|r| r["id"].as_u64().unwrap());
    let init = &replies[0]["result"];
    assert_eq!(init["serverInfo"]["name"], json!("patch-candidate-mcp"));
    assert_eq!(init["protocolVersion"], json!("2025-06-18"));
    assert_eq!(
        replies[1]["result"]["tools"].as_array().unwrap().len(),
        mcp::TOOL_NAMES.len()
    );
    let modules = &replies[2]["result"];
    assert_eq!(modules["isError"], json!(false), "{modules}");
    assert_eq!(
        modules["structuredContent"]["result"]["modules"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let refused = &replies[3]["result"];
    assert_eq!(refused["isError"], json!(true));
    assert_eq!(
        refused["structuredContent"]["error"]["code"],
        json!("path_escapes_workspace")
    );
}

#[test]
fn missing_root_exits_with_the_environment_code() {
    let copy = fixture_copy();
    let output = Command::new(BIN)
        .arg("--workspace-root")
        .arg(copy.root.join("missing"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    assert!(output.stdout.is_empty());
    assert!(String::from_utf8_lossy(&output.stderr).contains("workspace_not_found"));
}

#[test]
fn usage_errors_exit_2() {
    let output = Command::new(BIN).stdin(Stdio::null()).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
}
